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


def _spark_pipeline(report: _Report, zk, connect: str, workdir: Path) -> None:
    """The example pipeline (zkcoord/examples/pipeline.py): a streaming query that is a
    member of group 'pipeline', aggregating a keyed topic into parquet."""
    import importlib.util
    import subprocess
    import sys

    from zkcoord.admin.topics import create_topic

    report.section("Spark pipeline: a streaming query as a group member")
    if importlib.util.find_spec("pyspark") is None:
        report.line("skipped: needs pyspark (scripts/install.sh spark)")
        return
    create_topic(zk, "clicks", 4)
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", PIPELINE, "--zookeeper", connect, "--topic", "clicks",
         "--out", str(workdir / "clicks-per-user"), "--group", "pipeline", "--available-now",
         "--produce", str(PIPELINE_RECORDS), "--max-offsets-per-trigger", "4000"],
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


def run(args: argparse.Namespace) -> int:
    from confluent_kafka import Producer
    from zkcoord.zk import client as zk_client

    from zkcoord.zk.nodes import read_offsets
    from zkcoord.admin.topics import create_topic
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
    try:
        report.section("ZooKeeper ensemble")
        ensemble.start()
        for s in ensemble.status():
            report.line(f"node {s.node}  127.0.0.1:{s.client_port}  {s.mode}")
        zk = zk_client.open_client(ensemble.connect_string)
        zk_client.start(zk, timeout=15)

        report.section("zkcoord servers (coordinator candidates with embedded brokers)")
        cluster = LocalCluster(ensemble.connect_string, workdir / "cluster",
                               ("--zk-session-timeout-ms", "4000", "--offset-flush-interval-ms", "500"))
        cluster.start_servers(3)
        wait_until(lambda: zk.exists(layout.COORDINATOR_PATH), 30, message="a coordinator")
        coordinator = int(layout.decode_coordinator(zk.get(layout.COORDINATOR_PATH)[0]))
        for s in cluster.servers.values():
            role = "coordinator" if s.server_id == coordinator else "standby"
            report.line(f"server {s.server_id}  protocol 127.0.0.1:{s.port}  broker 127.0.0.1:{s.broker_port}  {role}")
        wait_until(lambda: len(zk.get_children(layout.BROKER_IDS)) == 3, 30, message="three brokers")
        create_topic(zk, "events", 12)
        report.line("topic 'events': 12 partitions over 3 brokers")

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
            producer = Producer({"bootstrap.servers": cluster.broker_list, "linger.ms": 5,
                                 "log_level": 0})  # the kill below is on purpose: no connection chatter
            pause = 10.0 / max(1, args.messages // 200)
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

        report.section("Failover: kill -9 of the coordinator")
        before = read_offsets(zk, "demo")
        coordinator = int(layout.decode_coordinator(zk.get(layout.COORDINATOR_PATH)[0]))
        killed_at = time.monotonic()
        cluster.servers[coordinator].kill()
        report.line(f"server {coordinator} (the coordinator and one broker) killed")
        wait_until(lambda: zk.exists(layout.COORDINATOR_PATH)
                 and int(layout.decode_coordinator(zk.get(layout.COORDINATOR_PATH)[0])) != coordinator,
                 60, message="a new coordinator")
        successor = int(layout.decode_coordinator(zk.get(layout.COORDINATOR_PATH)[0]))
        report.line(f"server {successor} elected after {time.monotonic() - killed_at:.1f}s")
        settle("the group after failover")
        report.line(f"group whole again {time.monotonic() - killed_at:.1f}s after the kill")
        report.check("committed offsets never moved back",
                     all(read_offsets(zk, "demo").get(tp, -1) >= o for tp, o in before.items()))
        # The dead server's broker took its partitions' logs with it: restart
        # it so every message can be delivered (its log is on disk).
        cluster.servers[coordinator].start()
        report.line(f"server {coordinator} restarted (its broker's log recovered from disk)")

        report.section("Delivery")
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

        _spark_pipeline(report, zk, ensemble.connect_string, workdir)
    finally:
        stop_producing_event = locals().get("stop_producing")
        if stop_producing_event is not None:
            stop_producing_event.set()
        if zk is not None:
            zk.stop()
        if cluster is not None:
            cluster.close()
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
