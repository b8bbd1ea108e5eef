"""`zkcoord acls`: ACLs on groups, topics and the cluster in ZooKeeper, where
ZooKeeper-mode Kafka keeps them (/kafka-acl/<Group|Topic>/<name>,
/kafka-acl/Cluster/kafka-cluster), so kafka-acls lists what this writes. docs/SECURITY.md says which operation gates what."""

from __future__ import annotations

import argparse
import sys

from zkcoord.admin import security_from, zookeeper_action, zookeeper_session
from zkcoord.errors import ConfigError, ZkcoordError
from zkcoord.security import acl
from zkcoord.zk.layout.security import resource_path
from zkcoord.zk.security_store import add_acls, read_acls, remove_acls


def register(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser("acls", help="add, remove, list ACLs of groups, topics and the cluster in "
                                                   "ZooKeeper")
    actions = parser.add_subparsers(dest="acls_action", metavar="ACTION")
    actions.required = True
    for name, text in (("add", "allow (or with --deny, deny) principals operations on a group, a topic or "
                               "the cluster"),
                       ("remove", "remove ACL entries (all of the resource's if no --principal is given)"),
                       ("list", "list ACLs (of one resource, or all)")):
        sub = zookeeper_action(actions, name, text, run)
        which = sub.add_mutually_exclusive_group(required=name != "list")
        which.add_argument("--group", help="the group ('*': every group)")
        which.add_argument("--topic", help="the topic ('*': every topic)")
        which.add_argument("--cluster", action="store_true",
                           help=f"the cluster (Kafka's one cluster resource, {acl.CLUSTER_NAME})")
        if name != "list":
            sub.add_argument("--principal", action="append", metavar="TYPE:NAME",
                             help="User:alice, or User:* for anyone (repeatable)")
            sub.add_argument("--operation", action="append", metavar="OP",
                             help=f"one of {', '.join(acl.OPERATIONS)} (repeatable)")
            sub.add_argument("--host", default=acl.WILDCARD, help="the client address it applies to (default: any)")
            sub.add_argument("--deny", action="store_true", help="a Deny entry (default: Allow)")
    return parser


def _resource(args):
    if args.group is not None:
        return acl.group(args.group)
    if args.topic is not None:
        return acl.topic(args.topic)
    if args.cluster:
        return acl.cluster()
    return None


def _entries(args, resource) -> list:
    if args.acls_action == "add" and (not args.principal or not args.operation):
        raise ConfigError("acls add needs --principal and --operation")
    if args.acls_action == "remove" and not args.principal:
        if args.operation:
            raise ConfigError("acls remove with --operation needs --principal")
        return None
    permission = acl.DENY if args.deny else acl.ALLOW
    entries = [acl.AclEntry(p, permission, op, args.host)
               for p in args.principal for op in (args.operation or acl.OPERATIONS)]
    if args.acls_action == "add":  # what is stored already may always be removed
        acl.check_operations(resource, entries)
    return entries


def format_acls(resource, entries) -> list[str]:
    lines = [f"Current ACLs for resource `{resource}`:"]
    lines += [f"\t(principal={e.principal}, host={e.host}, operation={e.operation}, "
              f"permissionType={e.permission})" for e in sorted(entries)]
    return lines


def run(args) -> int:
    try:  # bad arguments fail before any connection is made
        resource = _resource(args)
        if resource is not None:
            resource_path(resource)
        entries = None if args.acls_action == "list" else _entries(args, resource)
        with zookeeper_session(args.zookeeper, security=security_from(args)) as client:
            if args.acls_action == "add":
                print("\n".join(format_acls(resource, add_acls(client, resource, entries))))
            elif args.acls_action == "remove":
                left = remove_acls(client, resource, entries)
                print("\n".join(format_acls(resource, left)))
            else:
                every = read_acls(client)
                for found in sorted(every) if resource is None else [resource]:
                    print("\n".join(format_acls(found, every.get(found, ()))))
        return 0
    except ConfigError as exc:
        print(f"zkcoord acls: {exc}", file=sys.stderr)
        return 2
    except ZkcoordError as exc:
        print(f"zkcoord acls: {exc}", file=sys.stderr)
        return 1
