"""The consumers' fetcher: assigned partitions fetched over the Kafka protocol
by background threads and decoded a batch at a time into columns.

The coordinator decides which partitions a consumer owns and from which
offsets; this fetcher only reads them. One thread per broker fetches every
assigned partition that broker leads with one Fetch request (least recently
served first, so none starves behind the request's byte limit), and another
finds leaders. Up to ``PREFETCH_RECORDS`` records or ``PREFETCH_BYTES`` of
them wait decoded, so the application's next ``fetch`` rarely waits for the
network, and a broker that hangs holds up only its own partitions. Records
come out as :class:`~zkcoord.fetch.chunks.Chunk` runs (one partition's records
in column buffers, from :mod:`zkcoord.fetch.records`), or as :class:`~zkcoord.records.Record`
tuples for those who want them.

Nothing from a revoked partition is returned after ``revoke`` returns, and
within an assignment of a partition offsets handed out only ever increase
(unless its log no longer holds the position: the reset policy, or a log
truncated under it, moves it back): every assignment and every reset of a
partition gets a new epoch, and what was fetched under an older epoch is
dropped. Leaders move (replicated Kafka): what each answer of theirs calls
for is decided in :mod:`zkcoord.fetch.recovery`. Nothing above a partition's
high watermark is handed out. The methods may be called from several threads.
"""

from __future__ import annotations

import bisect
import itertools
import logging
import ssl
import threading
import time
from typing import Iterable, NamedTuple, Optional, Union

from zkcoord.errors import OffsetOutOfRangeError, UnknownPartitionError, ZkcoordError
from zkcoord.fetch import recovery
from zkcoord.fetch.buffer import RecordBuffer
from zkcoord.fetch.chunks import Chunk, DecodedPartition
from zkcoord.fetch.connection import (
    EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, BrokerConnection, BrokerConnectionError, PartitionError,
)
from zkcoord.fetch.errors import FETCHER_ERRORS, FetchError, FetcherClosedError, TopicAuthorizationError
from zkcoord.fetch.isolation import READ_UNCOMMITTED
from zkcoord.fetch.records import CorruptRecordsError, RecordColumns, last_batch_epoch
from zkcoord.fetch.recovery import NO_EPOCH, EpochAhead, Truncation
from zkcoord.records import Record, TopicPartition

log = logging.getLogger(__name__)

EARLIEST = -2  # the log start offset
LATEST = -1  # the log end offset
RESETS = ("earliest", "latest", "error")

PARTITION_FETCH_BYTES = 4 * 1024 * 1024  # per partition per request
FETCH_BYTES = 32 * 1024 * 1024  # per request
FETCH_WAIT_MS = 100  # how long a broker holds a fetch that finds nothing
PREFETCH_RECORDS = 262_144  # decoded and waiting: fetching pauses above this ...
PREFETCH_BYTES = 64 * 1024 * 1024  # ... or above this many bytes of keys and values
UNKNOWN_PARTITION_S = 5.0  # a partition no broker leads for this long is reported
RETRY_BACKOFF = 0.05  # before asking again where a partition is led (0.2 s after a failed request)
REQUEST_TIMEOUT_S = FETCH_WAIT_MS / 1000.0 + 10.0  # a broker silent this long is given up on
PROBE_TIMEOUT_S = 5.0  # a metadata or offset question unanswered this long is given up on


class _Start(NamedTuple):
    """Where a partition's fetching starts over: a logical start made exact,
    or an out-of-range offset reset."""

    offset: int


class _Records(NamedTuple):
    """A partition's records from one answer, and the leader epoch of the last batch they came in."""

    columns: RecordColumns
    last_epoch: int


class _Work(NamedTuple):
    """A partition to fetch: the fetcher's epoch of it, its fetch offset,
    its leader's epoch and the epoch of the last batch fetched (Kafka's)."""

    epoch: int
    offset: int
    leader_epoch: int
    last_epoch: int


class _Partition:
    """What the fetcher knows of one assigned partition."""

    __slots__ = ("epoch", "fetch_offset", "next", "start", "leader", "since", "error", "backoff_until", "turn",
                 "leader_epoch", "last_epoch", "topic_id")

    def __init__(self, epoch: int, offset: int):
        self.epoch = epoch  # new on every assignment and reset: what was fetched before is dropped
        self.fetch_offset = offset  # the next offset to ask the broker for (EARLIEST/LATEST until resolved)
        self.next = offset  # the next offset to hand out
        self.start: Optional[int] = offset if offset >= 0 else None  # where the assignment began, once exact
        self.leader: Optional[str] = None
        self.leader_epoch = NO_EPOCH  # the leader's, from Metadata: sent with each fetch
        self.last_epoch = NO_EPOCH  # Kafka's leader epoch of the batch before fetch_offset, if known
        self.topic_id: Optional[str] = None  # the topic's id, from Metadata 10+: the epochs above are that topic's
        self.since = time.monotonic()  # when it was assigned or last led
        self.error: Optional[ZkcoordError] = None  # raised by the next fetch()
        self.backoff_until = 0.0
        self.turn = 0  # when it last got records: the least recently served go first in a request


class ColumnarFetcher:
    """Fetches assigned partitions from explicit offsets.

    ``offset_reset`` decides what an offset outside the log becomes:
    ``earliest`` (the default: a position deleted by retention resumes at the
    log start rather than failing), ``latest``, or ``error``
    (OffsetOutOfRangeError from ``fetch``). A position beyond the log's end
    is a truncation, not a reset (:mod:`zkcoord.fetch.recovery`).

    ``isolation_level`` (``read_uncommitted`` or ``read_committed``, see
    zkcoord.fetch.isolation) decides what transactional producers' records
    are handed out, and where ``latest`` is. Offsets that hold nothing to
    hand out (transaction markers, aborted transactions, compacted gaps)
    are passed: once everything before them was handed out, the position
    moves past them, so a partition ending in a marker is caught up.
    """

    def __init__(self, bootstrap_servers: str, *, client_id: str, offset_reset: str = "earliest",
                 tls: Optional[ssl.SSLContext] = None, credential: Optional[tuple[str, str]] = None,
                 plain_without_tls: bool = False, metrics=None, isolation_level: str = READ_UNCOMMITTED):
        """``tls``: a client SSLContext for the brokers (None: plaintext);
        ``credential`` (user, password): for the brokers' SASL;
        ``plain_without_tls``: may send it with PLAIN where there is no TLS;
        ``metrics``: a :class:`~zkcoord.metrics.families.FetcherMetrics` to count in."""
        if offset_reset not in RESETS:
            raise FetchError(f"offset_reset must be one of {', '.join(RESETS)}, not {offset_reset!r}")
        self._bootstrap = [a.strip() for a in bootstrap_servers.split(",") if a.strip()]
        if not self._bootstrap:
            raise FetchError("no broker address to fetch from")
        self._client_id = client_id
        self._tls = tls
        self._credential = credential  # (user, password) for the brokers' SASL
        self._plain_without_tls = plain_without_tls
        self._isolation_level = isolation_level
        self._reset = offset_reset
        self._metrics = metrics
        self._epochs = itertools.count(1)
        self._turns = itertools.count(1)
        self._partitions: dict[TopicPartition, _Partition] = {}
        # Fetched, not yet handed out: handed out as poll() hands out (seed 003's
        # round robin), so no partition waits behind another's backlog.
        self._ready = RecordBuffer()
        self._ready_bytes: dict[TopicPartition, int] = {}
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._closed = False
        # A thread died, or a broker refused us for good: every call raises it.
        self._failure: Optional[ZkcoordError] = None
        self._brokers: dict[str, tuple[threading.Thread, list]] = {}  # address -> (thread, [its connection])
        self._leader_thread = self._start_thread(self._find_leaders_loop, f"fetcher-{client_id}-leaders")

    # -- the consumer's side -----------------------------------------------------------------

    def assign(self, positions: dict[TopicPartition, int]) -> None:
        """Start fetching these partitions at these offsets (EARLIEST and
        LATEST are made exact from the log's bounds first, where the leader
        answers). A partition already assigned is moved to the new offset."""
        for tp, offset in positions.items():
            if not isinstance(offset, int) or (offset < 0 and offset not in (EARLIEST, LATEST)):
                raise FetchError(f"offset must be >= 0, EARLIEST or LATEST, got {offset!r}")
        with self._lock:
            self._check_open()
        resolved = self._resolve(positions)
        with self._lock:
            self._check_open()
            self._drop_ready(set(resolved))  # moved: what was fetched from the old offset goes
            for tp, offset in resolved.items():
                self._partitions[TopicPartition(*tp)] = _Partition(next(self._epochs), offset)
            self._changed.notify_all()

    def revoke(self, partitions: Iterable[TopicPartition]) -> None:
        """Stop fetching these partitions; what was fetched of them is never returned."""
        with self._lock:
            self._check_open()
            revoked = {tp for tp in partitions if self._partitions.pop(tp, None) is not None}
            self._drop_ready(revoked)
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

    def positions(self) -> dict[TopicPartition, int]:
        """:meth:`position` of every assigned partition whose start is resolved."""
        with self._lock:
            return {tp: state.next for tp, state in self._partitions.items() if state.next >= 0}

    def start_offset(self, partition: TopicPartition) -> Optional[int]:
        """Where the partition's assignment began, made exact (None if not
        assigned, or EARLIEST/LATEST not resolved yet): what to report for
        a partition of which nothing was handed out."""
        with self._lock:
            state = self._partitions.get(partition)
            return state.start if state is not None else None

    def fetch(self, max_records: int, timeout_s: float) -> list[Record]:
        """Up to ``max_records`` records, waiting at most ``timeout_s`` for the first."""
        return self._take(max_records, timeout_s, as_records=True)

    def fetch_chunks(self, max_records: int, timeout_s: float) -> list[Chunk]:
        """:meth:`fetch` as runs of records in columns (one partition each)."""
        return self._take(max_records, timeout_s, as_records=False)

    def _take(self, max_records: int, timeout_s: float, as_records: bool) -> list:
        if max_records < 1:
            raise FetchError(f"max_records must be positive, got {max_records}")
        deadline = time.monotonic() + max(0.0, timeout_s)
        with self._lock:
            while True:
                self._check_open()
                self._raise_errors()
                out = self._ready.take_runs(max_records)
                for chunk in out:
                    tp = chunk.topic_partition
                    self._ready_bytes[tp] -= chunk.nbytes
                    self._partitions[tp].next = chunk.next_offset
                    self._pass_empty_offsets(tp)
                if out:
                    self._changed.notify_all()  # room for the fetch threads
                    # Made under the lock: nothing of a partition revoked meanwhile goes out.
                    return [r for chunk in out for r in chunk.records()] if as_records else out
                left = deadline - time.monotonic()
                if left <= 0:
                    return []
                self._changed.wait(left)

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._partitions.clear()
            self._drop_ready(None)
            self._changed.notify_all()
            brokers = list(self._brokers.values())
        for _, holder in brokers:  # a request under way fails now instead of at its timeout
            for connection in holder:
                connection.abort()
        for thread in [self._leader_thread] + [thread for thread, _ in brokers]:
            thread.join(timeout=REQUEST_TIMEOUT_S)

    def _pass_empty_offsets(self, tp: TopicPartition) -> None:
        """Once nothing of ``tp`` waits to be handed out, its position moves
        to where fetching goes on: what lies between held no record for the
        application (markers, aborted transactions, compacted gaps). Lock held."""
        state = self._partitions[tp]
        if state.fetch_offset > state.next and not self._ready.holds(tp):
            state.next = state.fetch_offset

    def _connect(self, address: str, timeout_s: float) -> BrokerConnection:
        return BrokerConnection(address, client_id=self._client_id, tls=self._tls, timeout_s=timeout_s,
                                credential=self._credential, plain_without_tls=self._plain_without_tls,
                                isolation_level=self._isolation_level)

    def _check_open(self) -> None:
        if self._failure is not None:
            raise self._failure
        if self._closed:
            raise FetcherClosedError("fetcher is closed")

    def _raise_errors(self) -> None:
        for state in self._partitions.values():
            if state.error is not None:
                error, state.error = state.error, None
                raise error

    def _drop_ready(self, partitions: Optional[set]) -> None:
        """Forget what is fetched of ``partitions`` (None: of all). Lock held."""
        if partitions is None:
            self._ready = RecordBuffer()
            self._ready_bytes.clear()
            return
        self._ready.drop(partitions)
        for tp in partitions:
            self._ready_bytes.pop(tp, None)

    # -- offsets -----------------------------------------------------------------------------

    def _resolve(self, positions: dict) -> dict:
        """EARLIEST and LATEST made exact from the partitions' bounds, so the
        start is known before any record arrives: a member stopped before its
        first record can still report where it was. A partition whose bounds
        cannot be read now keeps its logical offset; a fetch thread resolves it."""
        logical = [tp for tp, o in positions.items() if o < 0]
        resolved = dict(positions)
        if not logical:
            return resolved
        try:
            with self._metadata_connection() as probe:
                leaders = probe.leaders(logical)
        except BrokerConnectionError as exc:
            log.info("fetcher: start of %s left to the fetch threads: %s", sorted(logical), exc)
            return resolved
        by_leader: dict[str, list] = {}
        for tp, leader in leaders.items():
            if leader is not None:
                by_leader.setdefault(leader, []).append(tp)
        for leader, tps in by_leader.items():
            try:
                with self._connect(leader, PROBE_TIMEOUT_S) as connection:
                    for tp in tps:
                        try:
                            resolved[tp] = self._bound(connection, tp, positions[tp])
                        except PartitionError as exc:
                            log.info("fetcher: start of %s left to the fetch thread: %s", tp, exc)
            except BrokerConnectionError as exc:
                log.info("fetcher: start of %s left to the fetch thread: %s", sorted(tps), exc)
        return resolved

    @staticmethod
    def _bound(connection: BrokerConnection, tp, logical: int) -> int:
        timestamp = EARLIEST_TIMESTAMP if logical == EARLIEST else LATEST_TIMESTAMP
        return connection.list_offset(tp[0], tp[1], timestamp)

    def _metadata_connection(self) -> BrokerConnection:
        problems = []
        for address in list(self._bootstrap):
            try:
                return self._connect(address, PROBE_TIMEOUT_S)
            except BrokerConnectionError as exc:
                if not exc.retriable:  # too old, or the credential refused: the others would say the same
                    raise
                problems.append(str(exc))
        raise BrokerConnectionError("; ".join(problems))

    # -- the threads -------------------------------------------------------------------------

    def _start_thread(self, loop, name: str, *args) -> threading.Thread:
        thread = threading.Thread(target=self._guarded, args=(loop, *args), name=name, daemon=True)
        thread.start()
        return thread

    def _refused_for_good(self, error: BrokerConnectionError) -> bool:
        """Whether ``error`` is a broker refusing this fetcher in a way no
        retry helps (too old for it, its credential refused): then every
        call raises it from now on, as the consumer must hear of it rather
        than wait for records forever."""
        if error.retriable:
            return False
        log.error("fetcher %s: %s", self._client_id, error)
        with self._lock:
            if self._failure is None:
                self._failure = error
            self._changed.notify_all()
        return True

    def _guarded(self, loop, *args) -> None:
        try:
            loop(*args)
        except Exception as exc:  # never expected: fail every call from now on, not silently
            log.exception("fetcher %s: a fetch thread failed", self._client_id)
            with self._lock:
                self._failure = FetchError(f"the fetcher's thread failed: {type(exc).__name__}: {exc}")
                self._changed.notify_all()

    def _find_leaders_loop(self) -> None:
        """Finds the leader of every partition that has none (new, or its
        leader failed a request), and starts a thread per leader."""
        while True:
            with self._lock:
                while True:
                    if self._closed or self._failure is not None:
                        return
                    now = time.monotonic()
                    leaderless = {tp: s.epoch for tp, s in self._partitions.items()
                                  if s.leader is None and s.error is None}
                    due = {tp: e for tp, e in leaderless.items() if self._partitions[tp].backoff_until <= now}
                    if due:
                        break
                    waits = [self._partitions[tp].backoff_until - now for tp in leaderless]
                    self._changed.wait(min(waits + [1.0]))
            self._find_leaders(due)

    def _find_leaders(self, epochs: dict) -> None:
        refused: dict[str, int] = {}
        try:
            with self._metadata_connection() as probe:
                found, refused = probe.led_or_refused({topic for topic, _ in epochs})
        except BrokerConnectionError as exc:
            if self._refused_for_good(exc):
                return
            log.info("fetcher: no broker answers for leaders: %s", exc)
            found = None
        now = time.monotonic()
        with self._lock:
            for leader in (found or {}).values():
                # Leaders are brokers too: ask them next time if the bootstrap ones are gone.
                if leader is not None and leader.address not in self._bootstrap:
                    self._bootstrap.append(leader.address)
            for tp, epoch in epochs.items():
                state = self._partitions.get(tp)
                if state is None or state.epoch != epoch:
                    continue
                if tp[0] in refused:  # not described to us: an ACL is missing, not the topic
                    state.error = self._not_authorized(tp, refused[tp[0]])
                    state.backoff_until = now + RETRY_BACKOFF * 4
                    continue
                leader = (found or {}).get(tp)
                if leader is not None and recovery.recreated(state.topic_id, leader.topic_id):
                    log.warning("fetcher: topic %s was deleted and created again (id %s, was %s): its leader "
                                "epochs start anew", tp[0], leader.topic_id, state.topic_id)
                    state.leader_epoch = state.last_epoch = NO_EPOCH
                if leader is not None and leader.topic_id is not None:
                    state.topic_id = leader.topic_id
                if leader is not None and not recovery.newer_leader(state.leader_epoch, leader.epoch):
                    leader = None  # a broker whose metadata lags names a deposed leader: ask again
                state.leader = leader.address if leader is not None else None
                if state.leader is None:
                    state.backoff_until = now + RETRY_BACKOFF * 4
                    # Known but leaderless (an election under way) is waited
                    # out; a partition the brokers do not know is reported.
                    if found is not None and tp not in found and now - state.since > UNKNOWN_PARTITION_S:
                        state.error = UnknownPartitionError(
                            f"{tp[0]}-{tp[1]}: no broker leads it (unknown topic or partition)")
                        state.since = now
                else:
                    state.since = now
                    state.leader_epoch = leader.epoch
                    if state.leader not in self._brokers and not self._closed:
                        holder: list = []
                        thread = self._start_thread(self._broker_loop, f"fetcher-{self._client_id}-{state.leader}",
                                                    state.leader, holder)
                        self._brokers[state.leader] = (thread, holder)
            self._changed.notify_all()

    def _broker_loop(self, address: str, holder: list) -> None:
        """Fetches, round after round, the partitions ``address`` leads."""
        try:
            while True:
                with self._lock:
                    wanted = self._work_for(address)
                    while wanted is not None and not wanted:
                        self._changed.wait(1.0)
                        wanted = self._work_for(address)
                if wanted is None:
                    return
                if not holder:
                    try:
                        holder.append(self._connect(address, REQUEST_TIMEOUT_S))
                    except BrokerConnectionError as exc:
                        if self._refused_for_good(exc):
                            return
                        log.info("fetcher: %s", exc)
                        self._lost_leader(wanted)
                        continue
                if not self._fetch_from(holder[0], wanted):
                    holder.pop().close()
        finally:
            for connection in holder:
                connection.close()

    def _work_for(self, address: str) -> Optional[dict]:
        """{tp: _Work} to fetch from ``address`` now, least recently
        served first; empty to wait; None once closed. Lock held."""
        if self._closed or self._failure is not None:
            return None
        if len(self._ready) >= PREFETCH_RECORDS or sum(self._ready_bytes.values()) >= PREFETCH_BYTES:
            return {}
        now = time.monotonic()
        states = sorted(((tp, s) for tp, s in self._partitions.items()
                         if s.leader == address and s.error is None and s.backoff_until <= now),
                        key=lambda item: item[1].turn)
        return {tp: _Work(s.epoch, s.fetch_offset, s.leader_epoch, s.last_epoch) for tp, s in states}

    def _fetch_from(self, connection: BrokerConnection, partitions: dict) -> bool:
        """One Fetch of ``partitions`` ({tp: _Work}); False when the
        connection failed."""
        # Per partition: records, a new start, a truncation, an error for the
        # consumer, or None (retriable: find the leader again).
        outcomes: dict[TopicPartition, Union[_Records, _Start, Truncation, EpochAhead, ZkcoordError, None]] = {}
        positions = {}
        for tp, work in partitions.items():
            if work.offset >= 0:
                positions[tp] = work.offset
                continue
            try:
                outcomes[tp] = _Start(self._bound(connection, tp, work.offset))
            except PartitionError as exc:
                outcomes[tp] = self._on_partition_error(connection, tp, work.offset, exc)
            except BrokerConnectionError as exc:
                log.info("fetcher: %s", exc)
                self._lost_leader(partitions)
                return False
        try:
            # The leader's epoch, for a deposed leader to refuse the fetch; the
            # last fetched one, for the leader to name where its log diverges.
            epochs = {tp: (partitions[tp].leader_epoch, partitions[tp].last_epoch) for tp in positions}
            fetched = connection.fetch_partitions(positions, max_wait_ms=FETCH_WAIT_MS,
                                                  partition_max_bytes=PARTITION_FETCH_BYTES,
                                                  max_bytes=FETCH_BYTES, epochs=epochs) if positions else {}
        except BrokerConnectionError as exc:
            log.info("fetcher: fetch from %s failed: %s", connection.address, exc)
            self._lost_leader(partitions)
            return False
        for tp, result in fetched.items():
            if isinstance(result, PartitionError):
                outcomes[tp] = self._on_partition_error(connection, tp, positions[tp], result,
                                                        read_here=partitions[tp].last_epoch != NO_EPOCH)
                continue
            divergence = recovery.diverged(positions[tp], result.diverging_epoch, result.diverging_end)
            if divergence is not None:  # the leader sends no records with it
                outcomes[tp] = divergence
                continue
            try:
                # Never beyond the high watermark: what lies above it is not committed.
                columns = result.decode(positions[tp], result.high_watermark)
                outcomes[tp] = _Records(columns, last_batch_epoch(result.records, columns.consumed))
            except CorruptRecordsError as exc:
                outcomes[tp] = FetchError(f"{tp[0]}-{tp[1]}: {exc}")
        self._deliver(partitions, outcomes)
        return True

    def _on_partition_error(self, connection: BrokerConnection, tp, offset: int, error: PartitionError,
                            read_here: bool = False):
        """What ``error`` at ``offset`` calls for (``read_here``: the fetcher
        reached ``offset`` by reading the partition's log)."""
        step = recovery.on_error(error.code, error.retriable)
        if step is recovery.Step.FIND_LEADER:
            log.info("fetcher: %s; finding its leader again", error)
            return None
        if step is recovery.Step.FAIL:
            if error.code == recovery.TOPIC_AUTHORIZATION_FAILED:
                return self._not_authorized(tp, error.code)
            return FetchError(str(error))
        try:
            log_start = self._bound(connection, tp, EARLIEST)
            # Recovery judges by the high watermark, whatever the isolation level.
            log_end = connection.list_offset(tp[0], tp[1], LATEST_TIMESTAMP, high_watermark=True)
            decision = recovery.out_of_range(offset, log_start, log_end, self._reset, read_here, EARLIEST, LATEST)
            if isinstance(decision, recovery.Reset):
                return _Start(self._bound(connection, tp, decision.logical))
        except (BrokerConnectionError, PartitionError) as exc:
            log.info("fetcher: cannot read the bounds of %s to reset it: %s", tp, exc)
            return None
        if isinstance(decision, recovery.OutOfRange):
            return OffsetOutOfRangeError(f"{tp[0]}-{tp[1]}: offset {offset} is outside the log "
                                         f"({decision.log_start} to {decision.log_end})")
        return decision  # a Truncation, or None: fetch again from the leader

    def _not_authorized(self, tp, code: int) -> TopicAuthorizationError:
        principal = f"User:{self._credential[0]}" if self._credential else "User:ANONYMOUS (no credential)"
        return TopicAuthorizationError(
            f"{tp[0]}-{tp[1]}: the brokers refuse {principal} the topic (Kafka error {code}, "
            f"TOPIC_AUTHORIZATION_FAILED): an ACL allowing it to READ topic {tp[0]} is missing")

    def _deliver(self, partitions: dict, outcomes: dict) -> None:
        now = time.monotonic()
        with self._lock:
            for tp, outcome in outcomes.items():
                state = self._partitions.get(tp)
                if state is None or state.epoch != partitions[tp].epoch or state.fetch_offset != partitions[tp].offset:
                    continue  # revoked, moved, or reset meanwhile
                if isinstance(outcome, _Records):
                    if outcome.last_epoch != NO_EPOCH:
                        state.last_epoch = outcome.last_epoch
                    outcome = outcome.columns
                    # A fetch returns whole batches: leave out what lies before the position.
                    first = bisect.bisect_left(memoryview(outcome.offsets).cast("q"), state.next)
                    if first < outcome.rows:
                        chunk = Chunk(DecodedPartition(tp[0], tp[1], outcome), first, outcome.rows, outcome.next_offset)
                        self._ready.add_runs([chunk])
                        self._ready_bytes[tp] = self._ready_bytes.get(tp, 0) + chunk.nbytes
                        state.turn = next(self._turns)
                    state.fetch_offset = max(state.fetch_offset, outcome.next_offset)
                    self._pass_empty_offsets(tp)
                elif isinstance(outcome, _Start):
                    # A new epoch: records fetched before a reset are not handed out after it.
                    state.epoch = next(self._epochs)
                    self._drop_ready({tp})
                    state.fetch_offset = state.next = outcome.offset
                    state.last_epoch = NO_EPOCH
                    if state.start is None:
                        state.start = outcome.offset
                elif isinstance(outcome, Truncation):
                    self._truncated(tp, state, outcome)
                elif isinstance(outcome, EpochAhead):  # nothing truncated: fetch on from here in that epoch
                    state.last_epoch = outcome.epoch
                elif isinstance(outcome, FETCHER_ERRORS):
                    state.error = outcome
                else:  # retriable: ask again where the partition is led
                    state.leader = None
                    state.backoff_until = now + RETRY_BACKOFF
            self._changed.notify_all()

    def _truncated(self, tp: TopicPartition, state: _Partition, truncation: Truncation) -> None:
        """The partition's log diverged from what was fetched of it at
        ``truncation.offset``: fetch again from there (a new epoch: nothing
        fetched before is handed out after), say so and count it. Lock held."""
        resume = min(state.next, truncation.offset)
        lost = (f"offsets {truncation.offset} to {state.next - 1} were already handed out from records the log "
                "no longer holds" if state.next > truncation.offset else "nothing handed out is affected")
        log.warning("fetcher: %s-%d's log was truncated under this consumer (a leader elected without the "
                    "records it had read, up to offset %d): the log now diverges at offset %d; %s; fetching "
                    "again from offset %d", tp[0], tp[1], truncation.position, truncation.offset, lost, resume)
        if self._metrics is not None:
            self._metrics.truncated(tp[0])
        state.epoch = next(self._epochs)
        self._drop_ready({tp})
        state.fetch_offset = state.next = resume
        state.last_epoch = truncation.epoch

    def _lost_leader(self, partitions: dict) -> None:
        with self._lock:
            for tp, work in partitions.items():
                state = self._partitions.get(tp)
                if state is not None and state.epoch == work.epoch:
                    state.leader = None
                    state.backoff_until = time.monotonic() + RETRY_BACKOFF * 4
            self._changed.notify_all()
