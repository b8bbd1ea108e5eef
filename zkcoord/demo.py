"""`zkcoord demo`: a local cluster on real ZooKeeper doing real work, with a report.

It brings up a 3-node ZooKeeper ensemble and three zkcoord servers (each with
its embedded broker) on 127.0.0.1, creates a topic, starts a group of
consumer processes, produces messages with a standard Kafka client while it
changes the group (a member joins, one leaves cleanly, the coordinator is
killed with kill -9), and then checks the invariants from outside: every
partition owned by exactly one member, ZooKeeper's owners matching the
members, every message delivered, none twice on the planned changes, and
committed offsets never moving back. Last, the example Spark pipeline
(zkcoord/examples/pipeline.py) runs a streaming query that joins a group and
aggregates a keyed topic into parquet, exactly once.

With ``--kafka`` the records live in Apache Kafka instead of the servers'
embedded brokers: a 3-broker Kafka 4 cluster in KRaft mode (every node a
broker and a controller; replication factor 3, min.insync.replicas 2, the
producer with acks=all) beside the servers, which learn its brokers and
topics from its metadata. The same story runs on it, and a Kafka leader is
killed with kill -9 while the records flow: every message must still be
delivered, none twice on the planned changes.
"""

from __future__ import annotations

import argparse
import logging
import shutil
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path


def register(subparsers: argparse._SubParsersAction) -> None:
    demo = subparsers.add_parser("demo", help="run a local cluster end to end and print a report")
    demo.add_argument("--dir", type=Path, default=None, help="working directory (default: a temporary one)")
    demo.add_argument("--messages", type=int, default=20_000, help="messages to produce (default 20000)")
    demo.add_argument("--keep", action="store_true", help="keep the working directory (logs) at the end")
    demo.add_argument("--no-spark", dest="spark", action="store_false",
                      help="leave the Spark pipeline out (Spark's start-up alone takes a minute)")
    demo.add_argument("--kafka", action="store_true",
                      help="the records on a 3-broker Apache Kafka 4 cluster (KRaft) instead of the servers' "
                           "embedded brokers, and a Kafka leader killed mid-run")
    demo.set_defaults(func=run)


class _Report:
    def __init__(self) -> None:
        self.started = time.monotonic()
        self.checks: list[tuple[str, bool]] = []

    def section(self, title: str) -> None:
        print(f"\n== {title} " + "=" * max(0, 66 - len(title)), flush=True)

    def line(self, text: str) -> None:
        print(f"  {text}", flush=True)

    def check(self, what: str, ok: bool) -> None:
        self.checks.append((what, ok))
        print(f"  [{'ok' if ok else 'FAILED'}] {what}", flush=True)

    def elapsed(self) -> float:
        return time.monotonic() - self.started


PIPELINE = "zkcoord.examples.pipeline"
PIPELINE_RECORDS = 10_000
# How long the messages take to produce: every change below happens while
# they flow. Over Kafka longer, as its leader's failover waits out the
# broker's session first.
PRODUCING_S = 10.0
PRODUCING_OVER_KAFKA_S = 30.0
KAFKA_METADATA_INTERVAL_MS = 1000  # the servers' look at Kafka's metadata: a new topic is learnt within it


class _DataPlane:
    """Where the records live: the servers' embedded brokers, registered in
    ZooKeeper, or a Kafka cluster in KRaft mode (``kafka``) that keeps
    nothing in ZooKeeper."""

    def __init__(self, zk, cluster, kafka=None):
        self.zk, self.cluster, self.kafka = zk, cluster, kafka

    def server_args(self) -> tuple[str, ...]:
        if self.kafka is None:
            return ()
        return ("--no-broker", "--kafka-bootstrap", self.kafka.bootstrap,
                "--kafka-metadata-interval-ms", str(KAFKA_METADATA_INTERVAL_MS))

    @property
    def bootstrap(self) -> str:
        return self.kafka.bootstrap if self.kafka is not None else self.cluster.broker_list

    def create_topic(self, topic: str, partitions: int) -> None:
        from zkcoord.admin.topics import create_topic

        if self.kafka is not None:
            self.kafka.create_topic(topic, partitions)
        else:
            create_topic(self.zk, topic, partitions)

    def brokers(self) -> int:
        """How many brokers are live, as the cluster keeps them."""
        from zkcoord.zk import layout

        if self.kafka is not None:
            return len(self.kafka.live_brokers())
        return len(self.zk.get_children(layout.BROKER_IDS))

    def pipeline_args(self) -> list[str]:
        return ["--kafka-bootstrap", self.kafka.bootstrap] if self.kafka is not None else []


def _spark_pipeline(report: _Report, plane: _DataPlane, connect: str, workdir: Path) -> None:
    """The example pipeline (zkcoord/examples/pipeline.py): a streaming query that is a
    member of group 'pipeline', aggregating a keyed topic into parquet."""
    import importlib.util
    import subprocess
    import sys

    report.section("Spark pipeline: a streaming query as a group member")
    if importlib.util.find_spec("pyspark") is None:
        report.line("skipped: needs pyspark (scripts/install.sh spark)")
        return
    plane.create_topic("clicks", 4)
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", PIPELINE, "--zookeeper", connect, "--topic", "clicks",
         "--out", str(workdir / "clicks-per-user"), "--group", "pipeline", "--available-now",
         "--produce", str(PIPELINE_RECORDS), "--max-offsets-per-trigger", "4000", *plane.pipeline_args()],
        capture_output=True, text=True, timeout=600,
    )
    batches = [line for line in result.stdout.splitlines() if line.startswith("batch ")]
    totals = {}
    for line in result.stdout.splitlines():
        key, sep, rest = line.partition(": ")
        if sep and rest.endswith(" records") and key.startswith("user-"):
            totals[key] = int(rest.split()[0])
    for line in batches:
        report.line(line)
    report.line(f"per-user totals from parquet: {dict(sorted(totals.items()))}")
    report.line(f"pipeline ran in {time.monotonic() - started:.1f}s (Spark start-up included)")
    report.check(f"the pipeline counted each of the {PIPELINE_RECORDS} records exactly once",
                 result.returncode == 0 and sum(totals.values()) == PIPELINE_RECORDS)
    if result.returncode != 0:
        report.line(result.stderr[-2000:])


def _kill_a_kafka_leader(report: _Report, kafka, producer_thread, produced: dict, total: int, settle) -> int:
    """kill -9 the Kafka broker leading events-0 while the messages flow;
    Kafka elects new leaders from the in-sync replicas, and the producer
    (acks=all) and the members follow them. Returns the broker killed."""
    report.section("Failover: kill -9 of a Kafka leader")
    victim = kafka.leader_of("events", 0)
    led = sum(1 for replicas in kafka.replicas_of("events").values() if replicas.leader == victim)
    killed_at = time.monotonic()
    sent = produced["count"]
    kafka.brokers[victim].kill()
    flowing = f"while producing ({sent} of {total} messages sent)" if producer_thread.is_alive() else \
        "after the last message was sent"
    report.line(f"kafka {victim}, leader of events-0 and {led - 1} other partition(s), killed {flowing}")
    successor = kafka.wait_for_leader("events", 0, not_on={victim}, timeout=60)
    report.line(f"kafka {successor} leads events-0 after {time.monotonic() - killed_at:.1f}s "
                f"(the dead broker's session ran out first)")
    report.line(f"group whole {settle('the group after the Kafka failover'):.1f}s later "
                f"(its membership never changed: the members followed the new leaders)")
    return victim


def run(args: argparse.Namespace) -> int:
    from confluent_kafka import Producer
    from zkcoord.zk import client as zk_client

    from zkcoord.zk.nodes import read_offsets
    from zkcoord.errors import ConfigError
    from zkcoord.testing import LocalCluster, group_is_whole, wait_until
    from zkcoord.zk import layout
    from zkcoord.zk.ensemble import LocalEnsemble

    if args.messages < 100:
        raise ConfigError("--messages must be at least 100")
    logging.getLogger("kazoo").setLevel(logging.WARNING)
    workdir = args.dir or Path(tempfile.mkdtemp(prefix="zkcoord-demo-"))
    report = _Report()
    ensemble = LocalEnsemble.create(workdir / "zookeeper", nodes=3)
    cluster = None
    zk = None
    kafka = None
    try:
        report.section("ZooKeeper ensemble")
        ensemble.start()
        for s in ensemble.status():
            report.line(f"node {s.node}  127.0.0.1:{s.client_port}  {s.mode}")
        zk = zk_client.open_client(ensemble.connect_string)
        zk_client.start(zk, timeout=15)

        if args.kafka:
            from zkcoord.testing.kafka import KRAFT_MODE, KafkaCluster, KafkaSettings

            kafka = KafkaCluster(workdir / "kafka", KafkaSettings(KRAFT_MODE))
            report.section(f"Apache Kafka {kafka.version} in KRaft mode (the records' home)")
            kafka.start()
            for broker in kafka.brokers.values():
                report.line(f"kafka {broker.node_id}  {broker.address}  broker and controller")
        plane = _DataPlane(zk, None, kafka)
        report.section("zkcoord servers (coordinator candidates" + (
            ", no broker of their own)" if kafka is not None else " with embedded brokers)"))
        cluster = plane.cluster = LocalCluster(
            ensemble.connect_string, workdir / "cluster",
            ("--zk-session-timeout-ms", "4000", "--offset-flush-interval-ms", "500", *plane.server_args()))
        cluster.start_servers(3)
        wait_until(lambda: zk.exists(layout.COORDINATOR_PATH), 30, message="a coordinator")
        coordinator = int(layout.decode_coordinator(zk.get(layout.COORDINATOR_PATH)[0]))
        for s in cluster.servers.values():
            role = "coordinator" if s.server_id == coordinator else "standby"
            broker = f"  broker 127.0.0.1:{s.broker_port}" if s.embeds_broker else ""
            report.line(f"server {s.server_id}  protocol 127.0.0.1:{s.port}{broker}  {role}")
        wait_until(lambda: plane.brokers() == 3, 30, message="three brokers")
        plane.create_topic("events", 12)
        replicated = ", replication factor 3, min.insync.replicas 2" if kafka is not None else ""
        report.line(f"topic 'events': 12 partitions over 3 brokers{replicated}")

        report.section("A group of consumer processes")
        strategy = ["--strategy", "sticky", "--strategy", "range"]
        consumers = [cluster.add_consumer("demo", topics=["events"], extra=strategy) for _ in range(3)]
        partitions = {("events", p) for p in range(12)}

        def whole() -> bool:
            return group_is_whole(zk, "demo", consumers, partitions, every_member_holds=True)

        def settle(what: str) -> float:
            started = time.monotonic()
            wait_until(whole, 60, message=what)
            return time.monotonic() - started

        report.line(f"3 members settled in {settle('the group to settle'):.1f}s")

        # Production runs throughout, as a real pipeline's would.
        produced = {"count": 0}
        stop_producing = threading.Event()

        def produce() -> None:
            # A steady stream over about ten seconds, so that every change
            # below happens while data flows.
            producer = Producer({"bootstrap.servers": plane.bootstrap, "linger.ms": 5, "acks": "all",
                                 "log_level": 0})  # the kills below are on purpose: no connection chatter
            span = PRODUCING_OVER_KAFKA_S if kafka is not None else PRODUCING_S
            pause = span / max(1, args.messages // 200)
            while produced["count"] < args.messages and not stop_producing.is_set():
                for _ in range(min(200, args.messages - produced["count"])):
                    producer.produce("events", value=f"m-{produced['count']}".encode())
                    produced["count"] += 1
                producer.poll(0)
                time.sleep(pause)
            producer.flush(30)

        producer_thread = threading.Thread(target=produce, daemon=True)
        producer_thread.start()

        report.section("Planned changes while producing")
        wait_until(lambda: sum(len(c.records()) for c in consumers) > 1000, 60, message="first deliveries")
        consumers.append(cluster.add_consumer("demo", topics=["events"], extra=strategy))
        report.line(f"a 4th member joined; settled in {settle('the join'):.1f}s")
        consumers[0].terminate()
        report.line(f"member 1 left cleanly; settled in {settle('the leave'):.1f}s")
        planned_duplicates = sum(n - 1 for n in Counter(
            r["value"] for c in consumers for r in c.records()).values() if n > 1)
        report.check("no message delivered twice across the planned changes", planned_duplicates == 0)

        killed_kafka = None
        if kafka is not None:
            killed_kafka = _kill_a_kafka_leader(report, kafka, producer_thread, produced, args.messages, settle)

        report.section("Failover: kill -9 of the coordinator")
        before = read_offsets(zk, "demo")
        coordinator = int(layout.decode_coordinator(zk.get(layout.COORDINATOR_PATH)[0]))
        killed_at = time.monotonic()
        cluster.servers[coordinator].kill()
        report.line(f"server {coordinator} (the coordinator" + (" and one broker" if kafka is None else "")
                    + ") killed")
        wait_until(lambda: zk.exists(layout.COORDINATOR_PATH)
                 and int(layout.decode_coordinator(zk.get(layout.COORDINATOR_PATH)[0])) != coordinator,
                 60, message="a new coordinator")
        successor = int(layout.decode_coordinator(zk.get(layout.COORDINATOR_PATH)[0]))
        report.line(f"server {successor} elected after {time.monotonic() - killed_at:.1f}s")
        settle("the group after failover")
        report.line(f"group whole again {time.monotonic() - killed_at:.1f}s after the kill")
        report.check("committed offsets never moved back",
                     all(read_offsets(zk, "demo").get(tp, -1) >= o for tp, o in before.items()))
        cluster.servers[coordinator].start()
        if kafka is None:
            # The dead server's broker took its partitions' logs with it:
            # restarted so that every message can be delivered (its log is on disk).
            report.line(f"server {coordinator} restarted (its broker's log recovered from disk)")
        else:
            report.line(f"server {coordinator} restarted (a coordinator candidate again)")

        report.section("Delivery")
        if killed_kafka is not None:
            # Two in-sync replicas kept every partition writable; the third is
            # back for the replicated topic the pipeline creates.
            kafka.restart(killed_kafka)
            report.line(f"kafka {killed_kafka} restarted on its log")
        producer_thread.join(120)
        total = produced["count"]
        wait_until(lambda: len({r["value"] for c in consumers for r in c.records()}) >= total, 120,
                 message=f"all {total} messages delivered")
        values = Counter(r["value"] for c in consumers for r in c.records())
        missing = [n for n in range(total) if f"m-{n}" not in values]
        duplicates = sum(n - 1 for n in values.values() if n > 1)
        report.line(f"produced {total}, delivered {sum(values.values())} "
                    f"({duplicates} redelivered after the crash: the uncommitted window)")
        report.check(f"every one of the {total} messages delivered (no loss)", not missing)
        report.check("every partition owned by exactly one member, matching ZooKeeper", whole())
        for c in consumers:
            if c.alive:
                status = c.status()
                report.line(f"{status['consumer_id']}: {len(status['assignment'])} partitions, "
                            f"epoch {status['epoch']} generation {status['generation']}")

        if args.spark:
            _spark_pipeline(report, plane, ensemble.connect_string, workdir)
    finally:
        stop_producing_event = locals().get("stop_producing")
        if stop_producing_event is not None:
            stop_producing_event.set()
        if zk is not None:
            zk.stop()
        if cluster is not None:
            cluster.close()
        if kafka is not None:
            kafka.close()
        ensemble.stop()
        if not args.keep and args.dir is None:
            shutil.rmtree(workdir, ignore_errors=True)

    report.section("Report")
    failed = [what for what, ok in report.checks if not ok]
    report.line(f"{len(report.checks) - len(failed)} of {len(report.checks)} checks passed "
                f"in {report.elapsed():.1f}s")
    if args.keep or args.dir is not None:
        report.line(f"logs in {workdir}")
    return 1 if failed else 0
