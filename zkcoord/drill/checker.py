"""The drill's checker: the invariants of docs/DESIGN.md judged over a
recorded history, in the manner of Jepsen's Kafka checker. Pure: it reads a
:class:`~zkcoord.drill.history.History` and returns a :class:`Verdict`.

What it counts:

- **lost**: records the broker acknowledged that no member ever delivered
  (after an interrupted run, only those below the last committed offset);
- **duplicates**: deliveries of an offset already delivered, each attributed
  to the change that caused it (the fault whose window holds the Start of the
  member that delivered it again or, failing that, the repeated delivery
  itself; none: a planned change; but an earlier unplanned fault in whose
  window the previous delivery was made, or the previous deliverer's tenure
  ended before the change (or up to a second before the fault: a commit in
  flight), its commit perhaps lost to it, takes the blame from a planned
  change; see :func:`_commit_lost_in`). On planned changes they must be 0; after a
  crash they must start at or above the offset committed before that Start
  (the uncommitted window), never below;
- **double ownership**: a member delivering a partition after another member
  was started on it and before the member itself was started on it again;
  and, counted apart, a member delivering a partition after its own Stop.
  Judged conservatively: a delivery counts only if the poll() that returned
  it *began* after that Start or Stop was recorded (every Start is recorded
  before its partition's first record can reach the application, every Stop
  after its records were dropped). A poll that straddles the instant is not
  counted, so an overlap can be missed by up to one poll's length, which is
  short (100 ms) unless the process was paused inside that poll;
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

from zkcoord.drill.history import Delivery, FaultRecord, History, OwnershipEvent, Sample
from zkcoord.records import TopicPartition


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
    samples: int
    lost: list[tuple[TopicPartition, int]]
    undelivered: int  # not delivered when an interrupted run stopped (not counted as lost)
    duplicates: list[Duplicate]
    double_ownership: list[DoubleOwnership]
    deliveries_after_stop: list[DoubleOwnership]
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
            "empty history (nothing produced or sampled)": int(not self.produced or not self.samples),
            "lost": len(self.lost),
            "planned duplicates": len(self.planned_duplicates),
            "duplicates below a committed offset": len(self.duplicates_below_committed),
            "double ownership": len(self.double_ownership),
            "deliveries after the member's own Stop": len(self.deliveries_after_stop),
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
    ownership = _ownership_by_partition(history.events)
    lost, undelivered = _lost(history, deliveries, interrupted)
    double_ownership, after_stop = _double_ownership(deliveries, ownership, history.faults)
    return Verdict(
        faults=list(history.faults),
        produced=len(history.produced),
        delivered=len(deliveries),
        samples=len(history.samples),
        lost=lost,
        undelivered=undelivered,
        duplicates=_duplicates(deliveries, ownership, history.samples, history.faults, history.processes),
        double_ownership=double_ownership,
        deliveries_after_stop=after_stop,
        offset_regressions=_offset_regressions(history.samples),
        commits_ahead=_commits_ahead(history.samples, deliveries),
        interrupted=interrupted,
    )


# -- the pieces ----------------------------------------------------------------------------------


class _Ownership:
    """The Starts and Stops of one partition in time order."""

    def __init__(self) -> None:
        self.start_times: list[float] = []
        self.start_members: list[str] = []
        self.stops: dict[str, list[float]] = defaultdict(list)  # member -> its Stop times, in order

    def add(self, event: OwnershipEvent) -> None:
        if event.started:
            self.start_times.append(event.ts)
            self.start_members.append(event.member)
        else:
            self.stops[event.member].append(event.ts)

    def own_start(self, member: str, ts: float) -> Optional[float]:
        """When ``member`` was last started on the partition, at or before ``ts``."""
        i = bisect.bisect_right(self.start_times, ts) - 1
        while i >= 0:
            if self.start_members[i] == member:
                return self.start_times[i]
            i -= 1
        return None

    def other_start_between(self, member: str, after: float, before: float) -> Optional[tuple[float, str]]:
        """The first Start of another member strictly inside (after, before)."""
        i = bisect.bisect_right(self.start_times, after)
        while i < len(self.start_times) and self.start_times[i] < before:
            if self.start_members[i] != member:
                return self.start_times[i], self.start_members[i]
            i += 1
        return None

    def tenure_end(self, member: str, after: float, before: float) -> Optional[float]:
        """When ``member``'s tenure running at ``after`` ended before ``before``:
        its own Stop or another member's Start, whichever came first."""
        other = self.other_start_between(member, after, before)
        ends = [t for t in (self.own_stop_between(member, after, before), other and other[0]) if t is not None]
        return min(ends, default=None)

    def own_stop_between(self, member: str, after: float, before: float) -> Optional[float]:
        """The first Stop of ``member`` strictly inside (after, before)."""
        stops = self.stops.get(member, [])
        i = bisect.bisect_right(stops, after)
        return stops[i] if i < len(stops) and stops[i] < before else None


def _ownership_by_partition(events: list[OwnershipEvent]) -> dict[TopicPartition, _Ownership]:
    ownership: dict[TopicPartition, _Ownership] = defaultdict(_Ownership)
    for event in sorted(events, key=lambda e: e.ts):
        for tp in event.partitions:
            ownership[tp].add(event)
    return ownership


# A fault's effects can outlast the moment the group looked whole from outside
# (a resumed member still draining what it had): its window runs this much longer.
FAULT_GRACE_S = 2.0
# A member's last commit may still be on its way this long after its tenure ended.
COMMIT_IN_FLIGHT_S = 1.0


def _fault_at(faults: list[FaultRecord], ts: float) -> Optional[FaultRecord]:
    """The fault whose window (injection until whole again, plus the grace) holds ``ts``; the latest if several."""
    found = None
    for fault in faults:
        if fault.injected <= ts <= fault.window_end + FAULT_GRACE_S:
            found = fault
    return found


def _commit_lost_in(faults: list[FaultRecord], process: Optional[str], delivered_at: float,
                    ended: Optional[float], change: Optional[FaultRecord]) -> Optional[FaultRecord]:
    """The earlier unplanned fault that may have cost a delivery its commit,
    which a later change then made come back: the latest one in whose window
    (from COMMIT_IN_FLIGHT_S before it: a commit still on its way) the
    deliverer's tenure ended, or the delivery was made (with the grace only if
    the fault broke the delivering process itself: a stock member cut off
    from its group's broker hands out what it holds once healed, under a
    membership it lost). A tenure the change itself ended is the change's."""
    if ended is not None and change is not None and ended >= change.injected:
        ended = None
    found = None
    for fault in faults:
        if fault.planned or (change is not None and fault.index >= change.index):
            continue
        reach = fault.window_end + FAULT_GRACE_S
        since = fault.injected - COMMIT_IN_FLIGHT_S
        if (ended is not None and since <= ended <= reach) or (
                since <= delivered_at <= (reach if fault.targets(process) else fault.window_end)):
            found = fault
    return found


def _lost(history: History, deliveries: list[Delivery],
          interrupted: bool) -> tuple[list[tuple[TopicPartition, int]], int]:
    """Acknowledged records never delivered, and how many of those were left
    undelivered by an interrupted run (not counted as lost: the group may
    simply not have reached them; below the last committed offset they were
    skipped, and are lost all the same)."""
    delivered = {(d.tp, d.offset) for d in deliveries}
    final = _CommittedIndex(history.samples)
    lost, undelivered = [], 0
    for p in history.produced:
        tp = (p.topic, p.partition)
        if (tp, p.offset) in delivered:
            continue
        committed = final.at(tp, float("inf"))
        if interrupted and (committed is None or p.offset >= committed):
            undelivered += 1
        else:
            lost.append((tp, p.offset))
    return sorted(lost), undelivered


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


def _staleness(d: Delivery, ownership: dict[TopicPartition, _Ownership]) -> Optional[tuple[float, str]]:
    """Why ``d`` was not the delivering member's to make, if it was not: the
    instant and the member whose Start superseded it, or the instant of its
    own Stop (then the member is itself). Judged from when the poll began."""
    partition = ownership.get(d.tp)
    if partition is None:
        return None
    own_start = partition.own_start(d.member, d.returned)
    since = float("-inf") if own_start is None else own_start
    other = partition.other_start_between(d.member, since, d.began)
    if other is not None:
        return other
    stopped = partition.own_stop_between(d.member, since, d.began)
    return None if stopped is None else (stopped, d.member)


def _duplicates(deliveries: list[Delivery], ownership: dict[TopicPartition, _Ownership],
                samples: list[Sample], faults: list[FaultRecord],
                processes: Optional[dict[str, str]] = None) -> list[Duplicate]:
    processes = processes or {}
    # Per offset, the member that last delivered it, and when.
    last_delivered: dict[tuple[TopicPartition, int], tuple[str, float]] = {}
    committed_index = _CommittedIndex(samples)
    result = []
    for d in deliveries:
        key = (d.tp, d.offset)
        previous = last_delivered.get(key)
        last_delivered[key] = (d.member, d.began)
        if previous is None:
            continue
        partition = ownership.get(d.tp)
        own_start = partition.own_start(d.member, d.returned) if partition else None
        tenure_start = d.began if own_start is None else own_start
        if _staleness(d, ownership) is not None:
            # A stale member delivering: the fault under way then made it so.
            fault = _fault_at(faults, d.began)
        else:
            # The member was started again from the committed offset: the
            # change that started it, or a fault still under way, whichever came later.
            candidates = [f for f in (_fault_at(faults, tenure_start), _fault_at(faults, d.began)) if f]
            fault = max(candidates, key=lambda f: f.index) if candidates else None
        if fault is None or fault.planned:
            # Delivered before in an unplanned fault, or by a member whose
            # tenure that fault ended, the record may have lost its commit to
            # it (a stock member cut off from its group's broker, a commit on
            # its way to a coordinator then paused): it comes back because of
            # that fault, whichever change moved the partition afterwards.
            before_member, before_at = previous
            ended = partition.tenure_end(before_member, before_at, d.returned) if partition else None
            fault = _commit_lost_in(faults, processes.get(before_member), before_at, ended, fault) or fault
        committed = committed_index.at(d.tp, tenure_start)
        result.append(Duplicate(
            tp=d.tp, offset=d.offset, member=d.member, at=d.began,
            fault=fault.index if fault else None,
            planned=fault is None or fault.planned,
            below_committed=committed if committed is not None and d.offset < committed else None,
        ))
    return result


def _double_ownership(deliveries: list[Delivery], ownership: dict[TopicPartition, _Ownership],
                      faults: list[FaultRecord]) -> tuple[list[DoubleOwnership], list[DoubleOwnership]]:
    """Deliveries a member was no longer entitled to, as episodes: those after
    another member's Start (double ownership), and those after the member's
    own Stop while nobody else had been started yet (``superseded_by`` is the
    member itself)."""
    # One episode per (partition, stale member, the instant it went stale).
    episodes: dict[tuple[TopicPartition, str, float], list] = {}
    for d in deliveries:
        stale = _staleness(d, ownership)
        if stale is None:
            continue
        since, by = stale
        episode = episodes.setdefault((d.tp, d.member, since), [by, d.began, 0])
        episode[1] = max(episode[1], d.began)
        episode[2] += 1
    double, after_stop = [], []
    for (tp, member, start), (by, end, count) in sorted(episodes.items(), key=lambda kv: kv[0][2]):
        fault = _fault_at(faults, start)
        episode = DoubleOwnership(tp=tp, member=member, superseded_by=by, start=start, end=end,
                                  deliveries=count, fault=fault.index if fault else None)
        (after_stop if by == member else double).append(episode)
    return double, after_stop


def _offset_regressions(samples: list[Sample]) -> list[OffsetRegression]:
    """Each drop of a partition's committed offset below the value sampled just before it."""
    last: dict[TopicPartition, int] = {}
    result = []
    for sample in sorted(samples, key=lambda s: s.ts):
        for tp, offset in sample.offsets.items():
            before = last.get(tp)
            if before is not None and offset < before:
                result.append(OffsetRegression(tp, before, offset, sample.ts))
            last[tp] = offset
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
