"""What the group commands ask of the brokers: the partitions a topic has,
and a partition's offsets (log start, log end, the first at a time), each
asked of the partition's leader over the Kafka protocol
(:class:`~zkcoord.fetch.connection.BrokerConnection`)."""

from __future__ import annotations

from typing import Iterable, Optional

from zkcoord.errors import ZkcoordError
from zkcoord.fetch.connection import (EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, BrokerConnection,
                                      BrokerConnectionError, PartitionError)
from zkcoord.records import TopicPartition

__all__ = ["EARLIEST_TIMESTAMP", "LATEST_TIMESTAMP", "BrokerOffsets", "NoBroker", "PartitionError"]

TIMEOUT_S = 10.0


class NoBroker(ZkcoordError):
    """No broker could be reached, or a partition has no leader to ask."""

    retriable = True


class BrokerOffsets:
    """Connections to the brokers at ``addresses`` (``host:port``), opened
    as needed and closed together."""

    def __init__(self, addresses: Iterable[str], timeout_s: float = TIMEOUT_S, tls=None, credential=None,
                 plain_without_tls: bool = False):
        """``tls``: a client SSLContext for the brokers (None: plaintext);
        ``credential``: (user, password) for their SASL (None: anonymous),
        sent with PLAIN without TLS only if ``plain_without_tls``."""
        self.addresses = list(addresses)
        self.timeout_s = timeout_s
        self.tls = tls
        self.credential = credential
        self.plain_without_tls = plain_without_tls
        self._connections: dict[str, BrokerConnection] = {}
        self._metadata: dict[TopicPartition, Optional[str]] = {}
        self.problems: list[str] = []  # why offsets_known left partitions out, for the user to hear

    def __enter__(self) -> "BrokerOffsets":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        for connection in self._connections.values():
            connection.close()
        self._connections.clear()

    def _connect(self, address: str) -> BrokerConnection:
        connection = self._connections.get(address)
        if connection is None:
            connection = self._connections[address] = BrokerConnection(address, client_id="zkcoord-admin",
                                                                        timeout_s=self.timeout_s, tls=self.tls,
                                                                        credential=self.credential,
                                                                        plain_without_tls=self.plain_without_tls)
        return connection

    def _any(self) -> BrokerConnection:
        failures = []
        for address in self.addresses:
            try:
                return self._connect(address)
            except BrokerConnectionError as exc:
                if not exc.retriable:  # too old, or our credential refused: the next broker says the same
                    raise
                failures.append(str(exc))
        raise NoBroker("no broker reachable" + (f": {'; '.join(failures)}" if failures else " (none is registered)"))

    def partitions(self, topics: Iterable[str]) -> dict[str, int]:
        """How many partitions each of ``topics`` has; topics that do not exist are left out."""
        found = self._any().partitions(set(topics))
        self._metadata.update(found)
        counts: dict[str, int] = {}
        for topic, partition in found:
            counts[topic] = max(counts.get(topic, 0), partition + 1)
        return counts

    def offsets(self, partitions: Iterable[TopicPartition], timestamp: int) -> dict[TopicPartition, int]:
        """Each partition's offset for ``timestamp`` (EARLIEST_TIMESTAMP,
        LATEST_TIMESTAMP, or milliseconds since the epoch: the first offset
        at or after it, -1 if none is). Raises NoBroker or PartitionError."""
        partitions = list(partitions)
        unknown = [tp for tp in partitions if self._metadata.get(tp) is None]
        if unknown:
            self._metadata.update(self._any().partitions({t for t, _ in unknown}))
        result = {}
        for tp in partitions:
            leader = self._metadata.get(tp)
            if leader is None:
                raise NoBroker(f"{tp[0]}-{tp[1]} has no leader to ask")
            result[tp] = self._connect(leader).list_offset(tp[0], tp[1], timestamp)
        return result

    def offsets_known(self, partitions: Iterable[TopicPartition], timestamp: int) -> dict[TopicPartition, int]:
        """:meth:`offsets` of the partitions whose leader answers, one request
        per leader; a partition without a leader, or whose leader cannot be
        reached or answers with an error, is left out. A broker that refuses
        us for good (too old, our credential refused: no retry helps) is
        no broker down: its error is raised."""
        partitions = list(partitions)
        try:
            unknown = [tp for tp in partitions if self._metadata.get(tp) is None]
            if unknown:
                self._metadata.update(self._any().partitions({t for t, _ in unknown}))
        except ZkcoordError as exc:
            if not getattr(exc, "retriable", True):
                raise
            self.problems.append(str(exc))
            return {}
        by_leader: dict[str, list[TopicPartition]] = {}
        for tp in partitions:
            leader = self._metadata.get(tp)
            if leader is not None:
                by_leader.setdefault(leader, []).append(tp)
        result = {}
        for leader, led in by_leader.items():
            try:
                answers = self._connect(leader).list_offsets(led, timestamp)
            except ZkcoordError as exc:  # that broker is down: its partitions are left out
                if not getattr(exc, "retriable", True):
                    raise
                self.problems.append(str(exc))
                continue
            result.update({TopicPartition(*tp): o for tp, o in answers.items() if isinstance(o, int)})
        return result
