"""A big group: one group of thousands of members on one topic of as many partitions.

Brings up its own cluster on 127.0.0.1: a one-node ZooKeeper (with the
heap ZooKeeper's own scripts give it, 1000 MB: each round writes several MB,
and ZooKeeper keeps its last 500 transactions in memory) and one
`zkcoord server --no-broker` (with ``--failover``, a second one standing by).
No broker: the coordinator needs the topic's partitions in ZooKeeper, not
their leaders, and a broker leading 20,000 partitions would open 40,000
files, twice this machine's open-file limit. The topic node is written
straight into ZooKeeper. Load generator processes (``python -m
zkcoord.testing.loadgen``, as ``bench_scale.py`` runs them) start
``--members`` real members over TCP, all in one group, evenly over
``--ramp-s`` seconds.

It measures:

- **stable in**: from starting the generators until every member is
  registered and the members hold each partition exactly once (dated by the
  last Start or Stop a member received), with the rounds the coordinator ran
  meanwhile and its CPU;
- **state**: the group's persisted state, as one node would have taken it
  (version 2, what ZooKeeper refused past 1 MB) and as written: the manifest
  and its chunks;
- with ``--failover``: kill -9 of the coordinator, and the time until the
  group is whole again under the standby's epoch (it reads the split state,
  fences every member's partitions, takes the members back and rebalances),
  with the time its takeover took to load.

Every process it starts is stopped on exit, on error too; every wait is
bounded. Prints, as its last line:

    members N partitions P: stable in X s (R rounds, coordinator CPU C s); state S bytes as one node, written as M bytes + K chunks of B bytes[; failover: whole again in F s]

    python bench/bench_big_group.py --members 19000 --partitions 20000 --ramp-s 120 [--failover]
"""

from gevent import monkey

monkey.patch_all()

import argparse  # noqa: E402
import math  # noqa: E402
import re  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402
from types import SimpleNamespace  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import LOADED_LINE, STABLE_LINE, ZK_TICK_MS, brokerless_topic, run_in_scratch  # noqa: E402
from bench_scale import GROUP_PREFIX, TOPIC, Fleet, Generator  # noqa: E402
from zkcoord.testing import LocalCluster, start_ensemble, wait_until  # noqa: E402
from zkcoord.testing.loadgen import group_name  # noqa: E402
from zkcoord.zk import client as zk_client  # noqa: E402
from zkcoord.zk import layout  # noqa: E402
from zkcoord.zk.gevent_handler import GeventHandler  # noqa: E402
from zkcoord.zk.nodes import read_group_state  # noqa: E402

GROUP = group_name(GROUP_PREFIX, 0)
ROUND_LINE = re.compile(rf"\[group {GROUP} gen \d+\] rebalancing to gen ")
SERVES_LINE = re.compile(r"serves at most (\d+) connections")


class Cluster:
    """The ensemble, the servers, a ZooKeeper client of the bench's own."""

    def __init__(self, work: Path, args):
        self.ensemble = start_ensemble(work / "zk", nodes=1, tick_ms=ZK_TICK_MS, timeout=90, heap_mb=args.zk_heap_mb)
        self.zk = zk_client.open_client(self.ensemble.connect_string, handler=GeventHandler())
        zk_client.start(self.zk, 30)
        self.cluster = LocalCluster(self.ensemble.connect_string, work / "cluster", (
            "--no-broker", "--zk-session-timeout-ms", str(args.zk_session_timeout_ms),
            "--rebalance-delay-ms", str(args.rebalance_delay_ms),
            # Every member runs on this host: one address, past the per-address cap meant for the network.
            "--max-connections-per-address", "1000000"))

    def start_servers(self, count: int) -> None:
        for server_id in range(1, count + 1):
            self.cluster.add_server(server_id)
        self.cluster.wait_for_coordinator(60)

    def coordinator(self):
        return self.cluster.servers[self.cluster.coordinator_id()]

    def log_of(self, server) -> str:
        return server.log_path.read_text(errors="replace")

    def epoch(self) -> int:
        return layout.decode_coordinator_epoch(self.zk.get(layout.COORDINATOR_EPOCH_PATH)[0])

    def stop(self) -> None:
        try:
            self.zk.stop()
        except Exception:  # closing down: the ensemble may be gone already
            pass
        self.cluster.close()
        self.ensemble.stop()


def state_bytes(zk) -> tuple[int, int, list[int]]:
    """The group's state as one node would take it, its node as written, and its chunks' sizes."""
    state = read_group_state(zk, GROUP)
    data, _ = zk.get(layout.group_state_path(GROUP))
    node = layout.decode_group_state_node(data)
    chunks = [zk.exists(layout.group_state_chunk_path(GROUP, name)).dataLength
              for name in getattr(node, "chunks", ())]
    return len(layout.encode_group_state(state)), len(data), chunks


def wait_whole(fleet: Fleet, since: float, timeout_s: float, epoch: int = -1) -> float:
    """When the group became whole (its members hold each partition once, all under ``epoch`` or later)."""
    last_print = [time.time()]

    def whole() -> bool:
        if any(g.proc.poll() is not None for g in fleet.generators):
            raise RuntimeError("a load generator exited; see its log")
        if time.time() - last_print[0] >= 10:
            last_print[0] = time.time()
            print(f"  {time.time() - since:6.1f} s: {fleet.registered()} registered", flush=True)
        return fleet.fresh_since(since) and GROUP in fleet.whole_groups({GROUP: epoch})

    wait_until(whole, timeout_s, message="every member registered and the group whole", interval=0.5)
    return fleet.whole_groups({GROUP: epoch})[GROUP] - since


def run(args, work: Path) -> str:
    cluster = Cluster(work, args)
    fleet = None
    try:
        cluster.start_servers(2 if args.failover else 1)
        brokerless_topic(cluster.zk, TOPIC, args.partitions)
        coordinator = cluster.coordinator()
        serves = int(SERVES_LINE.search(cluster.log_of(coordinator))[1])
        if args.members > serves:
            raise SystemExit(f"one server here serves at most {serves} connections (its open-file limit); "
                             f"asked for {args.members} members in one group")
        processes = max(1, math.ceil(args.members / args.per_generator))
        print(f"cluster up: {len(cluster.cluster.servers)} server(s) without broker, ZooKeeper of 1; topic "
              f"{TOPIC} of {args.partitions} partitions; {args.members} members in group {GROUP} from "
              f"{processes} generator process(es) over {args.ramp_s:.0f} s, preferring "
              f"{','.join(args.strategy or ['range'])}; rebalance delay {args.rebalance_delay_ms} ms", flush=True)

        generator_args = SimpleNamespace(groups=1, session_timeout_ms=args.session_timeout_ms, max_s=args.max_s,
                                         ramp_s=args.ramp_s, strategies=args.strategy or ())
        cpu_before = coordinator.cpu_seconds()
        began = time.time()
        generators = [Generator(index, cluster.cluster.bootstrap, index * args.members // processes,
                                (index + 1) * args.members // processes - 1, generator_args, work)
                      for index in range(processes)]
        fleet = Fleet(generators, 1, args.members, args.partitions)
        stable_s = wait_whole(fleet, began, args.ramp_s + args.join_timeout_s)
        cpu_s = coordinator.cpu_seconds() - cpu_before
        log = cluster.log_of(coordinator)
        rounds = len(ROUND_LINE.findall(log))
        last = [m for m in STABLE_LINE.finditer(log) if m[1] == GROUP][-1]
        print(f"stable: {args.members} members, {args.partitions} partitions in {stable_s:.1f} s; {rounds} rounds; "
              f"the last: gen {last[2]}, {last[6]} ms; coordinator CPU {cpu_s:.1f} s", flush=True)

        one_node, written, chunks = state_bytes(cluster.zk)
        state_line = (f"state {one_node} bytes as one node, written as {written} bytes"
                      + (f" + {len(chunks)} chunks of {sum(chunks)} bytes (largest {max(chunks)})" if chunks else ""))
        print(state_line, flush=True)
        line = (f"members {args.members} partitions {args.partitions}: stable in {stable_s:.1f} s ({rounds} rounds, "
                f"coordinator CPU {cpu_s:.1f} s); {state_line}")
        if args.failover:
            line += "; " + failover(cluster, fleet, coordinator, args)
        return line
    except BaseException:
        for name, tail in cluster.cluster.log_tails().items():
            print(f"--- {name} log (tail) ---\n{tail[-3000:]}", file=sys.stderr)
        raise
    finally:
        if fleet is not None:
            fleet.stop()
        cluster.stop()


def failover(cluster: Cluster, fleet: Fleet, victim, args) -> str:
    """kill -9 of ``victim``, and the time until the group is whole under the standby's epoch."""
    before = cluster.epoch()
    killed_at = time.time()
    victim.kill()
    wait_until(lambda: cluster.zk.exists(layout.COORDINATOR_PATH) and cluster.epoch() > before, 60,
               message="the standby elected", interval=0.05)
    elected_s = time.time() - killed_at
    successor = cluster.coordinator()
    whole_s = wait_whole(fleet, killed_at, args.join_timeout_s, epoch=cluster.epoch())
    loaded = [ms for slot, _, ms in LOADED_LINE.findall(cluster.log_of(successor)) if slot == "0"]
    summary = (f"failover: elected after {elected_s:.1f} s, loaded in {loaded[-1] if loaded else '?'} ms, whole again after "
               f"{whole_s:.1f} s (ZooKeeper session {args.zk_session_timeout_ms / 1000:.1f} s)")
    print(summary, flush=True)
    return summary


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--members", type=int, default=19_000)
    parser.add_argument("--partitions", type=int, default=20_000)
    parser.add_argument("--ramp-s", type=float, default=120.0,
                        help="start the members evenly over this many seconds (default 120)")
    parser.add_argument("--per-generator", type=int, default=4000, help="members per generator process")
    parser.add_argument("--session-timeout-ms", type=int, default=10_000, help="members' session timeout")
    parser.add_argument("--strategy", action="append", choices=("range", "roundrobin", "sticky"),
                        help="the members' assignment strategies, in order of preference (repeatable; default "
                             "range, the members' own default)")
    parser.add_argument("--rebalance-delay-ms", type=int, default=100,
                        help="the coordinator's: joins within this delay make one round (default 100, its own)")
    parser.add_argument("--zk-session-timeout-ms", type=int, default=6000, help="the servers' ZooKeeper session")
    parser.add_argument("--zk-heap-mb", type=int, default=1000,
                        help="ZooKeeper's Java heap (default 1000, ZooKeeper's own; the tests' 256 runs out)")
    parser.add_argument("--join-timeout-s", type=float, default=300.0)
    parser.add_argument("--failover", action="store_true", help="then kill -9 the coordinator")
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    args = parser.parse_args()
    if args.members < 1 or args.partitions < 1 or args.per_generator < 1 or args.ramp_s < 0:
        parser.error("--members, --partitions and --per-generator must be positive, --ramp-s not negative")
    args.max_s = args.ramp_s + args.join_timeout_s * (2 if args.failover else 1) + 120
    return run_in_scratch("zkcoord-bench-big-group-", run, args)


if __name__ == "__main__":
    sys.exit(main())
