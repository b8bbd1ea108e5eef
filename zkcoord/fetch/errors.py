"""What stops the fetcher: its fatal errors, each a :class:`FetchError`."""

from __future__ import annotations

from zkcoord.errors import ZkcoordError


class FetchError(ZkcoordError):
    """The fetcher cannot go on (a fatal error, or misuse)."""


class FetcherClosedError(FetchError):
    """The fetcher was used after ``close``."""


class UnknownPartitionError(FetchError):
    """An assigned partition does not exist on the brokers."""

    retriable = True


class TopicAuthorizationError(FetchError):
    """A broker refused this consumer's principal a topic (Kafka's
    TOPIC_AUTHORIZATION_FAILED): an ACL allowing it to READ the topic is
    missing. No retry helps until one is added."""


class OffsetOutOfRangeError(FetchError):
    """An assigned offset is outside the partition's log and the reset
    policy is ``error``."""
