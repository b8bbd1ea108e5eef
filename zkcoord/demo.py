"""`zkcoord demo`: a local cluster on real ZooKeeper doing real work, with a report.

It brings up a 3-node ZooKeeper ensemble on 127.0.0.1, checks that it has one
leader and two followers, writes and reads through different nodes, kills one
node and shows the ensemble keeps serving, then takes everything down.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from zkcoord.zk.ensemble import LocalEnsemble


def register(subparsers: argparse._SubParsersAction) -> None:
    demo = subparsers.add_parser("demo", help="run a local cluster end to end and print a report")
    demo.add_argument("--dir", type=Path, default=None, help="working directory (default: a temporary one)")
    demo.add_argument("--keep", action="store_true", help="leave the cluster running at the end")
    demo.set_defaults(func=run)


def _section(title: str) -> None:
    print(f"\n== {title} " + "=" * max(0, 60 - len(title)))


def run(args: argparse.Namespace) -> int:
    from kazoo.client import KazooClient

    workdir = args.dir or Path(tempfile.mkdtemp(prefix="zkcoord-demo-"))
    started = time.monotonic()
    _section("ZooKeeper ensemble")
    ensemble = LocalEnsemble.create(workdir / "zookeeper", nodes=3)
    try:
        ensemble.start()
        for s in ensemble.status():
            print(f"  node {s.node}  127.0.0.1:{s.client_port}  {s.mode}")
        print(f"  connect string: {ensemble.connect_string}")

        _section("Replication across nodes")
        writer = KazooClient(hosts=f"127.0.0.1:{ensemble.client_port(1)}")
        writer.start(timeout=15)
        writer.ensure_path("/zkcoord/demo")
        writer.set("/zkcoord/demo", b"written through node 1")
        writer.stop()
        for node in (2, 3):
            reader = KazooClient(hosts=f"127.0.0.1:{ensemble.client_port(node)}")
            reader.start(timeout=15)
            reader.sync("/zkcoord/demo")
            print(f"  node {node} reads: {reader.get('/zkcoord/demo')[0].decode()}")
            reader.stop()

        _section("Losing one node")
        leader = next(s.node for s in ensemble.status() if s.mode == "leader")
        ensemble.kill_node(leader)
        print(f"  killed the leader, node {leader}, with kill -9")
        ensemble.wait_for_quorum(timeout=30)
        new_leader = next(s.node for s in ensemble.status() if s.mode == "leader")
        print(f"  node {new_leader} leads now; the ensemble still has a quorum")
        ensemble.start_node(leader)
        ensemble.wait_until_whole(timeout=30)
        print(f"  node {leader} restarted and rejoined as a {ensemble.status()[leader - 1].mode}")
    finally:
        if not args.keep:
            ensemble.stop()
    _section("Report")
    print(f"  all steps passed in {time.monotonic() - started:.1f}s; work directory {workdir}")
    if args.keep:
        print(f"  ensemble left running: zkcoord zk down --dir {workdir / 'zookeeper'}")
    return 0
