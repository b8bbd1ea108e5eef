"""Coordinator benchmarks: rebalance latency, failover time and capacity.

Starts its own 3-node ZooKeeper ensemble in a temporary directory and three
`zkcoord server` processes (each with its embedded broker) on 127.0.0.1.
The consumers are real GroupMembership clients over real sockets, many to
this one process: gevent patches it first, so each membership's network
thread is a greenlet.

1. Rebalance latency: groups of 10, 100 and 500 members on a topic of 1000
   partitions; one more member joins (the trigger) and we time until the last
   member's listener has run the Start of the new generation and the members
   together hold every partition exactly once.
2. Failover: kill -9 of the coordinator's process under a group of 100, until
   every member runs a complete assignment under the new coordinator epoch.
3. Capacity: ramp the members one coordinator holds (groups of 100) while
   every one stays registered and pinged, and read the coordinator process's
   CPU per 1,000 members from /proc over a steady window.

Everything is bounded in count and time, and everything started is stopped
on exit, on error too.

    python bench/bench_coordinator.py [--quick]
"""

from gevent import monkey

monkey.patch_all()

import argparse  # noqa: E402
import os  # noqa: E402
import re  # noqa: E402
import shutil  # noqa: E402
import signal  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from pathlib import Path  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import gevent  # noqa: E402

from _common import (  # noqa: E402
    MEMBER_WARNINGS, STABLE_LINE, ZK_SESSION_TIMEOUT_MS, ZK_TICK_MS, Harness, TimedMember, close_all, complete,
    quiet_logs, raise_fd_limit, settle,
)
from zkcoord.member.membership import CONNECT_TIMEOUT_S  # noqa: E402
from zkcoord.testing import cpu_seconds, exit_on_signal, wait_until  # noqa: E402

REBALANCE_SESSION_TIMEOUT_MS = 10_000  # the members' session (ping every third of it)
FAILOVER_SESSION_TIMEOUT_MS = 6000
CAPACITY_SESSION_TIMEOUT_MS = 10_000
FENCE_LINE = re.compile(r"\[group (\S+) gen \d+\] waiting ([\d.]+)s for the lease")
REMOVED_LINE = re.compile(r"member \S+ removed: ")


@dataclass(frozen=True)
class Sizes:
    groups: tuple[int, ...]
    repeats: int
    partitions: int
    failover_members: int
    capacity_steps: tuple[int, ...]
    steady_s: float
    step_timeout_s: float


FULL = Sizes(groups=(10, 100, 500), repeats=3, partitions=1000, failover_members=100,
             capacity_steps=(500, 1000, 2000, 5000), steady_s=15.0, step_timeout_s=180.0)
QUICK = Sizes(groups=(10, 50), repeats=2, partitions=200, failover_members=20,
              capacity_steps=(200, 500), steady_s=8.0, step_timeout_s=60.0)


def ms(seconds: float) -> str:
    return f"{seconds * 1000:8.0f} ms"


class CoordinatorBench(Harness):
    def __init__(self, work: Path, sizes: Sizes):
        super().__init__(work)
        self.sizes = sizes

    # -- 1. rebalance latency --------------------------------------------------------------------

    def rebalance_latency(self) -> None:
        sizes = self.sizes
        topic = self.topic("rebalance", sizes.partitions)
        self.say(f"\n== 1. rebalance latency: one member joins a group of N; topic of {sizes.partitions} "
                 f"partitions, range assignor, default (incremental) handoff; member session "
                 f"{REBALANCE_SESSION_TIMEOUT_MS} ms; {sizes.repeats} joins per size, each one more member")
        self.say(f"{'N':>5} {'to registered':>14} {'to last Start':>14} {'(median/max)':>14} "
                 f"{'coord. rebalance':>17} {'members started':>16}")
        for size in sizes.groups:
            group = f"rebalance-{size}"
            members = self.members(group, topic, size, REBALANCE_SESSION_TIMEOUT_MS)
            wait_until(lambda: complete(members, sizes.partitions), sizes.step_timeout_s,
                       message=f"group of {size} to form", interval=0.05)
            latencies, registrations, coordinator_ms, started_counts = [], [], [], []
            for _ in range(sizes.repeats):
                settle(members)
                server_id, _ = self.coordinator()
                trigger = time.perf_counter()
                newcomer = TimedMember(self.cluster.bootstrap, group, topic, REBALANCE_SESSION_TIMEOUT_MS)
                members.append(newcomer)
                wait_until(lambda: complete(members, sizes.partitions), sizes.step_timeout_s,
                           message=f"group of {size} to take a new member", interval=0.01)
                generation = newcomer.recorder.start_generation
                started = [m for m in members if m.recorder.last_start >= trigger]
                latencies.append(max(m.recorder.last_start for m in started) - trigger)
                registrations.append(newcomer.registered_at - trigger)
                started_counts.append(len(started))
                settle(members)
                if any(m.recorder.start_generation > generation for m in members):
                    self.say(f"  note: a second rebalance followed generation {generation}")
                lines = [x for x in STABLE_LINE.findall(self.coordinator_log(server_id))
                         if x[0] == group and int(x[1]) == generation]
                coordinator_ms.append(int(lines[-1][5]) if lines else float("nan"))
            self.say(f"{size:>5} {statistics.median(registrations) * 1000:11.0f} ms "
                     f"{statistics.median(latencies) * 1000:11.0f} ms "
                     f"{max(latencies) * 1000:11.0f} ms max "
                     f"{statistics.median(coordinator_ms):10.0f} ms med "
                     f"{statistics.median(started_counts):10.0f} of {size + 1}")
            close_all(members)

    # -- 2. failover -----------------------------------------------------------------------------

    def failover(self) -> None:
        sizes = self.sizes
        count = sizes.failover_members
        topic = self.topic("failover", sizes.partitions)
        self.say(f"\n== 2. failover: kill -9 of the coordinator under a group of {count} "
                 f"(topic of {sizes.partitions} partitions); server ZooKeeper session "
                 f"{ZK_SESSION_TIMEOUT_MS} ms (tick {ZK_TICK_MS} ms), member session "
                 f"{FAILOVER_SESSION_TIMEOUT_MS} ms")
        members = self.members("failover", topic, count, FAILOVER_SESSION_TIMEOUT_MS)
        wait_until(lambda: complete(members, sizes.partitions), sizes.step_timeout_s,
                   message="the failover group to form")
        settle(members)
        old_id, old_epoch = self.coordinator()
        for m in members:
            m.recorder.mark()
        kill_at = time.perf_counter()
        self.cluster.servers[old_id].kill()
        elected_at = None
        new_id, new_epoch = old_id, old_epoch
        registered_again: dict[int, float] = {}  # member index -> when it registered under a newer epoch
        deadline = time.monotonic() + sizes.step_timeout_s
        while time.monotonic() < deadline:
            try:
                new_id, new_epoch = self.coordinator()
            except Exception:  # no coordinator at this instant
                pass
            if elected_at is None and new_epoch > old_epoch:
                elected_at = time.perf_counter()
            for index, m in enumerate(members):
                if (index not in registered_again and m.membership.registered.is_set()
                        and m.membership.epoch > old_epoch):
                    registered_again[index] = time.perf_counter()
            if elected_at is not None and complete(members, sizes.partitions, epoch=new_epoch):
                break
            time.sleep(0.01)
        else:
            raise SystemExit(f"failover did not complete within {sizes.step_timeout_s:.0f} s")
        all_stopped = max(m.recorder.first_stop_after for m in members)
        registered = max(registered_again.values())
        first_start = min(m.recorder.last_start for m in members)
        last_start = max(m.recorder.last_start for m in members)
        log_text = self.coordinator_log(new_id)
        fences = [float(x[1]) for x in FENCE_LINE.findall(log_text) if x[0] == "failover"]
        rebalances = [x for x in STABLE_LINE.findall(log_text) if x[0] == "failover"]
        self.say(f"  coordinator server {old_id} (epoch {old_epoch}) killed; server {new_id} took "
                 f"epoch {new_epoch}")
        self.say(f"  {'every member saw the drop and stopped':<52}{ms(all_stopped - kill_at)}")
        self.say(f"  {'new coordinator elected (epoch visible in ZK)':<52}{ms(elected_at - kill_at)}")
        self.say(f"  {'every member registered with it (seen by 10 ms polling)':<52}{ms(registered - kill_at)}")
        self.say(f"  {'first member started under the new epoch':<52}{ms(first_start - kill_at)}")
        self.say(f"  {'last member started: group whole again':<52}{ms(last_start - kill_at)}")
        self.say(f"  new coordinator's fence waits: {', '.join(f'{f:.1f}s' for f in fences) or 'none'}; "
                 f"rebalances to stable: {len(rebalances)} "
                 f"({', '.join(r[5] + ' ms' for r in rebalances)})")
        close_all(members)

    # -- 3. capacity ------------------------------------------------------------------------------

    def capacity(self) -> None:
        sizes = self.sizes
        topic = self.topic("capacity", 100)
        group_size = 100
        server_id, _ = self.coordinator()
        pid = self.cluster.servers[server_id].pid
        self.say(f"\n== 3. capacity of one coordinator (server {server_id}, pid {pid}): groups of "
                 f"{group_size} on a topic of 100 partitions, member session {CAPACITY_SESSION_TIMEOUT_MS} ms "
                 f"(a ping every {CAPACITY_SESSION_TIMEOUT_MS / 3000:.1f} s); steady window {sizes.steady_s:.0f} s")
        gevent.sleep(3.0)  # let the previous steps' leaves and rebalances finish
        idle = self._window(pid, [], sizes.steady_s)
        self.say(f"  idle coordinator process (broker embedded, 0 members): "
                 f"{idle['cpu'] * 100:.1f}% of a core")
        self.say(f"  {'members':>8} {'join time':>10} {'coord CPU':>10} {'net of idle':>12} "
                 f"{'per 1000':>9} {'bench CPU':>10} {'pings/s':>8} {'max gap':>8} {'churn':>6} {'removed':>8}")
        members: list[TimedMember] = []
        groups: list[list[TimedMember]] = []
        for target in sizes.capacity_steps:
            began = time.perf_counter()
            warnings_before = MEMBER_WARNINGS.count
            while len(members) < target:
                batch = self.members(f"capacity-{len(groups)}", topic, group_size, CAPACITY_SESSION_TIMEOUT_MS)
                groups.append(batch)
                members.extend(batch)
                # Pace the joins so one step's storm does not look like a capacity limit.
                gevent.sleep(0.2)
            try:
                wait_until(lambda: all(complete(g, 100) for g in groups), sizes.step_timeout_s,
                           message=f"{target} members to be registered and running", interval=0.1)
            except Exception as exc:
                self.say(f"  {target:>8} did not form within {sizes.step_timeout_s:.0f} s ({exc}); ramp stops")
                break
            joined = time.perf_counter() - began
            failed_rounds = MEMBER_WARNINGS.count - warnings_before
            settle(members, timeout=sizes.step_timeout_s)
            removed_before = len(REMOVED_LINE.findall(self.coordinator_log(server_id)))
            stats = self._window(pid, members, sizes.steady_s)
            removed = len(REMOVED_LINE.findall(self.coordinator_log(server_id))) - removed_before
            net = stats["cpu"] - idle["cpu"]
            self.say(f"  {target:>8} {joined:9.1f}s {stats['cpu'] * 100:9.1f}% {net * 100:11.1f}% "
                     f"{net / (target / 1000) * 100:8.1f}% {stats['bench'] * 100:9.1f}% "
                     f"{stats['pings'] / sizes.steady_s:8.0f} {stats['max_gap']:7.2f}s "
                     f"{stats['churn']:>6} {removed:>8}")
            if failed_rounds:
                self.say(f"  {'':>8} (while joining: {failed_rounds} member warnings, e.g. a metadata round "
                         f"where no server answered within {CONNECT_TIMEOUT_S:.0f} s)")
            if removed or stats["churn"] or stats["unpinged"]:
                self.say(f"  members expired or went unpinged at {target} ({stats['unpinged']} without a ping); "
                         f"ramp stops")
                break
            if joined > sizes.step_timeout_s:
                self.say(f"  joining took longer than {sizes.step_timeout_s:.0f} s; ramp stops")
                break
        close_all(members)

    def _window(self, pid: int, members: list[TimedMember], seconds: float) -> dict:
        """CPU of the coordinator and of this process, pings and churn over ``seconds``."""
        for m in members:
            m.recorder.mark()
        cpu0, bench0, t0 = cpu_seconds(pid), cpu_seconds(os.getpid()), time.perf_counter()
        gevent.sleep(seconds)
        wall = time.perf_counter() - t0
        return {
            "cpu": (cpu_seconds(pid) - cpu0) / wall,
            "bench": (cpu_seconds(os.getpid()) - bench0) / wall,
            "pings": sum(m.recorder.pings for m in members),
            "max_gap": max((m.recorder.max_gap for m in members), default=0.0),
            "churn": sum(m.recorder.events for m in members),
            "unpinged": sum(1 for m in members if m.recorder.pings == 0),
        }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, a couple of minutes")
    parser.add_argument("--only", choices=("rebalance", "failover", "capacity"), action="append",
                        help="run only these steps (repeatable)")
    args = parser.parse_args()
    sizes = QUICK if args.quick else FULL
    steps = args.only or ["rebalance", "failover", "capacity"]
    fds = raise_fd_limit()
    quiet_logs()
    if "capacity" in steps and fds < 2 * max(sizes.capacity_steps) + 1000:
        print(f"note: only {fds} file descriptors; the capacity ramp may hit that limit first")
    # SIGTERM ends the bench like Ctrl-C, so the finally below cleans up.
    signal.signal(signal.SIGTERM, exit_on_signal)

    work = Path(tempfile.mkdtemp(prefix="bench-coordinator-"))
    bench = CoordinatorBench(work, sizes)
    began = time.perf_counter()
    try:
        print(f"zkcoord coordinator benchmark ({'quick' if args.quick else 'full'}); {os.cpu_count()} cpus; "
              f"members in this process as gevent greenlets; fd limit {fds}", flush=True)
        bench.start()
        if "rebalance" in steps:
            bench.rebalance_latency()
        if "failover" in steps:
            bench.failover()
        if "capacity" in steps:
            bench.capacity()
        print(f"\ntotal {time.perf_counter() - began:.0f} s", flush=True)
        return 0
    except BaseException:
        bench.dump_logs()
        raise
    finally:
        bench.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
