"""The consumers' fetcher: confluent-kafka (librdkafka) in assign mode.

The coordinator decides which partitions a consumer owns and from which
offsets; this class only fetches them. librdkafka never joins a Kafka group
here (no subscribe) and never commits (offsets are the coordinator's). It is
tuned for throughput: librdkafka's default fetch.queue.backoff.ms makes a
consumer that drains its queue quickly wait a full second before the next
fetch, which throttles a fast consumer badly.

Nothing from a revoked partition is returned after ``revoke`` returns, and
within a partition offsets handed out only ever increase. The methods may be
called from several threads: one lock serialises them, so a ``revoke`` waits
for a ``fetch`` in progress (at most its timeout).
"""

from __future__ import annotations

import logging
import threading
from typing import Iterable, Optional

from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, Consumer, KafkaError, KafkaException, TopicPartition

from zkcoord.errors import ZkcoordError
from zkcoord.records import Record

log = logging.getLogger(__name__)

EARLIEST = -2  # the log start offset
LATEST = -1  # the log end offset

_TUNING = {
    "fetch.queue.backoff.ms": 1,
    "fetch.wait.max.ms": 100,
    "fetch.min.bytes": 1,
    "fetch.max.bytes": 64 * 1024 * 1024,
    "max.partition.fetch.bytes": 8 * 1024 * 1024,
    "queued.min.messages": 500_000,
    "queued.max.messages.kbytes": 262_144,
    # Report a partition that does not exist after 5 s rather than 30 s.
    "topic.metadata.propagation.max.ms": 5000,
}
_CHUNK = 10_000  # consume() slows down per message with much larger batches
_FIXED = {
    "enable.auto.commit": False,
    "enable.auto.offset.store": False,
    "enable.partition.eof": False,
}


class FetchError(ZkcoordError):
    """The fetcher cannot go on (a fatal client error, or misuse)."""


class FetcherClosedError(FetchError):
    """The fetcher was used after ``close``."""


class UnknownPartitionError(FetchError):
    """An assigned partition does not exist on the brokers."""

    retriable = True


class OffsetOutOfRangeError(FetchError):
    """An assigned offset is outside the partition's log and the configured
    ``auto.offset.reset`` is ``error``."""


METADATA_TIMEOUT_S = 5.0


def _librdkafka_offset(offset: int) -> int:
    if offset == EARLIEST:
        return OFFSET_BEGINNING
    if offset == LATEST:
        return OFFSET_END
    if not isinstance(offset, int) or offset < 0:
        raise FetchError(f"offset must be >= 0, EARLIEST or LATEST, got {offset!r}")
    return offset


class KafkaFetcher:
    """Fetches assigned partitions from explicit offsets.

    ``config`` adds to or overrides librdkafka settings (for example
    ``auto.offset.reset``, which defaults to ``earliest`` so that a position
    deleted by retention resumes at the log start rather than failing).
    """

    def __init__(self, bootstrap_servers: str, *, client_id: str, config: Optional[dict] = None):
        config = dict(config or {})
        user_error_cb = config.pop("error_cb", None)
        # Client-level errors (a fetch answered UNKNOWN_TOPIC_OR_PARTITION, a
        # fatal error) arrive through error_cb during consume(); they are
        # raised from fetch().
        self._errors: list[KafkaError] = []

        def on_error(error):
            self._errors.append(error)
            if user_error_cb is not None:
                user_error_cb(error)

        conf = {
            "bootstrap.servers": bootstrap_servers,
            "client.id": client_id,
            # librdkafka requires a group id even in assign mode; it is never
            # used to join a group or commit.
            "group.id": f"zkcoord-fetcher-{client_id}",
            "auto.offset.reset": "earliest",
            **_TUNING,
            **config,
            **_FIXED,
            "error_cb": on_error,
        }
        try:
            self._consumer: Optional[Consumer] = Consumer(conf)
        except (KafkaException, ValueError) as exc:
            raise FetchError(f"cannot create the Kafka consumer: {exc}") from None
        # Next offset we may hand out per assigned partition; -1 until the
        # first record when the start was EARLIEST or LATEST.
        self._next: dict[tuple[str, int], int] = {}
        self._lock = threading.Lock()

    def _client(self) -> Consumer:
        if self._consumer is None:
            raise FetcherClosedError("fetcher is closed")
        return self._consumer

    def assign(self, positions: dict[tuple[str, int], int]) -> None:
        """Start fetching these partitions at these offsets. A partition that
        is already assigned is moved to the new offset."""
        with self._lock:
            self._assign(positions)

    def _assign(self, positions: dict[tuple[str, int], int]) -> None:
        consumer = self._client()
        if not positions:
            return
        positions = self._resolve(consumer, positions)
        parts = [TopicPartition(t, p, _librdkafka_offset(o)) for (t, p), o in positions.items()]
        already = [tp for tp in parts if (tp.topic, tp.partition) in self._next]
        try:
            if already:
                consumer.incremental_unassign(already)
            consumer.incremental_assign(parts)
        except KafkaException as exc:
            raise FetchError(f"cannot assign {sorted(positions)}: {exc}") from None
        for key, offset in positions.items():
            self._next[key] = offset if offset >= 0 else -1

    def _resolve(self, consumer: Consumer, positions: dict[tuple[str, int], int]) -> dict[tuple[str, int], int]:
        """Logical start offsets (EARLIEST, LATEST) made exact from the
        partitions' watermarks, so that the start position is known before any
        record arrives: a member stopped before its first record can still
        report where it was (a LATEST start re-resolved by the next owner would
        skip whatever was produced in between). A partition whose watermarks
        cannot be read keeps its logical offset; librdkafka resolves it."""
        resolved = dict(positions)
        for (topic, partition), offset in positions.items():
            if offset not in (EARLIEST, LATEST):
                continue
            try:
                low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition),
                                                           timeout=METADATA_TIMEOUT_S, cached=False)
            except KafkaException as exc:
                log.info("fetcher: start of %s-%d left to the client: %s", topic, partition, exc)
                continue
            resolved[(topic, partition)] = low if offset == EARLIEST else high
        return resolved

    def position(self, partition: tuple[str, int]) -> Optional[int]:
        """The next offset this fetcher would hand out for ``partition``
        (None if not assigned, or its logical start is not resolved yet)."""
        with self._lock:
            offset = self._next.get(partition)
        return offset if offset is not None and offset >= 0 else None

    def revoke(self, partitions: Iterable[tuple[str, int]]) -> None:
        """Stop fetching these partitions; records of theirs still queued
        inside the client are never returned."""
        with self._lock:
            self._revoke(partitions)

    def _revoke(self, partitions: Iterable[tuple[str, int]]) -> None:
        consumer = self._client()
        keys = [key for key in partitions if key in self._next]
        if not keys:
            return
        for key in keys:
            del self._next[key]
        try:
            consumer.incremental_unassign([TopicPartition(t, p) for t, p in keys])
        except KafkaException as exc:
            raise FetchError(f"cannot revoke {sorted(keys)}: {exc}") from None

    def assignment(self) -> set[tuple[str, int]]:
        with self._lock:
            self._client()
            return set(self._next)

    def fetch(self, max_records: int, timeout_s: float) -> list[Record]:
        """Up to ``max_records`` records, waiting at most ``timeout_s`` for the
        first. Raises a FetchError subclass on a fatal error."""
        with self._lock:
            return self._fetch(max_records, timeout_s)

    def _fetch(self, max_records: int, timeout_s: float) -> list[Record]:
        consumer = self._client()
        if max_records < 1:
            raise FetchError(f"max_records must be positive, got {max_records}")
        out: list[Record] = []
        wait = max(timeout_s, 0)
        while len(out) < max_records:
            chunk = min(max_records - len(out), _CHUNK)
            try:
                messages = consumer.consume(num_messages=chunk, timeout=wait)
            except KafkaException as exc:
                raise FetchError(f"fetch failed: {exc}") from None
            self._convert(messages, out)
            if len(messages) < chunk:
                break
            wait = 0  # only the first call waits
        if self._errors:
            errors, self._errors = self._errors, []
            for error in errors:
                self._on_client_error(error)
        return out

    def _convert(self, messages, out: list) -> None:
        """Append the records among ``messages`` to ``out``, dropping those of
        revoked partitions and those below a partition's current position."""
        append = out.append
        expected = self._next
        new_record = tuple.__new__
        key = None
        floor = 0
        last_topic = last_partition = None
        for msg in messages:
            if msg.error() is not None:
                self._on_error(msg.error(), msg)
                continue
            topic, partition, offset = msg.topic(), msg.partition(), msg.offset()
            if partition != last_partition or topic != last_topic:
                if key is not None:
                    expected[key] = floor
                last_topic, last_partition = topic, partition
                key = (topic, partition)
                floor = expected.get(key)
                if floor is None:  # revoked while queued inside the client
                    key = None
            if key is None or offset < floor:  # revoked, or from before a re-assignment
                continue
            floor = offset + 1
            append(new_record(Record, (topic, partition, offset, msg.key(), msg.value(),
                                       msg.timestamp()[1])))
        if key is not None:
            expected[key] = floor

    def _on_client_error(self, error: KafkaError) -> None:
        if error.fatal():
            raise FetchError(f"fatal client error: {error.str()}")
        if error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART and self._next:
            raise UnknownPartitionError(error.str())
        log.info("fetcher: %s", error.str())

    def _on_error(self, error: KafkaError, msg) -> None:
        code = error.code()
        where = f"{msg.topic()}-{msg.partition()}" if msg.topic() else "fetcher"
        if error.fatal():
            raise FetchError(f"{where}: fatal client error: {error.str()}")
        if code in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_PARTITION,
                    KafkaError._UNKNOWN_TOPIC):
            if (msg.topic(), msg.partition()) in self._next or msg.topic() is None:
                raise UnknownPartitionError(f"{where}: {error.str()}")
            return
        if code in (KafkaError.OFFSET_OUT_OF_RANGE, KafkaError._AUTO_OFFSET_RESET):
            raise OffsetOutOfRangeError(f"{where}: {error.str()}")
        # Transport errors and the like: librdkafka retries by itself.
        log.debug("%s: %s", where, error.str())

    def close(self) -> None:
        with self._lock:
            if self._consumer is not None:
                consumer, self._consumer = self._consumer, None
                self._next.clear()
                consumer.close()
