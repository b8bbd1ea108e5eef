"""Frames of the coordinator protocol: encoding, decoding, and a stream decoder.

A frame is ``size int32 | type int16 | version int16 | correlation_id int32 |
body``, after Kafka 0.8's request header; ``size`` counts the bytes after
itself. Decoding is the only defence between the network and the coordinator,
so every way a frame can be wrong ends in a :class:`WireError` subclass and
nothing else, and a peer can never make the decoder hold more than one frame
of at most ``max_frame_size`` bytes.
"""

import io
import struct
from dataclasses import dataclass

from construct import ConstructError

from zkcoord.wire.errors import (
    FrameTooLarge, InvalidMessage, MalformedFrame, UnknownMessageType,
    UnsupportedVersion, WireError,
)
from zkcoord.wire import fast
from zkcoord.wire.fields import Inexpressible
from zkcoord.wire.messages import REGISTRY, MessageType

MAX_FRAME_SIZE = 1_048_576

SIZE_BYTES = 4
# type int16 | version int16 | correlation_id int32, after the size int32.
SIZED_HEADER = struct.Struct(">ihhi")
HEADER = struct.Struct(">hhi")
HEADER_BYTES = HEADER.size
_COMPILED = {}
# The hottest frames (a ping and its answer) skip construct: fast.py.
_FIXED_ENCODERS = fast.fixed_encoders()
_KINDS = {kind.value: kind for kind in MessageType}


def layout_of(cls, version):
    """The construct layout of ``cls`` at ``version``, compiled to Python the
    first time it is used where construct's compiler can (faster, the same
    bytes; tests/unit/test_wire_messages.py compares the two on every
    layout), or None if there is no such version."""
    key = (cls, version)
    compiled = _COMPILED.get(key)
    if compiled is None:
        layout = cls.LAYOUTS.get(version)
        if layout is None:
            return None
        compiled = _COMPILED[key] = compile_layout(layout)
    return compiled


def compile_layout(layout):
    """``layout`` compiled, or itself where the compiler cannot express it
    (a field computed by a lambda)."""
    try:
        return layout.compile()
    except (SyntaxError, NotImplementedError, ConstructError):
        return layout


@dataclass(frozen=True)
class Frame:
    """One decoded frame: its header and its message."""

    type: MessageType
    version: int
    correlation_id: int
    message: object


def encode(message, correlation_id, version=None, fast_paths=True):
    """The whole frame (size prefix included) carrying ``message``.

    ``version`` defaults to the latest version of the message's type. Raises
    UnsupportedVersion if the type has no such version or the message means
    something that version cannot say, InvalidMessage if a field does not fit
    its declaration (wrong type, out of range). ``fast_paths`` False builds
    it with construct alone (fast.py's reference).
    """
    cls = type(message)
    if REGISTRY.get(getattr(cls, "TYPE", None)) is not cls:
        raise InvalidMessage(f"not a protocol message: {message!r}")
    if version is None:
        version = cls.latest_version()
    fixed = _FIXED_ENCODERS.get((cls, version)) if fast_paths else None
    if fixed is not None:
        try:
            return fixed.encode(message, correlation_id)
        except struct.error as exc:
            raise InvalidMessage(f"{cls.__name__} v{version}: {exc}") from None
    layout = layout_of(cls, version)
    if layout is None:
        raise UnsupportedVersion(
            f"{cls.__name__} has no version {version} "
            f"(versions {sorted(cls.LAYOUTS)})")
    fields = {name: getattr(message, name)
              for name in cls.__dataclass_fields__}
    try:
        body = layout.build(fields)
        header = SIZED_HEADER.pack(HEADER_BYTES + len(body), cls.TYPE, version, correlation_id)
    except Inexpressible as exc:
        raise UnsupportedVersion(
            f"{cls.__name__} v{version}: {exc}") from None
    except (ConstructError, struct.error) as exc:
        raise InvalidMessage(f"{cls.__name__} v{version}: {exc}") from None
    return header + body


def decode(payload, fast_paths=True):
    """The Frame in ``payload``: one frame without its size prefix.
    ``fast_paths`` False reads it with construct alone (fast.py's reference)."""
    if len(payload) < HEADER_BYTES:
        raise MalformedFrame(
            f"frame of {len(payload)} bytes is shorter than its header")
    type_id, version, correlation_id = HEADER.unpack_from(payload)
    if fast_paths:
        decoder = fast.DECODERS.get((type_id, version))
        message = decoder(payload) if decoder is not None else None
        if message is not None:
            return Frame(_KINDS[type_id], version, correlation_id, message)
    where = dict(correlation_id=correlation_id)
    kind = _KINDS.get(type_id)
    if kind is None:
        raise UnknownMessageType(
            f"unknown message type {type_id}", **where)
    cls = REGISTRY[kind]
    layout = layout_of(cls, version)
    if layout is None:
        raise UnsupportedVersion(
            f"{cls.__name__} has no version {version}", **where)
    stream = io.BytesIO(payload)
    stream.seek(HEADER_BYTES)
    try:
        parsed = layout.parse_stream(stream)
    # A compiled layout reports a short frame as struct's error, bad text as
    # the codec's; the interpreted one wraps both in ConstructError.
    except (ConstructError, struct.error, UnicodeError) as exc:
        raise MalformedFrame(
            f"{cls.__name__} v{version}: {exc}", **where) from None
    left = len(payload) - stream.tell()
    if left:
        raise MalformedFrame(
            f"{cls.__name__} v{version}: {left} trailing bytes",
            **where)
    message = cls(**{name: parsed[name] for name in cls.__dataclass_fields__
                     if name in parsed})
    return Frame(kind, version, correlation_id, message)


class FrameDecoder:
    """Turns bytes, as they arrive from a connection, into Frames.

    ``feed`` takes any chunk (part of a frame, several frames) and returns the
    frames it completed. The size prefix is checked as soon as its four bytes
    are in: a negative size or one smaller than the header is MalformedFrame,
    one above ``max_frame_size`` is FrameTooLarge, before any of the body is
    kept. The decoder keeps at most one frame's bytes.

    A WireError from ``feed`` ends the stream: the frames completed earlier in
    that call are on the exception's ``frames`` attribute, and every later
    ``feed`` raises the same error again. The connection is to be closed (after
    an ErrorResponse, if the caller wants to say why).
    """

    def __init__(self, max_frame_size=MAX_FRAME_SIZE):
        self.max_frame_size = max_frame_size
        self._buffer = bytearray()
        self._size = None   # body size of the frame being read, once known
        self._error = None

    @property
    def buffered(self):
        """Bytes held for a frame not yet complete."""
        return len(self._buffer)

    @property
    def in_frame(self):
        """Whether part of a frame (its size, some of it) has arrived and not the rest."""
        return bool(self._buffer) or self._size is not None

    def feed(self, data):
        if self._error is not None:
            raise self._error
        frames = []
        try:
            if not self._buffer and self._size is None:
                # Between frames, as nearly every read of a member's answers
                # is: the whole frames it holds are read in place.
                data = self._whole_frames(data, frames)
            view = memoryview(data)
            while view:
                if self._size is None:
                    take = SIZE_BYTES - len(self._buffer)
                    self._buffer += view[:take]
                    view = view[take:]
                    if len(self._buffer) < SIZE_BYTES:
                        break
                    self._size = self._check_size(
                        int.from_bytes(self._buffer, "big", signed=True))
                    self._buffer.clear()
                take = self._size - len(self._buffer)
                if not self._buffer and len(view) >= take:
                    # Whole frame in this chunk: decode it without buffering.
                    payload, view = view[:take], view[take:]
                else:
                    self._buffer += view[:take]
                    view = view[take:]
                    if len(self._buffer) < self._size:
                        break
                    payload = self._buffer
                frames.append(decode(bytes(payload)))
                self._buffer = bytearray()
                self._size = None
        except WireError as exc:
            exc.frames = frames
            self._error = exc
            self._buffer = bytearray()
            raise
        return frames

    def _whole_frames(self, data, frames):
        """Decode the whole frames at the start of ``data`` into ``frames``; what is left of it."""
        at, end = 0, len(data)
        while end - at >= SIZE_BYTES:
            size = self._check_size(int.from_bytes(data[at:at + SIZE_BYTES], "big", signed=True))
            if end - at - SIZE_BYTES < size:
                break
            frames.append(decode(bytes(data[at + SIZE_BYTES:at + SIZE_BYTES + size])))
            at += SIZE_BYTES + size
        return data[at:] if at else data

    def _check_size(self, size):
        if size < HEADER_BYTES:
            raise MalformedFrame(
                f"frame size {size} is smaller than the {HEADER_BYTES}-byte "
                "header")
        if size > self.max_frame_size:
            raise FrameTooLarge(
                f"frame size {size} exceeds the maximum {self.max_frame_size}")
        return size
