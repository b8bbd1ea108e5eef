"""The drill's timeline page: one self-contained HTML file (inline SVG and CSS,
nothing fetched, no scripts) that shows a drill at a glance. Pure: it reads a
:class:`~zkcoord.drill.history.History` and its
:class:`~zkcoord.drill.checker.Verdict` and returns the page as a string.

What it draws, on one row per partition against seconds since the drill began:

- each member's tenure of the partition (Start until Stop), one colour per member;
- a faint strip of how many records were delivered, counted per few pixels;
- each fault as a translucent band from its injection until the group was
  whole again (planned changes in another hue; a red outline when the group
  was not whole within the bound);
- the violations on top, in red: double ownership as bars, duplicates on
  planned changes or below a committed offset, offset regressions and commits
  ahead of delivery as markers, lost records as a count at the row's end.

A drill can hold half a million deliveries, so nothing is drawn per delivery
or per violation record: they are counted into pixel columns first, which
keeps the page well under a megabyte.
"""

from __future__ import annotations

import dataclasses
import datetime
import html
import math
from collections import defaultdict
from typing import Optional

from zkcoord.drill.checker import Duplicate, Verdict
from zkcoord.drill.history import FaultRecord, History, tp_key
from zkcoord.records import TopicPartition

# -- layout, in pixels -----------------------------------------------------------------------------

PLOT_MIN_WIDTH = 1100       # with the labels, fits a 1400-pixel window
PLOT_MAX_WIDTH = 4800
PX_PER_FAULT = 14         # a long campaign widens the plot (it scrolls) so each fault keeps room for its label
ROW_LABEL_WIDTH = 130     # the row labels stay put while a wide plot scrolls beside them
PLOT_LEFT = 12            # room for the first tick's label
ROW_END_WIDTH = 70        # right of the plot: a row's count of lost records
FAULT_LABEL_HEIGHT = 150  # above the rows: fault labels, written upwards
AXIS_HEIGHT = 36
ROW_HEIGHT = 24
BAR_TOP, BAR_HEIGHT = 3, 14
STRIP_TOP, STRIP_HEIGHT = 19, 4
FAULT_LABEL_GAP = 11      # a fault label is left out when it would overlap the previous one
MIN_TICK_GAP = 80
TICK_STEPS_S = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200)
DENSITY_BUCKET_PX = 3
MARKER_BUCKET_PX = 4
MIN_VIOLATION_PX = 2      # a double ownership of a few milliseconds must still be seen
LEGEND_ITEM_WIDTH = 118
LEGEND_COLUMNS = 10
SHOWN_LOST = 10           # lost offsets named in a row's tooltip
SHORT_ID = 6              # member ids are host-<12 hex>: their tail tells them apart

# No reds: red means a violation. Members beyond the palette get it again
# darker, then lighter, so up to three times as many stay apart.
PALETTE = ("#4e79a7", "#f28e2b", "#59a14f", "#b07aa1", "#76b7b2", "#edc948", "#9c755f", "#17becf",
           "#6b6ecf", "#8c6d31", "#a0cbe8", "#8cd17d", "#bab0ac", "#d4a6c8", "#637939", "#ffbe7d")
SHADES = (0.0, -0.35, 0.45)
VIOLATION = "#d62728"

CSS = """
body { font: 13px system-ui, -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; margin: 16px 20px;
       color: #222; background: #fff; }
h1 { font-size: 20px; margin: 0 0 6px 0; }
.verdict { display: inline-block; font-weight: bold; padding: 2px 10px; border-radius: 3px; color: #fff;
           margin-right: 10px; }
.pass { background: #2e7d32; }
.fail { background: #d62728; }
code { font: 12px ui-monospace, Menlo, Consolas, monospace; }
.meta { color: #555; margin: 4px 0; }
.violations { color: #d62728; margin: 4px 0; }
.timeline { display: flex; border: 1px solid #ddd; margin: 8px 0 14px 0; }
.rows { flex: none; }
.chart { flex: 1 1 auto; overflow-x: auto; }
svg text { font: 10px system-ui, -apple-system, Helvetica, Arial, sans-serif; fill: #333; }
svg .rowlabel { font-size: 11px; }
svg .axis { fill: #666; }
svg .grid { stroke: #e4e4e4; stroke-width: 1; }
svg .rowbg { fill: #f7f7f7; }
svg .d1 { fill: #333; opacity: .15; }
svg .d2 { fill: #333; opacity: .35; }
svg .d3 { fill: #333; opacity: .6; }
svg .d4 { fill: #333; opacity: .85; }
svg .fault { fill: #e69f00; fill-opacity: .16; stroke: #e69f00; stroke-opacity: .5; stroke-width: .5; }
svg .planned { fill: #3b6fd4; fill-opacity: .12; stroke: #3b6fd4; stroke-opacity: .5; stroke-width: .5; }
svg .slow { stroke: #d62728; stroke-opacity: 1; stroke-width: 1.5; }
svg .v { fill: #d62728; }
svg .vbar { fill: #d62728; opacity: .9; }
svg text.v { fill: #d62728; font-weight: bold; }
table { border-collapse: collapse; font-size: 12px; }
th, td { border-bottom: 1px solid #e4e4e4; padding: 2px 8px; text-align: left; vertical-align: top; }
th { background: #f3f3f3; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
tr.late td { color: #d62728; }
"""


@dataclasses.dataclass(frozen=True)
class _Tenure:
    """``member`` owned ``tp`` from ``start`` to ``end``; ``ended_by`` says
    what the end is: its Stop, its last delivery (no Stop: it was killed or
    the drill ended), or the end of the history."""

    tp: TopicPartition
    member: str
    start: float
    end: float
    ended_by: str


@dataclasses.dataclass(frozen=True)
class _Scale:
    """Wall-clock time to x pixels of the plot."""

    start: float
    end: float
    width: int

    def x(self, ts: float) -> float:
        fraction = (ts - self.start) / (self.end - self.start)
        return min(max(fraction, 0.0), 1.0) * self.width

    @property
    def seconds_per_px(self) -> float:
        return (self.end - self.start) / self.width

    def since(self, ts: float) -> str:
        return f"{ts - self.start:.1f} s"


def render_timeline(history: History, verdict: Verdict, title: str) -> str:
    """The whole page for a drill's ``history`` as ``verdict`` judged it."""
    scale = _scale(history, verdict)
    partitions = _partitions(history, verdict)
    members = _members_in_order(history, verdict)
    shorts = _short_names(members)
    digest = _DeliveryDigest(history, partitions, scale)
    tenures = _merge_invisible_gaps(_tenures(history, digest.last_delivery, scale.end), scale.seconds_per_px)
    page = "".join([
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"/>',
        f"<title>{_e(title)}</title><style>{CSS}{_member_css(members)}</style></head><body>\n",
        _header(verdict, title, scale, partitions, members),
        _legend(members, shorts),
        _timeline(verdict, scale, partitions, members, tenures, digest),
        _fault_table(verdict, scale),
        "</body></html>\n",
    ])
    # The report writer uses the platform's default encoding: keep the page ASCII.
    return page.encode("ascii", "xmlcharrefreplace").decode("ascii")


# -- what is drawn ---------------------------------------------------------------------------------


def _scale(history: History, verdict: Verdict) -> _Scale:
    if history.ended > history.started:
        start, end = history.started, history.ended
    else:  # built by hand rather than loaded: take the span of what it holds
        times = ([p.ts for p in history.produced] + [d.began for d in history.deliveries]
                 + [e.ts for e in history.events])
        start, end = (min(times), max(times)) if times else (0.0, 0.0)
    # Faults and double ownership may outlast the last record; the plot must hold them.
    end = max([end] + [f.window_end for f in verdict.faults] + [w.end for w in _stale_episodes(verdict)])
    if end <= start:
        end = start + 1.0
    width = min(max(PLOT_MIN_WIDTH, PX_PER_FAULT * len(verdict.faults)), PLOT_MAX_WIDTH)
    return _Scale(start, end, width)


def _partitions(history: History, verdict: Verdict) -> list[TopicPartition]:
    seen: set[TopicPartition] = {(p.topic, p.partition) for p in history.produced}
    seen.update((d.topic, d.partition) for d in history.deliveries)
    for event in history.events:
        seen.update(event.partitions)
    for sample in history.samples:  # partitions added late may have no records yet
        seen.update(sample.offsets)
    # Every violation gets a row, even on a partition nothing else mentions.
    for violations in (_stale_episodes(verdict), verdict.duplicates, verdict.offset_regressions,
                       verdict.commits_ahead):
        seen.update(v.tp for v in violations)
    seen.update(tp for tp, _ in verdict.lost)
    return sorted(seen)


def _members_in_order(history: History, verdict: Verdict) -> list[str]:
    """Members by first appearance, so a member keeps its colour whatever else the drill did."""
    order: dict[str, None] = {}
    for event in sorted(history.events, key=lambda e: e.ts):
        order.setdefault(event.member, None)
    for member in dict.fromkeys(d.member for d in history.deliveries):
        order.setdefault(member, None)
    for w in _stale_episodes(verdict):
        order.setdefault(w.member, None)
        order.setdefault(w.superseded_by, None)
    return list(order)


def _short_names(members: list[str]) -> dict[str, str]:
    """The shortest tail of the ids, at least ``SHORT_ID`` long, that still tells them apart."""
    length = SHORT_ID
    longest = max((len(m) for m in members), default=0)
    while length < longest and len({m[-length:] for m in members}) < len(set(members)):
        length += 1
    return {m: m if len(m) <= length else "\u2026" + m[-length:] for m in members}


def _member_colour(index: int) -> str:
    base = PALETTE[index % len(PALETTE)]
    shade = SHADES[(index // len(PALETTE)) % len(SHADES)]
    return _shaded(base, shade)


def _shaded(colour: str, amount: float) -> str:
    """``colour`` towards black (amount < 0) or white (amount > 0)."""
    rgb = [int(colour[i:i + 2], 16) for i in (1, 3, 5)]
    target = 255 if amount > 0 else 0
    mixed = [round(c + (target - c) * abs(amount)) for c in rgb]
    return "#" + "".join(f"{c:02x}" for c in mixed)


class _DeliveryDigest:
    """What the page needs from the deliveries, gathered in one pass: per
    partition, records per pixel bucket and in all; per member and partition,
    the last delivery."""

    def __init__(self, history: History, partitions: list[TopicPartition], scale: _Scale):
        self.buckets = max(1, math.ceil(scale.width / DENSITY_BUCKET_PX))
        self.per_bucket: dict[TopicPartition, list[int]] = {tp: [0] * self.buckets for tp in partitions}
        self.total: dict[TopicPartition, int] = dict.fromkeys(partitions, 0)
        self.last_delivery: dict[tuple[TopicPartition, str], float] = {}
        bucket_s = scale.seconds_per_px * DENSITY_BUCKET_PX
        last_bucket = self.buckets - 1
        for d in history.deliveries:
            tp = (d.topic, d.partition)
            bucket = min(max(int((d.returned - scale.start) / bucket_s), 0), last_bucket)
            self.per_bucket[tp][bucket] += 1
            self.total[tp] += 1
            key = (tp, d.member)
            if d.returned > self.last_delivery.get(key, float("-inf")):
                self.last_delivery[key] = d.returned
        busy = sorted(c for counts in self.per_bucket.values() for c in counts if c)
        self.typical = busy[len(busy) // 2] if busy else 1


def _tenures(history: History, last_delivery: dict[tuple[TopicPartition, str], float],
             history_end: float) -> list[_Tenure]:
    """Each member's tenure of each partition: from a Start naming it to the
    member's next Stop naming it. A member killed without a Stop owned it,
    as far as anyone can tell, until its last delivery of it."""
    opened: dict[tuple[TopicPartition, str], float] = {}
    result = []
    for event in sorted(history.events, key=lambda e: e.ts):
        for tp in event.partitions:
            key = (tp, event.member)
            if event.started:
                opened.setdefault(key, event.ts)  # a repeated Start continues the tenure
            elif key in opened:
                result.append(_Tenure(tp, event.member, opened.pop(key), event.ts, "Stop"))
    for (tp, member), start in opened.items():
        last = last_delivery.get((tp, member))
        if last is not None and last >= start:
            result.append(_Tenure(tp, member, start, last, "its last delivery (no Stop)"))
        else:
            result.append(_Tenure(tp, member, start, history_end, "the end of the history (no Stop, no delivery)"))
    return result


def _merge_invisible_gaps(tenures: list[_Tenure], seconds_per_px: float) -> list[_Tenure]:
    """Join a member's consecutive tenures of a partition when the gap between
    them is under a pixel (a rebalance that handed it straight back): the gap
    could not be seen, and each bar costs page size."""
    by_owner: dict[tuple[TopicPartition, str], list[_Tenure]] = defaultdict(list)
    for tenure in sorted(tenures, key=lambda t: t.start):
        runs = by_owner[(tenure.tp, tenure.member)]
        if runs and tenure.start - runs[-1].end < seconds_per_px:
            runs[-1] = dataclasses.replace(runs[-1], end=max(runs[-1].end, tenure.end), ended_by=tenure.ended_by)
        else:
            runs.append(tenure)
    return [t for runs in by_owner.values() for t in runs]


def _stacked(tenures: list[_Tenure]) -> list[tuple[_Tenure, int, int]]:
    """(tenure, lane, lanes) for one row: tenures that overlap share the bar's
    height in lanes, so a second owner is never hidden under the first; a
    tenure overlapping nothing keeps the full height."""
    result: list[tuple[_Tenure, int, int]] = []
    cluster: list[_Tenure] = []
    cluster_end = float("-inf")
    for tenure in sorted(tenures, key=lambda t: (t.start, t.end)):
        if cluster and tenure.start >= cluster_end:
            result += _lanes(cluster)
            cluster = []
        cluster.append(tenure)
        cluster_end = max(cluster_end, tenure.end)
    return result + _lanes(cluster)


def _lanes(cluster: list[_Tenure]) -> list[tuple[_Tenure, int, int]]:
    lane_ends: list[float] = []
    placed = []
    for tenure in cluster:
        lane = next((i for i, end in enumerate(lane_ends) if end <= tenure.start), len(lane_ends))
        if lane == len(lane_ends):
            lane_ends.append(tenure.end)
        else:
            lane_ends[lane] = tenure.end
        placed.append((tenure, lane))
    return [(tenure, lane, len(lane_ends)) for tenure, lane in placed]


# -- the page --------------------------------------------------------------------------------------


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _n(value: float) -> str:
    """A coordinate, short: the page holds thousands of them."""
    return f"{value:.1f}".rstrip("0").rstrip(".")


def _member_css(members: list[str]) -> str:
    # One class per member rather than a fill on every bar: the bars are the bulk of the page.
    return "".join(f"svg .m{i} {{ fill: {_member_colour(i)}; }}\n" for i in range(len(members)))


def _header(verdict: Verdict, title: str, scale: _Scale, partitions: list[TopicPartition],
            members: list[str]) -> str:
    passed = verdict.ok and not verdict.interrupted  # as the text report judges it
    badge = "PASS" if passed else ("FAIL (interrupted)" if verdict.interrupted else "FAIL")
    began = datetime.datetime.fromtimestamp(scale.start, tz=datetime.timezone.utc).isoformat(timespec="seconds")
    violated = [f"{name} {count}" for name, count in verdict.violations.items() if count]
    parts = [
        f"<h1>{_e(title)}</h1>\n",
        f'<p><span class="verdict {"pass" if passed else "fail"}">{_e(badge)}</span>',
        f"<code>{_e(verdict.summary_line())}</code></p>\n",
        f'<p class="meta">began {_e(began)}, {scale.end - scale.start:.0f} s; {len(partitions)} partitions, '
        f"{len(members)} members; {verdict.produced} records produced, {verdict.delivered} deliveries</p>\n",
    ]
    if violated:
        parts.append(f'<p class="violations">violated: {_e(", ".join(violated))}</p>\n')
    return "".join(parts)


def _legend(members: list[str], shorts: dict[str, str]) -> str:
    keys = [
        ('<rect x="0" y="2" width="14" height="10" class="fault"/>', "fault (injected until whole)"),
        ('<rect x="0" y="2" width="14" height="10" class="planned"/>', "planned change"),
        ('<rect x="0" y="2" width="14" height="10" class="fault slow"/>', "not whole within bound"),
        ('<rect x="0" y="2" width="14" height="10" class="vbar"/>', "double ownership"),
        (_marker("duplicate", 7, 2), "duplicate (planned or below commit)"),
        (_marker("regression", 7, 2), "offset regression"),
        (_marker("ahead", 7, 2), "commit ahead of delivery"),
        ('<rect x="0" y="5" width="14" height="4" class="d2"/>', "records delivered (darker: faster)"),
    ]
    items = [f"{shape}<text x=\"20\" y=\"11\">{_e(label)}</text>" for shape, label in keys]
    key_columns = 4
    key_width = 260
    rows = math.ceil(len(items) / key_columns)
    svg = [_item(i % key_columns * key_width, i // key_columns * 18, item) for i, item in enumerate(items)]
    top = rows * 18 + 8
    for i, member in enumerate(members):
        x, y = i % LEGEND_COLUMNS * LEGEND_ITEM_WIDTH, top + i // LEGEND_COLUMNS * 18
        svg.append(_item(x, y, f"<title>{_e(member)}</title>"
                               f'<rect x="0" y="1" width="14" height="12" class="m{i}"/>'
                               f'<text x="20" y="11">{_e(shorts[member])}</text>'))
    height = top + math.ceil(len(members) / LEGEND_COLUMNS) * 18
    width = max(key_columns * key_width, LEGEND_COLUMNS * LEGEND_ITEM_WIDTH)
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" class="legend">'
            + "".join(svg) + "</svg>\n")


def _item(x: float, y: float, body: str) -> str:
    return f'<g transform="translate({_n(x)},{_n(y)})">{body}</g>'


def _timeline(verdict: Verdict, scale: _Scale, partitions: list[TopicPartition], members: list[str],
              tenures: list[_Tenure], digest: _DeliveryDigest) -> str:
    """The row labels, and beside them the plot, which scrolls when a long drill makes it wide."""
    height = FAULT_LABEL_HEIGHT + len(partitions) * ROW_HEIGHT + AXIS_HEIGHT
    return ('<div class="timeline"><div class="rows">'
            + _svg(ROW_LABEL_WIDTH, height, _row_labels(partitions, digest))
            + '</div><div class="chart">'
            + _svg(PLOT_LEFT + scale.width + ROW_END_WIDTH, height,
                   _plot(verdict, scale, partitions, members, tenures, digest))
            + "</div></div>\n")


def _svg(width: int, height: int, body: str) -> str:
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}">{body}</svg>')


def _plot(verdict: Verdict, scale: _Scale, partitions: list[TopicPartition], members: list[str],
          tenures: list[_Tenure], digest: _DeliveryDigest) -> str:
    rows_height = len(partitions) * ROW_HEIGHT
    row_of = {tp: i for i, tp in enumerate(partitions)}
    member_index = {m: i for i, m in enumerate(members)}
    by_row: dict[TopicPartition, list[_Tenure]] = defaultdict(list)
    for tenure in tenures:
        by_row[tenure.tp].append(tenure)
    plot = [
        _grid(scale, rows_height),
        *(_row(tp, i, scale, by_row[tp], member_index, digest) for i, tp in enumerate(partitions)),
        _fault_bands(verdict, scale, rows_height),
        _double_ownership(verdict, scale, row_of),
        _violation_markers(verdict, scale, row_of),
    ]
    if not partitions:
        plot.append('<text x="10" y="16">no partitions in the history</text>')
    return (_fault_labels(verdict, scale)
            + f'<g transform="translate({PLOT_LEFT},{FAULT_LABEL_HEIGHT})">' + "".join(plot) + "</g>"
            + _lost_counts(partitions, verdict, scale))


def _tick_step(duration_s: float, width: int) -> float:
    for step in TICK_STEPS_S:
        if duration_s / step <= width / MIN_TICK_GAP:
            return step
    step = TICK_STEPS_S[-1]
    while duration_s / step > width / MIN_TICK_GAP:
        step *= 2
    return step


def _grid(scale: _Scale, rows_height: int) -> str:
    duration = scale.end - scale.start
    step = _tick_step(duration, scale.width)
    parts = []
    for i in range(int(duration // step) + 1):
        x = _n(scale.x(scale.start + i * step))
        parts.append(f'<line x1="{x}" y1="0" x2="{x}" y2="{rows_height + 4}" class="grid"/>'
                     f'<text x="{x}" y="{rows_height + 16}" text-anchor="middle" class="axis">{i * step:g}</text>')
    parts.append(f'<text x="{scale.width / 2:.0f}" y="{rows_height + 31}" text-anchor="middle" class="axis">'
                 "seconds since the drill began</text>")
    return "".join(parts)


def _row_labels(partitions: list[TopicPartition], digest: _DeliveryDigest) -> str:
    parts = []
    for i, tp in enumerate(partitions):
        name = tp_key(tp)
        shown = name if len(name) <= 20 else "\u2026" + name[-19:]
        y = FAULT_LABEL_HEIGHT + i * ROW_HEIGHT + ROW_HEIGHT / 2 + 4
        parts.append(f'<text x="{ROW_LABEL_WIDTH - 8}" y="{_n(y)}" text-anchor="end" class="rowlabel">'
                     f"<title>{_e(name)}: {digest.total.get(tp, 0)} deliveries</title>{_e(shown)}</text>")
    return "".join(parts)


def _row(tp: TopicPartition, index: int, scale: _Scale, tenures: list[_Tenure], member_index: dict[str, int],
         digest: _DeliveryDigest) -> str:
    parts = [f'<g transform="translate(0,{index * ROW_HEIGHT})">',
             f'<rect x="0" y="1" width="{scale.width}" height="{ROW_HEIGHT - 2}" class="rowbg"/>']
    for tenure, lane, lanes in _stacked(tenures):
        x1, x2 = scale.x(tenure.start), scale.x(tenure.end)
        lane_height = BAR_HEIGHT / lanes
        parts.append(
            f'<rect x="{_n(x1)}" y="{_n(BAR_TOP + lane * lane_height)}" width="{_n(max(x2 - x1, 1))}" '
            f'height="{_n(lane_height)}" class="m{member_index[tenure.member]}">'
            f"<title>{_e(tenure.member)} owned {_e(tp_key(tp))} from {scale.since(tenure.start)} "
            f"to {scale.since(tenure.end)}, ended by {_e(tenure.ended_by)}</title></rect>")
    parts.append(_density_strip(digest.per_bucket.get(tp, []), digest.typical))
    parts.append("</g>")
    return "".join(parts)


def _density_strip(counts: list[int], typical: int) -> str:
    """Records delivered per bucket, in a few shades against the drill's
    typical rate, so the steady flow is one even strip and what matters
    stands out: gaps, stalls, catch-up bursts. Equal neighbours are drawn as
    one rectangle."""
    parts = []
    levels = [_level(c, typical) for c in counts]
    i = 0
    while i < len(levels):
        j = i
        while j < len(levels) and levels[j] == levels[i]:
            j += 1
        if levels[i]:
            parts.append(f'<rect x="{i * DENSITY_BUCKET_PX}" y="{STRIP_TOP}" width="{(j - i) * DENSITY_BUCKET_PX}" '
                         f'height="{STRIP_HEIGHT}" class="d{levels[i]}"/>')
        i = j
    return "".join(parts)


def _level(count: int, typical: int) -> int:
    """0: nothing; 1: under half the typical rate; 2: about typical; 3: a burst; 4: a big one."""
    if count <= 0:
        return 0
    ratio = count / typical
    return 1 if ratio < 0.5 else 2 if ratio <= 2 else 3 if ratio <= 5 else 4


def _fault_tooltip(fault: FaultRecord, scale: _Scale) -> str:
    whole = ("not whole within the wait" if fault.time_to_whole is None
             else f"whole after {fault.time_to_whole:.1f} s")
    note = f"; {fault.note}" if fault.note else ""
    return (f"#{fault.index} {fault.kind} ({'planned' if fault.planned else 'fault'}) on {fault.target}: "
            f"injected at {scale.since(fault.injected)}, held {fault.restored - fault.injected:.1f} s, "
            f"{whole} (bound {fault.bound_s:.1f} s){note}")


def _slow(verdict: Verdict) -> set[int]:
    """Indexes of the faults after which the group was not whole within the bound, as the checker judges."""
    return {f.index for f in verdict.slow_recoveries}


def _fault_bands(verdict: Verdict, scale: _Scale, rows_height: int) -> str:
    parts = []
    slow = _slow(verdict)
    for fault in verdict.faults:
        x1, x2 = scale.x(fault.injected), scale.x(fault.window_end)
        classes = ("planned" if fault.planned else "fault") + (" slow" if fault.index in slow else "")
        parts.append(f'<rect x="{_n(x1)}" y="0" width="{_n(max(x2 - x1, 1))}" height="{rows_height}" '
                     f'class="{classes}"><title>{_e(_fault_tooltip(fault, scale))}</title></rect>')
    return "".join(parts)


def _fault_labels(verdict: Verdict, scale: _Scale) -> str:
    """Each fault's index and kind, written upwards from its band; a label
    that would overlap the one before is left out (the table has them all)."""
    parts = []
    last_x = float("-inf")
    y = FAULT_LABEL_HEIGHT - 4
    slow = _slow(verdict)
    for fault in sorted(verdict.faults, key=lambda f: f.injected):
        x = PLOT_LEFT + scale.x(fault.injected) + 4
        if x - last_x < FAULT_LABEL_GAP:
            continue
        last_x = x
        css = ' class="v"' if fault.index in slow else ""
        parts.append(f'<text x="{_n(x)}" y="{y}" transform="rotate(-90 {_n(x)} {y})"{css}>'
                     f"<title>{_e(_fault_tooltip(fault, scale))}</title>#{fault.index} {_e(fault.kind)}</text>")
    return "".join(parts)


def _stale_episodes(verdict: Verdict) -> list:
    """Every episode of a member delivering what was no longer its own: after
    another member's Start, or after its own Stop."""
    return [*verdict.double_ownership, *verdict.deliveries_after_stop]


def _double_ownership(verdict: Verdict, scale: _Scale, row_of: dict[TopicPartition, int]) -> str:
    parts = []
    for w in _stale_episodes(verdict):
        if w.tp not in row_of:
            continue
        x1 = scale.x(w.start)
        width = max(scale.x(w.end) - x1, MIN_VIOLATION_PX)
        fault = "no fault" if w.fault is None else f"fault #{w.fault}"
        what, why = (("delivery after a Stop", "its own Stop") if w.superseded_by == w.member
                     else ("double ownership", f"{_e(w.superseded_by)} was started on it"))
        parts.append(
            f'<rect x="{_n(x1)}" y="{row_of[w.tp] * ROW_HEIGHT + 1}" width="{_n(width)}" height="{ROW_HEIGHT - 2}" '
            f'class="vbar"><title>{what} of {_e(tp_key(w.tp))}: {_e(w.member)} delivered '
            f"{_count(w.deliveries, 'record')} after {why}, "
            f"over {w.length_ms:.0f} ms from {scale.since(w.start)} ({fault})</title></rect>")
    return "".join(parts)


@dataclasses.dataclass
class _Marks:
    """The violations of one kind that fall in one pixel bucket of one row, drawn as one marker."""

    count: int
    first: str


def _violation_markers(verdict: Verdict, scale: _Scale, row_of: dict[TopicPartition, int]) -> str:
    marks: dict[tuple[str, int, int], _Marks] = {}

    def add(kind: str, tp: TopicPartition, ts: float, describe) -> None:
        if tp not in row_of:
            return
        key = (kind, row_of[tp], int(scale.x(ts) // MARKER_BUCKET_PX))
        if key in marks:
            marks[key].count += 1
        else:
            marks[key] = _Marks(1, describe())

    for d in verdict.duplicates:
        if d.planned or d.below_committed is not None:
            add("duplicate", d.tp, d.at, lambda d=d: _describe_duplicate(d, scale))
    for r in verdict.offset_regressions:
        add("regression", r.tp, r.at, lambda r=r: f"committed offset of {tp_key(r.tp)} went back from "
                                                  f"{r.before} to {r.after} at {scale.since(r.at)}")
    for c in verdict.commits_ahead:
        add("ahead", c.tp, c.at, lambda c=c: f"{tp_key(c.tp)} committed {c.committed} with only "
                                             f"{c.delivered_next} delivered, at {scale.since(c.at)}")
    parts = []
    for (kind, row, bucket), mark in marks.items():
        x = bucket * MARKER_BUCKET_PX + MARKER_BUCKET_PX / 2
        more = f" (and {mark.count - 1} more here)" if mark.count > 1 else ""
        parts.append(_marker(kind, x, row * ROW_HEIGHT + 1, f"{mark.first}{more}"))
    return "".join(parts)


def _describe_duplicate(d: Duplicate, scale: _Scale) -> str:
    why = "on a planned change" if d.planned else f"below the committed offset {d.below_committed}"
    return f"{d.member} delivered {tp_key(d.tp)} offset {d.offset} again {why}, at {scale.since(d.at)}"


MARKER_SHAPES = {
    "duplicate": "M{l} {t}h10l-5 8z",           # a triangle pointing down
    "regression": "M{c} {t}l5 5-5 5-5-5z",      # a diamond
    "ahead": "M{l} {b}h10l-5-8z",               # a triangle pointing up
}


def _marker(kind: str, x: float, top: float, tooltip: Optional[str] = None) -> str:
    d = MARKER_SHAPES[kind].format(l=_n(x - 5), c=_n(x), t=_n(top), b=_n(top + 10))
    title = f"<title>{_e(tooltip)}</title>" if tooltip else ""
    return f'<path d="{d}" class="v">{title}</path>'


def _lost_counts(partitions: list[TopicPartition], verdict: Verdict, scale: _Scale) -> str:
    lost: dict[TopicPartition, list[int]] = defaultdict(list)
    for tp, offset in verdict.lost:
        lost[tp].append(offset)
    parts = []
    x = PLOT_LEFT + scale.width + 6
    for i, tp in enumerate(partitions):
        if lost.get(tp):
            y = FAULT_LABEL_HEIGHT + i * ROW_HEIGHT + ROW_HEIGHT / 2 + 4
            offsets = lost[tp]
            shown = ", ".join(map(str, offsets[:SHOWN_LOST])) + (" ..." if len(offsets) > SHOWN_LOST else "")
            parts.append(f'<text x="{x}" y="{_n(y)}" class="v"><title>lost offsets of {_e(tp_key(tp))}: '
                         f"{_e(shown)}</title>{len(offsets)} lost</text>")
    return "".join(parts)


def _fault_table(verdict: Verdict, scale: _Scale) -> str:
    if not verdict.faults:
        return "<p>No faults.</p>\n"
    rows = []
    slow = _slow(verdict)
    for f in verdict.faults:
        whole = "not whole" if f.time_to_whole is None else f"{f.time_to_whole:.1f}"
        late = ' class="late"' if f.index in slow else ""
        rows.append(
            f'<tr{late}><td class="num">{f.index}</td><td>{_e(f.kind)}</td>'
            f"<td>{'planned' if f.planned else 'fault'}</td><td>{_e(f.target)}</td>"
            f'<td class="num">{f.injected - scale.start:.1f}</td><td class="num">{f.restored - f.injected:.1f}</td>'
            f'<td class="num">{_e(whole)} / {f.bound_s:.1f}</td><td>{_e(f.note)}</td></tr>')
    return ("<table><thead><tr><th>#</th><th>kind</th><th>type</th><th>target</th><th>injected at (s)</th>"
            "<th>held (s)</th><th>time to whole / bound (s)</th><th>note</th></tr></thead><tbody>\n"
            + "\n".join(rows) + "\n</tbody></table>\n")
