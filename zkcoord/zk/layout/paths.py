"""Every ZooKeeper path zkcoord reads or writes: Kafka's, the 0.8 consumers', zkcoord's own.

Each function checks its arguments (names.py) before they become path segments,
so no caller can build a path that escapes its parent.
"""

from __future__ import annotations

from zkcoord.zk.layout.names import (
    InvalidGroupId,
    InvalidName,
    _check_broker_id,
    _check_slot,
    _validate_chunk_name,
    _validate_partition,
    _validate_segment,
    validate_group_id,
    validate_topic_name,
)

BROKER_IDS = "/brokers/ids"
BROKER_TOPICS = "/brokers/topics"
CLUSTER_ID_PATH = "/cluster/id"
PRODUCER_ID_BLOCK_PATH = "/latest_producer_id_block"
CONSUMERS = "/consumers"
COORDINATOR_PATH = "/consumers/coordinator"
SERVERS = "/zkcoord/servers"
COORDINATOR_EPOCH_PATH = "/zkcoord/coordinator_epoch"
GROUPS = "/zkcoord/groups"
SLOTS = "/zkcoord/slots"
# One ephemeral node per stock member whose fetches brokers refuse (docs/DESIGN.md,
# "What a stock member is promised"): written by the broker bridging the member, read by every broker.
FETCH_FENCES = "/zkcoord/fetch_fences"
FETCH_FENCE_PREFIX = f"{FETCH_FENCES}/fence-"  # ZooKeeper appends the sequence number
ZKCOORD_ROOT = "/zkcoord"  # everything of zkcoord's own but the coordinator node under /consumers


def broker_path(broker_id: int) -> str:
    return f"{BROKER_IDS}/{_check_broker_id(broker_id)}"


def topic_path(topic: str) -> str:
    return f"{BROKER_TOPICS}/{validate_topic_name(topic)}"


def partitions_path(topic: str) -> str:
    return f"{topic_path(topic)}/partitions"


def partition_state_path(topic: str, partition: int) -> str:
    return f"{partitions_path(topic)}/{_validate_partition(partition)}/state"


def group_path(group: str) -> str:
    if group == "coordinator":
        # /consumers/coordinator is the elected coordinator's node (seed design),
        # so a group of that name would collide with it.
        raise InvalidGroupId("group id 'coordinator' is reserved")
    return f"{CONSUMERS}/{validate_group_id(group)}"


def owners_path(group: str, topic: str | None = None) -> str:
    base = f"{group_path(group)}/owners"
    return base if topic is None else f"{base}/{validate_topic_name(topic)}"


def owner_path(group: str, topic: str, partition: int) -> str:
    return f"{owners_path(group, topic)}/{_validate_partition(partition)}"


def offsets_path(group: str, topic: str | None = None) -> str:
    base = f"{group_path(group)}/offsets"
    return base if topic is None else f"{base}/{validate_topic_name(topic)}"


def offset_path(group: str, topic: str, partition: int) -> str:
    return f"{offsets_path(group, topic)}/{_validate_partition(partition)}"


def server_path(server_id: str) -> str:
    return f"{SERVERS}/{_validate_segment(server_id, 'server id', InvalidName)}"


def group_failure_path(group: str) -> str:
    """Present while the group's last rebalance gave up after its retries."""
    group_path(group)
    return f"{GROUPS}/{group}/failure"


def group_history_path(group: str) -> str:
    """The group's last rebalance rounds, oldest first (history.py)."""
    group_path(group)
    return f"{GROUPS}/{group}/history"


def slot_coordinator_path(slot: int) -> str:
    """The election node of a coordinator slot. Slot 0's is the seed's
    /consumers/coordinator, so that a cluster of one slot is the seed's layout."""
    return COORDINATOR_PATH if _check_slot(slot) == 0 else f"{SLOTS}/{slot}/coordinator"


def slot_epoch_path(slot: int) -> str:
    """The epoch node that fences a coordinator slot's writes (slot 0: /zkcoord/coordinator_epoch)."""
    return COORDINATOR_EPOCH_PATH if _check_slot(slot) == 0 else f"{SLOTS}/{slot}/epoch"


def group_state_path(group: str) -> str:
    # Kept under /zkcoord rather than /consumers/<group> so that tools walking
    # the 0.8 consumer layout never meet a child they do not know.
    group_path(group)
    return f"{GROUPS}/{group}/state"


def group_state_chunks_path(group: str) -> str:
    """Where the chunks of a group's state live when it is split (version 3)."""
    group_path(group)
    return f"{GROUPS}/{group}/chunks"


def group_state_chunk_path(group: str, name: str) -> str:
    return f"{group_state_chunks_path(group)}/{_validate_chunk_name(name)}"
