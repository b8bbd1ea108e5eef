"""What may stand in a ZooKeeper path of the layout, and the errors for what does not fit.

Topic names as Kafka accepts them, group and server ids as ZooKeeper accepts
them as path segments, partition, broker and slot numbers as int32s; and the
errors every module of the layout raises: :class:`LayoutError` for a path
argument or a node's content that does not fit, :class:`InvalidName` (also a
:class:`ConfigError`) for a name a user gave.
"""

from __future__ import annotations

import re

from zkcoord.errors import ConfigError, ZkcoordError

# ---------------------------------------------------------------------------
# errors


class LayoutError(ZkcoordError):
    """A path argument or a node's content does not fit the layout."""


class InvalidName(LayoutError, ConfigError):
    """A name that would become a path segment is not allowed."""


class InvalidTopicName(InvalidName):
    """A topic name that Kafka would refuse."""


class InvalidGroupId(InvalidName):
    """A consumer group id that cannot be a ZooKeeper path segment."""


# ---------------------------------------------------------------------------
# numbers: Kafka's fields are Java ints and longs

_INT32_MAX = 2**31 - 1
_INT32_MIN = -(2**31)
_INT64_MAX = 2**63 - 1


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


# ---------------------------------------------------------------------------
# names and numbers that become path segments

_TOPIC_MAX = 249  # Kafka's limit: the name plus a partition suffix must fit a file name
_TOPIC_CHARS = re.compile(r"[a-zA-Z0-9._-]+")
# ZooKeeper refuses these characters anywhere in a path (PathUtils.validatePath).
_ZK_BAD_CHARS = re.compile("[\u0000-\u001f\u007f-\u009f\ud800-\uf8ff\ufff0-\uffff]")


def validate_topic_name(name: object) -> str:
    """Return ``name`` if Kafka accepts it as a topic name, else raise InvalidTopicName."""
    if not isinstance(name, str) or not name:
        raise InvalidTopicName(f"topic name must be a non-empty string, got {name!r}")
    if name in (".", ".."):
        raise InvalidTopicName(f"topic name cannot be {name!r}")
    if len(name) > _TOPIC_MAX:
        raise InvalidTopicName(f"topic name is {len(name)} characters, the limit is {_TOPIC_MAX}")
    if not _TOPIC_CHARS.fullmatch(name):
        raise InvalidTopicName(
            f"topic name {name!r} may contain only ASCII letters, digits, '.', '_' and '-'"
        )
    return name


def _validate_segment(value: object, what: str, error: type[LayoutError]) -> str:
    if not isinstance(value, str) or not value:
        raise error(f"{what} must be a non-empty string, got {value!r}")
    if value in (".", "..") or "/" in value or _ZK_BAD_CHARS.search(value):
        raise error(f"{what} {value!r} cannot be a ZooKeeper path segment")
    return value


def validate_group_id(group: object) -> str:
    """Return ``group`` if it can be a path segment under /consumers, else raise InvalidGroupId."""
    return _validate_segment(group, "group id", InvalidGroupId)


# A group state's chunk is named by the digest of its bytes
# (zkcoord_nodes.chunk_name): 32 lowercase hex digits.
_CHUNK_NAME = re.compile(r"[0-9a-f]{32}")


def _validate_chunk_name(name: object) -> str:
    if not isinstance(name, str) or not _CHUNK_NAME.fullmatch(name):
        raise LayoutError(f"a group state chunk is named by 32 lowercase hex digits, not {name!r}")
    return name


def _validate_partition(partition: object) -> int:
    if not _is_int(partition) or not 0 <= partition <= _INT32_MAX:
        raise LayoutError(f"partition must be an integer in [0, {_INT32_MAX}], got {partition!r}")
    return partition


def _check_broker_id(broker_id: object) -> int:
    if not _is_int(broker_id) or not 0 <= broker_id <= _INT32_MAX:
        raise LayoutError(f"broker id must be an integer in [0, {_INT32_MAX}], got {broker_id!r}")
    return broker_id


def _check_slot(slot: object) -> int:
    if not _is_int(slot) or not 0 <= slot <= _INT32_MAX:
        raise LayoutError(f"a coordinator slot must be an integer in [0, {_INT32_MAX}], got {slot!r}")
    return slot
