"""Log-end questions as a coordinator asks them: a connection (and login) per
question, as `zkcoord groups describe` asks (admin/groups.py log_end_offsets),
against the coordinators' LogEndReader (one connection per broker, questions
merged), one after the other and from many threads at once.

Starts its own one-node ZooKeeper and one `zkcoord broker` on 127.0.0.1,
plaintext or (--secured) requiring SCRAM-SHA-512 over TLS with certificates
made for the run; a topic of 4 partitions.

    python bench/bench_log_ends.py --questions 500 [--secured]
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from zkcoord.admin.groups import log_end_offsets  # noqa: E402
from zkcoord.coordinator.log_ends import LogEndReader  # noqa: E402
from zkcoord.records import TopicPartition  # noqa: E402
from zkcoord.security import certs  # noqa: E402
from zkcoord.zk import security_store as store  # noqa: E402
from zkcoord.zk import security_store as store
from zkcoord.security.config import TlsConfig  # noqa: E402
from zkcoord.security.tls import client_context  # noqa: E402
from zkcoord.testing import cluster_in_chroot, scratch_ensemble  # noqa: E402

PARTITIONS = frozenset(TopicPartition("ends", p) for p in range(4))
THREADS = 16


def timed(ask, questions: int, threads: int = 1) -> float:
    """Seconds per question, ``questions`` asked by each of ``threads`` at once."""
    def run():
        for _ in range(questions):
            assert len(ask(PARTITIONS)) == len(PARTITIONS)

    askers = [threading.Thread(target=run) for _ in range(threads)]
    began = time.perf_counter()
    for asker in askers:
        asker.start()
    for asker in askers:
        asker.join()
    return (time.perf_counter() - began) / (questions * threads)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--questions", type=int, default=500, help="questions asked each way (each thread)")
    parser.add_argument("--secured", action="store_true", help="the broker requires SCRAM-SHA-512 over TLS")
    args = parser.parse_args()
    if not 10 <= args.questions <= 100_000:
        parser.error("--questions must be in [10, 100000]")
    with scratch_ensemble("bench-log-ends-") as (work, ensemble):
        with cluster_in_chroot(ensemble.connect_string, work / "cluster", "ends") as cluster:
            tls, credential, extra = None, None, []
            if args.secured:
                ca = certs.make_ca(work / "pki")
                server = certs.issue(ca, work / "pki", "server")
                store.set_user(cluster.zk, "coordinator", "its-secret")
                tls, credential = client_context(TlsConfig(ca=str(ca.cert))), ("coordinator", "its-secret")
                extra = ["--sasl-mechanism", "SCRAM-SHA-512", "--authentication-required",
                         "--tls-cert", str(server.cert), "--tls-key", str(server.key)]
            cluster.add_broker(0, extra)
            cluster.create_topic("ends", len(PARTITIONS))
            per_question = log_end_offsets(cluster.zk, timeout_s=5.0, tls=tls, credential=credential)
            reader = LogEndReader(cluster.zk, 5.0, tls=tls, credential=credential)
            try:
                figures = [
                    ("a connection per question", timed(per_question, args.questions)),
                    ("LogEndReader, one asker", timed(lambda tps: reader.log_ends(tps, 5.0), args.questions)),
                    (f"LogEndReader, {THREADS} askers at once",
                     timed(lambda tps: reader.log_ends(tps, 5.0), args.questions, THREADS)),
                ]
            finally:
                reader.close()
            kind = "SCRAM-SHA-512 over TLS" if args.secured else "plaintext"
            for name, seconds in figures:
                print(f"{kind:<22} {name:<32} {seconds * 1000:8.3f} ms per question ({1 / seconds:,.0f}/s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
