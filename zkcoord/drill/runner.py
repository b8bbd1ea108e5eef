"""Running a drill: bring up (or reach) the cluster, start the workload, carry
out the schedule one fault at a time with settle periods, drain, stop every
process, then judge the history and write the reports.

The drill's own cluster runs on 127.0.0.1 only: a 3-node ZooKeeper ensemble,
three `zkcoord server` processes (each reaching ZooKeeper through a proxy the
drill can cut), the consumer processes and one producer; with ``--secure``,
every layer of security on (:mod:`~zkcoord.drill.secure`); with ``--kafka``,
a 3-broker Apache Kafka cluster holds the records instead of the servers'
embedded brokers (ZooKeeper mode on the drill's ensemble, sharing zkcoord's
tree, or KRaft, the servers then learning it from Kafka's metadata). Ctrl-C
(or SIGTERM) stops every process the drill started and still judges what
was gathered.
"""

from __future__ import annotations

import dataclasses
import logging
import sys
import time
from pathlib import Path
from typing import Optional, Sequence

from zkcoord.admin import zookeeper_session
from zkcoord.drill import faults as fault_actions
from zkcoord.drill import fault_steps
from zkcoord.drill.checker import Verdict, check
from zkcoord.drill.config import DrillSettings
from zkcoord.drill.history import FAULTS, History, append_lines
from zkcoord.drill.report import write_reports
from zkcoord.drill.schedule import KINDS, PlannedFault, left_out_over_kafka, plan
from zkcoord.drill.secure import ENSEMBLE_SECURITY, DrillSecrets
from zkcoord.drill.target import DrillCluster
from zkcoord.drill.workload import Producer, Sampler
from zkcoord.errors import ZkcoordError
from zkcoord.interrupts import Interruptible
from zkcoord.testing import CpuLoad, LocalCluster, ProxiedEnsemble, netns, start_ensemble, wait_until
from zkcoord.testing.kafka import KRAFT_MODE, KafkaCluster
from zkcoord.zk.ensemble import LocalEnsemble

log = logging.getLogger(__name__)

DRAIN_TIMEOUT_S = 90.0
ZOOKEEPER_DIR = "zookeeper"  # the drill's own ensemble, under its directory
KAFKA_DIR = "kafka"  # the drill's Kafka cluster, under its directory
# How often the servers beside a KRaft cluster read its metadata: partitions
# added are learnt within this, well inside a member's bound.
KAFKA_METADATA_INTERVAL_MS = 1000


def runnable_kinds(settings: DrillSettings) -> tuple[list[str], dict[str, str]]:
    """The kinds this drill can inject, and why it skips the others (over
    Apache Kafka, with the kinds it leaves out of its schedule)."""
    skipped = {k: "needs the drill's own cluster (servers and ZooKeeper are not the drill's to break)"
               for k in settings.kinds if KINDS[k].own_cluster and not settings.own_cluster}
    if any(KINDS[k].netns for k in settings.kinds if k not in skipped):
        why = netns.unavailable_reason()
        if why is not None:
            skipped.update({k: why for k in settings.kinds if KINDS[k].netns and k not in skipped})
    runnable = [k for k in settings.kinds if k not in skipped]
    if settings.kafka is not None:
        skipped.update({k: f"not over Apache Kafka: {why}" for k, why in left_out_over_kafka().items()})
    return runnable, skipped


class Progress:
    """Prints where the drill is: fault k of N, the fault, elapsed, time left."""

    def __init__(self, total: int, out=sys.stdout):
        self.total, self.out = total, out
        self.started = time.monotonic()

    def say(self, text: str) -> None:
        print(text, file=self.out, flush=True)

    def fault(self, fault: PlannedFault) -> None:
        elapsed = time.monotonic() - self.started
        done = fault.index - 1
        left = f", about {_clock(elapsed / done * (self.total - done))} left" if done else ""
        self.say(f"[fault {fault.index}/{self.total}] {fault.kind} (hold {fault.hold_s:.1f} s); "
                 f"elapsed {_clock(elapsed)}{left}")


def _clock(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes}:{secs:02d}"


def run_drill(settings: DrillSettings, out=sys.stdout) -> tuple[Verdict, str, Optional[str]]:
    """Run the whole drill; returns the verdict, the text report, and why it
    stopped early (None: it ran to the end; "interrupted"; "aborted: ..."). The
    schedule is drawn over the kinds asked for (so a seed means the same
    schedule anywhere); a fault of a kind this target cannot take is recorded
    as skipped."""
    kinds, skipped = runnable_kinds(settings)
    if not kinds:
        raise ZkcoordError("none of the chosen fault kinds can be injected into this target: "
                           + "; ".join(f"{k}: {why}" for k, why in skipped.items()))
    schedule = plan(settings.seed, settings.faults, list(settings.kinds), settings.timing)
    if not settings.own_cluster:
        with zookeeper_session(settings.zookeeper, timeout=10, security=settings.zk_security):
            pass  # a clear error (ZooKeeperUnreachable) before anything starts
    directory = settings.directory
    directory.mkdir(parents=True, exist_ok=True)
    progress = Progress(len(schedule), out)
    progress.say(f"drill: {len(schedule)} faults from seed {settings.seed}; history in {directory}")
    for kind, why in skipped.items():
        progress.say(f"drill: skipping {kind}: {why}")

    # The drill breaks ZooKeeper on purpose; its own clients' reconnect chatter is noise.
    logging.getLogger("kazoo").setLevel(logging.ERROR)
    stopped_early: Optional[str] = None
    resources = _Resources()
    # Ctrl-C and SIGTERM alike stop the drill, whatever SIGINT's disposition
    # was when it started (a shell's background job starts it ignored).
    with Interruptible() as stop_signals:
        try:
            ctx, workers = _bring_up(settings, kinds, directory, progress, resources)
            if settings.background_load:
                resources.load = CpuLoad(settings.background_load).start()
                progress.say(f"drill: {settings.background_load} busy process(es) load the machine until the end")
            deadline = time.monotonic() + settings.max_minutes * 60
            for fault in schedule:
                if time.monotonic() > deadline:
                    progress.say(f"drill: time bound of {settings.max_minutes:g} min reached; "
                                 f"{len(schedule) - fault.index + 1} faults not run")
                    break
                progress.fault(fault)
                if fault.kind in skipped:
                    record = fault_steps.skipped(fault, skipped[fault.kind])
                else:
                    resources.in_flight = (fault, time.time())
                    record = fault_actions.ACTIONS[fault.kind](ctx, fault)
                    resources.in_flight = None
                append_lines(directory / FAULTS, [dataclasses.asdict(record)])
                progress.say(f"    {record.target}: " + (record.note or (
                    "NOT whole again" if record.time_to_whole is None
                    else f"whole again in {record.time_to_whole:.1f} s (bound {record.bound_s:.1f} s)")))
                if fault_actions.keep_population(ctx):
                    ctx.wait_whole(60)
                # A server back from a fault is handed its share of the
                # coordinator slots once their groups have settled: that
                # planned move is let happen before the next fault, whose
                # time to whole would otherwise count it.
                if not ctx.wait_slots_at_rest(0):
                    if ctx.wait_slots_at_rest(2 * ctx.coordinator_bound()):
                        ctx.wait_whole(60)
                    else:
                        progress.say("    the coordinator slots did not come to rest; going on")
                time.sleep(fault.settle_s)  # a quiet spell between faults is part of the schedule
            progress.say("drill: faults done; draining")
            _drain(ctx, workers, progress)
        except KeyboardInterrupt:
            stopped_early = "interrupted"
            progress.say("drill: interrupted; stopping every process it started")
        except Exception as exc:  # noqa: BLE001 - whatever broke the drill, judge and report what it gathered
            stopped_early = f"aborted: {type(exc).__name__}: {exc}"
            log.exception("drill aborted")
            progress.say(f"drill: {stopped_early}; stopping every process it started")
        finally:
            # Let the clean-up finish: a second Ctrl-C or SIGTERM must not leave processes behind.
            stop_signals.shield()
            resources.close(directory)
    history = History.load(directory)
    verdict = check(history, interrupted=stopped_early is not None)
    settings_shown = settings.shown()
    if resources.kafka is not None:
        settings_shown["kafka release"] = resources.kafka.version
    if stopped_early:
        settings_shown["stopped early"] = stopped_early
    text = write_reports(directory, history, verdict, settings_shown, skipped)
    return verdict, text, stopped_early


class _Resources:
    """Everything a drill starts, stopped in order by ``close`` whatever
    failed on the way (each step on its own, so one failure skips no other)."""

    def __init__(self) -> None:
        self.ensemble = None
        self.proxies: dict[int, ProxiedEnsemble] = {}
        self.cluster: Optional[LocalCluster] = None
        self.ctx: Optional[DrillCluster] = None
        self.workers: list = []
        self.in_flight: Optional[tuple[PlannedFault, float]] = None  # a fault under way, and since when
        self.secrets: Optional[DrillSecrets] = None
        self.load: Optional[CpuLoad] = None
        self.kafka: Optional[KafkaCluster] = None

    def close(self, directory: Path) -> None:
        steps = [self.load.stop] if self.load is not None else []
        if self.in_flight is not None:  # its window still explains what happened under it
            fault, injected = self.in_flight
            steps.append(lambda: append_lines(directory / FAULTS, [dataclasses.asdict(
                fault_steps.interrupted(fault, injected))]))
        steps += [worker.stop for worker in self.workers]
        steps += [lambda w=worker: w.join(90) for worker in self.workers]
        if self.cluster is not None:
            steps += [lambda c=consumer: c.terminate(timeout=10) for consumer in self.cluster.consumers]
            steps.append(self.cluster.close)
        if self.ctx is not None:
            steps.append(self.ctx.remove_namespaces)
        if self.kafka is not None:  # after the servers and consumers, before ZooKeeper
            steps.append(self.kafka.close)
        steps += [proxy.close for proxy in self.proxies.values()]
        if self.ensemble is not None:
            steps.append(self.ensemble.stop)
        # Keys and passwords do not outlive the drill; its history does (the
        # ensemble's too, even when it never started).
        if self.secrets is not None:
            steps.append(self.secrets.remove)
            if (directory / ZOOKEEPER_DIR).exists():
                steps.append(lambda: LocalEnsemble.load(directory / ZOOKEEPER_DIR).remove_secrets())
        for step in steps:
            try:
                step()
            except Exception:  # noqa: BLE001 - keep stopping the rest
                log.exception("drill clean-up step failed")


def _bring_up(settings: DrillSettings, kinds: list[str], directory: Path, progress: Progress,
              resources: _Resources) -> tuple[DrillCluster, list]:
    """The cluster (started or reached), the topic, the consumers, the producer
    and the sampler, until the group is whole."""
    # A topic and a group of its own, so a drill on a shared cluster touches nothing else.
    topic = f"drill-{settings.seed}-{int(time.time())}"
    if settings.own_cluster:
        secured = " (secured: TLS, SASL, ACLs)" if settings.secure else ""
        progress.say(f"drill: starting a 3-node ZooKeeper ensemble and 3 servers on 127.0.0.1{secured}")
        if settings.secure:
            resources.secrets = DrillSecrets.create(directory)
        resources.ensemble = ensemble = start_ensemble(
            directory / ZOOKEEPER_DIR, **(ENSEMBLE_SECURITY if settings.secure else {}))
        zookeeper = ensemble.connect_string
        server_args = (*settings.server_args(),
                       *(resources.secrets.server_args() if resources.secrets is not None else ()))
        if settings.kafka is not None:
            resources.kafka = kafka = _kafka_cluster(settings, directory, zookeeper)
            progress.say(f"drill: starting Apache Kafka {kafka.version} ({settings.data_plane()})")
            kafka.start()
            server_args += _beside_kafka(kafka)
        resources.cluster = cluster = LocalCluster(zookeeper, directory, server_args,
                                                   zk_security=ensemble.client_security())
        if resources.secrets is not None:
            resources.secrets.create_users(cluster.zk)
            # Granted before any server starts, so each one's authorizer has the
            # grants from its first request: granted later, a client could ask a
            # broker whose ACLs have not followed yet and be refused (the
            # producer's first Metadata was, and librdkafka then refuses to produce).
            resources.secrets.grant(cluster.zk, group=topic, topic=topic)
            cluster.client_settings = resources.secrets.producer_settings()
        for server_id in (1, 2, 3):
            resources.proxies[server_id] = ProxiedEnsemble([ensemble.client_port(n) for n in ensemble.node_ids])
            cluster.add_server(server_id, zookeeper=resources.proxies[server_id].connect_string)
        cluster.wait_for_brokers(60)
        cluster.wait_for_coordinator(60)
        bootstrap = None
    else:
        zookeeper = settings.zookeeper
        resources.cluster = cluster = LocalCluster(zookeeper, directory, zk_security=settings.zk_security)
        bootstrap = list(settings.bootstrap)
    resources.ctx = ctx = DrillCluster(
        cluster=cluster, group=topic, topic=topic, timing=settings.timing,
        consumers_wanted=settings.consumers, consumer_args=settings.consumer_args(),
        ensemble=resources.ensemble, proxies=resources.proxies, bootstrap=bootstrap,
        use_netns=any(KINDS[k].netns for k in kinds),
        stock_wanted=settings.stock_members, kafka_brokers=_broker_list(cluster) if settings.stock_members else None,
        secrets=resources.secrets, big_group_members=settings.big_group_members, crowd_args=settings.member_args(),
        kafka=resources.kafka, topic_change_lag_s=_topic_change_lag_s(resources.kafka))
    ctx.create_topic(settings.partitions)
    if ctx.use_netns:
        for stale in netns.remove_stale():
            progress.say(f"drill: removed network namespace {stale}, left by a drill that died")
    for _ in range(settings.consumers):
        ctx.add_consumer()
    bound = settings.max_minutes * 60 + 300
    brokers = resources.kafka.bootstrap if resources.kafka is not None else _broker_list(cluster)
    resources.workers = workers = [Producer(brokers, topic, settings.rate, directory, bound,
                                            cluster.client_settings),
                                   Sampler(zookeeper, topic, directory, bound, cluster.zk_security)]
    ctx.watch_acknowledgements = workers[0].watch_acknowledgements
    for worker in workers:
        worker.start()
    if ctx.wait_whole(120) is None:
        raise ZkcoordError("the drill's group did not form within 120 s; see the logs in " + str(directory))
    progress.say(f"drill: group of {settings.consumers} whole over {settings.partitions} partitions; "
                 f"producing {settings.rate} records/s")
    return ctx, workers


def _kafka_cluster(settings: DrillSettings, directory: Path, zookeeper: str) -> KafkaCluster:
    """The drill's Kafka cluster: in ZooKeeper mode on the drill's ensemble
    at its root, where the servers are, so that Kafka's /brokers is the tree
    zkcoord watches."""
    kafka_settings = settings.kafka_settings()
    return KafkaCluster(directory / KAFKA_DIR, kafka_settings,
                        zookeeper=None if kafka_settings.mode == KRAFT_MODE else zookeeper)


def _beside_kafka(kafka: KafkaCluster) -> tuple[str, ...]:
    """The servers' options beside ``kafka``: no broker of their own, and
    under KRaft (nothing of Kafka's in ZooKeeper) Kafka's metadata to learn
    the brokers and topics from."""
    if kafka.mode == KRAFT_MODE:
        return ("--no-broker", "--kafka-bootstrap", kafka.bootstrap,
                "--kafka-metadata-interval-ms", str(KAFKA_METADATA_INTERVAL_MS))
    return ("--no-broker",)


def _topic_change_lag_s(kafka: Optional[KafkaCluster]) -> float:
    """How late the servers may learn partitions added: beside a KRaft
    cluster, at their next look at its metadata; otherwise at once (a watch)."""
    return KAFKA_METADATA_INTERVAL_MS / 1000 if kafka is not None and kafka.mode == KRAFT_MODE else 0.0


def _broker_list(cluster: LocalCluster) -> str:
    """Every broker registered in ZooKeeper, as a Kafka bootstrap string."""
    from zkcoord.zk.nodes import broker_addresses

    addresses = broker_addresses(cluster.zk)
    if not addresses:
        raise ZkcoordError("no broker is registered in ZooKeeper")
    return ",".join(addresses)


def _drain(ctx: DrillCluster, workers: Sequence, progress: Progress) -> None:
    """Stop producing, bring the group back to full strength, and wait until
    every acknowledged record is committed (so every one was delivered)."""
    from zkcoord.drill.history import PRODUCED
    from zkcoord.testing import read_json_lines
    from zkcoord.zk.nodes import read_offsets

    producer = workers[0]
    producer.stop()
    producer.join(90)
    while len(ctx.live_consumers()) < ctx.consumers_wanted:
        ctx.add_consumer()
    ctx.wait_whole(60)
    highest: dict = {}
    for line in read_json_lines(ctx.cluster.directory / PRODUCED):
        tp = (line["topic"], line["partition"])
        highest[tp] = max(highest.get(tp, -1), line["offset"])

    def caught_up() -> bool:
        committed = read_offsets(ctx.cluster.zk, ctx.group)
        return all(committed.get(tp, 0) > offset for tp, offset in highest.items())

    for error, count in producer.refused.items():
        progress.say(f"drill: the producer's client refused {count} record(s) with {error}")
    try:
        wait_until(caught_up, DRAIN_TIMEOUT_S, interval=0.5, message="every acknowledged record to be committed")
        progress.say(f"drill: drained; {producer.acked} records acknowledged")
    except AssertionError:
        progress.say(f"drill: not every acknowledged record was committed within {DRAIN_TIMEOUT_S:.0f} s")
