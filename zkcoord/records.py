"""The record a consumer hands to the application, whatever fetched it."""

from typing import NamedTuple, Optional


class Record(NamedTuple):
    """One consumed message. ``offset`` is the record's own offset; the next
    offset to consume from its partition is ``offset + 1``."""

    topic: str
    partition: int
    offset: int
    key: Optional[bytes]
    value: Optional[bytes]
    timestamp: int  # milliseconds since the epoch, as the producer or broker set it
