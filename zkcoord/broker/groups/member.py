"""What every bridged stock client is, whichever group protocol it speaks:
the coordinator's assignment, what the client may be fetching, what it was
asked to give up, and what it committed (pure; see ``classic`` and
``consumer`` for the two protocols' requests).

The one rule kept here: a partition the coordinator stops is *released*
(its Stop answered) only once the client can no longer be fetching it:
it is not in ``holding``, or the client is gone.

And when to warn a client that its registration's lease runs low
(:func:`lease_warning_s`): early enough that a client heartbeating at its
pace hears it and lets go before the lease ends.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Mapping, Optional

from kafka import errors as kafka_errors

from zkcoord.records import TopicPartition
from zkcoord.security.principal import ANONYMOUS, Principal

NONE = kafka_errors.NoError.errno
ILLEGAL_GENERATION = kafka_errors.IllegalGenerationError.errno
UNKNOWN_MEMBER_ID = kafka_errors.UnknownMemberIdError.errno


# What a client that heard it must let go takes to do it: its application's
# next poll (where Kafka's clients revoke) and its JoinGroup's way to the broker.
LET_GO_S = 1.0
# How late a ping may be, at least, before a client is warned for it.
LATE_PING_S = 0.5
# How many of a classic client's latest intervals between heartbeats say its pace.
HEARTBEATS_KEPT = 3


def lease_warning_s(session_s: float, heartbeat_s: float) -> float:
    """How long before its registration's lease ends a client is told to let
    everything go: its heartbeat interval (it hears the warning with its next
    heartbeat) plus LET_GO_S; at most what the lease has left when a ping is
    a little late, and at least a sixth of the session.

    The registration's lease runs from its answer *before* the last request
    (docs/DESIGN.md, the lease rule) and pings come every third of the
    session, so with every ping on time it still falls to a third of the
    session just before each one. A warning longer than that, less a ping's
    lateness (a twelfth of the session, half a second at least), would ask
    every client to let go at every ping. So a client whose heartbeat
    interval plus LET_GO_S exceeds a quarter of its session (3 s of 10 s,
    Java's and librdkafka's defaults) may hear the warning after the lease
    ended: its fetches are refused from the warning on (fences.py), and what
    it hands out after the lease is only what it had fetched before
    (docs/DESIGN.md, "What a stock member is promised").

    >>> lease_warning_s(10.0, 1.5)   # heard within 1.5 s, a second to let go
    2.5
    >>> lease_warning_s(10.0, 3.0)   # Java's default heartbeat: all a 10 s lease leaves
    2.5
    >>> lease_warning_s(45.0, 3.0)   # their default session: a sixth of it
    7.5
    """
    late = max(session_s / 12, LATE_PING_S)
    return max(session_s / 6, min(session_s / 3 - late, heartbeat_s + LET_GO_S))


class Phase(enum.Enum):
    """JOINING: its first request is being answered. SYNCING (classic only):
    joined, its SyncGroup awaited. STABLE: it has its assignment; heartbeats
    keep it. GONE: left or expired; every request gets UNKNOWN_MEMBER_ID."""

    JOINING = "joining"
    SYNCING = "syncing"
    STABLE = "stable"
    GONE = "gone"


@dataclass
class BridgedMember:
    member_id: str
    topics: tuple[str, ...]
    session_timeout_ms: int
    rebalance_timeout_ms: int
    instance_id: Optional[str] = None
    # A subscription by regular expression (KIP-848's regex), besides or instead of topics.
    pattern: Optional[str] = None
    client_id: str = ""
    client_host: str = ""
    principal: Principal = ANONYMOUS  # who the client authenticated as (SASL): its static id is that principal's
    phase: Phase = Phase.JOINING
    # The classic protocol's generation, or KIP-848's member epoch: what commits must carry.
    generation: int = 0
    # The coordinator's assignment (its last Start, less its Stops), with start offsets.
    assignment: dict = field(default_factory=dict)
    # Stopped by the coordinator, not yet let go by the client.
    revoking: frozenset = frozenset()
    # What the client may be fetching now.
    holding: frozenset = frozenset()
    committed: dict = field(default_factory=dict)
    last_heard: float = 0.0
    # When the client was first asked to give partitions up or take new ones (None: not now).
    rejoin_asked_at: Optional[float] = None
    # The member's registration may have lost its coordinator (its lease is
    # running out): the client is to hold nothing until it is renewed.
    suspended: bool = False
    # The client's heartbeat interval when the broker sets it (KIP-848), else
    # None: then it is judged from the client's latest heartbeats.
    heartbeat_interval_s: Optional[float] = None
    last_heartbeat: Optional[float] = None
    heartbeat_gaps: tuple = ()

    @property
    def gone(self) -> bool:
        return self.phase is Phase.GONE

    def target(self) -> frozenset:
        """The assignment the client is to have now."""
        if self.suspended:
            return frozenset()
        return frozenset(self.assignment) - self.revoking

    def suspend(self, suspended: bool, now: float) -> None:
        """Take everything from the client while its registration's lease is
        in doubt, or give it back once renewed."""
        if suspended != self.suspended:
            self.suspended = suspended
            if self.needs_rejoin():
                self._ask_rejoin(now)

    def heard_heartbeat(self, now: float) -> None:
        """A heartbeat arrived: it says the client's pace."""
        if self.last_heartbeat is not None and now > self.last_heartbeat:
            self.heartbeat_gaps = (*self.heartbeat_gaps, now - self.last_heartbeat)[-HEARTBEATS_KEPT:]
        self.last_heartbeat = now

    def heartbeat_pace_s(self) -> float:
        """How long the client may take to send its next heartbeat: the
        interval the broker set, or the longest of its latest intervals (a
        client paused or starved shows a longer one, and is warned sooner),
        or a third of its session until it has shown one (the most Kafka
        advises)."""
        if self.heartbeat_interval_s is not None:
            return self.heartbeat_interval_s
        if self.heartbeat_gaps:
            return max(self.heartbeat_gaps)
        return self.session_timeout_ms / 3000.0

    def lease_at_risk(self, lease_left_s: float) -> bool:
        """Must the client let go now, its registration's lease having ``lease_left_s`` to run?"""
        return lease_left_s < lease_warning_s(self.session_timeout_ms / 1000.0, self.heartbeat_pace_s())

    def needs_rejoin(self) -> bool:
        """Must the client be told of a change?"""
        return self.phase is Phase.STABLE and (bool(self.revoking) or self.holding != self.target())

    # -- what the coordinator pushes (through the member's registration) -------------

    def stop(self, partitions: frozenset, now: float) -> frozenset:
        """The coordinator takes ``partitions`` away. Returns those already let
        go (the rest are released by later calls)."""
        partitions = frozenset(partitions)
        for tp in partitions:
            self.assignment.pop(tp, None)
        self.revoking |= partitions
        self._ask_rejoin(now)
        return self._released()

    def start(self, assignment: Mapping[TopicPartition, int], now: float) -> None:
        """The coordinator's whole assignment after a change, with start offsets."""
        for tp in assignment:
            if tp not in self.assignment:
                # Granted anew: what this client committed when it last had it is stale.
                self.committed.pop(tp, None)
        self.assignment = dict(assignment)
        if self.needs_rejoin():
            self._ask_rejoin(now)

    def _ask_rejoin(self, now: float) -> None:
        if self.rejoin_asked_at is None and self.phase is Phase.STABLE:
            self.rejoin_asked_at = now

    def _released(self) -> frozenset:
        """Revocations now confirmed: partitions the client can no longer be fetching."""
        done = self.revoking - self.holding if not self.gone else self.revoking
        self.revoking -= done
        return done

    # -- commits -----------------------------------------------------------------------

    def commit_error(self, generation: int, tp: TopicPartition, now: float) -> int:
        """Whether this member may commit an offset of ``tp`` now."""
        if self.gone:
            return UNKNOWN_MEMBER_ID
        self.last_heard = now
        if generation != self.generation:
            return self.stale_error
        if tp not in self.holding and tp not in self.revoking:
            return self.stale_error  # not this member's partition now
        return NONE

    stale_error = ILLEGAL_GENERATION

    def commit(self, tp: TopicPartition, offset: int) -> None:
        self.committed[tp] = offset

    # -- endings -----------------------------------------------------------------------

    def leave(self) -> frozenset:
        """The client left (or is taken as gone): it fetches nothing. Returns the revocations released."""
        self.phase = Phase.GONE
        self.holding = frozenset()
        return self._released()

    def deadline(self) -> float:
        """When the member is gone unless it is heard from: its session timeout
        after it was last heard; a member asked to change has at most its
        rebalance timeout from the request to do it, and goes as soon as it
        falls silent for its session timeout meanwhile (Kafka's rules: a
        client that went elsewhere, to a group's new coordinator broker under
        a new member id, must not leave this one holding its partitions)."""
        silent = self.last_heard + self.session_timeout_ms / 1000.0
        if self.rejoin_asked_at is not None and self.phase is Phase.STABLE:
            return min(silent, self.rejoin_asked_at + self.rebalance_timeout_ms / 1000.0)
        return silent

    def expired(self, now: float) -> bool:
        """Is the member past its deadline at ``now``, to be taken as gone?"""
        return not (self.gone or self.phase is Phase.JOINING or now < self.deadline())

    def expire(self, now: float) -> Optional[frozenset]:
        """If the member is past its deadline at ``now``, it is gone: the
        revocations that releases; else None."""
        return self.leave() if self.expired(now) else None
