"""zkcoord's own nodes: the elected coordinator, server registrations, epochs,
the slot count, each group's persisted state and last failure, and the
fetch fences of stock members.

Except the seed design's /consumers/coordinator (a bare server id), each is a
small JSON object with a ``version`` field, read with :func:`decode_versioned`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Mapping

from zkcoord.zk.layout.json_codec import _Fields, _load, _prefix_errors, encode_json
from zkcoord.zk.layout.names import (
    _INT32_MAX,
    _INT64_MAX,
    InvalidName,
    LayoutError,
    _is_int,
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
    for operators (`zkcoord groups describe`'s HOST and CLIENT-ID)."""

    host: str
    client_id: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.host, str) or not isinstance(self.client_id, str):
            raise LayoutError(f"a member's host and client id must be strings, got {self.host!r}, "
                              f"{self.client_id!r}")


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
        if not _is_int(self.generation) or not 0 <= self.generation <= _INT32_MAX:
            raise LayoutError(f"generation must be an integer in [0, {_INT32_MAX}], got {self.generation!r}")
        if not isinstance(self.strategy, str) or not self.strategy:
            raise LayoutError(f"strategy must be a non-empty string, got {self.strategy!r}")
        if not _is_int(self.lease_ms) or not 0 <= self.lease_ms <= _INT32_MAX:
            raise LayoutError(f"lease_ms must be an integer in [0, {_INT32_MAX}], got {self.lease_ms!r}")
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


def _by_topic(pairs: Iterable[tuple[str, int]]) -> dict[str, list[int]]:
    grouped: dict[str, list[int]] = {}
    for topic, partition in sorted(pairs):
        grouped.setdefault(topic, []).append(partition)
    return grouped


def encode_group_state(state: GroupState) -> bytes:
    """Version 2 (decode_group_state reads 1 and 2). ``clients`` is an
    optional field of version 2, written only when there is one: readers that
    do not know it pass it by, so old and new servers read each other's states."""
    running = {m: pairs for m, pairs in state.running.items() if pairs}
    differs = {m: running.get(m, ()) for m in set(state.assignment) | set(running)
               if set(running.get(m, ())) != set(state.assignment.get(m, ()))}
    node = {
        "version": GROUP_STATE_VERSION,
        "generation": state.generation,
        "strategy": state.strategy,
        "assignment": {m: _by_topic(pairs) for m, pairs in state.assignment.items()},
        "lease_ms": state.lease_ms,
        "running": {m: _by_topic(differs[m]) for m in sorted(differs)},
    }
    if state.clients:
        node["clients"] = {m: {"host": c.host, "client_id": c.client_id} for m, c in sorted(state.clients.items())}
    if state.proofs:  # optional as ``clients``: older servers pass it by
        node["proofs"] = dict(sorted(state.proofs.items()))
    return encode_json(node)


def _clients(fields: _Fields) -> dict[str, MemberClient]:
    clients = {}
    for member, client in fields.mapping("clients").items():
        if not isinstance(client, dict) or not isinstance(client.get("host"), str) \
                or not isinstance(client.get("client_id", ""), str):
            raise fields.fail("clients", f"of member {member!r} must be {{\"host\": ..., \"client_id\": ...}}")
        clients[member] = MemberClient(client["host"], client.get("client_id", ""))
    return clients


def decode_group_state(data: bytes, where: str = "group state") -> GroupState:
    """A group's state, of version 1 or 2. ``running`` comes back without
    members that run nothing (the same to every reader)."""
    fields = decode_versioned(data, where, GROUP_STATE_VERSION, ("generation", "strategy", "assignment"))
    version = fields.integer("version")

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
    # The fields are read first: their errors name the node already.
    lease_ms = fields.integer("lease_ms", 0) if fields.has("lease_ms") else 0
    clients = _clients(fields) if fields.has("clients") else {}
    proofs = fields.mapping("proofs") if fields.has("proofs") else {}
    generation, strategy = fields.integer("generation", 0), fields.string("strategy")
    with _prefix_errors(where):
        return GroupState(generation, strategy, assignment, lease_ms=lease_ms, running=running, clients=clients,
                          proofs=proofs)


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
