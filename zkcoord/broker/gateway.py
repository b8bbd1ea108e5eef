"""The group gateway: the embedded broker's mode beside an Apache Kafka
cluster that holds the records (``zkcoord server --gateway``).

A gateway lets stock Kafka clients be members of zkcoord groups while they
read from Kafka. It holds no partitions and registers nowhere Kafka looks
(not under /brokers/ids, where a ZooKeeper-mode Kafka's controller would
take it for a broker to place replicas on). What it answers:

- **Metadata**: Kafka's brokers, topics, leaders, leader epochs and ISRs,
  read where zkcoord reads them (ZooKeeper's /brokers in ZooKeeper mode,
  Kafka's Metadata in KRaft mode), plus the gateway itself as one more
  broker that leads nothing, and Kafka's controller. A client bootstrapped
  at the gateway thus fetches, lists offsets and produces at Kafka's leaders.
- **FindCoordinator** (group keys): the gateway itself; the group and
  offset APIs (JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit,
  OffsetFetch, ConsumerGroupHeartbeat) go through the bridge
  (broker/groups/bridge.py) into the zkcoord coordinators, as at an
  embedded broker.
- **Produce, Fetch, ListOffsets**: NOT_LEADER_OR_FOLLOWER for every
  partition Kafka has (UNKNOWN_TOPIC_OR_PARTITION for others). Every stock
  client takes that error as "my metadata is stale": it refreshes it and
  sends the request to the leader the Metadata names, a Kafka broker. A
  non-retriable error would instead fail a producer's send or stop a
  consumer's partition for a request that only reached the wrong node.
- **InitProducerId**: COORDINATOR_NOT_AVAILABLE (retriable): the client asks
  another node, a Kafka broker, whose producer ids Kafka's own brokers know.
- **CreateTopics**: NOT_CONTROLLER: the client asks Kafka's controller.

What the gateway asks of Kafka (checked by :func:`problems`, at start and
on every read): that it has brokers; that none of them has the gateway's
id (a client would take the two for one node); and that Kafka does not
coordinate consumer groups itself, i.e. has no ``__consumer_offsets``
topic. Stock clients send FindCoordinator to whichever node they like
best, Kafka's brokers included; a Kafka broker that answers makes the
client a member of a Kafka group over the same partitions as the zkcoord
group's. Without ``__consumer_offsets`` (and with
``offsets.topic.replication.factor`` above the broker count, so that Kafka
cannot create it) Kafka answers COORDINATOR_NOT_AVAILABLE, which clients
retry elsewhere until the gateway answers.
"""

from __future__ import annotations

import logging
import uuid
from typing import Optional

from kazoo.exceptions import NoNodeError

from zkcoord.broker.handlers import BrokerAddress, MetadataCache, PartitionInfo
from zkcoord.broker.zkstate import ZkState
from zkcoord.errors import ZkcoordError
from zkcoord.zk.layout.kafka import kafka_uuid

log = logging.getLogger(__name__)

# Kafka's group coordinator keeps its groups in this topic; a gateway's Kafka must not have one.
CONSUMER_OFFSETS = "__consumer_offsets"
NONE = 0
_NO_TOPIC_ID = uuid.UUID(int=0)


class GatewayError(ZkcoordError):
    """The Kafka cluster is not one a gateway can stand beside: none to be
    seen, a broker with the gateway's id, or Kafka coordinating groups itself."""


def cache_of_response(response) -> MetadataCache:
    """A kafka-python MetadataResponse (Kafka's view, KRaft mode) as the
    broker's MetadataCache: brokers, topics with ids, each partition's
    leader, leader epoch, replicas and ISR, the cluster id and controller."""
    cache = MetadataCache(cluster_id=getattr(response, "cluster_id", None))
    for broker in response.brokers:
        cache.brokers[broker.node_id] = BrokerAddress(broker.host, broker.port, getattr(broker, "rack", None))
    for topic in response.topics:
        if topic.error_code != NONE or topic.name is None:
            continue
        topic_id = getattr(topic, "topic_id", None)
        if isinstance(topic_id, uuid.UUID) and topic_id != _NO_TOPIC_ID:
            cache.topic_ids[topic.name] = kafka_uuid(topic_id.bytes)
        cache.topics[topic.name] = {
            p.partition_index: PartitionInfo(p.leader_id, getattr(p, "leader_epoch", -1), tuple(p.replica_nodes),
                                             tuple(p.isr_nodes))
            for p in topic.partitions}
    controller = getattr(response, "controller_id", -1)
    cache.controller = controller if controller in cache.brokers else None
    return cache


def problems(kafka: MetadataCache, node_id: int) -> list[str]:
    """What keeps a gateway with id ``node_id`` from standing beside the
    Kafka cluster ``kafka`` (an empty list: nothing).

    >>> kafka = MetadataCache(brokers={1: BrokerAddress("k1", 9092, None)})
    >>> problems(kafka, 7)
    []
    >>> problems(MetadataCache(), 7)[0][:21]
    'no Kafka broker is to'
    >>> kafka.topics[CONSUMER_OFFSETS] = {}
    >>> [p[:26] for p in problems(kafka, 1)]
    ['Kafka broker 1 has the gat', 'Kafka coordinates consumer']
    """
    found = []
    if not kafka.brokers:
        found.append("no Kafka broker is to be seen (ZooKeeper mode: Kafka's zookeeper.connect must be this "
                     "server's connect string with its chroot; KRaft mode: give --kafka-bootstrap)")
    if node_id in kafka.brokers:
        found.append(f"Kafka broker {node_id} has the gateway's node id (its server id): clients would take "
                     f"the two for one node; give the server an id no Kafka broker has")
    if CONSUMER_OFFSETS in kafka.topics:
        found.append(f"Kafka coordinates consumer groups itself (it has {CONSUMER_OFFSETS}): stock clients "
                     f"ask any broker for their group's coordinator, and a Kafka broker's answer would put them "
                     f"in a Kafka group beside the zkcoord group; set Kafka's offsets.topic.replication.factor "
                     f"above its broker count and use a cluster whose __consumer_offsets never was created")
    return found


def with_gateway(kafka: MetadataCache, node_id: int, address: BrokerAddress) -> MetadataCache:
    """What the gateway's Metadata answers say: Kafka's cluster, plus the
    gateway as a broker that leads nothing. Kafka's controller stays the
    controller (the lowest Kafka broker id if Kafka did not say)."""
    brokers = dict(kafka.brokers)
    controller = kafka.controller if kafka.controller is not None else min(brokers, default=None)
    brokers[node_id] = address
    return MetadataCache(brokers=brokers, topics=kafka.topics, topic_ids=kafka.topic_ids,
                         cluster_id=kafka.cluster_id, controller=controller)


class KafkaView:
    """Where a gateway reads the Kafka cluster: ``watch`` (a
    KafkaClusterWatch, KRaft mode) if given, else ZooKeeper's /brokers
    through ``zkstate`` (ZooKeeper mode, the chroot shared with Kafka),
    which never writes a partition's state (Kafka's controller does)."""

    def __init__(self, zkstate: ZkState, watch=None):
        self._zkstate = zkstate
        self._watch = watch
        self._said: tuple[str, ...] = ()

    def read(self, cluster_id: Optional[str]) -> MetadataCache:
        """Kafka's cluster now (``cluster_id``: the id to give when Kafka's
        answer gives none: in ZooKeeper mode zkcoord's is Kafka's)."""
        if self._watch is None:
            try:
                cache = self._zkstate.read(lead=False).metadata_cache
            except NoNodeError:  # no /brokers/topics: no Kafka has ever started in this chroot
                cache = MetadataCache()
        elif self._watch.last is None:
            cache = MetadataCache()
        else:
            cache = cache_of_response(self._watch.last.response)
        if cache.cluster_id is None:
            cache.cluster_id = cluster_id
        return cache

    def refresh(self) -> None:
        """A client asked for metadata: read Kafka's again soon (leaders may have moved)."""
        if self._watch is not None:
            self._watch.refresh()

    def check(self, kafka: MetadataCache, node_id: int) -> None:
        """Raise GatewayError if Kafka is not one to stand beside."""
        found = problems(kafka, node_id)
        if found:
            raise GatewayError("the gateway cannot serve beside this Kafka cluster: " + "; ".join(found))

    def watch_problems(self, kafka: MetadataCache, node_id: int) -> None:
        """Log, once each time they appear, problems arising while serving
        (Kafka having created __consumer_offsets, a broker taking the id)."""
        found = tuple(problems(kafka, node_id))
        for problem in found:
            if problem not in self._said:
                log.error("gateway %d: %s", node_id, problem)
        self._said = found
