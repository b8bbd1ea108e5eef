"""The drill's report: a readable text, a JSON file for tools, and the
timeline page, all written into the drill's directory."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from zkcoord.drill.checker import Verdict
from zkcoord.drill.history import History

REPORT_TEXT = "report.txt"
REPORT_JSON = "report.json"
TIMELINE = "timeline.html"
SHOWN = 10  # violations listed per kind in the text report


def _tp(tp) -> str:
    return f"{tp[0]}-{tp[1]}"


def render_text(verdict: Verdict, settings: dict, skipped_kinds: dict[str, str]) -> str:
    t0 = min((f.injected for f in verdict.faults), default=0.0)
    lines = ["zkcoord drill report", "",
             "settings: " + ", ".join(f"{k} {v}" for k, v in settings.items())]
    for kind, why in skipped_kinds.items():
        lines.append(f"kind {kind} not run: {why}")
    if verdict.interrupted:
        why = settings.get("stopped early", "interrupted")
        lines.append(f"INTERRUPTED ({why}): the history below is what was gathered until then")
    undelivered = f", {verdict.undelivered} not yet delivered when the run stopped" if verdict.undelivered else ""
    lines += ["", f"records: {verdict.produced} acknowledged by the broker, {verdict.delivered} deliveries"
              f"{undelivered}; {verdict.samples} samples of ZooKeeper", "",
              "faults (time to whole: from the injection when the fault must be routed around, "
              "from the restore otherwise, from when Kafka served again for Kafka's; docs/DRILL.md):"]
    for f in verdict.faults:
        whole = "NOT WHOLE" if f.time_to_whole is None else f"{f.time_to_whole:5.1f} s"
        if f.rejoined_at is None:
            whole += ", NOT WHOLE once restored"
        late = "  LATE" if f in verdict.slow_recoveries else ""
        note = f"  ({f.note})" if f.note else ""
        lines.append(f"  {f.index:>3} +{f.injected - t0:7.1f}s  {f.kind:<24} {f.target:<34} "
                     f"whole {whole} (bound {f.bound_s:.1f} s){late}{note}")
    lines += ["", "invariants:"]
    for name, count in verdict.violations.items():
        lines.append(f"  [{'ok' if count == 0 else 'VIOLATED'}] {name}: {count}")
    crash_duplicates = len(verdict.duplicates) - len(verdict.planned_duplicates)
    lines.append(f"  duplicates after crashes (within the uncommitted window): {crash_duplicates}")
    for title, episodes in (
            ("double ownership (a member delivering a partition another member had been started on):",
             verdict.double_ownership),
            ("deliveries after the member's own Stop:", verdict.deliveries_after_stop)):
        if episodes:
            lines += ["", title]
            for w in episodes[:SHOWN]:
                since = "its Stop" if w.superseded_by == w.member else f"{w.superseded_by} started it"
                lines.append(f"  {_tp(w.tp)}: {w.member} kept delivering {w.length_ms:.0f} ms after {since} "
                             f"({w.deliveries} records; fault {w.fault})")
            if len(episodes) > SHOWN:
                lines.append(f"  ... and {len(episodes) - SHOWN} more (report.json)")
    if verdict.lost:
        lines += ["", "lost (acknowledged, never delivered): " + ", ".join(
            f"{_tp(tp)}@{o}" for tp, o in verdict.lost[:SHOWN]) + (" ..." if len(verdict.lost) > SHOWN else "")]
    if verdict.planned_duplicates:
        lines += ["", "duplicates on planned changes: " + ", ".join(
            f"{_tp(d.tp)}@{d.offset} (fault {d.fault})" for d in verdict.planned_duplicates[:SHOWN])]
    for name, items in (("offset regressions", verdict.offset_regressions), ("commits ahead", verdict.commits_ahead),
                        ("duplicates below a committed offset", verdict.duplicates_below_committed)):
        if items:
            lines += ["", f"{name}: " + "; ".join(str(dataclasses.astuple(i)) for i in items[:SHOWN])]
    lines += ["", "PASS" if verdict.ok and not verdict.interrupted else "FAIL"]
    return "\n".join(lines) + "\n"


def verdict_json(verdict: Verdict, settings: dict, skipped_kinds: dict[str, str]) -> dict:
    return {
        "version": 1,
        "ok": verdict.ok,
        "interrupted": verdict.interrupted,
        "settings": settings,
        "skipped_kinds": skipped_kinds,
        "summary": verdict.summary_line(),
        "produced": verdict.produced,
        "delivered": verdict.delivered,
        "undelivered": verdict.undelivered,
        "samples": verdict.samples,
        "violations": verdict.violations,
        "faults": [dict(dataclasses.asdict(f), time_to_whole=f.time_to_whole) for f in verdict.faults],
        "lost": [[list(tp), o] for tp, o in verdict.lost],
        "duplicates": [dataclasses.asdict(d) for d in verdict.duplicates],
        "double_ownership": [dict(dataclasses.asdict(w), length_ms=w.length_ms) for w in verdict.double_ownership],
        "deliveries_after_stop": [dict(dataclasses.asdict(w), length_ms=w.length_ms)
                                  for w in verdict.deliveries_after_stop],
        "offset_regressions": [dataclasses.asdict(r) for r in verdict.offset_regressions],
        "commits_ahead": [dataclasses.asdict(c) for c in verdict.commits_ahead],
    }


def write_reports(directory: Path, history: History, verdict: Verdict, settings: dict,
                  skipped_kinds: dict[str, str]) -> str:
    """Write report.txt, report.json and timeline.html; return the text report."""
    from zkcoord.drill.timeline import render_timeline

    directory = Path(directory)
    text = render_text(verdict, settings, skipped_kinds)
    (directory / REPORT_TEXT).write_text(text)
    (directory / REPORT_JSON).write_text(json.dumps(verdict_json(verdict, settings, skipped_kinds), indent=1))
    (directory / TIMELINE).write_text(render_timeline(history, verdict, f"zkcoord drill, seed {settings.get('seed')}"))
    return text
