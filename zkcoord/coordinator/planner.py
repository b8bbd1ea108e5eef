"""The rebalance planner: what a group's assignment should be, and whether to change it.

Seed 001's rebalance(group), steps 1 to 3, as pure functions: compute the
target assignment from the live members and the partitions in ZooKeeper,
then decide whether a rebalance is necessary by comparing it with the
ownership recorded in ZooKeeper and with what each member is actually
running. The runtime carries the decision out (Stop, Start, write owners).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Optional

from zkcoord.coordinator.assignors import ASSIGNORS, Assignment
from zkcoord.patterns import matches
from zkcoord.records import TopicPartition


@dataclass(frozen=True)
class Subscription:
    """Named topics and/or a regular expression over topic names (seed 001's
    wildcard), accepted by zkcoord.patterns: matched in linear time."""

    topics: frozenset[str] = frozenset()
    pattern: Optional[str] = None

    def matches(self, topic: str) -> bool:
        if topic in self.topics:
            return True
        return self.pattern is not None and matches(self.pattern, topic)

    def select(self, all_topics) -> frozenset[str]:
        return frozenset(t for t in all_topics if self.matches(t))


def target_assignment(
    subscriptions: Mapping[str, Subscription],
    partitions_per_topic: Mapping[str, int],
    strategy: str = "range",
    current: Optional[Mapping[str, frozenset[TopicPartition]]] = None,
) -> Assignment:
    """Step 1: each member's partitions under ``strategy`` (sticky keeps what
    it can of ``current``). Topics absent from ``partitions_per_topic`` (not
    created yet) get no partitions."""
    interests = {m: sub.select(partitions_per_topic) for m, sub in subscriptions.items()}
    return ASSIGNORS[strategy].assign(interests, partitions_per_topic, current=current)


def owned_now(
    assigned: Mapping[str, frozenset[TopicPartition]],
    recorded_owners: Optional[Mapping[TopicPartition, Optional[str]]],
) -> dict[str, frozenset[TopicPartition]]:
    """What each member owns now, for the sticky assignor to keep: what this
    coordinator assigned it, and for a member it has assigned nothing, what
    ZooKeeper's owners record for it, of the partitions no member is assigned.

    After a takeover a member back with what it kept through the loss is
    assigned that already; one whose lease ended first registers again with
    empty hands (it stopped everything), so only the recorded owners say what
    it held; without them the first round assigns from scratch and moves
    partitions whose owners came back.

    >>> owned_now({"a": frozenset(), "b": frozenset({("t", 1)})},
    ...           {("t", 0): "a", ("t", 1): "a", ("t", 2): "gone"})
    {'a': frozenset({('t', 0)}), 'b': frozenset({('t', 1)})}
    """
    taken = {tp for tps in assigned.values() for tp in tps}
    recorded: dict[str, set[TopicPartition]] = {}
    for tp, member in (recorded_owners or {}).items():
        if member in assigned and not assigned[member] and tp not in taken:
            recorded.setdefault(member, set()).add(tp)
    return {m: tps or frozenset(recorded.get(m, ())) for m, tps in assigned.items()}


def owners_of(assignment: Mapping[str, frozenset[TopicPartition]]) -> dict[TopicPartition, str]:
    return {tp: member for member, tps in assignment.items() for tp in tps}


def rebalance_reason(
    target: Mapping[str, frozenset[TopicPartition]],
    recorded_owners: Mapping[TopicPartition, str],
    running: Mapping[str, frozenset[TopicPartition]],
) -> Optional[str]:
    """Step 3: why a rebalance is necessary, or None if it is not.

    The seed's four checks compare the target with the ownership in
    ZooKeeper. A fifth compares it with what each member runs: after a
    failover or a reconnect, ZooKeeper may already record the target while
    the members, freshly registered, run nothing. ``running`` holds the
    connected members only: a static member away keeps its partitions
    without running them.
    """
    wanted = owners_of(target)
    if not recorded_owners and wanted:
        return "no ownership recorded"
    unowned = set(wanted) - set(recorded_owners)
    if unowned:
        return f"{len(unowned)} partition(s) not owned"
    vanished = set(recorded_owners) - set(wanted)
    if vanished:
        return f"{len(vanished)} owned partition(s) no longer assigned"
    if any(recorded_owners[tp] != member for tp, member in wanted.items()):
        return "ownership differs from the new assignment"
    for member, tps in target.items():
        if member in running and running[member] != tps:
            return f"member {member} does not run its assignment"
    return None


@dataclass(frozen=True)
class HandoffPlan:
    """What to stop and what to start to go from ``running`` to ``target``.

    ``revoke``: per member, the partitions to Stop (only members that run
    them). ``start``: per member, the whole assignment to send in a Start.
    Every Stop is acknowledged before any Start goes out, so a partition
    never runs on two members, and the new owner starts at the offset the old
    one acknowledged.
    """

    revoke: dict[str, frozenset[TopicPartition]]
    start: dict[str, frozenset[TopicPartition]]
    revoke_all: bool

    @property
    def paused(self) -> frozenset[TopicPartition]:
        """Partitions that stop fetching for the length of the handoff."""
        return frozenset(tp for tps in self.revoke.values() for tp in tps)


def plan_handoff(
    target: Mapping[str, frozenset[TopicPartition]],
    running: Mapping[str, frozenset[TopicPartition]],
    eager: bool = False,
) -> HandoffPlan:
    """Seed 001's stop-all/start-all when ``eager``; otherwise incremental:
    stop only the partitions that move, start only members whose assignment
    grows. ``running`` names the connected members.

    >>> plan = plan_handoff({"a": frozenset({("t", 0)}), "b": frozenset({("t", 1)})},
    ...                     {"a": frozenset({("t", 0), ("t", 1)}), "b": frozenset()})
    >>> plan.revoke, sorted(plan.start)
    ({'a': frozenset({('t', 1)})}, ['b'])
    """
    empty: frozenset[TopicPartition] = frozenset()
    if eager:
        revoke = {m: tps for m, tps in running.items() if tps}
        start = {m: target.get(m, empty) for m in running}
        return HandoffPlan(revoke, start, revoke_all=True)
    revoke = {m: tps - target.get(m, empty) for m, tps in running.items() if tps - target.get(m, empty)}
    start = {
        m: target.get(m, empty)
        for m, tps in running.items()
        if target.get(m, empty) != tps - revoke.get(m, empty)
    }
    return HandoffPlan(revoke, start, revoke_all=False)


def restart_partitions(
    plan: HandoffPlan,
    target: Mapping[str, frozenset[TopicPartition]],
    running: Mapping[str, frozenset[TopicPartition]],
    partitions: frozenset[TopicPartition],
) -> HandoffPlan:
    """``plan``, made to also stop ``partitions`` wherever they run and start
    them again wherever ``target`` puts them, even on the same member: an
    offset reset, whose partitions must start over from the new offsets.

    >>> plan = restart_partitions(plan_handoff({"a": frozenset({("t", 0), ("t", 1)})},
    ...                                        {"a": frozenset({("t", 0), ("t", 1)})}),
    ...                           {"a": frozenset({("t", 0), ("t", 1)})}, {"a": frozenset({("t", 0), ("t", 1)})},
    ...                           frozenset({("t", 1)}))
    >>> plan.revoke, sorted(plan.start["a"])
    ({'a': frozenset({('t', 1)})}, [('t', 0), ('t', 1)])
    """
    empty: frozenset[TopicPartition] = frozenset()
    revoke = dict(plan.revoke)
    start = dict(plan.start)
    for member, tps in running.items():
        if tps & partitions:
            revoke[member] = revoke.get(member, empty) | (tps & partitions)
        if target.get(member, empty) & partitions:
            start[member] = target[member]
    return HandoffPlan(revoke, start, plan.revoke_all)
