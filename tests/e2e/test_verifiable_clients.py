"""Kafka's own system-test clients against a zkcoord group: Kafka 4's
VerifiableProducer writes a bounded count of records with acks=all while
two groups of three VerifiableConsumers (the classic protocol, one group
eager with the range assignor, one cooperative-sticky; commits of their own
after each poll, auto commit off) read them side by side and go through
what Kafka's OffsetValidationTest puts its groups through: three join; a
fourth joins; one leaves cleanly
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
# The producer writes for 36 s: through the joins, the leave and the member's kill
# (about 25 s on two cores), and into the coordinator's kill unless the machine is slow.
RECORDS = 9000
THROUGHPUT = 250  # records/s
SESSION_TIMEOUT_MS = 6000
# A member's every request is a chance for the bridge to hand it a change: heartbeat often.
CONSUMER_PROPERTIES = {"heartbeat.interval.ms": 500}
RANGE = "org.apache.kafka.clients.consumer.RangeAssignor"
COOPERATIVE = "org.apache.kafka.clients.consumer.CooperativeStickyAssignor"
EVENTS = "events.jsonl"
STEP_TIMEOUT_S = 45.0
# What a kill -9 may lose of the commits acknowledged before it (docs/BROKER.md,
# "the uncommitted window of a crash"): the broker holds a member's commits until
# the coordinator's next ping of it (a third of its session), the coordinator
# until its next flush to ZooKeeper; and a second for a loaded machine.
OFFSET_FLUSH_MS = int(SERVER_ARGS[SERVER_ARGS.index("--offset-flush-interval-ms") + 1])
UNKEPT_WINDOW_MS = SESSION_TIMEOUT_MS // 3 + OFFSET_FLUSH_MS + 1000
# And after it: the time stamped before the kill is sent, and a broker acknowledges
# commits until it sees its coordinator's connection close; a second, loaded.
UNKEPT_AFTER_MS = 1000


@pytest.fixture(scope="module")
def cluster(zk_ensemble, tmp_path_factory) -> Iterator[LocalCluster]:
    kafka_tools.runtime()  # Java and the jars, or a KafkaNotInstalled saying what to run, before anything starts
    with fresh_chroot(zk_ensemble.connect_string, "verifiable") as (connect, _zk):
        with LocalCluster(connect, tmp_path_factory.mktemp("verifiable"), SERVER_ARGS) as zkc:
            zkc.start_servers(SERVERS)
            yield zkc


def now_ms() -> int:
    return int(time.time() * 1000)


def start_client(name: str, directory: Path, tool: str, args: list[str], properties: dict) -> ManagedProcess:
    """A verifiable client under ``directory``/``name``, its settings in a
    properties file, its stdout its events."""
    directory = directory / name
    directory.mkdir(parents=True)
    config = directory / "client.properties"
    config.write_text("".join(f"{key}={value}\n" for key, value in properties.items()))
    return start_tool(name, directory, tool, [*args, "--command-config", str(config)], stdout_name=EVENTS)


def events_of(process: ManagedProcess) -> list[dict]:
    return read_json_lines(process.stdout_path)


class VerifiableGroup:
    """The VerifiableConsumers of one group under ``directory``, reading
    ``topic``, which ``producer`` writes."""

    def __init__(self, cluster: LocalCluster, directory: Path, topic: str, group: str, strategy: str,
                 producer: ManagedProcess):
        self.cluster, self.directory, self.topic, self.group, self.strategy = cluster, directory, topic, group, strategy
        self.producer = producer
        self.incremental = "Cooperative" in strategy
        self.consumers: dict[str, ManagedProcess] = {}
        self.killed: set[str] = set()  # kill -9: no shutdown_complete will say so (kafkatest's handle_kill_process)
        self.stopped: set[str] = set()  # told to leave
        self.settled_at: dict[str, int] = {}  # step: when the group held the topic and had caught up (epoch ms)

    def start_consumer(self) -> str:
        name = f"consumer-{len(self.consumers) + 1}"
        # A client id of its own: the broker's fetch fences tell clients apart by it.
        self.consumers[name] = start_client(name, self.directory, VERIFIABLE_CONSUMER, [
            "--bootstrap-server", self.cluster.broker_list, "--topic", self.topic, "--group-id", self.group,
            "--group-protocol", "classic", "--assignment-strategy", self.strategy, "--reset-policy", "earliest",
            "--session-timeout", str(SESSION_TIMEOUT_MS)], {**CONSUMER_PROPERTIES, "client.id": f"{self.group}-{name}"})
        return name

    def leave(self, name: str) -> None:
        """SIGTERM: the tool closes its consumer, which leaves the group."""
        self.stopped.add(name)
        assert self.consumers[name].terminate(timeout=30) is not None
        assert any(e.get("name") == "shutdown_complete" for e in events_of(self.consumers[name]))

    def kill(self, name: str) -> None:
        self.killed.add(name)
        self.consumers[name].kill()

    # -- reading the events ---------------------------------------------------------------------

    def streams(self) -> dict[str, list[dict]]:
        return {name: events_of(process) for name, process in self.consumers.items()}

    def acked(self) -> set:
        return ve.acked(events_of(self.producer))

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

        wait_until(settled, timeout=STEP_TIMEOUT_S, fail_on=(ProcessExited,),
                   message=f"{members} consumers of {self.group} to hold the topic after {what}")
        acked = self.acked()
        wait_until(lambda: self.caught_up(acked), timeout=STEP_TIMEOUT_S,
                   message=f"{self.group}: the records acknowledged until {what} consumed")
        self.settled_at[what] = now_ms()

    def check(self, acked: set, planned_until: int, coordinator_killed_at: int) -> str:
        """Every check on the streams; what is worth reporting."""
        ends: dict = {}
        for tp, offset in acked:
            ends[tp] = max(ends.get(tp, 0), offset + 1)
        wait_until(lambda: self.caught_up(acked), timeout=30, message=f"{self.group}'s consumers to drain")
        wait_until(lambda: ve.last_commits(ve.merge(self.streams())) == ends, timeout=15,
                   message=f"{self.group}: every partition committed to its end")
        streams = self.streams()
        merged = ve.merge(streams)
        violations = [v for name, events in streams.items()
                      for v in ve.consumer_violations(name, events, self.incremental)]
        # A killed member's commits are kept (its broker answers the coordinator's
        # pings for it until its session ends): only the coordinator's kill may lose some.
        violations += ve.group_violations(merged, [ve.Crash(coordinator_killed_at, UNKEPT_WINDOW_MS, after_ms=UNKEPT_AFTER_MS)])
        assert [str(v) for v in violations] == []
        assert ve.lost(acked, merged) == []
        repeated = list(ve.duplicates(merged))
        assert [d for d in repeated if d.timestamp < planned_until] == []
        # Kafka keeps every commit it acknowledged; zkcoord may lose the last ones in a crash.
        below = [v for v in ve.group_violations(merged) if v.kind == ve.BEHIND_COMMITTED]
        return (f"{self.group}: whole and caught up {(self.settled_at[MEMBER_KILLED] - planned_until) / 1000:.1f} s "
                f"after {MEMBER_KILLED}, {(self.settled_at[COORDINATOR_KILLED] - coordinator_killed_at) / 1000:.1f} s "
                f"after {COORDINATOR_KILLED}; {sum(ve.consumed(merged).values())} records consumed, "
                f"{len(repeated)} read again after the kills, {len(below)} batches read from below an acknowledged "
                f"commit: " + "; ".join(map(str, below)))

    def stop(self) -> None:
        for process in self.consumers.values():
            process.terminate(timeout=10)


MEMBER_KILLED = "a member's kill -9"
COORDINATOR_KILLED = "the coordinator's kill -9"


def coordinator_of(cluster: LocalCluster, group: str) -> int | None:
    server = group_coordinator(cluster.zk, group)[2]
    return int(server) if server is not None and server.isdigit() else None


def test_verifiable_consumers_through_joins_a_leave_and_kills(cluster, tmp_path):
    """An eager (range) and a cooperative (cooperative-sticky) group read the
    same topic side by side, through the same steps."""
    topic = "verifiable"
    strategies = {f"{topic}-range": RANGE, f"{topic}-cooperative": COOPERATIVE}
    coordinators = {wait_until(lambda: coordinator_of(cluster, group), timeout=30,
                               message="the groups' coordinator") for group in strategies}
    assert len(coordinators) == 1, "one slot: the groups share their coordinator"
    (coordinator,) = coordinators
    others = [server for server in cluster.servers if server != coordinator and cluster.servers[server].alive]
    topic_admin.create_topic(cluster.zk, topic, assignment={p: [others[p % len(others)]] for p in range(PARTITIONS)})
    cluster.wait_led(topic, PARTITIONS)

    producer = start_client("producer", tmp_path, VERIFIABLE_PRODUCER, [
        "--bootstrap-server", cluster.broker_list, "--topic", topic, "--max-messages", str(RECORDS),
        "--throughput", str(THROUGHPUT), "--acks", "-1"], {"client.id": "verifiable-producer"})
    groups = [VerifiableGroup(cluster, tmp_path / group, topic, group, strategy, producer)
              for group, strategy in strategies.items()]
    try:
        wait_until(lambda: groups[0].acked(), timeout=30, message="the producer's first acknowledgement")
        for group in groups:
            for _ in range(3):
                group.start_consumer()
        for group in groups:
            group.settle(3, "three joined")
        for group in groups:
            group.start_consumer()
        for group in groups:
            group.settle(4, "a fourth joined")
        for group in groups:
            group.leave("consumer-2")
        for group in groups:
            group.settle(3, "a clean leave")

        planned_until = now_ms()  # no duplicates allowed before this
        for group in groups:
            group.kill("consumer-3")
        for group in groups:
            group.settle(2, MEMBER_KILLED, since_ms=planned_until)

        coordinator_killed_at = now_ms()
        cluster.servers[coordinator].kill()

        def successor():
            current = coordinator_of(cluster, groups[0].group)
            return current if current != coordinator else None

        assert wait_until(successor, timeout=30, message="a successor coordinator") in others
        for group in groups:
            group.settle(2, COORDINATOR_KILLED, since_ms=coordinator_killed_at)

        wait_until(lambda: producer.returncode is not None, timeout=RECORDS / THROUGHPUT + 30,
                   message="the producer to finish")
        acked = groups[0].acked()
        assert len(acked) == RECORDS
        for group in groups:
            print(f"verifiable clients: {group.check(acked, planned_until, coordinator_killed_at)}")
    finally:
        for group in groups:
            group.stop()
        producer.terminate(timeout=10)
