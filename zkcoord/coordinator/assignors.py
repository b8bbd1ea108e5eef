"""Assignment strategies: pure functions from members and partitions to an assignment.

An assignor sees, for one group, each member's subscription (the topics it
consumes) and each topic's partition count, and returns which member owns
which partition. It is deterministic: the same inputs always give the same
assignment, whichever coordinator computes it, so a failover does not move
partitions for nothing.

Every assignor is called the same way,
``assign(subscriptions, partitions_per_topic, current=...)``, where ``current``
is what each member owns now; only the sticky assignor looks at it. Members
name the strategies they support in order of preference, and
:func:`choose_strategy` picks the one the group uses, so a group can change
strategy by a rolling restart.
"""

from __future__ import annotations

import heapq
from collections import deque
from typing import Mapping, Optional, Protocol, Sequence

from zkcoord import wire
from zkcoord.errors import ZkcoordError
from zkcoord.records import TopicPartition

Assignment = dict[str, frozenset[TopicPartition]]
Subscriptions = Mapping[str, "frozenset[str] | set[str]"]
Current = Optional[Mapping[str, frozenset[TopicPartition]]]


class NoCommonStrategyError(ZkcoordError):
    """The members of a group share no assignment strategy that zkcoord knows."""


class Assignor(Protocol):
    name: str

    def assign(
        self, subscriptions: Subscriptions, partitions_per_topic: Mapping[str, int], *, current: Current = None
    ) -> Assignment: ...


def _subscribers(subscriptions: Subscriptions, partitions_per_topic: Mapping[str, int]) -> dict[str, list[str]]:
    """Each topic that has partitions and at least one subscriber, in sorted
    order, mapped to its subscribers in sorted order."""
    found = {}
    for topic in sorted(partitions_per_topic):
        members = sorted(m for m, topics in subscriptions.items() if topic in topics)
        if members and partitions_per_topic[topic] > 0:
            found[topic] = members
    return found


def _frozen(owned: Mapping[str, set[TopicPartition]]) -> Assignment:
    return {member: frozenset(owned[member]) for member in sorted(owned)}


class RangeAssignor:
    """Seed 001's assignment: per topic, contiguous ranges of partitions to the
    members that subscribe to it, in sorted order; the first ``n % m`` members
    get one partition more.

    Worked example: topic ``t`` with 5 partitions, members ``a`` and ``b``,
    topic ``u`` with 2 partitions subscribed only by ``b``::

        >>> result = RangeAssignor().assign({"a": {"t"}, "b": {"t", "u"}}, {"t": 5, "u": 2})
        >>> {member: sorted(tps) for member, tps in result.items()}
        ... # doctest: +NORMALIZE_WHITESPACE
        {'a': [('t', 0), ('t', 1), ('t', 2)],
         'b': [('t', 3), ('t', 4), ('u', 0), ('u', 1)]}
    """

    name = "range"

    def assign(
        self, subscriptions: Subscriptions, partitions_per_topic: Mapping[str, int], *, current: Current = None
    ) -> Assignment:
        owned: dict[str, set[TopicPartition]] = {member: set() for member in subscriptions}
        for topic, members in _subscribers(subscriptions, partitions_per_topic).items():
            per_member, extra = divmod(partitions_per_topic[topic], len(members))
            start = 0
            for index, member in enumerate(members):
                size = per_member + (1 if index < extra else 0)
                owned[member].update((topic, p) for p in range(start, start + size))
                start += size
        return _frozen(owned)


class RoundRobinAssignor:
    """Seed 004's round robin: every subscribed partition, sorted by topic then
    partition, is dealt in turn to the members sorted by id; a member not
    subscribed to the partition's topic is skipped (and keeps its place in the
    circle for the next partition).

    Worked example: ``a`` and ``b`` consume ``t`` (3 partitions), only ``b``
    consumes ``u`` (2 partitions)::

        >>> result = RoundRobinAssignor().assign({"a": {"t"}, "b": {"t", "u"}}, {"t": 3, "u": 2})
        >>> {member: sorted(tps) for member, tps in result.items()}
        ... # doctest: +NORMALIZE_WHITESPACE
        {'a': [('t', 0), ('t', 2)],
         'b': [('t', 1), ('u', 0), ('u', 1)]}
    """

    name = "roundrobin"

    def assign(
        self, subscriptions: Subscriptions, partitions_per_topic: Mapping[str, int], *, current: Current = None
    ) -> Assignment:
        owned: dict[str, set[TopicPartition]] = {member: set() for member in subscriptions}
        circle = sorted(subscriptions)
        turn = 0
        for topic in _subscribers(subscriptions, partitions_per_topic):
            for partition in range(partitions_per_topic[topic]):
                # A subscriber exists, so this stops within one lap.
                while topic not in subscriptions[circle[turn]]:
                    turn = (turn + 1) % len(circle)
                owned[circle[turn]].add((topic, partition))
                turn = (turn + 1) % len(circle)
        return _frozen(owned)


class StickyAssignor:
    """Balanced within one partition, moving as few partitions as possible.

    Balanced means that no chain of moves, each handing one partition to a
    member that subscribes to its topic, can take a partition from a member
    with ``n`` partitions and leave it with a member that has fewer than
    ``n - 1``. When every member consumes the same topics, that is: counts
    differ by at most one.

    Starting from ``current`` (ownership of departed members and of
    partitions that no longer exist or are no longer subscribed is ignored):

    1. every member keeps what it owns and may still own;
    2. each partition nobody owns goes to a subscriber with the fewest
       partitions, the most constrained partitions first;
    3. while some member ``u`` can reach, along such a chain of moves, a
       member with at most ``count(u) - 2`` partitions, a chain to the
       emptiest such member is carried out, starting from the fullest ``u``.

    Each step of 3 lowers the sum of squared counts, so it ends; when it
    ends the assignment is balanced. With identical subscriptions every
    chain is a single move from a fullest to an emptiest member, which
    moves exactly ``sum(max(0, current - target))`` partitions, where the
    targets are the balanced counts that keep the most partitions in place.
    With differing subscriptions the balance is still exact, but the
    movement may, rarely, exceed the least by a partition: a chain is found
    by the fewest hops, not by the fewest partitions taken from their owners.

    Worked example: ``a`` and ``b`` own three partitions each of ``t``; ``c``
    joins. Each of ``a`` and ``b`` gives up one partition, nothing else moves::

        >>> result = StickyAssignor().assign(
        ...     {"a": {"t"}, "b": {"t"}, "c": {"t"}}, {"t": 6},
        ...     current={"a": frozenset({("t", 0), ("t", 1), ("t", 2)}),
        ...              "b": frozenset({("t", 3), ("t", 4), ("t", 5)})})
        >>> {member: sorted(tps) for member, tps in result.items()}
        ... # doctest: +NORMALIZE_WHITESPACE
        {'a': [('t', 1), ('t', 2)],
         'b': [('t', 4), ('t', 5)],
         'c': [('t', 0), ('t', 3)]}
    """

    name = "sticky"

    def assign(
        self, subscriptions: Subscriptions, partitions_per_topic: Mapping[str, int], *, current: Current = None
    ) -> Assignment:
        subscribers = _subscribers(subscriptions, partitions_per_topic)
        plan = _StickyPlan(subscriptions, subscribers, partitions_per_topic, current or {})
        plan.place_unowned()
        plan.balance()
        return _frozen(plan.owned)


class _StickyPlan:
    """The working state of one sticky assignment."""

    def __init__(
        self,
        subscriptions: Subscriptions,
        subscribers: Mapping[str, list[str]],
        partitions_per_topic: Mapping[str, int],
        current: Mapping[str, frozenset[TopicPartition]],
    ) -> None:
        self.subscribers = subscribers
        self.partitions_per_topic = partitions_per_topic
        self.owned: dict[str, set[TopicPartition]] = {m: set() for m in subscriptions}
        # by_topic[m][t]: the partitions of t that m owns, to find chains fast.
        self.by_topic: dict[str, dict[str, set[int]]] = {m: {} for m in subscriptions}
        self.previous: dict[TopicPartition, str] = {}
        for member in sorted(current):
            if member not in self.owned:
                continue
            for topic, partition in sorted(current[member]):
                valid = topic in subscribers and member in subscribers[topic]
                valid = valid and 0 <= partition < partitions_per_topic[topic]
                # If two members claim one partition, the first in sorted order keeps it.
                if valid and (topic, partition) not in self.previous:
                    self.previous[(topic, partition)] = member
                    self._give(member, (topic, partition))

    def _give(self, member: str, tp: TopicPartition) -> None:
        self.owned[member].add(tp)
        self.by_topic[member].setdefault(tp[0], set()).add(tp[1])

    def _take(self, member: str, tp: TopicPartition) -> None:
        self.owned[member].discard(tp)
        left = self.by_topic[member][tp[0]]
        left.discard(tp[1])
        if not left:
            del self.by_topic[member][tp[0]]

    def place_unowned(self) -> None:
        # Topics with the fewest subscribers first: they have the least choice.
        topics = sorted(self.subscribers, key=lambda t: (len(self.subscribers[t]), t))
        for topic in topics:
            members = self.subscribers[topic]
            heap = [(len(self.owned[m]), m) for m in members]
            heapq.heapify(heap)
            for partition in range(self.partitions_per_topic[topic]):
                if (topic, partition) in self.previous:
                    continue
                count, member = heapq.heappop(heap)
                self._give(member, (topic, partition))
                heapq.heappush(heap, (count + 1, member))

    def balance(self) -> None:
        if self._identical_subscriptions():
            self._balance_identical()
            return
        while True:
            counts = {m: len(tps) for m, tps in self.owned.items()}
            if not counts:
                return
            floor = min(counts.values())
            best: Optional[tuple] = None
            for level in sorted({c for c in counts.values() if c >= floor + 2}, reverse=True):
                # Among the fullest members that can give, the chain that ends
                # emptiest, then the one that takes the fewest partitions from
                # their previous owners.
                for source in sorted(m for m in counts if counts[m] == level):
                    chain = self._chain(source, counts)
                    if chain:
                        key = (counts[chain[-1][2]], self._chain_cost(chain), len(chain), source)
                        best = min(best, (key, chain)) if best else (key, chain)
                if best:
                    break
            if not best:
                return
            self._carry_out(best[1])

    def _identical_subscriptions(self) -> bool:
        every = set(self.owned)
        return all(set(members) == every for members in self.subscribers.values())

    def _balance_identical(self) -> None:
        """The same end as the chain search when every member may own every
        partition, where every chain is one move from a fullest member to an
        emptiest one: so make those moves directly, in time linear in the
        moves rather than cubic in the members."""
        while True:
            counts = {m: len(tps) for m, tps in self.owned.items()}
            if not counts:
                return
            taker = min(counts, key=lambda m: (counts[m], m))
            top = max(counts.values())
            if top - counts[taker] < 2:
                return
            # The fullest giver whose partition moves away from its previous owner least.
            options = []
            for giver in (m for m in counts if counts[m] == top):
                for topic in self.by_topic[giver]:
                    cost, tp = self._pick(giver, topic, taker)
                    options.append((cost, giver, tp))
            _, giver, tp = min(options)
            self._take(giver, tp)
            self._give(taker, tp)

    def _chain(self, source: str, counts: Mapping[str, int]) -> list[tuple[str, str, str]]:
        """A chain of (giver, topic, taker) moves from ``source`` to a member
        with at most ``counts[source] - 2`` partitions: to the emptiest such
        member, by the fewest moves, then by name. Going to the emptiest
        first keeps a later chain from undoing part of this one."""
        parent: dict[str, tuple[str, str]] = {}
        depth = {source: 0}
        queue = deque([source])
        while queue:
            giver = queue.popleft()
            for topic in sorted(self.by_topic[giver]):
                for taker in self.subscribers[topic]:
                    if taker not in depth:
                        depth[taker] = depth[giver] + 1
                        parent[taker] = (giver, topic)
                        queue.append(taker)
        ends = [m for m in parent if counts[m] <= counts[source] - 2]
        if not ends:
            return []
        end = min(ends, key=lambda m: (counts[m], depth[m], m))
        chain = []
        while end != source:
            giver, topic = parent[end]
            chain.append((giver, topic, end))
            end = giver
        return chain[::-1]

    def _carry_out(self, chain: list[tuple[str, str, str]]) -> None:
        # Last move first, so each giver hands over a partition it already had.
        for giver, topic, taker in reversed(chain):
            tp = self._pick(giver, topic, taker)[1]
            self._take(giver, tp)
            self._give(taker, tp)

    def _chain_cost(self, chain: list[tuple[str, str, str]]) -> int:
        return sum(self._pick(giver, topic, taker)[0] for giver, topic, taker in chain)

    def _pick(self, giver: str, topic: str, taker: str) -> tuple[int, TopicPartition]:
        """The partition of ``topic`` that ``giver`` should hand to ``taker``,
        with what that adds to the partitions that leave their previous owner:
        -1 if it goes back to it, 0 if the giver only got it in this
        assignment, else 1."""
        return min(
            ((self.previous.get((topic, p)) != taker) - (self.previous.get((topic, p)) != giver), (topic, p))
            for p in self.by_topic[giver][topic]
        )


def choose_strategy(preferences: Sequence[Sequence[str]]) -> str:
    """The strategy a group uses, given each member's supported strategies in
    order of preference (seed 000's vote).

    Only strategies that every member supports and zkcoord knows are
    candidates; the one with the best (lowest) sum of positions across the
    members' lists wins, ties broken by name. While some members support only
    ``range``, range is the only candidate; once all prefer ``sticky``, it wins::

        >>> choose_strategy([["range"], ["sticky", "range"]])
        'range'
        >>> choose_strategy([["sticky", "range"], ["sticky", "range"]])
        'sticky'
    """
    if not preferences:
        raise NoCommonStrategyError("no members to choose an assignment strategy for")
    ranks: list[dict[str, int]] = []
    for strategies in preferences:
        rank: dict[str, int] = {}
        for position, strategy in enumerate(strategies):
            rank.setdefault(strategy, position)
        ranks.append(rank)
    candidates = [s for s in ASSIGNORS if all(s in rank for rank in ranks)]
    if not candidates:
        offered = sorted({s for rank in ranks for s in rank})
        raise NoCommonStrategyError(
            f"members share no known assignment strategy (offered: {', '.join(offered) or 'none'};"
            f" known: {', '.join(sorted(ASSIGNORS))})"
        )
    return min(candidates, key=lambda s: (sum(rank[s] for rank in ranks), s))


ASSIGNORS: dict[str, Assignor] = {
    assignor.name: assignor for assignor in (RangeAssignor(), RoundRobinAssignor(), StickyAssignor())
}
assert set(ASSIGNORS) == set(wire.STRATEGIES), "an assignor for every strategy the protocol names, and no other"
