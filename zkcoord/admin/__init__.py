"""Administration commands that act on ZooKeeper directly (topics, groups).

Owns the operators' commands: topics, groups, offsets and their resets,
ACLs, users, brokers' offsets. Layer 4 of the map in docs/DESIGN.md: it may
import ``fetch``, ``zk``, ``channel``, ``wire``, ``security``, ``metrics``
and the base modules.
"""

from __future__ import annotations

import argparse
import contextlib
from typing import Iterator, Optional

from zkcoord.errors import ZkcoordError, describe
from zkcoord.zk.security import ZkSecurity, ZooKeeperAuthError


class ZooKeeperUnreachable(ZkcoordError):
    """An admin command could not open a ZooKeeper session."""

    retriable = True


def add_security_options(parser: argparse.ArgumentParser) -> None:
    """The ZooKeeper credential, TLS and ACL options, beside a command's ``--zookeeper``."""
    from zkcoord import settings

    settings.add_options(parser, ZkSecurity)


def zookeeper_action(actions, name: str, help_text: str, func) -> argparse.ArgumentParser:
    """A subcommand that works on ZooKeeper: ``--zookeeper`` and its credentials, run by ``func``."""
    sub = actions.add_parser(name, help=help_text)
    sub.add_argument("--zookeeper", required=True, help="ZooKeeper connect string, chroot allowed")
    add_security_options(sub)
    sub.set_defaults(func=func)
    return sub


def security_from(args: argparse.Namespace) -> ZkSecurity:
    """The :class:`ZkSecurity` the options of :func:`add_security_options` describe."""
    from zkcoord import settings

    return settings.from_args(ZkSecurity, args)


@contextlib.contextmanager
def zookeeper_session(connect: str, timeout: float = 15.0, security: Optional[ZkSecurity] = None,
                      **kazoo_options) -> Iterator:
    """A started kazoo client on ``connect`` for the length of one command,
    with ``security``'s credentials, TLS and ACL policy (and kazoo's
    ``kazoo_options``: a gevent command's handler)."""
    from zkcoord.zk import client as zk_client

    client = zk_client.open_client(connect, security, **kazoo_options)
    try:
        zk_client.start(client, timeout=timeout)
    except ZooKeeperAuthError as exc:
        client.close()
        raise ZooKeeperAuthError(f"ZooKeeper at {connect}: {exc}") from None
    # kazoo raises its own timeout and connection errors; gevent's handler's timeout is no Exception
    except (Exception, client.handler.timeout_exception) as exc:
        client.close()
        raise ZooKeeperUnreachable(f"cannot reach ZooKeeper at {connect}: {describe(exc)}") from None
    from kazoo.exceptions import NoAuthError

    try:
        yield client
    except NoAuthError:
        raise ZooKeeperAuthError(zk_client.refused_by_acl(client.security, connect)) from None
    finally:
        client.stop()
        client.close()
