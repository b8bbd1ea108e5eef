"""The scale model: where zkcoord's limits lie past one machine, from unit costs measured here.

Pure and deterministic (no I/O but reading the measured costs; every random
choice from a seeded generator). Its inputs are the figures
``bench/bench_costs.py --json bench/costs.json`` measured on a real 3-node
ZooKeeper ensemble and real `zkcoord server` processes; docs/SCALE.md
states the formulas, the assumptions and the predictions.

The parts:

- :func:`fit_line`: a cost ``a + b*x`` fitted to measured points (a flush of
  N offsets, a round of N members), weighted so that the small points count
  as much as the large ones;
- :class:`UnitCosts`: the measured costs, read from the bench's JSON;
- :func:`closed_loop`: a discrete-event simulation of W writers flushing
  offsets through the writer's one core and the ensemble's CPU, as the bench
  did: it must reproduce the bench's measured throughput before its open
  form is trusted;
- :func:`flush_bursts`: the same ensemble under the flushes of many slots,
  each slot writing all its groups' offsets at once every commit interval,
  as the coordinator does (core/offsets.py): what one machine cannot show;
- :func:`limits`: for a :class:`Scenario` (members, groups, partitions, a
  commit interval), the ZooKeeper load, the ensembles, the servers, the
  slots, and which limit binds.

    python bench/scale_model.py [--costs bench/costs.json]
"""

from __future__ import annotations

import argparse
import heapq
import json
import math
import random
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Iterable, Optional

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from zkcoord.coordinator.lease import OFFICE_RENEWAL_SHARE  # noqa: E402
from zkcoord.zk.layout import MAX_SLOTS  # noqa: E402

COSTS_PATH = Path(__file__).resolve().parent / "costs.json"

# How closely the fitted costs must reproduce each measured point (a unit
# test holds the model to these): CPU read from /proc in 10 ms ticks over a
# few hundred writes, on two cores shared by three ZooKeeper nodes, the
# writer and the servers, varies by about this much from run to run.
FIT_TOLERANCE = 0.35
# The simulated throughput of the bench's saturation run, given the CPU the
# ensemble got in it, against the measured: never above it by more than
# this (the serial costs must not understate a multi's cost under load) ...
SIMULATION_OPTIMISM = 0.35
# ... nor below it by more than this factor: under load ZooKeeper and the
# writer amortise a multi's fixed cost over a batch, which the serial costs
# the model runs on do not (it is pessimistic for small multis).
SIMULATION_PESSIMISM = 3.0


@dataclass(frozen=True)
class Line:
    """``intercept + slope * x``."""

    intercept: float
    slope: float

    def __call__(self, x: float) -> float:
        return self.intercept + self.slope * x


def fit_line(points: Iterable[tuple[float, float]]) -> Line:
    """The line through ``points`` (x, y) with the least squared *relative*
    error: a cost measured from 1 to 1000 offsets spans three orders, and an
    ordinary fit would leave the small ones (a proof of office, a flush of
    one offset) far off. A negative intercept or slope, which no cost has,
    is clamped to 0 and the other refitted.

    >>> fit_line([(0, 100.0), (10, 200.0), (100, 1100.0)])
    Line(intercept=100.0, slope=10.0)
    """
    points = [(float(x), float(y)) for x, y in points if y > 0]
    if not points:
        raise ValueError("no positive points to fit")
    weights = [1.0 / (y * y) for _, y in points]
    sw = sum(weights)
    sx = sum(w * x for w, (x, _) in zip(weights, points))
    sy = sum(w * y for w, (_, y) in zip(weights, points))
    sxx = sum(w * x * x for w, (x, _) in zip(weights, points))
    sxy = sum(w * x * y for w, (x, y) in zip(weights, points))
    det = sw * sxx - sx * sx
    if det <= 0:  # one x only: a constant
        return Line(sy / sw, 0.0)
    slope = (sw * sxy - sx * sy) / det
    intercept = (sy - slope * sx) / sw
    if slope < 0:
        return Line(sy / sw, 0.0)
    if intercept < 0:
        return Line(0.0, sxy / sxx)
    return Line(intercept, slope)


@dataclass(frozen=True)
class UnitCosts:
    """What bench_costs.py measured. CPU in seconds; a flush's by its number of offsets."""

    flush_zk: Line  # the three ZooKeeper processes' CPU per fenced multi
    flush_leader: Line  # the leader's alone
    flush_writer: Line  # the writer's (the coordinator's kazoo) per multi
    flush_latency: Line  # one multi at a time, median, seconds
    read_s: float  # ZooKeeper's CPU per watched existence check (an election round's read)
    ping_s: float  # a coordinator's CPU per ping round trip
    round_cpu: Line  # a coordinator's CPU per round, by the group's members
    takeover_elected_s: float  # kill -9 to new epoch: the ZooKeeper session, then the election
    takeover_whole_s: float  # kill -9 to every moved group whole again
    takeover_session_s: float
    takeover_members: int
    takeover_groups: int
    takeover_loaded_s: float
    cores: int  # of the machine that measured them
    figures: dict  # every figure as measured, for the checks

    @classmethod
    def from_figures(cls, figures: dict) -> "UnitCosts":
        rows = figures["offsets"]
        t = figures["takeover"]
        return cls(
            flush_zk=fit_line((r["offsets"], r["zk_cpu_us"] / 1e6) for r in rows),
            flush_leader=fit_line((r["offsets"], r["leader_cpu_us"] / 1e6) for r in rows),
            flush_writer=fit_line((r["offsets"], r["writer_cpu_us"] / 1e6) for r in rows),
            flush_latency=fit_line((r["offsets"], r["latency_median_ms"] / 1e3) for r in rows),
            read_s=figures["reads"]["zk_cpu_us"] / 1e6,
            ping_s=figures["ping"]["cpu_per_ping_us"] / 1e6,
            round_cpu=fit_line((r["members"], r["cpu_ms"] / 1e3) for r in figures["rounds"]),
            takeover_elected_s=t["elected_s"], takeover_whole_s=t["whole_s"], takeover_session_s=t["zk_session_s"],
            takeover_members=t["members"], takeover_groups=t["groups"],
            takeover_loaded_s=(t["loaded_ms"] or 0) / 1e3,
            cores=figures["machine"]["cores"], figures=figures,
        )

    @classmethod
    def load(cls, path: Path = COSTS_PATH) -> "UnitCosts":
        return cls.from_figures(json.loads(Path(path).read_text()))

    def recovery_rate(self) -> float:
        """Members a successor brings back (registered, rounds done) per
        second after its election: the measured takeover's members over its
        time from the new epoch to the last group whole."""
        return self.takeover_members / max(self.takeover_whole_s - self.takeover_elected_s, 1e-3)

    def load_per_group_s(self) -> float:
        """A successor's time to load one group of the slot it takes (its state, owners, offsets)."""
        return self.takeover_loaded_s / max(self.takeover_groups, 1)

    def flush_wait(self, offsets: int) -> float:
        """A lone multi's time that is not CPU on either side: the network,
        ZooKeeper's fsync of its log and its quorum round (floor 0)."""
        return max(0.0, self.flush_latency(offsets) - self.flush_zk(offsets) - self.flush_writer(offsets))


# -- simulations -------------------------------------------------------------------------------


def closed_loop(writers: int, writer_s: float, zk_s: float, zk_units: float, wait_s: float,
                multis: int = 4000) -> float:
    """Multis per second of ``writers`` each with one multi in flight, as
    bench_costs.py's saturation: a multi takes ``writer_s`` on the writer's
    one core (kazoo's encoding, one greenlet loop), then ``zk_s`` of
    ensemble CPU on ``zk_units`` cores (FIFO), then ``wait_s`` that uses no
    CPU (fsync, quorum), then its writer sends the next. Deterministic."""
    if writers < 1 or zk_units <= 0:
        raise ValueError("need writers >= 1 and zk_units > 0")
    units = max(1, int(zk_units))
    zk_service = zk_s * units / zk_units  # fractional cores: each unit slower
    writer_free = 0.0
    zk_free = [0.0] * units
    ready = [(0.0, w) for w in range(writers)]  # (time the writer may send, writer)
    heapq.heapify(ready)
    finished = 0
    last = 0.0
    while finished < multis:
        at, w = heapq.heappop(ready)
        encoded = max(at, writer_free) + writer_s
        writer_free = encoded
        unit_free = heapq.heappop(zk_free)
        served = max(encoded, unit_free) + zk_service
        heapq.heappush(zk_free, served)
        done = served + wait_s
        last = max(last, done)
        finished += 1
        heapq.heappush(ready, (done, w))
    return finished / last


@dataclass(frozen=True)
class BurstResult:
    offered_load: float  # the leader's work per second over what its cores do in a second (above 1: behind)
    p50_s: float  # a multi's time from its slot's flush to its answer
    p99_s: float
    max_s: float
    keeps_up: bool  # every flush answered before its slot's next one


def flush_bursts(slots: int, groups_per_slot: int, offsets_per_group: int, interval_s: float,
                 leader_s: Line, leader_units: float, wait_s: float, intervals: int = 3,
                 seed: int = 1, max_multis: int = 400_000) -> BurstResult:
    """``slots`` coordinators, each flushing every ``interval_s`` all its
    groups' offsets at once (one multi of ``offsets_per_group`` offsets per
    group), their timers at seeded random phases, against an ensemble whose
    leader serves multis FIFO on ``leader_units`` cores at ``leader_s(N)``
    each, plus ``wait_s`` of quorum and fsync. The simulated multis are
    capped at ``max_multis``: past it fewer slots are simulated, each
    standing for several whose bursts it merges into one (their work summed,
    their phases made one), which overstates the bunching: pessimistic."""
    if slots < 1 or groups_per_slot < 1 or interval_s <= 0:
        raise ValueError("need slots, groups per slot and an interval")
    rng = random.Random(seed)
    simulated = max(1, min(slots, max_multis // (groups_per_slot * intervals)))
    scale = slots / simulated  # each simulated slot stands for this many: its service shrinks to match
    units = max(1, int(leader_units))
    service = leader_s(offsets_per_group) * units / leader_units / scale
    arrivals = sorted(rng.uniform(0, interval_s) + k * interval_s
                      for _ in range(simulated) for k in range(intervals))
    free = [0.0] * units
    latencies = []
    busy = 0.0
    for at in arrivals:
        for _ in range(groups_per_slot):
            unit_free = heapq.heappop(free)
            done = max(at, unit_free) + service
            heapq.heappush(free, done)
            busy += service
            latencies.append(done + wait_s - at)
    latencies.sort()
    return BurstResult(
        offered_load=busy / (units * intervals * interval_s),
        p50_s=latencies[len(latencies) // 2],
        p99_s=latencies[int(0.99 * (len(latencies) - 1))],
        max_s=latencies[-1],
        keeps_up=latencies[-1] < interval_s,
    )


# -- the model ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Scenario:
    """A deployment to size. Offsets are per group and partition (a group's
    offset node for each partition it consumes): ``partitions`` counts those."""

    members: int = 1_000_000
    groups: int = 100_000
    partitions: int = 10_000_000
    # How often each partition's committed offset is written to ZooKeeper:
    # the later of the members' reports (with their ping answers, every
    # session timeout / 3) and the coordinator's flush (--offset-flush-interval-ms).
    commit_interval_s: float = 5.0
    session_timeout_s: float = 10.0
    # Of a coordinator server's core, what its members may take (the rest:
    # rounds under churn, takeovers, slack against a loop falling behind).
    server_cpu_budget: float = 0.5
    # Connections a server may hold: here the hard open-file limit (20,000);
    # raised, the CPU budget binds first.
    server_connections: int = 20_000
    # Member changes (a join or a leave, each a round of its group) per
    # member per second: a restart of every member once a day.
    changes_per_member_s: float = 2 / 86_400
    # The leader's cores that its write path can use: ZooKeeper's pipeline
    # (prep, sync, commit, apply) runs each stage on one thread.
    leader_cores: float = 1.0
    # The share of the leader a steady load may take, leaving the rest for
    # bursts, elections' reloads and snapshots.
    zk_headroom: float = 0.5
    # A takeover's time beyond the dead server's ZooKeeper session: the bound
    # the scale steps held (session + 2 s).
    takeover_extra_s: float = 2.0
    # Members a successor brings back per second after its election (None:
    # the measured takeover's; bench/RESULTS.md's scale steps measured more
    # with the members in processes of their own).
    recovery_rate: Optional[float] = None
    # The servers' ZooKeeper session (ZooKeeperConfig's default): a slot
    # proves its office every quarter of it.
    zk_session_s: float = 6.0


@dataclass(frozen=True)
class Limits:
    scenario: Scenario
    multis_per_s: float
    offsets_per_s: float
    leader_cores: float  # the ZooKeeper leader's CPU the offsets and the proofs of office need
    ensembles: int  # ensembles at the headroom
    offsets_per_s_per_ensemble: float  # what one ensemble absorbs at this group size
    member_cpu_s: float  # a member's cost to its coordinator per second
    members_per_server: int
    servers: int
    members_per_slot: int  # that a successor brings back within the takeover bound
    groups_per_slot_max: int  # that a successor loads within half of it
    slots: int
    clusters: int  # zkcoord clusters, each its own ensemble and at most MAX_SLOTS slots
    slots_per_ensemble: float
    election_reads: int  # reads one server's coming or going sets off, in one cluster
    election_read_cpu_s: float  # ZooKeeper CPU for them
    bursts: BurstResult  # the flushes of one ensemble's slots, simulated
    binding: str  # what limits first


def limits(costs: UnitCosts, s: Scenario, simulate: bool = True) -> Limits:
    """Every limit of scenario ``s`` from ``costs``; the formulas are docs/SCALE.md's."""
    offsets_per_group = max(1, round(s.partitions / s.groups))
    group_size = max(1, s.members / s.groups)
    multis = s.groups / s.commit_interval_s
    offsets = s.partitions / s.commit_interval_s
    # A member's cost to its coordinator: its pings, its share of its group's
    # flushes (the writer's side) and of its group's rounds.
    member_cpu = (3 / s.session_timeout_s * costs.ping_s
                  + costs.flush_writer(offsets_per_group) / (group_size * s.commit_interval_s)
                  + s.changes_per_member_s * costs.round_cpu(group_size))
    by_cpu = int(s.server_cpu_budget / member_cpu)
    members_per_server = min(by_cpu, s.server_connections)
    servers = math.ceil(s.members / members_per_server)
    per_slot = max(1, int((s.recovery_rate or costs.recovery_rate()) * s.takeover_extra_s))
    # A successor loads the slot's groups before anyone registers: half the
    # bound for loading, at most.
    groups_per_slot_max = max(1, int(s.takeover_extra_s / 2 / max(costs.load_per_group_s(), 1e-6)))
    slots = max(servers, math.ceil(s.members / per_slot), math.ceil(s.groups / groups_per_slot_max))
    # The leader's write path: every group's flush, and every slot's proof
    # of office (an empty fenced multi) each quarter of its server's session.
    proofs = slots / (s.zk_session_s * OFFICE_RENEWAL_SHARE)
    leader_needed = multis * costs.flush_leader(offsets_per_group) + proofs * costs.flush_leader(0)
    per_ensemble = s.leader_cores * s.zk_headroom
    ensembles = max(1, math.ceil(leader_needed / per_ensemble))
    absorbed = per_ensemble / costs.flush_leader(offsets_per_group) * offsets_per_group
    clusters = max(ensembles, math.ceil(slots / MAX_SLOTS))
    slots_per_ensemble = slots / clusters
    # Every server watches every slot's election node and every server's
    # registration: when one comes or goes, each reads them all again.
    servers_per_cluster = math.ceil(servers / clusters)
    election_reads = servers_per_cluster * (math.ceil(slots_per_ensemble) + servers_per_cluster)
    groups_per_slot = max(1, round(s.groups / slots))
    bursts = (flush_bursts(math.ceil(slots_per_ensemble), groups_per_slot, offsets_per_group, s.commit_interval_s,
                           costs.flush_leader, s.leader_cores, costs.flush_wait(offsets_per_group))
              if simulate else BurstResult(0, 0, 0, 0, True))
    if ensembles > 1:
        binding = f"ZooKeeper's offset writes: {ensembles} ensembles"
    elif clusters > 1:
        binding = f"the slot count ({MAX_SLOTS} per cluster): {clusters} clusters"
    elif members_per_server < by_cpu:
        binding = "a server's connections"
    else:
        binding = "coordinator CPU"
    return Limits(s, multis, offsets, leader_needed, ensembles, absorbed, member_cpu, members_per_server, servers,
                  per_slot, groups_per_slot_max, slots, clusters, slots_per_ensemble, election_reads,
                  election_reads * costs.read_s, bursts, binding)


def check(costs: UnitCosts) -> list[str]:
    """How the model misses the measured points it extrapolates from: a
    line per point beyond its tolerance (empty: it reproduces them all)."""
    misses = []

    def near(what: str, model: float, measured: float, tolerance: float) -> None:
        if measured > 0 and abs(model - measured) / measured > tolerance:
            misses.append(f"{what}: model {model:.6g}, measured {measured:.6g} (over {tolerance:.0%})")

    for row in costs.figures["offsets"]:
        n = row["offsets"]
        near(f"ZooKeeper CPU of a flush of {n}", costs.flush_zk(n), row["zk_cpu_us"] / 1e6, FIT_TOLERANCE)
        near(f"leader CPU of a flush of {n}", costs.flush_leader(n), row["leader_cpu_us"] / 1e6, FIT_TOLERANCE)
        near(f"writer CPU of a flush of {n}", costs.flush_writer(n), row["writer_cpu_us"] / 1e6, FIT_TOLERANCE)
        near(f"latency of a flush of {n}", costs.flush_latency(n), row["latency_median_ms"] / 1e3, FIT_TOLERANCE)
    for row in costs.figures["rounds"]:
        near(f"CPU of a round of {row['members']}", costs.round_cpu(row["members"]), row["cpu_ms"] / 1e3,
             FIT_TOLERANCE)
    for row in costs.figures["saturation"]:
        simulated, measured = simulated_saturation(costs, row), row["multis_per_s"]
        what = f"throughput of {row['writers']} writers over {row['sessions']} session(s), {row['offsets']} offsets"
        if simulated > measured * (1 + SIMULATION_OPTIMISM) or simulated * SIMULATION_PESSIMISM < measured:
            misses.append(f"{what}: simulated {simulated:.0f}/s, measured {measured:.0f}/s (allowed "
                          f"{1 / SIMULATION_PESSIMISM:.2f}x to {1 + SIMULATION_OPTIMISM:.2f}x)")
    return misses


def simulated_saturation(costs: UnitCosts, row: dict) -> float:
    """The bench's saturation run, simulated: the writer on one core, the
    ensemble on the CPU it got in that run (the machine's two cores were
    shared with everything else on it, so that, not ZooKeeper, bounded it)."""
    n = row["offsets"]
    return closed_loop(row["writers"], costs.flush_writer(n), costs.flush_zk(n), row["zk_cores"],
                       costs.flush_wait(n))


# -- the report --------------------------------------------------------------------------------


def report(costs: UnitCosts, scenarios: Iterable[Scenario]) -> list[str]:
    lines = [
        f"inputs: flush of N offsets, ZooKeeper CPU {us(costs.flush_zk.intercept)} + {us(costs.flush_zk.slope)}*N "
        f"(leader {us(costs.flush_leader.intercept)} + {us(costs.flush_leader.slope)}*N, writer "
        f"{us(costs.flush_writer.intercept)} + {us(costs.flush_writer.slope)}*N); ping {us(costs.ping_s)}; round "
        f"{costs.round_cpu.intercept * 1e3:.1f} + {costs.round_cpu.slope * 1e3:.3f}*members ms; takeover: "
        f"{costs.recovery_rate():.0f} members/s brought back after the election",
    ]
    for s in scenarios:
        lim = limits(costs, s)
        b = lim.bursts
        held = lim.offsets_per_s_per_ensemble * s.commit_interval_s
        lines.append(
            f"{s.members:,} members, {s.groups:,} groups, {s.partitions:,} offsets, commit every "
            f"{s.commit_interval_s:g} s: {lim.offsets_per_s:,.0f} offsets/s in {lim.multis_per_s:,.0f} multis/s; "
            f"leader CPU {lim.leader_cores:.2f} cores -> {lim.ensembles} ensemble(s) (one absorbs "
            f"{lim.offsets_per_s_per_ensemble:,.0f} offsets/s: {held:,.0f} offsets at this interval); "
            f"{lim.members_per_server:,} members per server -> {lim.servers} servers; {lim.members_per_slot:,} "
            f"members and {lim.groups_per_slot_max:,} groups per slot at most -> {lim.slots} slots in "
            f"{lim.clusters} cluster(s), {lim.slots_per_ensemble:.0f} per ensemble; a server's coming or going: "
            f"{lim.election_reads:,} reads, {lim.election_read_cpu_s:.1f} s of ZooKeeper CPU; flush bursts: leader "
            f"load {b.offered_load:.0%}, p99 {b.p99_s * 1e3:.0f} ms, "
            f"{'keeps up' if b.keeps_up else 'falls behind'}; binding: {lim.binding}")
    return lines


def us(seconds: float) -> str:
    return f"{seconds * 1e6:.1f} us"


def scenarios_at(intervals: Iterable[float], base: Optional[Scenario] = None) -> list[Scenario]:
    base = base or Scenario()
    return [replace(base, commit_interval_s=i) for i in intervals]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--costs", type=Path, default=COSTS_PATH, help="bench_costs.py's --json output")
    parser.add_argument("--members", type=int, default=Scenario.members)
    parser.add_argument("--groups", type=int, default=Scenario.groups)
    parser.add_argument("--partitions", type=int, default=Scenario.partitions)
    parser.add_argument("--intervals", default="1,5,60", help="commit intervals in seconds")
    parser.add_argument("--recovery-rate", type=float, default=None,
                        help="members a successor brings back per second (default: the measured takeover's)")
    args = parser.parse_args()
    costs = UnitCosts.load(args.costs)
    misses = check(costs)
    for line in misses:
        print(f"model check: {line}")
    print(f"model check: {'every measured point reproduced' if not misses else f'{len(misses)} point(s) missed'} "
          f"(fits within {FIT_TOLERANCE:.0%}; the simulated saturation {1 / SIMULATION_PESSIMISM:.2f}x to "
          f"{1 + SIMULATION_OPTIMISM:.2f}x the measured)")
    base = Scenario(members=args.members, groups=args.groups, partitions=args.partitions,
                    recovery_rate=args.recovery_rate)
    for line in report(costs, scenarios_at([float(x) for x in args.intervals.split(",")], base)):
        print(line)
    return 0 if not misses else 1


if __name__ == "__main__":
    sys.exit(main())
