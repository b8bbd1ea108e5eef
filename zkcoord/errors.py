"""The root of zkcoord's exceptions.

Every error zkcoord raises on purpose derives from :class:`ZkcoordError`, so a
caller can catch all of them in one place. ``retriable`` says whether the same
operation may succeed if tried again later (a coordinator moved, a session was
suspended) or never will (a malformed frame, a bad argument).
"""


class ZkcoordError(Exception):
    """Base of every error zkcoord raises deliberately."""

    retriable = False


class ConfigError(ZkcoordError, ValueError):
    """A configuration value or command-line argument is invalid."""


class EnsembleError(ZkcoordError):
    """A local ZooKeeper ensemble could not be started, reached or stopped."""


class TlsError(ZkcoordError):
    """A TLS handshake failed or was refused: a certificate not trusted or not
    shown, a peer that does not speak TLS, a handshake that took too long.
    Not retriable unless the connection merely broke during it."""


class OffsetOutOfRangeError(ZkcoordError):
    """An offset outside a partition's log: below its start or beyond its end
    (Kafka's OFFSET_OUT_OF_RANGE). The broker's log refuses a read from one;
    a fetcher whose reset policy is ``error`` stops on one."""


class UnknownPartitionError(ZkcoordError):
    """A topic or partition that does not exist where it was looked for (the
    brokers, ZooKeeper). Retriable: it may yet be created, or what was asked
    may yet learn of it."""

    retriable = True


def describe(error: BaseException) -> str:
    """An error as a log line names it: its type, and its message when it has
    one (kazoo's connection errors have none, which left "failed: " bare)."""
    message = str(error)
    return f"{type(error).__name__}: {message}" if message else type(error).__name__
