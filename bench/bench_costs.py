"""Unit costs: what one offset flush, one ping, one rebalance round and one slot takeover cost.

The inputs of the scale model (bench/scale_model.py, docs/SCALE.md), each
measured on a real 3-node ZooKeeper ensemble that zkcoord.testing starts on
127.0.0.1, with two `zkcoord server` processes sharing two coordinator slots:

1. **offsets**: a coordinator's flush of one group's offsets is one fenced
   ZooKeeper multi-operation (the epoch check, the election node's check,
   then a set per offset: coordinator/store.py). Written here through the
   coordinator's own store, in a chroot of its own (its epoch fences no
   server): N = 0 (a proof of office: the checks alone), 1, 10, 100 and 1000
   offsets per multi, one at a time: latency (median, p99), the CPU of the
   three ZooKeeper processes per multi (all three, and the leader alone) and
   the writer's own CPU per multi (kazoo's encoding: the coordinator's share
   of a flush). Then ``--writers`` multis in flight at once for
   ``--saturate-s``, over one ZooKeeper session (a server has one) and over
   four: the multis and offsets per second the ensemble took, and the CPU
   everything used meanwhile, which the model's check reads. Last, watched
   existence checks ``READ_BATCH`` at a time, as an election round reads.
2. **ping**: ``--ping-members`` members (in this process, gevent greenlets)
   held by one coordinator; its server's CPU over a window, less its CPU
   idle, per ping round trip.
3. **rounds**: a group of N members (N in ``--round-sizes``) over 10 N
   partitions takes one more member, three times per size: the coordinator's
   own time for the round (its log's `stable` line) and its server's CPU for
   it, less what its pings cost meanwhile.
4. **takeover**: kill -9 of the server coordinating ``--takeover-groups``
   groups of ``--takeover-group-size`` members: the time until the survivor
   holds the slot under a new epoch (the dead server's ZooKeeper session, then
   the election), its log's load time, and the time until every moved group
   is whole again.

One line per cost, then, last:

    costs: flush of N offsets a + b*N us ZooKeeper CPU; ping P us; round R0 + R1*N ms CPU; takeover T s (session S s)

Everything it starts is stopped on exit, on error too; each step is bounded.

    python bench/bench_costs.py [--only offsets,ping,rounds,takeover] [--json FILE]
"""

from gevent import monkey

monkey.patch_all()

import argparse  # noqa: E402
import itertools  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import resource  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import gevent  # noqa: E402

from _common import (  # noqa: E402
    LOADED_LINE, STABLE_LINE, ZK_SESSION_TIMEOUT_MS, Harness, TimedMember, brokerless_topic, close_all, complete,
    raise_fd_limit, run_in_scratch, settle,
)
from scale_model import fit_line  # noqa: E402
from zkcoord.coordinator.store import CoordinatorStore  # noqa: E402
from zkcoord.testing import cpu_seconds, wait_until  # noqa: E402
from zkcoord.zk import client as zk_client  # noqa: E402
from zkcoord.zk import layout  # noqa: E402
from zkcoord.zk.gevent_handler import GeventHandler  # noqa: E402

SLOTS = 2
SESSIONS = 4  # the offsets' writers' ZooKeeper sessions, at most (a server has one)
SERVERS = 2
CHROOT = "/bench-costs"  # the offsets' writes: apart from the servers' own nodes
OFFSET_COUNTS = (0, 1, 10, 100, 1000)
MEMBER_SESSION_TIMEOUT_MS = 10_000  # a ping every 3.33 s, as in every published capacity figure
TAKEOVER_SESSION_TIMEOUT_MS = 6000
PARTITIONS_PER_MEMBER = 10
READ_BATCH = 1000
WARM_UP_MULTIS = 300  # ZooKeeper's JIT and kazoo's first requests, before anything is timed


def own_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


class CostsBench(Harness):
    def __init__(self, work: Path, args):
        # No broker: the coordinator needs a topic's partitions in ZooKeeper,
        # not its logs (10,000 partitions' files would pass the open-file limit).
        super().__init__(work, server_args=("--no-broker", "--coordinator-slots", str(SLOTS)))
        self.args = args
        self.figures: dict = {"machine": {"cores": _cores(), "load_before": _load()}}
        self.zk_idle = (0.0, 0.0)  # the ensemble's CPU per second without our writes: all, leader

    def topic(self, name: str, partitions: int) -> str:
        return brokerless_topic(self.zk, name, partitions)

    # -- ZooKeeper's processes ---------------------------------------------------------------

    def zk_pids(self) -> tuple[list[int], int]:
        """Every ZooKeeper node's pid, and the leader's."""
        statuses = self.ensemble.status()
        leader = [s.pid for s in statuses if s.mode == "leader"]
        return [s.pid for s in statuses if s.pid], leader[0]

    def zk_cpu(self) -> tuple[float, float]:
        """CPU seconds so far of every ZooKeeper node together, and of the leader."""
        pids, leader = self.zk_pids()
        return sum(cpu_seconds(p) for p in pids), cpu_seconds(leader)

    def _zk_idle(self, seconds: float) -> tuple[float, float]:
        """What the ensemble spends per second with no write of ours (the
        servers' proofs of office and sessions, its own ticks), all and leader."""
        before, started = self.zk_cpu(), time.perf_counter()
        gevent.sleep(seconds)  # a measuring window
        after, elapsed = self.zk_cpu(), time.perf_counter() - started
        return (after[0] - before[0]) / elapsed, (after[1] - before[1]) / elapsed

    def zk_cpu_since(self, before: tuple[float, float], started: float) -> tuple[float, float]:
        """The ensemble's CPU (all, leader) since ``before`` at ``started``, less its idle."""
        now, elapsed = self.zk_cpu(), time.perf_counter() - started
        return (now[0] - before[0] - self.zk_idle[0] * elapsed, now[1] - before[1] - self.zk_idle[1] * elapsed)

    def wait_for_slots(self) -> None:
        """Until each server holds one slot (the first to start takes both, then hands one over)."""
        def holders():
            try:
                return {self.coordinator_of_slot(k) for k in range(SLOTS)}
            except Exception:  # an election node not there yet
                return set()
        wait_until(lambda: len(holders()) == SERVERS, 90, message="each server to hold a slot", interval=0.1)

    # -- 1. offsets ----------------------------------------------------------------------------

    def offsets(self) -> None:
        self.zk.ensure_path(CHROOT)
        # One ZooKeeper session per store, as each server has one; each store
        # a slot of its own (a store proves its office on its own session).
        clients = [zk_client.open_client(self.ensemble.connect_string + CHROOT, handler=GeventHandler())
                   for _ in range(SESSIONS)]
        try:
            stores = []
            for slot, client in enumerate(clients):
                zk_client.start(client, 30)
                store = CoordinatorStore(client, server_id=slot + 1, slot=slot, slots=SESSIONS)
                store.claim_epoch(elected_as=str(slot + 1).encode())  # two checks open each multi, as a coordinator's
                stores.append(store)
            store = stores[0]
            store.write_offsets("warm-up", self._offsets_of(10, 1), existing=set())
            for value in range(2, WARM_UP_MULTIS + 2):
                store.write_offsets("warm-up", self._offsets_of(10, value), set(self._offsets_of(10, 0)))
            self.zk_idle = self._zk_idle(5.0)
            self.figures["offsets"] = [self._offsets_serial(store, n) for n in OFFSET_COUNTS]
            self.figures["saturation"] = [self._offsets_saturated(stores[:sessions], n)
                                          for sessions in (1, SESSIONS) for n in (1, 100)]
            self.figures["reads"] = self._reads(clients[0])
        finally:
            for client in clients:
                client.stop()
                client.close()

    @staticmethod
    def _offsets_of(count: int, value: int) -> dict:
        return {("topic", p): value for p in range(count)}

    def _offsets_serial(self, store: CoordinatorStore, count: int) -> dict:
        group = f"serial-{count}"
        if count:
            store.write_offsets(group, self._offsets_of(count, 1), existing=set())  # created once; then set
        existing = set(self._offsets_of(count, 0))
        writes = max(20, min(self.args.serial_writes, 40_000 // max(count, 1)))
        latencies = []
        zk_before, started_at = self.zk_cpu(), time.perf_counter()
        own_before = own_cpu_s()
        for value in range(2, writes + 2):
            offsets = self._offsets_of(count, value)
            started = time.perf_counter()
            if count:
                store.write_offsets(group, offsets, existing)
            else:
                store.prove_office()
            latencies.append(time.perf_counter() - started)
        zk, leader = self.zk_cpu_since(zk_before, started_at)
        own = own_cpu_s() - own_before
        latencies.sort()
        row = {
            "offsets": count, "writes": writes,
            "latency_median_ms": statistics.median(latencies) * 1000,
            "latency_p99_ms": latencies[int(0.99 * (len(latencies) - 1))] * 1000,
            "zk_cpu_us": zk / writes * 1e6,
            "leader_cpu_us": leader / writes * 1e6,
            "writer_cpu_us": own / writes * 1e6,
        }
        what = "proof of office (checks only)" if count == 0 else f"flush of {count} offsets"
        self.say(f"offsets: {what}, {writes} one at a time: latency median {row['latency_median_ms']:.2f} ms, "
                 f"p99 {row['latency_p99_ms']:.2f} ms; ZooKeeper CPU {row['zk_cpu_us']:.0f} us per multi "
                 f"(leader {row['leader_cpu_us']:.0f} us); writer CPU {row['writer_cpu_us']:.0f} us per multi")
        return row

    def _offsets_saturated(self, stores: list[CoordinatorStore], count: int) -> dict:
        """``--writers`` multis in flight at once, spread over ``stores`` (their sessions)."""
        writers = self.args.writers
        groups = [f"saturated-{len(stores)}-{count}-{w}" for w in range(writers)]
        for w, group in enumerate(groups):
            stores[w % len(stores)].write_offsets(group, self._offsets_of(count, 1), existing=set())
        done = [0] * writers
        deadline = time.perf_counter() + self.args.saturate_s

        def write(w: int) -> None:
            existing = set(self._offsets_of(count, 0))
            value = 2
            while time.perf_counter() < deadline:
                stores[w % len(stores)].write_offsets(groups[w], self._offsets_of(count, value), existing)
                value += 1
                done[w] += 1

        zk_before = self.zk_cpu()
        own_before, started = own_cpu_s(), time.perf_counter()
        gevent.joinall([gevent.spawn(write, w) for w in range(writers)], raise_error=True,
                       timeout=self.args.saturate_s + 60)
        elapsed = time.perf_counter() - started
        zk, leader = self.zk_cpu_since(zk_before, started)
        multis = sum(done)
        row = {
            "offsets": count, "writers": writers, "sessions": len(stores), "seconds": elapsed,
            "multis_per_s": multis / elapsed, "offsets_per_s": multis * count / elapsed,
            "zk_cores": zk / elapsed, "leader_cores": leader / elapsed,
            "writer_cores": (own_cpu_s() - own_before) / elapsed,
        }
        self.say(f"offsets: {writers} writers at once over {len(stores)} session(s), {count} offsets per multi, "
                 f"{elapsed:.1f} s: "
                 f"{row['multis_per_s']:.0f} multis/s, {row['offsets_per_s']:.0f} offsets/s; CPU meanwhile "
                 f"ZooKeeper {row['zk_cores'] * 100:.0f}% of a core (leader {row['leader_cores'] * 100:.0f}%), "
                 f"writer {row['writer_cores'] * 100:.0f}%")
        return row

    def _reads(self, client) -> dict:
        """``--reads`` existence checks, READ_BATCH in flight at a time, as an
        election round makes (every slot's election node, every server's
        registration, watched): ZooKeeper's CPU and the wall time per read."""
        paths = [layout.slot_coordinator_path(k) for k in range(1, 1 + READ_BATCH)]
        for path in paths:
            client.ensure_path(path)
        zk_before, started = self.zk_cpu(), time.perf_counter()
        own_before = own_cpu_s()
        reads = 0
        while reads < self.args.reads:
            for request in [client.exists_async(p, watch=lambda _event: None) for p in paths]:
                request.get()
            reads += len(paths)
        elapsed = time.perf_counter() - started
        zk, leader = self.zk_cpu_since(zk_before, started)
        row = {"reads": reads, "reads_per_s": reads / elapsed, "zk_cpu_us": zk / reads * 1e6,
               "writer_cpu_us": (own_cpu_s() - own_before) / reads * 1e6}
        self.say(f"reads: {reads} watched existence checks, {READ_BATCH} in flight: {row['reads_per_s']:.0f}/s; "
                 f"ZooKeeper CPU {row['zk_cpu_us']:.1f} us per read; reader CPU {row['writer_cpu_us']:.1f} us")
        return row

    # -- servers and members -------------------------------------------------------------------

    def coordinator_of_slot(self, slot: int) -> int:
        return int(layout.decode_coordinator(self.zk.get(layout.slot_coordinator_path(slot))[0]))

    def coordinator_of(self, group: str) -> int:
        return self.coordinator_of_slot(layout.slot_of(group, SLOTS))

    def groups_of(self, server_id: int, prefix: str, count: int) -> list[str]:
        """``count`` group names whose slot ``server_id`` holds."""
        held = {k for k in range(SLOTS) if self.coordinator_of_slot(k) == server_id}
        names = (f"{prefix}-{i}" for i in itertools.count())
        return list(itertools.islice((g for g in names if layout.slot_of(g, SLOTS) in held), count))

    def server_cpu(self, server_id: int) -> float:
        return self.cluster.servers[server_id].cpu_seconds()

    def idle_rate(self, server_id: int, seconds: float) -> float:
        """The server's CPU in cores over ``seconds`` as it stands."""
        before = self.server_cpu(server_id)
        gevent.sleep(seconds)  # a measuring window, not a wait for a condition
        return (self.server_cpu(server_id) - before) / seconds

    def form(self, groups: list[str], topic: str, size: int, partitions: int,
             session_ms: int = MEMBER_SESSION_TIMEOUT_MS) -> dict[str, list[TimedMember]]:
        """``size`` members in each of ``groups``, all started at once, each group whole and settled."""
        members = {g: [TimedMember(self.cluster.bootstrap, g, topic, session_ms) for _ in range(size)]
                   for g in groups}
        wait_until(lambda: all(complete(ms, partitions) for ms in members.values()), 180,
                   message=f"{len(groups)} group(s) of {size} to form", interval=0.05)
        settle([m for ms in members.values() for m in ms])
        return members

    # -- 2. ping -------------------------------------------------------------------------------

    def ping(self) -> None:
        count, group_size = self.args.ping_members, 100
        topic = self.topic("ping", group_size)
        server = min(self.cluster.servers)
        groups = self.groups_of(server, "ping", max(1, count // group_size))
        idle = self.idle_rate(server, self.args.window_s / 2)
        members = [m for ms in self.form(groups, topic, group_size, group_size).values() for m in ms]
        for m in members:
            m.recorder.mark()
        before, started = self.server_cpu(server), time.perf_counter()
        gevent.sleep(self.args.window_s)  # the steady window
        elapsed = time.perf_counter() - started
        cpu = self.server_cpu(server) - before - idle * elapsed
        pings = sum(m.recorder.pings for m in members)
        per_ping_us = cpu / pings * 1e6 if pings else float("nan")
        self.figures["ping"] = {"members": len(members), "pings": pings, "seconds": elapsed,
                                "server_cores": cpu / elapsed, "idle_cores": idle, "cpu_per_ping_us": per_ping_us,
                                "session_timeout_ms": MEMBER_SESSION_TIMEOUT_MS}
        self.say(f"ping: {len(members)} members on one coordinator, {pings / elapsed:.0f} pings/s over "
                 f"{elapsed:.0f} s: server {cpu / elapsed * 100:.1f}% of a core above its idle "
                 f"{idle * 100:.1f}%: {per_ping_us:.0f} us per ping round trip")
        close_all(members)

    # -- 3. rounds -----------------------------------------------------------------------------

    def rounds(self) -> None:
        rows = []
        for size in self.args.round_sizes:
            partitions = PARTITIONS_PER_MEMBER * size
            topic = self.topic(f"round-{size}", partitions)
            group = f"round-{size}"
            server = self.coordinator_of(group)
            members = self.form([group], topic, size, partitions)[group]
            baseline = self.idle_rate(server, 3.0)  # the idle server plus these members' pings
            # A small round's CPU is a few ms, /proc counts in 10 ms ticks: more joins for small groups.
            joins = max(3, min(10, 1000 // size))
            cpu, whole, logged = 0.0, [], []
            for _ in range(joins):
                before, trigger = self.server_cpu(server), time.perf_counter()
                newcomer = TimedMember(self.cluster.bootstrap, group, topic, MEMBER_SESSION_TIMEOUT_MS)
                members.append(newcomer)
                wait_until(lambda: complete(members, partitions), 120, message=f"group of {size} to take a member",
                           interval=0.01)
                whole.append(max(m.recorder.last_start for m in members) - trigger)
                settle(members)
                cpu += self.server_cpu(server) - before - baseline * (time.perf_counter() - trigger)
                generation = newcomer.recorder.start_generation
                logged += [int(x[5]) for x in STABLE_LINE.findall(self.cluster.servers[server].log_path.read_text(
                    errors="replace")) if x[0] == group and int(x[1]) == generation][-1:]
            row = {"members": size + joins // 2, "partitions": partitions, "joins": joins,
                   "whole_ms": statistics.median(whole) * 1000,
                   "round_ms": statistics.median(logged) if logged else None, "cpu_ms": cpu / joins * 1000}
            rows.append(row)
            self.say(f"round: {joins} joins, one at a time, into {size} to {size + joins - 1} members over "
                     f"{partitions} partitions: whole after {row['whole_ms']:.0f} ms (median); the coordinator's "
                     f"round {row['round_ms']} ms (median); its server's CPU {row['cpu_ms']:.1f} ms per round above "
                     f"its baseline")
            close_all(members)
        self.figures["rounds"] = rows

    # -- 4. takeover ---------------------------------------------------------------------------

    def takeover(self) -> None:
        victim = max(self.cluster.servers)
        count, size = self.args.takeover_groups, self.args.takeover_group_size
        topic = self.topic("takeover", PARTITIONS_PER_MEMBER * size)
        groups = self.groups_of(victim, "takeover", count)
        slot = layout.slot_of(groups[0], SLOTS)
        partitions = PARTITIONS_PER_MEMBER * size
        members = self.form(groups, topic, size, partitions, TAKEOVER_SESSION_TIMEOUT_MS)
        epoch_path = layout.slot_epoch_path(slot)
        before = layout.decode_coordinator_epoch(self.zk.get(epoch_path)[0])
        survivor = min(self.cluster.servers)
        killed_at = time.perf_counter()
        self.cluster.servers[victim].kill()

        def new_epoch():
            try:
                epoch = layout.decode_coordinator_epoch(self.zk.get(epoch_path)[0])
            except Exception:  # being written: look again
                return None
            return epoch if epoch > before else None

        wait_until(new_epoch, 60, message="a new epoch of the dead server's slot", interval=0.02)
        elected_s = time.perf_counter() - killed_at
        epoch = new_epoch()
        wait_until(lambda: all(complete(ms, partitions, epoch) for ms in members.values()), 120,
                   message="every moved group whole under the new epoch", interval=0.02)
        whole_s = max(m.recorder.last_start for ms in members.values() for m in ms) - killed_at
        loaded = [int(ms) for k, e, ms in LOADED_LINE.findall(
            self.cluster.servers[survivor].log_path.read_text(errors="replace")) if int(k) == slot and int(e) == epoch]
        self.figures["takeover"] = {
            "groups": count, "members": count * size, "zk_session_s": ZK_SESSION_TIMEOUT_MS / 1000,
            "elected_s": elected_s, "loaded_ms": loaded[-1] if loaded else None, "whole_s": whole_s}
        self.say(f"takeover: kill -9 of the server of {count} groups, {count * size} members: new epoch after "
                 f"{elected_s:.2f} s (its ZooKeeper session {ZK_SESSION_TIMEOUT_MS / 1000:.1f} s), slot loaded in "
                 f"{loaded[-1] if loaded else '?'} ms, every group whole again after {whole_s:.2f} s")
        close_all([m for ms in members.values() for m in ms])


def _cores() -> int:
    return os.cpu_count() or 1


def _load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def summary(figures: dict) -> str:
    parts = []
    if "offsets" in figures:
        line = fit_line([(r["offsets"], r["zk_cpu_us"]) for r in figures["offsets"]])
        parts.append(f"flush of N offsets {line.intercept:.0f} + {line.slope:.1f}*N us ZooKeeper CPU")
    if "ping" in figures:
        parts.append(f"ping {figures['ping']['cpu_per_ping_us']:.0f} us")
    if "rounds" in figures:
        line = fit_line([(r["members"], r["cpu_ms"]) for r in figures["rounds"]])
        parts.append(f"round {line.intercept:.0f} + {line.slope:.2f}*N ms CPU")
    if "takeover" in figures:
        t = figures["takeover"]
        parts.append(f"takeover {t['whole_s']:.1f} s (session {t['zk_session_s']:.1f} s)")
    return "costs: " + "; ".join(parts)


STEPS = ("offsets", "ping", "rounds", "takeover")


def run(args, work: Path) -> str:
    bench = CostsBench(work, args)
    try:
        bench.start(SERVERS)
        bench.wait_for_slots()
        for step in STEPS:
            if step in args.only:
                getattr(bench, step)()
    except BaseException:
        bench.dump_logs()
        raise
    finally:
        bench.stop()
    bench.figures["machine"]["load_after"] = _load()
    if args.json:
        Path(args.json).write_text(json.dumps(bench.figures, indent=1) + "\n")
    return summary(bench.figures)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default=",".join(STEPS), help=f"comma-separated steps of {', '.join(STEPS)}")
    parser.add_argument("--serial-writes", type=int, default=1500, help="multis one at a time per size (fewer "
                                                                         "for the big ones: 40,000 offsets at most)")
    parser.add_argument("--writers", type=int, default=32, help="multis in flight at once when saturating")
    parser.add_argument("--saturate-s", type=float, default=8.0)
    parser.add_argument("--reads", type=int, default=50_000, help="existence checks timed")
    parser.add_argument("--ping-members", type=int, default=2000)
    parser.add_argument("--window-s", type=float, default=20.0, help="the ping's steady window")
    parser.add_argument("--round-sizes", default="10,100,1000")
    parser.add_argument("--takeover-groups", type=int, default=100)
    parser.add_argument("--takeover-group-size", type=int, default=10)
    parser.add_argument("--json", help="also write every figure to this file (the model's input)")
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    args = parser.parse_args()
    args.only = set(args.only.split(","))
    if not args.only <= set(STEPS):
        parser.error(f"--only takes {', '.join(STEPS)}")
    args.round_sizes = [int(x) for x in args.round_sizes.split(",")]
    if min(args.round_sizes) < 1 or args.writers < 1 or args.saturate_s <= 0 or args.window_s <= 0:
        parser.error("sizes, --writers, --saturate-s and --window-s must be positive")
    raise_fd_limit()
    return run_in_scratch("zkcoord-bench-costs-", run, args)


if __name__ == "__main__":
    sys.exit(main())
