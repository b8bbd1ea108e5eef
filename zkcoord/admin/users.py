"""`zkcoord users`: SCRAM credentials in ZooKeeper, where ZooKeeper-mode Kafka
keeps them (/config/users/<user>), for the broker's SASL and the coordinator's
RegisterConsumer credential. A password is read from a file or standard
input, never from the command line, and only its SCRAM credential is stored."""

from __future__ import annotations

import argparse
import sys

from zkcoord.admin import security_from, zookeeper_action, zookeeper_session
from zkcoord.errors import ConfigError, ZkcoordError
from zkcoord.security import scram
from zkcoord.security.secrets import read_password
from zkcoord.zk.layout.security import validate_user
from zkcoord.zk.security_store import UnknownUser, delete_user, list_users, set_user


def _mechanisms(values) -> tuple[str, ...]:
    chosen = tuple(dict.fromkeys(values or scram.SCRAM_MECHANISMS))
    for mechanism in chosen:
        if mechanism not in scram.SCRAM_MECHANISMS:
            raise ConfigError(f"--mechanism must be one of {', '.join(scram.SCRAM_MECHANISMS)}, not {mechanism!r}")
    return chosen


def register(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser("users", help="add, delete, list SCRAM users in ZooKeeper")
    actions = parser.add_subparsers(dest="users_action", metavar="ACTION")
    actions.required = True

    def common(name, help_text):
        return zookeeper_action(actions, name, help_text, run)

    for name, text in (("add", "store a user's SCRAM credentials (replacing a password)"),
                       ("delete", "remove a user's SCRAM credentials")):
        sub = common(name, text)
        sub.add_argument("--user", required=True)
        sub.add_argument("--mechanism", action="append", metavar="MECHANISM",
                         help=f"one of {', '.join(scram.SCRAM_MECHANISMS)} (repeatable; default: both)")
    add = actions.choices["add"]
    add.add_argument("--password-file", metavar="PATH",
                     help="file whose first line is the password (default, or '-': standard input)")
    add.add_argument("--iterations", type=int, default=scram.DEFAULT_ITERATIONS,
                     help=f"PBKDF2 iterations (default {scram.DEFAULT_ITERATIONS})")
    common("list", "list users and their mechanisms")
    return parser


def run(args) -> int:
    try:  # bad arguments fail before any connection is made
        action = args.users_action
        if action != "list":
            validate_user(args.user)
            mechanisms = _mechanisms(args.mechanism)
        if action == "add":
            password = read_password(args.password_file)
            scram.derive(mechanisms[0], password, args.iterations)  # refuses bad iterations now
        with zookeeper_session(args.zookeeper, security=security_from(args)) as client:
            if action == "add":
                set_user(client, args.user, password, mechanisms, args.iterations)
                print(f"Stored {', '.join(mechanisms)} credentials for user {args.user}")
            elif action == "delete":
                delete_user(client, args.user, mechanisms)
                print(f"Deleted {', '.join(mechanisms)} credentials of user {args.user}")
            else:
                for name, found in list_users(client).items():
                    print(f"{name}\t{','.join(found)}")
        return 0
    except (ConfigError, UnknownUser, scram.CredentialError) as exc:
        print(f"zkcoord users: {exc}", file=sys.stderr)
        return 2
    except ZkcoordError as exc:
        print(f"zkcoord users: {exc}", file=sys.stderr)
        return 1
