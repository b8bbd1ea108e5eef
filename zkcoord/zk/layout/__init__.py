"""The ZooKeeper layout: every path zkcoord reads or writes, and the bytes stored there.

Where Kafka defines a node (broker registrations, topic assignments, partition
state, the 0.8 consumer offsets and owners) the codecs here write the bytes a
ZooKeeper-mode Kafka writes and read every version Kafka ever wrote, so that
Kafka's tools, and tools built for Kafka, read our data and we read theirs. The
nodes that are zkcoord's own are small JSON objects with a ``version`` field;
docs/ZOOKEEPER.md describes all of them.

Everything here is pure: no ZooKeeper session, no clock. Bad input of any kind
raises :class:`LayoutError` (or a subclass) naming the node and the field.

- :mod:`~zkcoord.zk.layout.names`: what may become a path segment (topic names,
  group and server ids, partition, broker and slot numbers), and the errors;
- :mod:`~zkcoord.zk.layout.paths`: every path, built from checked arguments;
- :mod:`~zkcoord.zk.layout.json_codec`: reading a node's JSON with typed field
  access; writing it as Kafka does, keys in the order of Kafka's Scala maps;
- :mod:`~zkcoord.zk.layout.kafka`: the nodes Kafka defines under /brokers, and /cluster/id;
- :mod:`~zkcoord.zk.layout.consumers`: Kafka 0.8 consumer offsets and owners;
- :mod:`~zkcoord.zk.layout.zkcoord_nodes`: zkcoord's own nodes (coordinator,
  servers, epochs, slot count, group state and failure);
- :mod:`~zkcoord.zk.layout.history`: a group's rebalance history.

Callers import from this package; names that begin with an underscore are
shared by its modules and are not part of it.

Part of ``zk``, layer 2 of the map in docs/DESIGN.md: it imports the base
modules and ``security``'s types (the ACL and user nodes' codecs).
"""

from zkcoord.zk.layout.names import (
    InvalidGroupId,
    InvalidName,
    InvalidTopicName,
    LayoutError,
    validate_group_id,
    validate_topic_name,
)
from zkcoord.zk.layout.paths import (
    BROKER_IDS,
    BROKER_TOPICS,
    CLUSTER_ID_PATH,
    CONSUMERS,
    FETCH_FENCE_PREFIX,
    FETCH_FENCES,
    PRODUCER_ID_BLOCK_PATH,
    COORDINATOR_EPOCH_PATH,
    COORDINATOR_PATH,
    GROUPS,
    SERVERS,
    SLOTS,
    ZKCOORD_ROOT,
    broker_path,
    group_failure_path,
    group_history_path,
    group_path,
    group_state_chunk_path,
    group_state_chunks_path,
    group_state_path,
    offset_path,
    offsets_path,
    owner_path,
    owners_path,
    partition_state_path,
    partitions_path,
    server_path,
    slot_coordinator_path,
    slot_epoch_path,
    topic_path,
)
from zkcoord.zk.layout.json_codec import encode_json
from zkcoord.zk.layout.kafka import (
    BROKER_VERSION,
    NO_LEADER,
    PARTITION_STATE_VERSION,
    SECURITY_PROTOCOLS,
    TOPIC_VERSION,
    BrokerRegistration,
    ListenerEndpoint,
    client_protocol,
    PRODUCER_ID_BLOCK_SIZE,
    PartitionState,
    ProducerIdBlock,
    ProducerIdsExhausted,
    TopicAssignment,
    kafka_uuid,
    new_topic_assignment,
    parse_kafka_uuid,
    decode_broker,
    decode_cluster_id,
    decode_partition_state,
    decode_producer_id_block,
    decode_topic,
    encode_broker,
    encode_cluster_id,
    encode_partition_state,
    encode_producer_id_block,
    encode_topic,
    next_producer_id_block,
)
from zkcoord.zk.layout.consumers import (
    decode_offset,
    decode_owner,
    encode_offset,
    encode_owner,
)
from zkcoord.zk.layout.history import (
    COMPLETED,
    FAILED,
    MAX_HISTORY_ROUNDS,
    OUTCOMES,
    SUPERSEDED,
    RebalanceRecord,
    decode_history,
    encode_history,
    kept,
)
from zkcoord.zk.layout.zkcoord_nodes import (
    GROUP_STATE_VERSION,
    SPLIT_GROUP_STATE_VERSION,
    GroupFailure,
    FetchFence,
    GroupState,
    GroupStateManifest,
    GroupStateNodes,
    MAX_SLOTS,
    MemberClient,
    ServerInfo,
    assemble_group_state,
    chunk_name,
    decode_coordinator,
    decode_coordinator_epoch,
    decode_fetch_fence,
    decode_group_failure,
    decode_group_state,
    decode_group_state_node,
    decode_server,
    decode_slot_count,
    decode_versioned,
    encode_coordinator,
    encode_coordinator_epoch,
    encode_fetch_fence,
    encode_group_failure,
    encode_group_state,
    encode_group_state_nodes,
    encode_server,
    encode_slot_count,
    slot_of,
    validate_slot_count,
)

__all__ = [
    "InvalidGroupId", "InvalidName", "InvalidTopicName", "LayoutError", "validate_group_id",
    "validate_topic_name",
    "BROKER_IDS", "BROKER_TOPICS", "CLUSTER_ID_PATH", "CONSUMERS", "COORDINATOR_EPOCH_PATH", "COORDINATOR_PATH",
    "PRODUCER_ID_BLOCK_PATH", "FETCH_FENCES", "FETCH_FENCE_PREFIX", "GROUPS", "SERVERS", "SLOTS", "ZKCOORD_ROOT", "broker_path", "group_failure_path", "group_path",
    "group_state_chunk_path", "group_state_chunks_path", "group_state_path", "offset_path", "offsets_path", "owner_path", "owners_path",
    "partition_state_path", "partitions_path", "server_path", "slot_coordinator_path",
    "slot_epoch_path", "topic_path",
    "encode_json",
    "BROKER_VERSION", "NO_LEADER", "PARTITION_STATE_VERSION", "SECURITY_PROTOCOLS", "TOPIC_VERSION",
    "BrokerRegistration", "client_protocol", "ListenerEndpoint", "PartitionState", "PRODUCER_ID_BLOCK_SIZE", "ProducerIdBlock", "ProducerIdsExhausted", "TopicAssignment", "kafka_uuid", "new_topic_assignment", "parse_kafka_uuid",
    "decode_broker", "decode_cluster_id", "decode_partition_state", "decode_topic", "encode_broker",
    "encode_cluster_id", "encode_partition_state", "encode_topic",
    "decode_producer_id_block", "encode_producer_id_block", "next_producer_id_block",
    "decode_offset", "decode_owner", "encode_offset", "encode_owner",
    "GROUP_STATE_VERSION", "SPLIT_GROUP_STATE_VERSION", "GroupFailure", "GroupState", "GroupStateManifest",
    "GroupStateNodes", "MemberClient", "ServerInfo", "assemble_group_state", "chunk_name", "decode_coordinator",
    "decode_coordinator_epoch", "decode_group_failure", "decode_group_state", "decode_group_state_node",
    "decode_server", "decode_slot_count", "decode_versioned", "encode_coordinator", "encode_coordinator_epoch",
    "encode_group_failure", "encode_group_state", "encode_group_state_nodes", "encode_server", "encode_slot_count",
    "MAX_SLOTS", "slot_of", "validate_slot_count",
    "FetchFence", "decode_fetch_fence", "encode_fetch_fence",
    "COMPLETED", "FAILED", "MAX_HISTORY_ROUNDS", "OUTCOMES", "SUPERSEDED", "RebalanceRecord", "decode_history",
    "encode_history", "group_history_path", "kept",
]
