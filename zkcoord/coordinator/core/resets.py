"""An operator's offset reset (`zkcoord groups reset-offsets`), from request to answer.

Owns no state of its own between events: each reset is a chain of
continuations from the request to its one answer. It checks the request,
learns what it must (the log ends of offsets beyond what is known, the
committed offsets it moves from), and then commits the offsets at once (a
group with no members), hands them to the group's next round (members, and
forced: rounds.py stops their owners, commits and starts the owners from
them), or refuses. The one way an offset moves backwards (invariant 2);
every refusal changes nothing.
"""

from __future__ import annotations

import logging
from functools import partial
from typing import Callable, Hashable

from zkcoord import wire
from zkcoord.coordinator.actions import Close, ReadLogEnds, ReadOffsets, Send
from zkcoord.coordinator.core.groups import GroupTable
from zkcoord.coordinator.core.known_log_ends import KnownLogEnds, beyond_log_end
from zkcoord.coordinator.core.office import Office
from zkcoord.coordinator.core.offsets import Offsets
from zkcoord.coordinator.core.outbox import Outbox
from zkcoord.coordinator.core.rounds import OffsetReset, Rounds
from zkcoord.coordinator.group import Group
from zkcoord.records import TopicPartition
from zkcoord.zk import layout

log = logging.getLogger(__name__)


class Resets:
    def __init__(self, office: Office, out: Outbox, groups: GroupTable, offsets: Offsets, log_ends: KnownLogEnds,
                 rounds: Rounds, empty: Callable[[Group, float], None]):
        """``empty(group, now)``: ``group`` has no members (its retention runs)."""
        self.office = office
        self.out = out
        self.groups = groups
        self.offsets = offsets
        self.log_ends = log_ends
        self.rounds = rounds
        self._empty = empty

    def reset_offsets(self, conn: Hashable, request: wire.ResetOffsetsRequest, correlation_id: int,
                      now: float) -> None:
        """See CoordinatorCore.reset_offsets."""
        def answer(error, now, members=(), previous=None) -> None:
            self.out.emit(Send(conn, wire.ResetOffsetsResponse(
                error_code=wire.ErrorCode.NONE if error is None else wire.code_for(error),
                error_message="" if error is None else str(error), members=tuple(members),
                previous=wire.offset_entries(previous or {})), correlation_id))
            self.out.emit(Close(conn))

        try:
            group, offsets = self._check(request)
        except wire.WireError as exc:
            answer(exc, now)
            return
        if not group.members:  # perhaps made by this request: forgotten in its turn if nothing comes of it
            self._empty(group, now)
        proceed = partial(self._checked, conn, group, request, offsets, answer)
        beyond = frozenset(tp for tp, offset in offsets.items() if offset > self.log_ends.of(tp))
        if request.execute and beyond:
            self.out.ask(partial(ReadLogEnds, partitions=beyond),
                         partial(self._log_ends_read, offsets, beyond, self.log_ends.question(beyond), proceed,
                                 answer))
        else:
            proceed(now)

    def _check(self, request: wire.ResetOffsetsRequest) -> tuple[Group, dict[TopicPartition, int]]:
        """The group and the offsets asked for, or the WireError that refuses them."""
        try:
            layout.group_path(request.group_id)
        except layout.LayoutError as exc:
            raise wire.InvalidRequest(str(exc)) from None
        offsets: dict[TopicPartition, int] = {}
        for entry in request.offsets:
            tp = TopicPartition(entry.topic, entry.partition)
            if tp in offsets:
                raise wire.InvalidRequest(f"{entry.topic}-{entry.partition} is named twice")
            count = self.groups.partitions.get(entry.topic, 0)
            if not count:
                raise wire.UnknownPartition(f"there is no topic {entry.topic!r}")
            if not 0 <= entry.partition < count:
                raise wire.UnknownPartition(f"topic {entry.topic} has no partition {entry.partition} "
                                            f"(it has {count})")
            if request.execute:
                try:
                    layout.encode_offset(entry.offset)
                except layout.LayoutError as exc:
                    raise wire.InvalidRequest(f"{entry.topic}-{entry.partition}: {exc}") from None
            offsets[tp] = entry.offset
        if request.execute and not offsets:
            raise wire.InvalidRequest("a reset to execute names at least one partition")
        if not self.office.active:
            raise wire.CoordinatorNotAvailable("the coordinator is suspended: ZooKeeper is unreachable or its "
                                               "office is not proven yet")
        existing = self.groups.get(request.group_id)
        if existing is not None and existing.forgetting:
            raise wire.RebalanceInProgress(f"group {request.group_id} is being forgotten (it was empty past its "
                                           "retention); try again in a moment")
        return self.groups.named(request.group_id), offsets

    def _log_ends_read(self, offsets, asked, question, proceed, answer, found, error, now: float) -> None:
        """A reset beyond a partition's log end (or where it cannot be learnt) resets nothing."""
        learnt = self.log_ends.learn(found, question)
        refusals = [why for why in (beyond_log_end(tp, offsets[tp], learnt.get(tp)) for tp in sorted(asked))
                    if why is not None]
        if refusals:
            cause = f" ({error})" if error is not None else ""
            answer(wire.OffsetOutOfRange("; ".join(refusals) + cause + "; nothing was reset"), now)
        else:
            proceed(now)

    def _checked(self, conn, group: Group, request, offsets, answer, now: float) -> None:
        # Every partition named, or (none named, not executing) every one the group has an offset for.
        asked = frozenset(offsets) if offsets else None
        unknown = self.offsets.unknown(group.name, asked) if asked is not None else None
        decide = partial(self._decided, conn, group, request, offsets, answer)
        if unknown == frozenset():
            decide(asked, now)
        else:
            self.out.ask(partial(ReadOffsets, group=group.name, partitions=unknown),
                         partial(self._offsets_read, group, decide, answer, unknown))

    def _offsets_read(self, group: Group, decide, answer, asked, found, error, now: float) -> None:
        if error is not None:
            answer(error, now)
            return
        asked = frozenset(found) if asked is None else asked
        self.offsets.learn(group.name, asked, found)
        decide(asked, now)

    def _decided(self, conn, group: Group, request, offsets, answer, asked, now: float) -> None:
        committed = self.offsets.committed.get(group.name, {})
        pending = self.offsets.pending.get(group.name, {})
        if asked is None:
            asked = frozenset(committed) | frozenset(pending)
        # Offsets taken and not yet written are the ones a reset moves from.
        previous = {tp: max(committed.get(tp, -1), pending.get(tp, -1)) for tp in asked}
        previous = {tp: offset for tp, offset in previous.items() if offset >= 0}
        members = sorted(group.members)
        answer = partial(answer, members=members, previous=previous)
        if not request.execute:
            answer(None, now)
            return
        refusal = None
        if not self.office.active:
            refusal = wire.CoordinatorNotAvailable("the coordinator was suspended")
        elif self.rounds.under_way(group.name):
            refusal = wire.RebalanceInProgress(f"group {group.name} is rebalancing; try again in a moment")
        elif members and not request.force:
            refusal = wire.GroupNotEmpty(f"group {group.name} has {len(members)} member(s): {', '.join(members)}; "
                                         "stop them first, or force the reset")
        if refusal is not None:
            answer(refusal, now)
        elif members:
            # Its owners stop, the offsets are written, its owners start from them: a round.
            log.info("%s offset reset of %d partition(s) forced by an operator; rebalancing to carry it out",
                     group.describe(), len(offsets))
            self.rounds.carry_reset(group, OffsetReset(offsets, answer, conn), now)
        else:
            self.offsets.override(group, offsets)
            self.offsets.flush(group.name, now, [answer])
