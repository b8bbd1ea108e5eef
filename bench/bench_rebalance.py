"""Rebalance benchmark: eager (stop-all/start-all) against incremental handoff.

A group of N members (default 100) settles on a topic of P partitions
(default 1000); then one more member joins, and we measure what the join
cost: the time from the join to the last Start, how many partitions stopped
fetching at all, and for how long each of them was paused (from its Stop at
the old owner to its Start at the new one). The newcomer then leaves, the
group settles back to N, and the join is repeated.

Both handoff protocols are measured in one run: first a cluster whose servers
run `--rebalance-protocol eager`, then a fresh one with `incremental`, each
with the same variants of assignment strategy: every member preferring
sticky then range, and every member offering range only.

Each cluster is a 3-node ZooKeeper ensemble and three `zkcoord server`
processes on 127.0.0.1, in a temporary directory. The members are real
GroupMembership clients, all in this process as gevent greenlets; their
listeners record every Stop and Start with its time. The coordinator's own
view (its time and its paused count) is read from its log. Every wait is
bounded, and everything started is stopped on exit, on error too.

    python bench/bench_rebalance.py [--members 100] [--partitions 1000] [--repeats 3]
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
from typing import Optional  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (  # noqa: E402
    MEMBER_WARNINGS, STABLE_LINE, Harness, TimedMember, Recorder, close_all, complete, quiet_logs,
    raise_fd_limit, settle,
)
from zkcoord.testing import exit_on_signal, wait_until  # noqa: E402

SESSION_TIMEOUT_MS = 10_000  # the members' session
PROTOCOLS = ("eager", "incremental")
VARIANTS = {"sticky,range": ("sticky", "range"), "range": ("range",)}
STARTED_LINE = re.compile(r"\[group (\S+) gen \d+\] rebalancing to gen (\d+) \((\S+), (\S+)\): (.*); "
                          r"(\d+) partition\(s\) paused")


@dataclass(frozen=True)
class Event:
    at: float
    member: str
    kind: str  # "stop" or "start"
    partitions: frozenset
    generation: int


class Timeline(Recorder):
    """A Recorder that also appends every Stop and Start to a shared list."""

    def __init__(self, events: list[Event]):
        super().__init__()
        self.events_seen = events

    def on_start(self, partitions):
        super().on_start(partitions)
        self._note("start", partitions)

    def on_stop(self, partitions):
        final = super().on_stop(partitions)
        self._note("stop", partitions)
        return final

    def _note(self, kind: str, partitions) -> None:
        self.events_seen.append(Event(time.perf_counter(), self.membership.consumer_id, kind,
                                      frozenset(partitions), self.membership.generation))


@dataclass(frozen=True)
class JoinResult:
    to_last_start: float  # seconds from the join to the last Start
    paused: int  # partitions that stopped fetching at all
    pauses: tuple[float, ...]  # seconds each paused partition was stopped
    stopped_members: int
    started_members: int
    generations: int  # rebalances the join caused (normally 1)


def analyse(events: list[Event], trigger: float) -> JoinResult:
    """What a join cost, from the members' Stops and Starts after ``trigger``.

    A partition is paused from its first Stop after the trigger until the
    next Start, at any member, that includes it; a Start of a partition that
    was never stopped (an incremental Start repeats what a member keeps) is
    no resume.
    """
    after = sorted((e for e in events if e.at >= trigger), key=lambda e: e.at)
    stopped_at: dict = {}
    pauses: dict = {}
    for event in after:
        if event.kind == "stop":
            for tp in event.partitions:
                if tp not in stopped_at and tp not in pauses:
                    stopped_at[tp] = event.at
        else:
            for tp in event.partitions:
                if tp in stopped_at and tp not in pauses:
                    pauses[tp] = event.at - stopped_at[tp]
    never = set(stopped_at) - set(pauses)
    if never:
        raise SystemExit(f"{len(never)} partition(s) were stopped and never started again, e.g. {sorted(never)[:3]}")
    starts = [e for e in after if e.kind == "start"]
    if not starts:
        raise SystemExit("no member got a Start after the join")
    return JoinResult(
        to_last_start=max(e.at for e in starts) - trigger,
        paused=len(pauses),
        pauses=tuple(pauses.values()),
        stopped_members=len({e.member for e in after if e.kind == "stop"}),
        started_members=len({e.member for e in starts}),
        generations=len({e.generation for e in after}),
    )


@dataclass
class Row:
    protocol: str
    variant: str
    strategy: str
    joins: list[JoinResult]
    coordinator_ms: list[float]
    coordinator_paused: list[int]


def fmt_ms(seconds: float) -> str:
    return f"{seconds * 1000:.0f}"


class RebalanceBench(Harness):
    def __init__(self, work: Path, protocol: str, args):
        super().__init__(work, ("--rebalance-protocol", protocol))
        self.protocol = protocol
        self.args = args

    def measure(self, variant: str, topic: str) -> Row:
        args = self.args
        strategies = VARIANTS[variant]
        group = f"join-{variant.replace(',', '-')}"
        events: list[Event] = []
        members = [TimedMember(self.cluster.bootstrap, group, topic, SESSION_TIMEOUT_MS,
                          recorder=Timeline(events), assignment_strategies=strategies) for _ in range(args.members)]
        wait_until(lambda: complete(members, args.partitions), args.timeout,
                   message=f"a group of {args.members} to form", interval=0.05)
        row = Row(self.protocol, variant, "?", [], [], [])
        try:
            for repeat in range(args.repeats):
                settle(members, timeout=args.timeout)
                server_id, _ = self.coordinator()
                events.clear()
                trigger = time.perf_counter()
                newcomer = TimedMember(self.cluster.bootstrap, group, topic, SESSION_TIMEOUT_MS,
                                  recorder=Timeline(events), assignment_strategies=strategies)
                grown = members + [newcomer]
                wait_until(lambda: complete(grown, args.partitions), args.timeout,
                           message=f"the group to take member {args.members + 1}", interval=0.01)
                settle(grown, timeout=args.timeout)
                result = analyse(events, trigger)
                generation = newcomer.recorder.start_generation
                log_text = self.coordinator_log(server_id)
                stable = [x for x in STABLE_LINE.findall(log_text) if x[0] == group and int(x[1]) == generation]
                begun = [x for x in STARTED_LINE.findall(log_text) if x[0] == group and int(x[1]) == generation]
                row.joins.append(result)
                row.coordinator_ms.append(float(stable[-1][5]) if stable else float("nan"))
                row.coordinator_paused.append(int(stable[-1][4]) if stable else -1)
                if begun:
                    row.strategy = begun[-1][2]
                    if begun[-1][3] != self.protocol:
                        raise SystemExit(f"the coordinator ran {begun[-1][3]!r}, not {self.protocol!r}")
                pauses = sorted(result.pauses)
                self.say(f"  {self.protocol:<12} {variant:<13} join {repeat + 1}: gen {generation}, "
                         f"last Start {fmt_ms(result.to_last_start)} ms, {result.paused} paused "
                         f"(coordinator: {row.coordinator_paused[-1]}, {row.coordinator_ms[-1]:.0f} ms), "
                         f"pause median {fmt_ms(statistics.median(pauses)) if pauses else '-'} / "
                         f"max {fmt_ms(pauses[-1]) if pauses else '-'} ms, "
                         f"{result.stopped_members} stopped / {result.started_members} started, "
                         f"{result.generations} generation(s)")
                # Back to N members before the next join: the leave is a
                # rebalance of its own, not measured.
                close_all([newcomer])
                wait_until(lambda: complete(members, args.partitions), args.timeout,
                           message=f"the group to settle back to {args.members}", interval=0.05)
        finally:
            close_all(members)
        return row


def summary(rows: list[Row], partitions: int) -> list[str]:
    head = (f"{'protocol':<12} {'strategies':<13} {'used':<7} {'joins':>5} {'to last Start ms':>17} "
            f"{'coord. ms':>10} {'paused':>7} {'fraction':>9} {'coord. paused':>14} "
            f"{'pause ms median':>16} {'pause ms max':>13}")
    lines = [head, "-" * len(head)]
    for row in rows:
        to_start = [j.to_last_start for j in row.joins]
        paused = [j.paused for j in row.joins]
        pauses = [p for j in row.joins for p in j.pauses]
        median_paused = statistics.median(paused)
        lines.append(
            f"{row.protocol:<12} {row.variant:<13} {row.strategy:<7} {len(row.joins):>5} "
            f"{fmt_ms(statistics.median(to_start)):>8} / {fmt_ms(max(to_start)):>6} "
            f"{statistics.median(row.coordinator_ms):>10.0f} {median_paused:>7.0f} "
            f"{median_paused / partitions:>8.1%} {statistics.median(row.coordinator_paused):>14.0f} "
            f"{fmt_ms(statistics.median(pauses)) if pauses else '-':>16} "
            f"{fmt_ms(max(pauses)) if pauses else '-':>13}")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--members", type=int, default=100, help="members before the join (default 100)")
    parser.add_argument("--partitions", type=int, default=1000, help="partitions of the topic (default 1000)")
    parser.add_argument("--repeats", type=int, default=3, help="joins per protocol and variant (default 3)")
    parser.add_argument("--variants", default="sticky,range;range",
                        help="';'-separated strategy lists to measure (default 'sticky,range;range')")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds any one step may take")
    args = parser.parse_args()
    variants = [v for v in args.variants.split(";") if v]
    if any(v not in VARIANTS for v in variants):
        parser.error(f"--variants: each must be one of {sorted(VARIANTS)}")
    if not 1 <= args.members < args.partitions:
        parser.error("need 1 <= --members < --partitions, so that every member holds a partition")
    if not 1 <= args.repeats <= 20:
        parser.error("--repeats must be between 1 and 20")
    fds = raise_fd_limit()
    quiet_logs()
    signal.signal(signal.SIGTERM, exit_on_signal)

    work = Path(tempfile.mkdtemp(prefix="bench-rebalance-"))
    began = time.perf_counter()
    rows: list[Row] = []
    bench: Optional[RebalanceBench] = None
    try:
        print(f"zkcoord rebalance benchmark: {args.members} members + 1 joining, {args.partitions} partitions, "
              f"{args.repeats} join(s) per protocol and strategy list; {os.cpu_count()} cpus; "
              f"members in this process as gevent greenlets; fd limit {fds}", flush=True)
        for protocol in PROTOCOLS:
            bench = RebalanceBench(work / protocol, protocol, args)
            bench.start()
            topic = bench.topic("join", args.partitions)
            for variant in variants:
                rows.append(bench.measure(variant, topic))
            bench.stop()
            bench = None
        print(f"\n{args.members} members, one joins; topic of {args.partitions} partitions; "
              f"to last Start: median / max over joins; paused, coord.: median over joins; "
              f"pause: median and max over every paused partition of every join", flush=True)
        for line in summary(rows, args.partitions):
            print(line, flush=True)
        if MEMBER_WARNINGS.count:
            print(f"(members logged {MEMBER_WARNINGS.count} warning(s))")
        print(f"\ntotal {time.perf_counter() - began:.0f} s", flush=True)
        return 0
    except BaseException:
        if bench is not None:
            bench.dump_logs()
        raise
    finally:
        if bench is not None:
            bench.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
