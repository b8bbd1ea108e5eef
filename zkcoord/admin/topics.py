"""Topic administration in Kafka's ZooKeeper layout: create, list, describe,
add partitions. Partitions are spread round robin over the live brokers with
one replica each, or placed as asked when that can be honoured (one replica
on a live broker for each partition). The planning (which partition goes
where) is pure; the commands read and write ZooKeeper through
``zkcoord.zk.layout``. The broker's CreateTopics creates topics with the same
functions.
"""

from __future__ import annotations

import argparse
import sys
from typing import Mapping, Optional, Sequence

from zkcoord.admin import security_from, zookeeper_action, zookeeper_session
from zkcoord.errors import ZkcoordError
from zkcoord.zk import layout
from zkcoord.zk import nodes
from zkcoord.zk.nodes import TopicNode, broker_ids, topic_names

# A bound one request cannot hold a server with: planning a topic costs a
# dict entry per partition, on the broker's event loop for CreateTopics.
# Far above what one topic is given in practice (Kafka advises thousands).
MAX_PARTITIONS = 100_000


class TopicAdminError(ZkcoordError):
    """A topic command cannot be carried out as asked."""


class TopicExistsError(TopicAdminError):
    """The topic to create is already there."""


class UnknownTopicError(TopicAdminError):
    """The topic named does not exist."""


class NoBrokersError(TopicAdminError):
    """No live broker is registered to host partitions."""

    retriable = True


class TopicArgumentError(TopicAdminError, ValueError):
    """A count or name is not acceptable (exit code 2)."""


class InvalidTopicNameError(TopicArgumentError):
    """The name breaks Kafka's rules for topic names."""


class InvalidPartitionCountError(TopicArgumentError):
    """A partition count out of range, or one that would shrink a topic."""


class InvalidReplicationFactorError(TopicArgumentError):
    """A replication factor other than 1."""


class InvalidAssignmentError(TopicArgumentError):
    """Partition placements that cannot be honoured as given."""


def plan_partitions(brokers: Sequence[int], first: int, count: int,
                    start_index: int = 0) -> dict[int, tuple[int, ...]]:
    """Partitions ``first .. first+count-1`` placed round robin over
    ``brokers`` (sorted), one replica each, continuing from ``start_index``.

    >>> plan_partitions([3, 1, 2], 0, 4)
    {0: (1,), 1: (2,), 2: (3,), 3: (1,)}
    """
    if not brokers:
        raise NoBrokersError("no live brokers under /brokers/ids to host partitions")
    ordered = sorted(brokers)
    return {first + i: (ordered[(start_index + i) % len(ordered)],) for i in range(count)}


def check_count(value: int, what: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= MAX_PARTITIONS:
        raise InvalidPartitionCountError(f"{what} must be an integer in [1, {MAX_PARTITIONS}], got {value!r}")
    return value


def check_replication_factor(value: int) -> int:
    if value != 1 or isinstance(value, bool):
        raise InvalidReplicationFactorError(f"only replication factor 1 is supported, got {value!r}")
    return value


def check_topic_name(topic: str) -> str:
    try:
        return layout.validate_topic_name(topic)
    except layout.LayoutError as exc:
        raise InvalidTopicNameError(str(exc)) from None


def check_assignment(assignment: Mapping[int, Sequence[int]], brokers: Sequence[int]) -> dict[int, tuple[int, ...]]:
    """``assignment`` (partition -> replicas) if it can be honoured: the
    partitions numbered 0 to N-1, each with one replica on a live broker.

    >>> check_assignment({1: [2], 0: [1]}, [1, 2])
    {0: (1,), 1: (2,)}
    """
    if not assignment:
        raise InvalidAssignmentError("the assignment places no partition")
    if sorted(assignment) != list(range(len(assignment))):
        raise InvalidAssignmentError(
            f"partitions must be numbered 0 to {len(assignment) - 1}, got {sorted(assignment)}")
    placed = {}
    for partition, replicas in sorted(assignment.items()):
        replicas = tuple(replicas)
        if len(replicas) != 1:
            raise InvalidAssignmentError(
                f"partition {partition} has {len(replicas)} replicas {list(replicas)}; only one replica "
                f"per partition is supported")
        if replicas[0] not in brokers:
            raise InvalidAssignmentError(
                f"partition {partition} is placed on broker {replicas[0]}, which is not live "
                f"(live: {sorted(brokers)})")
        placed[partition] = replicas
    return placed


def create_topic(client, topic: str, partitions: Optional[int] = None, *,
                 assignment: Optional[Mapping[int, Sequence[int]]] = None,
                 validate_only: bool = False) -> dict[int, tuple[int, ...]]:
    """Write ``/brokers/topics/<topic>`` with ``partitions`` placed round robin,
    or with ``assignment`` as given; returns the assignment. With
    ``validate_only`` every check is made and nothing is written."""
    check_topic_name(topic)
    if assignment is None:
        check_count(partitions, "--partitions")
    from kazoo.exceptions import NodeExistsError

    path = layout.topic_path(topic)
    if client.exists(path) is not None:
        raise TopicExistsError(f"topic {topic!r} already exists")
    brokers = broker_ids(client)
    planned = plan_partitions(brokers, 0, partitions) if assignment is None else check_assignment(assignment, brokers)
    if validate_only:
        return planned
    client.ensure_path(layout.BROKER_TOPICS)
    try:
        client.create(path, layout.encode_topic(layout.new_topic_assignment(planned)))
    except NodeExistsError:
        raise TopicExistsError(f"topic {topic!r} already exists") from None
    return planned


def read_topic(client, topic: str) -> TopicNode:
    """``topic``'s node; UnknownTopicError, saying where it may be instead, if there is none."""
    from zkcoord.zk.chroots import missing_topic

    check_topic_name(topic)
    node = nodes.read_topic(client, topic)
    if node is None:
        raise UnknownTopicError(missing_topic(client, topic))
    return node


def add_partitions(client, topic: str, total: int, validate_only: bool = False) -> dict[int, tuple[int, ...]]:
    """Grow ``topic`` to ``total`` partitions (Kafka never shrinks a topic);
    returns the partitions added. The write is conditional on the node's
    version, so concurrent changes fail instead of being lost. With
    ``validate_only`` every check is made and nothing is written."""
    check_count(total, "--partitions")
    assignment, version = read_topic(client, topic)
    current = len(assignment.partitions)
    if total <= current:
        raise InvalidPartitionCountError(
            f"topic {topic!r} has {current} partitions; the new count must be larger, got {total}")
    added = plan_partitions(broker_ids(client), current, total - current, start_index=current)
    if validate_only:
        return added
    merged = {**assignment.partitions, **added}
    updated = layout.TopicAssignment(merged, assignment.version, assignment.topic_id)
    client.set(layout.topic_path(topic), layout.encode_topic(updated), version=version)
    return added


def list_topics(client) -> list[str]:
    return topic_names(client)


def describe_topic(client, topic: str) -> list[str]:
    """Lines as ``kafka-topics --describe`` prints them."""
    from kazoo.exceptions import NoNodeError

    assignment, _ = read_topic(client, topic)
    lines = [f"Topic: {topic}\tPartitionCount: {len(assignment.partitions)}\t"
             f"ReplicationFactor: {max((len(r) for r in assignment.partitions.values()), default=0)}"]
    for index, replicas in sorted(assignment.partitions.items()):
        leader, isr = "none", ""
        try:
            data, _ = client.get(layout.partition_state_path(topic, index))
            state = layout.decode_partition_state(data)
            leader, isr = str(state.leader), ",".join(map(str, state.isr))
        except NoNodeError:
            pass
        lines.append(f"\tTopic: {topic}\tPartition: {index}\tLeader: {leader}\t"
                     f"Replicas: {','.join(map(str, replicas))}\tIsr: {isr}")
    return lines


def format_assignment(assignment: Mapping[int, tuple[int, ...]]) -> str:
    return ", ".join(f"{p}->{','.join(map(str, r))}" for p, r in sorted(assignment.items()))


# -- command line -------------------------------------------------------------


def register(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser("topics", help="create, list, describe topics in ZooKeeper")
    actions = parser.add_subparsers(dest="topics_action", metavar="ACTION")
    actions.required = True

    def common(name, help_text):
        return zookeeper_action(actions, name, help_text, run)

    create = common("create", "create a topic")
    create.add_argument("--topic", required=True)
    create.add_argument("--partitions", type=int, required=True)
    create.add_argument("--replication-factor", type=int, default=1,
                        help="only 1 is supported")
    common("list", "list topics")
    describe = common("describe", "show a topic's partitions")
    describe.add_argument("--topic", required=True)
    grow = common("add-partitions", "grow a topic to a new partition count")
    grow.add_argument("--topic", required=True)
    grow.add_argument("--partitions", type=int, required=True, help="the new total")
    return parser


def run(args) -> int:
    try:  # bad arguments fail before any connection is made
        check_replication_factor(getattr(args, "replication_factor", 1))
        if getattr(args, "topic", None) is not None:
            check_topic_name(args.topic)
        if getattr(args, "partitions", None) is not None:
            check_count(args.partitions, "--partitions")
    except TopicArgumentError as exc:
        print(f"zkcoord topics: {exc}", file=sys.stderr)
        return 2
    try:
        with zookeeper_session(args.zookeeper, security=security_from(args)) as client:
            return _act(client, args)
    except (TopicArgumentError, TopicExistsError, UnknownTopicError) as exc:
        print(f"zkcoord topics: {exc}", file=sys.stderr)
        return 2
    except ZkcoordError as exc:
        print(f"zkcoord topics: {exc}", file=sys.stderr)
        return 1


def _act(client, args) -> int:
    action = args.topics_action
    if action == "create":
        assignment = create_topic(client, args.topic, args.partitions)
        print(f"Created topic {args.topic} ({format_assignment(assignment)})")
    elif action == "list":
        for topic in list_topics(client):
            print(topic)
    elif action == "describe":
        print("\n".join(describe_topic(client, args.topic)))
    elif action == "add-partitions":
        added = add_partitions(client, args.topic, args.partitions)
        print(f"Added partitions to {args.topic} ({format_assignment(added)})")
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="zkcoord")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
