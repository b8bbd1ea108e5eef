"""Kafka's own system-test clients against a zkcoord group: Kafka 4's
VerifiableProducer writes a bounded count of records with acks=all while
three VerifiableConsumers (the classic protocol, commits of their own after
each poll, auto commit off) go through what Kafka's OffsetValidationTest
puts its groups through: they join; a fourth joins; one leaves cleanly
(SIGTERM: the tool closes its consumer); one is killed -9; the coordinator
server holding the group is killed -9 and its successor takes the group
over; the producer finishes and the consumers drain.

The clients' JSON event streams are then checked as Kafka's system tests
check them (zkcoord.testing.verifiable_events): every acknowledged record
consumed, each consumer's stream sound, no batch read from below the group's
last commit and no commit moving backwards, no record consumed twice before
the first kill -9 (after it, records read again from the last commit are
counted and reported). One allowance, for the coordinator's kill alone: the
commits acknowledged in the window it may lose (UNKEPT_WINDOW_MS) no longer
count, and the batches read again from below them are reported.

One cluster for the module: real ZooKeeper, three zkcoord servers with their
brokers. The topic lives on the brokers of the two servers that do not
coordinate the group, so killing the coordinator tests the coordinator's
failover, not a lost unreplicated partition.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Iterator

import pytest

from tests.e2e.conftest import SERVER_ARGS
from zkcoord.admin import topics as topic_admin
from zkcoord.admin.client import group_coordinator
from zkcoord.testing import LocalCluster, fresh_chroot, read_json_lines, wait_until
from zkcoord.testing import kafka_tools
from zkcoord.testing import verifiable_events as ve
from zkcoord.testing.kafka_tools import VERIFIABLE_CONSUMER, VERIFIABLE_PRODUCER, start_tool
from zkcoord.testing.process import ManagedProcess, ProcessExited

SERVERS = 3
PARTITIONS = 6  # four members at most: every member holds some
# The producer runs through every step on a quiet machine (about 30 s) and a little past it.
RECORDS = 9000
THROUGHPUT = 250  # records/s
SESSION_TIMEOUT_MS = 6000
# A member's every request is a chance for the bridge to hand it a change: heartbeat often.
CONSUMER_PROPERTIES = {"heartbeat.interval.ms": 500, "metadata.max.age.ms": 5000}
RANGE = "org.apache.kafka.clients.consumer.RangeAssignor"
EVENTS = "events.jsonl"
STEP_TIMEOUT_S = 45.0
# What a kill -9 may lose of the commits acknowledged before it (docs/BROKER.md,
# "the uncommitted window of a crash"): the broker holds a member's commits until
# the coordinator's next ping of it (a third of its session), the coordinator
# until its next flush to ZooKeeper; and a second for a loaded machine.
OFFSET_FLUSH_MS = int(SERVER_ARGS[SERVER_ARGS.index("--offset-flush-interval-ms") + 1])
UNKEPT_WINDOW_MS = SESSION_TIMEOUT_MS // 3 + OFFSET_FLUSH_MS + 1000


@pytest.fixture(scope="module")
def cluster(zk_ensemble, tmp_path_factory) -> Iterator[LocalCluster]:
    kafka_tools.runtime()  # Java and the jars, or a KafkaNotInstalled saying what to run, before anything starts
    with fresh_chroot(zk_ensemble.connect_string, "verifiable") as (connect, _zk):
        with LocalCluster(connect, tmp_path_factory.mktemp("verifiable"), SERVER_ARGS) as zkc:
            zkc.start_servers(SERVERS)
            yield zkc


def now_ms() -> int:
    return int(time.time() * 1000)


class VerifiableGroup:
    """One VerifiableProducer and the VerifiableConsumers of one group, under
    ``directory``, each a process whose stdout is its events."""

    def __init__(self, cluster: LocalCluster, directory: Path, topic: str, group: str, strategy: str):
        self.cluster, self.directory, self.topic, self.group, self.strategy = cluster, directory, topic, group, strategy
        self.incremental = "Cooperative" in strategy
        self.consumers: dict[str, ManagedProcess] = {}
        self.killed: set[str] = set()  # kill -9: no shutdown_complete will say so (kafkatest's handle_kill_process)
        self.stopped: set[str] = set()  # told to leave
        self.producer: ManagedProcess | None = None
        self.settled_at: dict[str, int] = {}  # step: when the group held the topic and had caught up (epoch ms)

    def _start(self, name: str, tool: str, args: list[str], properties: dict) -> ManagedProcess:
        directory = self.directory / name
        directory.mkdir(parents=True)
        config = directory / "client.properties"
        config.write_text("".join(f"{key}={value}\n" for key, value in properties.items()))
        return start_tool(name, directory, tool, [*args, "--command-config", str(config)], stdout_name=EVENTS)

    def start_producer(self) -> None:
        self.producer = self._start("producer", VERIFIABLE_PRODUCER, [
            "--bootstrap-server", self.cluster.broker_list, "--topic", self.topic, "--max-messages", str(RECORDS),
            "--throughput", str(THROUGHPUT), "--acks", "-1"], {"client.id": "verifiable-producer"})

    def start_consumer(self) -> str:
        name = f"consumer-{len(self.consumers) + 1}"
        # A client id of its own: the broker's fetch fences tell clients apart by it.
        self.consumers[name] = self._start(name, VERIFIABLE_CONSUMER, [
            "--bootstrap-server", self.cluster.broker_list, "--topic", self.topic, "--group-id", self.group,
            "--group-protocol", "classic", "--assignment-strategy", self.strategy, "--reset-policy", "earliest",
            "--session-timeout", str(SESSION_TIMEOUT_MS)], {**CONSUMER_PROPERTIES, "client.id": name})
        return name

    # -- reading the events ---------------------------------------------------------------------

    @staticmethod
    def events_of(process: ManagedProcess) -> list[dict]:
        return read_json_lines(process.stdout_path)

    def streams(self) -> dict[str, list[dict]]:
        return {name: self.events_of(process) for name, process in self.consumers.items()}

    def acked(self) -> set:
        return ve.acked(self.events_of(self.producer))

    def live(self) -> dict[str, ve.ConsumerState]:
        """The consumers not killed or shut down, as their events leave them."""
        states = {name: ve.consumer_state(events, self.incremental) for name, events in self.streams().items()}
        return {name: state for name, state in states.items() if name not in self.killed and not state.dead}

    def whole(self, members: int) -> bool:
        """``members`` consumers live and joined, and their assignments
        partition the topic (kafkatest's await_members and valid_assignment)."""
        live = self.live()
        held = [tp for state in live.values() for tp in state.assignment]
        return len(live) == members and all(s.joined for s in live.values()) and \
            sorted(held) == [(self.topic, p) for p in range(PARTITIONS)]

    def caught_up(self, acked: set) -> bool:
        return not set(acked) - set(ve.consumed(ve.merge(self.streams())))

    def settle(self, members: int, what: str, since_ms: int = 0) -> None:
        """Until ``members`` consumers hold the topic between them, each
        assigned at or after ``since_ms``, and have consumed every record the
        producer had acknowledged by then."""
        def settled() -> bool:
            for name, process in self.consumers.items():
                if name not in self.killed | self.stopped and not process.alive:
                    raise ProcessExited(f"{name} exited with {process.returncode}:\n{process.log_tail()}")
            streams = self.streams()
            rejoined = all(any(e.get("name") == "partitions_assigned" and e["timestamp"] >= since_ms
                               for e in streams[name]) for name in self.live())
            return rejoined and self.whole(members)

        wait_until(settled, timeout=STEP_TIMEOUT_S, message=f"{members} consumers to hold the topic after {what}",
                   fail_on=(ProcessExited,))
        acked = self.acked()
        wait_until(lambda: self.caught_up(acked), timeout=STEP_TIMEOUT_S,
                   message=f"the records acknowledged until {what} consumed")
        self.settled_at[what] = now_ms()

    def stop(self) -> None:
        for process in [*self.consumers.values(), *([self.producer] if self.producer else [])]:
            process.terminate(timeout=10)


@pytest.fixture
def verifiable(cluster, tmp_path) -> Iterator:
    groups: list[VerifiableGroup] = []

    def make(topic: str, group: str, strategy: str) -> VerifiableGroup:
        groups.append(VerifiableGroup(cluster, tmp_path / group, topic, group, strategy))
        return groups[-1]

    yield make
    for made in groups:
        made.stop()


MEMBER_KILLED = "a member's kill -9"
COORDINATOR_KILLED = "the coordinator's kill -9"


def coordinator_of(cluster: LocalCluster, group: str) -> int | None:
    server = group_coordinator(cluster.zk, group)[2]
    return int(server) if server is not None and server.isdigit() else None


def test_verifiable_consumers_through_joins_a_leave_and_kills(cluster, verifiable):
    topic = group = "verifiable-range"
    coordinator = wait_until(lambda: coordinator_of(cluster, group), timeout=30, message="the group's coordinator")
    others = [server for server in cluster.servers if server != coordinator and cluster.servers[server].alive]
    topic_admin.create_topic(cluster.zk, topic, assignment={p: [others[p % len(others)]] for p in range(PARTITIONS)})
    cluster.wait_led(topic, PARTITIONS)

    clients = verifiable(topic, group, RANGE)
    clients.start_producer()
    wait_until(lambda: len(clients.acked()) > 0, timeout=30, message="the producer's first acknowledgement")

    started = [clients.start_consumer() for _ in range(3)]
    clients.settle(3, "three joined")
    clients.start_consumer()
    clients.settle(4, "a fourth joined")

    leaving = clients.consumers[started[1]]
    clients.stopped.add(started[1])
    assert leaving.terminate(timeout=30) is not None
    wait_until(lambda: any(e.get("name") == "shutdown_complete" for e in clients.events_of(leaving)), timeout=10,
               message="the leaving consumer's shutdown_complete")
    clients.settle(3, "a clean leave")

    planned_until = now_ms()  # no duplicates allowed before this
    crashed = started[2]
    clients.consumers[crashed].kill()
    clients.killed.add(crashed)
    clients.settle(2, MEMBER_KILLED, since_ms=planned_until)

    coordinator_killed_at = now_ms()
    cluster.servers[coordinator].kill()

    def successor():
        current = coordinator_of(cluster, group)
        return current if current != coordinator else None

    assert wait_until(successor, timeout=30, message="a successor coordinator") in others
    clients.settle(2, COORDINATOR_KILLED, since_ms=coordinator_killed_at)

    wait_until(lambda: clients.producer.returncode is not None, timeout=RECORDS / THROUGHPUT + 30,
               message="the producer to finish")
    acked = clients.acked()
    wait_until(lambda: clients.caught_up(acked), timeout=30, message="the consumers to drain")
    ends = {}
    for tp, offset in acked:
        ends[tp] = max(ends.get(tp, 0), offset + 1)
    wait_until(lambda: ve.last_commits(ve.merge(clients.streams())) == ends, timeout=15,
               message="every partition committed to its end")

    streams = clients.streams()
    merged = ve.merge(streams)
    violations = [v for name, events in streams.items()
                  for v in ve.consumer_violations(name, events, clients.incremental)]
    # A killed member's commits are kept (its broker answers the coordinator's
    # pings for it until its session ends): only the coordinator's kill may lose some.
    violations += ve.group_violations(merged, [ve.Crash(coordinator_killed_at, UNKEPT_WINDOW_MS)])
    assert [str(v) for v in violations] == []
    assert len(acked) == RECORDS and ve.lost(acked, merged) == []
    repeated = list(ve.duplicates(merged))
    assert [d for d in repeated if d.timestamp < planned_until] == []
    # Kafka keeps every commit it acknowledged; zkcoord may lose the last ones in a crash.
    below = [v for v in ve.group_violations(merged) if v.kind == ve.BEHIND_COMMITTED]
    print(f"verifiable clients: the group whole and caught up "
          f"{(clients.settled_at[MEMBER_KILLED] - planned_until) / 1000:.1f} s after {MEMBER_KILLED}, "
          f"{(clients.settled_at[COORDINATOR_KILLED] - coordinator_killed_at) / 1000:.1f} s after {COORDINATOR_KILLED}")
    print(f"verifiable clients: {len(acked)} records acknowledged, {sum(ve.consumed(merged).values())} consumed, "
          f"{len(repeated)} read again after the kills, {len(below)} batches read from below an acknowledged commit: "
          + "; ".join(map(str, below)))
