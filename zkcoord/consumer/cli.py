"""`zkcoord consume`: a group member on the command line, writing records as JSON lines.

Useful on its own (like a console consumer) and as the consumer process of the
end-to-end tests and drills:

- each output line carries the record, the member that delivered it, and
  ``ts`` and ``te``, the wall-clock times at which the poll() that returned it
  began and ended: the application had the record at some instant between;
- ``--status`` keeps a small JSON file with the member's current assignment,
  epoch and generation, and how many logs were truncated under its fetcher,
  rewritten on every change;
- ``--events`` appends a line for every Start and Stop the member obeyed, with
  the time, the partitions, the epoch and the generation;
- ``--slow-ms`` with SIGUSR1 makes the member slow on purpose: a Start or
  Stop within SLOW_ARMED_S of a SIGUSR1 takes that long to handle on the
  network thread (a fetcher slow to start or stop, a metadata lookup), so its
  answer is that late; the arming lapses after that, or at a SIGUSR2, so an
  unused one cannot bite later;
- ``--process-ms`` makes the application slow: after writing a batch's lines
  it takes that long before it polls again, as if processing the batch (a
  kill -9 meanwhile is a crash in the middle of a batch).

Offsets are auto-committed: a record counts as consumed once the next poll()
begins, after its line was written (a kill -9 before that delivers the
record again, with a line of its own, rather than skip it).

SIGTERM or SIGINT leaves the group cleanly; kill -9 is a crash.

With ``--kafka-brokers`` instead of ``--bootstrap`` the member is a stock
Kafka client (confluent-kafka, or kafka-python with ``--kafka-client``) that
joins the group through the brokers' group APIs, writing the same files: the
drills put such members in their groups beside thin consumers. Its events are
its rebalance callbacks. Its client id is its own (``zkcoord-consume-PID``):
the brokers tell a member's fetches from other processes' by the client id
and the address they come from (docs/DESIGN.md, "What a stock member is
promised").
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Callable, Optional


# The stock client libraries `zkcoord consume --kafka-brokers` can run, the default first.
STOCK_CLIENTS = ("confluent-kafka", "kafka-python")


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("consume", help="consume a topic as a member of a group")
    member = p.add_mutually_exclusive_group(required=True)
    member.add_argument("--bootstrap", help="zkcoord servers, host:port[,host:port...]")
    member.add_argument("--kafka-brokers", help="brokers, host:port[,host:port...]: consume as a stock Kafka "
                                                "client in the group, through their group APIs")
    p.add_argument("--kafka-client", choices=STOCK_CLIENTS, default=STOCK_CLIENTS[0],
                   help="with --kafka-brokers, the client library: librdkafka's (which revokes by itself when "
                        "its session ends unheard) or kafka-python (which, like Java's classic consumer, "
                        "keeps fetching when it loses its group coordinator)")
    add_member_options(p)
    p.add_argument("--max-messages", type=int, default=0, help="stop after this many (0: never)")
    p.add_argument("--output", type=Path, default=None, help="append records here as JSON lines (default stdout)")
    p.add_argument("--status", type=Path, default=None, help="keep the member's assignment in this JSON file")
    p.add_argument("--events", type=Path, default=None,
                   help="append every Start and Stop obeyed here as JSON lines")
    p.add_argument("--slow-ms", type=int, default=0,
                   help="after SIGUSR1, take this long over the next Start or Stop (fault drills)")
    p.add_argument("--process-ms", type=int, default=0,
                   help="take this long over each batch, after writing it, before polling again")
    p.set_defaults(func=run)


def add_member_options(p: argparse.ArgumentParser) -> None:
    """A member's settings as options (what config_from reads back): its
    subscription, its terms with the coordinator, TLS and its credential.
    Offsets are always auto-committed (see above)."""
    from zkcoord import settings
    from zkcoord.consumer.config import ConsumerConfig
    from zkcoord.security.config import CLIENT_TLS, TlsConfig

    which = p.add_mutually_exclusive_group(required=True)
    settings.add_options(which, ConsumerConfig, only=("topics", "pattern"))
    settings.add_options(p, ConsumerConfig, exclude=("topics", "pattern", "auto_commit"))
    settings.add_options(p, TlsConfig, only=CLIENT_TLS)
    p.add_argument("--password-file", default=None, metavar="PATH",
                   help="file whose first line is --user's password (default: $ZKCOORD_PASSWORD)")


def config_from(args: argparse.Namespace):
    """The ConsumerConfig the command line describes."""
    from zkcoord import settings
    from zkcoord.consumer.config import ConsumerConfig
    from zkcoord.security.config import TlsConfig
    from zkcoord.security.secrets import password_for

    user = getattr(args, "ConsumerConfig.user", None)
    return settings.from_args(ConsumerConfig, args, tls=settings.from_args(TlsConfig, args),
                              password=password_for(user, args.password_file))


_status_lock = threading.Lock()
_revoked = {"count": 0}  # partitions taken away from this process so far
SLOW_ARMED_S = 10.0
_slow_armed_at = {"t": None}  # monotonic time of the last SIGUSR1, until a Start or Stop uses it


def open_for_append(path: Path):
    """Open a JSON-lines file to add to, after a line a killed predecessor left
    torn, so the first new line stands on its own."""
    out = open(path, "a+", buffering=1)
    if out.tell() > 0:
        out.seek(out.tell() - 1)
        if out.read(1) != "\n":
            out.write("\n")
    return out


def append_event(path: Path, member: str, event: str, partitions, epoch: int = -1, generation: int = -1) -> None:
    """One line per Start or Stop obeyed, written before the coordinator hears the answer."""
    line = json.dumps({"ts": time.time(), "member": member, "event": event,
                       "partitions": sorted([t, p] for t, p in partitions),
                       "epoch": epoch, "generation": generation})
    with _status_lock, open_for_append(path) as events:
        events.write(line + "\n")


def _write_status(path: Path, member: str, registered: bool, assignment, epoch: int = -1,
                  generation: int = -1, log_truncations: int = 0) -> None:
    """Rewrite the status file. Called from the membership thread inside Stop
    and Start handling (so the file changes before the coordinator hears the
    answer) and from the poll loop for registration changes."""
    status = {
        "consumer_id": member,
        "pid": os.getpid(),
        "registered": registered,
        "epoch": epoch,
        "generation": generation,
        "assignment": sorted([t, p] for t, p in assignment),
        "revoked": _revoked["count"],
        "log_truncations": log_truncations,  # logs truncated under the fetcher (zkcoord.fetch.recovery)
    }
    with _status_lock:
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_text(json.dumps(status, sort_keys=True))
        tmp.replace(path)


def record_line(topic: str, partition: int, offset: int, value, member: str, began: float,
                 returned: float) -> str:
    """One delivered record as an output line: the record, who delivered it,
    and the poll that returned it (began, returned)."""
    return json.dumps({
        "topic": topic, "partition": partition, "offset": offset,
        "value": (value or b"").decode("utf-8", "backslashreplace"),
        "member": member, "ts": round(began, 6), "te": round(returned, 6),
    }) + "\n"


def _be_slow_if_armed(slow_ms: int) -> None:
    armed, _slow_armed_at["t"] = _slow_armed_at["t"], None
    if armed is not None and time.monotonic() - armed < SLOW_ARMED_S:
        time.sleep(slow_ms / 1000.0)


def run(args: argparse.Namespace) -> int:
    from zkcoord.consumer.consumer import Consumer
    from zkcoord.errors import ConfigError
    from zkcoord.interrupts import on_stop

    if args.max_messages < 0:
        raise ConfigError("--max-messages must not be negative")
    if args.slow_ms < 0:
        raise ConfigError("--slow-ms must not be negative")
    if args.process_ms < 0:
        raise ConfigError("--process-ms must not be negative")
    stop = threading.Event()
    on_stop(stop.set)
    signal.signal(signal.SIGUSR1, lambda *_: _slow_armed_at.update(t=time.monotonic()))
    signal.signal(signal.SIGUSR2, lambda *_: _slow_armed_at.update(t=None))
    out = open_for_append(args.output) if args.output else sys.stdout

    if args.kafka_brokers:
        return _run_stock(args, out, stop)

    def observe(event: str, partitions) -> None:
        if event == "stop":
            _revoked["count"] += len(partitions)
        membership = consumer.membership
        if args.events is not None:
            append_event(args.events, consumer.consumer_id, event, partitions, membership.epoch,
                          membership.generation)
        if args.status is not None:
            _write_status(args.status, consumer.consumer_id, membership.registered.is_set(),
                          consumer.assignment(), membership.epoch, membership.generation,
                          consumer.fetch_metrics.truncations())

    class SlowToObey(Consumer):
        """The fault being drilled: the network thread slow over a Start or Stop."""

        def on_start(self, partitions):
            _be_slow_if_armed(args.slow_ms)
            super().on_start(partitions)

        def on_stop(self, partitions):
            final = super().on_stop(partitions)
            _be_slow_if_armed(args.slow_ms)
            return final

    hooked = args.status is not None or args.events is not None
    consumer = (SlowToObey if args.slow_ms else Consumer)(
        args.bootstrap.split(","), config_from(args),
        on_assign=(lambda partitions: observe("start", partitions)) if hooked else None,
        on_revoke=(lambda partitions: observe("stop", partitions)) if hooked else None,
    )
    member = consumer.consumer_id
    last_status = [None]

    def poll():
        return [(r.topic, r.partition, r.offset, r.value, member) for r in consumer.poll(100)]

    def keep_status():
        current = (consumer.membership.registered.is_set(), tuple(sorted(consumer.assignment())),
                   consumer.membership.epoch, consumer.membership.generation, consumer.fetch_metrics.truncations())
        if current != last_status[0]:
            _write_status(args.status, member, *current)
            last_status[0] = current

    try:
        deliver(out, stop, args.max_messages, poll, keep_status if args.status is not None else None,
                 args.process_ms)
    finally:
        out.flush()
        consumer.close()
    return 0


def deliver(out, stop: threading.Event, max_messages: int, poll: Callable[[], list],
             keep_status: Optional[Callable[[], None]], process_ms: int = 0, between_polls_s: float = 0.0) -> None:
    """Either kind of member's loop: write each record ``poll()`` returns,
    as (topic, partition, offset, value, member), dated by that poll; keep
    the status file after each; take ``process_ms`` over each batch, and
    ``between_polls_s`` after every poll (for a ``poll()`` that does not wait
    for records itself); stop on ``stop`` or after ``max_messages``."""
    consumed = 0
    while not stop.is_set():
        began = time.time()
        records = poll()
        returned = time.time()
        for topic, partition, offset, value, member in records:
            out.write(record_line(topic, partition, offset, value, member, began, returned))
        consumed += len(records)
        if keep_status is not None:
            keep_status()
        if max_messages and consumed >= max_messages:
            break
        if records and process_ms:
            out.flush()  # what the application holds is on record before it works on it
            stop.wait(process_ms / 1000.0)
        if between_polls_s:
            stop.wait(between_polls_s)


def _stock_client_id() -> str:
    """A client id of this process alone: librdkafka's default ("rdkafka") and
    kafka-python's are shared by every process on a host, and a broker fences
    a member's fetches by client id and address."""
    return f"zkcoord-consume-{os.getpid()}"


class _StockMember:
    """What either stock client's member writes: its events and status, under
    the member id it last took partitions with (a client forgets its member id
    when it loses its session, before it reports the partitions lost; those
    are still that member's)."""

    def __init__(self, args: argparse.Namespace, member_id: Callable[[], str]):
        self.args = args
        self.member_id = member_id
        self.label = "-"
        self.held: set = set()
        self._last_status = None

    def name(self) -> str:
        return self.member_id() or self.label

    def changed(self, event: str, tps) -> None:
        tps = set(tps)
        if event == "start":
            self.label = self.member_id() or self.label
            self.held.update(tps)
        else:
            self.held.difference_update(tps)
            _revoked["count"] += len(tps)
        if self.args.events is not None:
            append_event(self.args.events, self.label, event, tps)
        if self.args.status is not None:
            _write_status(self.args.status, self.name(), True, self.held)

    def keep_status(self) -> None:
        current = (self.name(), tuple(sorted(self.held)))
        if current != self._last_status:
            self._last_status = current
            self._write()

    def _write(self) -> None:
        # Registered once it has a member id.
        _write_status(self.args.status, self.name(), self.name() != "-", self.held)

    def run(self, out, stop: threading.Event, poll: Callable[[], list], close: Callable[[], None]) -> int:
        try:
            if self.args.status is not None:
                self.keep_status()
            deliver(out, stop, self.args.max_messages, poll,
                     self.keep_status if self.args.status is not None else None, self.args.process_ms)
        finally:
            out.flush()
            close()
        return 0


def _run_stock(args: argparse.Namespace, out, stop: threading.Event) -> int:
    """The member as a stock Kafka client; same output, status and events."""
    from zkcoord.addresses import parse_bootstrap

    brokers = ",".join(f"{host}:{port}" for host, port in parse_bootstrap(args.kafka_brokers))
    config = config_from(args)
    for armed_by in (signal.SIGUSR1, signal.SIGUSR2):  # --slow-ms is a thin consumer's fault
        signal.signal(armed_by, signal.SIG_IGN)
    topics = list(config.topics) or ["^" + config.pattern]
    if args.kafka_client == "kafka-python":
        return _run_kafka_python(args, config, brokers, topics, out, stop)
    return _run_confluent(args, config, brokers, topics, out, stop)


def _run_confluent(args, config, brokers: str, topics: list[str], out, stop: threading.Event) -> int:
    from confluent_kafka import Consumer as KafkaConsumer

    from zkcoord.broker.groups.protocols import ASSIGNOR_FOR_STRATEGY

    from zkcoord.security.config import librdkafka_settings

    assignors = [ASSIGNOR_FOR_STRATEGY[s] for s in config.assignment_strategies if s in ASSIGNOR_FOR_STRATEGY]
    # A client speaks one rebalance style: the first assignor's.
    cooperative = bool(assignors) and assignors[0] == "cooperative-sticky"
    assignors = [a for a in assignors if (a == "cooperative-sticky") == cooperative] or ["range"]
    settings = {
        "bootstrap.servers": brokers, "group.id": config.group, "client.id": _stock_client_id(),
        "session.timeout.ms": config.session_timeout_ms,
        "heartbeat.interval.ms": max(config.session_timeout_ms // 6, 100),
        "max.poll.interval.ms": config.max_poll_interval_ms,
        "auto.offset.reset": "earliest" if config.auto_offset_reset == "smallest" else "latest",
        "enable.auto.commit": True, "auto.commit.interval.ms": 200,
        "partition.assignment.strategy": ",".join(assignors),
        "topic.metadata.refresh.interval.ms": 1000, "isolation.level": config.isolation_level,
    }
    if config.consumer_id:
        settings["group.instance.id"] = config.consumer_id
    settings.update(librdkafka_settings(config.tls, config.user, config.password))
    consumer = KafkaConsumer(settings)
    member = _StockMember(args, consumer.memberid)

    def changed(event: str, partitions) -> None:
        member.changed(event, {(p.topic, p.partition) for p in partitions})

    consumer.subscribe(topics, on_assign=lambda c, ps: changed("start", ps),
                       on_revoke=lambda c, ps: changed("stop", ps), on_lost=lambda c, ps: changed("stop", ps))

    def poll():
        records = []
        for message in consumer.consume(100, 0.1):
            if message.error():
                print(f"zkcoord consume: {message.error()}", file=sys.stderr)  # the client retries
                continue
            records.append((message.topic(), message.partition(), message.offset(), message.value(),
                            member.label))
        return records

    return member.run(out, stop, poll, consumer.close)


def _run_kafka_python(args, config, brokers: str, topics: list[str], out, stop: threading.Event) -> int:
    from kafka import ConsumerRebalanceListener, KafkaConsumer
    from kafka.coordinator.assignors.range import RangePartitionAssignor
    from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
    from kafka.coordinator.assignors.sticky.sticky_assignor import StickyPartitionAssignor

    from zkcoord.errors import ConfigError

    if config.user or config.tls.speaks:
        raise ConfigError("--kafka-client kafka-python runs without TLS or SASL; use confluent-kafka")
    known = {"range": RangePartitionAssignor, "roundrobin": RoundRobinPartitionAssignor,
             "sticky": StickyPartitionAssignor}
    # kafka-python rebalances eagerly only: each of our strategies by its eager
    # assignor (the cooperative-sticky the other clients are given for sticky
    # would leave it sharing no protocol with them).
    chosen = tuple(known[s] for s in config.assignment_strategies if s in known) or (RangePartitionAssignor,)
    options = dict(
        bootstrap_servers=brokers.split(","), group_id=config.group, client_id=_stock_client_id(),
        session_timeout_ms=config.session_timeout_ms,
        heartbeat_interval_ms=max(config.session_timeout_ms // 6, 100),
        max_poll_interval_ms=config.max_poll_interval_ms,
        auto_offset_reset="earliest" if config.auto_offset_reset == "smallest" else "latest",
        enable_auto_commit=True, auto_commit_interval_ms=200, partition_assignment_strategy=chosen,
        metadata_max_age_ms=1000, isolation_level=config.isolation_level)
    if config.consumer_id:
        options["group_instance_id"] = config.consumer_id
    consumer = KafkaConsumer(**options)

    def member_id() -> str:
        generation = consumer._coordinator._generation  # kafka-python names it nowhere public
        return generation.member_id if generation.has_member_id() else ""

    member = _StockMember(args, member_id)

    class Listener(ConsumerRebalanceListener):
        def on_partitions_assigned(self, assigned):
            member.changed("start", {(p.topic, p.partition) for p in assigned})

        def on_partitions_revoked(self, revoked):
            member.changed("stop", {(p.topic, p.partition) for p in revoked})

        def on_partitions_lost(self, lost):
            member.changed("stop", {(p.topic, p.partition) for p in lost})

    if config.pattern:
        consumer.subscribe(pattern=config.pattern, listener=Listener())
    else:
        consumer.subscribe(topics, listener=Listener())

    def poll():
        return [(r.topic, r.partition, r.offset, r.value, member.label)
                for batch in consumer.poll(timeout_ms=100).values() for r in batch]

    return member.run(out, stop, poll, consumer.close)
