"""Fast paths of the frames a coordinator sends and reads thousands of times a second.

A coordinator pings every member every third of its session timeout, and
each answer comes back: with 5,000 members that is some 1,500 PingRequests
out and as many PingResponses in every second, where going through
construct (a field dict, the compiled layout, a stream) costs more than the
rest of the round trip. This module encodes and decodes those frames with
:mod:`struct` instead.

The construct layouts in messages.py stay the definition of every frame:

- a layout made only of fixed-size integers (PingRequest's) is encoded by one
  struct format derived from the layout itself, so the two cannot disagree;
- PingResponse version 1 is read by hand, for the frames it reads as
  construct does; anything else (a flag byte other than 0 or 1, a length
  running past the frame, text that is not UTF-8, trailing bytes) is left to
  construct, which raises the error it always did.

tests/unit/test_wire_messages.py compares both paths with construct's over
generated messages and over damaged frames.
"""

import struct

from construct import FormatField, Renamed

from zkcoord.wire.errors import ErrorCode
from zkcoord.wire.messages import REGISTRY, PingResponse, TopicPartitionOffset

# size int32 | type int16 | version int16 | correlation_id int32: codec.py's SIZED_HEADER.
_SIZED_HEADER_FORMAT = ">ihhi"
_HEADER_BYTES = 8  # after the size: type, version, correlation id
_KNOWN_CODES = {code.value: code for code in ErrorCode}


def _fixed_format(layout):
    """The struct format of ``layout``'s fields if every one is a plain
    big-endian integer (None otherwise), and the fields' names in order."""
    formats, names = [], []
    for subcon in getattr(layout, "subcons", ()):
        if not (isinstance(subcon, Renamed) and isinstance(subcon.subcon, FormatField)
                and subcon.subcon.fmtstr[0] == ">"):
            return None, ()
        formats.append(subcon.subcon.fmtstr[1:])
        names.append(subcon.name)
    return ("".join(formats), tuple(names)) if formats else (None, ())


class FixedEncoder:
    """One message type and version whose body is fixed-size integers: the
    whole frame, size prefix and header included, in one struct call."""

    def __init__(self, cls, version, body_format, names):
        self.frame = struct.Struct(_SIZED_HEADER_FORMAT + body_format)
        self.size = self.frame.size - 4  # the size field counts the bytes after itself
        self.type = cls.TYPE
        self.version = version
        self.names = names

    def encode(self, message, correlation_id):
        """The frame; struct.error for a value that does not fit its field (the codec says InvalidMessage)."""
        return self.frame.pack(self.size, self.type, self.version, correlation_id,
                               *[getattr(message, name) for name in self.names])


def fixed_encoders():
    """{(message class, version): FixedEncoder} of every layout made of fixed-size integers only."""
    encoders = {}
    for cls in REGISTRY.values():
        for version, layout in cls.LAYOUTS.items():
            body_format, names = _fixed_format(layout)
            # A layout that names fields the message lacks (a Rebuild, say) is not this kind.
            if body_format is not None and set(names) <= set(cls.__dataclass_fields__):
                encoders[(cls, version)] = FixedEncoder(cls, version, body_format, names)
    return encoders


_SHORT = struct.Struct(">h")
_INT = struct.Struct(">i")
_CODE_AND_FLAG = struct.Struct(">hB")
_PARTITION_OFFSET = struct.Struct(">iq")
_TPO_MIN_BYTES = 2 + 4 + 8  # an empty topic, the partition, the offset


def ping_response_v1(payload):
    """PingResponse version 1 from a frame without its size prefix, or None
    where the frame is not one construct would read (then construct decides).

    ``error_code int16 | has_offsets int8 | [count int32 | (topic string,
    partition int32, offset int64) * count] | last_poll_ms_ago int32``."""
    end = len(payload)
    if end < _HEADER_BYTES + 7:
        return None
    code, has_offsets = _CODE_AND_FLAG.unpack_from(payload, _HEADER_BYTES)
    at = _HEADER_BYTES + 3
    if has_offsets == 0:
        offsets = None
    elif has_offsets == 1:
        if at + 4 > end:
            return None
        (count,) = _INT.unpack_from(payload, at)
        at += 4
        if count < 0 or count * _TPO_MIN_BYTES > end - at:
            return None
        entries = []
        for _ in range(count):
            if at + 2 > end:
                return None
            (length,) = _SHORT.unpack_from(payload, at)
            at += 2
            if length < 0 or at + length + 12 > end:
                return None
            try:
                topic = payload[at:at + length].decode("utf-8")
            except UnicodeDecodeError:
                return None
            at += length
            partition, offset = _PARTITION_OFFSET.unpack_from(payload, at)
            at += 12
            entries.append(TopicPartitionOffset(topic, partition, offset))
        offsets = tuple(entries)
    else:
        return None
    if at + 4 != end:
        return None
    (last_poll_ms_ago,) = _INT.unpack_from(payload, at)
    return PingResponse(error_code=_KNOWN_CODES.get(code, code), offsets=offsets, last_poll_ms_ago=last_poll_ms_ago)


# {(type id, version): decoder(payload) -> message or None}.
DECODERS = {(PingResponse.TYPE.value, 1): ping_response_v1}
