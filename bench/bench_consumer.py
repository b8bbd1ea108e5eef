"""What the thin consumer costs: zkcoord.Consumer.poll() against the raw fetcher.

Starts its own one-node ZooKeeper and one `zkcoord server` (coordinator and
embedded broker) on 127.0.0.1, produces --messages 100-byte messages once
over --partitions partitions, then reads all of them back, for each batch
size, two ways:

- raw: KafkaFetcher.fetch(batch) in a loop, every partition assigned at offset 0;
- Consumer: Consumer.poll() with max_poll_records=batch in a fresh group, so
  the coordinator registers the member and assigns it every partition.

For each it prints the time to the first record (for the Consumer:
registration and rebalance until on_assign, then the fetcher's start), the
rate from the first record to the last, and the Consumer's rate as a
fraction of the raw one, per run and as the median over --rounds rounds
(the paths alternate within a round, so load from elsewhere on the machine
falls on both). --profile runs the first round's Consumer loops under
cProfile and prints where the application thread spends its time.

Bounded in count (--messages) and in time (--phase-timeout per phase);
everything started is stopped on exit, on error too.

    python bench/bench_consumer.py [--messages 1000000] [--batches 500,5000]
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import shutil
import signal
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_broker import VALUE_SIZE, produce_confluent  # noqa: E402
from zkcoord.consumer.consumer import Consumer  # noqa: E402
from zkcoord.fetch.kafka_fetcher import KafkaFetcher  # noqa: E402
from zkcoord.testing import LocalCluster, exit_on_signal, start_ensemble  # noqa: E402
from zkcoord.zk.ensemble import LocalEnsemble  # noqa: E402

TOPIC = "bench"
WAIT_S = 0.5  # how long one fetch() or poll() may wait for data
RAW = "raw KafkaFetcher.fetch"
CONSUMER = "zkcoord Consumer.poll"


@dataclass
class Run:
    """One pass over every message: when it began, saw its first and its last record."""

    path: str
    batch: int
    expected: int
    got: int = 0
    start: float = 0.0
    first: Optional[float] = None
    last: Optional[float] = None
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


def read_all(run: Run, next_batch: Callable[[], list], deadline: float) -> Run:
    """Call ``next_batch`` until every expected record has come or the deadline passes."""
    while run.got < run.expected and time.monotonic() < deadline:
        batch = next_batch()
        if batch:
            now = time.perf_counter()
            if run.first is None:
                run.first, run.first_batch = now, len(batch)
            run.last = now
            run.got += len(batch)
    return run


def raw_run(brokers: str, counts: dict[int, int], batch: int, deadline: float) -> Run:
    run = Run(RAW, batch, sum(counts.values()))
    run.start = time.perf_counter()
    fetcher = KafkaFetcher(brokers, client_id=f"bench-raw-{batch}")
    try:
        fetcher.assign({(TOPIC, p): 0 for p in counts})
        return read_all(run, lambda: fetcher.fetch(batch, WAIT_S), deadline)
    finally:
        fetcher.close()


def consumer_run(bootstrap: list[str], counts: dict[int, int], batch: int, group: str, deadline: float,
                 profile: Optional[cProfile.Profile]) -> Run:
    run = Run(CONSUMER, batch, sum(counts.values()))

    def on_assign(partitions) -> None:
        if run.assigned is None:
            run.assigned = time.perf_counter()

    run.start = time.perf_counter()
    consumer = Consumer(bootstrap, group=group, topics=[TOPIC], max_poll_records=batch,
                        auto_offset_reset="smallest", on_assign=on_assign)
    try:
        if profile is not None:
            profile.enable()
        read_all(run, lambda: consumer.poll(int(WAIT_S * 1000)), deadline)
        if profile is not None:
            profile.disable()
        # Every partition read to its end, each offset once: the positions
        # the consumer reports are exactly the produced counts.
        positions = consumer.offsets() or {}
        wanted = {(TOPIC, p): n for p, n in counts.items()}
        if run.complete and positions != wanted:
            raise SystemExit(f"consumer positions {positions} != produced {wanted}")
        return run
    finally:
        consumer.close()


def print_table(runs: list[Run]) -> None:
    """One line per run, then the median of each path and batch size over the rounds."""
    print(f"\n{'path':<24} {'batch':>6} {'messages':>10} {'to assign s':>11} {'to 1st rec s':>12} "
          f"{'1st->last s':>11} {'msg/s':>11} {'MB/s':>7}")
    for r in runs:
        assign = f"{r.assigned - r.start:11.3f}" if r.assigned is not None else f"{'-':>11}"
        to_first = r.first - r.start if r.first is not None else float("nan")
        span = r.last - r.first if r.first is not None else float("nan")
        flag = "" if r.complete else f"  INCOMPLETE ({r.got:,} of {r.expected:,})"
        print(f"{r.path:<24} {r.batch:>6} {r.got:>10,} {assign} {to_first:12.3f} {span:11.3f} "
              f"{r.rate:>11,.0f} {r.rate * VALUE_SIZE / 1e6:7.1f}{flag}")
    groups: dict[tuple[int, str], list[Run]] = {}
    for r in runs:
        groups.setdefault((r.batch, r.path), []).append(r)
    rounds = max(len(g) for g in groups.values())
    print(f"\nmedian of {rounds} round(s):")
    print(f"{'path':<24} {'batch':>6} {'to assign s':>11} {'to 1st rec s':>12} {'msg/s':>11} {'vs raw':>7}")
    raw = {batch: statistics.median(r.rate for r in g) for (batch, path), g in groups.items()
           if path == RAW}
    for (batch, path), g in groups.items():
        rate = statistics.median(r.rate for r in g)
        assigned = [r.assigned - r.start for r in g if r.assigned is not None]
        assign = f"{statistics.median(assigned):11.3f}" if assigned else f"{'-':>11}"
        to_first = statistics.median(r.first - r.start for r in g if r.first is not None)
        ratio = rate / raw[batch] if raw.get(batch) else float("nan")
        print(f"{path:<24} {batch:>6} {assign} {to_first:12.3f} {rate:>11,.0f} {ratio:7.2f}")


def print_profile(profile: cProfile.Profile, batch: int, lines: int = 14) -> None:
    out = io.StringIO()
    pstats.Stats(profile, stream=out).sort_stats("tottime").print_stats(lines)
    text = out.getvalue()
    start = text.find("   ncalls")
    print(f"\ncProfile of the Consumer.poll loop, max_poll_records={batch} (by own time):")
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
    parser.add_argument("--profile", action="store_true", help="cProfile the Consumer loops")
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

    signal.signal(signal.SIGTERM, exit_on_signal)
    work = Path(tempfile.mkdtemp(prefix="bench-consumer-"))
    ensemble: Optional[LocalEnsemble] = None
    cluster: Optional[LocalCluster] = None
    try:
        # The 500 ms tick the published figures ran with; no fault drill here needs a faster one.
        ensemble = start_ensemble(work / "zk", nodes=1, tick_ms=500)
        cluster = LocalCluster(ensemble.connect_string, work / "cluster")
        cluster.start_servers(1, timeout=60)  # waits until its broker is registered too
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
                runs.append(raw_run(cluster.broker_list, counts, batch, time.monotonic() + args.phase_timeout))
                profile = cProfile.Profile() if args.profile and round_ == 0 else None
                runs.append(consumer_run(cluster.bootstrap, counts, batch, f"bench-{round_}-{batch}",
                                         time.monotonic() + args.phase_timeout, profile))
                if profile is not None:
                    print_profile(profile, batch)
        print_table(runs)
        print(f"load average {os.getloadavg()[0]:.2f} at end")
        return 0 if all(r.complete for r in runs) else 1
    finally:
        if cluster is not None:
            cluster.close()
        if ensemble is not None:
            ensemble.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
