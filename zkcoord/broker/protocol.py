"""The Kafka wire protocol as the broker speaks it: which APIs and versions it
offers, how a request frame becomes a request object and how a response object
becomes the bytes (and file ranges) that go back.

The codecs are kafka-python's protocol classes, generated from Kafka's own
message schemas (which still describe the fields of the versions Kafka 4
dropped, so the library decodes and encodes them too); this module only
chooses among them. The versions offered are every one a Kafka 2.8 broker
accepts, and beyond that those the broker implements: Fetch stops at 12 and
Produce at 11 because later versions name topics by id.
"""

from __future__ import annotations

import io
import os
from typing import NamedTuple, Optional, Union

from kafka.protocol.admin import (
    CreatePartitionsRequest, CreateTopicsRequest, DescribeClusterRequest, DescribeConfigsRequest, DescribeGroupsRequest,
    IncrementalAlterConfigsRequest, ListGroupsRequest,
)
from kafka.protocol.consumer import (
    FetchRequest, HeartbeatRequest, JoinGroupRequest, LeaveGroupRequest, ListOffsetsRequest, OffsetCommitRequest,
    OffsetDeleteRequest, OffsetFetchRequest, SyncGroupRequest,
)
from kafka.protocol.metadata import (
    ApiVersionsRequest, ApiVersionsResponse, FindCoordinatorRequest, MetadataRequest,
)
from kafka.protocol.producer import InitProducerIdRequest, ProduceRequest
from kafka.protocol.sasl import SaslAuthenticateRequest, SaslHandshakeRequest
from kafka.protocol.schemas.fields.codecs import Int16, Int32, UnsignedVarInt32

from zkcoord.broker.groups.messages import ConsumerGroupHeartbeatRequest
from zkcoord.broker.log import ReadSlice
from zkcoord.errors import ZkcoordError

UNSUPPORTED_VERSION = 35


class ProtocolError(ZkcoordError):
    """A request frame the broker cannot or will not decode; the connection is
    closed, as a Kafka broker does."""


class SupportedApi(NamedTuple):
    request: type
    min_version: int
    max_version: int


API_KEY_PRODUCE = ProduceRequest.API_KEY
API_KEY_FETCH = FetchRequest.API_KEY
API_KEY_LIST_OFFSETS = ListOffsetsRequest.API_KEY
API_KEY_METADATA = MetadataRequest.API_KEY
API_KEY_API_VERSIONS = ApiVersionsRequest.API_KEY
API_KEY_INIT_PRODUCER_ID = InitProducerIdRequest.API_KEY
API_KEY_FIND_COORDINATOR = FindCoordinatorRequest.API_KEY
API_KEY_CREATE_TOPICS = CreateTopicsRequest.API_KEY
API_KEY_CREATE_PARTITIONS = CreatePartitionsRequest.API_KEY
API_KEY_DESCRIBE_CONFIGS = DescribeConfigsRequest.API_KEY
API_KEY_INCREMENTAL_ALTER_CONFIGS = IncrementalAlterConfigsRequest.API_KEY
API_KEY_DESCRIBE_CLUSTER = DescribeClusterRequest.API_KEY
API_KEY_JOIN_GROUP = JoinGroupRequest.API_KEY
API_KEY_CONSUMER_GROUP_HEARTBEAT = ConsumerGroupHeartbeatRequest.API_KEY
API_KEY_SASL_HANDSHAKE = SaslHandshakeRequest.API_KEY
API_KEY_SASL_AUTHENTICATE = SaslAuthenticateRequest.API_KEY
# What a client may send before it has authenticated, when authentication is required.
BEFORE_AUTHENTICATION = (API_KEY_API_VERSIONS, API_KEY_SASL_HANDSHAKE, API_KEY_SASL_AUTHENTICATE)
# The group APIs the authorizer asks about: the bridge's methods take the principal and host.
# The group APIs, bridged into the coordinator (broker/groups/); every one is
# asked with the client's principal and host, for the authorizer.
GROUP_APIS = {
    FindCoordinatorRequest.API_KEY: "find_coordinator",
    JoinGroupRequest.API_KEY: "join_group",
    SyncGroupRequest.API_KEY: "sync_group",
    HeartbeatRequest.API_KEY: "heartbeat",
    LeaveGroupRequest.API_KEY: "leave_group",
    OffsetCommitRequest.API_KEY: "offset_commit",
    OffsetFetchRequest.API_KEY: "offset_fetch",
    ListGroupsRequest.API_KEY: "list_groups",
    DescribeGroupsRequest.API_KEY: "describe_groups",
    OffsetDeleteRequest.API_KEY: "offset_delete",
}

# Produce 0-2 and Fetch 0-3 predate record batches (magic 2): their messages
# are converted (broker/legacy.py), as Kafka 2.8 converts them. ListOffsets 0
# answers with segment boundaries.
SUPPORTED: dict[int, SupportedApi] = {
    API_KEY_PRODUCE: SupportedApi(ProduceRequest, 0, 11),
    API_KEY_FETCH: SupportedApi(FetchRequest, 0, 12),
    API_KEY_LIST_OFFSETS: SupportedApi(ListOffsetsRequest, 0, 8),
    API_KEY_METADATA: SupportedApi(MetadataRequest, 0, 12),
    API_KEY_API_VERSIONS: SupportedApi(ApiVersionsRequest, 0, 3),
    API_KEY_INIT_PRODUCER_ID: SupportedApi(InitProducerIdRequest, 0, 4),
    API_KEY_CREATE_TOPICS: SupportedApi(CreateTopicsRequest, 0, 7),
    API_KEY_CREATE_PARTITIONS: SupportedApi(CreatePartitionsRequest, 0, 3),
    API_KEY_DESCRIBE_CONFIGS: SupportedApi(DescribeConfigsRequest, 0, 4),
    # Answered, each change refused (admin_apis.alter_configs): kafka-configs
    # --alter then says why rather than that the broker is too old.
    API_KEY_INCREMENTAL_ALTER_CONFIGS: SupportedApi(IncrementalAlterConfigsRequest, 0, 1),
    # Kafka 2.8 has v0 only; v1 (the endpoint type) is what kafka-python's
    # describe_cluster() can read.
    API_KEY_DESCRIBE_CLUSTER: SupportedApi(DescribeClusterRequest, 0, 1),
    # The group APIs, at the versions of Kafka 2.8 (the last before KIP-848):
    # librdkafka 2.x uses up to JoinGroup 5 and SyncGroup 3, kafka-python up
    # to JoinGroup 7 and SyncGroup 5. OffsetFetch 8 would batch groups.
    API_KEY_FIND_COORDINATOR: SupportedApi(FindCoordinatorRequest, 0, 3),
    JoinGroupRequest.API_KEY: SupportedApi(JoinGroupRequest, 0, 7),
    SyncGroupRequest.API_KEY: SupportedApi(SyncGroupRequest, 0, 5),
    HeartbeatRequest.API_KEY: SupportedApi(HeartbeatRequest, 0, 4),
    LeaveGroupRequest.API_KEY: SupportedApi(LeaveGroupRequest, 0, 4),
    OffsetCommitRequest.API_KEY: SupportedApi(OffsetCommitRequest, 0, 8),
    OffsetFetchRequest.API_KEY: SupportedApi(OffsetFetchRequest, 0, 7),
    # ListGroups 5 filters by type and names it (Kafka 4's kafka-consumer-groups --list --type).
    ListGroupsRequest.API_KEY: SupportedApi(ListGroupsRequest, 0, 5),
    DescribeGroupsRequest.API_KEY: SupportedApi(DescribeGroupsRequest, 0, 5),
    # Answered with Kafka's refusals, and a refusal of its own where Kafka
    # would delete a committed offset (the bridge's offset_delete).
    OffsetDeleteRequest.API_KEY: SupportedApi(OffsetDeleteRequest, 0, 0),
    # KIP-848's server-side assignment (librdkafka's group.protocol=consumer
    # needs version 1: the client names itself and may subscribe by regex).
    API_KEY_CONSUMER_GROUP_HEARTBEAT: SupportedApi(ConsumerGroupHeartbeatRequest, 0, 1),
    # SASL (broker/sasl.py): handshake 0 is followed by bare tokens, 1 by
    # SaslAuthenticate; 2 is what librdkafka and kafka-python ask for today.
    API_KEY_SASL_HANDSHAKE: SupportedApi(SaslHandshakeRequest, 0, 1),
    API_KEY_SASL_AUTHENTICATE: SupportedApi(SaslAuthenticateRequest, 0, 2),
}


class UnsupportedApiVersions(NamedTuple):
    """An ApiVersions request of a version we lack: answered in version 0."""

    correlation_id: int


def api_versions_response(version: int, error_code: int = 0) -> ApiVersionsResponse:
    keys = [
        ApiVersionsResponse.ApiVersion(api_key=key, min_version=api.min_version,
                                       max_version=api.max_version)
        for key, api in sorted(SUPPORTED.items())
    ]
    return ApiVersionsResponse(version=version, error_code=error_code, api_keys=keys,
                               throttle_time_ms=0)


def decode_request(frame: bytes) -> Union[object, UnsupportedApiVersions]:
    """The request object for one frame (without its size prefix), with its
    header attached. Raises ProtocolError for anything we do not serve."""
    if len(frame) < 8:
        raise ProtocolError(f"request of {len(frame)} bytes is shorter than a request header")
    api_key = Int16.decode_from(frame, 0)[0]
    version = Int16.decode_from(frame, 2)[0]
    api = SUPPORTED.get(api_key)
    if api is None:
        raise ProtocolError(f"unsupported API key {api_key}")
    if not api.min_version <= version <= api.max_version:
        if api_key == API_KEY_API_VERSIONS and version > api.max_version:
            # A newer client asks first with its own newest version; Kafka
            # answers in version 0 with UNSUPPORTED_VERSION and the list.
            return UnsupportedApiVersions(Int32.decode_from(frame, 4)[0])
        raise ProtocolError(f"API {api.request.__name__} version {version} is not supported")
    try:
        return _decode_whole(api.request, frame, version)
    except ProtocolError:
        raise
    except Exception as exc:  # the library raises many types on bad bytes
        detail = repr(exc)
        if len(detail) > 160:
            detail = detail[:160] + "..."
        raise ProtocolError(f"malformed {api.request.__name__} v{version}: {detail}") from None


def _decode_whole(request_class, frame: bytes, version: int):
    """``request_class.decode(frame, version, header=True)``, and a frame too
    short for what its length fields announce is an error: the library's
    compiled decoder slices a bytes field (Produce's records) without
    checking that the frame holds all of it, so the decoding is spelt out
    here to see where it ended (kafka-python is pinned for this)."""
    data = memoryview(frame)
    header_bytes = io.BytesIO(frame)
    header = request_class.parse_header(header_bytes, version=version)
    flexible = request_class.flexible_version_q(version)
    decode = request_class._struct.compiled_decode_from(version, compact=flexible, tagged=flexible,
                                                       data_class=request_class[None])
    request, end = decode(data, header_bytes.tell())
    if end > len(frame):
        raise ProtocolError(f"{request_class.__name__} v{version} is {end - len(frame)} bytes shorter than "
                            f"its fields announce")
    _check_nulls(request, _null_checks(request_class, version), "")
    request._header = header
    return request


# Field types whose encoding can say null (a length of -1): arrays, structs and these.
_NULLABLE_KINDS = frozenset({"string", "bytes", "records"})
_NULL_CHECKS: dict[tuple[type, int], tuple] = {}


class _NullCheck(NamedTuple):
    name: str
    refused: bool  # null refused: the field is not nullable in this version
    array: bool
    elements_refused: bool  # an array of strings or bytes: a null element refused
    children: tuple  # the checks of a struct's (or each array element's) fields


def _null_checks(request_class, version: int) -> tuple:
    """Where a ``request_class`` request of ``version`` may carry a null its
    schema does not allow, worked out once per class and version."""
    key = (request_class, version)
    checks = _NULL_CHECKS.get(key)
    if checks is None:
        checks = _NULL_CHECKS[key] = _field_checks(request_class._struct.fields, version)
    return checks


def _field_checks(fields: dict, version: int) -> tuple:
    checks = []
    for field in fields.values():
        if not field.for_version_q(version) or field.tagged_field_q(version):
            continue  # absent, or tagged (absent means its default, never null)
        kind = field._type_str
        array = kind.startswith("[]")
        nested = field.is_struct() or field.is_struct_array()
        children = _field_checks(field.fields, version) if nested else ()
        refused = (array or nested or kind in _NULLABLE_KINDS) and not field.nullable_for_version_q(version)
        elements_refused = array and not nested and kind[2:] in _NULLABLE_KINDS
        if refused or elements_refused or children:
            checks.append(_NullCheck(field.name, refused, array, elements_refused, children))
    return tuple(checks)


def _check_nulls(struct, checks: tuple, path: str) -> None:
    """Refuse a null where the schema allows none, as Kafka does: the
    decoder lets any length of -1 through, and the handlers rely on the
    schema."""
    for check in checks:
        value = getattr(struct, check.name)
        if value is None:
            if check.refused:
                raise ProtocolError(f"field {path}{check.name} is null, which its type does not allow")
            continue
        if check.elements_refused and None in value:
            raise ProtocolError(f"array {path}{check.name} holds a null, which its type does not allow")
        if check.children:
            for item in value if check.array else (value,):
                _check_nulls(item, check.children, f"{path}{check.name}.")


class FileRange(NamedTuple):
    fd: int
    offset: int
    count: int


Part = Union[bytes, FileRange]


def encode_response(response, correlation_id: int,
                    slices: Optional[dict[bytes, ReadSlice]] = None) -> list[Part]:
    """Frame ``response``. ``slices`` maps placeholder byte strings that were
    put in place of records fields to the file ranges that replace them, so a
    large fetch goes out with sendfile instead of through Python."""
    response.with_header(correlation_id=correlation_id)
    data = response.encode(header=True, framed=True)
    if not slices:
        return [bytes(data)]
    flexible = response.flexible_version_q(response.API_VERSION)
    parts: list[Part] = []
    found = []
    for marker, region in slices.items():
        pos = data.find(marker)
        if pos < 0:
            raise ProtocolError("records placeholder missing from an encoded response")
        found.append((pos, marker, region))
    found.sort()
    cursor = 0
    extra = 0
    for pos, marker, region in found:
        # The placeholder's length prefix sits right before it.
        if flexible:
            prefix_len = len(UnsignedVarInt32.encode(len(marker) + 1))
            prefix = UnsignedVarInt32.encode(region.length + 1)
        else:
            prefix_len = 4
            prefix = Int32.encode(region.length)
        parts.append(bytes(data[cursor:pos - prefix_len]))
        parts.append(bytes(prefix))
        parts.append(FileRange(region.fd, region.position, region.length))
        extra += len(prefix) - prefix_len + region.length - len(marker)
        cursor = pos + len(marker)
    parts.append(bytes(data[cursor:]))
    size = len(data) - 4 + extra
    parts[0] = bytes(Int32.encode(size)) + parts[0][4:]
    return parts


def new_marker() -> bytes:
    return b"\x00zk" + os.urandom(13)
