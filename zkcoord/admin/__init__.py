"""Administration commands that act on ZooKeeper directly (topics, groups)."""

from __future__ import annotations

import contextlib
from typing import Iterator

from zkcoord.errors import ZkcoordError


class ZooKeeperUnreachable(ZkcoordError):
    """An admin command could not open a ZooKeeper session."""

    retriable = True


@contextlib.contextmanager
def zookeeper_session(connect: str, timeout: float = 15.0) -> Iterator:
    """A started kazoo client on ``connect`` for the length of one command."""
    from kazoo.client import KazooClient

    client = KazooClient(hosts=connect)
    try:
        client.start(timeout=timeout)
    except Exception as exc:  # kazoo raises its own timeout and connection errors
        client.close()
        raise ZooKeeperUnreachable(f"cannot reach ZooKeeper at {connect}: {exc}") from None
    try:
        yield client
    finally:
        client.stop()
        client.close()
