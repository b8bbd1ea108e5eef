"""A consumer group as the coordinator holds it: members, generation and phase.

Pure state, no I/O. The phase is an explicit state machine; every change goes
through :meth:`Group.transition`, which refuses moves the design does not have.
"""

from __future__ import annotations

import enum
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Optional

from zkcoord.coordinator.lease import Fences
from zkcoord.coordinator.planner import Subscription
from zkcoord.errors import ZkcoordError
from zkcoord.records import TopicPartition
from zkcoord.security.principal import ANONYMOUS, Principal


# What a group's failure node holds when the coordinator cannot tell: a
# predecessor's may be there, or a write of it failed.
UNKNOWN_FAILURE = "unknown"


class IllegalTransition(ZkcoordError):
    """A group was asked to move between phases that do not connect."""


class GroupPhase(enum.Enum):
    """EMPTY: no members; nothing runs.
    STABLE: every member runs its assignment of the current generation.
    REBALANCING: a rebalance is stopping and starting members.
    FAILED: the last rebalance failed after its retries; it is still tried
    again at the longest backoff, and at once on any change to the group (a
    member, a topic, a partition)."""

    EMPTY = "empty"
    STABLE = "stable"
    REBALANCING = "rebalancing"
    FAILED = "failed"


_ALLOWED = {
    # A rebalance may give up before it changes anything, hence FAILED from
    # EMPTY and STABLE too.
    GroupPhase.EMPTY: {GroupPhase.REBALANCING, GroupPhase.EMPTY, GroupPhase.FAILED},
    GroupPhase.STABLE: {GroupPhase.REBALANCING, GroupPhase.EMPTY, GroupPhase.FAILED},
    GroupPhase.REBALANCING: {GroupPhase.STABLE, GroupPhase.FAILED, GroupPhase.EMPTY, GroupPhase.REBALANCING},
    GroupPhase.FAILED: {GroupPhase.REBALANCING, GroupPhase.EMPTY, GroupPhase.FAILED},
}


@dataclass(eq=False)
class Member:
    """One registered consumer. ``assigned`` is its partitions in the current
    generation; ``running`` what it fetches per our last Start and Stop (empty
    while a static member is away); ``starting`` what a Start still unanswered
    gives it; ``last_sent`` when we last sent it a request (its lease ends
    by then plus its session timeout); ``connection`` is the runtime's handle."""

    member_id: str
    group: str
    subscription: Subscription
    session_timeout_ms: int
    max_poll_interval_ms: int
    auto_commit: bool
    auto_offset_reset: str
    is_static: bool
    strategies: tuple[str, ...]
    connection: Any = None
    assigned: frozenset[TopicPartition] = frozenset()
    running: frozenset[TopicPartition] = frozenset()
    starting: frozenset[TopicPartition] = frozenset()
    connected: bool = True
    last_sent: float = 0.0
    registered_at: float = 0.0
    # The request it has not answered yet, and one waiting behind it: the
    # channel carries one request at a time (seed 001's "channel held").
    outstanding: Any = None
    queued: Any = None
    last_correlation_id: int = 0
    leaving: bool = False  # its leave is being committed; nothing more is sent to it
    # Where it connected from, the client id it gave and what kind of client
    # it is (wire.CLIENT_KINDS; "" if not said), for operators only.
    host: str = ""
    client_id: str = ""
    client_kind: str = ""
    # Who registered it (its credential, its TLS certificate; ANONYMOUS if
    # nothing proved it): only the same principal may take a static id over.
    principal: Principal = ANONYMOUS
    # The proof of the incarnation it registered with (lease.incarnation_proof;
    # "" for none): a registration under its id that shows the same one is
    # this process back, having stopped everything first.
    proof: str = ""

    @property
    def session_timeout(self) -> float:
        return self.session_timeout_ms / 1000.0

    @property
    def may_run(self) -> frozenset[TopicPartition]:
        """What it may be fetching, as far as the coordinator can tell."""
        return self.running | self.starting


@dataclass(eq=False)
class Group:
    name: str
    members: dict[str, Member] = field(default_factory=dict)
    generation: int = 0
    strategy: str = "range"
    phase: GroupPhase = GroupPhase.EMPTY
    rebalance_pending: bool = False  # seed 001's rebalance bit
    failures: int = 0
    last_error: Optional[str] = None
    # Partitions members we dropped may still fetch, until their leases end
    # (after a failover: every member of the last persisted generation).
    fences: Fences = field(default_factory=Fences)
    # /consumers/<group>/owners as last read or written by this coordinator (None: not known).
    # An owner None: a node that could not be decoded, rewritten or deleted by the next round.
    recorded_owners: Optional[dict[TopicPartition, Optional[str]]] = None
    # The state a predecessor persisted, as this coordinator took the group
    # over (a layout.GroupState; None: none, or not to be trusted): while the
    # group is at its generation, what ZooKeeper records of who was given
    # what, against which members back keeping partitions are checked.
    resumed: Any = None
    # Whether its state node exists (None: not known, after a write whose outcome is unknown).
    state_exists: Optional[bool] = False
    # The members its state node names (None: not known). A round runs while
    # this differs from the members, so the node never names one that has gone.
    persisted_members: Optional[frozenset[str]] = frozenset()
    attempts: int = 0  # rebalance rounds failed in a row since the last change asked for one
    # What its failure node holds, as this coordinator wrote it (a
    # GroupFailure; None: none) or UNKNOWN_FAILURE: written only when that changes.
    recorded_failure: Any = UNKNOWN_FAILURE
    # When the first member of a new group joined, while its first round waits for the others.
    forming_since: Optional[float] = None
    # Its nodes are being deleted (no members, no offsets, past its retention): nobody joins meanwhile.
    forgetting: bool = False
    # How many members offer each list of assignment strategies (kept by
    # add_member and remove_member): a registration is checked against each
    # list once, not against each of the thousands of members a group may have.
    strategy_lists: Counter = field(init=False)

    def __post_init__(self) -> None:
        self.strategy_lists = Counter(m.strategies for m in self.members.values())

    def transition(self, phase: GroupPhase) -> None:
        if phase not in _ALLOWED[self.phase]:
            raise IllegalTransition(f"group {self.name}: {self.phase.value} -> {phase.value} is not allowed")
        self.phase = phase

    def add_member(self, member: Member) -> None:
        """``member`` joins, in place of any member of the same id."""
        self.remove_member(member.member_id)
        self.members[member.member_id] = member
        self.strategy_lists[member.strategies] += 1

    def remove_member(self, member_id: str) -> None:
        member = self.members.pop(member_id, None)
        if member is not None:
            self.strategy_lists[member.strategies] -= 1
            if not self.strategy_lists[member.strategies]:
                del self.strategy_lists[member.strategies]

    def subscriptions(self) -> dict[str, Subscription]:
        return {m.member_id: m.subscription for m in self.members.values()}

    def interested_in(self, topic: str) -> bool:
        return any(m.subscription.matches(topic) for m in self.members.values())

    def describe(self) -> str:
        return f"[group {self.name} gen {self.generation}]"
