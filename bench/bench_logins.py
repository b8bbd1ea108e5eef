"""Password logins at a coordinator: many registrations with one user and
password (a failover's), then a flood of wrong passwords, each while a
prober measures the event loop's answer to ClusterMetadata every 10 ms.

Starts its own one-node ZooKeeper and one server without a broker on
127.0.0.1; the user's credential has --iterations of SCRAM-SHA-512 (the
costliest check). ``--limits off`` lifts the failure limit and delay so that
every wrong password costs a key derivation (the worst case for the CPU);
``--limits on`` keeps the defaults (10 failures in a row, then one a second,
each answered 100 ms late).

    python bench/bench_logins.py --registrations 2000 --flood-seconds 10 --limits off
"""

from __future__ import annotations

import argparse
import itertools
import sys
import threading
import time
from pathlib import Path
from typing import Optional

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from zkcoord import wire  # noqa: E402
from zkcoord.channel import Channel  # noqa: E402
from zkcoord.security import scram  # noqa: E402
from zkcoord.zk import security_store as store  # noqa: E402
from zkcoord.zk import security_store as store
from zkcoord.testing import cluster_in_chroot, scratch_ensemble  # noqa: E402

_ids = itertools.count()


def register(port: int, password: Optional[str] = None) -> int:
    """One RegisterConsumer (version 3) as alice on a connection of its own
    (a new wrong password if none is given); the answer's error code."""
    channel = Channel.connect("127.0.0.1", port, 30)
    try:
        answer = channel.request(wire.RegisterConsumerRequest(group_id=f"g-{next(_ids) % 100}",
                                                              consumer_id=f"c-{next(_ids)}", topics=("t",),
                                                              user="alice",
                                                              password=password or f"wrong-{next(_ids)}"), 60)
        return answer.error_code
    finally:
        channel.close()


class Prober:
    """ClusterMetadata every 10 ms on one connection: the event loop's delay."""

    def __init__(self, port: int):
        self.channel = Channel.connect("127.0.0.1", port, 30)
        self.round_trips: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self):
        while not self._stop.is_set():
            began = time.perf_counter()
            self.channel.request(wire.ClusterMetadataRequest(group_id="g"), 60)
            self.round_trips.append(time.perf_counter() - began)
            self._stop.wait(0.01)

    def stop(self) -> str:
        self._stop.set()
        self._thread.join(60)
        self.channel.close()
        trips = sorted(self.round_trips)
        return (f"ping worst {trips[-1] * 1000:.0f} ms, p99 {trips[int(len(trips) * 0.99)] * 1000:.0f} ms, "
                f"median {trips[len(trips) // 2] * 1000:.1f} ms ({len(trips)} pings)")


def run(port: int, clients: int, work, until) -> dict:
    """``work(port)`` from ``clients`` threads until ``until()``; the answers' error codes, counted."""
    counts: dict = {}
    lock = threading.Lock()

    def client():
        while not until():
            code = work(port)
            with lock:
                counts[code] = counts.get(code, 0) + 1

    threads = [threading.Thread(target=client, daemon=True) for _ in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return counts


def describe(counts: dict) -> str:
    return ", ".join(f"{wire.ErrorCode(code).name} {n:,}" for code, n in sorted(counts.items()))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--registrations", type=int, default=2000)
    parser.add_argument("--flood-seconds", type=float, default=10.0)
    parser.add_argument("--clients", type=int, default=32, help="concurrent connections of each phase")
    parser.add_argument("--iterations", type=int, default=scram.DEFAULT_ITERATIONS)
    parser.add_argument("--limits", choices=("on", "off"), default="off")
    args = parser.parse_args()
    if not 1 <= args.registrations <= 1_000_000 or not 1 <= args.clients <= 1000:
        parser.error("--registrations in [1, 1000000], --clients in [1, 1000]")
    with scratch_ensemble("bench-logins-") as (work, ensemble):
        with cluster_in_chroot(ensemble.connect_string, work / "cluster", "logins") as cluster:
            store.set_user(cluster.zk, "alice", "alice-pw", iterations=args.iterations)
            extra = ["--no-broker", "--metrics-port", "0", "--max-connections-per-address", "100000"]
            if args.limits == "off":
                extra += ["--login-failures-burst", "100000000", "--failed-authentication-delay-ms", "0"]
            server = cluster.add_server(1, extra=extra)
            cluster.wait_for_coordinator(30)
            before = server.scrape()  # the first phase counts the first registration's derivation
            while register(server.port, "alice-pw") != wire.ErrorCode.NONE:  # the coordinator in office
                time.sleep(0.1)
            print(f"SCRAM-SHA-512, {args.iterations} iterations; {args.clients} clients; limits {args.limits}")

            for name, password, until_of in (
                    (f"{args.registrations:,} registrations, one user and password", "alice-pw",
                     lambda: (lambda done=iter(range(args.registrations)): lambda: next(done, None) is None)()),
                    (f"{args.flood_seconds:g} s of wrong passwords, each new", None,
                     lambda: (lambda end=time.monotonic() + args.flood_seconds: lambda: time.monotonic() >= end)())):
                cpu0, t0 = server.cpu_seconds(), time.perf_counter()
                prober = Prober(server.port)
                counts = run(server.port, args.clients, lambda port, pw=password: register(port, pw), until_of())
                pings = prober.stop()
                wall, cpu = time.perf_counter() - t0, server.cpu_seconds() - cpu0
                after = server.scrape()
                derived = (after.value("zkcoord_password_derivations_total")
                           - before.value("zkcoord_password_derivations_total"))
                before = after
                total = sum(counts.values())
                print(f"{name}: {total:,} answers in {wall:.2f} s ({total / wall:,.0f}/s: {describe(counts)}); "
                      f"{derived:,.0f} key derivations; server cpu {cpu:.2f} s "
                      f"({cpu * 1000 / total:.2f} ms per login); {pings}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
