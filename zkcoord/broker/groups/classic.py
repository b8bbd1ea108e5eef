"""A stock Kafka client in a zkcoord group, as the classic group protocol
(JoinGroup, SyncGroup, Heartbeat, OffsetCommit, LeaveGroup) sees it: the
decisions, without I/O or clocks.

The zkcoord coordinator decides the assignment and pushes it as Stop and
Start (seed 001). A stock client cannot be pushed to; it asks. So
:class:`ClassicMember` turns what it holds for one client (member.py) into
the answers of the classic protocol:

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
- a client that says nothing for its session timeout (told to rejoin or
  not), or that was told to rejoin and did not within its rebalance timeout,
  is gone (Kafka's rules): by then it has dropped its partitions by its own timer.

Every method takes ``now`` (seconds, any monotonic origin) where time matters.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from kafka import errors as kafka_errors

from zkcoord import wire

from zkcoord.broker.groups import protocols
from zkcoord.broker.groups.member import ILLEGAL_GENERATION, NONE, UNKNOWN_MEMBER_ID, BridgedMember, Phase

__all__ = ["ClassicMember", "ILLEGAL_GENERATION", "NONE", "UNKNOWN_MEMBER_ID", "Phase"]

REBALANCE_IN_PROGRESS = kafka_errors.RebalanceInProgressError.errno

# The leader id every member is told: none of them leads, the coordinator
# assigns, so every client sends an empty SyncGroup and takes what it gets.
COORDINATOR_LEADS = "zkcoord-coordinator"


@dataclass
class ClassicMember(BridgedMember):
    protocol_name: str = "range"
    # Every protocol name the client offered, for Kafka's rule on who may join
    # whom (protocols.check_shares_protocol).
    offered: tuple[str, ...] = ()
    subscription: bytes = b""
    # What the last SyncGroup handed over, for a retry of it.
    given: frozenset = frozenset()

    @property
    def cooperative(self) -> bool:
        return protocols.is_cooperative(self.protocol_name)

    @property
    def client_kind(self) -> str:
        """What its registration tells the coordinator it is, for operators."""
        return wire.CLASSIC_COOPERATIVE if self.cooperative else wire.CLASSIC_EAGER

    # -- what the client asks ---------------------------------------------------------

    def heartbeat(self, generation: int, now: float) -> int:
        if self.gone:
            return UNKNOWN_MEMBER_ID
        self.last_heard = now
        self.heard_heartbeat(now)
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
        if owned is not None and (self.cooperative or not protocols.is_known(self.protocol_name)):
            # Under a name zkcoord does not know, the client is served as an
            # eager one, yet its style is not known: what it says it still owns
            # is believed (an eager client owns nothing when it joins).
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
            return NONE, self.given  # a retry: its answer was lost
        given = self.given = self.target()
        # A cooperative client keeps fetching what it held until it sees the
        # assignment; an eager one held nothing. Either way it may now fetch both.
        self.holding = self.holding | given
        self.phase = Phase.STABLE
        if self.needs_rejoin():
            self._ask_rejoin(now)
        return NONE, given

    def deadline(self) -> float:
        if self.phase is Phase.SYNCING:
            # Its JoinGroup was answered at once: the SyncGroup follows within
            # the session timeout as a heartbeat would (and the rebalance
            # timeout, Kafka's bound on a pending sync).
            return self.last_heard + min(self.session_timeout_ms, self.rebalance_timeout_ms) / 1000.0
        return super().deadline()

