"""The drills the console shows: histories `zkcoord drill` wrote, under
the directory the console was given (``--drills``), and each one's report
and timeline.

A drill that wrote its reports (report.txt, report.json, timeline.html,
zkcoord.drill.report) is shown from them; one stopped before it could (its
history files only) is checked and rendered here by the drill's own code,
zkcoord.drill.checker, report and timeline, so a console never judges a
drill differently from the drill. Nothing outside the given directory is
ever opened: a name that resolves elsewhere is refused like one that does
not exist.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

from zkcoord.errors import ZkcoordError

# The files whose presence makes a directory a drill's history (zkcoord.drill.history, report).
HISTORY_MARKS = ("faults.jsonl", "produced.jsonl", "report.json")


class NotADrill(ZkcoordError):
    """A name that is no drill history under the console's drill directory."""


def is_drill(directory: Path) -> bool:
    return directory.is_dir() and any((directory / mark).is_file() for mark in HISTORY_MARKS)


def list_drills(root: Path) -> list[dict]:
    """The drills under ``root``: ``root`` itself if it is one, and each
    directory below it (to two levels) that is, newest first."""
    root = Path(root)
    found = [root] if is_drill(root) else []
    for child in sorted(root.glob("*")) + sorted(root.glob("*/*")):
        if is_drill(child):
            found.append(child)
    found.sort(key=lambda d: d.stat().st_mtime, reverse=True)
    return [_summary(root, d) for d in found]


def _summary(root: Path, directory: Path) -> dict:
    name = directory.relative_to(root).as_posix()
    report = _report_json(directory)
    return {"name": name if name != "." else "", "label": name if name != "." else directory.name,
            "ok": None if report is None else bool(report.get("ok")) and not report.get("interrupted"),
            "summary": None if report is None else report.get("summary")}


def _report_json(directory: Path) -> Optional[dict]:
    from zkcoord.drill.report import REPORT_JSON

    try:
        return json.loads((directory / REPORT_JSON).read_text())
    except (OSError, ValueError):
        return None


def resolve(root: Path, name: str) -> Path:
    """The drill directory ``name`` names under ``root`` ("" is ``root``);
    NotADrill if it is outside ``root`` or no drill."""
    root = Path(root).resolve()
    directory = (root / name).resolve()
    if directory != root and root not in directory.parents:
        raise NotADrill(f"{name!r} is not under the console's drill directory")
    if not is_drill(directory):
        raise NotADrill(f"{name or root.name!r} is not a drill's history directory (it holds none of "
                        f"{', '.join(HISTORY_MARKS)})")
    return directory


class DrillReports:
    """Each drill's report and timeline, computed once per history for a
    drill that did not write them (its files only ever grow while it runs,
    so a changed modification time means a new reading)."""

    def __init__(self):
        self._computed: dict[tuple[Path, float], tuple[dict, str, str]] = {}

    def report(self, directory: Path) -> tuple[dict, str, bool]:
        """(report.json's document, report.txt's text, whether the drill wrote them itself)."""
        from zkcoord.drill.report import REPORT_TEXT

        document = _report_json(directory)
        try:
            if document is not None:
                return document, (directory / REPORT_TEXT).read_text(), True
        except OSError:
            pass
        document, text, _timeline = self._compute(directory)
        return document, text, False

    def timeline(self, directory: Path) -> str:
        from zkcoord.drill.report import TIMELINE

        try:
            return (directory / TIMELINE).read_text()
        except OSError:
            return self._compute(directory)[2]

    def _compute(self, directory: Path) -> tuple[dict, str, str]:
        from zkcoord.drill.checker import check
        from zkcoord.drill.history import History
        from zkcoord.drill.report import render_text, verdict_json
        from zkcoord.drill.timeline import render_timeline

        key = (directory, max((p.stat().st_mtime for p in directory.rglob("*.jsonl")), default=0.0))
        if key not in self._computed:
            try:
                history = History.load(directory)
            except (OSError, ValueError, KeyError, TypeError) as exc:
                raise NotADrill(f"{directory.name}: its history cannot be read: {exc}") from None
            # It wrote no report: it was stopped before its end, as the drill's own report would say.
            verdict = check(history, interrupted=True)
            settings = {"stopped early": "no report written; checked by the console"}
            self._computed = {key: (verdict_json(verdict, settings, {}), render_text(verdict, settings, {}),
                                    render_timeline(history, verdict, f"zkcoord drill {directory.name}"))}
        return self._computed[key]
