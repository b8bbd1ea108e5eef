"""The `zkcoord` command: one subcommand per area, each registered by its own module."""

from __future__ import annotations

import argparse
import importlib
import logging
import signal
import sys
from typing import Optional, Sequence

from zkcoord.errors import ConfigError, ZkcoordError
from zkcoord.interrupts import Interruptible

# Modules that contribute subcommands through `register(subparsers)`. Each
# keeps its heavy imports (gevent, kazoo, the broker) inside its command
# functions, so building the parser stays cheap and gevent's patching stays the
# business of the commands that need it.
COMMAND_MODULES = (
    "zkcoord.zk.cli",
    "zkcoord.admin.topics",
    "zkcoord.admin.groups",
    "zkcoord.admin.users",
    "zkcoord.admin.acls",
    "zkcoord.broker.cli",
    "zkcoord.coordinator.cli",
    "zkcoord.consumer.cli",
    "zkcoord.demo",
    "zkcoord.drill.cli",
    "zkcoord.console.cli",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="zkcoord", description="ZooKeeper-backed consumer-group coordinator")
    parser.add_argument("-v", "--verbose", action="store_true", help="log at DEBUG level")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(subparsers)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if not args.verbose:  # kazoo narrates every connection at INFO; keep its warnings
        logging.getLogger("kazoo").setLevel(logging.WARNING)
    try:
        # Ctrl-C raises KeyboardInterrupt even in a process started with SIGINT
        # ignored (a shell's background job); commands with a shutdown of their
        # own take it over (zkcoord.interrupts).
        with Interruptible((signal.SIGINT,)):
            return int(args.func(args) or 0)
    except ConfigError as exc:
        parser.exit(2, f"zkcoord: error: {exc}\n")
    except ZkcoordError as exc:
        parser.exit(1, f"zkcoord: error: {exc}\n")
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
