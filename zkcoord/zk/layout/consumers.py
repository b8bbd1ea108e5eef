"""The Kafka 0.8 consumer nodes under /consumers/<group>: committed offsets and partition owners.

Both are plain text, not JSON: an offset is a decimal string (Kafka's
``ConsumerOffset`` in ``kafka/zk/ZkData.scala``), an owner the owning consumer
thread's id.
"""

from __future__ import annotations

import re

from zkcoord.zk.layout.names import _INT64_MAX, _ZK_BAD_CHARS, LayoutError, _is_int


def encode_offset(offset: int) -> bytes:
    """The next offset to consume, as the decimal string Kafka 0.8 wrote."""
    if not _is_int(offset) or not 0 <= offset <= _INT64_MAX:
        raise LayoutError(f"offset must be an integer in [0, {_INT64_MAX}], got {offset!r}")
    return str(offset).encode("ascii")


def decode_offset(data: bytes, where: str = "offset") -> int:
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise LayoutError(f"{where}: expected bytes, got {type(data).__name__}")
    raw = bytes(data)
    if not re.fullmatch(rb"[0-9]{1,19}", raw) or int(raw) > _INT64_MAX:
        raise LayoutError(f"{where}: {raw[:40]!r} is not a non-negative decimal offset")
    return int(raw)


def encode_owner(consumer_id: str) -> bytes:
    """The owning consumer's thread id as plain UTF-8 (Kafka 0.8 owner nodes)."""
    if not isinstance(consumer_id, str) or not consumer_id or _ZK_BAD_CHARS.search(consumer_id):
        raise LayoutError(f"consumer id must be a non-empty printable string, got {consumer_id!r}")
    return consumer_id.encode("utf-8")


def decode_owner(data: bytes, where: str = "owner") -> str:
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise LayoutError(f"{where}: expected bytes, got {type(data).__name__}")
    try:
        owner = bytes(data).decode("utf-8")
        encode_owner(owner)
        return owner
    except (UnicodeDecodeError, LayoutError):
        raise LayoutError(f"{where}: {bytes(data)[:40]!r} is not a consumer id") from None
