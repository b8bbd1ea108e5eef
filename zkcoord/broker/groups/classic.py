"""A stock Kafka client in a zkcoord group, as the classic group protocol
(JoinGroup, SyncGroup, Heartbeat, OffsetCommit, LeaveGroup) sees it: the
decisions, without I/O or clocks.

The zkcoord coordinator decides the assignment and pushes it as Stop and
Start (seed 001). A stock client cannot be pushed to; it asks. So
:class:`ClassicMember` keeps, for one client, what the coordinator assigned
(``assignment``), what the client may be fetching (``holding``) and what
the coordinator asked it to give up (``revoking``), and turns them into the
answers of the classic protocol:

- a Stop makes the client's next Heartbeat answer REBALANCE_IN_PROGRESS;
- a revocation is confirmed only once the client can no longer be fetching
  the partition: an eager client (range, roundrobin) has dropped everything
  when it sends JoinGroup; a cooperative one (cooperative-sticky) says in its
  JoinGroup which partitions it still owns. Only then does the Stop get its
  answer, so nobody else is started on the partition before this client let
  it go (Stop before Start, docs/DESIGN.md);
- SyncGroup hands over the coordinator's assignment minus what is being
  revoked, and a Start that grows the assignment asks the client to join again;
- offsets are taken from the partitions the client may be fetching only, from
  its current generation only;
- a client that says nothing for its session timeout, or that was told to
  rejoin and did not within its rebalance timeout, is gone (Kafka's rules):
  by then it has dropped its partitions by its own timer.

Every method takes ``now`` (seconds, any monotonic origin) where time matters.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Mapping, Optional

from kafka import errors as kafka_errors

from zkcoord.records import TopicPartition

NONE = kafka_errors.NoError.errno
ILLEGAL_GENERATION = kafka_errors.IllegalGenerationError.errno
UNKNOWN_MEMBER_ID = kafka_errors.UnknownMemberIdError.errno
REBALANCE_IN_PROGRESS = kafka_errors.RebalanceInProgressError.errno

# The classic protocol's assignor names, the client's rebalance style, and
# the zkcoord strategy that assigns the same way.
EAGER_PROTOCOLS = {"range": "range", "roundrobin": "roundrobin", "sticky": "sticky"}
COOPERATIVE_PROTOCOLS = {"cooperative-sticky": "sticky"}
# The leader id every member is told: none of them leads, the coordinator
# assigns, so every client sends an empty SyncGroup and takes what it gets.
COORDINATOR_LEADS = "zkcoord-coordinator"


class UnsupportedProtocols(ValueError):
    """None of the client's assignors is one zkcoord can stand in for."""


def choose_protocol(offered: list[str]) -> str:
    """The first of the client's assignors (in its order of preference) that
    zkcoord assigns like; raises UnsupportedProtocols."""
    for name in offered:
        if name in EAGER_PROTOCOLS or name in COOPERATIVE_PROTOCOLS:
            return name
    raise UnsupportedProtocols(
        f"none of the client's assignors {offered} is served; zkcoord assigns like "
        f"{sorted({**EAGER_PROTOCOLS, **COOPERATIVE_PROTOCOLS})}")


def strategies_for(offered: list[str]) -> tuple[str, ...]:
    """The zkcoord strategies matching the client's assignors, in its order, without repeats."""
    out: list[str] = []
    for name in offered:
        strategy = EAGER_PROTOCOLS.get(name) or COOPERATIVE_PROTOCOLS.get(name)
        if strategy is not None and strategy not in out:
            out.append(strategy)
    return tuple(out)


class Phase(enum.Enum):
    """JOINING: a JoinGroup is being answered. SYNCING: joined; its SyncGroup
    is awaited. STABLE: synced; heartbeats keep it. GONE: left or expired;
    every request gets UNKNOWN_MEMBER_ID."""

    JOINING = "joining"
    SYNCING = "syncing"
    STABLE = "stable"
    GONE = "gone"


@dataclass
class ClassicMember:
    member_id: str
    protocol_name: str
    topics: tuple[str, ...]
    session_timeout_ms: int
    rebalance_timeout_ms: int
    instance_id: Optional[str] = None
    client_id: str = ""
    client_host: str = ""
    phase: Phase = Phase.JOINING
    generation: int = 0
    # The coordinator's assignment (its last Start, less its Stops), with start offsets.
    assignment: dict = field(default_factory=dict)
    # Stopped by the coordinator, not yet let go by the client.
    revoking: frozenset = frozenset()
    # What the client may be fetching now.
    holding: frozenset = frozenset()
    committed: dict = field(default_factory=dict)
    last_heard: float = 0.0
    # When the client was first told to rejoin (None: it has not been).
    rejoin_asked_at: Optional[float] = None
    subscription: bytes = b""

    @property
    def cooperative(self) -> bool:
        return self.protocol_name in COOPERATIVE_PROTOCOLS

    @property
    def gone(self) -> bool:
        return self.phase is Phase.GONE

    def target(self) -> frozenset:
        """What a SyncGroup hands the client now."""
        return frozenset(self.assignment) - self.revoking

    def needs_rejoin(self) -> bool:
        return self.phase is Phase.STABLE and (bool(self.revoking) or self.holding != self.target())

    # -- what the coordinator pushes (through the member's registration) -------------

    def stop(self, partitions: frozenset, now: float) -> frozenset:
        """The coordinator takes ``partitions`` away. Returns those already let
        go (the rest are confirmed by later calls' results or by ``released``)."""
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

    # -- what the client asks ---------------------------------------------------------

    def heartbeat(self, generation: int, now: float) -> int:
        if self.gone:
            return UNKNOWN_MEMBER_ID
        self.last_heard = now
        if generation != self.generation:
            return ILLEGAL_GENERATION
        if self.phase is not Phase.STABLE or self.needs_rejoin():
            self._ask_rejoin(now)
            return REBALANCE_IN_PROGRESS
        return NONE

    def join(self, owned: Optional[frozenset], now: float) -> frozenset:
        """A JoinGroup from this member. ``owned``: the partitions a cooperative
        client says it still owns (None: the subscription does not say).
        Returns the revocations this confirms. The answer's generation is the
        new ``generation``."""
        self.last_heard = now
        if self.cooperative and owned is not None:
            self.holding &= frozenset(owned)
        elif not self.cooperative:
            self.holding = frozenset()  # an eager client revokes everything before it joins
        self.phase = Phase.SYNCING
        self.generation += 1
        self.rejoin_asked_at = None
        return self._released()

    def sync(self, generation: int, now: float) -> tuple[int, frozenset]:
        """A SyncGroup: the error, and the partitions to hand over."""
        if self.gone:
            return UNKNOWN_MEMBER_ID, frozenset()
        self.last_heard = now
        if generation != self.generation or self.phase is Phase.JOINING:
            return ILLEGAL_GENERATION, frozenset()
        if self.phase is Phase.STABLE:
            return REBALANCE_IN_PROGRESS, frozenset()
        given = self.target()
        # A cooperative client keeps fetching what it held until it sees the
        # assignment; an eager one held nothing. Either way it may now fetch both.
        self.holding = self.holding | given
        self.phase = Phase.STABLE
        if self.needs_rejoin():
            self._ask_rejoin(now)
        return NONE, given

    def commit_error(self, generation: int, tp: TopicPartition, now: float) -> int:
        """Whether this member may commit an offset of ``tp`` now."""
        if self.gone:
            return UNKNOWN_MEMBER_ID
        self.last_heard = now
        if generation != self.generation:
            return ILLEGAL_GENERATION
        if tp not in self.holding and tp not in self.revoking:
            return ILLEGAL_GENERATION  # not this member's partition in this generation
        return NONE

    def commit(self, tp: TopicPartition, offset: int) -> None:
        self.committed[tp] = offset

    def leave(self) -> frozenset:
        """The client left: it fetches nothing. Returns the revocations confirmed."""
        self.phase = Phase.GONE
        self.holding = frozenset()
        return self._released()

    # -- time ------------------------------------------------------------------------

    def deadline(self) -> float:
        """When the member is gone unless it is heard from."""
        if self.rejoin_asked_at is not None and self.phase is Phase.STABLE:
            return max(self.last_heard + self.session_timeout_ms / 1000.0,
                       self.rejoin_asked_at + self.rebalance_timeout_ms / 1000.0)
        if self.phase is Phase.SYNCING:
            return self.last_heard + self.rebalance_timeout_ms / 1000.0
        return self.last_heard + self.session_timeout_ms / 1000.0

    def expire(self, now: float) -> Optional[frozenset]:
        """If the member is past its deadline at ``now``, it is gone: the
        revocations that confirms; else None."""
        if self.gone or self.phase is Phase.JOINING or now < self.deadline():
            return None
        return self.leave()
