"""Group administration: what ZooKeeper says about consumer groups, and their lag.

`zkcoord groups list` names the groups; `zkcoord groups describe --group G`
prints what Kafka's `kafka-consumer-groups --describe` prints (per partition
the committed offset, log end offset, lag and owning member with its host and
client id; or ``--members``; or ``--state``; or ``--history``, its last
rebalance rounds), read from the coordinator's
persisted view (state, owners, offsets in Kafka 0.8's layout), headed by
what is ours: which server coordinates the group (its slot and that slot's
epoch), the generation and strategy, a failed rebalance if any. ``--output
json`` prints all of it as one document. `zkcoord groups reset-offsets` is
in reset.py; what both share (finding a group's coordinator, reaching the
servers and brokers, Kafka's table layout) in client.py.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import logging
import sys
from typing import Callable, Optional

from kazoo.exceptions import NoNodeError

from zkcoord.admin import add_security_options, security_from, zookeeper_session
from zkcoord.admin.client import (
    add_client_options, client_credential, client_tls, group_coordinator, kafka_bootstrap, read_or_none,
    refuse_password_without_tls, table,
)
from zkcoord.admin.live import kind_name, lease_text, live_members, with_live_members
from zkcoord.errors import ZkcoordError
from zkcoord.zk import layout
from zkcoord.zk.nodes import broker_addresses, read_group_state, read_offsets, read_owners, read_servers

log = logging.getLogger(__name__)


def list_groups(client) -> list[str]:
    names = set()
    for parent in (layout.CONSUMERS, layout.GROUPS):
        try:
            names |= set(client.get_children(parent))
        except NoNodeError:
            continue
    names.discard("coordinator")  # /consumers/coordinator is the elected server, not a group
    return sorted(names)


# Kafka's names for a group's state, as `kafka-consumer-groups --describe --state` prints them.
EMPTY, STABLE, PREPARING_REBALANCE, DEAD = "Empty", "Stable", "PreparingRebalance", "Dead"


def state_name(state: Optional[layout.GroupState], owners: dict, failure: Optional[layout.GroupFailure],
               has_offsets: bool) -> str:
    """The group's state as Kafka's tool names it, from what its coordinator
    persisted: Empty (no members), Stable (the owners recorded are the
    assignment of the generation persisted), PreparingRebalance (a rebalance
    under way, between the two writes, or one that failed and is retried on
    the next change), Dead (nothing of the group left but its name)."""
    if state is None or not state.assignment:
        return EMPTY if state is not None or has_offsets else DEAD
    if failure is not None:
        return PREPARING_REBALANCE
    assigned = {tp: member for member, tps in state.assignment.items() for tp in tps}
    return STABLE if assigned == owners else PREPARING_REBALANCE


def group_state(client, group: str) -> tuple[str, Optional[layout.GroupState]]:
    """The group's state as Kafka's tool names it (state_name), and the
    coordinator's persisted state (None: never written)."""
    state = read_group_state(client, group)
    failure = read_or_none(client, layout.group_failure_path(group), layout.decode_group_failure)
    return state_name(state, read_owners(client, group), failure, bool(read_offsets(client, group))), state


def describe_group(client, group: str, end_offsets: Optional[Callable] = None) -> dict:
    """``group`` as one JSON-able document: its coordinator, state,
    generation, strategy, failed rebalance, members and, per partition, the
    committed offset, log end offset, lag and owner. ``end_offsets`` maps
    partitions to their log end offsets (None: no lag)."""
    slot, slots, server, epoch = group_coordinator(client, group)
    servers = read_servers(client)
    endpoint = servers.get(server) if server is not None else None
    state = read_group_state(client, group)
    failure = read_or_none(client, layout.group_failure_path(group), layout.decode_group_failure)
    history = read_history(client, group)
    owners, offsets = read_owners(client, group), read_offsets(client, group)
    assignment = dict(state.assignment) if state is not None else {}
    clients = dict(state.clients) if state is not None else {}
    owner_of = {**owners, **{tp: member for member, tps in assignment.items() for tp in tps}}
    partitions = sorted(set(owner_of) | set(offsets))
    ends = end_offsets(partitions) if end_offsets is not None and partitions else {}

    def client_of(member: Optional[str]) -> dict:
        known = clients.get(member) if member is not None else None
        return {"consumer_id": member, "host": known.host if known and known.host else None,
                "client_id": known.client_id if known and known.client_id else None}

    rows = []
    for topic, partition in partitions:
        committed, end = offsets.get((topic, partition)), ends.get((topic, partition))
        rows.append({"topic": topic, "partition": partition, "current_offset": committed, "log_end_offset": end,
                     "lag": end - committed if end is not None and committed is not None else None,
                     **client_of(owner_of.get((topic, partition)))})
    return {
        "group": group,
        "state": state_name(state, owners, failure, bool(offsets)),
        "generation": state.generation if state is not None else None,
        "strategy": state.strategy if state is not None else None,
        "coordinator": {"server": server, "host": endpoint.host if endpoint else None,
                        "port": endpoint.port if endpoint else None, "slot": slot, "slots": slots, "epoch": epoch},
        "failure": None if failure is None else {"generation": failure.generation, "attempts": failure.attempts,
                                                 "error": failure.error},
        "members": [{**client_of(member), **member_details(clients.get(member)),
                     "partitions": [{"topic": t, "partition": p} for t, p in sorted(tps)]}
                    for member, tps in sorted(assignment.items())],
        "partitions": rows,
        "history": history,
    }


def member_details(known: Optional[layout.MemberClient]) -> dict:
    """What the coordinator recorded of a member beyond Kafka's columns
    (None where it did not: a state written by an older server)."""
    return {"static": known.static if known else None,
            "session_timeout_ms": known.session_timeout_ms or None if known else None,
            "kind": known.kind or None if known else None,
            # What only the coordinator knows (live.py): unknown from ZooKeeper.
            "lease_remaining_ms": None, "connected": None, "outstanding": None}


def read_history(client, group: str) -> list[dict]:
    """The group's last rebalance rounds, oldest first, as JSON-able dicts
    ([] if it has none yet). One its coordinator left unreadable is logged
    and shown as none: the rest of the group still is."""
    path = layout.group_history_path(group)
    try:
        records = read_or_none(client, path, lambda data: layout.decode_history(data, path)) or []
    except layout.LayoutError as exc:
        log.warning("%s", exc)
        return []
    return [dataclasses.asdict(record) for record in records]


def _show(value) -> str:
    return "-" if value is None else str(value)


def _host(host: Optional[str]) -> str:
    return "-" if host is None else "/" + host  # as Kafka's tool prints an address


def coordinator_lines(view: dict) -> list[str]:
    """What zkcoord adds to Kafka's view: the coordinator, its slot and epoch,
    the generation and strategy, a failed rebalance."""
    where = view["coordinator"]
    slot = f"slot {where['slot']} of {where['slots']}" + ("" if where["epoch"] is None else f", epoch {where['epoch']}")
    server = (f"server {where['server']}" + (f" at {where['host']}:{where['port']}" if where["host"] else "")
              if where["server"] is not None else "none elected")
    lines = [f"Coordinator of group '{view['group']}': {server} ({slot})"]
    if view["generation"] is not None:
        lines.append(f"Generation {view['generation']}, strategy {view['strategy']}, state {view['state']}")
    failure = view["failure"]
    if failure is not None:
        lines.append(f"REBALANCE FAILED at generation {failure['generation']} after {failure['attempts']} "
                     f"attempts: {failure['error']}")
    return lines


def render_offsets(view: dict) -> list[str]:
    """Kafka's `--describe` (offsets) table."""
    lines = coordinator_lines(view) + [""]
    if not view["members"]:
        lines += [f"Consumer group '{view['group']}' has no active members.", ""]
    rows = [[view["group"], r["topic"], str(r["partition"]), _show(r["current_offset"]), _show(r["log_end_offset"]),
             _show(r["lag"]), _show(r["consumer_id"]), _host(r["host"]), _show(r["client_id"])]
            for r in view["partitions"]]
    return lines + table(["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID",
                           "HOST", "CLIENT-ID"], rows, {2: 10, 3: 15, 4: 15, 5: 15})


def render_members(view: dict) -> list[str]:
    """Kafka's `--describe --members --verbose` table, with what zkcoord
    adds: the kind of client, the static id, and the lease remaining (as
    the coordinator says it now, else ZooKeeper's members without it)."""
    lines = coordinator_lines(view)
    if view.get("members_unavailable"):
        lines.append(f"Members as ZooKeeper last recorded them; the coordinator cannot say now: "
                     f"{view['members_unavailable']}")
    lines.append("")
    if not view["members"]:
        return lines + [f"Consumer group '{view['group']}' has no active members."]
    rows = [[view["group"], m["consumer_id"], _host(m["host"]), _show(m["client_id"]), kind_name(m.get("kind")),
             m["consumer_id"] if m.get("static") else "-", lease_text(m), str(len(m["partitions"])),
             ",".join(f"{p['topic']}({p['partition']})" for p in m["partitions"]) or "-"]
            for m in view["members"]]
    return lines + table(["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "CLIENT", "STATIC-ID", "LEASE-REMAINING",
                          "#PARTITIONS", "ASSIGNMENT"], rows, {7: 12})


def render_state(view: dict) -> list[str]:
    """Kafka's `--describe --state` table."""
    where = view["coordinator"]
    coordinator = (f"{where['host']}:{where['port']} ({where['server']})" if where["host"]
                   else "-" if where["server"] is None else f"- ({where['server']})")
    row = [view["group"], coordinator, _show(view["strategy"]), view["state"], str(len(view["members"]))]
    return coordinator_lines(view) + [""] + table(
        ["GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"], [row], {})


def render_history(view: dict) -> list[str]:
    """The group's last rebalance rounds, newest first."""
    lines = coordinator_lines(view) + [""]
    if not view["history"]:
        return lines + [f"Consumer group '{view['group']}' has no rebalance recorded."]
    rows = [[started_at(r["started_ms"]), str(r["generation"]), r["outcome"], f"{r['duration_ms']} ms",
             str(r["members"]), str(r["moved"]), str(r["paused"]), f"{r['paused_ms'] / 1000:.1f}",
             r["trigger"], r["error"] or r["reason"]]
            for r in reversed(view["history"])]
    return lines + table(["STARTED", "GEN", "OUTCOME", "DURATION", "MEMBERS", "MOVED", "PAUSED", "PAUSED-S",
                          "TRIGGER", "REASON"], rows, {})


def started_at(ms: int) -> str:
    """A round's start as UTC, to the millisecond."""
    return datetime.datetime.fromtimestamp(ms / 1000, datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


def log_end_offsets(client, timeout_s: Optional[float] = None, tls=None, credential=None,
                    plain_without_tls: bool = False, kafka_bootstrap: Optional[list[str]] = None) -> Callable:
    """A function giving partitions' log end offsets, asked of the brokers
    registered in ZooKeeper, or of those Kafka's Metadata at
    ``kafka_bootstrap`` names (each connection within ``timeout_s``, by default
    BrokerOffsets'; over TLS with ``tls``, a client SSLContext; with SASL as
    ``credential``, (user, password), with PLAIN without TLS only if
    ``plain_without_tls``); a partition whose broker cannot say is left out."""
    from zkcoord.admin.brokers import LATEST_TIMESTAMP, TIMEOUT_S, BrokerOffsets

    def ends(partitions) -> dict:
        addresses = kafka_bootstrap or broker_addresses(client, layout.client_protocol(tls is not None,
                                                                                       credential is not None))
        # One request per leader; a partition whose leader is down, or that has none, shows no lag.
        with BrokerOffsets(addresses, TIMEOUT_S if timeout_s is None else timeout_s, tls=tls,
                           credential=credential, plain_without_tls=plain_without_tls) as brokers:
            known = brokers.offsets_known(partitions, LATEST_TIMESTAMP)
            if brokers.problems:
                log.warning("no lag for %d of %d partition(s): %s", len(set(partitions) - set(known)),
                            len(set(partitions)), "; ".join(brokers.problems))
            return known

    return ends


def register(subparsers) -> None:
    from zkcoord.admin import reset

    parser = subparsers.add_parser("groups", help="list consumer groups, describe one, reset its offsets")
    actions = parser.add_subparsers(dest="groups_action", metavar="ACTION", required=True)
    listing = actions.add_parser("list", help="list groups")
    listing.add_argument("--zookeeper", required=True)
    add_security_options(listing)
    listing.set_defaults(func=run)
    describe = actions.add_parser("describe", help="a group's offsets, lag and owners (or members, or state), "
                                                   "as kafka-consumer-groups --describe prints them")
    describe.add_argument("--zookeeper", required=True)
    add_security_options(describe)
    describe.add_argument("--group", required=True)
    view = describe.add_mutually_exclusive_group()
    view.add_argument("--members", action="store_true",
                      help="one line per member: host, client id, kind of client, static id, lease remaining, "
                           "partitions (asked of the group's coordinator; ZooKeeper's record if it cannot say)")
    view.add_argument("--state", action="store_true", help="one line: coordinator, strategy, state, members")
    view.add_argument("--history", action="store_true", help="the last rebalance rounds: when, why, how long, "
                                                            "what moved and paused, how each ended")
    describe.add_argument("--output", choices=("text", "json"), default="text",
                          help="json: one document holding every view (default text)")
    describe.add_argument("--json", dest="output", action="store_const", const="json", help="--output json")
    describe.add_argument("--no-lag", action="store_true", help="do not ask the brokers for log end offsets")
    add_client_options(describe)  # the brokers' log ends, as they must be asked
    describe.set_defaults(func=run)
    reset.register(actions)


def run(args: argparse.Namespace) -> int:
    try:
        if args.groups_action == "describe":
            layout.group_path(args.group)
    except layout.LayoutError as exc:
        print(f"zkcoord groups: {exc}", file=sys.stderr)
        return 2
    try:
        with zookeeper_session(args.zookeeper, security=security_from(args)) as client:
            if args.groups_action == "list":
                for name in list_groups(client):
                    print(name)
                return 0
            if args.group not in list_groups(client):
                print(f"zkcoord groups: no group {args.group!r}", file=sys.stderr)
                return 2
            view = describe_group(client, args.group,
                                  None if args.no_lag else log_end_offsets(
                                      client, tls=client_tls(args), credential=client_credential(args),
                                      plain_without_tls=args.password_without_tls,
                                      kafka_bootstrap=kafka_bootstrap(args)))
            if args.members:
                refuse_password_without_tls(args)  # the credential goes to the coordinator, as a reset's does
                view = with_live_members(view, lambda: live_members(
                    client, args.group, tls=client_tls(args), credential=client_credential(args)))
            if args.output == "json":
                print(json.dumps(view, indent=2))
            else:
                render = (render_members if args.members else render_state if args.state
                          else render_history if args.history else render_offsets)
                print("\n".join(render(view)))
            return 0
    except ZkcoordError as exc:
        print(f"zkcoord groups: {exc}", file=sys.stderr)
        return 1
