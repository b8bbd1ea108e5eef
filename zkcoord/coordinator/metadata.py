"""ClusterMetadata from memory: ZooKeeper watches keep every server's answer current.

Every server answers ClusterMetadataRequest (who coordinates a group's slot,
at which epoch, which servers and brokers there are). After a failover
thousands of consumers ask at once, so the answer must not cost ZooKeeper
reads per request. :class:`MetadataView` keeps the last answer for every
coordinator slot in memory. Watches only wake its refresher, which re-reads
the slot count, every slot's coordinator and epoch, the servers and the
brokers whole, re-arming every watch as it reads (the broker's zkstate.py
does the same: simple, and no change made while a watch was being re-armed
is missed).
Wake-ups during a read coalesce into one more read. Watches do not outlive
a session, but kazoo fires every one when its session ends, so the
refresher reads (and watches) again on the new one.

A stale answer costs a consumer one NOT_COORDINATOR and a retry; an answer
is never invented: until the first read succeeds, it is
COORDINATOR_NOT_AVAILABLE.
"""

from __future__ import annotations

import logging
import time
from typing import Optional

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from zkcoord import wire
from zkcoord.errors import ConfigError
from zkcoord.zk import layout
from zkcoord.zk.layout import slot_of, validate_slot_count
from zkcoord.zk.nodes import read_brokers, read_servers

log = logging.getLogger(__name__)

NOT_AVAILABLE = wire.ClusterMetadataResponse(error_code=wire.ErrorCode.COORDINATOR_NOT_AVAILABLE)
# After a failed read (no connection), try again this much later; a
# reconnection wakes the refresher at once anyway.
RETRY_S = 0.5


def _node_id(child: str) -> int:
    if not child.isdigit():
        raise layout.LayoutError(f"{child!r} is not a numeric id")
    return int(child)


def server_endpoints(servers: dict[str, layout.ServerInfo]) -> tuple[wire.NodeAddress, ...]:
    """The servers as the protocol names them: by a numeric id. One whose
    id is not a number is logged and left out, as an unreadable node is."""
    endpoints = []
    for server_id, info in servers.items():
        try:
            endpoints.append(wire.NodeAddress(_node_id(server_id), info.host, info.port))
        except layout.LayoutError as exc:
            log.error("server %s left out of cluster metadata: %s", server_id, exc)
    return tuple(endpoints)


def broker_endpoints(brokers: dict[int, layout.BrokerRegistration],
                     protocol: str = "PLAINTEXT") -> tuple[wire.NodeAddress, ...]:
    """Each broker at its endpoint speaking ``protocol`` (layout.client_protocol)."""
    return tuple(wire.NodeAddress(broker_id, *registration.address_for(protocol))
                 for broker_id, registration in brokers.items())


def kafka_endpoints(brokers: dict[int, str]) -> tuple[wire.NodeAddress, ...]:
    """Brokers as Kafka's Metadata names them (id -> host:port)."""
    endpoints = []
    for broker_id, address in sorted(brokers.items()):
        host, _, port = address.rpartition(":")
        endpoints.append(wire.NodeAddress(broker_id, host, int(port)))
    return tuple(endpoints)


class MetadataView:
    """The ClusterMetadata answers of a cluster of coordinator slots, kept
    current by watches on ``zk``: as many slots as /zkcoord/slots says, or
    ``slots`` while it says nothing readable. The brokers are those
    registered in ZooKeeper (each at its endpoint speaking ``protocol``: the
    servers' own, which their members share), or with ``kafka`` (a
    KafkaClusterWatch) those Kafka's Metadata names, read again when they change.

    Runs on ``zk``'s handler (gevent in a server, threads in a test)."""

    def __init__(self, zk: KazooClient, slots: int = 1, kafka=None, protocol: str = "PLAINTEXT"):
        self.zk = zk
        self._kafka = kafka
        self._protocol = protocol
        if kafka is not None:
            kafka.on_brokers_changed(self.wake)
        self.slots = validate_slot_count(slots)
        self.reads = 0  # refreshes done (each a handful of ZooKeeper reads): for tests and the state dump
        self._answers: Optional[list[wire.ClusterMetadataResponse]] = None  # by slot
        self._wanted = zk.handler.event_object()
        # Set (and replaced) by every refresh: what a held answer waits on.
        self.changed = zk.handler.event_object()
        self._running = False
        self._refresher = None

    def start(self) -> None:
        self._running = True
        self._refresher = self.zk.handler.spawn(self._refresh_forever)
        self.wake()

    def stop(self) -> None:
        self._running = False
        self._wanted.set()
        self.changed.set()  # nobody waits on a view that has stopped

    def wake(self, _event=None) -> None:
        """Something changed (a watch fired, or the connection is back): read again."""
        self._wanted.set()

    def answer(self, group_id: str = "") -> wire.ClusterMetadataResponse:
        """The answer for ``group_id``'s slot; no group: slot 0, the seed's coordinator."""
        answers = self._answers  # one read: the answers of one count
        if answers is None:
            return NOT_AVAILABLE
        return answers[slot_of(group_id, len(answers)) if group_id else 0]

    def answer_when(self, group_id: str, known_epoch: int, timeout: float) -> wire.ClusterMetadataResponse:
        """:meth:`answer`, once ``group_id``'s slot has a coordinator of an
        epoch above ``known_epoch``, or after ``timeout`` seconds, whichever
        comes first (the ZooKeeper handler's waits)."""
        deadline = time.monotonic() + timeout
        while True:
            changed = self.changed  # first: a refresh from here on sets it
            answer = self.answer(group_id)
            left = deadline - time.monotonic()
            if (answer.coordinator_id >= 0 and answer.coordinator_epoch > known_epoch) or left <= 0 \
                    or not self._running:
                return answer
            changed.wait(left)

    def holder(self, slot: int) -> int:
        """The server id that coordinates ``slot`` as last read, -1 if none (or not read yet)."""
        answers = self._answers
        return -1 if answers is None or slot >= len(answers) else answers[slot].coordinator_id

    def _refresh_forever(self) -> None:
        while self._running:
            self._wanted.wait()
            self._wanted.clear()
            if not self._running:
                return
            try:
                self._answers = self._read()
                self.reads += 1
                changed, self.changed = self.changed, self.zk.handler.event_object()
                changed.set()
            except Exception as exc:  # no connection: kazoo's errors; a reconnection wakes us
                log.warning("cluster metadata not refreshed: %s", exc)
                self.zk.handler.sleep_func(RETRY_S)
                self._wanted.set()

    def _read(self) -> list[wire.ClusterMetadataResponse]:
        # Epochs first: ZooKeeper answers one session's reads in order, so a
        # takeover made between the two reads pairs the new coordinator with
        # the old epoch (a held answer waits on for the epoch's watch), never
        # the old coordinator with the new epoch (a waiting member would be
        # sent to the dead one as if it were the news). The count before
        # both, so that the slots read are the count's.
        self.slots = self._slot_count()
        paths = [layout.slot_epoch_path(slot) for slot in range(self.slots)] + \
                [layout.slot_coordinator_path(slot) for slot in range(self.slots)]
        data = self._get_all(paths)
        servers = server_endpoints(read_servers(self.zk, watch=self.wake, watch_data=True))
        brokers = (kafka_endpoints(self._kafka.brokers) if self._kafka is not None
                   else broker_endpoints(read_brokers(self.zk, watch=self.wake, watch_data=True), self._protocol))
        return [
            wire.ClusterMetadataResponse(
                coordinator_id=self._coordinator_id(layout.slot_coordinator_path(slot), data),
                coordinator_epoch=self._epoch(layout.slot_epoch_path(slot), data),
                servers=servers, brokers=brokers, slot=slot, slots=self.slots,
            )
            for slot in range(self.slots)
        ]

    def _slot_count(self) -> int:
        """The cluster's slot count, watched; the last one known while its
        node is missing or unreadable (the servers stand for nothing then)."""
        data = self._get_all([layout.SLOTS])[layout.SLOTS]
        if data is None:
            return self.slots
        try:
            return validate_slot_count(layout.decode_slot_count(data))
        except (layout.LayoutError, ConfigError) as exc:
            log.warning("unreadable slot count: %s", exc)
            return self.slots

    @staticmethod
    def _coordinator_id(path: str, data: dict[str, Optional[bytes]]) -> int:
        if data[path] is None:
            return -1
        try:
            return int(layout.decode_coordinator(data[path], path))
        except (ValueError, layout.LayoutError) as exc:
            log.warning("unreadable coordinator node: %s", exc)
            return -1

    @staticmethod
    def _epoch(path: str, data: dict[str, Optional[bytes]]) -> int:
        if data[path] is None:
            return -1
        try:
            return layout.decode_coordinator_epoch(data[path], path)
        except layout.LayoutError as exc:
            log.warning("unreadable coordinator epoch: %s", exc)
            return -1

    def _get_all(self, paths: list[str]) -> dict[str, Optional[bytes]]:
        """Each node's data, watched, all asked at once; None where absent
        (then its creation is watched, and one created meanwhile wakes us)."""
        asked = [(path, self.zk.get_async(path, watch=self.wake)) for path in paths]
        data: dict[str, Optional[bytes]] = {}
        for path, answer in asked:
            try:
                data[path] = answer.get()[0]
            except NoNodeError:
                data[path] = None
        absent = [(path, self.zk.exists_async(path, watch=self.wake)) for path, value in data.items() if value is None]
        for path, answer in absent:
            if answer.get() is not None:
                self.wake()  # created in between: read again
        return data
