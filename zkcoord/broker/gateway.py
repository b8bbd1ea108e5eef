"""The group gateway: the embedded broker's mode beside an Apache Kafka
cluster that holds the records (``zkcoord server --gateway``).

A gateway lets stock Kafka clients be members of zkcoord groups while their
records live on Kafka. It holds no partitions and registers nowhere Kafka
looks (not under /brokers/ids, where a ZooKeeper-mode Kafka's controller
would take it for a broker to place replicas on).

Why it relays. Stock clients learn the cluster from whichever broker answers
their Metadata, and ask whichever broker they like best (Java's and
kafka-python's least loaded node; librdkafka's any broker up) for their
group's coordinator. A client told to fetch from Kafka's brokers themselves
soon has its Metadata from one of them, which names no gateway: it forgets
the gateway, asks Kafka for the coordinator and joins a Kafka group (or,
where Kafka cannot coordinate groups, never finds one again): seen with
kafka-python 3 and librdkafka 2.16 (docs/KAFKA.md, "Gateway"). So the
gateway is the whole cluster as its clients see it:

- **Relays.** For every Kafka broker the gateway opens a relay listener,
  named in Metadata with that broker's id at the gateway's host. What a
  client sends a relay goes on, byte for byte, over a connection of its own
  to that broker (Produce, Fetch, ListOffsets, InitProducerId, the admin
  APIs, ...), and Kafka's answer comes back as it was: Kafka checks the
  leader epochs and serves the records, replicated and acknowledged as it
  does for any client.
- **Answered by the gateway**, at every listener (:data:`ANSWERED_HERE`):
  ApiVersions, Metadata (Kafka's topics, leaders, leader epochs and ISRs,
  read where zkcoord reads them: ZooKeeper's /brokers in ZooKeeper mode,
  Kafka's Metadata in KRaft mode, each broker at its relay's address, and
  the gateway itself under its own id), DescribeCluster (the same brokers),
  SASL, FindCoordinator (the gateway itself) and the group and offset APIs,
  through the bridge
  (broker/groups/bridge.py) into the zkcoord coordinators.
- **Fences.** Every fetch passes through a gateway, so the bridge's fetch
  fences hold as at embedded brokers: a fenced client's Fetch is answered
  by the gateway, NOT_LEADER_OR_FOLLOWER, instead of being relayed.
- **The gateway's own listener** (its id, in FindCoordinator) leads
  nothing: Produce, Fetch and ListOffsets there are answered
  NOT_LEADER_OR_FOLLOWER, on which every client refreshes its metadata and
  goes to the leader (a relay); InitProducerId COORDINATOR_NOT_AVAILABLE
  (retriable: the client asks another node); CreateTopics NOT_CONTROLLER
  (the client asks Kafka's controller, through its relay).
"""

from __future__ import annotations

import logging
from typing import Mapping, Optional

from kazoo.exceptions import NoNodeError

from zkcoord.broker import protocol
from zkcoord.broker.handlers import BrokerAddress, MetadataCache, PartitionInfo
from zkcoord.broker.zkstate import ZkState
from zkcoord.errors import ZkcoordError
from zkcoord.fetch.cluster import topic_id_of

log = logging.getLogger(__name__)

# What the gateway answers itself at every listener, its relays' included.
# DescribeCluster too: Kafka's answer names its brokers at their own addresses.
ANSWERED_HERE = frozenset({protocol.API_KEY_API_VERSIONS, protocol.API_KEY_METADATA, protocol.API_KEY_SASL_HANDSHAKE,
                           protocol.API_KEY_SASL_AUTHENTICATE, protocol.API_KEY_CONSUMER_GROUP_HEARTBEAT,
                           protocol.API_KEY_DESCRIBE_CLUSTER, *protocol.GROUP_APIS})
# Kafka's APIs that act on Kafka's own groups (and its transactions' commits
# to them): relayed, they would describe, delete or commit to a Kafka group
# of the same name, not the zkcoord group. Neither offered nor relayed.
NOT_OFFERED = frozenset({
    25,  # AddOffsetsToTxn
    28,  # TxnOffsetCommit
    42,  # DeleteGroups
    47,  # OffsetDelete
    69,  # ConsumerGroupDescribe
    *range(76, 80),  # ShareGroupHeartbeat, ShareGroupDescribe, ShareFetch, ShareAcknowledge
    88, 89,  # StreamsGroupHeartbeat, StreamsGroupDescribe
    *range(90, 93),  # DescribeShareGroupOffsets, AlterShareGroupOffsets, DeleteShareGroupOffsets
})
NONE = 0
# The newest versions a relay lets its clients use of the APIs whose answers
# may name one of Kafka's brokers. From Produce 10 and Fetch 16 on (KIP-951),
# Kafka's NOT_LEADER_OR_FOLLOWER answer names the partition's new leader
# with its endpoint (NodeEndpoints: node id, host, port), and the clients
# take it (librdkafka from 2.4, Java from 3.7): relayed byte for byte, it
# would move the client's node to Kafka's own address, where the client then
# asks for its group's coordinator (Kafka names itself) and joins a Kafka
# group. Seen with librdkafka 2.16 after a leader was killed under it, in
# ZooKeeper mode: it lost its zkcoord coordinator and Kafka 3.9 refused its
# JoinGroup (INVALID_SESSION_TIMEOUT: 4 s is below Kafka's minimum). The
# versions below carry no endpoint; a client told of a moved leader asks the
# gateway's Metadata for it, as before KIP-951. Relays never rewrite answers.
WITHOUT_KAFKAS_ENDPOINTS = {protocol.API_KEY_PRODUCE: 9, protocol.API_KEY_FETCH: 15}


class GatewayError(ZkcoordError):
    """The Kafka cluster is not one a gateway can stand beside: none to be
    seen, or a broker with the gateway's id."""


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
        topic_id = topic_id_of(topic)
        if topic_id is not None:
            cache.topic_ids[topic.name] = topic_id
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
    >>> [p[:21] for p in problems(MetadataCache(), 7)]
    ['no Kafka broker is to']
    >>> [p[:26] for p in problems(kafka, 1)]
    ['Kafka broker 1 has the gat']
    """
    found = []
    if not kafka.brokers:
        found.append("no Kafka broker is to be seen (ZooKeeper mode: Kafka's zookeeper.connect must be this "
                     "server's connect string with its chroot; KRaft mode: give --kafka-bootstrap)")
    if node_id in kafka.brokers:
        found.append(f"Kafka broker {node_id} has the gateway's node id (its server id): clients would take "
                     f"the two for one node; give the server an id no Kafka broker has")
    return found


def with_gateway(kafka: MetadataCache, node_id: int, address: BrokerAddress,
                 relays: Mapping[int, BrokerAddress]) -> MetadataCache:
    """What the gateway's Metadata answers say: Kafka's topics and leaders,
    each Kafka broker at its relay's address (``relays``; one without a
    relay is left out, so that no client is sent to Kafka itself), and the
    gateway as a broker that leads nothing. Kafka's controller stays the
    controller (the lowest Kafka broker id if Kafka did not say).

    >>> kafka = MetadataCache(brokers={1: BrokerAddress("k1", 9092, "r1"), 2: BrokerAddress("k2", 9092, None)},
    ...                       controller=2)
    >>> seen = with_gateway(kafka, 7, BrokerAddress("gw", 9000, None), {1: BrokerAddress("gw", 9001, "r1")})
    >>> sorted((node, a.host, a.port) for node, a in seen.brokers.items()), seen.controller
    ([(1, 'gw', 9001), (7, 'gw', 9000)], 2)
    """
    brokers = {node: relays[node] for node in kafka.brokers if node in relays}
    controller = kafka.controller if kafka.controller is not None else min(kafka.brokers, default=None)
    brokers[node_id] = address
    return MetadataCache(brokers=brokers, topics=kafka.topics, topic_ids=kafka.topic_ids,
                         cluster_id=kafka.cluster_id, controller=controller)


# -- what a relay does with a request -------------------------------------------------------


def api_key(frame: bytes) -> int:
    """The API key of a request frame (without its size)."""
    return int.from_bytes(frame[0:2], "big", signed=True)


def client_id(frame: bytes) -> Optional[str]:
    """The client id of a request frame: every request header from version 1
    on has it after the key, version and correlation id (a nullable string)."""
    size = int.from_bytes(frame[8:10], "big", signed=True)
    if size < 0 or len(frame) < 10 + size:
        return None
    return bytes(frame[10:10 + size]).decode("utf-8", "replace")


def relayed(frame: bytes) -> bool:
    """Whether a relay sends the request on to its Kafka broker (what it
    does not, it answers, or refuses as a broker refuses an unknown API)."""
    key = api_key(frame)
    return key not in ANSWERED_HERE and key not in NOT_OFFERED


def relay_api_versions(ours, kafka_answer: Optional[bytes]):
    """The ApiVersions answer of a gateway's listeners: Kafka's versions of
    what a relay sends on (so that a client may use every API Kafka offers
    through it, OffsetForLeaderEpoch among them), the gateway's of what it
    answers itself (:data:`ANSWERED_HERE`), none newer than
    :data:`WITHOUT_KAFKAS_ENDPOINTS` allows. ``ours``: the gateway's own
    answer to the request; ``kafka_answer``: Kafka's answer to the same
    request, a response frame without its size (None: no Kafka broker
    answered). Kafka's that cannot be read (or an error, such as a version
    it refused) leaves ``ours`` as it is, capped.

    >>> from zkcoord.broker.protocol import API_KEY_FETCH, API_KEY_METADATA, API_KEY_PRODUCE, api_versions_response
    >>> kafka = api_versions_response(3)
    >>> kafka.api_keys = [type(k)(api_key=k.api_key, min_version=4, max_version=17) for k in kafka.api_keys]
    >>> kafka.api_keys += [type(kafka.api_keys[0])(api_key=key, min_version=0, max_version=4) for key in (23, 69)]
    >>> kafka.with_header(correlation_id=5)
    >>> answer = relay_api_versions(api_versions_response(3), bytes(kafka.encode(header=True)))
    >>> {k.api_key: (k.min_version, k.max_version) for k in answer.api_keys
    ...  if k.api_key in (API_KEY_PRODUCE, API_KEY_FETCH, API_KEY_METADATA, 23, 69)}
    {0: (4, 9), 1: (4, 15), 3: (0, 12), 23: (0, 4)}
    """
    kafka = None
    if kafka_answer is not None:
        try:
            # ApiVersions answers with header version 0 (the correlation id alone), whatever its version.
            kafka = type(ours).decode(kafka_answer[4:], version=ours.API_VERSION)
        except Exception as exc:  # the library raises many types on bytes it cannot read
            log.info("Kafka's ApiVersions answer unread (%s): the gateway's own is given", exc)
    versions = {k.api_key: k for k in ours.api_keys}
    if kafka is not None and kafka.error_code == NONE:
        versions = {k.api_key: k for k in kafka.api_keys if k.api_key not in ANSWERED_HERE | NOT_OFFERED}
        versions.update({k.api_key: k for k in ours.api_keys if k.api_key in ANSWERED_HERE})
    ours.api_keys = [_without_kafkas_endpoints(versions[key]) for key in sorted(versions)]
    return ours


def _without_kafkas_endpoints(offered):
    """An ApiVersions entry capped at :data:`WITHOUT_KAFKAS_ENDPOINTS` (the
    oldest version, if even that is newer: Kafka dropped the versions
    without endpoints; none is known to)."""
    cap = WITHOUT_KAFKAS_ENDPOINTS.get(offered.api_key)
    if cap is None or offered.max_version <= cap:
        return offered
    return type(offered)(api_key=offered.api_key, min_version=offered.min_version,
                         max_version=max(cap, offered.min_version))


def answered(frame: bytes) -> bool:
    """Whether Kafka answers the request: all but a Produce with acks=0."""
    if api_key(frame) != protocol.API_KEY_PRODUCE:
        return True
    request = protocol.decode_request(frame)  # ProtocolError: the connection closes, as for any bad frame
    return getattr(request, "acks", 1) != 0


class KafkaView:
    """Where a gateway reads the Kafka cluster: ``watch`` (a
    KafkaClusterWatch, KRaft mode) if given, else ZooKeeper's /brokers
    through ``zkstate`` (ZooKeeper mode, the chroot shared with Kafka),
    which never writes a partition's state (Kafka's controller does)."""

    def __init__(self, zkstate: ZkState, watch=None, on_change=None):
        """``on_change()``: called after each of ``watch``'s reads (ZooKeeper's
        watches call the ZkState's own wake)."""
        self._zkstate = zkstate
        self._watch = watch
        if watch is not None and on_change is not None:
            watch.on_read(on_change)
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
        """A client asked for metadata: read Kafka's again soon (leaders may
        have moved; in ZooKeeper mode the caller reads ZooKeeper again, whose
        partition states no watch follows)."""
        if self._watch is not None:
            self._watch.refresh()

    def check(self, kafka: MetadataCache, node_id: int) -> None:
        """Raise GatewayError if Kafka is not one to stand beside."""
        found = problems(kafka, node_id)
        if found:
            raise GatewayError("the gateway cannot serve beside this Kafka cluster: " + "; ".join(found))

    def watch_problems(self, kafka: MetadataCache, node_id: int) -> None:
        """Log, once each time they appear, problems arising while serving
        (Kafka's brokers all gone, one of them taking the gateway's id)."""
        found = tuple(problems(kafka, node_id))
        for problem in found:
            if problem not in self._said:
                log.error("gateway %d: %s", node_id, problem)
        self._said = found
