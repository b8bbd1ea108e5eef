"""Error codes of the coordinator protocol and the exceptions they stand for.

Every response that can fail carries an int16 ``error_code``. :class:`ErrorCode`
names the codes; each code has one exception class, derived from
:class:`WireError`, whose ``retriable`` flag says whether the same operation may
succeed later (the coordinator moved, a rebalance is running) or never will (a
malformed frame, a bad registration). :func:`error_for` turns a code received
from a peer into an exception to raise; :func:`code_for` turns an exception
into the code to send. wire/errors.json lists the codes for every language;
tests/unit/test_wire_vectors.py keeps it equal to :class:`ErrorCode`.
"""

from enum import IntEnum

from zkcoord.errors import ZkcoordError


class ErrorCode(IntEnum):
    """The int16 error codes carried by responses and ErrorResponse."""

    UNKNOWN = -1
    NONE = 0
    MALFORMED_FRAME = 1
    FRAME_TOO_LARGE = 2
    UNKNOWN_MESSAGE_TYPE = 3
    UNSUPPORTED_VERSION = 4
    CONSUMER_ID_IN_USE = 5
    INVALID_SESSION_TIMEOUT = 6
    INVALID_REGISTRATION = 7
    STALE_EPOCH = 8
    STALE_GENERATION = 9
    NOT_COORDINATOR = 10
    COORDINATOR_NOT_AVAILABLE = 11
    ILLEGAL_STATE = 12
    NO_COMMON_STRATEGY = 13
    REBALANCE_IN_PROGRESS = 14
    MAX_POLL_INTERVAL_EXCEEDED = 15
    GROUP_NOT_EMPTY = 16
    UNKNOWN_PARTITION = 17
    INVALID_REQUEST = 18
    OFFSET_OUT_OF_RANGE = 19
    AUTHENTICATION_FAILED = 20
    GROUP_AUTHORIZATION_FAILED = 21
    TOPIC_AUTHORIZATION_FAILED = 22
    STATIC_MEMBER_OWNED_BY_OTHER_PRINCIPAL = 23
    HELD_PARTITIONS_REFUSED = 24


class WireError(ZkcoordError):
    """Root of the coordinator protocol's errors.

    ``correlation_id`` is set when the error concerns a frame whose header
    could be read, so that the peer can be told which request failed.
    """

    code = ErrorCode.UNKNOWN

    def __init__(self, message="", *, correlation_id=None):
        super().__init__(message)
        self.correlation_id = correlation_id


class UnknownError(WireError):
    """The peer reported an error this side does not know (or UNKNOWN itself)."""

    code = ErrorCode.UNKNOWN


class InvalidMessage(WireError, ValueError):
    """A message or argument that the codec cannot express (a local bug,
    never sent on the wire under its own code)."""


class MalformedFrame(WireError):
    """A frame whose body is truncated, has trailing bytes or bad field values."""

    code = ErrorCode.MALFORMED_FRAME


class FrameTooLarge(WireError):
    """A frame whose size prefix exceeds the receiver's maximum."""

    code = ErrorCode.FRAME_TOO_LARGE


class UnknownMessageType(WireError):
    """A frame whose message type id this side does not know."""

    code = ErrorCode.UNKNOWN_MESSAGE_TYPE


class UnsupportedVersion(WireError):
    """A message version this side does not speak, or a message that cannot be
    expressed in the version asked for."""

    code = ErrorCode.UNSUPPORTED_VERSION


class ConsumerIdInUse(WireError):
    """Another live member of the group has registered with this consumer id.
    Retriable: the other registration ends when its session times out."""

    code = ErrorCode.CONSUMER_ID_IN_USE
    retriable = True


class InvalidSessionTimeout(WireError):
    """The registration's session timeout is outside the coordinator's range
    (below its minimum or above its maximum)."""

    code = ErrorCode.INVALID_SESSION_TIMEOUT


class InvalidRegistration(WireError):
    """A registration with bad field values (empty group, unknown
    auto_offset_reset, no subscription, ...)."""

    code = ErrorCode.INVALID_REGISTRATION


class StaleEpoch(WireError):
    """The request came from a coordinator older than one already seen."""

    code = ErrorCode.STALE_EPOCH


class StaleGeneration(WireError):
    """The request belongs to a group generation older than the current one."""

    code = ErrorCode.STALE_GENERATION


class NotCoordinator(WireError):
    """The server asked is not (or no longer) the coordinator."""

    code = ErrorCode.NOT_COORDINATOR
    retriable = True


class CoordinatorNotAvailable(WireError):
    """No coordinator is elected at the moment."""

    code = ErrorCode.COORDINATOR_NOT_AVAILABLE
    retriable = True


class IllegalState(WireError):
    """The request is not valid in the receiver's current state (for example a
    Start that changes partitions that were never stopped)."""

    code = ErrorCode.ILLEGAL_STATE


class NoCommonStrategy(WireError):
    """The member supports none of the group's assignment strategies."""

    code = ErrorCode.NO_COMMON_STRATEGY


class RebalanceInProgress(WireError):
    """The group is rebalancing; the request may succeed once it is done."""

    code = ErrorCode.REBALANCE_IN_PROGRESS
    retriable = True


class MaxPollIntervalExceeded(WireError):
    """The member answered pings but its application did not poll within its
    max poll interval; it was removed and rejoins when the application polls."""

    code = ErrorCode.MAX_POLL_INTERVAL_EXCEEDED
    retriable = True


class GroupNotEmpty(WireError):
    """The request needs a group without members (an offset reset without
    force); the message names them."""

    code = ErrorCode.GROUP_NOT_EMPTY


class UnknownPartition(WireError):
    """The request names a topic the coordinator does not know, or a
    partition the topic does not have."""

    code = ErrorCode.UNKNOWN_PARTITION


class InvalidRequest(WireError):
    """A request with bad field values (a negative offset, a partition named twice, a bad group id)."""

    code = ErrorCode.INVALID_REQUEST


class OffsetOutOfRange(WireError):
    """An offset above the partition's log end (or one whose log end could not
    be learnt): refused, the committed offset kept."""

    code = ErrorCode.OFFSET_OUT_OF_RANGE


class AuthenticationFailed(WireError):
    """The registration's credential did not prove its user (unknown user,
    wrong password), or the coordinator requires one and none was given."""

    code = ErrorCode.AUTHENTICATION_FAILED


class GroupAuthorizationFailed(WireError):
    """The authenticated principal may not do this to the group (no ACL allows it)."""

    code = ErrorCode.GROUP_AUTHORIZATION_FAILED


class TopicAuthorizationFailed(WireError):
    """The authenticated principal may not read a topic of its subscription (no ACL allows it)."""

    code = ErrorCode.TOPIC_AUTHORIZATION_FAILED


class StaticMemberOwnedByOtherPrincipal(WireError):
    """A static consumer id registered by one principal, claimed by another:
    only the principal that holds it may take it over."""

    code = ErrorCode.STATIC_MEMBER_OWNED_BY_OTHER_PRINCIPAL


class HeldPartitionsRefused(WireError):
    """A registration claimed partitions its member kept through the loss of
    its coordinator, some of which it may not keep (RegisterConsumerResponse
    version 6 names them): it stops those and registers again at once,
    handing their offsets over."""

    code = ErrorCode.HELD_PARTITIONS_REFUSED
    retriable = True

    def __init__(self, message="", *, refused=(), correlation_id=None):
        super().__init__(message, correlation_id=correlation_id)
        self.refused = tuple(refused)  # TopicPartitions, for RegisterConsumerResponse.refused


_CLASSES = {
    cls.code: cls
    for cls in (
        UnknownError, MalformedFrame, FrameTooLarge, UnknownMessageType,
        UnsupportedVersion, ConsumerIdInUse, InvalidSessionTimeout,
        InvalidRegistration, StaleEpoch, StaleGeneration, NotCoordinator,
        CoordinatorNotAvailable, IllegalState, NoCommonStrategy,
        RebalanceInProgress, MaxPollIntervalExceeded, GroupNotEmpty,
        UnknownPartition, InvalidRequest, OffsetOutOfRange, AuthenticationFailed,
        GroupAuthorizationFailed, TopicAuthorizationFailed,
        StaticMemberOwnedByOtherPrincipal, HeldPartitionsRefused,
    )
}


def error_for(code, message=""):
    """The exception instance for an error code received from a peer.

    A code this side does not know gives :class:`UnknownError` with the number
    in its message. ``ErrorCode.NONE`` is not an error: :class:`InvalidMessage`.
    """
    if code == ErrorCode.NONE:
        raise InvalidMessage("error code 0 (NONE) is not an error")
    cls = _CLASSES.get(code)
    if cls is None:
        text = f"unknown error code {int(code)}"
        return UnknownError(f"{text}: {message}" if message else text)
    return cls(message or ErrorCode(code).name)


def code_for(exc):
    """The error code to send for an exception; UNKNOWN for anything that is
    not one of the protocol's errors."""
    if isinstance(exc, WireError) and not isinstance(exc, InvalidMessage):
        return exc.code
    return ErrorCode.UNKNOWN
