"""`zkcoord zk ...`: bring a local ZooKeeper ensemble up and down, break it on purpose,
and put zkcoord's ACLs on a tree written without them."""

from __future__ import annotations

import argparse
from pathlib import Path

from zkcoord import settings
from zkcoord.errors import ConfigError
from zkcoord.zk.ensemble import EnsembleConfig, LocalEnsemble
from zkcoord.zk.security import ZkSecurity, command_line


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

    secure = actions.add_parser(
        "secure", help="set zkcoord's ACLs on every node of an existing tree (as Kafka's "
                       "zookeeper-security-migration does), as the credentials given own them")
    secure.add_argument("--zookeeper", required=True, help="ZooKeeper connect string, chroot allowed")
    secure.add_argument("--path", default="/", help="the subtree to secure (default: all but /zookeeper)")
    settings.add_options(secure, ZkSecurity)
    secure.set_defaults(func=_secure)


def _print_status(ensemble: LocalEnsemble) -> None:
    for s in ensemble.status():
        print(f"node {s.node}  127.0.0.1:{s.client_port}  {s.shown}")


def _up(args: argparse.Namespace) -> int:
    ensemble = LocalEnsemble.create(args.dir, settings.from_args(EnsembleConfig, args))
    ensemble.start(timeout=args.timeout)
    _print_status(ensemble)
    if ensemble.users or ensemble.tls:
        print(f"data: in {ensemble.directory}, this user's alone (directories 0700, ZooKeeper's files 0600): "
              f"its transaction log holds every node, users' SCRAM credentials among them")
        if ensemble.users:
            print(f"sessions: each authenticates ({ensemble.auth}); the root: only "
                  f"{ensemble.users[0]} creates or deletes top-level nodes")
        # What a zkcoord command needs to use this ensemble, ready to paste.
        print("client settings: " + " ".join(command_line(ensemble.client_security())))
    print(ensemble.connect_string)  # last, as scripts take it
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


def _secure(args: argparse.Namespace) -> int:
    from zkcoord.admin import zookeeper_session
    from zkcoord.zk.client import secure_tree

    security = settings.from_args(ZkSecurity, args)
    if not security.authenticated:
        raise ConfigError("zk secure needs credentials (--zk-auth digest or sasl, --zk-user and a password): "
                          "the nodes become theirs")
    with zookeeper_session(args.zookeeper, security=security) as client:
        count = secure_tree(client, args.path)
    print(f"ACLs set on {count} node(s) under {args.path}")
    return 0


def _status(args: argparse.Namespace) -> int:
    ensemble = LocalEnsemble.load(args.dir)
    _print_status(ensemble)
    return 0 if ensemble.has_quorum() else 1
