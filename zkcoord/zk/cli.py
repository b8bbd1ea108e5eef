"""`zkcoord zk ...`: bring a local ZooKeeper ensemble up and down, and break it on purpose."""

from __future__ import annotations

import argparse
from pathlib import Path

from zkcoord import settings
from zkcoord.zk.ensemble import EnsembleConfig, LocalEnsemble


def register(subparsers: argparse._SubParsersAction) -> None:
    zk = subparsers.add_parser("zk", help="run a local ZooKeeper ensemble on 127.0.0.1")
    actions = zk.add_subparsers(dest="zk_action", required=True, metavar="ACTION")

    up = actions.add_parser("up", help="start an ensemble and wait for its quorum")
    up.add_argument("--dir", type=Path, required=True, help="directory that holds the ensemble")
    settings.add_options(up, EnsembleConfig)
    up.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for the quorum")
    up.set_defaults(func=_up)

    down = actions.add_parser("down", help="stop every node of an ensemble")
    down.add_argument("--dir", type=Path, required=True)
    down.add_argument("--purge", action="store_true", help="also delete the ensemble's directory")
    down.set_defaults(func=_down)

    for name, func, text in (
        ("kill", _kill, "kill -9 one node"),
        ("start", _start_node, "restart one node"),
    ):
        p = actions.add_parser(name, help=text)
        p.add_argument("--dir", type=Path, required=True)
        p.add_argument("--node", type=int, required=True, help="node number, 1..N")
        p.set_defaults(func=func)

    status = actions.add_parser("status", help="show each node's mode")
    status.add_argument("--dir", type=Path, required=True)
    status.set_defaults(func=_status)


def _print_status(ensemble: LocalEnsemble) -> None:
    for s in ensemble.status():
        print(f"node {s.node}  127.0.0.1:{s.client_port}  {s.mode or 'down'}")


def _up(args: argparse.Namespace) -> int:
    ensemble = LocalEnsemble.create(args.dir, settings.from_args(EnsembleConfig, args))
    ensemble.start(timeout=args.timeout)
    _print_status(ensemble)
    print(ensemble.connect_string)
    return 0


def _down(args: argparse.Namespace) -> int:
    ensemble = LocalEnsemble.load(args.dir)
    if args.purge:
        ensemble.destroy()
    else:
        ensemble.stop()
    print(f"ensemble in {args.dir} stopped")
    return 0


def _kill(args: argparse.Namespace) -> int:
    LocalEnsemble.load(args.dir).kill_node(args.node)
    print(f"node {args.node} killed")
    return 0


def _start_node(args: argparse.Namespace) -> int:
    ensemble = LocalEnsemble.load(args.dir)
    pid = ensemble.start_node(args.node)
    print(f"node {args.node} started (pid {pid})")
    return 0


def _status(args: argparse.Namespace) -> int:
    ensemble = LocalEnsemble.load(args.dir)
    _print_status(ensemble)
    return 0 if ensemble.has_quorum() else 1
