"""Running a drill: bring up (or reach) the cluster, start the workload, carry
out the schedule one fault at a time with settle periods, drain, stop every
process, then judge the history and write the reports.

The drill's own cluster runs on 127.0.0.1 only: a 3-node ZooKeeper ensemble,
three `zkcoord server` processes (each reaching ZooKeeper through a proxy the
drill can cut), the consumer processes and one producer. Ctrl-C (or SIGTERM)
stops every process the drill started and still judges what was gathered.
"""

from __future__ import annotations

import dataclasses
import logging
import signal
import sys
import time
from pathlib import Path
from typing import Optional, Sequence

from zkcoord.drill import faults as fault_actions
from zkcoord.drill.checker import Verdict, check
from zkcoord.drill.history import FAULTS, History, append_lines
from zkcoord.drill.report import write_reports
from zkcoord.drill.schedule import KINDS, PlannedFault, Timing, plan
from zkcoord.drill.workload import Producer, Sampler
from zkcoord.errors import ZkcoordError
from zkcoord.testing import LocalCluster, ProxiedEnsemble, netns, start_ensemble, wait_until

log = logging.getLogger(__name__)

DRAIN_TIMEOUT_S = 90.0


@dataclasses.dataclass(frozen=True)
class DrillSettings:
    faults: int
    seed: int
    kinds: tuple[str, ...]
    directory: Path
    consumers: int = 4
    partitions: int = 12
    rate: int = 300
    consumer_session_ms: int = 3000
    zk_session_ms: int = 3000
    rebalance_timeout_ms: int = 5000
    max_minutes: float = 60.0
    zookeeper: Optional[str] = None        # aim at an existing cluster ...
    bootstrap: Optional[tuple[str, ...]] = None  # ... whose servers are these

    @property
    def own_cluster(self) -> bool:
        return self.zookeeper is None

    @property
    def timing(self) -> Timing:
        return Timing(consumer_session_s=self.consumer_session_ms / 1000, zk_session_s=self.zk_session_ms / 1000,
                      rebalance_timeout_s=self.rebalance_timeout_ms / 1000)

    def server_args(self) -> tuple[str, ...]:
        return ("--zk-session-timeout-ms", str(self.zk_session_ms), "--min-session-timeout-ms", "1000",
                "--rebalance-timeout-ms", str(self.rebalance_timeout_ms), "--rebalance-backoff-ms", "200",
                "--offset-flush-interval-ms", "200")

    def consumer_args(self) -> tuple[str, ...]:
        # A slow member outlasts the rebalance timeout by a second.
        return ("--strategy", "sticky", "--strategy", "range", "--max-poll-records", "100",
                "--slow-ms", str(self.rebalance_timeout_ms + 1000))

    def shown(self) -> dict:
        return {"faults": self.faults, "seed": self.seed, "kinds": ",".join(self.kinds),
                "consumers": self.consumers, "partitions": self.partitions, "rate": self.rate,
                "consumer session ms": self.consumer_session_ms, "zk session ms": self.zk_session_ms,
                "target": self.zookeeper or "own local cluster"}


def runnable_kinds(settings: DrillSettings) -> tuple[list[str], dict[str, str]]:
    """The kinds this drill can inject, and why it skips the others."""
    skipped = {k: "needs the drill's own cluster (servers and ZooKeeper are not the drill's to break)"
               for k in settings.kinds if KINDS[k].own_cluster and not settings.own_cluster}
    if any(KINDS[k].netns for k in settings.kinds if k not in skipped):
        why = netns.unavailable_reason()
        if why is not None:
            skipped.update({k: why for k in settings.kinds if KINDS[k].netns and k not in skipped})
    return [k for k in settings.kinds if k not in skipped], skipped


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


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def run_drill(settings: DrillSettings, out=sys.stdout) -> tuple[Verdict, str]:
    """Run the whole drill; returns the verdict and the text report."""
    kinds, skipped = runnable_kinds(settings)
    if not kinds:
        raise ZkcoordError("none of the chosen fault kinds can be injected into this target: "
                           + "; ".join(f"{k}: {why}" for k, why in skipped.items()))
    schedule = plan(settings.seed, settings.faults, kinds, settings.timing)
    directory = settings.directory
    directory.mkdir(parents=True, exist_ok=True)
    progress = Progress(len(schedule), out)
    progress.say(f"drill: {len(schedule)} faults from seed {settings.seed}; history in {directory}")
    for kind, why in skipped.items():
        progress.say(f"drill: skipping {kind}: {why}")

    # The drill breaks ZooKeeper on purpose; its own clients' reconnect chatter is noise.
    logging.getLogger("kazoo").setLevel(logging.ERROR)
    previous_term = signal.signal(signal.SIGTERM, _interrupt)
    interrupted = False
    ensemble = None
    proxies: dict[int, ProxiedEnsemble] = {}
    cluster: Optional[LocalCluster] = None
    workers: list = []
    ctx = None
    try:
        if settings.own_cluster:
            progress.say("drill: starting a 3-node ZooKeeper ensemble and 3 servers on 127.0.0.1")
            ensemble = start_ensemble(directory / "zookeeper")
            zookeeper = ensemble.connect_string
            cluster = LocalCluster(zookeeper, directory, settings.server_args())
            for server_id in (1, 2, 3):
                proxies[server_id] = ProxiedEnsemble([ensemble.client_port(n) for n in ensemble.node_ids])
                cluster.add_server(server_id, zookeeper=proxies[server_id].connect_string)
            cluster.wait_for_brokers(60)
            cluster.wait_for_coordinator(60)
            bootstrap = None
        else:
            zookeeper = settings.zookeeper
            _reach(zookeeper)
            cluster = LocalCluster(zookeeper, directory)
            bootstrap = list(settings.bootstrap)
        # A topic and a group of its own, so a drill on a shared cluster touches nothing else.
        topic = f"drill-{settings.seed}-{int(time.time())}"
        cluster.create_topic(topic, settings.partitions)
        ctx = fault_actions.DrillCluster(
            cluster=cluster, group=topic, topic=topic, timing=settings.timing,
            consumers_wanted=settings.consumers, consumer_args=settings.consumer_args(),
            ensemble=ensemble, proxies=proxies, bootstrap=bootstrap, log_line=progress.say,
            use_netns=any(KINDS[k].netns for k in kinds))
        if ctx.use_netns:
            for stale in netns.remove_stale():
                progress.say(f"drill: removed network namespace {stale}, left by a drill that died")
        for _ in range(settings.consumers):
            ctx.add_consumer()
        bound = settings.max_minutes * 60 + 300
        workers = [Producer(_broker_list(cluster), topic, settings.rate, directory, bound),
                   Sampler(zookeeper, topic, directory, bound)]
        for worker in workers:
            worker.start()
        first = ctx.wait_whole(120)
        if first is None:
            raise ZkcoordError("the drill's group did not form within 120 s; see the logs in " + str(directory))
        progress.say(f"drill: group of {settings.consumers} whole over {settings.partitions} partitions; "
                     f"producing {settings.rate} records/s")
        deadline = time.monotonic() + settings.max_minutes * 60
        for fault in schedule:
            if time.monotonic() > deadline:
                progress.say(f"drill: time bound of {settings.max_minutes:g} min reached; "
                             f"{len(schedule) - fault.index + 1} faults not run")
                break
            progress.fault(fault)
            record = fault_actions.ACTIONS[fault.kind](ctx, fault)
            append_lines(directory / FAULTS, [dataclasses.asdict(record)])
            progress.say(f"    {record.target}: " + (
                record.note or ("NOT whole again" if record.time_to_whole is None
                                else f"whole again in {record.time_to_whole:.1f} s (bound {record.bound_s:.1f} s)")))
            if fault_actions.keep_population(ctx):
                ctx.wait_whole(60)
            time.sleep(fault.settle_s)  # a quiet spell between faults is part of the schedule
        progress.say("drill: faults done; draining")
        _drain(ctx, workers, progress)
    except KeyboardInterrupt:
        interrupted = True
        progress.say("drill: interrupted; stopping every process it started")
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # let the clean-up finish
        for worker in workers:
            worker.stop()
        for worker in workers:
            worker.join(90)
        if cluster is not None:
            for consumer in cluster.consumers:
                consumer.terminate(timeout=10)
            cluster.close()
        if ctx is not None:
            ctx.remove_namespaces()
        for proxy in proxies.values():
            proxy.close()
        if ensemble is not None:
            ensemble.stop()
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, previous_term)
    history = History.load(directory)
    verdict = check(history, interrupted=interrupted)
    text = write_reports(directory, history, verdict, settings.shown(), skipped)
    return verdict, text


def _reach(zookeeper: str, timeout: float = 10.0) -> None:
    """Fail early and clearly when the target's ZooKeeper does not answer."""
    from zkcoord.testing import zookeeper_client

    try:
        with zookeeper_client(zookeeper, timeout):
            pass
    except Exception as exc:  # noqa: BLE001 - kazoo raises several kinds; all mean "cannot reach"
        raise ZkcoordError(f"cannot reach ZooKeeper at {zookeeper}: {exc or type(exc).__name__}") from exc


def _broker_list(cluster: LocalCluster) -> str:
    """Every broker registered in ZooKeeper, as a Kafka bootstrap string."""
    from zkcoord.zk import layout

    addresses = []
    for child in cluster.zk.get_children(layout.BROKER_IDS):
        if child.isdigit():
            registration = layout.decode_broker(int(child), cluster.zk.get(layout.broker_path(int(child)))[0])
            addresses.append("%s:%d" % registration.plaintext_address())
    if not addresses:
        raise ZkcoordError("no broker is registered in ZooKeeper")
    return ",".join(addresses)


def _drain(ctx: fault_actions.DrillCluster, workers: Sequence, progress: Progress) -> None:
    """Stop producing, bring the group back to full strength, and wait until
    every acknowledged record is committed (so every one was delivered)."""
    from zkcoord.admin.groups import read_offsets
    from zkcoord.drill.history import PRODUCED, read_lines

    producer = workers[0]
    producer.stop()
    producer.join(90)
    while len(ctx.live_consumers()) < ctx.consumers_wanted:
        ctx.add_consumer()
    ctx.wait_whole(60)
    highest: dict = {}
    for line in read_lines(ctx.cluster.directory / PRODUCED):
        tp = (line["topic"], line["partition"])
        highest[tp] = max(highest.get(tp, -1), line["offset"])

    def caught_up() -> bool:
        committed = read_offsets(ctx.cluster.zk, ctx.group)
        return all(committed.get(tp, 0) > offset for tp, offset in highest.items())

    try:
        wait_until(caught_up, DRAIN_TIMEOUT_S, interval=0.5, message="every acknowledged record to be committed")
        progress.say(f"drill: drained; {producer.acked} records acknowledged")
    except AssertionError:
        progress.say(f"drill: not every acknowledged record was committed within {DRAIN_TIMEOUT_S:.0f} s")
