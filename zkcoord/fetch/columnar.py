"""The consumers' fetcher: assigned partitions fetched over the Kafka protocol
by a background thread and decoded a batch at a time into columns.

The coordinator decides which partitions a consumer owns and from which
offsets; this fetcher only reads them. A background thread keeps up to
``prefetch_records`` decoded records per consumer ready, fetching every
partition a broker leads with one Fetch request, so the application's next
``fetch`` rarely waits for the network. Records come out as :class:`Chunk`\\ s
(a run of one partition's records in column buffers, from
:mod:`zkcoord.fetch.records`), or as :class:`~zkcoord.records.Record` tuples
for those who want them.

Nothing from a revoked partition is returned after ``revoke`` returns, and
within an assignment of a partition offsets handed out only ever increase
(unless its log no longer holds the position and the reset policy moves it
back): every assignment of a partition gets a new epoch, and what the thread
fetched under an older epoch is dropped. The methods may be called from
several threads.
"""

from __future__ import annotations

import bisect
import itertools
import logging
import threading
import time
from collections import deque
from typing import Iterable, NamedTuple, Optional, Union

from zkcoord.errors import ZkcoordError
from zkcoord.fetch.connection import (
    EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, OFFSET_OUT_OF_RANGE, BrokerConnection, BrokerConnectionError,
    PartitionError,
)
from zkcoord.fetch.records import RecordColumns, decode_batches
from zkcoord.records import Record, TopicPartition

log = logging.getLogger(__name__)

EARLIEST = -2  # the log start offset
LATEST = -1  # the log end offset
RESETS = ("earliest", "latest", "error")

PARTITION_FETCH_BYTES = 4 * 1024 * 1024  # per partition per request
FETCH_BYTES = 32 * 1024 * 1024  # per request
FETCH_WAIT_MS = 100  # how long a broker holds a fetch that finds nothing
PREFETCH_RECORDS = 262_144  # decoded and waiting: the thread pauses above this
UNKNOWN_PARTITION_S = 5.0  # a partition no broker leads for this long is reported
RETRY_BACKOFF = 0.05  # before asking again where a partition is led (0.2 s after a failed request)


class FetchError(ZkcoordError):
    """The fetcher cannot go on (a fatal error, or misuse)."""


class FetcherClosedError(FetchError):
    """The fetcher was used after ``close``."""


class UnknownPartitionError(FetchError):
    """An assigned partition does not exist on the brokers."""

    retriable = True


class OffsetOutOfRangeError(FetchError):
    """An assigned offset is outside the partition's log and the reset
    policy is ``error``."""


class Chunk:
    """Rows ``[begin, end)`` of one partition's decoded records, in offset
    order. ``next_offset`` is where the partition goes on after this run
    (past any transaction markers or compacted gap that follow it)."""

    __slots__ = ("topic", "partition", "columns", "begin", "end", "next_offset")

    def __init__(self, topic: str, partition: int, columns: RecordColumns, begin: int, end: int,
                 next_offset: int):
        self.topic, self.partition = topic, partition
        self.columns, self.begin, self.end, self.next_offset = columns, begin, end, next_offset

    @property
    def topic_partition(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)

    def __len__(self) -> int:
        return self.end - self.begin

    def offset(self, row: int) -> int:
        return memoryview(self.columns.offsets).cast("q")[self.begin + row]

    def split(self, rows: int) -> tuple["Chunk", "Chunk"]:
        """The first ``rows`` records and the rest."""
        cut = self.begin + rows
        head = Chunk(self.topic, self.partition, self.columns, self.begin, cut, self.offset(rows - 1) + 1)
        return head, Chunk(self.topic, self.partition, self.columns, cut, self.end, self.next_offset)

    def records(self) -> list[Record]:
        return self.columns.records(self.topic, self.partition, self.begin, self.end)

    def to_arrow(self, include_headers: bool = False):
        batch = self.columns.to_arrow(self.topic, self.partition, include_headers=include_headers)
        return batch.slice(self.begin, len(self))


class _Start(NamedTuple):
    """Where a partition's fetching starts over: a logical start made exact,
    or an out-of-range offset reset."""

    offset: int


class _Partition:
    """What the fetcher knows of one assigned partition."""

    __slots__ = ("epoch", "fetch_offset", "next", "leader", "since", "error", "backoff_until")

    def __init__(self, epoch: int, offset: int):
        self.epoch = epoch
        self.fetch_offset = offset  # the next offset to ask the broker for (EARLIEST/LATEST until resolved)
        self.next = offset  # the next offset to hand out
        self.leader: Optional[str] = None
        self.since = time.monotonic()  # when it was assigned or last led
        self.error: Optional[FetchError] = None  # raised by the next fetch()
        self.backoff_until = 0.0


class ColumnarFetcher:
    """Fetches assigned partitions from explicit offsets.

    ``offset_reset`` decides what an offset outside the log becomes:
    ``earliest`` (the default: a position deleted by retention resumes at the
    log start rather than failing), ``latest``, or ``error``
    (OffsetOutOfRangeError from ``fetch``).
    """

    def __init__(self, bootstrap_servers: str, *, client_id: str, offset_reset: str = "earliest",
                 prefetch_records: int = PREFETCH_RECORDS):
        if offset_reset not in RESETS:
            raise FetchError(f"offset_reset must be one of {', '.join(RESETS)}, not {offset_reset!r}")
        self._bootstrap = [a.strip() for a in bootstrap_servers.split(",") if a.strip()]
        if not self._bootstrap:
            raise FetchError("no broker address to fetch from")
        self._client_id = client_id
        self._reset = offset_reset
        self._prefetch = prefetch_records
        self._epochs = itertools.count(1)
        self._partitions: dict[TopicPartition, _Partition] = {}
        self._ready: deque[tuple[int, Chunk]] = deque()  # (epoch, chunk), in fetch order
        self._ready_rows = 0
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._closed = False
        self._connections: dict[str, BrokerConnection] = {}  # the fetch thread's own
        self._thread = threading.Thread(target=self._run, name=f"fetcher-{client_id}", daemon=True)
        self._thread.start()

    # -- the consumer's side -----------------------------------------------------------------

    def assign(self, positions: dict[TopicPartition, int]) -> None:
        """Start fetching these partitions at these offsets (EARLIEST and
        LATEST are made exact from the log's bounds first, where the leader
        answers). A partition already assigned is moved to the new offset."""
        for tp, offset in positions.items():
            if not isinstance(offset, int) or (offset < 0 and offset not in (EARLIEST, LATEST)):
                raise FetchError(f"offset must be >= 0, EARLIEST or LATEST, got {offset!r}")
        self._check_open()
        resolved = self._resolve(positions)
        with self._lock:
            self._check_open()
            for tp, offset in resolved.items():
                self._partitions[TopicPartition(*tp)] = _Partition(next(self._epochs), offset)
            self._changed.notify_all()

    def revoke(self, partitions: Iterable[TopicPartition]) -> None:
        """Stop fetching these partitions; what was fetched of them is never returned."""
        with self._lock:
            self._check_open()
            revoked = {tp for tp in partitions if self._partitions.pop(tp, None) is not None}
            if revoked:  # free what was fetched for them now, not when a fetch() passes by
                kept = deque(item for item in self._ready if item[1].topic_partition not in revoked)
                self._ready_rows = sum(len(chunk) for _, chunk in kept)
                self._ready = kept
            self._changed.notify_all()

    def assignment(self) -> set[TopicPartition]:
        with self._lock:
            self._check_open()
            return set(self._partitions)

    def position(self, partition: TopicPartition) -> Optional[int]:
        """The next offset this fetcher would hand out for ``partition``
        (None if not assigned, or its logical start is not resolved yet)."""
        with self._lock:
            state = self._partitions.get(partition)
            return state.next if state is not None and state.next >= 0 else None

    def fetch(self, max_records: int, timeout_s: float) -> list[Record]:
        """Up to ``max_records`` records, waiting at most ``timeout_s`` for the first."""
        return [record for chunk in self.fetch_chunks(max_records, timeout_s) for record in chunk.records()]

    def fetch_chunks(self, max_records: int, timeout_s: float) -> list[Chunk]:
        """:meth:`fetch` as runs of records in columns (one partition each)."""
        if max_records < 1:
            raise FetchError(f"max_records must be positive, got {max_records}")
        deadline = time.monotonic() + max(0.0, timeout_s)
        out: list[Chunk] = []
        taken = 0
        with self._lock:
            while True:
                self._check_open()
                self._raise_errors()
                while self._ready and taken < max_records:
                    epoch, chunk = self._ready.popleft()
                    self._ready_rows -= len(chunk)
                    state = self._partitions.get(chunk.topic_partition)
                    if state is None or state.epoch != epoch:
                        continue  # revoked or moved since it was fetched
                    if len(chunk) > max_records - taken:
                        chunk, rest = chunk.split(max_records - taken)
                        self._ready.appendleft((epoch, rest))
                        self._ready_rows += len(rest)
                    state.next = chunk.next_offset
                    out.append(chunk)
                    taken += len(chunk)
                if out:
                    self._changed.notify_all()  # room for the fetch thread
                    return out
                left = deadline - time.monotonic()
                if left <= 0:
                    return out
                self._changed.wait(left)

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._partitions.clear()
            self._ready.clear()
            self._changed.notify_all()
        self._thread.join(timeout=FETCH_WAIT_MS / 1000.0 + 5.0)

    def _check_open(self) -> None:
        if self._closed:
            raise FetcherClosedError("fetcher is closed")

    def _raise_errors(self) -> None:
        for state in self._partitions.values():
            if state.error is not None:
                error, state.error = state.error, None
                raise error

    # -- offsets -----------------------------------------------------------------------------

    def _resolve(self, positions: dict) -> dict:
        """EARLIEST and LATEST made exact from the partitions' bounds, so the
        start is known before any record arrives: a member stopped before its
        first record can still report where it was. A partition whose bounds
        cannot be read keeps its logical offset; the fetch thread resolves it."""
        logical = [tp for tp, o in positions.items() if o < 0]
        if not logical:
            return dict(positions)
        resolved = dict(positions)
        try:
            with self._metadata_connection() as probe:
                leaders = probe.leaders(logical)
            for tp, leader in leaders.items():
                if leader is None:
                    continue
                with BrokerConnection(leader, client_id=self._client_id, timeout_s=5.0) as connection:
                    resolved[tp] = self._bound(connection, tp, positions[tp])
        except (BrokerConnectionError, PartitionError) as exc:
            log.info("fetcher: start of %s left to the fetch thread: %s", sorted(logical), exc)
        return resolved

    @staticmethod
    def _bound(connection: BrokerConnection, tp, logical: int) -> int:
        timestamp = EARLIEST_TIMESTAMP if logical == EARLIEST else LATEST_TIMESTAMP
        return connection.list_offset(tp[0], tp[1], timestamp)

    def _metadata_connection(self) -> BrokerConnection:
        problems = []
        for address in self._bootstrap:
            try:
                return BrokerConnection(address, client_id=self._client_id, timeout_s=5.0)
            except BrokerConnectionError as exc:
                problems.append(str(exc))
        raise BrokerConnectionError("; ".join(problems))

    # -- the fetch thread --------------------------------------------------------------------

    def _run(self) -> None:
        try:
            while self._step():
                pass
        except Exception:  # never expected: report it on the partitions, not silently
            log.exception("fetcher %s: fetch thread failed", self._client_id)
            with self._lock:
                for state in self._partitions.values():
                    state.error = FetchError("the fetch thread failed; see the log")
        finally:
            for connection in self._connections.values():
                connection.close()

    def _step(self) -> bool:
        """One round: wait for work, fetch from each leader once. False once closed."""
        with self._lock:
            while not self._closed and (not self._partitions or self._ready_rows >= self._prefetch):
                self._changed.wait(1.0)
            if self._closed:
                return False
            now = time.monotonic()
            wanted = {tp: (s.epoch, s.fetch_offset, s.leader) for tp, s in self._partitions.items()
                      if s.error is None and s.backoff_until <= now}
        if not wanted:
            with self._lock:
                self._changed.wait(RETRY_BACKOFF)
            return True
        leaderless = [tp for tp, (_, _, leader) in wanted.items() if leader is None]
        if leaderless:
            self._find_leaders(leaderless, {tp: wanted[tp][0] for tp in leaderless})
            return True
        by_leader: dict[str, dict] = {}
        for tp, (epoch, offset, leader) in wanted.items():
            by_leader.setdefault(leader, {})[tp] = (epoch, offset)
        for leader, partitions in by_leader.items():
            self._fetch_from(leader, partitions)
        return True

    def _find_leaders(self, partitions: list, epochs: dict) -> None:
        try:
            with self._metadata_connection() as probe:
                leaders = probe.leaders(partitions)
        except BrokerConnectionError as exc:
            log.info("fetcher: no broker answers for leaders: %s", exc)
            leaders = {}
        # Leaders are brokers too: ask them next time if the bootstrap ones are gone.
        for address in leaders.values():
            if address is not None and address not in self._bootstrap:
                self._bootstrap.append(address)
        now = time.monotonic()
        with self._lock:
            for tp in partitions:
                state = self._partitions.get(tp)
                if state is None or state.epoch != epochs[tp]:
                    continue
                state.leader = leaders.get(tp)
                if state.leader is None:
                    state.backoff_until = now + RETRY_BACKOFF * 4
                    if now - state.since > UNKNOWN_PARTITION_S:
                        state.error = UnknownPartitionError(
                            f"{tp[0]}-{tp[1]}: no broker leads it (unknown topic or partition)")
                        state.since = now
                else:
                    state.since = now

    def _fetch_from(self, leader: str, partitions: dict) -> None:
        """One Fetch of ``partitions`` ({tp: (epoch, offset)}) from ``leader``."""
        logical = {tp: offset for tp, (_, offset) in partitions.items() if offset < 0}
        # Per partition: records, a new start, an error for the consumer, or
        # None (retriable: find the leader again).
        outcomes: dict[TopicPartition, Union[RecordColumns, _Start, FetchError, None]] = {}
        try:
            connection = self._connection(leader)
            for tp, offset in logical.items():
                outcomes[tp] = _Start(self._bound(connection, tp, offset))
            positions = {tp: offset for tp, (_, offset) in partitions.items() if tp not in logical}
            fetched = connection.fetch_partitions(positions, max_wait_ms=FETCH_WAIT_MS,
                                                  partition_max_bytes=PARTITION_FETCH_BYTES,
                                                  max_bytes=FETCH_BYTES) if positions else {}
        except (BrokerConnectionError, PartitionError) as exc:
            log.info("fetcher: fetch from %s failed: %s", leader, exc)
            self._drop_connection(leader)
            self._lost_leader(partitions)
            return
        for tp, result in fetched.items():
            if isinstance(result, PartitionError):
                outcomes[tp] = self._on_partition_error(connection, tp, positions[tp], result)
            else:
                outcomes[tp] = decode_batches(result.records, start=positions[tp])
        self._deliver(partitions, outcomes)

    def _on_partition_error(self, connection: BrokerConnection, tp, offset: int, error: PartitionError):
        if error.code == OFFSET_OUT_OF_RANGE:
            if self._reset == "error":
                return OffsetOutOfRangeError(f"{tp[0]}-{tp[1]}: offset {offset} is outside the log")
            try:
                return _Start(self._bound(connection, tp, EARLIEST if self._reset == "earliest" else LATEST))
            except (BrokerConnectionError, PartitionError) as exc:
                log.info("fetcher: cannot reset %s: %s", tp, exc)
                return None
        if error.retriable:
            return None  # the leader moved or is not ready: find it again
        return FetchError(str(error))

    def _deliver(self, partitions: dict, outcomes: dict) -> None:
        now = time.monotonic()
        with self._lock:
            for tp, outcome in outcomes.items():
                state = self._partitions.get(tp)
                if state is None or state.epoch != partitions[tp][0] or state.fetch_offset != partitions[tp][1]:
                    continue  # revoked, moved, or reset meanwhile
                if isinstance(outcome, RecordColumns):
                    # A fetch returns whole batches: leave out what lies before the position.
                    first = bisect.bisect_left(memoryview(outcome.offsets).cast("q"), state.next)
                    if first < outcome.rows:
                        chunk = Chunk(tp[0], tp[1], outcome, first, outcome.rows, outcome.next_offset)
                        self._ready.append((state.epoch, chunk))
                        self._ready_rows += len(chunk)
                    state.fetch_offset = max(state.fetch_offset, outcome.next_offset)
                elif isinstance(outcome, _Start):
                    state.fetch_offset = state.next = outcome.offset
                elif isinstance(outcome, FetchError):
                    state.error = outcome
                else:  # retriable: ask again where the partition is led
                    state.leader = None
                    state.backoff_until = now + RETRY_BACKOFF
            self._changed.notify_all()

    def _lost_leader(self, partitions: dict) -> None:
        with self._lock:
            for tp, (epoch, _) in partitions.items():
                state = self._partitions.get(tp)
                if state is not None and state.epoch == epoch:
                    state.leader = None
                    state.backoff_until = time.monotonic() + RETRY_BACKOFF * 4

    def _connection(self, address: str) -> BrokerConnection:
        connection = self._connections.get(address)
        if connection is None:
            connection = self._connections[address] = BrokerConnection(address, client_id=self._client_id)
        return connection

    def _drop_connection(self, address: str) -> None:
        connection = self._connections.pop(address, None)
        if connection is not None:
            connection.close()
