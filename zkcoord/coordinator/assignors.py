"""Assignment strategies: pure functions from members and partitions to an assignment.

An assignor sees, for one group, each member's subscription (the topics it
consumes) and each topic's partition count, and returns which member owns
which partition. It is deterministic: the same inputs always give the same
assignment, whichever coordinator computes it, so a failover does not move
partitions for nothing.
"""

from __future__ import annotations

from typing import Mapping

TopicPartition = tuple[str, int]
Assignment = dict[str, frozenset[TopicPartition]]


class RangeAssignor:
    """Seed 001's assignment: per topic, contiguous ranges of partitions to the
    members that subscribe to it, in sorted order; the first ``n % m`` members
    get one partition more.

    Worked example: topic ``t`` with 5 partitions, members ``a`` and ``b``,
    topic ``u`` with 2 partitions subscribed only by ``b``::

        >>> RangeAssignor().assign({"a": {"t"}, "b": {"t", "u"}}, {"t": 5, "u": 2})
        ... # doctest: +NORMALIZE_WHITESPACE
        {'a': frozenset({('t', 0), ('t', 1), ('t', 2)}),
         'b': frozenset({('t', 3), ('t', 4), ('u', 0), ('u', 1)})}
    """

    name = "range"

    def assign(
        self, subscriptions: Mapping[str, frozenset[str] | set[str]], partitions_per_topic: Mapping[str, int]
    ) -> Assignment:
        owned: dict[str, set[TopicPartition]] = {member: set() for member in sorted(subscriptions)}
        for topic in sorted(partitions_per_topic):
            count = partitions_per_topic[topic]
            members = sorted(m for m, topics in subscriptions.items() if topic in topics)
            if not members or count <= 0:
                continue
            per_member, extra = divmod(count, len(members))
            start = 0
            for index, member in enumerate(members):
                size = per_member + (1 if index < extra else 0)
                owned[member].update((topic, p) for p in range(start, start + size))
                start += size
        return {member: frozenset(tps) for member, tps in owned.items()}


ASSIGNORS = {RangeAssignor.name: RangeAssignor()}
