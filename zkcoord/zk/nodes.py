"""The ZooKeeper nodes that several parts of zkcoord read, one reader each:
the live brokers (/brokers/ids), the zkcoord servers (/zkcoord/servers), a
group's owners and committed offsets in Kafka 0.8's layout
(/consumers/<group>/owners and /offsets), the topics and their partitions'
replicas (/brokers/topics), the cluster id (/cluster/id,
which the first broker or server to start creates), and the groups' states
the coordinators persist (/zkcoord/groups/<group>/state, with its chunks
when it is split).

Each reader owns what every caller must meet alike. A parent that does not
exist yet reads as empty. A node listed but gone before it is read is left
out (it has left; a watch on the listing fires for it). A name or data that
does not fit the layout (zk/layout/) is logged and left out, because one
broker's or server's bad registration must not hide the others; a group's
owners and offsets take ``strict`` instead: True (the default, for tools and
the Spark source) raises the LayoutError, since a committed offset that
cannot be read must not quietly read as none (its partition would start
over from the reset policy); the coordinator passes False and carries on
with the rest of the group. A group's state takes ``strict`` too: the
coordinator keeps one it cannot read as None, and fences that group whole.

The readers use only kazoo's client calls, so they serve a threaded client
(the Spark driver, tools, tests) and a gevent one (servers, brokers) alike.
``watch`` is set on the listing of brokers or servers (and, while the
parent is absent, on its creation), so a node that comes or goes fires it;
``watch_data`` sets it on every node read as well, so a registration that
changes fires it too.
"""

from __future__ import annotations

import logging
import uuid
from typing import TYPE_CHECKING, Callable, Iterable, NamedTuple, Optional

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

if TYPE_CHECKING:  # only named here: importing kazoo.client loads ssl, which a command
    # that gevent patches must not have loaded before it patches
    from kazoo.client import KazooClient

from zkcoord.records import TopicPartition
from zkcoord.zk import layout
from zkcoord.zk.reads import KEEP, RAISE, SKIP, read_nodes

log = logging.getLogger(__name__)


# -- /brokers/ids -----------------------------------------------------------------------


def broker_ids(zk: KazooClient, *, watch: Optional[Callable] = None) -> list[int]:
    """The ids of the brokers registered now, ascending."""
    ids = []
    for name in _children(zk, layout.BROKER_IDS, watch):
        path = f"{layout.BROKER_IDS}/{name}"
        try:
            ids.append(_number(path, layout.broker_path))
        except layout.LayoutError as exc:
            _misfit(path, exc, strict=False)
    return sorted(ids)


def read_brokers(zk: KazooClient, *, watch: Optional[Callable] = None,
                 watch_data: bool = False) -> dict[int, layout.BrokerRegistration]:
    """Every registered broker's registration, by id, ascending. A
    registration that names no endpoint says nowhere to reach its broker,
    so it is unreadable like one that is not JSON."""
    paths = {broker_id: layout.broker_path(broker_id) for broker_id in broker_ids(zk, watch=watch)}
    return read_nodes(zk, paths, _decode_broker, "broker", watch=watch if watch_data else None)


def broker_addresses(zk: KazooClient, protocol: str = "PLAINTEXT", *, watch: Optional[Callable] = None) -> list[str]:
    """"host:port" of every registered broker, at its endpoint speaking
    ``protocol`` (:func:`zkcoord.zk.layout.client_protocol`: what the reader speaks)."""
    return ["%s:%d" % registration.address_for(protocol) for registration in read_brokers(zk, watch=watch).values()]


def _decode_broker(broker_id: int, data: bytes) -> layout.BrokerRegistration:
    registration = layout.decode_broker(broker_id, data)
    try:
        registration.plaintext_address()
    except layout.LayoutError as exc:  # it names no endpoint
        raise layout.LayoutError(f"{layout.broker_path(broker_id)}: {exc}") from None
    return registration


# -- /cluster/id -----------------------------------------------------------------------


def cluster_id(zk: KazooClient) -> str:
    """The cluster's id, as ZooKeeper-mode Kafka keeps it. The first broker or
    server to ask creates it from a random UUID; one that loses that race
    reads the winner's. A node that does not fit Kafka's format raises
    LayoutError: the id is the cluster's identity, so no reader guesses one."""
    try:
        data, _ = zk.get(layout.CLUSTER_ID_PATH)
    except NoNodeError:
        created = layout.kafka_uuid(uuid.uuid4().bytes)
        try:
            zk.create(layout.CLUSTER_ID_PATH, layout.encode_cluster_id(created), makepath=True)
            return created
        except NodeExistsError:
            data, _ = zk.get(layout.CLUSTER_ID_PATH)
    return layout.decode_cluster_id(data)


# -- /brokers/topics ---------------------------------------------------------------------


def topic_names(zk: KazooClient, *, watch: Optional[Callable] = None) -> list[str]:
    """The topics registered under /brokers/topics, sorted; none while it does not exist."""
    return sorted(_children(zk, layout.BROKER_TOPICS, watch))


class TopicNode(NamedTuple):
    """A /brokers/topics/<topic> node: its partitions' replicas (and topic
    id), and the node's version, which a change of it is made conditional on."""

    assignment: layout.TopicAssignment
    version: int


def read_topic(zk: KazooClient, topic: str, *, watch: Optional[Callable] = None) -> Optional[TopicNode]:
    """/brokers/topics/<topic>, None if there is no such topic. A node that
    does not fit the layout raises LayoutError: a topic's partitions must not
    quietly read as none. ``watch`` is set on the node."""
    try:
        data, stat = zk.get(layout.topic_path(topic), watch=watch)
    except NoNodeError:
        return None
    return TopicNode(layout.decode_topic(topic, data), stat.version)


def ensure_topic_id(zk: KazooClient, topic: str, assignment: layout.TopicAssignment, node_version: int) -> Optional[str]:
    """The topic's id, giving it one if it has none, as Kafka 2.8's controller
    does to older topics: the node is rewritten at version 3, on condition
    that it is still the version read. None if it changed meanwhile: whoever
    changed it, or the next read, settles the id."""
    if assignment.topic_id is not None:
        return assignment.topic_id
    upgraded = layout.new_topic_assignment(assignment.partitions)
    try:
        zk.set(layout.topic_path(topic), layout.encode_topic(upgraded), version=node_version)
    except (BadVersionError, NoNodeError):
        return None
    log.info("topic %s had no topic id: it is now %s", topic, upgraded.topic_id)
    return upgraded.topic_id


# -- /zkcoord/servers -------------------------------------------------------------------


def read_servers(zk: KazooClient, *, watch: Optional[Callable] = None,
                 watch_data: bool = False) -> dict[str, layout.ServerInfo]:
    """Every live zkcoord server's ServerInfo, by server id, in the order of the ids as text."""
    paths = {name: layout.server_path(name) for name in sorted(_children(zk, layout.SERVERS, watch))}
    return read_nodes(zk, paths, layout.decode_server, "server", watch=watch if watch_data else None)


def slots_with_nodes(zk: KazooClient, watch: Optional[Callable] = None) -> list[int]:
    """The slots that have nodes under /zkcoord/slots (1 and up: slot 0's
    nodes are the seed's, elsewhere), within the cluster's count or beyond
    it: a count lowered leaves its higher slots behind. With ``watch``, the
    listing is watched."""
    numbers = (int(child) for child in _children(zk, layout.SLOTS, watch) if child.isascii() and child.isdigit())
    return sorted(slot for slot in numbers if 0 < slot < 2**31)  # anything else is no slot's


def read_slot_epochs(zk: KazooClient) -> dict[int, int]:
    """The epoch of every coordinator slot that has one, by slot: slot 0's
    and those of every slot of :func:`slots_with_nodes` (the members of a
    group in a slot beyond the count have seen its epochs). Many to a
    request (multiRead)."""
    paths = {slot: layout.slot_epoch_path(slot) for slot in [0, *slots_with_nodes(zk)]}
    return read_nodes(zk, paths, lambda slot, data: layout.decode_coordinator_epoch(data, paths[slot]),
                      "coordinator epoch", small=True)


# -- /consumers/<group>/owners and /offsets ---------------------------------------------


def read_owners(zk: KazooClient, group: str, *, strict: bool = True, multi_read: bool = False,
                keep_unreadable: bool = False) -> dict[TopicPartition, Optional[str]]:
    """/consumers/<group>/owners: the consumer id that owns each partition.
    Not ``strict``, a node that does not decode is logged and left out, or
    (``keep_unreadable``) given the owner None: the coordinator, which
    rewrites the owners, then replaces or deletes it.
    ``multi_read``: many nodes to a request (ZooKeeper 3.6 or later, zk/reads.py)."""
    paths = _partitions_under(zk, layout.owners_path(group), lambda topic: layout.owners_path(group, topic),
                              lambda topic, partition: layout.owner_path(group, topic, partition), strict)
    unreadable = RAISE if strict else KEEP if keep_unreadable else SKIP
    return read_nodes(zk, paths, lambda tp, data: layout.decode_owner(data, paths[tp]),
                      f"[group {group}] owner", unreadable=unreadable, small=multi_read)


def read_offsets(zk: KazooClient, group: str, partitions: Optional[Iterable[tuple[str, int]]] = None, *,
                 strict: bool = True, multi_read: bool = False) -> dict[TopicPartition, int]:
    """The group's committed offsets (the next offset to consume) of
    ``partitions`` that have one; without ``partitions``, of every partition
    under /consumers/<group>/offsets."""
    if partitions is None:
        paths = _partitions_under(zk, layout.offsets_path(group), lambda topic: layout.offsets_path(group, topic),
                                  lambda topic, partition: layout.offset_path(group, topic, partition), strict)
    else:
        paths = {TopicPartition(topic, partition): layout.offset_path(group, topic, partition)
                 for topic, partition in partitions}
    return read_nodes(zk, paths, lambda tp, data: layout.decode_offset(data, paths[tp]),
                      f"[group {group}] offset", unreadable=RAISE if strict else SKIP, small=multi_read)


def _partitions_under(zk: KazooClient, root: str, branch: Callable[[str], str],
                      leaf: Callable[[str, int], str], strict: bool) -> dict[TopicPartition, str]:
    """Every ``root/<topic>/<partition>`` node, as {(topic, partition): path};
    ``branch(topic)`` and ``leaf(topic, partition)`` are the layout's paths."""
    paths = {}
    for topic in _children(zk, root):
        try:
            topic_path = branch(topic)  # LayoutError: a name Kafka would refuse as a topic
        except layout.LayoutError as exc:
            _misfit(f"{root}/{topic}", exc, strict)
            continue
        for name in _children(zk, topic_path):
            path = f"{topic_path}/{name}"
            try:
                paths[TopicPartition(topic, _number(path, lambda partition: leaf(topic, partition)))] = path
            except layout.LayoutError as exc:
                _misfit(path, exc, strict)
    return paths


# -- /zkcoord/groups/<group>/state ------------------------------------------------------


def read_group_states(zk: KazooClient, groups: Iterable[str], *,
                      strict: bool = True) -> dict[str, Optional[layout.GroupState]]:
    """The persisted state of each of ``groups`` that has one. A state
    written whole (versions 1 and 2) is its node; a split one (version 3)
    is its manifest and the chunks the manifest names, and only those:
    chunks of a write that did not reach its manifest, or that its writer
    has not deleted yet, are not read. A state that cannot be read (a
    node or chunk that does not decode, a chunk missing or not holding the
    bytes it is named by, a member in two chunks) raises LayoutError if
    ``strict``; otherwise it is logged and given the value None, which the
    coordinator takes as a group to fence whole (core.load)."""
    paths = {group: layout.group_state_path(group) for group in groups}
    unreadable = RAISE if strict else KEEP
    states = read_nodes(zk, paths, lambda group, data: layout.decode_group_state_node(data, paths[group]),
                        "group state", unreadable=unreadable)
    split = {group: node for group, node in states.items() if isinstance(node, layout.GroupStateManifest)}
    chunks = read_nodes(zk, {(group, name): layout.group_state_chunk_path(group, name)
                             for group, manifest in split.items() for name in manifest.chunks},
                        lambda _key, data: data, "group state chunk")
    for group, manifest in split.items():
        try:
            states[group] = layout.assemble_group_state(
                manifest, {name: chunks.get((group, name)) for name in manifest.chunks}, paths[group])
        except layout.LayoutError as exc:
            if strict:
                raise
            log.error("group state of %s unreadable: %s", group, exc)
            states[group] = None
    return states


def read_group_state(zk: KazooClient, group: str) -> Optional[layout.GroupState]:
    """``group``'s persisted state, None if it has none; LayoutError if it cannot be read."""
    return read_group_states(zk, [group]).get(group)


# -- listing --------------------------------------------------------------------------


def _children(zk: KazooClient, parent: str, watch: Optional[Callable] = None) -> list[str]:
    """The children of ``parent``, none if it does not exist. With ``watch``,
    the listing is watched, or, while ``parent`` is absent, its creation."""
    while True:
        try:
            return zk.get_children(parent, watch=watch)
        except NoNodeError:
            if watch is None or zk.exists(parent, watch=watch) is None:
                return []
            # created between the two calls: list it after all


def _number(path: str, path_of: Callable[[int], str]) -> int:
    """The broker id or partition a node is named by. The layout names
    such a node by the number in decimal, so ``path_of(number)`` gives
    ``path`` back; a name that does not ("07", "x") raises LayoutError, as
    ``path_of`` does for a number out of range."""
    name = path.rsplit("/", 1)[1]
    if name.isascii() and name.isdigit() and path_of(int(name)) == path:
        return int(name)
    raise layout.LayoutError(f"{name!r} is not a decimal id")


def _misfit(path: str, exc: layout.LayoutError, strict: bool) -> None:
    if strict:
        raise layout.LayoutError(f"{path}: {exc}") from None
    log.error("%s left out: %s", path, exc)
