"""The office: whether this coordinator may act, and the proof that it may.

Owns the coordinator's state (LOADING, ACTIVE, SUSPENDED, DEPOSED, moved
only through ``become``), the ZooKeeper connection as last reported, and the
office's lease: requests go out only within two thirds of the ZooKeeper
session timeout of the start of a fenced round trip that succeeded
(lease.py's ``office_end``), so none leaves after a successor may have been
elected. After a lapse the office comes back only with a second round trip,
begun a renewal after the first ended (docs/DESIGN.md). A pause of the
machine that the lease clock did not count voids every round trip begun
before it was seen.
"""

from __future__ import annotations

import enum
import logging
from functools import partial
from typing import Callable, Optional

from zkcoord.coordinator.actions import ProveOffice, SetTimer
from zkcoord.coordinator.core.outbox import Outbox
from zkcoord.coordinator.group import IllegalTransition
from zkcoord.coordinator.lease import OFFICE_RENEWAL_SHARE, office_end
from zkcoord.errors import describe

log = logging.getLogger(__name__)

OFFICE_TIMER = ("office",)
# After a lapse, the second office round trip (the first does not bring the office back).
SECOND_PROOF_TIMER = ("second-proof",)


class CoordinatorState(enum.Enum):
    """LOADING: elected, reading what its predecessor left: it admits nobody
    and starts no round (nothing it decides may ignore those fences).
    ACTIVE: in office with a working ZooKeeper connection, the office proven
    by a recent round trip.
    SUSPENDED: the connection is suspended, or the office is not proven
    (no round trip succeeded lately: the session may have ended unnoticed):
    nothing is sent (so the members' leases run out), started or written;
    answers are still taken.
    DEPOSED: out of office (a newer epoch wrote, the session ended, or the
    server resigned): it does nothing more."""

    LOADING = "loading"
    ACTIVE = "active"
    SUSPENDED = "suspended"
    DEPOSED = "deposed"


_STATE_MOVES = {
    CoordinatorState.LOADING: {CoordinatorState.ACTIVE, CoordinatorState.SUSPENDED, CoordinatorState.DEPOSED},
    CoordinatorState.ACTIVE: {CoordinatorState.SUSPENDED, CoordinatorState.DEPOSED},
    CoordinatorState.SUSPENDED: {CoordinatorState.ACTIVE, CoordinatorState.DEPOSED},
    CoordinatorState.DEPOSED: set(),
}


class Office:
    def __init__(self, epoch: int, zk_session_timeout_ms: int, out: Outbox, on_active: Callable[[float], None]):
        """``on_active(now)``: the coordinator has become ACTIVE again (what
        waited for it may run)."""
        self.epoch = epoch
        self.zk_session_timeout_ms = zk_session_timeout_ms
        self.out = out
        self._on_active = on_active
        self.state = CoordinatorState.LOADING
        self._connected = True  # the ZooKeeper connection, as last reported
        self.until = float("-inf")  # requests go out only before this
        self._proving: Optional[float] = None  # when the office round trip in flight began
        self._proof_wanted = False  # another round trip was due while that one was in flight
        self._proven_at = float("-inf")  # when the latest round trip that succeeded began
        # After a lapse, the first round trip that succeeded (began, ended):
        # the office comes back only with a second one begun S/4 after it ended.
        self._first_after_lapse: Optional[tuple[float, float]] = None
        # A round trip begun before this proves nothing: the machine was seen
        # paused then, for longer than the lease clock counted (paused).
        self._void_before = float("-inf")
        self.started_at = float("inf")  # when it started (start)

    # -- the state machine ---------------------------------------------------------------

    @property
    def active(self) -> bool:
        return self.state is CoordinatorState.ACTIVE

    @property
    def deposed(self) -> bool:
        return self.state is CoordinatorState.DEPOSED

    @property
    def loading(self) -> bool:
        return self.state is CoordinatorState.LOADING

    def become(self, state: CoordinatorState) -> None:
        if state is self.state:
            return
        if state not in _STATE_MOVES[self.state]:
            raise IllegalTransition(f"coordinator epoch {self.epoch}: {self.state.value} -> {state.value} "
                                    "is not allowed")
        log.info("coordinator epoch %d: %s -> %s", self.epoch, self.state.value, state.value)
        self.state = state

    # -- events --------------------------------------------------------------------------

    def loaded(self, proven_at: float) -> None:
        """The reads of a takeover followed a round trip begun at ``proven_at``."""
        if proven_at >= self._void_before:
            self._proven_from(proven_at)

    def start(self, now: float) -> None:
        """Loaded: ACTIVE if the office is proven (else SUSPENDED until it is), renewed from now on."""
        self.become(CoordinatorState.ACTIVE if self._may_act(now) else CoordinatorState.SUSPENDED)
        self.renewal_due(now)  # loading may have taken much of the office proven before it
        self.started_at = now

    def session_suspended(self) -> None:
        self._connected = False
        if self.state is CoordinatorState.ACTIVE:
            log.warning("ZooKeeper connection suspended: coordinator stops pinging, starting and writing")
            self.become(CoordinatorState.SUSPENDED)

    def session_resumed(self, now: float, granted_ms: Optional[int]) -> None:
        """See CoordinatorCore.session_resumed."""
        self._connected = True
        if granted_ms is not None and granted_ms < self.zk_session_timeout_ms:
            log.warning("coordinator epoch %d: ZooKeeper now grants the session %d ms (was %d ms): the office "
                        "is dated from the smaller", self.epoch, granted_ms, self.zk_session_timeout_ms)
            self.zk_session_timeout_ms = granted_ms
            # The office rests on the latest proof, now dated by the smaller
            # timeout (and never longer than a pause seen since left it).
            self.until = min(self.until, office_end(self._proven_at, granted_ms))
        if self.state is not CoordinatorState.LOADING:
            self.prove(now)
        self._resume(now)

    def machine_paused(self, gained_s: float, now: float) -> None:
        """See CoordinatorCore.machine_paused."""
        if not self.deposed:
            log.warning("coordinator epoch %d: the machine was paused %.1fs that the lease clock did not count; "
                        "the office lapses", self.epoch, gained_s)
            self._void_before = now
            self._first_after_lapse = None
            self.until = min(self.until, now)
            self.check(now)

    def check(self, now: float) -> None:
        """Suspend once the office has lapsed: our session may have expired
        unnoticed (this process paused, say) and a successor been elected."""
        if self.state is CoordinatorState.ACTIVE and now >= self.until:
            log.warning("coordinator epoch %d: office lapsed %.1fs ago (no ZooKeeper round trip lately); "
                        "sending nothing until it is proven again", self.epoch, now - self.until)
            self.become(CoordinatorState.SUSPENDED)
            self.prove(now)

    def renewal_due(self, now: float) -> None:
        """OFFICE_TIMER: a round trip now, the next one a renewal later."""
        self.prove(now)
        self.out.emit(SetTimer(OFFICE_TIMER, now + self._renewal_interval()))

    def prove(self, now: float) -> None:
        """Ask for a round trip (SECOND_PROOF_TIMER too)."""
        if self._proving is not None:
            # One round trip at a time; one asked for meanwhile (a renewal
            # due, a lapse) starts as soon as it ends, not at the next renewal.
            self._proof_wanted = True
        elif self._connected and not self.deposed:  # resuming proves it
            self._proving = now
            self._proof_wanted = False
            self.out.ask(ProveOffice, partial(self._proven, now))

    # -- the proof -------------------------------------------------------------------------

    def _may_act(self, now: float) -> bool:
        return self._connected and now < self.until

    def _resume(self, now: float) -> None:
        if self.state is CoordinatorState.SUSPENDED and self._may_act(now):
            self.become(CoordinatorState.ACTIVE)
            self._on_active(now)

    def _proven(self, began: float, _result, error, now: float) -> None:
        self._proving = None
        if self._proof_wanted:
            self.prove(now)
        if error is not None:
            log.warning("coordinator epoch %d: office round trip failed: %s", self.epoch, describe(error))
            return
        if began < self._void_before:
            return  # begun before a pause was seen: it may have been answered before the pause ended the session
        if began >= self.until:
            # The office had lapsed when this round trip began: it may have
            # reached the leader through a follower that passes the session's
            # heartbeat on late, just before the session expires (DESIGN.md).
            # Only a second round trip, begun S/4 after this one ended (half a
            # tick and more), shows that the session outlived it; the office
            # is dated from the first. A first whose office would have run
            # out before this one began belongs to an earlier lapse (the link
            # went dark again before its second): this one is the first after
            # the lapse under way, never paired with that older one.
            first = self._first_after_lapse
            if first is None or began >= office_end(first[0], self.zk_session_timeout_ms):
                self._first_after_lapse = (began, now)
                self.out.emit(SetTimer(SECOND_PROOF_TIMER, now + self._renewal_interval()))
                log.info("coordinator epoch %d: office round trip after a lapse succeeded; a second one in %.1fs "
                         "brings the office back", self.epoch, self._renewal_interval())
                return
            if began < first[1] + self._renewal_interval():
                return  # begun too soon after the first: the timer asks for the one that counts
            self._first_after_lapse = None
            began = first[0]
        self._proven_from(began)
        self._resume(now)

    def _renewal_interval(self) -> float:
        """Seconds between office round trips; also between the two that end a lapse."""
        return self.zk_session_timeout_ms * OFFICE_RENEWAL_SHARE / 1000.0

    def _proven_from(self, began: float) -> None:
        self._proven_at = max(self._proven_at, began)
        self.until = max(self.until, office_end(began, self.zk_session_timeout_ms))
