"""The member's side of the coordinator protocol as a state machine, without I/O.

:class:`MemberProtocol` decides what a member answers to each request the
coordinator pushes (Ping, Stop, Start), whether it still holds its lease,
and what it hands over when it loses its coordinator. It never reads a
clock, a socket or a thread: the caller (:class:`~zkcoord.member.
membership.GroupMembership`'s network thread, or a unit test) passes the
time in and sends what it is given. Stopping and starting fetching is the
listener's business, called synchronously.

The lease (docs/DESIGN.md, "The lease rule"): a member may deliver records
only until ``T`` (its session timeout) after the instant it sent the answer
*before* the last request it obeyed, or its registration. A request from
the coordinator proves that answer arrived, so the coordinator sent that
request later than the answer left; the coordinator hands a member's
partitions on only ``T`` plus a margin after its own last request to the
member. Dated this way the member's lease always ends first, whatever the
delays of the network, the scheduler or a paused process in between. A
request that sat in a socket past the lease does not renew it.

A member whose connection to its coordinator goes (closed or refused: the
coordinator dead, moving, or cut off) keeps running what it holds, under the
lease it has, while it looks for the coordinator (:meth:`MemberProtocol.keep`),
and registers saying what it kept (RegisterConsumerRequest version 6). The
coordinator lets it keep what it alone may be running, and the lease runs on
from that registration; it refuses the rest, which the member stops. If the
lease ends first, the member stops everything, as when a lease ends under a
coordinator. The coordinator fences a member it lost until its lease has
surely ended, so keeping within the lease is what the lease rule allows
anyway (docs/DESIGN.md, "Keeping partitions through a coordinator's loss").

A machine paused under the lease clock's feet (a virtual machine held by its
hypervisor) is noticed, where it can be, by :class:`~zkcoord.clock.PauseWatch`
over the readings the caller hands to :meth:`MemberProtocol.clocks_read`: the
lease then rests on nothing sent before the pause was seen, and holds again
only once a request proves that an answer sent after it arrived.
"""

from __future__ import annotations

import dataclasses
import enum
import logging
from dataclasses import dataclass
from typing import Optional, Protocol

from zkcoord import wire
from zkcoord.clock import PauseWatch
from zkcoord.errors import ZkcoordError
from zkcoord.records import TopicPartition

log = logging.getLogger(__name__)

NO_OFFSET = -1  # in a Start: no committed offset, apply auto_offset_reset
# Registration refusals worth retrying: the coordinator moved or is starting,
# or our previous connection is still registered until the coordinator sees it close.
RETRIABLE_REGISTRATION = frozenset({
    wire.ErrorCode.NOT_COORDINATOR, wire.ErrorCode.COORDINATOR_NOT_AVAILABLE,
    wire.ErrorCode.CONSUMER_ID_IN_USE, wire.ErrorCode.REBALANCE_IN_PROGRESS,
    wire.ErrorCode.HELD_PARTITIONS_REFUSED,
})


class LeaseExpired(ZkcoordError):
    """No request from the coordinator renewed the member's lease in time:
    it has stopped everything and must register again."""

    retriable = True


class IllegalMemberTransition(ZkcoordError):
    """A member was asked to move between states that do not connect (a bug)."""


class MemberState(enum.Enum):
    """UNREGISTERED: looking for the coordinator; runs nothing, or what it
    keeps under the lease it had (MemberProtocol.keeping).
    REGISTERING: a RegisterConsumerRequest is out; runs nothing, or what it keeps.
    ACTIVE: registered; obeys Ping, Stop and Start while its lease holds.
    LEAVING: stopped everything; a LeaveGroupRequest is out.
    EVICTED: removed for not polling; rejoins once the application polls.
    FAILED: refused in a way retrying cannot fix; the application is told.
    CLOSED: done for good."""

    UNREGISTERED = "unregistered"
    REGISTERING = "registering"
    ACTIVE = "active"
    LEAVING = "leaving"
    EVICTED = "evicted"
    FAILED = "failed"
    CLOSED = "closed"


_ALLOWED = {
    MemberState.UNREGISTERED: {MemberState.REGISTERING, MemberState.EVICTED, MemberState.FAILED,
                               MemberState.CLOSED},
    MemberState.REGISTERING: {MemberState.ACTIVE, MemberState.UNREGISTERED, MemberState.FAILED,
                              MemberState.CLOSED},
    MemberState.ACTIVE: {MemberState.UNREGISTERED, MemberState.LEAVING, MemberState.EVICTED,
                         MemberState.FAILED, MemberState.CLOSED},
    MemberState.LEAVING: {MemberState.CLOSED, MemberState.UNREGISTERED},
    MemberState.EVICTED: {MemberState.UNREGISTERED, MemberState.CLOSED},
    MemberState.FAILED: {MemberState.CLOSED},
    MemberState.CLOSED: set(),
}


@dataclass(frozen=True, order=True)
class Generation:
    """Which coordinator (epoch) and which of its assignments (generation)
    a request comes from. Compared as a pair: a newer epoch outranks any
    generation of an older one."""

    epoch: int
    generation: int


NO_GENERATION = Generation(-1, -1)


class MembershipListener(Protocol):
    def on_start(self, partitions: dict[TopicPartition, int]) -> None:
        """The whole assignment after a change, with start offsets (NO_OFFSET: none committed)."""

    def on_stop(self, partitions: frozenset[TopicPartition]) -> dict[TopicPartition, int]:
        """Stop these partitions; return the next offset to consume for each one known
        (it may first wait for the application, until MemberProtocol.handoff_deadline)."""

    def offsets(self) -> Optional[dict[TopicPartition, int]]:
        """Offsets to report on a ping (None: nothing to commit)."""

    def last_poll_ms_ago(self) -> int:
        """Milliseconds since the application last polled; -1 if never."""


class MemberProtocol:
    """One member's protocol state. Not thread-safe: one thread drives it;
    others may read ``state``, ``assignment``, call :meth:`holds_lease` and
    :meth:`clocks_read` (each is replaced whole, never changed in place)."""

    def __init__(self, registration: wire.RegisterConsumerRequest, listener: MembershipListener):
        self.registration = registration
        self.listener = listener
        self.session_timeout = registration.session_timeout_ms / 1000.0
        self.state = MemberState.UNREGISTERED
        self.generation = NO_GENERATION
        self.assignment: dict[TopicPartition, int] = {}
        # When the answer the lease runs from left (see the module's docstring).
        self._lease_base = float("-inf")
        # When the last answer (or the registration) left: the next lease's base.
        self._answer_sent_at = float("-inf")
        # A pause seen at this instant voids every lease based on an answer sent before it.
        self._void_before = float("-inf")
        self._pauses = PauseWatch()
        self._losing = False  # stopping everything because the coordinator is gone (handoff_deadline)
        # Running what it holds through the loss of its coordinator, under the
        # lease it had, until it is registered again or the lease ends (keep).
        self.keeping = False
        # The epoch and generation of the last Start obeyed: what it holds was
        # got under them (a registration that keeps says so).
        self.held_under = NO_GENERATION
        # Final offsets of partitions stopped under this coordinator: handed
        # to the next one at registration, in case this one never wrote them.
        self.handover: dict[TopicPartition, int] = {}

    # -- states -------------------------------------------------------------------------

    def _transition(self, state: MemberState) -> None:
        if state not in _ALLOWED[self.state]:
            raise IllegalMemberTransition(f"member {self.registration.consumer_id}: "
                                          f"{self.state.value} -> {state.value} is not allowed")
        self.state = state

    @property
    def lease_deadline(self) -> float:
        """When the lease ends on the lease clock (a pause seen since may end it sooner)."""
        return self._lease_base + self.session_timeout

    def holds_lease(self, now: float) -> bool:
        """May the member deliver records at ``now``?"""
        return (self.state is MemberState.ACTIVE or self.keeping) and self._lease_runs(now)

    def _lease_runs(self, now: float) -> bool:
        """Whether the lease, whatever the state, still runs at ``now``."""
        base = self._lease_base  # read once: the network thread may renew it meanwhile
        return now < base + self.session_timeout and base >= self._void_before

    def clocks_read(self, now: float, wall: float) -> bool:
        """Take a reading of the lease clock (``now``) and of the wall clock
        together; True if they show a pause the lease clock did not count.
        Then the lease is void from ``now`` on: an answer sent before may have
        left longer ago than the lease clock says, and the coordinator may be
        done waiting for this member. Nothing is stopped: the member delivers
        nothing until a request proves that an answer sent after ``now``
        arrived (the second request read from now on, at the latest: the first
        may prove only an answer from before); a coordinator that has dropped
        the member sends none, and the lease ends on its own."""
        paused = self._pauses.observe(now, wall)
        if not paused:
            return False
        self._void_before = max(self._void_before, now)
        log.warning("member %s: the wall clock gained %.3fs on the lease clock: the machine was paused "
                    "(or its clock stepped); no records until the coordinator renews the lease",
                    self.registration.consumer_id, paused)
        return True

    def handoff_deadline(self, now: float) -> float:
        """Until when the member may wait, before it reports what it stopped,
        for its application to finish the records it holds of them (Consumer.
        on_stop). Obeying a Stop: while the lease has half a session timeout
        left, so that the coordinator's next request (a ping comes within a
        third of one after the answer) still finds it held. Having lost its
        coordinator: half a session timeout from now, lease or not (no request
        is coming to renew anything; the records were handed out under the
        lease, and finishing them hands out nothing). The wait only delays
        its registration with the next coordinator, which keeps the member's
        partitions for it a session timeout and more past its lease
        (docs/DESIGN.md): a failover with live members stays exactly once.
        Otherwise, not at all."""
        if self._losing:
            return now + self.session_timeout / 2
        if self.state is not MemberState.ACTIVE:
            return now
        return max(now, self.lease_deadline - self.session_timeout / 2)

    # -- registration -------------------------------------------------------------------

    def register(self, now: float) -> wire.RegisterConsumerRequest:
        """The registration to send at ``now`` (taken before sending): the
        offsets of what it stopped, and what it keeps, if anything."""
        self.check_lease(now)
        self._transition(MemberState.REGISTERING)
        self._answer_sent_at = now
        held = tuple(TopicPartition(t, p) for t, p in sorted(self.assignment)) if self.keeping else ()
        return dataclasses.replace(self.registration, offsets=wire.offset_entries(self.handover), held=held,
                                   held_epoch=self.held_under.epoch if held else -1,
                                   held_generation=self.held_under.generation if held else -1)

    def registered(self, answer: wire.RegisterConsumerResponse, now: Optional[float] = None) -> None:
        """Take the coordinator's answer, read at ``now`` (None: at once);
        raises the refusal, if it is one. A refusal of some of what it keeps
        stops those (their offsets handed over at the next registration); an
        acceptance read after the lease it kept them under ended stops
        everything and raises LeaseExpired: the coordinator counts on it
        running them, but the lease may not be renewed by an answer that late
        (the member registers again, holding nothing)."""
        if answer.error_code != wire.ErrorCode.NONE:
            error = wire.error_for(answer.error_code, answer.error_message)
            if answer.error_code == wire.ErrorCode.HELD_PARTITIONS_REFUSED:
                self._give_up_refused(frozenset((tp.topic, tp.partition) for tp in answer.refused))
            if answer.error_code in RETRIABLE_REGISTRATION:
                self._transition(MemberState.UNREGISTERED)
            else:
                self.fail()
            raise error
        if self.keeping and now is not None and not self._lease_runs(now):
            self.lost()
            raise LeaseExpired(f"the registration was answered after the lease of the partitions kept had ended "
                               f"({self.session_timeout:.1f}s); everything stopped")
        self._transition(MemberState.ACTIVE)
        self._observe_epoch(answer.coordinator_epoch)
        self._lease_base = self._answer_sent_at
        self.keeping = False  # last: the application thread never sees a moment without the lease
        self.handover = {}

    def _give_up_refused(self, refused: frozenset[TopicPartition]) -> None:
        """Stop what the coordinator would not let it keep, as when its coordinator is lost."""
        self._stop_without_coordinator(refused & frozenset(self.assignment))
        log.info("member %s: the coordinator did not let it keep %d partition(s); stopped",
                 self.registration.consumer_id, len(refused))

    def _observe_epoch(self, epoch: int) -> None:
        if epoch > self.generation.epoch:
            self.generation = Generation(epoch, -1)

    # -- requests -----------------------------------------------------------------------

    def answer(self, request: wire.Message, now: float) -> wire.Message:
        """The answer to a request received by ``now``, to be sent at once.

        Raises LeaseExpired (the member has stopped everything) or the
        WireError to send back before closing (a stale epoch or generation, a
        message a coordinator does not send).
        """
        if self.state is not MemberState.ACTIVE:
            raise wire.IllegalState(f"a {type(request).__name__} reached a member that is {self.state.value}")
        if isinstance(request, wire.ErrorResponse):
            raise wire.error_for(request.error_code, request.message)
        if not isinstance(request, (wire.PingRequest, wire.StopRequest, wire.StartRequest)):
            raise wire.IllegalState(f"a coordinator does not send {type(request).__name__}")
        self.check_lease(now)
        self._check_authority(request)
        # The request proves our last answer arrived: the lease runs from when it left.
        self._lease_base = self._answer_sent_at
        self._answer_sent_at = now
        if isinstance(request, wire.PingRequest):
            return self._ping()
        if isinstance(request, wire.StopRequest):
            return self._stop(request)
        return self._start(request)

    def check_lease(self, now: float) -> None:
        """Raise LeaseExpired, having stopped everything, if the lease ran out
        by ``now`` (or, for partitions kept through the loss of the
        coordinator, if a pause seen since voided it: no request is coming to
        renew it before it is registered again)."""
        if (self.state is MemberState.ACTIVE and now >= self.lease_deadline) or (
                self.keeping and not self._lease_runs(now)):
            self.lost()
            raise LeaseExpired(f"no request from the coordinator renewed the lease "
                               f"within {self.session_timeout:.1f}s")

    def _check_authority(self, request) -> None:
        if request.coordinator_epoch < self.generation.epoch:
            raise wire.StaleEpoch(f"request from coordinator epoch {request.coordinator_epoch}; "
                                  f"epoch {self.generation.epoch} has been seen")
        self._observe_epoch(request.coordinator_epoch)
        if isinstance(request, (wire.StopRequest, wire.StartRequest)):
            if request.generation < self.generation.generation:
                raise wire.StaleGeneration(f"generation {request.generation} is older than "
                                           f"{self.generation.generation}")
            self.generation = Generation(request.coordinator_epoch, request.generation)

    def _ping(self) -> wire.PingResponse:
        offsets = self.listener.offsets()
        if offsets is not None:
            offsets = wire.offset_entries({tp: o for tp, o in offsets.items() if tp in self.assignment})
        return wire.PingResponse(offsets=offsets, last_poll_ms_ago=self.listener.last_poll_ms_ago())

    def _stop(self, request: wire.StopRequest) -> wire.StopResponse:
        if request.revoke_all:
            revoked = frozenset(self.assignment)
        else:
            revoked = frozenset((tp.topic, tp.partition) for tp in request.partitions) & frozenset(self.assignment)
        final = self._stop_partitions(revoked)
        return wire.StopResponse(coordinator_epoch=self.generation.epoch, generation=self.generation.generation,
                                 offsets=wire.offset_entries(final))

    def _start(self, request: wire.StartRequest) -> wire.RestartFetcherResponse:
        # The whole assignment after the change. Partitions we run must stay
        # in it: only a Stop takes a partition away.
        granted = {(tp.topic, tp.partition): tp.offset for tp in request.partitions}
        dropped = set(self.assignment) - set(granted)
        if dropped:
            log.error("member %s: Start drops %s without a Stop", self.registration.consumer_id, sorted(dropped))
            return wire.RestartFetcherResponse(error_code=wire.ErrorCode.ILLEGAL_STATE,
                                               coordinator_epoch=self.generation.epoch,
                                               generation=self.generation.generation)
        self.assignment = granted
        self.held_under = self.generation
        # A partition started again is no longer stopped: its final offset
        # from the earlier Stop would hand over an offset it has run past (or,
        # after a forced reset, one above where it restarted).
        self.handover = {tp: o for tp, o in self.handover.items() if tp not in granted}
        self.listener.on_start(dict(granted))
        return wire.RestartFetcherResponse(coordinator_epoch=self.generation.epoch,
                                           generation=self.generation.generation)

    def _stop_without_coordinator(self, partitions: frozenset[TopicPartition]) -> None:
        """Stop ``partitions`` with no coordinator to answer (handoff_deadline: the application's wait)."""
        self._losing = True
        try:
            self._stop_partitions(partitions)
        finally:
            self._losing = False

    def _stop_partitions(self, partitions: frozenset[TopicPartition]) -> dict[TopicPartition, int]:
        if not partitions:
            return {}
        self.assignment = {tp: o for tp, o in self.assignment.items() if tp not in partitions}
        final = self.listener.on_stop(partitions)
        self.handover = {**self.handover, **final}
        return final

    # -- endings ------------------------------------------------------------------------

    def keep(self, now: float) -> bool:
        """The connection to the coordinator is gone (closed or refused), the
        lease and the member untouched: keep running what it holds while the
        lease it has holds, and register saying so. Stops everything instead
        (lost) if the lease does not hold at ``now`` (run out, or void after
        a pause), or for a static member (a static id may be taken over by
        another process, so the coordinator lets it keep nothing). True if it keeps."""
        if (self.assignment and not self.registration.is_static and self._lease_runs(now)
                and self.state in (MemberState.ACTIVE, MemberState.REGISTERING, MemberState.UNREGISTERED)):
            if not self.keeping:
                log.info("member %s lost its coordinator; it keeps %d partition(s) for up to %.1fs, under its lease",
                         self.registration.consumer_id, len(self.assignment), self.lease_deadline - now)
            self.keeping = True  # first: the application thread never sees a moment without the lease
            if self.state is not MemberState.UNREGISTERED:
                self._transition(MemberState.UNREGISTERED)
            return True
        self.lost()
        return False

    def lost(self, evicted: bool = False) -> None:
        """The coordinator is gone (connection closed, lease out, refused):
        stop everything, keep the final offsets for the next registration."""
        self.keeping = False
        self._stop_without_coordinator(frozenset(self.assignment))
        if self.state in (MemberState.ACTIVE, MemberState.REGISTERING):
            self._transition(MemberState.EVICTED if evicted else MemberState.UNREGISTERED)

    def polled_again(self) -> None:
        """The application polled after an eviction: the member may rejoin."""
        self._transition(MemberState.UNREGISTERED)

    def leave(self) -> wire.LeaveGroupRequest:
        """Stop everything and say goodbye with the final offsets."""
        self._transition(MemberState.LEAVING)
        final = self._stop_partitions(frozenset(self.assignment))
        return wire.LeaveGroupRequest(offsets=wire.offset_entries(final))

    def fail(self) -> None:
        """Something retrying cannot fix (a refusal, a bug): stop everything for good."""
        self.keeping = False
        self._stop_partitions(frozenset(self.assignment))
        if self.state is not MemberState.CLOSED:
            self.state = MemberState.FAILED  # from anywhere: the application is told

    def close(self) -> None:
        self.keeping = False
        self._stop_partitions(frozenset(self.assignment))
        if self.state is not MemberState.CLOSED:
            self.state = MemberState.CLOSED  # from anywhere: the application closed it
