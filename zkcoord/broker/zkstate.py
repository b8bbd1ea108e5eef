"""The broker's side of ZooKeeper: its ephemeral registration, the cluster id,
its metadata cache read from Kafka's layout, the partition state nodes of
what it leads, the topics clients create through it, and the blocks of
producer ids it hands out (Kafka's /latest_producer_id_block).

Watches only wake the broker; each wake-up re-reads brokers and topics whole
and reconciles, which is simple and never misses a change that happened while
a watch was being re-armed. Every byte read or written goes through
``zkcoord.zk.layout``.
"""

from __future__ import annotations

import logging
from typing import Callable, NamedTuple, Optional

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, KazooException, NodeExistsError, NoNodeError

from zkcoord.admin import topics as topic_admin
from zkcoord.broker.handlers import BrokerAddress, MetadataCache, PartitionInfo
from zkcoord.errors import ZkcoordError
from zkcoord.zk import client as zk_client
from zkcoord.zk import layout
from zkcoord.zk.nodes import cluster_id, ensure_topic_id, read_brokers, read_topic, topic_names
from zkcoord.zk.security import ZkSecurity
from zkcoord.zk.session import STOPPING_DELETE_TIMEOUT_S, create_own_ephemeral, delete_if_owned

log = logging.getLogger(__name__)

CONTROLLER_EPOCH = 1  # no controller runs; Kafka's first controller epoch is 1


class BrokerIdInUseError(ZkcoordError):
    """Another live broker already holds this broker id in ZooKeeper."""

    retriable = True


class ProducerIdsUnavailable(ZkcoordError):
    """No block of producer ids could be claimed from ZooKeeper now."""

    retriable = True


class Snapshot(NamedTuple):
    metadata_cache: MetadataCache
    # (topic, partition) -> leader epoch, for the partitions this broker leads
    led: dict[tuple[str, int], int]


class ZkState:
    """Reads and writes the broker's part of ZooKeeper through ``client``."""

    def __init__(self, client: KazooClient, registration: layout.BrokerRegistration,
                 wake: Callable[[], None]):
        self.client = client
        self.registration = registration
        self.broker_id = registration.broker_id
        self._wake = wake
        self._path = layout.broker_path(self.broker_id)
        # The client's credentials say whose nodes are to be trusted (none: every node is open).
        self._security = getattr(client, "security", None) or ZkSecurity()

    def _watch(self, _event=None) -> None:
        self._wake()

    def register(self, wait_s: float = 0.0) -> None:
        """Create our ephemeral registration. If another session holds it (a
        crashed predecessor whose session has not yet expired, or a live
        duplicate), retry for up to ``wait_s`` seconds, then raise
        BrokerIdInUseError."""
        self.client.ensure_path(layout.BROKER_IDS)
        self.client.ensure_path(layout.BROKER_TOPICS)
        if not create_own_ephemeral(self.client, self._path, layout.encode_broker(self.registration), wait_s):
            raise BrokerIdInUseError(f"broker id {self.broker_id} is registered by another ZooKeeper session")

    def ensure_registered(self) -> None:
        """After a session loss the ephemeral node is gone: put it back."""
        if self.client.exists(self._path) is None:
            log.info("broker %d: registration missing, registering again", self.broker_id)
            self.register()

    def unregister(self) -> None:
        """Remove the registration, waiting for ZooKeeper a bounded while (the
        handler's timeout exception says it did not answer)."""
        delete_if_owned(self.client, self._path, timeout=STOPPING_DELETE_TIMEOUT_S)

    def cluster_id(self) -> str:
        """The cluster id, created if this broker is the first to start."""
        return cluster_id(self.client)

    def create_topic(self, name: str, partitions: Optional[int], assignment: Optional[dict[int, list[int]]],
                     validate_only: bool) -> dict[int, tuple[int, ...]]:
        """Create a topic as ``zkcoord topics create`` does; raises its TopicAdminErrors."""
        return topic_admin.create_topic(self.client, name, partitions, assignment=assignment,
                                        validate_only=validate_only)

    def add_partitions(self, name: str, total: int, validate_only: bool) -> dict[int, tuple[int, ...]]:
        """Grow a topic as ``zkcoord topics alter`` does; raises its TopicAdminErrors."""
        return topic_admin.add_partitions(self.client, name, total, validate_only)

    def claim_producer_ids(self) -> layout.ProducerIdBlock:
        """Claim the next block of producer ids for this broker, as Kafka's
        brokers do: a conditional write of the block after the last one
        claimed by anyone, retried when another broker claims one first.

        With credentials, only from a node zkcoord's principal alone may
        change: a block others could rewind would hand out ids twice.
        Otherwise :class:`~zkcoord.zk.security.ZooKeeperNodeOpen`, and the node stays as it is."""
        path = layout.PRODUCER_ID_BLOCK_PATH
        try:
            while True:
                try:
                    data, stat = self.client.get(path)
                    checked = zk_client.check_ownership(self.client, self._security, path)
                    if checked is not None and checked.czxid != stat.czxid:
                        continue  # deleted and made again between the two reads: look at the new one
                    # Kafka's brokers create the node empty at their first start (a top-level path).
                    current = layout.decode_producer_id_block(data) if data else None
                    version = stat.version
                except NoNodeError:
                    current, version = None, -1
                block = layout.next_producer_id_block(current, self.broker_id)
                try:
                    if version < 0:
                        self.client.create(path, layout.encode_producer_id_block(block))
                    else:
                        self.client.set(path, layout.encode_producer_id_block(block), version=version)
                except (NodeExistsError, BadVersionError):
                    continue  # another broker claimed a block between our read and write
                log.info("broker %d claimed producer ids %d to %d", self.broker_id, block.first, block.last)
                return block
        except (layout.LayoutError, KazooException, self.client.handler.timeout_exception) as exc:
            raise ProducerIdsUnavailable(f"no producer ids could be claimed from {path}: {exc!r}") from None

    def read(self, lead: bool = True) -> Snapshot:
        """The whole metadata cache, re-arming watches on every node read.
        ``lead``: take the lead of the partitions whose first replica is this
        broker (False for a gateway: Kafka's controller writes the states)."""
        cache = MetadataCache()
        # Brokers come and go with their ephemeral nodes: the listing is watched, not each registration.
        for broker_id, registration in read_brokers(self.client, watch=self._watch).items():
            host, port = registration.plaintext_address()
            cache.brokers[broker_id] = BrokerAddress(host or "127.0.0.1", port, registration.rack)
        led: dict[tuple[str, int], int] = {}
        for topic in topic_names(self.client, watch=self._watch):
            try:
                layout.validate_topic_name(topic)
                node = read_topic(self.client, topic, watch=self._watch)
                if node is None:
                    continue
                assignment = node.assignment
                topic_id = ensure_topic_id(self.client, topic, assignment, node.version)
            except NoNodeError:
                continue
            except layout.LayoutError as exc:
                log.warning("ignoring topic %s: %s", topic, exc)
                continue
            if topic_id is not None:
                cache.topic_ids[topic] = topic_id
            partitions = {}
            for index, replicas in assignment.partitions.items():
                if not replicas:
                    continue
                state = self._partition_state(topic, index)
                if lead and replicas[0] == self.broker_id:
                    state = self._lead(topic, index, state)
                    led[(topic, index)] = state.leader_epoch
                if state is None:
                    partitions[index] = PartitionInfo(replicas[0], 0, replicas, replicas[:1])
                else:
                    partitions[index] = PartitionInfo(state.leader, state.leader_epoch, replicas,
                                                      state.isr)
            cache.topics[topic] = partitions
        return Snapshot(cache, led)

    def _partition_state(self, topic: str, partition: int) -> Optional[layout.PartitionState]:
        try:
            data, _ = self.client.get(layout.partition_state_path(topic, partition))
            return layout.decode_partition_state(data)
        except NoNodeError:
            return None
        except layout.LayoutError as exc:
            log.warning("unreadable state of %s-%d: %s", topic, partition, exc)
            return None

    def _lead(self, topic: str, partition: int,
              current: Optional[layout.PartitionState]) -> layout.PartitionState:
        """Make the state node say that we lead the partition. A new leader
        bumps the leader epoch, as Kafka's controller does."""
        path = layout.partition_state_path(topic, partition)
        if current is not None and current.leader == self.broker_id:
            return current
        epoch = 0 if current is None else current.leader_epoch + 1
        state = layout.PartitionState(self.broker_id, epoch, CONTROLLER_EPOCH, (self.broker_id,))
        data = layout.encode_partition_state(state)
        try:
            if current is None:
                self.client.create(path, data, makepath=True)
            else:
                self.client.set(path, data)
        except NodeExistsError:
            self.client.set(path, data)
        return state
