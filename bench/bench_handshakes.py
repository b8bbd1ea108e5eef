"""New connections to a coordinator, plaintext and TLS: each a ClusterMetadata
request on a connection of its own, one after the other, with the server's CPU
per connection (the TLS handshake's cost on its event loop).

Starts its own one-node ZooKeeper and two servers without brokers on
127.0.0.1 (one plaintext, one TLS with certificates made for the run),
bounded by --connections and --timeout.

    python bench/bench_handshakes.py --connections 1000
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from zkcoord import wire  # noqa: E402
from zkcoord.channel import Channel  # noqa: E402
from zkcoord.security import certs  # noqa: E402
from zkcoord.security.config import TlsConfig  # noqa: E402
from zkcoord.security.tls import client_context  # noqa: E402
from zkcoord.testing import cluster_in_chroot, scratch_ensemble  # noqa: E402


def connect_many(server, context, count: int, deadline: float) -> tuple[int, float, float]:
    """(connections made, wall seconds, server CPU seconds)."""
    cpu0, t0 = server.cpu_seconds(), time.perf_counter()
    made = 0
    while made < count and time.monotonic() < deadline:
        channel = Channel.connect("127.0.0.1", server.port, 10, tls=context)
        try:
            channel.request(wire.ClusterMetadataRequest(group_id="g"), 10)
        finally:
            channel.close()
        made += 1
    return made, time.perf_counter() - t0, server.cpu_seconds() - cpu0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--connections", type=int, default=1000)
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds each kind may take at most")
    args = parser.parse_args()
    if not 10 <= args.connections <= 100_000:
        parser.error("--connections must be in [10, 100000]")
    with scratch_ensemble("bench-handshakes-") as (work, ensemble):
        ca = certs.make_ca(work / "pki")
        server_files = certs.issue(ca, work / "pki", "server")
        with cluster_in_chroot(ensemble.connect_string, work / "cluster", "handshakes") as cluster:
            plain = cluster.add_server(1, extra=["--no-broker"])
            secure = cluster.add_server(2, extra=["--no-broker", "--tls-cert", str(server_files.cert),
                                                  "--tls-key", str(server_files.key), "--tls-ca", str(ca.cert)])
            context = client_context(TlsConfig(ca=str(ca.cert)))
            for name, server, tls in (("plaintext", plain, None), ("TLS", secure, context)):
                made, wall, cpu = connect_many(server, tls, args.connections, time.monotonic() + args.timeout)
                print(f"{name:<10} {made:,} connections in {wall:.2f} s: {made / wall:,.0f}/s; "
                      f"server cpu {cpu * 1000 / made:.2f} ms per connection")
    return 0


if __name__ == "__main__":
    sys.exit(main())
