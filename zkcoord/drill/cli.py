"""`zkcoord drill`: run a fault campaign and print a verdict.

By default it brings up its own local cluster on 127.0.0.1; with
``--zookeeper`` and ``--bootstrap`` it aims at an existing one and breaks
only the consumers it runs itself. Exit status 0 when every invariant held,
1 on any violation or when it had to stop early, 2 on bad arguments, 130
when interrupted. The last line
printed is the summary other tools read:

    faults N; lost L; duplicates D (planned P); double ownership W (max X ms); offset regressions R; max time to whole T s
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path


def register(subparsers: argparse._SubParsersAction) -> None:
    from zkcoord.drill.schedule import KINDS

    p = subparsers.add_parser(
        "drill", help="run a failover drill of random faults and check the invariants",
        description="Run a failover drill: random faults drawn from --seed, one at a time, while a producer "
                    "writes and a group consumes; then check the recorded history for loss, duplicates, double "
                    "ownership, offset regressions and recovery times. Kinds: "
                    + "; ".join(f"{k.name}: {k.help}" for k in KINDS.values()))
    p.add_argument("--faults", type=int, default=20, help="how many faults to inject (default 20)")
    p.add_argument("--seed", type=int, default=None, help="seed of the schedule (default: from the clock)")
    p.add_argument("--kinds", default="all", help="comma-separated fault kinds, or 'all' (default)")
    p.add_argument("--dir", type=Path, default=None,
                   help="directory for the history and reports (default ./zkcoord-drill-DATE-TIME)")
    p.add_argument("--consumers", type=int, default=4, help="consumer processes in the group (default 4)")
    p.add_argument("--partitions", type=int, default=12, help="partitions of the drill's topic (default 12)")
    p.add_argument("--rate", type=int, default=300, help="records produced per second (default 300)")
    p.add_argument("--session-timeout-ms", type=int, default=3000, help="consumers' session timeout")
    p.add_argument("--zk-session-timeout-ms", type=int, default=3000,
                   help="servers' ZooKeeper session timeout (of the drill's own cluster; for an existing "
                        "cluster, what its servers use, for the recovery bounds)")
    p.add_argument("--rebalance-timeout-ms", type=int, default=5000)
    p.add_argument("--coordinator-slots", type=int, default=3,
                   help="coordinator slots of the drill's own cluster (default 3: every one of its three servers "
                        "coordinates a slot, so that a standby kill kills another slot's coordinator)")
    p.add_argument("--max-minutes", type=float, default=60.0,
                   help="start no new fault after this many minutes (default 60)")
    p.add_argument("--zookeeper", default=None, help="an existing cluster's ZooKeeper connect string")
    p.add_argument("--bootstrap", default=None, help="an existing cluster's servers, host:port[,host:port...]")
    p.set_defaults(func=run)


def settings_from(args: argparse.Namespace):
    from zkcoord.consumer.membership import parse_bootstrap
    from zkcoord.drill.runner import DrillSettings
    from zkcoord.drill.schedule import parse_kinds
    from zkcoord.errors import ConfigError

    if args.faults <= 0:
        raise ConfigError(f"--faults must be positive, not {args.faults}")
    for name, value, low in (("--consumers", args.consumers, 1), ("--partitions", args.partitions, 1),
                             ("--rate", args.rate, 1), ("--session-timeout-ms", args.session_timeout_ms, 500),
                             ("--zk-session-timeout-ms", args.zk_session_timeout_ms, 500),
                             ("--rebalance-timeout-ms", args.rebalance_timeout_ms, 500)):
        if value < low:
            raise ConfigError(f"{name} must be at least {low}, not {value}")
    from zkcoord.coordinator.slots import validate_slot_count

    validate_slot_count(args.coordinator_slots)
    if args.max_minutes <= 0:
        raise ConfigError("--max-minutes must be positive")
    if args.dir is not None and args.dir.exists() and any(args.dir.iterdir()):
        raise ConfigError(f"--dir {args.dir} is not empty: a drill writes its history into a directory of its own")
    if (args.zookeeper is None) != (args.bootstrap is None):
        raise ConfigError("aim at an existing cluster with both --zookeeper and --bootstrap, or neither")
    bootstrap = None
    if args.bootstrap is not None:
        bootstrap = tuple(f"{h}:{p}" for h, p in parse_bootstrap(args.bootstrap))
    return DrillSettings(
        faults=args.faults, seed=args.seed if args.seed is not None else int(time.time()) % 1_000_000,
        kinds=tuple(parse_kinds(args.kinds)),
        directory=args.dir or Path.cwd() / time.strftime("zkcoord-drill-%Y%m%d-%H%M%S"),
        consumers=args.consumers, partitions=args.partitions, rate=args.rate,
        consumer_session_ms=args.session_timeout_ms, zk_session_ms=args.zk_session_timeout_ms,
        rebalance_timeout_ms=args.rebalance_timeout_ms, coordinator_slots=args.coordinator_slots,
        max_minutes=args.max_minutes,
        zookeeper=args.zookeeper, bootstrap=bootstrap)


def run(args: argparse.Namespace) -> int:
    from zkcoord.drill.runner import run_drill

    settings = settings_from(args)
    verdict, text, stopped_early = run_drill(settings)
    print()
    print(text, end="")
    print(f"history and reports in {settings.directory} (report.txt, report.json, timeline.html)")
    print(verdict.summary_line(), flush=True)
    if stopped_early == "interrupted":
        return 130
    return 0 if verdict.ok and stopped_early is None else 1
