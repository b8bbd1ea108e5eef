"""zkcoord's own nodes: the elected coordinator, server registrations, epochs,
the slot count, each group's persisted state and last failure, and the
fetch fences of stock members.

Except the seed design's /consumers/coordinator (a bare server id), each is a
small JSON object with a ``version`` field, read with :func:`decode_versioned`.
A group's state is one such node while it fits in one; a larger one is split
into a manifest and chunks of members (version 3, :func:`encode_group_state_nodes`,
:func:`assemble_group_state`).
"""

from __future__ import annotations

import hashlib
import math
import zlib
from dataclasses import dataclass, field
from typing import Collection, Iterable, Mapping, Optional

from zkcoord.errors import ConfigError
from zkcoord.zk.layout.json_codec import _Fields, _load, _prefix_errors, encode_json
from zkcoord.zk.layout.names import (
    _INT32_MAX,
    _INT64_MAX,
    InvalidName,
    LayoutError,
    _is_int,
    _validate_chunk_name,
    _validate_partition,
    _validate_segment,
    validate_topic_name,
)
from zkcoord.zk.layout.paths import COORDINATOR_EPOCH_PATH, COORDINATOR_PATH, SLOTS, server_path


def decode_versioned(
    data: bytes, where: str, known_version: int, required: Iterable[str] = ()
) -> _Fields:
    """Parse one of our own nodes; check its version and that ``required`` keys are there."""
    fields = _Fields(_load(data, where), where)
    fields.version(known_version)
    for key in required:
        fields.get(key)
    return fields


def encode_coordinator(server_id: str) -> bytes:
    """Content of /consumers/coordinator: the elected server's id (seed design)."""
    _validate_segment(server_id, "server id", InvalidName)
    return server_id.encode("utf-8")


def decode_coordinator(data: bytes, where: str = COORDINATOR_PATH) -> str:
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise LayoutError(f"{where}: expected bytes, got {type(data).__name__}")
    try:
        return _validate_segment(bytes(data).decode("utf-8"), "server id", InvalidName)
    except (UnicodeDecodeError, LayoutError):
        raise LayoutError(f"{where}: {bytes(data)[:40]!r} is not a server id") from None


@dataclass(frozen=True)
class ServerInfo:
    """Where a zkcoord server answers the coordinator protocol (/zkcoord/servers/<id>).

    ``withdrawn``: the coordinator slots the server does not stand for now,
    its takeovers of them having failed (coordinator/slots.py, Candidacy),
    in ascending order; written only when there are some, so that a server
    that withdraws from nothing writes what older servers read."""

    server_id: str
    host: str
    port: int
    version: int = 1
    withdrawn: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        _validate_segment(self.server_id, "server id", InvalidName)
        if not isinstance(self.host, str) or not self.host:
            raise LayoutError(f"server host must be a non-empty string, got {self.host!r}")
        if not _is_int(self.port) or not 1 <= self.port <= 65535:
            raise LayoutError(f"server port must be in [1, 65535], got {self.port!r}")
        if self.version != 1:
            raise LayoutError(f"server info version must be 1, got {self.version!r}")
        if not isinstance(self.withdrawn, tuple) or list(self.withdrawn) != sorted(set(self.withdrawn)) \
                or not all(_is_int(slot) and 0 <= slot <= _INT32_MAX for slot in self.withdrawn):
            raise LayoutError(f"a server's withdrawn slots must be distinct slot numbers in ascending order, "
                              f"got {self.withdrawn!r}")


def encode_server(info: ServerInfo) -> bytes:
    fields = {"version": info.version, "host": info.host, "port": info.port}
    if info.withdrawn:
        fields["withdrawn"] = list(info.withdrawn)
    return encode_json(fields)


def decode_server(server_id: str, data: bytes, where: str | None = None) -> ServerInfo:
    where = where or server_path(server_id)
    fields = decode_versioned(data, where, 1)
    host, port = fields.string("host"), fields.integer("port", 1, 65535)  # errors that name the node
    withdrawn = fields.ints("withdrawn") if fields.has("withdrawn") else ()
    with _prefix_errors(where):
        return ServerInfo(server_id, host, port, withdrawn=withdrawn)


def encode_coordinator_epoch(epoch: int) -> bytes:
    if not _is_int(epoch) or not 0 <= epoch <= _INT64_MAX:
        raise LayoutError(f"coordinator epoch must be an integer in [0, {_INT64_MAX}], got {epoch!r}")
    return encode_json({"version": 1, "epoch": epoch})


def decode_coordinator_epoch(data: bytes, where: str = COORDINATOR_EPOCH_PATH) -> int:
    return decode_versioned(data, where, 1).integer("epoch", 0, _INT64_MAX)


# Slots a cluster may be created with: enough to spread the groups over
# many servers, few enough that every server watches them all cheaply.
MAX_SLOTS = 1024


def validate_slot_count(slots: int) -> int:
    if not isinstance(slots, int) or isinstance(slots, bool) or not 1 <= slots <= MAX_SLOTS:
        raise ConfigError(f"the slot count must be an integer in [1, {MAX_SLOTS}], not {slots!r}")
    return slots


def slot_of(group_id: str, slots: int) -> int:
    """The coordinator slot of ``group_id``, whose election node holds its
    coordinator (coordinator/slots.py): the CRC-32 of its UTF-8 bytes (IEEE 802.3,
    as zlib and every language's standard library compute it) modulo the
    slot count. A client may compute it too; the server never trusts one."""
    return zlib.crc32(group_id.encode("utf-8")) % validate_slot_count(slots)


def encode_slot_count(slots: int) -> bytes:
    """Content of /zkcoord/slots: how many coordinator slots the cluster's
    groups are spread over (coordinator/slots.py), fixed when the first
    server creates it."""
    if not _is_int(slots) or not 1 <= slots <= _INT32_MAX:
        raise LayoutError(f"a slot count must be an integer in [1, {_INT32_MAX}], got {slots!r}")
    return encode_json({"version": 1, "slots": slots})


def decode_slot_count(data: bytes, where: str = SLOTS) -> int:
    return decode_versioned(data, where, 1).integer("slots", 1, _INT32_MAX)


@dataclass(frozen=True)
class MemberClient:
    """Where a member connected from and the client id it gave ("" if none),
    whether its id is a static one (group.instance.id) and its session
    timeout (0: not said), and what kind of client it is (wire.CLIENT_KINDS;
    "": not said), for operators (`zkcoord groups describe`'s HOST and
    CLIENT-ID, the console's members). The last three are written only
    when set: a state without them reads the same to every server."""

    host: str
    client_id: str = ""
    static: bool = False
    session_timeout_ms: int = 0
    kind: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.host, str) or not isinstance(self.client_id, str) or not isinstance(self.kind, str):
            raise LayoutError(f"a member's host, client id and kind must be strings, got {self.host!r}, "
                              f"{self.client_id!r}, {self.kind!r}")
        if not isinstance(self.static, bool) or not _is_int(self.session_timeout_ms) \
                or not 0 <= self.session_timeout_ms <= _INT32_MAX:
            raise LayoutError(f"a member's static flag must be true or false and its session timeout an integer "
                              f"in [0, {_INT32_MAX}], got {self.static!r}, {self.session_timeout_ms!r}")

    def fields(self) -> dict:
        """As a state node holds it."""
        return {"host": self.host, "client_id": self.client_id, **({"static": True} if self.static else {}),
                **({"session_timeout_ms": self.session_timeout_ms} if self.session_timeout_ms else {}),
                **({"kind": self.kind} if self.kind else {})}


@dataclass(frozen=True)
class GroupState:
    """What the coordinator persists per group so that a successor resumes from it.

    ``assignment`` maps a member id to the (topic, partition) pairs it owns in
    ``generation``; ``strategy`` names the assignor that produced it.
    ``lease_ms`` is the longest session timeout among those members: a member
    that loses its coordinator stops fetching within its session timeout, so a
    successor may hand a partition to someone else only after that long, unless
    its holder has come back to it (written as 0 by older states: no lease).
    ``running`` maps a member id to what it ran when the state was written,
    partitions being taken from it included: until they are stopped, a
    successor counts them as that member's too (absent in older states).
    ``clients`` maps a member id to its :class:`MemberClient`, for
    operators only: nothing the coordinator decides reads it (absent in
    older states, and from members written by older servers).
    ``proofs`` maps a member id to the proof of the incarnation it
    registered with (a digest of its secret): a successor lifts that
    member's fence early, and takes its handover, only from a registration
    that shows the same one (absent in older states: nobody proves one).
    """

    generation: int
    strategy: str
    assignment: Mapping[str, tuple[tuple[str, int], ...]]
    lease_ms: int = 0
    running: Mapping[str, tuple[tuple[str, int], ...]] = field(default_factory=dict)
    clients: Mapping[str, MemberClient] = field(default_factory=dict)
    proofs: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        _check_state_head(self.generation, self.strategy, self.lease_ms)
        owned: set[tuple[str, int]] = set()
        for member, pairs in dict(self.assignment).items():
            _validate_member_partitions(member, pairs)
            for pair in pairs:
                if pair in owned:
                    # Exclusive ownership: one partition, one member.
                    raise LayoutError(f"partition {pair[0]}/{pair[1]} is assigned twice")
                owned.add(pair)
        for member, pairs in dict(self.running).items():
            _validate_member_partitions(member, pairs)
        for member, client in dict(self.clients).items():
            if not isinstance(member, str) or not member or not isinstance(client, MemberClient):
                raise LayoutError(f"client of member {member!r} must be a MemberClient, got {client!r}")
        for member, proof in dict(self.proofs).items():
            if not isinstance(member, str) or not member or not isinstance(proof, str) or not proof \
                    or len(proof) > _MAX_PROOF_CHARS:
                raise LayoutError(f"proof of member {member!r} must be a non-empty string of at most "
                                  f"{_MAX_PROOF_CHARS} characters, got {proof!r}")


def _check_state_head(generation, strategy, lease_ms) -> None:
    """The fields of a state that are not keyed by member (a whole state's, a manifest's)."""
    if not _is_int(generation) or not 0 <= generation <= _INT32_MAX:
        raise LayoutError(f"generation must be an integer in [0, {_INT32_MAX}], got {generation!r}")
    if not isinstance(strategy, str) or not strategy:
        raise LayoutError(f"strategy must be a non-empty string, got {strategy!r}")
    if not _is_int(lease_ms) or not 0 <= lease_ms <= _INT32_MAX:
        raise LayoutError(f"lease_ms must be an integer in [0, {_INT32_MAX}], got {lease_ms!r}")


# A proof is a SHA-256 digest in hex; longer is refused, not stored.
_MAX_PROOF_CHARS = 64


def _validate_member_partitions(member, pairs) -> None:
    if not isinstance(member, str) or not member or not isinstance(pairs, tuple):
        raise LayoutError(f"partitions of member {member!r} must be a tuple of (topic, partition)")
    for pair in pairs:
        if not isinstance(pair, tuple) or len(pair) != 2:
            raise LayoutError(f"member {member!r}: {pair!r} is not (topic, partition)")
        validate_topic_name(pair[0])
        _validate_partition(pair[1])


# Version 2 groups each member's partitions by topic and writes ``running``
# only for members that do not run exactly their assignment: a group of
# 20,000 partitions, all running as assigned, takes about 110 KB instead of
# the 660 KB of version 1, which listed every (topic, partition) twice.
GROUP_STATE_VERSION = 2
# Version 3 is a state split over several nodes: a manifest at the state's
# path, naming chunks of members that live beside it. It is written only for
# a state whose version 2 node would be larger than a node may be (ZooKeeper
# takes 1 MB in one request: about 5,700 members with their clients and
# proofs), so that a server that knows only version 2 still reads every
# state it could have written itself.
SPLIT_GROUP_STATE_VERSION = 3
# Chunks are buckets of members by a hash of their id, so that a member
# stays in its chunk from one generation to the next and a chunk whose
# members did not change is not written again. Hash buckets are uneven:
# their count is chosen for chunks half the size asked for on average, and
# doubled while one of several members is still over it. The count is
# capped, so that members whose ids hash alike cannot make it double for
# ever: a chunk over the size asked for is only a larger node, and one too
# large for ZooKeeper is refused by the store.
_MAX_CHUNKS = 4096


def _by_topic(pairs: Collection[tuple[str, int]]) -> dict[str, list[int]]:
    if len(pairs) == 1:  # most members of a big group hold one partition: spare it the sort
        (topic, partition), = pairs  # any collection: a fence's partitions are a frozenset
        return {topic: [partition]}
    grouped: dict[str, list[int]] = {}
    for topic, partition in sorted(pairs):
        grouped.setdefault(topic, []).append(partition)
    return grouped


@dataclass(frozen=True)
class _MemberFields:
    """The fields of a state that are keyed by member, as the JSON values
    version 2 writes: ``running`` only for members that do not run exactly
    their assignment."""

    assignment: dict
    running: dict
    clients: dict
    proofs: dict

    @classmethod
    def of(cls, state: GroupState) -> "_MemberFields":
        running = {m: pairs for m, pairs in state.running.items() if pairs}
        assigned = state.assignment
        # Equal tuples (the core sorts both) are the same sets, without building them.
        differs = {m: running.get(m, ()) for m in set(assigned) | set(running)
                   if running.get(m, ()) != assigned.get(m, ())
                   and set(running.get(m, ())) != set(assigned.get(m, ()))}
        return cls({m: _by_topic(pairs) for m, pairs in state.assignment.items()},
                   {m: _by_topic(differs[m]) for m in sorted(differs)},
                   {m: c.fields() for m, c in sorted(state.clients.items())},
                   dict(sorted(state.proofs.items())))

    def members(self) -> set[str]:
        return set(self.assignment) | set(self.running) | set(self.clients) | set(self.proofs)

    def only(self, members: list[str]) -> "_MemberFields":
        """The fields of ``members`` alone, in the order of ``members``."""
        return _MemberFields(*({m: values[m] for m in members if m in values}
                               for values in (self.assignment, self.running, self.clients, self.proofs)))

    def add_optional(self, node: dict) -> bytes:
        """``node`` encoded with ``clients`` and ``proofs`` added where
        there are any: readers that do not know them pass them by, and a
        state without them reads the same to every server."""
        if self.clients:
            node["clients"] = self.clients
        if self.proofs:
            node["proofs"] = self.proofs
        return encode_json(node)


def encode_group_state(state: GroupState) -> bytes:
    """The state as one node of version 2 (decode_group_state reads 1 and 2)."""
    return _encode_whole(state, _MemberFields.of(state))


def _encode_whole(state: GroupState, fields: _MemberFields) -> bytes:
    return fields.add_optional({"version": GROUP_STATE_VERSION, "generation": state.generation,
                                "strategy": state.strategy, "assignment": fields.assignment,
                                "lease_ms": state.lease_ms, "running": fields.running})


def chunk_name(data: bytes) -> str:
    """A chunk's name: the digest of its bytes. A chunk written again with
    other members is another node, so a manifest names exactly the bytes it
    was written with, whatever was written or left half-written beside it."""
    return hashlib.blake2b(data, digest_size=16).hexdigest()


@dataclass(frozen=True)
class GroupStateManifest:
    """The node at a split state's path (version 3): what is not keyed by
    member, and the names of the chunks that hold the members."""

    generation: int
    strategy: str
    lease_ms: int
    chunks: tuple[str, ...]

    def __post_init__(self) -> None:
        _check_state_head(self.generation, self.strategy, self.lease_ms)
        if not isinstance(self.chunks, tuple) or len(set(self.chunks)) != len(self.chunks):
            raise LayoutError(f"chunks must be a tuple of distinct names, got {self.chunks!r}")
        for name in self.chunks:
            _validate_chunk_name(name)


@dataclass(frozen=True)
class GroupStateNodes:
    """The nodes a state is written as: ``state`` at the state's path (a
    whole state of version 2, or a manifest of version 3) and the
    ``chunks`` it names, by name (none for a whole state)."""

    state: bytes
    chunks: Mapping[str, bytes]


def encode_group_state_nodes(state: GroupState, *, node_bytes: int, chunk_bytes: int) -> GroupStateNodes:
    """``state`` as one node of version 2 if that takes at most
    ``node_bytes``, else as a manifest and chunks of version 3 of about
    ``chunk_bytes`` at most each (a chunk holding one member may be larger).

    >>> assignment = {f"m{i}": (("t", i),) for i in range(9)}
    >>> state = GroupState(1, "range", assignment, lease_ms=6000, running=assignment)
    >>> nodes = encode_group_state_nodes(state, node_bytes=100, chunk_bytes=100)
    >>> nodes.state[:63]
    b'{"version":3,"generation":1,"strategy":"range","lease_ms":6000,'
    >>> len(nodes.chunks), nodes.chunks[chunk_name(b'{"version":3,"assignment":{"m0":{"t":[0]}},"running":{}}')]
    (8, b'{"version":3,"assignment":{"m0":{"t":[0]}},"running":{}}')
    >>> assemble_group_state(decode_group_state_node(nodes.state), nodes.chunks) == state
    True
    """
    fields = _MemberFields.of(state)
    whole = _encode_whole(state, fields)
    if len(whole) <= node_bytes:
        return GroupStateNodes(whole, {})
    members = sorted(fields.members())
    hashes = {m: zlib.crc32(m.encode()) for m in members}
    count = 1 << max(1, math.ceil(2 * len(whole) / chunk_bytes) - 1).bit_length()
    while True:
        buckets: dict[int, list[str]] = {}
        for member in members:
            buckets.setdefault(hashes[member] & (count - 1), []).append(member)
        chunks = {}
        for bucket in sorted(buckets):
            part = fields.only(buckets[bucket])
            data = part.add_optional({"version": SPLIT_GROUP_STATE_VERSION, "assignment": part.assignment,
                                      "running": part.running})
            chunks[chunk_name(data)] = (data, len(buckets[bucket]))
        if count >= _MAX_CHUNKS or all(len(data) <= chunk_bytes or held == 1 for data, held in chunks.values()):
            break
        count *= 2
    manifest = {"version": SPLIT_GROUP_STATE_VERSION, "generation": state.generation, "strategy": state.strategy,
                "lease_ms": state.lease_ms, "chunks": list(chunks)}
    return GroupStateNodes(encode_json(manifest), {name: data for name, (data, _) in chunks.items()})


def _clients(fields: _Fields) -> dict[str, MemberClient]:
    clients = {}
    for member, client in fields.mapping("clients").items():
        if not isinstance(client, dict) or not isinstance(client.get("host"), str) \
                or not isinstance(client.get("client_id", ""), str):
            raise fields.fail("clients", f"of member {member!r} must be {{\"host\": ..., \"client_id\": ...}}")
        with _prefix_errors(f"{fields.where}: client of member {member!r}"):
            clients[member] = MemberClient(client["host"], client.get("client_id", ""), client.get("static", False),
                                           client.get("session_timeout_ms", 0), client.get("kind", ""))
    return clients


def _decode_members(fields: _Fields, version: int) -> tuple[dict, dict, dict, dict]:
    """The fields keyed by member of a whole state (version 1 or 2) or a
    chunk (version 3, written as version 2): assignment, running, clients
    and proofs. ``running`` comes back without members that run nothing."""

    def partitions_by_member(name: str) -> dict[str, tuple[tuple[str, int], ...]]:
        result = {}
        for member, held in fields.mapping(name).items():
            if version == 1:
                if not isinstance(held, list) or not all(
                    isinstance(p, list) and len(p) == 2 and isinstance(p[0], str) and _is_int(p[1]) for p in held
                ):
                    raise fields.fail(name, f"of member {member!r} must be [[topic, partition], ...]")
                result[member] = tuple((t, p) for t, p in held)
            else:
                if not isinstance(held, dict) or not all(
                    isinstance(ps, list) and all(_is_int(p) for p in ps) for ps in held.values()
                ):
                    raise fields.fail(name, f"of member {member!r} must be {{topic: [partition, ...]}}")
                result[member] = tuple((t, p) for t, ps in held.items() for p in ps)
        return result

    assignment = partitions_by_member("assignment")
    running = partitions_by_member("running") if fields.has("running") else {}
    if version >= 2:  # members left out run exactly their assignment
        running = {**{m: pairs for m, pairs in assignment.items() if m not in running}, **running}
    running = {m: pairs for m, pairs in running.items() if pairs}
    clients = _clients(fields) if fields.has("clients") else {}
    proofs = fields.mapping("proofs") if fields.has("proofs") else {}
    return assignment, running, clients, proofs


def decode_group_state_node(data: bytes, where: str = "group state") -> GroupState | GroupStateManifest:
    """The node at a group state's path: a whole state (version 1 or 2), or
    the manifest of a split one (version 3), whose chunks
    :func:`assemble_group_state` reads."""
    fields = decode_versioned(data, where, SPLIT_GROUP_STATE_VERSION, ("generation", "strategy"))
    version = fields.integer("version")
    if version == SPLIT_GROUP_STATE_VERSION:
        chunks = fields.get("chunks")
        if not isinstance(chunks, list):
            raise fields.fail("chunks", f"must be a list of chunk names, got {chunks!r}")
        lease_ms = fields.integer("lease_ms", 0)
        generation, strategy = fields.integer("generation", 0), fields.string("strategy")
        with _prefix_errors(where):
            return GroupStateManifest(generation, strategy, lease_ms, tuple(chunks))
    fields.get("assignment")
    assignment, running, clients, proofs = _decode_members(fields, version)
    # The fields are read first: their errors name the node already.
    lease_ms = fields.integer("lease_ms", 0) if fields.has("lease_ms") else 0
    generation, strategy = fields.integer("generation", 0), fields.string("strategy")
    with _prefix_errors(where):
        return GroupState(generation, strategy, assignment, lease_ms=lease_ms, running=running, clients=clients,
                          proofs=proofs)


def decode_group_state(data: bytes, where: str = "group state") -> GroupState:
    """A group's state written as one node, of version 1 or 2. ``running``
    comes back without members that run nothing (the same to every reader).
    A split state's manifest (version 3) is refused: its members are in its
    chunks (zk/nodes.py reads both)."""
    node = decode_group_state_node(data, where)
    if isinstance(node, GroupStateManifest):
        raise LayoutError(f"{where}: a state split into {len(node.chunks)} chunk(s), not a whole one")
    return node


def assemble_group_state(manifest: GroupStateManifest, chunks: Mapping[str, Optional[bytes]],
                         where: str = "group state") -> GroupState:
    """The state a manifest describes, from ``chunks`` (its chunks' bytes by
    name; None or absent: not found). Every chunk it names must be there,
    hold the bytes its name is the digest of, and name members no other
    chunk names; the whole must be a valid state. Anything else is a
    LayoutError: a reader cannot tell what the group's members run, and
    fences the whole group."""
    assignment: dict = {}
    running: dict = {}
    clients: dict = {}
    proofs: dict = {}
    seen: set[str] = set()
    for name in manifest.chunks:
        data = chunks.get(name)
        if data is None:
            raise LayoutError(f"{where}: chunk {name} is missing")
        if chunk_name(bytes(data)) != name:
            raise LayoutError(f"{where}: chunk {name} does not hold the bytes it was named by")
        fields = decode_versioned(data, f"{where} chunk {name}", SPLIT_GROUP_STATE_VERSION, ("assignment",))
        if fields.integer("version") != SPLIT_GROUP_STATE_VERSION:
            raise fields.fail("version", f"of a chunk must be {SPLIT_GROUP_STATE_VERSION}")
        parts = _decode_members(fields, SPLIT_GROUP_STATE_VERSION)
        named = set().union(*parts)
        twice = seen & named
        seen |= named
        if twice:
            raise LayoutError(f"{where}: chunk {name} names member(s) another chunk names: {sorted(twice)[:3]}")
        for merged, part in zip((assignment, running, clients, proofs), parts):
            merged.update(part)
    with _prefix_errors(where):
        return GroupState(manifest.generation, manifest.strategy, assignment, lease_ms=manifest.lease_ms,
                          running=running, clients=clients, proofs=proofs)


GROUP_FAILURE_VERSION = 1
# A failure's message is cut to this many characters: it is for operators,
# and a round's failure may name many partitions or members.
MAX_FAILURE_CHARS = 2000


@dataclass(frozen=True)
class GroupFailure:
    """Why a group's rebalance gave up: visible to operators until a retry
    succeeds. Holds only what its decoder reads back (a LayoutError otherwise);
    :meth:`of` makes one from whatever a coordinator has at hand."""

    generation: int
    attempts: int
    error: str

    def __post_init__(self) -> None:
        for name in ("generation", "attempts"):
            value = getattr(self, name)
            if not _is_int(value) or not 0 <= value <= _INT32_MAX:
                raise LayoutError(f"{name} must be an integer in [0, {_INT32_MAX}], got {value!r}")
        if not isinstance(self.error, str) or len(self.error) > MAX_FAILURE_CHARS:
            raise LayoutError(f"error must be a string of at most {MAX_FAILURE_CHARS} characters")
        try:
            self.error.encode("utf-8")
        except UnicodeError as exc:
            raise LayoutError(f"error is not text: {exc}") from None

    @classmethod
    def of(cls, generation: int, attempts: int, error: str) -> "GroupFailure":
        """A failure to record: the count held at int32's top, the message
        cut short and made encodable."""
        text = error.encode("utf-8", "replace").decode("utf-8")
        if len(text) > MAX_FAILURE_CHARS:
            text = text[:MAX_FAILURE_CHARS - 3] + "..."
        return cls(generation, min(attempts, _INT32_MAX), text)


def encode_group_failure(failure: GroupFailure) -> bytes:
    return encode_json({"version": GROUP_FAILURE_VERSION, "generation": failure.generation,
                        "attempts": failure.attempts, "error": failure.error})


def decode_group_failure(data: bytes, where: str = "group failure") -> GroupFailure:
    fields = decode_versioned(data, where, GROUP_FAILURE_VERSION, ("generation", "attempts", "error"))
    generation, attempts, error = fields.integer("generation", 0), fields.integer("attempts", 0), fields.string("error")
    with _prefix_errors(where):
        return GroupFailure(generation, attempts, error)


@dataclass(frozen=True)
class FetchFence:
    """Partitions no broker serves to one stock client's fetches: those its
    member ``member`` of ``group`` may still be fetching although its
    registration no longer (or may soon no longer) holds them. The client is
    recognised by where its connections come from (``host``) and the client
    id it sends (``client_id``): a Fetch names no group and no member."""

    group: str
    member: str
    host: str
    client_id: str
    partitions: frozenset = frozenset()

    def __post_init__(self) -> None:
        for name in ("group", "member", "host", "client_id"):
            if not isinstance(getattr(self, name), str):
                raise LayoutError(f"a fetch fence's {name} must be a string, got {getattr(self, name)!r}")
        for topic, partition in self.partitions:
            validate_topic_name(topic)
            _validate_partition(partition)


FETCH_FENCE_VERSION = 1


def encode_fetch_fence(fence: FetchFence) -> bytes:
    return encode_json({"version": FETCH_FENCE_VERSION, "group": fence.group, "member": fence.member,
                        "host": fence.host, "client_id": fence.client_id,
                        "partitions": _by_topic(fence.partitions)})


def decode_fetch_fence(data: bytes, where: str = "fetch fence") -> FetchFence:
    fields = decode_versioned(data, where, FETCH_FENCE_VERSION, ("partitions",))
    partitions = frozenset((topic, p) for topic, ps in fields.mapping("partitions").items()
                           for p in fields.ints("partitions", ps))
    with _prefix_errors(where):
        return FetchFence(fields.string("group"), fields.string("member"), fields.string("host"),
                          fields.string("client_id"), partitions)
