"""Offsets: what members report, what waits to be written, what is committed.

Owns, per group, the offsets taken and not yet written (with who reported
each), the committed offsets this coordinator wrote or read (it is the only
writer, so they stay true), the partitions known to have none, and the one
write in flight (seed improvement 1: one fenced multi-operation at a time
per group). An offset is taken only for a partition its member owns, never
backwards; one above the partition's last learnt log end is written only
once its leader has said where the log ends (known_log_ends.py), and one
beyond it is refused and its member dropped.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from functools import partial
from typing import Callable, Mapping, Optional

from zkcoord import wire
from zkcoord.coordinator.actions import ReadLogEnds, ReadOffsets, Send, SetTimer, WriteOffsets
from zkcoord.coordinator.config import CoordinatorConfig
from zkcoord.coordinator.core.groups import GroupTable
from zkcoord.coordinator.core.known_log_ends import KnownLogEnds, LogEndQuestion, beyond_log_end
from zkcoord.coordinator.core.observed import CoreMetrics
from zkcoord.coordinator.core.office import Office
from zkcoord.coordinator.core.outbox import Outbox
from zkcoord.coordinator.group import Group, Member
from zkcoord.errors import ZkcoordError
from zkcoord.records import TopicPartition
from zkcoord.zk import layout

log = logging.getLogger(__name__)

FLUSH_TIMER = ("flush",)


class Suspended(ZkcoordError):
    """The ZooKeeper connection is suspended: the coordinator writes nothing."""

    retriable = True


def offset_is_acceptable(group: Group, member: Member, tp: TopicPartition, offset: int,
                         owned: frozenset[TopicPartition]) -> bool:
    """May ``member`` report ``offset`` as the next to consume of ``tp``?
    Only for a partition it owns, and never a negative one: an offset taken
    here is written to ZooKeeper as it is, and one that cannot be written
    would fail every flush of the group after it."""
    if tp not in owned:
        log.warning("%s member %s reported an offset for %s-%d, which it does not own; ignored",
                    group.describe(), member.member_id, *tp)
        return False
    try:
        layout.encode_offset(offset)
    except layout.LayoutError as exc:
        log.warning("%s member %s reported a bad offset for %s-%d (%s); ignored",
                    group.describe(), member.member_id, *tp, exc)
        return False
    return True


@dataclass(eq=False)
class _Flush:
    """The offset write in flight for a group: who waits for it, and who
    asked after it began (they wait for the next one)."""

    waiters: list = field(default_factory=list)
    later: list = field(default_factory=list)
    again: bool = False  # asked for after it began: write once more when it ends


class Offsets:
    def __init__(self, config: CoordinatorConfig, office: Office, out: Outbox, groups: GroupTable,
                 log_ends: KnownLogEnds, metrics: CoreMetrics, remove: Callable[[Member, str, float], None]):
        """``remove(member, why, now)``: drop a member (one that reported an offset beyond the log end)."""
        self.config = config
        self.office = office
        self.out = out
        self.groups = groups
        self.log_ends = log_ends
        self.metrics = metrics
        self._remove = remove
        self.pending: dict[str, dict[TopicPartition, int]] = {}
        self.committed: dict[str, dict[TopicPartition, int]] = {}
        self._no_offset: dict[str, set[TopicPartition]] = {}  # partitions known to have no committed offset
        self._reporters: dict[str, dict[TopicPartition, Member]] = {}  # who reported each pending offset
        self._flushes: dict[str, _Flush] = {}

    # -- what is known ----------------------------------------------------------------------------

    @property
    def flushing(self) -> bool:
        return bool(self._flushes)

    def busy(self, name: str) -> bool:
        """Whether group ``name`` has offsets waiting or a write in flight."""
        return name in self._flushes or bool(self.pending.get(name))

    def unknown(self, name: str, partitions) -> frozenset[TopicPartition]:
        """Those of ``partitions`` whose committed offset (or its absence) is not known yet."""
        known = self.committed.get(name, {})
        absent = self._no_offset.get(name, set())
        return frozenset(tp for tp in partitions if tp not in known and tp not in absent)

    def learn(self, name: str, asked, found: Mapping[TopicPartition, int]) -> None:
        """Learn committed offsets; pending ones below them are regressions, dropped."""
        known = self.committed.setdefault(name, {})
        absent = self._no_offset.setdefault(name, set())
        pending = self.pending.get(name, {})
        for tp in asked:
            if tp in known or tp in absent:
                continue  # learnt meanwhile, from our own write: newer than this read
            if tp not in found:
                absent.add(tp)
                continue
            committed = known[tp] = found[tp]
            if pending.get(tp, committed) < committed:
                log.warning("[group %s] offset %d for %s-%d is below committed %d; ignored",
                            name, pending[tp], tp[0], tp[1], committed)
                del pending[tp]

    def forget_group(self, name: str) -> None:
        for per_group in (self.committed, self._no_offset, self.pending, self._reporters):
            per_group.pop(name, None)

    # -- taking offsets ---------------------------------------------------------------------------

    def accept(self, group: Group, member: Member, offsets: Mapping[TopicPartition, int],
               owned: frozenset[TopicPartition]) -> int:
        """Take offsets a member reports, only for partitions in ``owned``,
        never backwards; returns how many were taken. Where the committed
        offset is not known yet, the check ends when it has been read."""
        offsets = {tp: o for tp, o in offsets.items() if offset_is_acceptable(group, member, tp, o, owned)}
        committed = self.committed.get(group.name, {})
        pending = self.pending.setdefault(group.name, {})
        reporters = self._reporters.setdefault(group.name, {})
        taken = 0
        for tp, offset in offsets.items():
            floor = max(committed.get(tp, -1), pending.get(tp, -1))
            if offset < floor:
                log.warning("%s member %s reported offset %d for %s-%d below committed %d; ignored",
                            group.describe(), member.member_id, offset, tp[0], tp[1], floor)
                continue
            pending[tp] = offset
            reporters[tp] = member  # told if the offset is beyond the log end
            taken += 1
        return taken

    def override(self, group: Group, offsets: Mapping[TopicPartition, int]) -> None:
        """Make ``offsets`` the group's next to write, whatever it held: an
        operator's reset. Offsets a member dropped earlier would hand over
        for them are stale from now on."""
        pending = self.pending.setdefault(group.name, {})
        pending.update(offsets)
        reporters = self._reporters.get(group.name, {})
        for tp in offsets:
            reporters.pop(tp, None)
        group.fences.claimed(offsets)
        log.info("%s offsets reset by an operator: %s", group.describe(),
                 ", ".join(f"{t}-{p} to {o}" for (t, p), o in sorted(offsets.items())))

    # -- writing them -----------------------------------------------------------------------------

    def start(self, now: float) -> None:
        self.out.emit(SetTimer(FLUSH_TIMER, now + self.config.offset_flush_interval_ms / 1000.0))

    def flush_due(self, now: float) -> None:
        """FLUSH_TIMER: write what is pending, and again an interval later."""
        self.start(now)
        self.flush_pending(now)

    def flush_pending(self, now: float) -> None:
        if self.office.active:
            for name in [n for n, pending in self.pending.items() if pending]:
                self.flush(name, now)

    def flush(self, name: str, now: float, waiters=(), checked: Optional[Mapping[TopicPartition, int]] = None) -> None:
        """Write the group's pending offsets, one fenced multi-operation at a
        time per group (seed improvement 1); each waiter is called with the
        error (None) once a write that began after it asked has ended.
        ``checked``: offsets the leaders were just asked about, to be written
        without asking again."""
        flush = self._flushes.get(name)
        if flush is not None:
            flush.later.extend(waiters)
            flush.again = True
            return
        if not self.office.active:
            for waiter in waiters:
                waiter(Suspended("the ZooKeeper connection is suspended"), now)
            return
        pending = self.pending.get(name, {})
        unknown = self.unknown(name, pending)
        flush = self._flushes[name] = _Flush(list(waiters))
        if unknown:  # learn which nodes exist and check for regressions first
            self.out.ask(partial(ReadOffsets, group=name, partitions=unknown),
                         partial(self._flush_read, name, unknown, now))
            return
        known = self.committed.setdefault(name, {})
        changed = {tp: o for tp, o in pending.items() if known.get(tp) != o}
        if not changed:
            self._flush_ended(name, None, now)
            return
        # Above the last log end learnt: ask the leaders before writing (an
        # offset at or below it, the steady state of a lagging group, asks nothing).
        beyond = {tp: offset for tp, offset in changed.items()
                  if offset > self.log_ends.of(tp) and (checked or {}).get(tp) != offset}
        if beyond:
            self.out.ask(partial(ReadLogEnds, partitions=frozenset(beyond)),
                         partial(self._log_ends_read, name, beyond, self.log_ends.question(beyond)))
            return
        existing = frozenset(tp for tp in changed if tp in known)
        self.out.ask(partial(WriteOffsets, group=name, offsets=changed, existing=existing),
                     partial(self._offsets_written, name, changed, now))

    def _flush_read(self, name: str, asked, began: float, found, error, now: float) -> None:
        if error is not None:
            self.metrics.offsets_flushed(now - began, failed=True)
            self._flush_ended(name, error, now)
            return
        self.learn(name, asked, found)
        flush = self._flushes.pop(name)
        self.flush(name, now, flush.waiters + flush.later)

    def _log_ends_read(self, name: str, asked: dict, question: LogEndQuestion, found, error, now: float) -> None:
        """Judge the offsets ``asked`` about (partition -> offset) by the log
        ends this answer gave. One beyond its partition's log end is refused
        (the committed offset stays, so nothing is skipped) and the member that
        reported it is told, and removed. One whose log end no leader gave in
        time is written as reported: refusing it would start the next owner
        from an older offset and deliver again what a planned handoff must
        not; a leader that cannot answer cannot be fetched from either, so an
        honest offset is not past it. A newer report that came in meanwhile
        waits for the next answer: this one says nothing of it. One whose
        topic was deleted or created again since it was asked about is asked
        again: an answer about the topic before says nothing of the one now."""
        if error is not None:
            log.warning("[group %s] log end offsets of %d partition(s) not learnt: %s: %s", name, len(asked),
                        type(error).__name__, error)
        learnt = self.log_ends.learn(found, question)
        pending = self.pending.get(name, {})
        reporters = self._reporters.get(name, {})
        renewed = self.log_ends.renewed(asked, question)
        for tp, offset in sorted(asked.items()):
            if tp in renewed:
                continue
            if tp not in learnt and pending.get(tp) == offset:
                log.info("[group %s] offset %d for %s-%d taken as reported: no leader said where its log ends",
                         name, offset, tp[0], tp[1])
            why = beyond_log_end(tp, offset, learnt[tp]) if tp in learnt else None
            if why is None or pending.get(tp) != offset:
                continue
            del pending[tp]
            member = reporters.pop(tp, None)
            log.warning("[group %s] %s; refused, the committed offset kept", name, why)
            group = self.groups.get(name)
            if member is not None and member.connected and group is not None \
                    and group.members.get(member.member_id) is member:
                self.out.emit(Send(member.connection, wire.ErrorResponse(
                    error_code=wire.ErrorCode.OFFSET_OUT_OF_RANGE,
                    message=f"member {member.member_id} reported {why}; refused"), 0))
                self._remove(member, f"it reported {why}", now)
        flush = self._flushes.pop(name)
        self.flush(name, now, flush.waiters + flush.later,
                   checked={tp: offset for tp, offset in asked.items() if tp not in renewed})

    def _offsets_written(self, name: str, changed, began: float, _result, error, now: float) -> None:
        self.metrics.offsets_flushed(now - began, failed=error is not None)
        if error is None:
            self.committed.setdefault(name, {}).update(changed)
            self._no_offset.get(name, set()).difference_update(changed)
            pending = self.pending.get(name, {})
            reporters = self._reporters.get(name, {})
            for tp, offset in changed.items():
                if pending.get(tp) == offset:
                    del pending[tp]
                    reporters.pop(tp, None)
        else:
            # A node created although the write reported a failure would make
            # every later create fail: read them again before the next write.
            self._no_offset.get(name, set()).difference_update(changed)
            log.warning("[group %s] offset write failed, will retry: %s", name, error)
        self._flush_ended(name, error, now)

    def _flush_ended(self, name: str, error, now: float) -> None:
        flush = self._flushes.pop(name)
        for waiter in flush.waiters:
            waiter(error, now)
        if flush.again:
            self.flush(name, now, flush.later)
