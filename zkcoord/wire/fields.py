"""Field types of the coordinator protocol, as ``construct`` declarations.

Integers are big-endian and signed. A string is an int16 byte count followed by
that many bytes of UTF-8 (Kafka 0.8's encoding; no null string). An array is an
int32 (or, where seed 001 fixes it, int16) entry count followed by the entries.
A boolean is one byte, 0 or 1.

Parsing is strict because frames come from the network: a negative length, a
string running past the frame, invalid UTF-8, a boolean byte other than 0 or 1,
or an array count whose entries could not fit in the bytes that remain (checked
before any entry is read, so a forged count costs nothing) raises
:class:`construct.ValidationError`, which the codec reports as MalformedFrame.
Arrays parse to tuples so that decoded messages are hashable and compare equal
to the ones built.
"""

import dataclasses
import json
import re

from construct import (
    Adapter, Construct, ConstructError, FormatField, Int8ub, Int16sb, Int32sb,
    Int64sb, Struct, Subconstruct, ValidationError,
)
from construct.core import stream_read, stream_size, stream_tell, stream_write

from zkcoord.wire.errors import ErrorCode

Int16 = Int16sb
Int32 = Int32sb
Int64 = Int64sb


class Inexpressible(ConstructError):
    """A value that the version being built has no bytes for."""


def remaining(stream):
    """Bytes left between the stream position and the end of the frame."""
    return stream_size(stream) - stream_tell(stream, None)


class _String(Construct):
    """int16 byte count, then UTF-8 bytes."""

    min_size = 2

    def _parse(self, stream, context, path):
        length = Int16._parsereport(stream, context, path)
        if length < 0:
            raise ValidationError(f"negative string length {length}", path=path)
        if length > remaining(stream):
            raise ValidationError(
                f"string of {length} bytes runs past the frame", path=path)
        data = stream_read(stream, length, path)
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ValidationError(f"string is not UTF-8: {exc}", path=path)

    def _build(self, obj, stream, context, path):
        if not isinstance(obj, str):
            raise ValidationError(f"expected a str, got {obj!r}", path=path)
        try:
            data = obj.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise ValidationError(f"string is not encodable: {exc}", path=path)
        if len(data) > 0x7FFF:
            raise ValidationError(
                f"string of {len(data)} bytes exceeds 32767", path=path)
        Int16._build(len(data), stream, context, path)
        stream_write(stream, data, len(data), path)
        return obj


String = _String()


class _Bool(Adapter):
    """One byte, 0 or 1; anything else is malformed rather than true."""

    def _decode(self, obj, context, path):
        if obj > 1:
            raise ValidationError(f"boolean byte {obj} is neither 0 nor 1",
                                  path=path)
        return obj == 1

    def _encode(self, obj, context, path):
        if not isinstance(obj, bool):
            raise ValidationError(f"expected a bool, got {obj!r}", path=path)
        return int(obj)


Bool = _Bool(Int8ub)


class _ErrorCodeField(Adapter):
    """int16 error code; known codes parse to ErrorCode, unknown ones stay int
    so that a newer peer's code is passed on rather than rejected."""

    def _decode(self, obj, context, path):
        try:
            return ErrorCode(obj)
        except ValueError:
            return obj

    def _encode(self, obj, context, path):
        if isinstance(obj, bool) or not isinstance(obj, int):
            raise ValidationError(f"expected an error code, got {obj!r}",
                                  path=path)
        return int(obj)


ErrorCodeField = _ErrorCodeField(Int16)

_DECIMAL = re.compile(r"(0|-?[1-9][0-9]{0,9})\Z")


class _PartitionString(Adapter):
    """Version 0's partition field: the partition number as a decimal string."""

    def _decode(self, obj, context, path):
        if not _DECIMAL.match(obj) or not -2**31 <= int(obj) < 2**31:
            raise ValidationError(
                f"partition {obj!r} is not a decimal int32", path=path)
        return int(obj)

    def _encode(self, obj, context, path):
        if isinstance(obj, bool) or not isinstance(obj, int):
            raise ValidationError(f"expected a partition number, got {obj!r}",
                                  path=path)
        return str(obj)


PartitionString = _PartitionString(String)


def min_size(subcon):
    """The fewest bytes an encoding of ``subcon`` can take."""
    if hasattr(subcon, "min_size"):
        return subcon.min_size
    if isinstance(subcon, FormatField):
        return subcon.length
    if isinstance(subcon, Struct):
        return sum(min_size(sc) for sc in subcon.subcons)
    if isinstance(subcon, Subconstruct):
        return min_size(subcon.subcon)
    raise TypeError(f"no minimum size known for {subcon!r}")


class _Array(Construct):
    """A count, then that many entries, parsed to a tuple."""

    def __init__(self, count, entry):
        super().__init__()
        self.count = count
        self.entry = entry
        self.entry_size = min_size(entry)
        self.min_size = count.length

    def _parse(self, stream, context, path):
        count = self.count._parsereport(stream, context, path)
        if count < 0:
            raise ValidationError(f"negative array count {count}", path=path)
        left = remaining(stream)
        if count * self.entry_size > left:
            raise ValidationError(
                f"{count} entries cannot fit in the {left} bytes left",
                path=path)
        return tuple(self.entry._parsereport(stream, context, path)
                     for _ in range(count))

    def _build(self, obj, stream, context, path):
        if not isinstance(obj, (tuple, list)):
            raise ValidationError(f"expected a sequence, got {obj!r}", path=path)
        self.count._build(len(obj), stream, context, path)
        for item in obj:
            self.entry._build(item, stream, context, path)
        return obj


def Array32(entry):
    """An int32-counted array of ``entry``."""
    return _Array(Int32, entry)


def Array16(entry):
    """An int16-counted array of ``entry`` (seed 001's sizes)."""
    return _Array(Int16, entry)


class Entry(Adapter):
    """An array entry: a Struct whose fields are those of a dataclass or a NamedTuple."""

    def __init__(self, cls, *fields):
        declared = Struct(*fields)
        super().__init__(declared)
        # What the codec runs: compiled where construct's compiler can (an
        # entry is parsed once per partition of a Start or Stop, and compiled
        # it costs a tenth); the declared Struct stays the reference that
        # tests/unit/test_wire_messages.py compares it with.
        self.declared = declared
        self.min_size = min_size(declared)
        try:
            self.subcon = declared.compile()
        except (SyntaxError, NotImplementedError, ConstructError):
            pass
        self.cls = cls
        # A dataclass's fields, or a NamedTuple's (records.TopicPartition).
        self.names = list(getattr(cls, "_fields", None) or (f.name for f in dataclasses.fields(cls)))

    def _decode(self, obj, context, path):
        return self.cls(**{name: obj[name] for name in self.names})

    def _encode(self, obj, context, path):
        if not isinstance(obj, self.cls):
            raise ValidationError(
                f"expected {self.cls.__name__}, got {obj!r}", path=path)
        return {name: getattr(obj, name) for name in self.names}


class Implied(Construct):
    """A field that an old version has no bytes for but whose meaning it fixes
    (version 0's Stop revokes everything). Parses to ``value``; building any
    other value cannot be expressed in that version."""

    min_size = 0

    def __init__(self, value):
        super().__init__()
        self.value = value

    def _parse(self, stream, context, path):
        return self.value

    def _build(self, obj, stream, context, path):
        if obj != self.value:
            raise Inexpressible(
                f"{obj!r} cannot be expressed: this version implies "
                f"{self.value!r}", path=path)
        return obj


class OptionalTail(Subconstruct):
    """A field that is either absent (the frame ends before it: None) or
    present (seed 001's PingResponse offsets, left out without auto-commit)."""

    min_size = 0

    def _parse(self, stream, context, path):
        if remaining(stream) == 0:
            return None
        return self.subcon._parsereport(stream, context, path)

    def _build(self, obj, stream, context, path):
        if obj is not None:
            self.subcon._build(obj, stream, context, path)
        return obj


# Version 0's topic_count: Kafka 0.8's consumer subscription JSON, e.g.
# {"pattern":"static","subscription":{"orders":1}} for named topics or
# {"pattern":"white_list","subscription":{"orders-.*":1}} for a regex. The
# stream counts are ignored: a zkcoord consumer is one stream.

def topic_count(topics, pattern):
    """Version 0's topic_count string for a subscription."""
    if topics and pattern:
        raise Inexpressible(
            "version 0 cannot subscribe to topics and a pattern at once")
    if len(set(topics)) != len(topics):
        raise Inexpressible("version 0 cannot carry duplicate topics")
    if pattern:
        kind, keys = "white_list", [pattern]
    else:
        kind, keys = "static", topics
    return json.dumps({"pattern": kind, "subscription": {k: 1 for k in keys}},
                      separators=(",", ":"))


def parse_topic_count(text):
    """(topics, pattern) from version 0's topic_count string."""
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise ValidationError(f"topic_count is not JSON: {exc}")
    if (not isinstance(doc, dict)
            or not isinstance(doc.get("subscription"), dict)
            or doc.get("pattern") not in ("static", "white_list")):
        raise ValidationError(
            f"topic_count {text[:80]!r} is not a static or white_list "
            "subscription")
    keys = tuple(doc["subscription"])
    if doc["pattern"] == "static":
        return keys, ""
    if len(keys) != 1:
        raise ValidationError("a white_list topic_count holds exactly one regex")
    return (), keys[0]
