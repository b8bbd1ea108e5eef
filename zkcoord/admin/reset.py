"""`zkcoord groups reset-offsets`: a group's committed offsets moved, with
the options of Kafka's `kafka-consumer-groups --reset-offsets`.

The reset goes through the coordinator of the group's slot
(ResetOffsetsRequest, docs/PROTOCOL.md): it holds offsets not yet written
and writes them in batches, so a write straight to ZooKeeper would race
with it. The command asks the coordinator what a reset would meet (the
committed offsets, the members), asks the partitions' leaders for their log
start and end offsets (and the offset at a time), computes the plan
(:func:`plan_offsets`, clamped to each log as Kafka's tool clamps), prints
it, and sends it to be executed only with ``--execute``. A group with
members is refused unless ``--force``: then the coordinator stops the
partitions' owners, writes the offsets and starts the owners from them.

Bad arguments exit 2 and a refusal or failure 1; neither changes anything.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Mapping, Optional

from zkcoord.admin import add_security_options, security_from, zookeeper_session
from zkcoord.admin.client import (
    CONNECT_TIMEOUT_S, add_client_options, ask_coordinator, client_credential, client_tls, group_coordinator,
    kafka_bootstrap,
    refuse_password_without_tls, table,
)
from zkcoord.errors import ConfigError, ZkcoordError
from zkcoord.records import TopicPartition

# How long the command keeps asking while the coordinator moves or the group rebalances.
RETRY_FOR_S = 15.0
# A forced reset waits for a rebalance: up to its leases and a rebalance timeout.
ANSWER_TIMEOUT_S = 120.0


class ResetArgumentError(ZkcoordError, ValueError):
    """An argument that cannot make a reset: unknown topic, partition out
    of range, bad date or duration. The command exits 2, changing nothing."""


class ResetRefused(ZkcoordError):
    """The coordinator refused or failed the reset (or could not be asked);
    nothing was changed."""


class NoCoordinator(ResetRefused):
    """Nobody could say where the group's coordinator is (none elected, the
    servers out of reach): asked again for a while."""

    retriable = True


# -- arguments ----------------------------------------------------------------------------------

_DURATION = re.compile(r"([-+]?)P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+(?:\.\d+)?)S)?)?", re.I)


def parse_duration(text: str) -> timedelta:
    """An ISO-8601 duration as Kafka's ``--by-duration`` takes it: PnDTnHnMnS."""
    match = _DURATION.fullmatch(text.strip())
    if not match or not any(match.groups()[1:]) or text.strip().upper().endswith("T"):
        raise ResetArgumentError(f"{text!r} is not a duration like P1DT2H30M (ISO 8601: PnDTnHnMnS)")
    sign, days, hours, minutes, seconds = match.groups()
    duration = timedelta(days=int(days or 0), hours=int(hours or 0), minutes=int(minutes or 0),
                         seconds=float(seconds or 0))
    return -duration if sign == "-" else duration


def parse_datetime(text: str) -> int:
    """Milliseconds since the epoch of an ISO-8601 date and time, as Kafka's
    ``--to-datetime`` takes it (``2024-05-01T12:00:00.000``, with ``Z`` or
    an offset such as ``+02:00``; without one, the local time zone)."""
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ResetArgumentError(f"{text!r} is not a date and time like 2024-05-01T12:00:00.000 "
                                 "(ISO 8601, optionally with Z or +hh:mm)") from None
    return int(moment.timestamp() * 1000)


def parse_topic(spec: str) -> tuple[str, Optional[tuple[int, ...]]]:
    """``topic`` or ``topic:p,p,...`` (Kafka's form)."""
    from zkcoord.zk import layout

    topic, _, listed = spec.partition(":")
    try:
        layout.validate_topic_name(topic)
    except layout.LayoutError as exc:
        raise ResetArgumentError(str(exc)) from None
    if not _:
        return topic, None
    try:
        partitions = tuple(sorted({int(p) for p in listed.split(",")}))
    except ValueError:
        raise ResetArgumentError(f"{spec!r}: partitions are numbers, as in {topic}:0,1,2") from None
    if any(p < 0 for p in partitions):
        raise ResetArgumentError(f"{spec!r}: a partition is not negative")
    return topic, partitions


@dataclass(frozen=True)
class Mode:
    """How the new offsets are found: ``kind`` is earliest, latest, offset,
    time (``value``: milliseconds since the epoch) or shift (``value``: by how many)."""

    kind: str
    value: int = 0


def mode_of(args: argparse.Namespace, now_ms: int) -> Mode:
    if args.to_earliest:
        return Mode("earliest")
    if args.to_latest:
        return Mode("latest")
    if args.to_offset is not None:
        return Mode("offset", args.to_offset)
    if args.to_datetime is not None:
        return Mode("time", parse_datetime(args.to_datetime))
    if args.by_duration is not None:
        return Mode("time", now_ms - int(parse_duration(args.by_duration).total_seconds() * 1000))
    return Mode("shift", args.shift_by)


# -- the plan -----------------------------------------------------------------------------------

def plan_offsets(mode: Mode, partitions, committed: Mapping[TopicPartition, int],
                 earliest: Mapping[TopicPartition, int], latest: Mapping[TopicPartition, int],
                 at_time: Optional[Mapping[TopicPartition, int]] = None) -> dict[TopicPartition, int]:
    """The new offset of each partition, clamped to [log start, log end] as
    Kafka's tool clamps. At a time with no record at or after it, the log
    end. A shift needs a committed offset to shift from.

    >>> plan_offsets(Mode("shift", -5), [("t", 0), ("t", 1)], {("t", 0): 12, ("t", 1): 3},
    ...              {("t", 0): 0, ("t", 1): 1}, {("t", 0): 20, ("t", 1): 20})
    {('t', 0): 7, ('t', 1): 1}
    """
    plan = {}
    for tp in partitions:
        low, high = earliest[tp], latest[tp]
        if mode.kind == "earliest":
            wanted = low
        elif mode.kind == "latest":
            wanted = high
        elif mode.kind == "offset":
            wanted = mode.value
        elif mode.kind == "time":
            found = (at_time or {}).get(tp, -1)
            wanted = high if found < 0 else found
        elif tp in committed:
            wanted = committed[tp] + mode.value
        else:
            raise ResetArgumentError(f"{tp[0]}-{tp[1]} has no committed offset to shift from")
        plan[tp] = min(max(wanted, low), high)
    return plan


def render_plan(group: str, plan: Mapping[TopicPartition, int]) -> list[str]:
    """The plan as Kafka's tool prints it."""
    return table(["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"],
                 [[group, t, str(p), str(o)] for (t, p), o in sorted(plan.items())], {2: 10})


# -- the coordinator and the brokers ------------------------------------------------------------

def locate(args: argparse.Namespace) -> tuple[tuple[str, int], list[str]]:
    """The address of the group's coordinator, and the brokers' addresses:
    from ZooKeeper (``--zookeeper``) or asked of the servers (``--bootstrap``)."""
    from zkcoord import wire
    from zkcoord.addresses import parse_bootstrap
    from zkcoord.channel import Channel

    if args.zookeeper:
        from zkcoord.zk import layout
        from zkcoord.zk.nodes import broker_addresses, read_servers

        with zookeeper_session(args.zookeeper, security=security_from(args)) as client:
            slot, _, server, _ = group_coordinator(client, args.group)
            endpoint = read_servers(client).get(server) if server is not None else None
            brokers = kafka_bootstrap(args) or broker_addresses(client, layout.client_protocol(
                client_tls(args) is not None, client_credential(args) is not None))
        if endpoint is None:
            raise NoCoordinator(f"no coordinator is elected for group {args.group!r} (slot {slot})")
        return (endpoint.host, endpoint.port), brokers
    failures = []
    for host, port in parse_bootstrap(args.bootstrap.split(",")):
        try:
            channel = Channel.connect(host, port, CONNECT_TIMEOUT_S, tls=client_tls(args))
        except OSError as exc:
            failures.append(f"{host}:{port}: {exc}")
            continue
        try:
            answer = channel.request(wire.ClusterMetadataRequest(group_id=args.group), CONNECT_TIMEOUT_S)
        except (ZkcoordError, OSError) as exc:
            failures.append(f"{host}:{port}: {exc}")
            continue
        finally:
            channel.close()
        target = next((s for s in answer.servers if s.id == answer.coordinator_id), None)
        if target is None:
            failures.append(f"{host}:{port}: no coordinator is elected for group {args.group!r}")
            continue
        return (target.host, target.port), kafka_bootstrap(args) or [f"{b.host}:{b.port}" for b in answer.brokers]
    raise NoCoordinator("no server could say who coordinates the group: " + "; ".join(failures))


def send_reset(address: tuple[str, int], request, tls=None, timeout: float = ANSWER_TIMEOUT_S):
    """One ResetOffsetsRequest to the coordinator at ``address`` (ask_coordinator)."""
    return ask_coordinator(address, request, tls, timeout)


def ask(args: argparse.Namespace, offsets: Mapping[TopicPartition, int], execute: bool):
    """Send a ResetOffsetsRequest to the group's coordinator, found again and
    asked again while it moves, is not available or the group rebalances
    (for up to RETRY_FOR_S); returns its answer."""
    from zkcoord import wire

    refuse_password_without_tls(args)
    request = wire.ResetOffsetsRequest(group_id=args.group, execute=execute, force=args.force,
                                       offsets=tuple(wire.TopicPartitionOffset(t, p, o)
                                                     for (t, p), o in sorted(offsets.items())),
                                       user=args.user or "", password=args.password or "")
    deadline = time.monotonic() + RETRY_FOR_S
    while True:
        try:
            address, _ = locate(args)
            answer = send_reset(address, request, client_tls(args))
            if answer.error_code == wire.ErrorCode.NONE:
                return answer
            error = wire.error_for(answer.error_code, answer.error_message)
        except (ZkcoordError, OSError) as exc:
            error = exc
        # A reset the coordinator took may not be sent again: only a refusal is retried.
        if not getattr(error, "retriable", isinstance(error, OSError)) or time.monotonic() > deadline:
            raise ResetRefused(f"{type(error).__name__}: {error}")
        time.sleep(0.5)


def partitions_to_reset(args: argparse.Namespace, brokers) -> list[TopicPartition]:
    """The partitions the arguments name, checked against what the brokers
    say each topic has; ``--all-topics``: every one the group has an offset for."""
    if args.all_topics:
        answer = ask(args, {}, execute=False)
        partitions = sorted({(e.topic, e.partition) for e in answer.previous})
        if not partitions:
            raise ResetArgumentError(f"group {args.group!r} has no committed offset: name topics with --topic")
        return partitions
    specs = [parse_topic(spec) for spec in args.topic]
    counts = brokers.partitions({topic for topic, _ in specs})
    partitions = set()
    for topic, listed in specs:
        if topic not in counts:
            raise ResetArgumentError(f"there is no topic {topic!r}")
        outside = [p for p in listed or () if p >= counts[topic]]
        if outside:
            raise ResetArgumentError(f"topic {topic} has {counts[topic]} partition(s): no partition "
                                     f"{', '.join(map(str, outside))}")
        partitions |= {(topic, p) for p in (listed if listed is not None else range(counts[topic]))}
    return sorted(partitions)


def reset_offsets(args: argparse.Namespace) -> list[str]:
    """Plan the reset, execute it if asked; the plan's lines. Raises
    ResetArgumentError or ResetRefused, having changed nothing."""
    from zkcoord.admin.brokers import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, BrokerOffsets

    mode = mode_of(args, int(time.time() * 1000))
    _, addresses = locate(args)
    with BrokerOffsets(addresses, tls=client_tls(args), credential=client_credential(args),
                       plain_without_tls=args.password_without_tls) as brokers:
        partitions = partitions_to_reset(args, brokers)
        known = ask(args, {tp: -1 for tp in partitions}, execute=False)
        if known.members and not args.force:
            raise ResetRefused(f"group {args.group!r} has {len(known.members)} member(s): "
                               f"{', '.join(known.members)}; stop them first, or add --force")
        committed = {(e.topic, e.partition): e.offset for e in known.previous}
        try:
            earliest = brokers.offsets(partitions, EARLIEST_TIMESTAMP)
            latest = brokers.offsets(partitions, LATEST_TIMESTAMP)
            at_time = brokers.offsets(partitions, mode.value) if mode.kind == "time" else None
        except ZkcoordError as exc:
            raise ResetRefused(f"the brokers could not say the partitions' offsets: {exc}") from None
    plan = plan_offsets(mode, partitions, committed, earliest, latest, at_time)
    if args.execute:
        ask(args, plan, execute=True)
    return render_plan(args.group, plan)


# -- the command --------------------------------------------------------------------------------

def register(actions) -> None:
    parser = actions.add_parser("reset-offsets", help="move a group's committed offsets, through its coordinator, "
                                                      "as kafka-consumer-groups --reset-offsets does")
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--zookeeper", help="the cluster's ZooKeeper connect string")
    where.add_argument("--bootstrap", help="zkcoord servers, host:port[,host:port...]")
    add_security_options(parser)
    parser.add_argument("--group", required=True)
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--topic", action="append", metavar="TOPIC[:P,P...]",
                       help="a topic, or some of its partitions (repeatable)")
    which.add_argument("--all-topics", action="store_true", help="every partition the group has an offset for")
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--to-earliest", action="store_true", help="each partition's log start")
    mode.add_argument("--to-latest", action="store_true", help="each partition's log end")
    mode.add_argument("--to-offset", type=int, metavar="N", help="offset N (clamped to each log)")
    mode.add_argument("--to-datetime", metavar="ISO8601", help="the first offset at or after a time, "
                                                              "e.g. 2024-05-01T12:00:00.000 (Z or +hh:mm; local "
                                                              "time without)")
    mode.add_argument("--by-duration", metavar="PnDTnHnM", help="the first offset at or after that long ago")
    mode.add_argument("--shift-by", type=int, metavar="N", help="the committed offset plus N (N may be negative)")
    run_mode = parser.add_mutually_exclusive_group()
    run_mode.add_argument("--dry-run", action="store_true", help="print the plan only (the default)")
    run_mode.add_argument("--execute", action="store_true", help="carry the plan out")
    parser.add_argument("--force", action="store_true",
                        help="also while the group has members: their coordinator stops the partitions' owners, "
                             "writes, and starts the owners from the new offsets")
    add_client_options(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from zkcoord.zk import layout

    try:
        layout.group_path(args.group)
        client_credential(args)
        refuse_password_without_tls(args)  # before anything is asked of ZooKeeper or the brokers
        lines = reset_offsets(args)
    except (ResetArgumentError, layout.LayoutError, ConfigError) as exc:  # a bad argument, or --tls-* file
        print(f"zkcoord groups reset-offsets: {exc}", file=sys.stderr)
        return 2
    except ZkcoordError as exc:
        print(f"zkcoord groups reset-offsets: {exc}", file=sys.stderr)
        return 1
    print("\n".join(lines))
    if not args.execute:
        print("(dry run: nothing changed; add --execute to reset)", file=sys.stderr)
    return 0
