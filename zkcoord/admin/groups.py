"""Group administration: what ZooKeeper says about consumer groups, and their lag.

`zkcoord groups list` names the groups; `zkcoord groups describe --group G`
shows which server coordinates the group (its coordinator slot and that
slot's epoch), the coordinator's persisted view (generation, strategy,
members and their partitions, a failed rebalance if any), the owners and committed
offsets in Kafka 0.8's layout, and each partition's lag against its broker's
log end offset.
"""

from __future__ import annotations

import argparse
import sys
from typing import Optional

from kazoo.exceptions import NoNodeError

from zkcoord.admin import zookeeper_session
from zkcoord.errors import ZkcoordError
from zkcoord.zk import layout
from zkcoord.zk.nodes import read_brokers, read_offsets, read_owners


def list_groups(client) -> list[str]:
    names = set()
    for parent in (layout.CONSUMERS, layout.GROUPS):
        try:
            names |= set(client.get_children(parent))
        except NoNodeError:
            continue
    names.discard("coordinator")  # /consumers/coordinator is the elected server, not a group
    return sorted(names)


def _read(client, path: str, decode):
    try:
        return decode(client.get(path)[0])
    except NoNodeError:
        return None


def group_coordinator(client, group: str) -> tuple[int, int, Optional[str], Optional[int]]:
    """``group``'s coordinator slot, the cluster's slot count, the server
    elected in that slot (None if none is) and the slot's epoch (None if
    never elected). A cluster without a slot count node has one slot."""
    from zkcoord.coordinator.slots import slot_of

    slots = _read(client, layout.SLOTS, layout.decode_slot_count) or 1
    slot = slot_of(group, slots)
    server = _read(client, layout.slot_coordinator_path(slot),
                   lambda data: layout.decode_coordinator(data, layout.slot_coordinator_path(slot)))
    epoch = _read(client, layout.slot_epoch_path(slot),
                  lambda data: layout.decode_coordinator_epoch(data, layout.slot_epoch_path(slot)))
    return slot, slots, server, epoch


def describe_group(client, group: str, end_offsets: Optional[dict] = None) -> list[str]:
    """Lines describing ``group``; ``end_offsets`` maps (topic, partition) to the log end offset."""
    lines = [f"group {group}"]
    slot, slots, server, epoch = group_coordinator(client, group)
    where = f"slot {slot} of {slots}" + ("" if epoch is None else f", epoch {epoch}")
    lines.append(f"  coordinator: {'server ' + server if server is not None else 'none elected'} ({where})")
    state = _read(client, layout.group_state_path(group), layout.decode_group_state)
    if state is not None:
        lines.append(f"  generation {state.generation}, strategy {state.strategy}, "
                     f"{len(state.assignment)} member(s)")
        for member, tps in sorted(state.assignment.items()):
            lines.append(f"    {member}: {', '.join(f'{t}-{p}' for t, p in tps) or '(nothing)'}")
    failure = _read(client, layout.group_failure_path(group), layout.decode_group_failure)
    if failure is not None:
        lines.append(f"  REBALANCE FAILED at generation {failure.generation} after {failure.attempts} "
                     f"attempts: {failure.error}")
    lines.append(f"  {'topic':<20} {'partition':>9} {'committed':>12} {'end':>12} {'lag':>10}  owner")
    owners, offsets = read_owners(client, group), read_offsets(client, group)
    for topic, partition in sorted(set(owners) | set(offsets)):
        committed = offsets.get((topic, partition))
        end = (end_offsets or {}).get((topic, partition))
        lag = end - committed if end is not None and committed is not None else None
        lines.append(f"  {topic:<20} {partition:>9} {_show(committed):>12} {_show(end):>12} "
                     f"{_show(lag):>10}  {owners.get((topic, partition)) or '-'}")
    return lines


def _show(value) -> str:
    return "-" if value is None else str(value)


def log_end_offsets(client, partitions) -> dict:
    """Each partition's log end offset, asked of the brokers registered in ZooKeeper."""
    from confluent_kafka import Consumer, TopicPartition

    brokers = ["%s:%d" % registration.plaintext_address() for registration in read_brokers(client).values()]
    if not brokers:
        return {}
    consumer = Consumer({"bootstrap.servers": ",".join(brokers), "group.id": "zkcoord-admin",
                         "enable.auto.commit": False, "log_level": 0})
    result = {}
    try:
        for topic, partition in partitions:
            try:
                _, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=2)
                result[(topic, partition)] = high
            except Exception:  # that partition's broker is down: no lag shown
                continue
    finally:
        consumer.close()
    return result


def register(subparsers) -> None:
    parser = subparsers.add_parser("groups", help="list consumer groups and describe one, with lag")
    actions = parser.add_subparsers(dest="groups_action", metavar="ACTION", required=True)
    listing = actions.add_parser("list", help="list groups")
    listing.add_argument("--zookeeper", required=True)
    listing.set_defaults(func=run)
    describe = actions.add_parser("describe", help="members, owners, offsets and lag of a group")
    describe.add_argument("--zookeeper", required=True)
    describe.add_argument("--group", required=True)
    describe.add_argument("--no-lag", action="store_true", help="do not ask the brokers for log end offsets")
    describe.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    try:
        if args.groups_action == "describe":
            layout.group_path(args.group)
    except layout.LayoutError as exc:
        print(f"zkcoord groups: {exc}", file=sys.stderr)
        return 2
    try:
        with zookeeper_session(args.zookeeper) as client:
            if args.groups_action == "list":
                for name in list_groups(client):
                    print(name)
                return 0
            if args.group not in list_groups(client):
                print(f"zkcoord groups: no group {args.group!r}", file=sys.stderr)
                return 2
            partitions = list(read_offsets(client, args.group))
            ends = {} if args.no_lag else log_end_offsets(client, partitions)
            print("\n".join(describe_group(client, args.group, ends)))
            return 0
    except ZkcoordError as exc:
        print(f"zkcoord groups: {exc}", file=sys.stderr)
        return 1
