"""Rebalance rounds (seed 001 sections 6 and 7): from a change to the owners written.

Owns the round under way in each group, when each group's next round is due
(debounced: requests made meanwhile join it, seed 001's rebalance bit), the
operators' forced offset resets waiting for their round, and the report of
the last round that finished. Of a group it moves the phase, the generation,
the strategy, what each member is assigned and runs, and the retry count.

A round reads what it must (the owners, committed offsets), persists the new
generation before anyone is told, sends every Stop and writes the offsets
they report before any Start goes out, and ends only once every request it
sent has been answered or its member dropped: nothing of a round runs on
into the next. A round that fails is tried again after a doubling backoff,
for as long as it fails; past the retries allowed its group is FAILED (a
node says why) until one succeeds.
"""

from __future__ import annotations

import enum
import logging
from dataclasses import dataclass, field
from functools import partial
from typing import Callable, Hashable, Mapping, Optional

from zkcoord import wire
from zkcoord.coordinator.actions import ReadOffsets, ReadOwners, SetTimer, WriteGroupFailure, WriteGroupState, WriteOwners
from zkcoord.coordinator.assignors import choose_strategy
from zkcoord.coordinator.config import CoordinatorConfig
from zkcoord.coordinator.core.groups import GroupTable
from zkcoord.coordinator.core.history import History
from zkcoord.coordinator.core.observed import CoreMetrics, RebalanceReport
from zkcoord.coordinator.core.office import Office
from zkcoord.coordinator.core.offsets import Offsets
from zkcoord.coordinator.core.outbox import Outbox
from zkcoord.coordinator.core.requests import Requests
from zkcoord.coordinator.group import UNKNOWN_FAILURE, Group, GroupPhase, Member
from zkcoord.coordinator.planner import (
    HandoffPlan, owned_now, owners_of, plan_handoff, rebalance_reason, restart_partitions, target_assignment,
)
from zkcoord.errors import describe
from zkcoord.records import TopicPartition
from zkcoord.zk import layout

log = logging.getLogger(__name__)

# The least wait before a failed round is tried again.
MIN_RETRY_BACKOFF_MS = 100


def rebalance_timer(group: str) -> tuple:
    return ("rebalance", group)


class RoundPhase(enum.Enum):
    """Where a rebalance round is: READING (owners or committed offsets from
    ZooKeeper), PERSISTING (the new generation's state), STOPPING (waiting
    for Stop answers), FLUSHING (their offsets), STARTING (waiting for Start
    answers), RECORDING (the owners)."""

    READING = "reading"
    PERSISTING = "persisting"
    STOPPING = "stopping"
    FLUSHING = "flushing"
    STARTING = "starting"
    RECORDING = "recording"


@dataclass(eq=False)
class OffsetReset:
    """An operator's forced reset of a group with members, waiting for the
    round that carries it out: between its Stops and its Starts, ``offsets``
    replace what the Stops reported, and once they are written the operator
    is answered (``answer(error, now)``) and the owners start from them."""

    offsets: Mapping[TopicPartition, int]
    answer: Callable
    conn: Hashable


@dataclass(eq=False)
class Round:
    """One rebalance of one group, from its plan to its owners written."""

    started: float
    phase: RoundPhase = RoundPhase.READING
    generation: int = 0
    target: Mapping[str, frozenset[TopicPartition]] = field(default_factory=dict)
    plan: Optional[HandoffPlan] = None
    waiting: set[str] = field(default_factory=set)  # members whose answer this phase awaits
    sending: bool = False  # requests are going out: answers to them are not counted yet
    failure: Optional[str] = None  # why it cannot finish; it still waits for its answers
    persisted_members: frozenset[str] = frozenset()  # the members its state names
    reset: Optional[OffsetReset] = None  # an operator's forced reset it carries out, not yet answered


class Rounds:
    def __init__(self, config: CoordinatorConfig, office: Office, out: Outbox, groups: GroupTable,
                 requests: Requests, offsets: Offsets, metrics: CoreMetrics,
                 remove: Callable[[Member, str, float], None], empty: Callable[[Group, float], None],
                 history: Optional[History] = None):
        """``remove(member, why, now)``: drop a member that failed a step;
        ``empty(group, now)``: ``group`` has no members now (its retention runs);
        ``history``: where each round is recorded (the core's; a part's test may leave it out)."""
        self.config = config
        self.office = office
        self.out = out
        self.groups = groups
        self.requests = requests
        self.offsets = offsets
        self.metrics = metrics
        self._remove = remove
        self._empty = empty
        self._rounds: dict[str, Round] = {}
        self._due: dict[str, float] = {}
        self._resets: dict[str, OffsetReset] = {}  # forced resets waiting for their round, by group
        self.last: Optional[RebalanceReport] = None
        self.history = history if history is not None else History(config, office, out)

    # -- what is under way --------------------------------------------------------------------------

    def under_way(self, name: str) -> bool:
        """Whether group ``name`` is in a round, or has a forced reset waiting for one."""
        return name in self._rounds or name in self._resets

    def busy(self, name: str) -> bool:
        """Whether group ``name`` is in a round or has one due."""
        return self.under_way(name) or name in self._due

    def planned_starts(self, name: str) -> frozenset[TopicPartition]:
        """What the round under way in group ``name`` will start (nothing if none has planned yet)."""
        round_ = self._rounds.get(name)
        if round_ is None or round_.plan is None:
            return frozenset()
        return frozenset(tp for tps in round_.plan.start.values() for tp in tps)

    # -- asking for rounds ----------------------------------------------------------------------------

    def request(self, group: Group, why: str, now: float, joined: bool = False) -> None:
        """Something changed: rebalance ``group`` after the debounce delay.
        Requests made meanwhile join it (seed 001's rebalance bit); one made
        during a round runs once that round has ended. Safe to merge: the
        round that runs next honours every fence set meanwhile.

        A join into a group that never had a round (Kafka's initial
        rebalance delay) postpones its first round instead: to the initial
        delay after this join, but no later than the rebalance timeout after
        the first, so that a crowd joining over a while makes one round
        instead of one per debounce. Safe as any debounce: nobody in the
        group runs anything yet."""
        if self.office.deposed:
            return
        log.debug("%s rebalance requested: %s", group.describe(), why)
        self.history.requested(group.name, why)
        group.rebalance_pending = True
        group.attempts = 0
        at = now + self.config.rebalance_delay_ms / 1000.0
        if joined and group.generation == 0 and group.phase is GroupPhase.EMPTY \
                and self.config.initial_rebalance_delay_ms:
            if group.forming_since is None:
                group.forming_since = now
            # The cap is applied last: past it, a join must not move the
            # round to its own debounce, or a steady trickle of joins would
            # hold the first round off for as long as it lasts.
            cap = group.forming_since + self.config.rebalance_timeout_ms / 1000.0
            at = min(max(at, now + self.config.initial_rebalance_delay_ms / 1000.0), max(cap, now))
            if at <= cap:
                self._due.pop(group.name, None)  # the only round that may move later
        self.schedule(group, at)

    def schedule(self, group: Group, at: float) -> None:
        """A round of ``group`` at ``at``, unless one is due sooner."""
        due = self._due.get(group.name)
        if due is not None and due <= at:
            return
        self._due[group.name] = at
        self.out.emit(SetTimer(rebalance_timer(group.name), at))

    def schedule_pending(self, now: float) -> None:
        """Now, the rounds that could not run (the coordinator was not active)."""
        for group in self.groups:
            if group.rebalance_pending:
                self.schedule(group, now)

    def carry_reset(self, group: Group, reset: OffsetReset, now: float) -> None:
        """Carry out an operator's forced reset of ``group`` by its next round."""
        self._resets[group.name] = reset
        self.request(group, "an operator resets offsets", now)

    def drop_resets_of(self, conn: Hashable) -> None:
        """The operator on ``conn`` gave up: its resets not begun never happen."""
        for name, reset in list(self._resets.items()):
            if reset.conn == conn:
                del self._resets[name]
                log.info("[group %s] offset reset dropped: the operator's connection closed", name)

    def due(self, name: str, now: float) -> None:
        """The rebalance timer of group ``name``."""
        self._due.pop(name, None)
        group = self.groups.get(name)
        if group is not None and name not in self._rounds:
            self._begin(group, now)

    # -- a round, step by step ------------------------------------------------------------------------

    def _begin(self, group: Group, now: float) -> None:
        if not self.office.active:
            group.rebalance_pending = True  # runs when the connection is back
            return
        group.rebalance_pending = False  # changes from now on ask for another round
        group.forming_since = None
        if group.recorded_owners is None:  # first round of this group in this epoch
            round_ = self._rounds[group.name] = Round(started=now)
            self.out.ask(partial(ReadOwners, group=group.name), partial(self._owners_read, group, round_))
            return
        if not group.members and not group.recorded_owners and group.persisted_members == frozenset():
            group.transition(GroupPhase.EMPTY)  # and ZooKeeper says so already
            self.offsets.flush(group.name, now)
            self._succeeded(group)
            self._empty(group, now)
            return
        free_at = group.fences.until(now)
        if free_at is not None:
            # Partitions some dropped member may still fetch: nobody is started
            # on anything until its lease has ended (or it registers again).
            log.info("%s waiting %.1fs for the leases of %s", group.describe(), free_at - now,
                     sorted(group.fences.holders()))
            group.rebalance_pending = True
            self.schedule(group, free_at)
            return
        subscriptions = group.subscriptions()
        if group.members:  # an empty group keeps the strategy it had
            group.strategy = choose_strategy([m.strategies for m in group.members.values()])
        counts = {t: n for t, n in self.groups.partitions.items() if any(s.matches(t) for s in subscriptions.values())}
        current = owned_now({m.member_id: m.assigned for m in group.members.values()}, group.recorded_owners)
        target = target_assignment(subscriptions, counts, group.strategy, current)
        running = {m.member_id: m.running for m in group.members.values() if m.connected}
        reset = self._resets.pop(group.name, None)
        reason = (rebalance_reason(target, group.recorded_owners, running) or self._membership_changed(group)
                  or ("an operator resets offsets" if reset is not None else None))
        if reason is None:
            self.history.nothing_to_do(group.name)
            if group.phase is not GroupPhase.STABLE:
                group.transition(GroupPhase.REBALANCING)
                group.transition(GroupPhase.STABLE)
            self._succeeded(group)
            return
        plan = plan_handoff(target, running, eager=self.config.rebalance_protocol == "eager")
        if reset is not None:
            plan = restart_partitions(plan, target, running, frozenset(reset.offsets))
        group.transition(GroupPhase.REBALANCING)
        round_ = self._rounds[group.name] = Round(started=now, phase=RoundPhase.PERSISTING,
                                                  generation=group.generation + 1, target=target, plan=plan,
                                                  reset=reset)
        self.history.began(group, round_, reason, running, now)
        log.info("%s rebalancing to gen %d (%s, %s): %s; %d partition(s) paused",
                 group.describe(), round_.generation, group.strategy, self.config.rebalance_protocol, reason,
                 len(plan.paused))
        # Persist the new generation, who takes part and who runs what,
        # before anyone is told: a successor fences all of it.
        state = layout.GroupState(
            round_.generation, group.strategy,
            {m: tuple(sorted(tps)) for m, tps in target.items()},
            lease_ms=max((m.session_timeout_ms for m in group.members.values()), default=0),
            running={m.member_id: tuple(sorted(m.may_run)) for m in group.members.values() if m.may_run},
            clients={m.member_id: layout.MemberClient(m.host, m.client_id, m.is_static, m.session_timeout_ms,
                                                      m.client_kind)
                     for m in group.members.values()},
            proofs={m.member_id: m.proof for m in group.members.values() if m.proof},
        )
        round_.persisted_members = frozenset(state.assignment) | frozenset(state.running)
        self.out.ask(partial(WriteGroupState, group=group.name, state=state, exists=group.state_exists),
                     partial(self._state_written, group, round_))

    @staticmethod
    def _membership_changed(group: Group) -> Optional[str]:
        """Why the persisted state must be rewritten although nobody's
        partitions change: it names members that have gone (or not those
        that came), as when the last member leaves, or one that ran nothing."""
        if group.persisted_members is None:
            return "the persisted state is not known"
        gone = sorted(group.persisted_members - set(group.members))
        if gone:
            return f"member(s) {', '.join(gone)} gone"
        came = sorted(set(group.members) - group.persisted_members)
        return f"member(s) {', '.join(came)} joined" if came else None

    def _owners_read(self, group: Group, round_: Round, owners, error, now: float) -> None:
        if error is not None:
            self._end(group, round_, now, f"reading the owners failed: {describe(error)}")
            return
        del self._rounds[group.name]
        group.recorded_owners = owners
        self._begin(group, now)

    def _state_written(self, group: Group, round_: Round, _result, error, now: float) -> None:
        if error is not None:
            group.state_exists = None  # it may have been written after all
            group.persisted_members = None
            self._end(group, round_, now, f"writing the group state failed: {describe(error)}")
            return
        group.state_exists = True
        group.persisted_members = round_.persisted_members
        group.generation = round_.generation
        for member in group.members.values():
            member.assigned = round_.target.get(member.member_id, frozenset())
        plan = round_.plan
        round_.phase = RoundPhase.STOPPING
        self.history.pausing(group.name, round_, now)
        # A member that left meanwhile stopped with its connection; it needs no Stop.
        self._send_all(group, round_, plan.revoke, lambda partitions: wire.StopRequest(
            coordinator_epoch=self.office.epoch, generation=group.generation, revoke_all=plan.revoke_all,
            partitions=tuple(TopicPartition(t, p) for t, p in sorted(partitions))), self._stopped, now)

    def _send_all(self, group: Group, round_: Round, per_member: Mapping[str, frozenset[TopicPartition]],
                  make_request: Callable, on_answer: Callable, now: float) -> None:
        """Send one request per member of ``per_member`` still connected; the
        round moves on once every one is answered or has failed."""
        round_.sending = True
        for member_id, partitions in per_member.items():
            member = group.members.get(member_id)
            if member is None or not member.connected or member.leaving:
                continue  # it stops everything with its connection, or has already
            if round_.phase is RoundPhase.STARTING:
                member.starting = partitions  # from now on it may run them, from the committed offsets:
                group.fences.claimed(partitions)  # what earlier holders would hand over is stale
            round_.waiting.add(member_id)
            self.requests.request(member, make_request(partitions), self.config.rebalance_timeout_ms / 1000.0,
                                  partial(on_answer, group, round_, partitions),
                                  partial(self._step_failed, group, round_), now)
        round_.sending = False
        self._advance(group, round_, now)

    def _step_failed(self, group: Group, round_: Round, member: Member, why: str, now: float) -> None:
        round_.failure = round_.failure or f"member {member.member_id}: {why}"
        round_.waiting.discard(member.member_id)
        self._advance(group, round_, now)

    def _stopped(self, group: Group, round_: Round, partitions, member: Member, answer, now: float) -> None:
        if self._step_answered(round_, member, answer, wire.StopResponse, "stop", now):
            # Judged against what we asked it to stop, not what it runs now: a
            # leave read meanwhile may have emptied that already.
            self.offsets.accept(group, member, wire.offsets_of(answer.offsets), owned=partitions)
            member.running = member.running - partitions
        self._advance(group, round_, now)

    def _started(self, group: Group, round_: Round, partitions, member: Member, answer, now: float) -> None:
        if self._step_answered(round_, member, answer, wire.RestartFetcherResponse, "start", now):
            member.running, member.starting = partitions, frozenset()
        self._advance(group, round_, now)

    def _step_answered(self, round_: Round, member: Member, answer, expected: type, verb: str, now: float) -> bool:
        """Count ``member``'s answer; a wrong or failed one drops the member and fails the round."""
        round_.waiting.discard(member.member_id)
        if isinstance(answer, expected) and answer.error_code == wire.ErrorCode.NONE:
            return True
        round_.failure = round_.failure or f"member {member.member_id} failed to {verb}: {answer}"
        self._remove(member, f"it failed to {verb}: {answer}", now)
        return False

    def _advance(self, group: Group, round_: Round, now: float) -> None:
        """The next step of a round whose requests have all been answered."""
        if round_.sending or round_.waiting or self._rounds.get(group.name) is not round_:
            return
        if round_.failure is not None:
            self._end(group, round_, now, round_.failure)
        elif not self.office.active:
            self._end(group, round_, now, "the ZooKeeper connection is suspended")
        elif round_.phase is RoundPhase.STOPPING:
            round_.phase = RoundPhase.FLUSHING  # offsets from the Stop answers, before anyone restarts
            if round_.reset is not None:  # the operator's offsets replace them
                self.offsets.override(group, round_.reset.offsets)
            self.offsets.flush(group.name, now, [partial(self._stops_written, group, round_)])
        elif round_.phase is RoundPhase.STARTING:
            round_.phase = RoundPhase.RECORDING
            owners = owners_of(round_.target)
            self.out.ask(partial(WriteOwners, group=group.name, owners=owners, previous=group.recorded_owners),
                         partial(self._owners_written, group, round_, owners))

    def _stops_written(self, group: Group, round_: Round, error, now: float) -> None:
        if round_.reset is not None:
            reset, round_.reset = round_.reset, None
            reset.answer(error, now)
        if error is not None:
            self._end(group, round_, now, f"writing the stopped partitions' offsets failed: {describe(error)}")
            return
        starting = frozenset(tp for tps in round_.plan.start.values() for tp in tps)
        unknown = self.offsets.unknown(group.name, starting)
        if unknown:
            round_.phase = RoundPhase.READING
            self.out.ask(partial(ReadOffsets, group=group.name, partitions=unknown),
                         partial(self._start_offsets_read, group, round_, unknown))
        else:
            self._send_starts(group, round_, now)

    def _start_offsets_read(self, group: Group, round_: Round, asked, found, error, now: float) -> None:
        if error is not None:
            self._end(group, round_, now, f"reading committed offsets failed: {describe(error)}")
            return
        self.offsets.learn(group.name, asked, found)
        self._send_starts(group, round_, now)

    def _send_starts(self, group: Group, round_: Round, now: float) -> None:
        if not self.office.active:
            self._end(group, round_, now, "the ZooKeeper connection is suspended")
            return
        # A member dropped since the round began (its Stop skipped) fenced
        # what it may still run: none of that may be started yet.
        starting = frozenset(tp for tps in round_.plan.start.values() for tp in tps)
        free_at = group.fences.until(now, starting)
        if free_at is not None:
            self._end(group, round_, now, f"partitions fenced during the round, for {free_at - now:.1f}s more")
            return
        committed = self.offsets.committed.get(group.name, {})
        round_.phase = RoundPhase.STARTING
        self._send_all(group, round_, round_.plan.start, lambda partitions: wire.StartRequest(
            coordinator_epoch=self.office.epoch, generation=group.generation, strategy=group.strategy,
            partitions=tuple(wire.TopicPartitionOffset(t, p, committed.get((t, p), -1))
                             for t, p in sorted(partitions))), self._started, now)

    def _owners_written(self, group: Group, round_: Round, owners, _result, error, now: float) -> None:
        if error is not None:
            group.recorded_owners = None  # read them again: the write may have been applied
            self._end(group, round_, now, f"writing the owners failed: {describe(error)}")
            return
        group.recorded_owners = owners  # only this coordinator writes them, fenced
        # The members of the round, not of now: one that joined meanwhile runs another round.
        group.transition(GroupPhase.STABLE if round_.target else GroupPhase.EMPTY)
        if not round_.target:
            self._empty(group, now)
        report = RebalanceReport(group.name, round_.generation, len(round_.plan.paused),
                                 sum(len(t) for t in round_.target.values()), now - round_.started)
        self.last = report
        self.metrics.rebalanced(report)
        log.info("%s %s: %d member(s), %d partition(s), %d paused, %.0f ms", group.describe(),
                 group.phase.value, len(round_.target), report.partitions, report.paused, report.seconds * 1000)
        self._end(group, round_, now)

    # -- how a round ends -----------------------------------------------------------------------------

    def _end(self, group: Group, round_: Round, now: float, failure: Optional[str] = None) -> None:
        if self._rounds.get(group.name) is round_:
            del self._rounds[group.name]
        self.history.ended(group, round_, now, failure)
        if round_.reset is not None:  # it failed before the offsets were written: nothing was reset
            reset, round_.reset = round_.reset, None
            reset.answer(wire.RebalanceInProgress(f"the rebalance that was to reset the offsets failed ({failure}); "
                                                  "nothing was reset"), now)
        if failure is None:
            self._succeeded(group)
        else:
            self.metrics.rebalance_failed()
            group.failures += 1
            group.last_error = failure
            log.warning("%s rebalance attempt failed: %s", group.describe(), failure)
            if not self.office.active:
                group.rebalance_pending = True  # runs again when the connection is back
            elif not group.rebalance_pending:
                # Retried for as long as it fails (what runs differs from the
                # target: a dead member's partitions unconsumed), never only
                # on the next change: a fault that outlasts the retries (a
                # ZooKeeper ACL mistake, a quota) must not wedge the group.
                if group.attempts >= self.config.max_rebalance_retries and group.phase is not GroupPhase.FAILED:
                    self._give_up(group)
                self.schedule(group, now + self._retry_backoff(group.attempts))
                group.attempts += 1
        if group.rebalance_pending and self.office.active and group.name not in self._due:
            self.schedule(group, now)  # its timer fired during the round

    def _retry_backoff(self, attempts: int) -> float:
        """Seconds before the next try of a round that failed ``attempts`` + 1
        times in a row: doubling from the backoff (at least MIN_RETRY_BACKOFF_MS,
        or a backoff of 0 would retry a failing write without pause, for ever)."""
        base_ms = max(self.config.rebalance_backoff_ms, MIN_RETRY_BACKOFF_MS)
        backoff_ms = base_ms * 2 ** min(attempts, 32)
        return min(backoff_ms, self.config.max_rebalance_backoff_ms) / 1000.0

    def _succeeded(self, group: Group) -> None:
        group.attempts = 0
        if group.failures:
            self._record_failure(group, None)
        group.failures = 0
        group.last_error = None

    def _give_up(self, group: Group) -> None:
        """The group is FAILED (again: each retry's round takes it out of
        FAILED while it runs); its failure node says why, rewritten only
        when that changes, not at every retry."""
        group.transition(GroupPhase.FAILED)
        attempts = self.config.max_rebalance_retries + 1
        # Visible to `zkcoord groups describe` until a retry succeeds.
        failure = layout.GroupFailure.of(group.generation, attempts, group.last_error or "unknown")
        if failure != group.recorded_failure:
            log.error("%s rebalance FAILED after %d attempts (tried again every %.0fs at most): %s",
                      group.describe(), attempts, self.config.max_rebalance_backoff_ms / 1000.0, group.last_error)
            self._record_failure(group, failure)

    def _record_failure(self, group: Group, failure: Optional[layout.GroupFailure]) -> None:
        """Write ``failure`` to the group's failure node (None: clear it), unless it holds that already."""
        if failure == group.recorded_failure:
            return
        group.recorded_failure = failure
        self.out.ask(partial(WriteGroupFailure, group=group.name, failure=failure),
                     partial(self._failure_recorded, group))

    @staticmethod
    def _failure_recorded(group: Group, _result, error, _now) -> None:
        if error is not None:  # logged either way
            group.recorded_failure = UNKNOWN_FAILURE  # written again next time, whatever it is then
            log.warning("%s could not record its rebalance failure: %s", group.describe(), error)
