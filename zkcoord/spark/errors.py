"""The Spark source's typed errors."""

from __future__ import annotations

from zkcoord.errors import ConfigError, ZkcoordError


class SparkSourceError(ZkcoordError):
    """The ``zkcoord`` Spark source cannot do what the query asks."""


class SourceOptionError(SparkSourceError, ConfigError):
    """An option of ``format("zkcoord")`` is missing or not acceptable."""


class OffsetFormatError(SparkSourceError, ValueError):
    """An offset JSON (an option, or a checkpointed offset) is not well formed."""


class NoLeaderError(SparkSourceError):
    """A partition has no live broker to read it from."""

    retriable = True


class DataLossError(SparkSourceError):
    """Records the query asked for are no longer on the broker (retention,
    truncation), and failOnDataLoss is set."""


class ReadTimeoutError(SparkSourceError):
    """A broker did not deliver a planned offset range within pollTimeoutMs."""

    retriable = True


class AuthenticationError(SparkSourceError):
    """A broker refused the source's SASL credential (``sasl.username``), or
    the source would not send it (SASL/PLAIN without TLS, unless allowed)."""


class TopicAuthorizationError(SparkSourceError):
    """A broker answered that the source's principal may not read a topic
    (Kafka's TOPIC_AUTHORIZATION_FAILED): an ACL is missing."""
