"""The coordinator's ZooKeeper I/O: reads, and writes fenced by the coordinator epoch.

Every write the coordinator makes goes through :meth:`CoordinatorStore.commit`,
a ZooKeeper multi-operation that first checks the version of the epoch node
this coordinator wrote when it was elected. A newer coordinator bumps that
node before it writes anything, so a deposed coordinator's writes fail as a
whole with :class:`Deposed`, and nothing it sends after that is obeyed.

A coordinator that won an election also checks, in the same multi, that its
election node is still there as it made it (every creation of that node
bumps the epoch with it, so there with our epoch current, it is ours).
Without that check a write could land after the node went, deleted by hand
or with its session (a write sent on the client's next session), when the
coordinator of another slot may already have taken one of its groups (the
slot count changed: slots.py); and the proof of office, which is such a
write, would keep in office a coordinator whose node was deleted by hand
until a successor claimed the epoch.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Callable, Iterable, Mapping, Optional

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NoNodeError, NodeExistsError, RolledBackError

from zkcoord.coordinator.actions import Deposed
from zkcoord.errors import ZkcoordError
from zkcoord.records import TopicPartition
from zkcoord.zk import layout
from zkcoord.zk.layout import slot_of, validate_slot_count
from zkcoord.zk.nodes import read_group_states, read_offsets, read_owners
from zkcoord.zk.session import session_id

log = logging.getLogger(__name__)

# ZooKeeper refuses a request larger than its jute.maxbuffer (1 MB by
# default) and drops the connection that sent it, so a write of more is
# split into multi-operations of at most this much, each fenced on its own.
# Offsets and owners are many small nodes; the core redoes a write that
# failed half way whole: it reads the offsets again (creates and sets are
# relearned) and the owners too.
MAX_MULTI_BYTES = 512 * 1024
# A single node cannot be split: one larger than this is refused here, with
# a clear error, before it can cost the connection. A group's state grows
# past it (1 MB at about 5,700 members with their clients and proofs), so it
# is then split into chunks of members (write_group_state); only a member
# whose own partitions take that much is still refused.
MAX_NODE_BYTES = 1_000_000
# The largest a chunk of a split group state is made, but for a member that
# takes more alone: two chunks go in one multi-operation.
STATE_CHUNK_BYTES = 256 * 1024
# What ZooKeeper adds to a path and its data per operation of a multi (header, lengths, version, ACL).
MULTI_OP_OVERHEAD_BYTES = 64
# An election node's data version: created with its data, never set.
ELECTION_NODE_VERSION = 0


@dataclass(frozen=True)
class Epoch:
    """The coordinator epoch this server holds, and the znode version that fences its writes."""

    number: int
    fence_version: int
    # The ZooKeeper session that claimed it (and won the election with it).
    # The office is proven only on that session: the epoch check alone would
    # pass on a later session of the same client, whose election node went
    # with the first, while a successor may already be elected.
    session_id: int


class GroupHasOffsets(ZkcoordError):
    """A group to be forgotten has committed offsets: they are kept, and so is the group."""


class NodeTooLarge(ZkcoordError):
    """A node's data exceeds what ZooKeeper accepts in one request."""


class CoordinatorStore:
    """The ZooKeeper I/O of the coordinator of one slot (coordinator/slots.py):
    its epoch fences its writes, and it reads the state of its slot's groups
    only. Slot 0 of 1, the default, is the seed's single coordinator."""

    def __init__(self, zk: KazooClient, server_id: int, slot: int = 0, slots: int = 1):
        if not 0 <= slot < validate_slot_count(slots):
            raise ValueError(f"slot {slot} is not one of {slots}")
        self.zk = zk
        self.server_id = server_id
        self.slot = slot
        self.slots = slots
        self.epoch_path = layout.slot_epoch_path(slot)
        self.epoch: Optional[Epoch] = None
        # The election node every fenced operation checks, once won (None: a
        # store's own tests, which claim an epoch without an election).
        self.election_path: Optional[str] = None

    # -- election --------------------------------------------------------------------

    def claim_epoch(self, elected_as: Optional[bytes] = None, above: int = 0) -> Optional[Epoch]:
        """Bump the slot's coordinator epoch (compare-and-set), to above
        ``above`` too (the highest epoch of any slot, when groups may have
        come from other slots: slots.py).

        With ``elected_as`` (the election node's data) the election is won
        in the same multi-operation: the slot's ephemeral election node is
        created and the epoch bumped together, or neither. None means
        another server holds the election. No claim can then be made on a
        session that does not hold the election (a takeover whose session
        ended while it ran, its next call sent on the new one), which would
        fence out the rightful coordinator while its members still obey it.
        Without ``elected_as`` (a store's own tests) the epoch alone is bumped."""
        election = layout.slot_coordinator_path(self.slot)
        self.zk.ensure_path(self.epoch_path.rsplit("/", 1)[0])
        self.zk.ensure_path(election.rsplit("/", 1)[0])
        while True:
            try:
                data, stat = self.zk.get(self.epoch_path)
            except NoNodeError:
                try:
                    self.zk.create(self.epoch_path, layout.encode_coordinator_epoch(0))
                except NodeExistsError:
                    pass
                continue
            try:
                number = max(layout.decode_coordinator_epoch(data, self.epoch_path), above) + 1
            except layout.LayoutError as exc:
                # Guessing an epoch could let two coordinators share one.
                raise Deposed(f"refusing to claim an epoch: {exc}") from None
            claimed_on = session_id(self.zk)
            transaction = self.zk.transaction()
            if elected_as is not None:
                transaction.create(election, elected_as, ephemeral=True)
            transaction.set_data(self.epoch_path, layout.encode_coordinator_epoch(number), version=stat.version)
            results = transaction.commit()
            if elected_as is not None and isinstance(results[0], NodeExistsError):
                return None  # another server won the election
            failure = next((r for r in results if isinstance(r, Exception) and not isinstance(r, RolledBackError)),
                           None)
            if isinstance(failure, BadVersionError):
                continue  # someone else moved the epoch; read again
            if failure is not None:
                raise failure
            self.epoch = Epoch(number, results[-1].version, claimed_on)
            if elected_as is not None:
                self.election_path = election
            if session_id(self.zk) != claimed_on:
                # Sent on a later session than it was asked on: whatever it
                # won is that session's, and this store's proofs would fail.
                raise Deposed(f"the ZooKeeper session changed while slot {self.slot}'s epoch was claimed")
            return self.epoch

    # -- reads -------------------------------------------------------------------------

    def owners(self, group: str) -> dict[TopicPartition, Optional[str]]:
        """The group's owner nodes. One that cannot be read is logged and
        has the owner None: the coordinator goes on with the rest of the
        group, and its next round rewrites or deletes that node (an offset
        that cannot be read, below, is left out)."""
        return read_owners(self.zk, group, strict=False, multi_read=True, keep_unreadable=True)

    def offsets(self, group: str, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """Committed offsets of ``partitions`` that have one."""
        return read_offsets(self.zk, group, partitions, strict=False, multi_read=True)

    def group_states(self) -> dict[str, Optional[layout.GroupState]]:
        """Every persisted state of this slot's groups (None: unreadable, or
        split into chunks that do not add up: the core fences such a group
        whole), read in bounded parallel: a takeover may find thousands."""
        return read_group_states(self.zk, [name for name in sorted(self._children(layout.GROUPS))
                                           if self.slots == 1 or slot_of(name, self.slots) == self.slot],
                                 strict=False)

    def _children(self, path: str) -> list[str]:
        try:
            return self.zk.get_children(path)
        except NoNodeError:
            return []

    # -- fenced writes ------------------------------------------------------------------

    def commit(self, operations: list[tuple[str, str, bytes | None]]) -> None:
        """Apply ``operations``, fenced by this coordinator's epoch: atomically
        up to MAX_MULTI_BYTES, in several multi-operations beyond.

        Each operation is ``("create" | "set" | "delete", path, data)``. Parents
        of created nodes are made first (not fenced: empty containers).
        """
        if not operations:
            return
        for _, path, data in operations:
            if data is not None and len(data) > MAX_NODE_BYTES:
                raise NodeTooLarge(f"{path}: {len(data)} bytes, more than ZooKeeper takes in one request "
                                   f"({MAX_NODE_BYTES})")
        for parent in sorted({path.rsplit("/", 1)[0] for op, path, _ in operations if op == "create"}):
            self.zk.ensure_path(parent)
        for chunk in split_operations(operations):
            self._fenced(chunk)

    def prove_office(self) -> None:
        """An empty fenced write: it succeeds only if our session is alive
        when the leader takes it and our epoch is still the current one."""
        self._fenced([])

    def prove_office_async(self, settled: Callable[[Optional[BaseException]], None]) -> None:
        """:meth:`prove_office` without waiting: ``settled`` is called with
        None or the error once ZooKeeper has answered, at once from the
        ZooKeeper client's own greenlet where its handler allows
        (zk/gevent_handler.py), and perhaps before this returns."""

        def answered(result) -> None:
            try:
                self._fence_outcome(result.get(block=False))
            except Exception as exc:  # Deposed, or kazoo's connection errors
                settled(exc)
            else:
                settled(None)

        try:
            result = self._fenced_transaction([]).commit_async()
        except Exception as exc:
            settled(exc)
            return
        at_once = getattr(result, "at_once", None)
        (at_once or result.rawlink)(answered)

    def _fenced(self, operations: list[tuple[str, str, bytes | None]]) -> None:
        # The caller chose create or set from what it read; a node it could
        # not read (unreadable data is logged and left out) or that another
        # process made or removed since fails the whole multi. Under our
        # fence the node is ours to write: redo that operation as what the
        # node's existence calls for, one correction per round.
        for _ in range(len(operations) + 1):
            results = self._fenced_transaction(operations).commit()
            corrected = _corrected(operations, results[self._checks:])
            if corrected is None:
                break
            operations = corrected
        self._fence_outcome(results)

    def _fenced_transaction(self, operations: list[tuple[str, str, bytes | None]]):
        if self.epoch is None:
            raise Deposed("this server holds no coordinator epoch")
        transaction = self.zk.transaction()
        transaction.check(self.epoch_path, self.epoch.fence_version)
        if self.election_path is not None:
            transaction.check(self.election_path, ELECTION_NODE_VERSION)
        for op, path, data in operations:
            if op == "create":
                transaction.create(path, data)
            elif op == "set":
                transaction.set_data(path, data)
            elif op == "delete":
                transaction.delete(path)
            else:
                raise ValueError(f"unknown operation {op!r}")
        return transaction

    def _fence_outcome(self, results: list) -> None:
        failures = [r for r in results if isinstance(r, Exception) and not isinstance(r, RolledBackError)]
        if not failures:
            if session_id(self.zk) != self.epoch.session_id:
                raise Deposed(f"the ZooKeeper session that claimed epoch {self.epoch.number} of slot {self.slot} "
                              "has ended")
            return
        slot = f" of slot {self.slot}" if self.slots > 1 else ""
        if isinstance(results[0], BadVersionError):
            raise Deposed(f"coordinator epoch {self.epoch.number}{slot} is no longer current")
        if self.election_path is not None and isinstance(results[1], (NoNodeError, BadVersionError)):
            raise Deposed(f"the election node of coordinator epoch {self.epoch.number}{slot} "
                          f"({self.election_path}) is gone or not as it was won")
        raise failures[0]

    @property
    def _checks(self) -> int:
        """How many checks open each fenced multi-operation: the epoch's, and the election node's once won."""
        return 1 if self.election_path is None else 2

    def upsert(self, path: str, data: bytes, exists: bool) -> tuple[str, str, bytes]:
        return ("set" if exists else "create", path, data)

    def write_offsets(self, group: str, offsets: Mapping[TopicPartition, int], existing: set[TopicPartition]) -> None:
        self.commit(
            [
                self.upsert(layout.offset_path(group, t, p), layout.encode_offset(o), (t, p) in existing)
                for (t, p), o in sorted(offsets.items())
            ]
        )

    def write_owners(
        self, group: str, owners: Mapping[TopicPartition, str], recorded: Mapping[TopicPartition, Optional[str]]
    ) -> None:
        """Make /consumers/<group>/owners say ``owners``, given what it said (``recorded``)."""
        ops = [
            self.upsert(layout.owner_path(group, t, p), layout.encode_owner(m), (t, p) in recorded)
            for (t, p), m in sorted(owners.items())
            if recorded.get((t, p)) != m
        ]
        ops += [("delete", layout.owner_path(group, t, p), None) for (t, p) in sorted(set(recorded) - set(owners))]
        self.commit(ops)

    def write_group_state(self, group: str, state: layout.GroupState, exists: bool) -> None:
        """Write ``state`` as one node while it fits, else as chunks and a
        manifest naming them (layout.encode_group_state_nodes), ``exists``
        saying whether the state's node does.

        A split state outgrows one multi-operation, so it cannot be written
        atomically; the manifest is what makes it so for a reader. The
        chunks go first, each under the digest of its bytes, so none that a
        manifest names is ever overwritten with other bytes; the node at
        the state's path, last, switches readers from the whole previous
        state to the whole new one; then the chunks it no longer names are
        deleted. A write cut short (a failure, a successor's fence) leaves
        the previous state whole, and chunks nobody names, which the next
        write deletes. A chunk the previous state shares is not written again."""
        nodes = layout.encode_group_state_nodes(state, node_bytes=MAX_NODE_BYTES, chunk_bytes=STATE_CHUNK_BYTES)
        chunks = layout.group_state_chunks_path(group)
        present = set(self._children(chunks))
        self.commit([("create", layout.group_state_chunk_path(group, name), data)
                     for name, data in nodes.chunks.items() if name not in present]
                    + [self.upsert(layout.group_state_path(group), nodes.state, exists)]
                    + [("delete", f"{chunks}/{name}", None) for name in sorted(present - set(nodes.chunks))])

    def forget_group(self, group: str, offsets: bool = False) -> None:
        """Delete, fenced and children first, what the coordinator wrote of a
        group it forgets: /zkcoord/groups/<group> and, in /consumers/<group>,
        the owners and the offsets directories. Its committed offsets only
        if ``offsets``: otherwise, with one, nothing is deleted
        (GroupHasOffsets). /consumers/<group> itself goes only if nothing
        else is in it (a Kafka 0.8 consumer's ids, say)."""
        consumers = layout.group_path(group)
        offsets_path = layout.offsets_path(group)
        doomed = self._subtree(layout.group_state_path(group).rsplit("/", 1)[0])
        for child in ("owners", "offsets"):
            doomed += self._subtree(f"{consumers}/{child}")
        if not offsets and any(path.count("/") > offsets_path.count("/") + 1
                               for path in doomed if path.startswith(offsets_path + "/")):
            raise GroupHasOffsets(f"group {group} has committed offsets; kept")
        if set(self._children(consumers)) <= {"owners", "offsets"} and self.zk.exists(consumers) is not None:
            doomed.append(consumers)
        self.commit([("delete", path, None) for path in doomed])

    def _subtree(self, path: str) -> list[str]:
        """``path`` and every node under it, children before their parent ([] if it does not exist)."""
        if self.zk.exists(path) is None:
            return []
        nodes: list[str] = []
        for child in sorted(self._children(path)):
            nodes += self._subtree(f"{path}/{child}")
        return nodes + [path]

    def write_group_failure(self, group: str, failure: Optional[layout.GroupFailure]) -> None:
        """Record why the group's rebalance gave up, or clear the record (None)."""
        path = layout.group_failure_path(group)
        exists = self.zk.exists(path) is not None
        if failure is None:
            if exists:
                self.commit([("delete", path, None)])
            return
        self.commit([self.upsert(path, layout.encode_group_failure(failure), exists)])

    def append_rebalance_history(self, group: str, records: Iterable[layout.RebalanceRecord], rounds: int) -> None:
        """Append ``records`` to the group's rebalance history, keeping its
        last ``rounds``. Read and written again whole: the core writes one
        group's history once at a time, and the fence keeps any other
        coordinator out. A node that cannot be read (not ours, or of a
        version to come) is replaced: a history is for operators, never
        for a decision."""
        path = layout.group_history_path(group)
        try:
            older = layout.decode_history(self.zk.get(path)[0], path)
            exists = True
        except NoNodeError:
            older, exists = [], False
        except layout.LayoutError as exc:
            log.warning("%s: replaced, unreadable: %s", path, exc)
            older, exists = [], True
        self.commit([self.upsert(path, layout.encode_history(layout.kept(older, records, rounds)), exists)])


def _corrected(operations: list[tuple[str, str, bytes | None]],
               results: list) -> Optional[list[tuple[str, str, bytes | None]]]:
    """``operations`` with the one that failed because the node's existence
    was not what the caller read redone accordingly (a create of a node that
    exists becomes a set, a set of a missing node a create, a delete of a
    missing node goes), or None when no operation failed that way.
    ``results`` are the operations' own, the fence's checks left out."""
    for index, (operation, result) in enumerate(zip(operations, results)):
        op, path, data = operation
        if op == "create" and isinstance(result, NodeExistsError):
            fix = [("set", path, data)]
        elif op == "set" and isinstance(result, NoNodeError):
            fix = [("create", path, data)]
        elif op == "delete" and isinstance(result, NoNodeError):
            fix = []
        else:
            continue
        log.warning("%s: found %s, not as read; doing %s instead", path,
                    "present" if op == "create" else "absent", fix[0][0] if fix else "nothing")
        return operations[:index] + fix + operations[index + 1:]
    return None


def split_operations(operations: list[tuple[str, str, bytes | None]],
                     limit: int = MAX_MULTI_BYTES) -> list[list[tuple[str, str, bytes | None]]]:
    """``operations`` in order, cut into runs of at most ``limit`` bytes each."""
    chunks: list[list] = [[]]
    size = 0
    for operation in operations:
        _, path, data = operation
        cost = len(path.encode()) + len(data or b"") + MULTI_OP_OVERHEAD_BYTES
        if chunks[-1] and size + cost > limit:
            chunks.append([])
            size = 0
        chunks[-1].append(operation)
        size += cost
    return chunks

