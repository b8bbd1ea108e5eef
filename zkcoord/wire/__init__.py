"""The coordinator protocol: size-prefixed, versioned binary frames between
consumers and zkcoord servers (seed 001's messages, extended).

``encode(message, correlation_id)`` gives the bytes of a frame;
``FrameDecoder().feed(data)`` turns bytes from a connection into
:class:`Frame` objects; ``decode(payload)`` reads one frame without its size
prefix. Every decoding failure is a :class:`WireError`. wire/README.md
describes every message byte by byte, and wire/vectors.json and
wire/errors.json are the contract this package is tested against.

Layer 1 of the map in docs/DESIGN.md: it imports only the base modules
(``errors`` for its root exception); everything that speaks the protocol
imports it.
"""

from zkcoord.wire.codec import (
    HEADER_BYTES, MAX_FRAME_SIZE, SIZE_BYTES, Frame, FrameDecoder, decode,
    encode,
)
from zkcoord.wire.errors import (
    ConsumerIdInUse, CoordinatorNotAvailable, ErrorCode, FrameTooLarge,
    GroupNotEmpty, IllegalState, InvalidMessage, InvalidRegistration, InvalidRequest, MalformedFrame,
    MaxPollIntervalExceeded, OffsetOutOfRange,
    NoCommonStrategy, NotCoordinator, RebalanceInProgress,
    InvalidSessionTimeout, StaleEpoch, StaleGeneration, UnknownError,
    UnknownMessageType, UnknownPartition, UnsupportedVersion, WireError, code_for, error_for,
    AuthenticationFailed, GroupAuthorizationFailed, TopicAuthorizationFailed, StaticMemberOwnedByOtherPrincipal,
    HeldPartitionsRefused,
)
from zkcoord.wire.messages import (
    CLASSIC_COOPERATIVE, CLASSIC_EAGER, CLIENT_KINDS, CONSUMER_PROTOCOL, MAX_CLIENT_ID_BYTES, SPARK, THIN,
    clipped_client_id, DescribeGroupRequest, DescribeGroupResponse, MemberDescription,
    LARGEST, MEMBER_RETRY_MAX_S, OFFSET_RESETS, REGISTRY, SMALLEST, RESPONSES, STRATEGIES, ClusterMetadataRequest,
    ClusterMetadataResponse, NodeAddress, ErrorResponse, LeaveGroupRequest, LeaveGroupResponse, Message,
    MessageType, PingRequest, PingResponse,
    RegisterConsumerRequest, RegisterConsumerResponse, ResetOffsetsRequest, ResetOffsetsResponse,
    RestartFetcherResponse, StartRequest, StopRequest, StopResponse, TopicPartition,
    TopicPartitionOffset, offset_entries, offsets_of,
)

__all__ = [
    "HEADER_BYTES", "MAX_FRAME_SIZE", "SIZE_BYTES", "Frame", "FrameDecoder",
    "decode", "encode",
    "ConsumerIdInUse", "CoordinatorNotAvailable", "ErrorCode", "FrameTooLarge",
    "GroupNotEmpty", "IllegalState", "InvalidMessage", "InvalidRegistration", "InvalidRequest", "MalformedFrame",
    "MaxPollIntervalExceeded", "OffsetOutOfRange",
    "NoCommonStrategy", "NotCoordinator", "RebalanceInProgress",
    "InvalidSessionTimeout", "StaleEpoch", "StaleGeneration", "UnknownError",
    "UnknownMessageType", "UnknownPartition", "UnsupportedVersion", "WireError", "code_for",
    "error_for",
    "AuthenticationFailed", "GroupAuthorizationFailed", "TopicAuthorizationFailed",
    "StaticMemberOwnedByOtherPrincipal",
    "HeldPartitionsRefused",
    "CLASSIC_COOPERATIVE", "CLASSIC_EAGER", "CLIENT_KINDS", "CONSUMER_PROTOCOL", "MAX_CLIENT_ID_BYTES", "SPARK", "THIN",
    "clipped_client_id", "DescribeGroupRequest", "DescribeGroupResponse", "MemberDescription",
    "LARGEST", "MEMBER_RETRY_MAX_S", "OFFSET_RESETS", "REGISTRY", "SMALLEST", "RESPONSES", "STRATEGIES",
    "ClusterMetadataRequest",
    "ClusterMetadataResponse", "NodeAddress", "ErrorResponse", "LeaveGroupRequest",
    "LeaveGroupResponse", "Message",
    "MessageType", "PingRequest", "PingResponse", "RegisterConsumerRequest",
    "RegisterConsumerResponse", "ResetOffsetsRequest", "ResetOffsetsResponse", "RestartFetcherResponse",
    "StartRequest",
    "StopRequest", "StopResponse", "TopicPartition", "TopicPartitionOffset",
    "offset_entries", "offsets_of",
]
