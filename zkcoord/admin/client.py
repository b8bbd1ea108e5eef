"""What the operator's group commands share: reaching a group's coordinator and the brokers, and printing.

`zkcoord groups describe` (groups.py) and `zkcoord groups reset-offsets`
(reset.py) both find a group's coordinator in ZooKeeper, reach the servers
and brokers with the command's TLS and user options, and print tables as
Kafka's `kafka-consumer-groups` prints them; this module holds that, below
both, so that neither imports the other's internals.
"""

from __future__ import annotations

import argparse
from typing import Optional

from kazoo.exceptions import NoNodeError

from zkcoord.zk import layout
from zkcoord.zk.layout import slot_of


# -- a group's coordinator, as ZooKeeper says --------------------------------------------------------

def read_or_none(client, path: str, decode):
    """The node at ``path`` decoded, None if there is none."""
    try:
        return decode(client.get(path)[0])
    except NoNodeError:
        return None


def group_coordinator(client, group: str) -> tuple[int, int, Optional[str], Optional[int]]:
    """``group``'s coordinator slot, the cluster's slot count, the server
    elected in that slot (None if none is) and the slot's epoch (None if
    never elected). A cluster without a slot count node has one slot."""
    slots = slot_count(client)
    slot = slot_of(group, slots)
    server, epoch, _since_ms = slot_holder(client, slot)
    return slot, slots, server, epoch


def slot_count(client) -> int:
    """How many coordinator slots the cluster has (one without a slot count node)."""
    return read_or_none(client, layout.SLOTS, layout.decode_slot_count) or 1


def slot_holder(client, slot: int) -> tuple[Optional[str], Optional[int], Optional[int]]:
    """Coordinator slot ``slot``'s elected server (None if none is), its
    epoch (None if never elected) and since when the server holds it (the
    election node's creation, in ms since 1970; None if none is elected)."""
    path = layout.slot_coordinator_path(slot)
    try:
        data, stat = client.get(path)
        server, since_ms = layout.decode_coordinator(data, path), stat.ctime
    except NoNodeError:
        server = since_ms = None
    epoch = read_or_none(client, layout.slot_epoch_path(slot),
                         lambda data: layout.decode_coordinator_epoch(data, layout.slot_epoch_path(slot)))
    return server, epoch, since_ms


# -- reaching the servers and brokers ----------------------------------------------------------------

# How long an operator's command waits to connect to a server.
CONNECT_TIMEOUT_S = 5.0


def ask_coordinator(address: tuple[str, int], request, tls=None, timeout: float = CONNECT_TIMEOUT_S):
    """One operator's request (ResetOffsets, DescribeGroup) to the coordinator
    at ``address``, on a connection of its own (the coordinator answers and
    closes it); its answer, refusals included. Raises ZkcoordError or
    OSError when it could not be asked or did not answer."""
    from zkcoord import wire
    from zkcoord.channel import Channel

    channel = Channel.connect(address[0], address[1], CONNECT_TIMEOUT_S, tls=tls)
    try:
        answer = channel.request(request, timeout)
    finally:
        channel.close()
    expected = wire.RESPONSES[type(request)]
    if not isinstance(answer, expected):
        raise wire.MalformedFrame(f"expected {expected.__name__}, got {type(answer).__name__}")
    return answer


def client_tls(args: argparse.Namespace):
    """The client SSLContext the command's --tls-* options describe (None: plaintext), made once."""
    if not hasattr(args, "tls_context"):
        from zkcoord import settings
        from zkcoord.security.config import TlsConfig
        from zkcoord.security.tls import client_context

        args.tls_context = client_context(settings.from_args(TlsConfig, args))
    return args.tls_context


def add_client_options(parser: argparse.ArgumentParser) -> None:
    """How a command reaches the servers and brokers: TLS, and a user for those that authenticate."""
    from zkcoord import settings
    from zkcoord.security.config import CLIENT_TLS, TlsConfig

    settings.add_options(parser, TlsConfig, only=CLIENT_TLS)
    parser.add_argument("--user", help="the operator's user, for servers and brokers that authenticate "
                                       "(zkcoord users)")
    parser.add_argument("--password-file", metavar="PATH",
                        help="file whose first line is --user's password (default: $ZKCOORD_PASSWORD)")
    parser.add_argument("--password-without-tls", action="store_true",
                        help="let the password cross connections without TLS, where it is sent readable "
                             "(ResetOffsets to a coordinator, SASL/PLAIN to a broker); by default refused")
    parser.add_argument("--kafka-bootstrap", metavar="HOST:PORT,...",
                        help="Kafka brokers to ask for partitions and offsets, for a Kafka that registers none "
                             "in ZooKeeper (KRaft mode; the servers' --kafka-bootstrap); by default the brokers "
                             "registered in ZooKeeper, or those the servers name")


def kafka_bootstrap(args: argparse.Namespace) -> Optional[list[str]]:
    """The addresses of --kafka-bootstrap (None without it); ConfigError if one is not host:port."""
    from zkcoord.addresses import kafka_addresses

    return kafka_addresses(args.kafka_bootstrap) if args.kafka_bootstrap else None


def client_credential(args: argparse.Namespace):
    """(user, password) of the command's --user (None without one), read once; ConfigError without a password."""
    if not hasattr(args, "password"):
        from zkcoord.security.secrets import password_for

        args.password = password_for(args.user, args.password_file)
    return (args.user, args.password) if args.user else None


def refuse_password_without_tls(args: argparse.Namespace) -> None:
    """PasswordWithoutTls if the command would send --user's password to the coordinator readable, unallowed."""
    from zkcoord.security import secrets

    secrets.refuse_password_without_tls(args.user, client_tls(args) is not None, args.password_without_tls,
                                        "the coordinator connection", "--password-without-tls")


# -- output as Kafka's tools print it ------------------------------------------------------------------

def table(header: list[str], rows: list[list[str]], fixed: dict[int, int]) -> list[str]:
    """Left-aligned columns, as Kafka's tool prints them: the widths it fixes
    (``fixed``, by column) or the widest value; the last column unpadded."""
    widths = [fixed.get(i, max([len(header[i])] + [len(r[i]) for r in rows])) for i in range(len(header))]
    return [" ".join(cell.ljust(width) for cell, width in zip(line[:-1], widths)) + " " + line[-1]
            for line in [header, *rows]]
