"""What stops the fetcher: its fatal errors, each a :class:`FetchError`,
besides an offset out of range with the reset policy ``error`` and a
partition the brokers do not know (zkcoord.errors' OffsetOutOfRangeError and
UnknownPartitionError)."""

from __future__ import annotations

from zkcoord.errors import OffsetOutOfRangeError, UnknownPartitionError, ZkcoordError


class FetchError(ZkcoordError):
    """The fetcher cannot go on (a fatal error, or misuse)."""


class FetcherClosedError(FetchError):
    """The fetcher was used after ``close``."""


class TopicAuthorizationError(FetchError):
    """A broker refused this consumer's principal a topic (Kafka's
    TOPIC_AUTHORIZATION_FAILED): an ACL allowing it to READ the topic is
    missing. No retry helps until one is added."""


# Every error the fetcher raises from fetch() once it has stopped for good.
FETCHER_ERRORS = (FetchError, OffsetOutOfRangeError, UnknownPartitionError)
