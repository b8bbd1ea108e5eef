"""ClusterMetadata from memory: ZooKeeper watches keep every server's answer current.

Every server answers ClusterMetadataRequest (who coordinates, at which epoch,
which servers and brokers there are). After a failover thousands of
consumers ask at once, so the answer must not cost ZooKeeper reads per
request. :class:`MetadataView` keeps the last answer in memory. Watches only
wake its refresher, which re-reads the coordinator, its epoch, the servers
and the brokers whole, re-arming every watch as it reads (the broker's
zkstate.py does the same: simple, and no change made while a watch was being
re-armed is missed). Wake-ups during a read coalesce into one more read.
Watches do not outlive a session, but kazoo fires every one when its
session ends, so the refresher reads (and watches) again on the new one.

A stale answer costs a consumer one NOT_COORDINATOR and a retry; an answer
is never invented: until the first read succeeds, it is
COORDINATOR_NOT_AVAILABLE.
"""

from __future__ import annotations

import logging
from typing import Callable, Optional

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from zkcoord import wire
from zkcoord.zk import layout
from zkcoord.zk.reads import read_nodes

log = logging.getLogger(__name__)

NOT_AVAILABLE = wire.ClusterMetadataResponse(error_code=wire.ErrorCode.COORDINATOR_NOT_AVAILABLE)
# After a failed read (no connection), try again this much later; a
# reconnection wakes the refresher at once anyway.
RETRY_S = 0.5


def _node_id(child: str) -> int:
    if not child.isdigit():
        raise layout.LayoutError(f"{child!r} is not a numeric id")
    return int(child)


def server_endpoint(child: str, data: bytes) -> wire.Endpoint:
    info = layout.decode_server(child, data)
    return wire.Endpoint(_node_id(info.server_id), info.host, info.port)


def broker_endpoint(child: str, data: bytes) -> wire.Endpoint:
    registration = layout.decode_broker(_node_id(child), data)
    host, port = registration.plaintext_address()
    return wire.Endpoint(registration.broker_id, host, port)


class MetadataView:
    """The ClusterMetadata answer, kept current by watches on ``zk``.

    Runs on ``zk``'s handler (gevent in a server, threads in a test)."""

    def __init__(self, zk: KazooClient):
        self.zk = zk
        self.reads = 0  # refreshes done (each a handful of ZooKeeper reads): for tests and the state dump
        self._answer = NOT_AVAILABLE
        self._wanted = zk.handler.event_object()
        self._running = False
        self._refresher = None

    def start(self) -> None:
        self._running = True
        self._refresher = self.zk.handler.spawn(self._refresh_forever)
        self.wake()

    def stop(self) -> None:
        self._running = False
        self._wanted.set()

    def wake(self, _event=None) -> None:
        """Something changed (a watch fired, or the connection is back): read again."""
        self._wanted.set()

    def answer(self) -> wire.ClusterMetadataResponse:
        return self._answer

    def _refresh_forever(self) -> None:
        while self._running:
            self._wanted.wait()
            self._wanted.clear()
            if not self._running:
                return
            try:
                self._answer = self._read()
                self.reads += 1
            except Exception as exc:  # no connection: kazoo's errors; a reconnection wakes us
                log.warning("cluster metadata not refreshed: %s", exc)
                self.zk.handler.sleep_func(RETRY_S)
                self._wanted.set()

    def _read(self) -> wire.ClusterMetadataResponse:
        coordinator = self._get(layout.COORDINATOR_PATH)
        epoch = self._get(layout.COORDINATOR_EPOCH_PATH)
        try:
            coordinator_id = -1 if coordinator is None else int(layout.decode_coordinator(coordinator))
        except (ValueError, layout.LayoutError) as exc:
            log.warning("unreadable coordinator node: %s", exc)
            coordinator_id = -1
        try:
            coordinator_epoch = -1 if epoch is None else layout.decode_coordinator_epoch(epoch)
        except layout.LayoutError as exc:
            log.warning("unreadable coordinator epoch: %s", exc)
            coordinator_epoch = -1
        return wire.ClusterMetadataResponse(
            coordinator_id=coordinator_id, coordinator_epoch=coordinator_epoch,
            servers=self._endpoints(layout.SERVERS, server_endpoint),
            brokers=self._endpoints(layout.BROKER_IDS, broker_endpoint),
        )

    def _get(self, path: str) -> Optional[bytes]:
        """A node's data, watched; None if absent (then its creation is watched)."""
        try:
            data, _ = self.zk.get(path, watch=self.wake)
            return data
        except NoNodeError:
            if self.zk.exists(path, watch=self.wake) is None:
                return None
            return self._get(path)  # created in between

    def _endpoints(self, parent: str, decode: Callable[[str, bytes], wire.Endpoint]) -> tuple:
        try:
            children = self.zk.get_children(parent, watch=self.wake)
        except NoNodeError:
            self.zk.exists(parent, watch=self.wake)
            return ()
        # A node gone since the listing is left out; the children watch fires.
        endpoints = read_nodes(self.zk, {child: f"{parent}/{child}" for child in sorted(children)}, decode,
                               parent, watch=self.wake)
        return tuple(endpoints.values())
