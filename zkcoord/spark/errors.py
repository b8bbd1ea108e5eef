"""The Spark source's typed errors."""

from __future__ import annotations

from zkcoord.errors import ConfigError, ZkcoordError


class SparkSourceError(ZkcoordError):
    """The ``zkcoord`` Spark source cannot do what the query asks."""


class SourceOptionError(SparkSourceError, ConfigError):
    """An option of ``format("zkcoord")`` is missing or not acceptable."""


class OffsetFormatError(SparkSourceError, ValueError):
    """An offset JSON (an option, or a checkpointed offset) is not well formed."""


class UnknownPartitionError(SparkSourceError):
    """An offset names a topic or partition that ZooKeeper does not know."""


class NoLeaderError(SparkSourceError):
    """A partition has no live broker to read it from."""

    retriable = True


class DataLossError(SparkSourceError):
    """Records the query asked for are no longer on the broker (retention,
    truncation), and failOnDataLoss is set."""


class ReadTimeoutError(SparkSourceError):
    """A broker did not deliver a planned offset range within pollTimeoutMs."""

    retriable = True
