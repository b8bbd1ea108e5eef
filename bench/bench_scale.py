"""Scale: how many members the coordinators hold, how fast a crowd joins, and what a kill -9 costs.

Brings up its own cluster on 127.0.0.1 (a ZooKeeper ensemble and
``--coordinators`` `zkcoord server` processes, each with its embedded broker,
sharing ``--slots`` coordinator slots: every server coordinates a share),
creates one topic, and starts load generator processes
(``python -m zkcoord.testing.loadgen``), each running up to
``--per-generator`` real group members over TCP. All ``--members`` start at
once, spread round-robin over ``--groups`` groups that all consume the topic.

It measures:

- **joined in**: from starting the generators until every member is
  registered and every group whole (each partition held by exactly one of its
  members); all members start at once unless ``--ramp-s`` spreads them out;
- **steady CPU**, over a ``--steady-s`` window after that: each server
  process's CPU from /proc (the busiest is the figure; embedded broker, ZooKeeper
  session and timers included) and the generators' own, summed, both in % of
  one core; and the busiest server's CPU per ping it sent in the window (its
  ``zkcoord_pings_sent_total``, each a round trip: the ping out, its answer
  in), in microseconds: in a steady window pings are nearly all it does;
- **expired**: registrations the members lost from the start to the end of the
  steady window (each member that lost its place and came back counts once per
  loss), plus members not registered at its end;
- with ``--failover``, after the window: kill -9 of the busiest coordinator,
  and the time until every group of its slots is whole again under a new
  epoch of its slot (with several coordinators, the other groups must not
  lose a member meanwhile).

The members report no offsets and always say they have just polled. Every
process it starts is stopped on exit, on error too; everything is bounded in
time. Prints, as its last line:

    members N groups G coordinators C: joined in X s; steady coordinator CPU Y% of a core (U us a ping); generator CPU Z% of a core; expired E

    python bench/bench_scale.py --members 5000 --groups 50 [--coordinators 1] [--slots S] [--failover]
"""

from gevent import monkey

monkey.patch_all()

import argparse  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import re  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Optional  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import gevent  # noqa: E402

from _common import Harness, run_in_scratch  # noqa: E402
from zkcoord.zk.layout import slot_of, validate_slot_count  # noqa: E402
from zkcoord.errors import ConfigError  # noqa: E402
from zkcoord.testing import cpu_seconds, wait_until  # noqa: E402
from zkcoord.testing.loadgen import group_name  # noqa: E402
from zkcoord.zk import layout  # noqa: E402

TOPIC = "scale"
GROUP_PREFIX = "scale"
GENERATOR_NICENESS = 10


class Generator:
    """One load generator process and the last status line it printed."""

    def __init__(self, index: int, bootstrap: list[str], first: int, last: int, args, work: Path):
        self.log = open(work / f"generator-{index}.log", "ab")
        self.proc = subprocess.Popen(
            # Niced: on one machine the members must not starve the servers
            # they measure (in a deployment they run elsewhere).
            ["nice", "-n", str(GENERATOR_NICENESS), sys.executable, "-m", "zkcoord.testing.loadgen", "--bootstrap", ",".join(bootstrap),
             "--topic", TOPIC, "--groups", str(args.groups), "--prefix", GROUP_PREFIX,
             "--first", str(first), "--last", str(last),
             "--session-timeout-ms", str(args.session_timeout_ms), "--max-s", str(args.max_s),
             "--start-over-s", str(args.ramp_s),
             *(f"--strategy={strategy}" for strategy in getattr(args, "strategies", ()))],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log,
            cwd=str(Path(__file__).resolve().parent.parent), start_new_session=True)
        self.status: dict = {}
        self.reader = gevent.spawn(self._read)

    def _read(self) -> None:
        for line in self.proc.stdout:
            try:
                self.status = json.loads(line)
            except ValueError:
                continue

    def stop(self) -> None:
        try:
            self.proc.stdin.close()  # the generator stops when its stdin closes
            self.proc.wait(10)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()
            self.proc.wait()
        self.log.close()


class Fleet:
    """The generators of one run, and what their statuses say together."""

    def __init__(self, generators: list[Generator], groups: int, members: int, partitions: int):
        self.generators = generators
        self.groups = groups
        self.members = members
        self.partitions = partitions

    def _statuses(self) -> list[dict]:
        return [g.status for g in self.generators]

    def registered(self) -> int:
        return sum(s.get("registered", 0) for s in self._statuses())

    def waiting(self) -> list:
        """A few members not registered: [consumer id, group, state, registrations so far]."""
        return [w for s in self._statuses() for w in s.get("waiting", [])][:5]

    def lost(self) -> int:
        return sum(s.get("lost", 0) for s in self._statuses())

    def cpu_s(self) -> float:
        return sum(cpu_seconds(g.proc.pid) for g in self.generators)

    def fresh_since(self, moment: float) -> bool:
        """Every generator has reported since ``moment`` (time.time())."""
        return all(s.get("time", 0.0) > moment for s in self._statuses())

    def whole_groups(self, min_epochs: Optional[dict] = None) -> dict[str, float]:
        """The groups in which every member is registered and the members
        hold each partition exactly once (by count and by the sum of the
        partition numbers), every member of a group named in ``min_epochs``
        under that epoch or later; each with the moment (time.time()) it
        became so: its members' last Start or Stop, as their generator noted
        it, so that a figure does not wait for the next status line."""
        per_group: dict[str, list] = {}
        for status in self._statuses():
            for group, (registered, held, id_sum, epoch, changed_at) in status.get("groups", {}).items():
                entry = per_group.setdefault(group, [0, 0, 0, math.inf, 0.0])
                entry[0] += registered
                entry[1] += held
                entry[2] += id_sum
                entry[3] = min(entry[3], epoch)
                entry[4] = max(entry[4], changed_at)
        expected_sum = self.partitions * (self.partitions - 1) // 2
        whole = {}
        for index in range(self.groups):
            name = group_name(GROUP_PREFIX, index)
            entry = per_group.get(name)
            size = self.members // self.groups + (index < self.members % self.groups)
            if entry and entry[0] == size and entry[1] == self.partitions and entry[2] == expected_sum \
                    and entry[3] >= (min_epochs or {}).get(name, -1):
                whole[name] = entry[4]
        return whole

    def stop(self) -> None:
        for generator in self.generators:
            generator.stop()


def server_capacity(harness, partitions: int) -> int:
    """The fewest connections a server says it serves (its log at start),
    less the log and index its broker opens for each partition of the topic
    created after that."""
    limits = []
    for server_id in harness.cluster.servers:
        found = re.search(r"serves at most (\d+) connections", harness.coordinator_log(server_id))
        if found:
            limits.append(int(found[1]))
    return min(limits) - 2 * partitions if limits else sys.maxsize


def pings_sent(server) -> float:
    """The pings ``server`` has sent to members so far, from its metrics endpoint."""
    return server.scrape().value("zkcoord_pings_sent_total")


def percent(cpu_s: float, seconds: float) -> float:
    return 100.0 * cpu_s / seconds


def run(args, work: Path) -> str:
    harness = Harness(work, server_args=["--zk-session-timeout-ms", str(args.zk_session_timeout_ms),
                                         "--coordinator-slots", str(args.slots), "--metrics-port", "0"],
                      zk_nodes=args.zk_nodes)
    fleet = None
    try:
        harness.start(servers=args.coordinators)
        harness.topic(TOPIC, args.partitions)
        bootstrap = harness.cluster.bootstrap
        capacity = server_capacity(harness, args.partitions)
        if args.members > capacity * args.coordinators:
            raise SystemExit(f"one server here holds at most {capacity} members (its open-file limit, less "
                             f"its broker's files and connections); asked for {args.members} over "
                             f"{args.coordinators}")
        processes = max(1, math.ceil(args.members / args.per_generator))
        wait_until(lambda: all(harness.zk.exists(layout.slot_coordinator_path(k)) for k in range(args.slots)),
                   60, message="every coordinator slot elected")
        print(f"cluster up: {args.coordinators} server(s) sharing {args.slots} coordinator slot(s), ZooKeeper of "
              f"{args.zk_nodes}; topic {TOPIC} of "
              f"{args.partitions} partitions; {args.members} members in {args.groups} groups from "
              f"{processes} generator process(es)", flush=True)

        began = time.time()
        generators = []
        for index in range(processes):
            first = index * args.members // processes
            last = (index + 1) * args.members // processes - 1
            generators.append(Generator(index, bootstrap, first, last, args, work))
        fleet = Fleet(generators, args.groups, args.members, args.partitions)

        def progress() -> bool:
            if any(g.proc.poll() is not None for g in generators):
                raise RuntimeError("a load generator exited; see its log under " + str(work))
            return fleet.fresh_since(began) and len(fleet.whole_groups()) == args.groups

        last_print = [0.0]

        def report_progress() -> bool:
            done = progress()
            if time.time() - last_print[0] >= 5:
                last_print[0] = time.time()
                print(f"  {time.time() - began:5.1f} s: {fleet.registered()} registered, "
                      f"{len(fleet.whole_groups())} of {args.groups} groups whole", flush=True)
                if time.time() - began > args.ramp_s + 10 and fleet.registered() < args.members:
                    print(f"    not registered, among others: {fleet.waiting()}", flush=True)
            return done

        wait_until(report_progress, args.ramp_s + args.join_timeout_s, message="every member registered and every group whole",
                   interval=0.2)
        joined_s = max(fleet.whole_groups().values()) - began
        print(f"joined: {args.members} members, {args.groups} groups whole in {joined_s:.1f} s", flush=True)

        # The steady window: nobody joins or leaves.
        servers = {sid: s for sid, s in harness.cluster.servers.items()}
        window_began = time.time()
        pings = {sid: pings_sent(s) for sid, s in servers.items()}
        server_cpu = {sid: s.cpu_seconds() for sid, s in servers.items()}
        generator_cpu = fleet.cpu_s()
        gevent.sleep(args.steady_s)
        window = time.time() - window_began
        server_used = {sid: s.cpu_seconds() - server_cpu[sid] for sid, s in servers.items()}
        generator_pct = percent(fleet.cpu_s() - generator_cpu, window)
        pings = {sid: pings_sent(s) - pings[sid] for sid, s in servers.items()}
        server_pct = {sid: percent(used, window) for sid, used in server_used.items()}
        per_ping_us = {sid: 1e6 * used / pings[sid] if pings[sid] else math.inf for sid, used in server_used.items()}
        busiest = max(server_pct, key=server_pct.get)
        for sid, pct in sorted(server_pct.items()):
            print(f"  server {sid}: {pct:.1f}% of a core over {window:.0f} s; {pings[sid] / window:.0f} pings a "
                  f"second, {per_ping_us[sid]:.0f} us of CPU a ping", flush=True)
        print(f"  generators: {generator_pct:.1f}% of a core in all ({processes} processes)", flush=True)

        # Counted before any failover, whose losses are by design.
        expired = fleet.lost() + (args.members - fleet.registered())
        if args.failover:
            failover(harness, fleet, busiest, args)

        return (f"members {args.members} groups {args.groups} coordinators {args.coordinators}: "
                f"joined in {joined_s:.1f} s; steady coordinator CPU {server_pct[busiest]:.1f}% of a core "
                f"({per_ping_us[busiest]:.0f} us a ping); "
                f"generator CPU {generator_pct:.1f}% of a core; expired {expired}")
    except BaseException:
        harness.dump_logs()
        raise
    finally:
        if fleet is not None:
            fleet.stop()
        harness.stop()


def slot_epochs(harness: Harness, slots: int) -> dict[int, int]:
    """Each coordinator slot's epoch now."""
    return {k: layout.decode_coordinator_epoch(harness.zk.get(layout.slot_epoch_path(k))[0])
            for k in range(slots)}


def failover(harness: Harness, fleet: Fleet, victim: int, args) -> None:
    """kill -9 of ``victim`` (a server), and the time until every group of
    the slots it held is whole under a new epoch of its slot; the others'
    registrations lost meanwhile are counted (there should be none)."""
    groups = [group_name(GROUP_PREFIX, index) for index in range(args.groups)]
    held = {k for k in range(args.slots)
            if layout.decode_coordinator(harness.zk.get(layout.slot_coordinator_path(k))[0]) == str(victim)}
    before = slot_epochs(harness, args.slots)
    moved = [g for g in groups if slot_of(g, args.slots) in held]
    lost_before = fleet.lost()
    killed_at = time.time()
    harness.cluster.servers[victim].kill()

    def elected() -> bool:
        try:
            now = slot_epochs(harness, args.slots)
        except Exception:  # an epoch node being written: look again
            return False
        return all(now[k] > before[k] for k in held) and all(harness.zk.exists(layout.slot_coordinator_path(k))
                                                             for k in held)

    wait_until(elected, 60, message="new epochs in the dead server's slots", interval=0.05)
    elected_s = time.time() - killed_at
    after = slot_epochs(harness, args.slots)
    wanted = {g: after[slot_of(g, args.slots)] for g in moved}
    wait_until(lambda: fleet.fresh_since(killed_at) and len(fleet.whole_groups(wanted)) == args.groups,
               args.join_timeout_s, message="every group whole, the moved ones under their new epoch", interval=0.1)
    whole_s = max(fleet.whole_groups(wanted).values()) - killed_at
    print(f"failover: kill -9 of server {victim}, holding {len(held)} of {args.slots} slot(s) and {len(moved)} of "
          f"{args.groups} groups; new epochs after {elected_s:.1f} s; every group whole again after {whole_s:.1f} s "
          f"(ZooKeeper session {args.zk_session_timeout_ms / 1000:.1f} s; {fleet.lost() - lost_before} registrations "
          f"lost, of members of the dead coordinator as they must be)", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--members", type=int, required=True)
    parser.add_argument("--groups", type=int, required=True)
    parser.add_argument("--coordinators", type=int, default=1, help="zkcoord servers (default 1)")
    parser.add_argument("--slots", type=int, default=None,
                        help="coordinator slots the servers share (default 1 with one server, else 12)")
    parser.add_argument("--partitions", type=int, default=100, help="partitions of the topic (default 100)")
    parser.add_argument("--session-timeout-ms", type=int, default=10_000,
                        help="members' session timeout (default 10000: a ping every 3.3 s)")
    parser.add_argument("--zk-session-timeout-ms", type=int, default=6000, help="servers' ZooKeeper session")
    parser.add_argument("--zk-nodes", type=int, default=1, help="ZooKeeper ensemble size (default 1)")
    parser.add_argument("--per-generator", type=int, default=2500, help="members per generator process")
    parser.add_argument("--ramp-s", type=float, default=0.0,
                        help="start the members evenly over this many seconds (default 0: all at once)")
    parser.add_argument("--steady-s", type=float, default=30.0, help="steady window (default 30 s)")
    parser.add_argument("--join-timeout-s", type=float, default=180.0)
    parser.add_argument("--failover", action="store_true", help="then kill -9 the busiest coordinator")
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    args = parser.parse_args()
    if args.members < 1 or args.groups < 1 or args.groups > args.members or args.coordinators < 1:
        parser.error("need 1 <= --groups <= --members and --coordinators >= 1")
    if args.partitions < 1 or args.per_generator < 1 or args.steady_s <= 0 or args.ramp_s < 0:
        parser.error("--partitions, --per-generator and --steady-s must be positive")
    if args.slots is None:
        args.slots = 1 if args.coordinators == 1 else 12
    try:
        validate_slot_count(args.slots)
    except ConfigError as exc:
        parser.error(str(exc))
    args.max_s = args.ramp_s + args.join_timeout_s * (3 if args.failover else 1) + args.steady_s + 120
    return run_in_scratch("zkcoord-bench-scale-", run, args)


if __name__ == "__main__":
    sys.exit(main())
