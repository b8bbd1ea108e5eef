"""What the thin consumer costs: one zkcoord Consumer's records/s through its
public APIs, against its fetcher alone, and what the broker spends serving it.

Starts its own one-node ZooKeeper, one standalone `zkcoord broker` and one
`zkcoord server --no-broker` (the coordinator) on 127.0.0.1, produces
--messages 100-byte messages once over --partitions partitions, then reads all
of them back, for each batch size, three ways:

- fetcher: ColumnarFetcher.fetch_chunks(batch) in a loop, every partition
  assigned at offset 0 (decoded columns, no Record objects);
- poll: Consumer.poll() with max_poll_records=batch in a fresh group (the
  coordinator registers the member and assigns it every partition), a
  Record tuple per record;
- poll_batch: Consumer.poll_batch(), the same as one Arrow record batch per call.

For each it prints the time to the first record (for a Consumer:
registration and rebalance until on_assign, then the first fetch), the
rate from the first record to the last, the broker's CPU over that window
(utime+stime from /proc, in % of one core and per million records/s), and
the median over --rounds rounds (the paths alternate within a round, so load
from elsewhere on the machine falls on all). --profile runs the first round's
Consumer loops under cProfile.

The last line is `consumer X records/s; broker CPU Y% of a core`: the
median poll_batch rate at the largest batch size, and the broker's CPU while
serving it. Bounded in count (--messages) and in time (--phase-timeout per
phase); everything started is stopped on exit, on error too.

    python bench/bench_consumer.py [--messages 1000000] [--batches 500,5000]
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_broker import VALUE_SIZE, produce_confluent  # noqa: E402
from zkcoord.consumer.consumer import Consumer  # noqa: E402
from zkcoord.fetch.columnar import ColumnarFetcher  # noqa: E402
from zkcoord.testing import LocalCluster, cpu_seconds, scratch_ensemble  # noqa: E402

TOPIC = "bench"
WAIT_S = 0.5  # how long one fetch or poll may wait for data
FETCHER = "fetcher"
POLL = "poll"
POLL_BATCH = "poll_batch"


@dataclass
class Run:
    """One pass over every message: when it began, saw its first and its last
    record, and the broker's CPU seconds at the first and the last."""

    path: str
    batch: int
    expected: int
    broker_pid: int
    got: int = 0
    start: float = 0.0
    first: Optional[float] = None
    last: Optional[float] = None
    cpu_first: float = 0.0
    cpu_last: float = 0.0
    assigned: Optional[float] = None  # Consumer only: on_assign ran
    first_batch: int = 0  # records in the first non-empty batch

    @property
    def complete(self) -> bool:
        return self.got == self.expected

    @property
    def rate(self) -> float:
        """Messages/s from the first record to the last (the first batch's
        records count as arriving at once, so they are left out)."""
        if self.first is None or self.last is None or self.last <= self.first:
            return 0.0
        return (self.got - self.first_batch) / (self.last - self.first)

    @property
    def broker_cpu(self) -> float:
        """The broker's CPU from the first record to the last, in % of one core."""
        if self.first is None or self.last is None or self.last <= self.first:
            return float("nan")
        return (self.cpu_last - self.cpu_first) / (self.last - self.first) * 100


def read_all(run: Run, next_batch: Callable[[], int], deadline: float) -> Run:
    """Call ``next_batch`` (it returns how many records it got) until every
    expected record has come or the deadline passes."""
    while run.got < run.expected and time.monotonic() < deadline:
        count = next_batch()
        if count:
            now = time.perf_counter()
            if run.first is None:
                run.first, run.first_batch = now, count
                run.cpu_first = cpu_seconds(run.broker_pid)
            run.last = now
            run.got += count
    run.cpu_last = cpu_seconds(run.broker_pid)
    return run


def fetcher_run(brokers: str, counts: dict[int, int], batch: int, broker_pid: int, deadline: float) -> Run:
    run = Run(FETCHER, batch, sum(counts.values()), broker_pid)
    run.start = time.perf_counter()
    fetcher = ColumnarFetcher(brokers, client_id=f"bench-fetcher-{batch}")
    try:
        fetcher.assign({(TOPIC, p): 0 for p in counts})
        return read_all(run, lambda: sum(map(len, fetcher.fetch_chunks(batch, WAIT_S))), deadline)
    finally:
        fetcher.close()


def consumer_run(path: str, bootstrap: list[str], counts: dict[int, int], batch: int, group: str,
                 broker_pid: int, deadline: float, profile: Optional[cProfile.Profile]) -> Run:
    run = Run(path, batch, sum(counts.values()), broker_pid)

    def on_assign(partitions) -> None:
        if run.assigned is None:
            run.assigned = time.perf_counter()

    run.start = time.perf_counter()
    consumer = Consumer(bootstrap, group=group, topics=[TOPIC], max_poll_records=batch,
                        auto_offset_reset="smallest", on_assign=on_assign)
    if path == POLL:
        def next_batch() -> int:
            return len(consumer.poll(int(WAIT_S * 1000)))
    else:
        def next_batch() -> int:
            return consumer.poll_batch(int(WAIT_S * 1000)).num_rows
    try:
        if profile is not None:
            profile.enable()
        read_all(run, next_batch, deadline)
        if profile is not None:
            profile.disable()
        # Every partition read to its end, each offset once: the positions
        # the consumer reports are exactly the produced counts, once a poll
        # says the application is done with the last batch.
        consumer.poll(0)
        positions = consumer.offsets() or {}
        wanted = {(TOPIC, p): n for p, n in counts.items()}
        if run.complete and positions != wanted:
            raise SystemExit(f"consumer positions {positions} != produced {wanted}")
        return run
    finally:
        consumer.close()


def print_table(runs: list[Run]) -> None:
    """One line per run, then the median of each path and batch size over the rounds."""
    print(f"\n{'path':<11} {'batch':>6} {'messages':>10} {'to assign s':>11} {'to 1st rec s':>12} "
          f"{'1st->last s':>11} {'msg/s':>11} {'MB/s':>7} {'broker %':>8}")
    for r in runs:
        assign = f"{r.assigned - r.start:11.3f}" if r.assigned is not None else f"{'-':>11}"
        to_first = r.first - r.start if r.first is not None else float("nan")
        span = r.last - r.first if r.first is not None else float("nan")
        flag = "" if r.complete else f"  INCOMPLETE ({r.got:,} of {r.expected:,})"
        print(f"{r.path:<11} {r.batch:>6} {r.got:>10,} {assign} {to_first:12.3f} {span:11.3f} "
              f"{r.rate:>11,.0f} {r.rate * VALUE_SIZE / 1e6:7.1f} {r.broker_cpu:8.1f}{flag}")
    groups: dict[tuple[int, str], list[Run]] = {}
    for r in runs:
        groups.setdefault((r.batch, r.path), []).append(r)
    rounds = max(len(g) for g in groups.values())
    print(f"\nmedian of {rounds} round(s):")
    print(f"{'path':<11} {'batch':>6} {'to assign s':>11} {'to 1st rec s':>12} {'msg/s':>11} "
          f"{'vs fetcher':>10} {'broker %':>8} {'% per M/s':>9}")
    fetcher = {batch: statistics.median(r.rate for r in g) for (batch, path), g in groups.items()
               if path == FETCHER}
    for (batch, path), g in groups.items():
        rate, cpu = median_rate_and_cpu(g)
        assigned = [r.assigned - r.start for r in g if r.assigned is not None]
        assign = f"{statistics.median(assigned):11.3f}" if assigned else f"{'-':>11}"
        to_first = statistics.median(r.first - r.start for r in g if r.first is not None)
        ratio = rate / fetcher[batch] if fetcher.get(batch) else float("nan")
        per_million = cpu / (rate / 1e6) if rate else float("nan")
        print(f"{path:<11} {batch:>6} {assign} {to_first:12.3f} {rate:>11,.0f} {ratio:10.2f} "
              f"{cpu:8.1f} {per_million:9.1f}")


def median_rate_and_cpu(runs: list[Run]) -> tuple[float, float]:
    return statistics.median(r.rate for r in runs), statistics.median(r.broker_cpu for r in runs)


def print_profile(profile: cProfile.Profile, what: str, batch: int, lines: int = 14) -> None:
    out = io.StringIO()
    pstats.Stats(profile, stream=out).sort_stats("tottime").print_stats(lines)
    text = out.getvalue()
    start = text.find("   ncalls")
    print(f"\ncProfile of the {what} loop, max_poll_records={batch} (by own time):")
    print(text[start:].rstrip() if start >= 0 else text.rstrip())


def spread(total: int, parts: int) -> dict[int, int]:
    return {p: total // parts + (1 if p < total % parts else 0) for p in range(parts)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--batches", default="500,5000",
                        help="comma-separated fetch sizes = max_poll_records (default 500,5000)")
    parser.add_argument("--rounds", type=int, default=3, help="passes over every path (median reported)")
    parser.add_argument("--phase-timeout", type=float, default=120.0)
    parser.add_argument("--profile", action="store_true", help="cProfile the Consumer loops of the first round")
    args = parser.parse_args()
    if not 1_000 <= args.messages <= 10_000_000:
        parser.error("--messages must be in [1000, 10000000]")
    if not 1 <= args.rounds <= 10:
        parser.error("--rounds must be in [1, 10]")
    if not 1 <= args.partitions <= 64:
        parser.error("--partitions must be in [1, 64]")
    try:
        batches = [int(b) for b in args.batches.split(",")]
    except ValueError:
        parser.error("--batches must be comma-separated integers")
    if not all(1 <= b <= 100_000 for b in batches):
        parser.error("each of --batches must be in [1, 100000]")

    with scratch_ensemble("bench-consumer-") as (work, ensemble):
        cluster = LocalCluster(ensemble.connect_string, work / "cluster")
        try:
            return measure(args, batches, cluster)
        finally:
            cluster.close()


def measure(args, batches: list[int], cluster: LocalCluster) -> int:
    """The runs on a started ``cluster``; the exit status."""
    # The broker in a process of its own, so that its CPU is the broker's alone.
    broker = cluster.add_broker(0)
    cluster.add_server(1, extra=["--no-broker"])
    cluster.wait_for_coordinator(timeout=60)
    cluster.create_topic(TOPIC, args.partitions)
    counts = spread(args.messages, args.partitions)
    print(f"{args.messages:,} messages of {VALUE_SIZE} bytes over {args.partitions} partitions; "
          f"{os.cpu_count()} cpus; load average {os.getloadavg()[0]:.2f} at start")

    t0 = time.perf_counter()
    deadline = time.monotonic() + args.phase_timeout
    for p, n in counts.items():
        sent = produce_confluent(cluster.broker_list, TOPIC, p, n, deadline)
        if sent != n:
            raise SystemExit(f"produced only {sent:,} of {n:,} to partition {p} in time")
    wall = time.perf_counter() - t0
    print(f"produced with confluent-kafka in {wall:.2f} s ({args.messages / wall:,.0f} msg/s)")

    runs: list[Run] = []
    for round_ in range(args.rounds):
        for batch in batches:
            runs.append(fetcher_run(cluster.broker_list, counts, batch, broker.pid,
                                    time.monotonic() + args.phase_timeout))
            for path in (POLL, POLL_BATCH):
                profile = cProfile.Profile() if args.profile and round_ == 0 else None
                runs.append(consumer_run(path, cluster.bootstrap, counts, batch,
                                         f"bench-{path}-{round_}-{batch}", broker.pid,
                                         time.monotonic() + args.phase_timeout, profile))
                if profile is not None:
                    print_profile(profile, f"Consumer.{path}", batch)
    print_table(runs)
    print(f"load average {os.getloadavg()[0]:.2f} at end")
    if not all(r.complete for r in runs):
        print("INCOMPLETE: some runs did not read every message in time")
        return 1
    rate, cpu = median_rate_and_cpu([r for r in runs if r.path == POLL_BATCH and r.batch == max(batches)])
    print(f"consumer {rate:,.0f} records/s; broker CPU {cpu:.1f}% of a core")
    return 0


if __name__ == "__main__":
    sys.exit(main())
