"""The messages of the coordinator protocol and their versioned layouts.

Each message is one frozen dataclass holding the union of its fields over all
versions, and one ``construct`` Struct per version (``LAYOUTS``) that says which
of those fields that version puts on the wire and how. Version 0 is seed 001's
message exactly; version 1 adds what zkcoord needs without changing the
meaning of version 0's bytes. A field that a version lacks decodes to its
default; encoding drops it, except where the old version fixes its meaning
(:class:`~zkcoord.wire.fields.Implied`), in which case any other value is
refused rather than silently changed.

wire/README.md describes every field, with a byte-level example; wire/vectors.json
holds the frames this module must read and write.
"""

import functools
from dataclasses import dataclass, field
from enum import IntEnum
from typing import ClassVar

from construct import Computed, Rebuild, Struct, If, this

from zkcoord.records import TopicPartition
from zkcoord.wire.errors import ErrorCode
from zkcoord.wire.fields import (
    Array16, Array32, Bool, Entry, ErrorCodeField, Implied, Int16, Int32,
    Int64, OptionalTail, PartitionString, String, parse_topic_count,
    topic_count,
)


class MessageType(IntEnum):
    """The int16 type ids of the frame header. They start at 1000 so that they
    never collide with Kafka's API keys: a Kafka client that dials a
    coordinator port by mistake gets UNKNOWN_MESSAGE_TYPE, not a misparse."""

    CLUSTER_METADATA_REQUEST = 1000
    CLUSTER_METADATA_RESPONSE = 1001
    REGISTER_CONSUMER_REQUEST = 1002
    REGISTER_CONSUMER_RESPONSE = 1003
    PING_REQUEST = 1004
    PING_RESPONSE = 1005
    STOP_REQUEST = 1006
    STOP_RESPONSE = 1007
    START_REQUEST = 1008
    RESTART_FETCHER_RESPONSE = 1009
    ERROR_RESPONSE = 1010
    LEAVE_GROUP_REQUEST = 1011
    LEAVE_GROUP_RESPONSE = 1012
    RESET_OFFSETS_REQUEST = 1013
    RESET_OFFSETS_RESPONSE = 1014
    DESCRIBE_GROUP_REQUEST = 1015
    DESCRIBE_GROUP_RESPONSE = 1016


# --- array entries -------------------------------------------------------

@dataclass(frozen=True)
class NodeAddress:
    """A server or broker: id and where to reach it."""

    id: int
    host: str
    port: int


@dataclass(frozen=True)
class TopicPartitionOffset:
    """A partition and an offset: the next offset to consume (-1 in a Start
    means "the committed offset, else auto_offset_reset")."""

    topic: str
    partition: int
    offset: int


def offset_entries(offsets) -> tuple:
    """A {(topic, partition): offset} map as TopicPartitionOffset entries,
    sorted, leaving out unknown (negative) offsets."""
    return tuple(TopicPartitionOffset(t, p, o) for (t, p), o in sorted(offsets.items()) if o >= 0)


def offsets_of(entries) -> dict:
    """TopicPartitionOffset entries as a {(topic, partition): offset} map."""
    return {(e.topic, e.partition): e.offset for e in entries}


ENDPOINT = Entry(NodeAddress, "id" / Int32, "host" / String, "port" / Int32)
# The partition identity every part of zkcoord uses (records.py), as it goes on the wire.
TP = Entry(TopicPartition, "topic" / String, "partition" / Int32)
TPO = Entry(TopicPartitionOffset,
            "topic" / String, "partition" / Int32, "offset" / Int64)
# Seed 001 sends the partition as a string; zkcoord's is its decimal number.
TPO_V0 = Entry(TopicPartitionOffset,
               "topic" / String, "partition" / PartitionString,
               "offset" / Int64)


@dataclass(frozen=True)
class MemberDescription:
    """One member as its coordinator holds it now (DescribeGroupResponse).
    ``lease_remaining_ms``: how long its lease may still run, at most (from
    the coordinator's last request to it), -1 while it is not connected (a
    static member away); ``outstanding``: the name of the request it has not
    answered yet, "" for none."""

    member_id: str
    client_kind: str
    client_id: str
    host: str
    is_static: bool
    session_timeout_ms: int
    lease_remaining_ms: int
    partitions: tuple
    outstanding: str

    def __post_init__(self):
        object.__setattr__(self, "partitions", tuple(self.partitions))


MEMBER = Entry(MemberDescription,
               "member_id" / String, "client_kind" / String, "client_id" / String, "host" / String,
               "is_static" / Bool, "session_timeout_ms" / Int32, "lease_remaining_ms" / Int32,
               "partitions" / Array32(TP), "outstanding" / String)


# --- messages ------------------------------------------------------------

REGISTRY = {}


class Message:
    """Base of every message: registers the class under its ``TYPE`` and turns
    list arguments into tuples so that messages stay immutable."""

    TYPE: ClassVar[MessageType]
    LAYOUTS: ClassVar[dict]

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        REGISTRY[cls.TYPE] = cls

    def __post_init__(self):
        for name in self.__dataclass_fields__:  # not dataclasses.fields(): this runs for every frame
            value = getattr(self, name)
            if isinstance(value, list):
                object.__setattr__(self, name, tuple(value))

    @classmethod
    def latest_version(cls):
        return max(cls.LAYOUTS)

    @classmethod
    @functools.cache  # asked for every frame sent; a handful of (class, level) pairs
    def version_for(cls, level):
        """The version to send this message in to a peer that speaks the
        protocol at ``level`` (the version of its own first request): the
        highest not above it, else the lowest there is (None: the latest).
        A response thus answers a request in the request's version."""
        if level is None:
            return max(cls.LAYOUTS)
        spoken = [v for v in cls.LAYOUTS if v <= level]
        return max(spoken) if spoken else min(cls.LAYOUTS)


@dataclass(frozen=True)
class ClusterMetadataRequest(Message):
    """Anyone to any server: who coordinates ``group_id``, and where are the
    servers and brokers. Versions 0 and 1 name no group: they ask for the
    coordinator of slot 0, the seed's single coordinator.

    ``max_wait_ms`` > 0 asks the server to hold its answer (up to that long)
    while the group's slot has no coordinator of an epoch above
    ``known_epoch``: a member whose coordinator is gone hears of its
    successor the moment it is elected, instead of asking again and again."""

    TYPE = MessageType.CLUSTER_METADATA_REQUEST
    group_id: str = ""
    known_epoch: int = -1
    max_wait_ms: int = 0
    LAYOUTS = {0: Struct("group_id" / Implied(""), "known_epoch" / Implied(-1), "max_wait_ms" / Implied(0)),
               1: Struct("group_id" / Implied(""), "known_epoch" / Implied(-1), "max_wait_ms" / Implied(0)),
               2: Struct("group_id" / String, "known_epoch" / Int32, "max_wait_ms" / Int32)}


# Version 2 is version 1 plus the slot.
_METADATA_V1 = (
    "error_code" / ErrorCodeField,
    "coordinator_id" / Int32,
    "coordinator_epoch" / Int32,
    "servers" / Array32(ENDPOINT),
    "brokers" / Array32(ENDPOINT),
)


@dataclass(frozen=True)
class ClusterMetadataResponse(Message):
    """``servers`` are coordinator-protocol endpoints (version 0's broker
    list, which the seed's consumer searches for the coordinator's id);
    ``brokers`` are the data brokers. ``coordinator_id`` and
    ``coordinator_epoch`` are those of the asked group's slot (-1: none
    elected); version 2 says which slot, of how many, that is."""

    TYPE = MessageType.CLUSTER_METADATA_RESPONSE
    error_code: int = ErrorCode.NONE
    coordinator_id: int = -1
    coordinator_epoch: int = -1
    servers: tuple = ()
    brokers: tuple = ()
    slot: int = 0
    slots: int = 1
    LAYOUTS = {
        0: Struct("error_code" / ErrorCodeField,
                  "coordinator_id" / Int16,
                  "servers" / Array16(ENDPOINT)),
        1: Struct(*_METADATA_V1),
        2: Struct(*_METADATA_V1,
                  "slot" / Int32,
                  "slots" / Int32),
    }


# Version 2 is version 1 plus the handover offsets, 3 the credential, 4 the
# incarnation, 5 what the client is, 6 the partitions the member kept.
_REGISTER_V1 = (
    "group_id" / String,
    "consumer_id" / String,
    "topics" / Array32(String),
    "pattern" / String,
    "auto_commit" / Bool,
    "auto_offset_reset" / String,
    "session_timeout_ms" / Int32,
    "max_poll_interval_ms" / Int32,
    "is_static" / Bool,
    "assignment_strategies" / Array32(String),
)


_REGISTER_V3 = (*_REGISTER_V1, "offsets" / Array32(TPO), "user" / String, "password" / String,
                "on_behalf_of" / String)


# The values of RegisterConsumerRequest.client_kind: what kind of client the
# member is, each with what operators are shown for it ("" from versions 0
# to 4: not said). A stock client's member is registered by the broker
# bridging it, and says which of Kafka's group protocols the client speaks.
THIN = "thin"
CLASSIC_EAGER = "classic-eager"
CLASSIC_COOPERATIVE = "classic-cooperative"
CONSUMER_PROTOCOL = "consumer"
SPARK = "spark"
CLIENT_KINDS = {
    THIN: "thin consumer",
    CLASSIC_EAGER: "stock, classic protocol (eager)",
    CLASSIC_COOPERATIVE: "stock, classic protocol (cooperative)",
    CONSUMER_PROTOCOL: "stock, consumer protocol (KIP-848)",
    SPARK: "Spark driver",
}
# The longest client id a registration may carry: it is written into the group's state.
MAX_CLIENT_ID_BYTES = 255


def clipped_client_id(client_id: str) -> str:
    """``client_id`` cut to MAX_CLIENT_ID_BYTES of UTF-8, whole characters
    only: a stock client's, which Kafka does not bound, shown as far as it fits."""
    return client_id.encode("utf-8")[:MAX_CLIENT_ID_BYTES].decode("utf-8", "ignore")

# The values of RegisterConsumerRequest.auto_offset_reset (Kafka 0.8's names
# for earliest and latest).
SMALLEST = "smallest"
LARGEST = "largest"
OFFSET_RESETS = (SMALLEST, LARGEST)
# The assignment strategies a member may name in RegisterConsumer (the
# coordinator's assignors, coordinator/assignors.py, one for each).
STRATEGIES = ("range", "roundrobin", "sticky")

# The longest a member waits between two tries to reach its group's
# coordinator (wire/README.md, "Registering"); a successor counts on it when
# it keeps a returning member's partitions for it.
MEMBER_RETRY_MAX_S = 1.0


@dataclass(frozen=True)
class RegisterConsumerRequest(Message):
    """Consumer to coordinator, once per connection. The subscription is
    ``topics`` (named topics) and/or ``pattern`` (a regex, "" for none);
    version 0 carries it as Kafka 0.8's topic_count JSON, so it can hold one
    or the other. ``assignment_strategies`` are in order of preference.
    Version 3 adds a credential (``user`` and ``password``, "" for none),
    for a connection the coordinator protects with TLS; the password never
    shows in the message's repr. ``on_behalf_of`` names the principal a
    broker registers a stock client's member for (that client authenticated
    to the broker): honoured only from a super user. Version 4 adds
    ``incarnation``, a secret the member draws once per process and sends at
    every registration: the proof that a registration under an id already
    held or fenced is the same process coming back, which has stopped
    everything before it registered ("" for none: never proven). Version 5
    adds what the client is (``client_kind``, one of CLIENT_KINDS) and its
    client id, shown to operators only ("" for not said). Version 6 adds
    what a member that lost its coordinator kept running meanwhile, under
    its lease (``held``; () for nothing), and the coordinator epoch and
    group generation of the last Start it obeyed (``held_epoch``,
    ``held_generation``; -1 for none): the coordinator lets it keep what
    it alone may be running, and refuses the registration naming the rest
    (HELD_PARTITIONS_REFUSED, RegisterConsumerResponse.refused)."""

    TYPE = MessageType.REGISTER_CONSUMER_REQUEST
    group_id: str
    consumer_id: str
    topics: tuple = ()
    pattern: str = ""
    auto_commit: bool = True
    auto_offset_reset: str = LARGEST
    session_timeout_ms: int = 30000
    max_poll_interval_ms: int = 300000
    is_static: bool = False
    assignment_strategies: tuple = ("range",)
    offsets: tuple = ()
    user: str = ""
    password: str = field(default="", repr=False)
    on_behalf_of: str = ""
    incarnation: str = field(default="", repr=False)
    client_kind: str = ""
    client_id: str = ""
    held: tuple = ()
    held_epoch: int = -1
    held_generation: int = -1
    LAYOUTS = {
        0: Struct("group_id" / String,
                  "consumer_id" / String,
                  "topic_count" / Rebuild(
                      String, lambda ctx: topic_count(ctx.topics, ctx.pattern)),
                  "topics" / Computed(
                      lambda ctx: parse_topic_count(ctx.topic_count)[0]),
                  "pattern" / Computed(
                      lambda ctx: parse_topic_count(ctx.topic_count)[1]),
                  "auto_commit" / Bool,
                  "auto_offset_reset" / String,
                  "session_timeout_ms" / Int32),
        1: Struct(*_REGISTER_V1),
        2: Struct(*_REGISTER_V1, "offsets" / Array32(TPO)),
        3: Struct(*_REGISTER_V3),
        4: Struct(*_REGISTER_V3, "incarnation" / String),
        5: Struct(*_REGISTER_V3, "incarnation" / String, "client_kind" / String, "client_id" / String),
        6: Struct(*_REGISTER_V3, "incarnation" / String, "client_kind" / String, "client_id" / String,
                  "held" / Array32(TP), "held_epoch" / Int32, "held_generation" / Int32),
    }


_REGISTERED_V1 = ("error_code" / ErrorCodeField, "error_message" / String, "coordinator_epoch" / Int32)


@dataclass(frozen=True)
class RegisterConsumerResponse(Message):
    """Coordinator to consumer. Version 6 (the answer to a version 6
    registration) adds ``refused``: with HELD_PARTITIONS_REFUSED, the
    partitions of ``held`` the member may not keep; it stops them and
    registers again, handing their offsets over."""

    TYPE = MessageType.REGISTER_CONSUMER_RESPONSE
    error_code: int = ErrorCode.NONE
    error_message: str = ""
    coordinator_epoch: int = -1
    refused: tuple = ()
    LAYOUTS = {
        0: Struct("error_code" / ErrorCodeField),
        1: Struct(*_REGISTERED_V1),
        6: Struct(*_REGISTERED_V1, "refused" / Array32(TP)),
    }


@dataclass(frozen=True)
class PingRequest(Message):
    """Coordinator to consumer: are you alive? ``num_retries`` counts the
    pings sent since the last answer."""

    TYPE = MessageType.PING_REQUEST
    num_retries: int = 0
    coordinator_epoch: int = -1
    generation: int = -1
    LAYOUTS = {
        0: Struct("num_retries" / Int16),
        1: Struct("num_retries" / Int16,
                  "coordinator_epoch" / Int32,
                  "generation" / Int32),
    }


@dataclass(frozen=True)
class PingResponse(Message):
    """``offsets`` is None without auto-commit, else the next offset to
    consume for each partition the consumer owns. ``last_poll_ms_ago``: time
    since the application last polled, -1 if it never has."""

    TYPE = MessageType.PING_RESPONSE
    error_code: int = ErrorCode.NONE
    offsets: tuple | None = None
    last_poll_ms_ago: int = -1
    LAYOUTS = {
        0: Struct("error_code" / Implied(ErrorCode.NONE),
                  "offsets" / OptionalTail(Array16(TPO_V0))),
        1: Struct("error_code" / ErrorCodeField,
                  "has_offsets" / Rebuild(Bool, this.offsets != None),  # noqa: E711
                  "offsets" / If(this.has_offsets, Array32(TPO)),
                  "last_poll_ms_ago" / Int32),
    }


@dataclass(frozen=True)
class StopRequest(Message):
    """Coordinator to consumer: stop fetching. ``revoke_all`` stops every
    partition (version 0's only meaning); otherwise only ``partitions``."""

    TYPE = MessageType.STOP_REQUEST
    coordinator_epoch: int = -1
    generation: int = -1
    revoke_all: bool = True
    partitions: tuple = ()
    LAYOUTS = {
        0: Struct("revoke_all" / Implied(True),
                  "partitions" / Implied(())),
        1: Struct("coordinator_epoch" / Int32,
                  "generation" / Int32,
                  "revoke_all" / Bool,
                  "partitions" / Array32(TP)),
    }


@dataclass(frozen=True)
class StopResponse(Message):
    """Consumer to coordinator: stopped; ``offsets`` are the next offsets to
    consume of the revoked partitions."""

    TYPE = MessageType.STOP_RESPONSE
    error_code: int = ErrorCode.NONE
    coordinator_epoch: int = -1
    generation: int = -1
    offsets: tuple = ()
    LAYOUTS = {
        1: Struct("error_code" / ErrorCodeField,
                  "coordinator_epoch" / Int32,
                  "generation" / Int32,
                  "offsets" / Array32(TPO)),
    }


@dataclass(frozen=True)
class StartRequest(Message):
    """Coordinator to consumer: fetch these partitions from these offsets.
    ``partitions`` is the member's whole assignment after the change."""

    TYPE = MessageType.START_REQUEST
    coordinator_epoch: int = -1
    generation: int = -1
    strategy: str = ""
    partitions: tuple = ()
    LAYOUTS = {
        0: Struct("partitions" / Array16(TPO_V0)),
        1: Struct("coordinator_epoch" / Int32,
                  "generation" / Int32,
                  "strategy" / String,
                  "partitions" / Array32(TPO)),
    }


@dataclass(frozen=True)
class RestartFetcherResponse(Message):
    """Consumer to coordinator: the Start is done (or failed)."""

    TYPE = MessageType.RESTART_FETCHER_RESPONSE
    error_code: int = ErrorCode.NONE
    coordinator_epoch: int = -1
    generation: int = -1
    LAYOUTS = {
        0: Struct("error_code" / ErrorCodeField),
        1: Struct("error_code" / ErrorCodeField,
                  "coordinator_epoch" / Int32,
                  "generation" / Int32),
    }


@dataclass(frozen=True)
class ErrorResponse(Message):
    """Sent by either side, with the offending frame's correlation id when it
    was readable (else 0), just before it closes the connection."""

    TYPE = MessageType.ERROR_RESPONSE
    error_code: int = ErrorCode.UNKNOWN
    message: str = ""
    LAYOUTS = {
        1: Struct("error_code" / ErrorCodeField, "message" / String),
    }


@dataclass(frozen=True)
class LeaveGroupRequest(Message):
    """Consumer to coordinator, the one request a consumer starts: it has
    stopped every partition and is closing; ``offsets`` are the next offsets
    to consume of the partitions it ran. A dynamic member leaves the group at
    once; a static member's partitions wait for it until its session timeout."""

    TYPE = MessageType.LEAVE_GROUP_REQUEST
    offsets: tuple = ()
    LAYOUTS = {
        1: Struct("offsets" / Array32(TPO)),
    }


@dataclass(frozen=True)
class LeaveGroupResponse(Message):
    """Coordinator to consumer: the offsets of the LeaveGroupRequest are committed."""

    TYPE = MessageType.LEAVE_GROUP_RESPONSE
    error_code: int = ErrorCode.NONE
    LAYOUTS = {
        1: Struct("error_code" / ErrorCodeField),
    }


_RESET_V1 = (
    "group_id" / String,
    "execute" / Bool,
    "force" / Bool,
    "offsets" / Array32(TPO),
)


@dataclass(frozen=True)
class ResetOffsetsRequest(Message):
    """Operator to the coordinator of ``group_id`` (`zkcoord groups
    reset-offsets`). Without ``execute`` it changes nothing and asks what a
    reset would meet: the committed offsets of the partitions named (of every
    partition the group has one for, if none is named; the offsets given are
    then not looked at) and the group's members. With ``execute`` it commits
    ``offsets`` (the next offset to consume), backwards too; refused while the
    group has members, unless ``force``: then the coordinator stops the
    partitions' owners, commits, and starts them from the new offsets."""

    TYPE = MessageType.RESET_OFFSETS_REQUEST
    group_id: str
    execute: bool = False
    force: bool = False
    offsets: tuple = ()
    user: str = ""
    password: str = field(default="", repr=False)
    LAYOUTS = {
        1: Struct(*_RESET_V1),
        # Version 2 adds the operator's credential, as RegisterConsumerRequest's version 3.
        2: Struct(*_RESET_V1, "user" / String, "password" / String),
    }


@dataclass(frozen=True)
class ResetOffsetsResponse(Message):
    """Coordinator to operator: ``previous`` are the committed offsets before
    the reset (of the partitions that had one); ``members`` the group's
    members (those a reset without ``force`` was refused for)."""

    TYPE = MessageType.RESET_OFFSETS_RESPONSE
    error_code: int = ErrorCode.NONE
    error_message: str = ""
    members: tuple = ()
    previous: tuple = ()
    LAYOUTS = {
        1: Struct("error_code" / ErrorCodeField,
                  "error_message" / String,
                  "members" / Array32(String),
                  "previous" / Array32(TPO)),
    }


@dataclass(frozen=True)
class DescribeGroupRequest(Message):
    """Operator to the coordinator of ``group_id`` (`zkcoord groups describe
    --members`, the console): the group's members as the coordinator holds
    them now, answered from memory, then the connection is closed. Carries
    the operator's credential as ResetOffsetsRequest version 2 does."""

    TYPE = MessageType.DESCRIBE_GROUP_REQUEST
    group_id: str
    user: str = ""
    password: str = field(default="", repr=False)
    LAYOUTS = {
        1: Struct("group_id" / String, "user" / String, "password" / String),
    }


@dataclass(frozen=True)
class DescribeGroupResponse(Message):
    """Coordinator to operator: the group's ``phase`` (the coordinator's
    GroupPhase: empty, stable, rebalancing, failed), ``generation``, and each
    member (MemberDescription) as held in memory now."""

    TYPE = MessageType.DESCRIBE_GROUP_RESPONSE
    error_code: int = ErrorCode.NONE
    error_message: str = ""
    coordinator_epoch: int = -1
    generation: int = -1
    phase: str = ""
    members: tuple = ()
    LAYOUTS = {
        1: Struct("error_code" / ErrorCodeField,
                  "error_message" / String,
                  "coordinator_epoch" / Int32,
                  "generation" / Int32,
                  "phase" / String,
                  "members" / Array32(MEMBER)),
    }


# The response that answers each request, in the request's version.
RESPONSES = {
    ClusterMetadataRequest: ClusterMetadataResponse,
    RegisterConsumerRequest: RegisterConsumerResponse,
    PingRequest: PingResponse,
    StopRequest: StopResponse,
    StartRequest: RestartFetcherResponse,
    LeaveGroupRequest: LeaveGroupResponse,
    ResetOffsetsRequest: ResetOffsetsResponse,
    DescribeGroupRequest: DescribeGroupResponse,
}
