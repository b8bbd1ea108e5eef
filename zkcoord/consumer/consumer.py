"""The thin consumer: group membership pushed by the coordinator, records from the brokers.

``Consumer`` joins a group through :class:`GroupMembership` and fetches the
partitions the coordinator grants with a standard Kafka client (the fetcher).
It never decides anything about the group: it starts what Start says, stops
what Stop says, and reports the offsets of records poll() has returned.

Thread model: the membership's network thread runs on_start/on_stop; the
application thread runs poll(). One lock guards the fetcher, the buffer and
the positions between them, and poll() fetches in short slices so a Stop is
never held up for long.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Callable, Iterator, Optional, Sequence

from zkcoord.consumer.buffer import RecordBuffer
from zkcoord.consumer.membership import NO_OFFSET, GroupMembership, TopicPartition
from zkcoord.errors import ConfigError, ZkcoordError
from zkcoord.records import Record

log = logging.getLogger(__name__)

FETCH_SLICE_S = 0.05  # longest a poll() holds the lock while waiting for data


def kafka_fetcher_factory(brokers: str, client_id: str):
    from zkcoord.fetch.kafka_fetcher import KafkaFetcher

    return KafkaFetcher(brokers, client_id=client_id)


class Consumer:
    """A member of a consumer group whose assignment the coordinator pushes.

    >>> with Consumer(["127.0.0.1:9900"], group="g", topics=["t"]) as c:  # doctest: +SKIP
    ...     for record in c:
    ...         handle(record)
    """

    def __init__(
        self,
        bootstrap: Sequence[str],
        group: str,
        topics: Sequence[str] = (),
        pattern: Optional[str] = None,
        consumer_id: Optional[str] = None,
        session_timeout_ms: int = 10_000,
        max_poll_interval_ms: int = 300_000,
        auto_commit: bool = True,
        auto_offset_reset: str = "smallest",
        max_poll_records: int = 500,
        assignment_strategies: Sequence[str] = ("range",),
        on_assign: Optional[Callable[[set[TopicPartition]], None]] = None,
        on_revoke: Optional[Callable[[set[TopicPartition]], None]] = None,
        fetcher_factory: Callable[[str, str], object] = kafka_fetcher_factory,
    ):
        if not isinstance(max_poll_records, int) or max_poll_records < 1:
            raise ConfigError(f"max_poll_records must be a positive integer, not {max_poll_records!r}")
        self.max_poll_records = max_poll_records
        self.auto_commit = auto_commit
        self.auto_offset_reset = auto_offset_reset
        self._on_assign = on_assign
        self._on_revoke = on_revoke
        self._fetcher_factory = fetcher_factory
        self._fetcher = None
        self._lock = threading.RLock()
        self._buffer = RecordBuffer()
        self._positions: dict[TopicPartition, int] = {}  # next offset the application has not seen
        self._committed: dict[TopicPartition, int] = {}  # explicit commit() without auto-commit
        self._last_poll: Optional[float] = None
        self._closed = False
        self.membership = GroupMembership(
            bootstrap, group, self, topics=topics, pattern=pattern, consumer_id=consumer_id,
            session_timeout_ms=session_timeout_ms, max_poll_interval_ms=max_poll_interval_ms,
            auto_commit=auto_commit, auto_offset_reset=auto_offset_reset,
            assignment_strategies=assignment_strategies,
        )
        self.membership.start()

    # -- application API ---------------------------------------------------------------------

    @property
    def consumer_id(self) -> str:
        return self.membership.consumer_id

    def assignment(self) -> set[TopicPartition]:
        return set(self.membership.assignment)

    def poll(self, timeout_ms: int = 1000) -> list[Record]:
        """Up to max_poll_records records, waiting at most ``timeout_ms`` for the first."""
        if self._closed:
            raise ZkcoordError("poll() on a closed consumer")
        if self.membership.error is not None:
            raise self.membership.error
        self._last_poll = time.monotonic()
        deadline = self._last_poll + max(0, timeout_ms) / 1000.0
        while True:
            with self._lock:
                # Prefetch only while fewer than max_poll_records are buffered (seed 003).
                if self._fetcher is not None and len(self._buffer) < self.max_poll_records:
                    wait = min(FETCH_SLICE_S, max(0.0, deadline - time.monotonic()))
                    self._buffer.add(self._fetcher.fetch(self.max_poll_records - len(self._buffer), wait))
                records = self._buffer.take(self.max_poll_records)
                for record in records:
                    self._positions[(record.topic, record.partition)] = record.offset + 1
            if records or time.monotonic() >= deadline:
                return records
            if self._fetcher is None:
                time.sleep(min(FETCH_SLICE_S, max(0.0, deadline - time.monotonic())))

    def commit(self) -> None:
        """Mark the offsets of every record returned so far as consumed.

        Offsets travel to the coordinator with the answer to its next ping
        (within session_timeout / 3), or with the acknowledgement of a Stop.
        With auto-commit on, that happens without calling commit().
        """
        with self._lock:
            self._committed.update(self._positions)

    def close(self) -> None:
        """Leave the group cleanly: stop fetching, then close the connection."""
        if self._closed:
            return
        self._closed = True
        self.membership.close()
        with self._lock:
            if self._fetcher is not None:
                self._fetcher.close()
                self._fetcher = None

    def __enter__(self) -> "Consumer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __iter__(self) -> Iterator[Record]:
        while not self._closed:
            yield from self.poll(1000)

    # -- MembershipListener (network thread) ---------------------------------------------------------

    def on_start(self, partitions: dict[TopicPartition, int]) -> None:
        with self._lock:
            if self._fetcher is None:
                brokers = ",".join(f"{b.host}:{b.port}" for b in self.membership.brokers)
                if not brokers:
                    raise ZkcoordError("the cluster metadata named no broker to fetch from")
                self._fetcher = self._fetcher_factory(brokers, self.consumer_id)
            added = {tp: o for tp, o in partitions.items() if tp not in self._fetcher.assignment()}
        # As in Kafka, the application hears of new partitions before any of
        # their records can reach it.
        if added and self._on_assign is not None:
            self._on_assign(set(added))
        with self._lock:
            positions = {}
            for tp, offset in added.items():
                positions[tp] = offset if offset != NO_OFFSET else self._reset_offset()
                if offset != NO_OFFSET:
                    self._positions[tp] = offset
            if positions:
                self._fetcher.assign(positions)

    def _reset_offset(self) -> int:
        from zkcoord.fetch.kafka_fetcher import EARLIEST, LATEST

        return EARLIEST if self.auto_offset_reset == "smallest" else LATEST

    def on_stop(self, partitions: frozenset[TopicPartition]) -> dict[TopicPartition, int]:
        with self._lock:
            if self._fetcher is not None:
                self._fetcher.revoke(partitions)
            self._buffer.drop(partitions)
            source = self._positions if self.auto_commit else self._committed
            final = {tp: source[tp] for tp in partitions if tp in source}
            for tp in partitions:
                self._positions.pop(tp, None)
                self._committed.pop(tp, None)
        if self._on_revoke is not None:
            self._on_revoke(set(partitions))
        return final

    def offsets(self) -> Optional[dict[TopicPartition, int]]:
        with self._lock:
            return dict(self._positions if self.auto_commit else self._committed)

    def last_poll_ms_ago(self) -> int:
        if self._last_poll is None:
            return -1
        return int((time.monotonic() - self._last_poll) * 1000)
