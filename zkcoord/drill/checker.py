"""The drill's checker: the invariants of docs/DESIGN.md judged over a
recorded history, in the manner of Jepsen's Kafka checker. Pure: it reads a
:class:`~zkcoord.drill.history.History` and returns a :class:`Verdict`.

What it counts:

- **lost**: records the broker acknowledged that no member ever delivered;
- **duplicates**: deliveries of an offset already delivered, each attributed
  to the change that caused it (the fault whose window holds the Start of the
  member that delivered it again or, failing that, the repeated delivery
  itself; none: a planned change). On planned changes they must be 0; after a
  crash they must start at or above the offset committed before that Start
  (the uncommitted window), never below;
- **double ownership**: a member delivering a partition after another member
  was started on it and before the member itself was started on it again.
  Judged conservatively: a delivery counts only if the poll() that returned
  it *began* after the other member's Start was recorded, and every Start is
  recorded before its partition's first record can reach the application;
- **offset regressions**: a committed offset lower than one sampled before it;
- **commits ahead**: a committed offset beyond what had been delivered;
- **liveness**: each fault's time until the group was whole again, against
  the bound the drill computed for it from docs/DESIGN.md.
"""

from __future__ import annotations

import bisect
import dataclasses
from collections import defaultdict
from typing import Optional

from zkcoord.drill.history import Delivery, FaultRecord, History, OwnershipEvent, Sample, TopicPartition


@dataclasses.dataclass(frozen=True)
class Duplicate:
    tp: TopicPartition
    offset: int
    member: str          # the member that delivered it again
    at: float            # when the repeated delivery's poll began
    fault: Optional[int]  # index of the fault it falls under; None: no fault
    planned: bool
    below_committed: Optional[int]  # the committed offset it fell below, if it did


@dataclasses.dataclass(frozen=True)
class DoubleOwnership:
    """``member`` delivered ``tp`` from ``start`` (when ``superseded_by`` was
    started on it) until ``end`` (the last such poll began), ``deliveries`` records."""

    tp: TopicPartition
    member: str
    superseded_by: str
    start: float
    end: float
    deliveries: int
    fault: Optional[int]

    @property
    def length_ms(self) -> float:
        return (self.end - self.start) * 1000.0


@dataclasses.dataclass(frozen=True)
class OffsetRegression:
    tp: TopicPartition
    before: int
    after: int
    at: float


@dataclasses.dataclass(frozen=True)
class CommitAhead:
    tp: TopicPartition
    committed: int
    delivered_next: int  # one past the highest offset delivered by then (0: none)
    at: float


@dataclasses.dataclass
class Verdict:
    faults: list[FaultRecord]
    produced: int
    delivered: int
    lost: list[tuple[TopicPartition, int]]
    duplicates: list[Duplicate]
    double_ownership: list[DoubleOwnership]
    offset_regressions: list[OffsetRegression]
    commits_ahead: list[CommitAhead]
    interrupted: bool = False

    @property
    def planned_duplicates(self) -> list[Duplicate]:
        return [d for d in self.duplicates if d.planned]

    @property
    def duplicates_below_committed(self) -> list[Duplicate]:
        return [d for d in self.duplicates if d.below_committed is not None]

    @property
    def slow_recoveries(self) -> list[FaultRecord]:
        """Faults after which the group was not whole within its bound, or not whole again once restored."""
        return [f for f in self.faults
                if f.time_to_whole is None or f.time_to_whole > f.bound_s or f.rejoined_at is None]

    @property
    def max_double_ownership_ms(self) -> float:
        return max((w.length_ms for w in self.double_ownership), default=0.0)

    @property
    def max_time_to_whole(self) -> float:
        return max((f.time_to_whole or 0.0 for f in self.faults), default=0.0)

    @property
    def violations(self) -> dict[str, int]:
        """Every count that must be zero, by name."""
        return {
            "lost": len(self.lost),
            "planned duplicates": len(self.planned_duplicates),
            "duplicates below a committed offset": len(self.duplicates_below_committed),
            "double ownership": len(self.double_ownership),
            "offset regressions": len(self.offset_regressions),
            "commits ahead of delivery": len(self.commits_ahead),
            "groups not whole within the bound": len(self.slow_recoveries),
        }

    @property
    def ok(self) -> bool:
        return not any(self.violations.values())

    def summary_line(self) -> str:
        """The last line a drill prints; other tools read it, so its format is fixed."""
        return (f"faults {len(self.faults)}; lost {len(self.lost)}; duplicates {len(self.duplicates)} "
                f"(planned {len(self.planned_duplicates)}); double ownership {len(self.double_ownership)} "
                f"(max {self.max_double_ownership_ms:.0f} ms); offset regressions {len(self.offset_regressions)}; "
                f"max time to whole {self.max_time_to_whole:.1f} s")


def check(history: History, interrupted: bool = False) -> Verdict:
    deliveries = sorted(history.deliveries, key=lambda d: (d.began, d.returned))
    starts = _starts_by_partition(history.events)
    return Verdict(
        faults=list(history.faults),
        produced=len(history.produced),
        delivered=len(deliveries),
        lost=_lost(history, deliveries),
        duplicates=_duplicates(deliveries, starts, history.samples, history.faults),
        double_ownership=_double_ownership(deliveries, starts, history.faults),
        offset_regressions=_offset_regressions(history.samples),
        commits_ahead=_commits_ahead(history.samples, deliveries),
        interrupted=interrupted,
    )


# -- the pieces ----------------------------------------------------------------------------------


class _Starts:
    """The Starts of one partition in time order, to ask who was started last before an instant."""

    def __init__(self) -> None:
        self.times: list[float] = []
        self.members: list[str] = []

    def add(self, ts: float, member: str) -> None:
        self.times.append(ts)
        self.members.append(member)

    def last_before(self, ts: float, member: Optional[str] = None) -> Optional[tuple[float, str]]:
        """The latest Start at or before ``ts`` (of ``member`` only, if given)."""
        i = bisect.bisect_right(self.times, ts) - 1
        while i >= 0:
            if member is None or self.members[i] == member:
                return self.times[i], self.members[i]
            i -= 1
        return None

    def others_between(self, member: str, after: float, before: float) -> Optional[tuple[float, str]]:
        """The first Start of another member strictly inside (after, before)."""
        i = bisect.bisect_right(self.times, after)
        while i < len(self.times) and self.times[i] < before:
            if self.members[i] != member:
                return self.times[i], self.members[i]
            i += 1
        return None


def _starts_by_partition(events: list[OwnershipEvent]) -> dict[TopicPartition, _Starts]:
    starts: dict[TopicPartition, _Starts] = defaultdict(_Starts)
    for event in sorted(events, key=lambda e: e.ts):
        if event.started:
            for tp in event.partitions:
                starts[tp].add(event.ts, event.member)
    return starts


# A fault's effects can outlast the moment the group looked whole from outside
# (a resumed member still draining what it had): its window runs this much longer.
FAULT_GRACE_S = 2.0


def _fault_at(faults: list[FaultRecord], ts: float) -> Optional[FaultRecord]:
    """The fault whose window (injection until whole again, plus the grace) holds ``ts``; the latest if several."""
    found = None
    for fault in faults:
        if fault.injected <= ts <= fault.window_end + FAULT_GRACE_S:
            found = fault
    return found


def _lost(history: History, deliveries: list[Delivery]) -> list[tuple[TopicPartition, int]]:
    delivered = {(d.tp, d.offset) for d in deliveries}
    return sorted(((p.topic, p.partition), p.offset) for p in history.produced
                  if ((p.topic, p.partition), p.offset) not in delivered)


class _CommittedIndex:
    """The highest committed offset of each partition sampled at or before an instant."""

    def __init__(self, samples: list[Sample]) -> None:
        self._times: dict[TopicPartition, list[float]] = defaultdict(list)
        self._highest: dict[TopicPartition, list[int]] = defaultdict(list)
        for sample in sorted(samples, key=lambda s: s.ts):
            for tp, offset in sample.offsets.items():
                highest = self._highest[tp]
                self._times[tp].append(sample.ts)
                highest.append(max(offset, highest[-1]) if highest else offset)

    def at(self, tp: TopicPartition, ts: float) -> Optional[int]:
        i = bisect.bisect_right(self._times.get(tp, []), ts) - 1
        return self._highest[tp][i] if i >= 0 else None


def _duplicates(deliveries: list[Delivery], starts: dict[TopicPartition, _Starts],
                samples: list[Sample], faults: list[FaultRecord]) -> list[Duplicate]:
    seen: set[tuple[TopicPartition, int]] = set()
    committed_index = _CommittedIndex(samples)
    result = []
    for d in deliveries:
        key = (d.tp, d.offset)
        if key not in seen:
            seen.add(key)
            continue
        # Attribute the repeat to the change that started this member on the
        # partition or, failing that, to a fault under way when it was delivered
        # (a stale member delivering after its partitions moved).
        own = starts[d.tp].last_before(d.returned, d.member) if d.tp in starts else None
        tenure_start = own[0] if own else d.began
        fault = _fault_at(faults, tenure_start) or _fault_at(faults, d.began)
        committed = committed_index.at(d.tp, tenure_start)
        result.append(Duplicate(
            tp=d.tp, offset=d.offset, member=d.member, at=d.began,
            fault=fault.index if fault else None,
            planned=fault is None or fault.planned,
            below_committed=committed if committed is not None and d.offset < committed else None,
        ))
    return result


def _double_ownership(deliveries: list[Delivery], starts: dict[TopicPartition, _Starts],
                      faults: list[FaultRecord]) -> list[DoubleOwnership]:
    # One episode per (partition, stale member, member that superseded it).
    episodes: dict[tuple[TopicPartition, str, float], list] = {}
    for d in deliveries:
        partition_starts = starts.get(d.tp)
        if partition_starts is None:
            continue
        own = partition_starts.last_before(d.returned, d.member)
        own_start = own[0] if own else float("-inf")
        other = partition_starts.others_between(d.member, own_start, d.began)
        if other is None:
            continue
        key = (d.tp, d.member, other[0])
        episode = episodes.setdefault(key, [other[1], d.began, 0])
        episode[1] = max(episode[1], d.began)
        episode[2] += 1
    result = []
    for (tp, member, start), (superseded_by, end, count) in sorted(episodes.items(), key=lambda kv: kv[0][2]):
        fault = _fault_at(faults, start)
        result.append(DoubleOwnership(tp=tp, member=member, superseded_by=superseded_by, start=start, end=end,
                                      deliveries=count, fault=fault.index if fault else None))
    return result


def _offset_regressions(samples: list[Sample]) -> list[OffsetRegression]:
    highest: dict[TopicPartition, int] = {}
    result = []
    for sample in sorted(samples, key=lambda s: s.ts):
        for tp, offset in sample.offsets.items():
            before = highest.get(tp)
            if before is not None and offset < before:
                result.append(OffsetRegression(tp, before, offset, sample.ts))
            else:
                highest[tp] = offset
    return result


def _commits_ahead(samples: list[Sample], deliveries: list[Delivery]) -> list[CommitAhead]:
    """A committed offset c needs offset c-1 delivered by a poll that began
    before the sample was read (the commit travels member -> coordinator ->
    ZooKeeper after the poll)."""
    # Per partition: poll start times in order, and one past the highest offset delivered by each.
    times: dict[TopicPartition, list[float]] = defaultdict(list)
    delivered_next: dict[TopicPartition, list[int]] = defaultdict(list)
    for d in deliveries:  # sorted by began
        running = delivered_next[d.tp]
        times[d.tp].append(d.began)
        running.append(max(d.offset + 1, running[-1]) if running else d.offset + 1)
    reported: set[tuple[TopicPartition, int]] = set()
    result = []
    for sample in sorted(samples, key=lambda s: s.ts):
        for tp, committed in sample.offsets.items():
            if committed <= 0 or (tp, committed) in reported:
                continue
            i = bisect.bisect_right(times.get(tp, []), sample.ts) - 1
            reached = delivered_next[tp][i] if i >= 0 else 0
            if committed > reached:
                reported.add((tp, committed))
                result.append(CommitAhead(tp, committed, reached, sample.ts))
    return result
