"""`zkcoord drill`: run a fault campaign and print a verdict.

By default it brings up its own local cluster on 127.0.0.1, the records on
the servers' embedded brokers; with ``--kafka 3.9`` or ``--kafka 4`` on a
3-broker Apache Kafka cluster of its own beside the servers, which it breaks
too; with ``--zookeeper`` and ``--bootstrap`` it aims at an existing one
and breaks only the consumers it runs itself. Exit status 0 when every invariant held,
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
    from zkcoord import settings
    from zkcoord.drill.config import DrillSettings
    from zkcoord.drill.schedule import KINDS
    from zkcoord.zk.security import ZkSecurity

    p = subparsers.add_parser(
        "drill", help="run a failover drill of random faults and check the invariants",
        description="Run a failover drill: random faults drawn from --seed, one at a time, while a producer "
                    "writes and a group consumes; then check the recorded history for loss, duplicates, double "
                    "ownership, offset regressions and recovery times. Kinds: "
                    + "; ".join(f"{k.name}: {k.help}" for k in KINDS.values()))
    settings.add_options(p, DrillSettings)
    p.add_argument("--seed", type=int, default=None, help="seed of the schedule (default: from the clock)")
    p.add_argument("--kinds", default="all", help="comma-separated fault kinds, or 'all' (default: every kind "
                                                  "the data plane can take)")
    p.add_argument("--dir", type=Path, default=None,
                   help="directory for the history and reports (default ./zkcoord-drill-DATE-TIME)")
    p.add_argument("--zookeeper", default=None, help="an existing cluster's ZooKeeper connect string")
    p.add_argument("--bootstrap", default=None, help="an existing cluster's servers, host:port[,host:port...]")
    settings.add_options(p, ZkSecurity)
    p.set_defaults(func=run)


def settings_from(args: argparse.Namespace):
    from zkcoord import settings
    from zkcoord.addresses import parse_bootstrap
    from zkcoord.drill.config import DrillSettings
    from zkcoord.drill.schedule import parse_kinds
    from zkcoord.errors import ConfigError
    from zkcoord.zk.security import ZkSecurity

    if args.dir is not None and args.dir.exists() and any(args.dir.iterdir()):
        raise ConfigError(f"--dir {args.dir} is not empty: a drill writes its history into a directory of its own")
    bootstrap = None
    if args.bootstrap is not None:
        bootstrap = tuple(f"{h}:{p}" for h, p in parse_bootstrap(args.bootstrap))
    return settings.from_args(
        DrillSettings, args, seed=args.seed if args.seed is not None else int(time.time()) % 1_000_000,
        kinds=tuple(parse_kinds(args.kinds, over_kafka=getattr(args, "DrillSettings.kafka") is not None)),
        directory=args.dir or Path.cwd() / time.strftime("zkcoord-drill-%Y%m%d-%H%M%S"),
        zookeeper=args.zookeeper, bootstrap=bootstrap, zk_security=settings.from_args(ZkSecurity, args))


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
