"""The thin consumer: group membership pushed by the coordinator, records from the brokers.

``Consumer`` joins a group through :class:`GroupMembership` and fetches the
partitions the coordinator grants with a standard Kafka client (the fetcher).
It never decides anything about the group: it starts what Start says, stops
what Stop says, and reports the offsets of records the application has
finished with.

poll() *hands records out*; the application processes them for as long as
it takes and says it has finished with them by calling poll() again, or
close() (Kafka's auto-commit, too, commits at each poll what earlier polls
returned). So what the coordinator is told, on a ping with auto-commit, in
a Stop's acknowledgement, a leave or the handover to a next coordinator, is
where the latest poll() began: a crash in the middle of a batch delivers the
batch again rather than skip it. A Stop that finds the application in the
middle of a batch waits for its next poll() or close() before it answers
(as Kafka's revocation runs inside poll(); bounded, see
_wait_until_finished), so that the next owner starts after the batch and a
planned change delivers nothing twice.

Thread model: the membership's network thread starts and stops the fetcher
(on_start/on_stop); the application thread runs poll(), and with it the
application's own callbacks (on_assign/on_revoke), so that a slow callback
never holds up an answer to the coordinator. One lock guards the fetcher,
the buffer and the positions between them, and poll() fetches in short
slices so a Stop is never held up for long by the lock (it may wait for the
application, above). poll() hands out records only while the member holds
its lease (docs/DESIGN.md, the lease rule), and on_assign too: the
application is never told it owns a partition while another member may (a
Start applied so late that the lease has run out is stopped before the
application hears of it, and then it hears nothing). The lease bounds when
records are handed out, not how long the application takes over them.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from typing import Callable, Iterator, Optional, Sequence

from zkcoord import wire
from zkcoord.consumer.config import ConsumerConfig
from zkcoord.errors import ZkcoordError
from zkcoord.fetch.buffer import RecordBuffer
from zkcoord.fetch.isolation import READ_UNCOMMITTED
from zkcoord.member.membership import GroupMembership
from zkcoord.member.protocol import NO_OFFSET
from zkcoord.records import Record, TopicPartition

log = logging.getLogger(__name__)

FETCH_SLICE_S = 0.05  # longest a poll() holds the lock while waiting for data


def columnar_fetcher_factory(brokers: str, client_id: str, tls=None, credential=None, plain_without_tls=False,
                             metrics=None, isolation_level: str = READ_UNCOMMITTED):
    """``tls``: the client SSLContext to reach the brokers with (None: plaintext);
    ``credential``: (user, password) for the brokers' SASL (None: none), sent
    with PLAIN without TLS only if ``plain_without_tls``; ``metrics``: the
    FetcherMetrics to count in; ``isolation_level``: ConsumerConfig's."""
    from zkcoord.fetch.columnar import ColumnarFetcher

    return ColumnarFetcher(brokers, client_id=client_id, tls=tls, credential=credential,
                           plain_without_tls=plain_without_tls, metrics=metrics, isolation_level=isolation_level)


class Consumer:
    """A member of a consumer group whose assignment the coordinator pushes.

    ``on_assign(partitions)`` runs inside poll() before any record of those
    partitions is returned. ``on_revoke(partitions)`` runs inside poll() after
    they were stopped and their offsets reported to the coordinator: the
    offsets after every record returned before that poll() (with auto-commit
    off: what commit() had marked by then).

    >>> with Consumer(["127.0.0.1:9900"], group="g", topics=["t"]) as c:  # doctest: +SKIP
    ...     for record in c:
    ...         handle(record)
    """

    def __init__(
        self,
        bootstrap: Sequence[str],
        config: Optional[ConsumerConfig] = None,
        *,
        on_assign: Optional[Callable[[set[TopicPartition]], None]] = None,
        on_revoke: Optional[Callable[[set[TopicPartition]], None]] = None,
        fetcher_factory: Callable[[str, str], object] = columnar_fetcher_factory,
        metrics_registry=None,
        **settings,
    ):
        """``config``, or the settings of a :class:`ConsumerConfig` as keywords
        (``group=``, ``topics=`` ...), which also override a given config's.
        ``metrics_registry``: a prometheus_client registry the fetcher counts
        in (:attr:`fetch_metrics`; default: one of the consumer's own)."""
        from prometheus_client import CollectorRegistry

        from zkcoord.metrics.families import FetcherMetrics

        self.config = ConsumerConfig.of(config, **settings)
        self.fetch_metrics = FetcherMetrics(metrics_registry or CollectorRegistry())
        self._on_assign = on_assign
        self._on_revoke = on_revoke
        self._fetcher_factory = fetcher_factory
        self._fetcher = None
        self._lock = threading.RLock()
        # Notified when the application finishes with what it was handed (a Stop may wait for it).
        self._finishing = threading.Condition(self._lock)
        self._buffer = RecordBuffer()
        self._positions: dict[TopicPartition, int] = {}  # next offset the application has not seen
        # The positions where the latest poll() began: what the application has finished with.
        self._finished: dict[TopicPartition, int] = {}
        self._committed: dict[TopicPartition, int] = {}  # explicit commit() without auto-commit
        self._unresolved: set[TopicPartition] = set()  # reset starts the fetcher had not resolved at on_start
        self._last_poll: Optional[float] = None
        # Application callbacks owed, in order: ("assign" | "revoke", partitions).
        self._callbacks: collections.deque[tuple[str, set[TopicPartition]]] = collections.deque()
        self._closed = False
        self.membership = GroupMembership(bootstrap, self.config, self)
        self.membership.start()

    # -- application API ---------------------------------------------------------------------

    @property
    def consumer_id(self) -> str:
        return self.membership.consumer_id

    def assignment(self) -> set[TopicPartition]:
        return set(self.membership.assignment)

    def poll(self, timeout_ms: int = 1000) -> list[Record]:
        """Up to max_poll_records records, waiting at most ``timeout_ms`` for the first.

        Runs the application's on_assign and on_revoke callbacks first, in the
        order the changes happened: a partition's on_assign runs before any of
        its records is returned; on_revoke runs after its records stopped.
        Returns nothing while the member does not hold its lease, and raises
        the error that ended the membership, if one did.
        """
        return [record for run in self._poll_runs(timeout_ms) for record in run.records()]

    def poll_batch(self, timeout_ms: int = 1000, *, include_headers: bool = False):
        """:meth:`poll` as one ``pyarrow.RecordBatch`` in the columns of
        Spark's Kafka source (key, value, topic, partition, offset, timestamp,
        timestampType, and headers when asked for): the records are decoded
        straight into its buffers, with no Python object per record. Same
        callbacks, lease rule, offsets and commit() as poll(); pyarrow must be
        installed."""
        import pyarrow as pa

        from zkcoord.fetch.records import arrow_schema

        batches = [run.to_arrow(include_headers) for run in self._poll_runs(timeout_ms)]
        if not batches:
            return pa.RecordBatch.from_pylist([], schema=arrow_schema(include_headers))
        return batches[0] if len(batches) == 1 else pa.concat_batches(batches)

    def _poll_runs(self, timeout_ms: int) -> list:
        if self._closed:
            raise ZkcoordError("poll() on a closed consumer")
        self._last_poll = time.monotonic()
        with self._lock:
            self._finish()
        deadline = self._last_poll + max(0, timeout_ms) / 1000.0
        while True:
            self._run_callbacks()
            if self._closed:
                return []  # closed from inside a callback
            if self.membership.error is not None:
                raise self.membership.error
            with self._lock:
                if self._callbacks and self.membership.holds_lease():
                    continue  # a change came in meanwhile: its callback first
                runs = self._take_runs(deadline)
            if runs or time.monotonic() >= deadline:
                return runs
            if self._fetcher is None:
                time.sleep(min(FETCH_SLICE_S, max(0.0, deadline - time.monotonic())))

    def _take_runs(self, deadline: float) -> list:
        # Prefetch only while fewer than max_poll_records are buffered (seed 003).
        if self._fetcher is not None and len(self._buffer) < self.config.max_poll_records:
            wait = min(FETCH_SLICE_S, max(0.0, deadline - time.monotonic()))
            wanted = self.config.max_poll_records - len(self._buffer)
            fetch_chunks = getattr(self._fetcher, "fetch_chunks", None)
            if fetch_chunks is not None:
                self._buffer.add_runs(fetch_chunks(wanted, wait))
            else:  # a fetcher that hands out Records
                self._buffer.add(self._fetcher.fetch(wanted, wait))
        if not self.membership.holds_lease():
            # Past the lease (a long pause, a lost coordinator): the partitions
            # may be another member's already. Nothing is handed out and no
            # position moves; the network thread stops everything and drops the buffer.
            return []
        runs = self._buffer.take_runs(self.config.max_poll_records)
        for run in runs:
            self._positions[run.topic_partition] = run.next_offset
        self._pass_empty_offsets()
        return runs

    def _pass_empty_offsets(self) -> None:
        """Positions past offsets that hold no record for the application
        (transaction markers, aborted transactions, compacted gaps): the
        fetcher moved past them once it had handed out everything before
        them, and where none of those records waits here either, this
        position moves too; otherwise a partition ending in a marker would
        never look consumed (lock held)."""
        positions = getattr(self._fetcher, "positions", None)  # a fetcher of Records has none
        if positions is None:
            return
        for tp, offset in positions().items():
            if offset > self._positions.get(tp, offset) and not self._buffer.holds(tp):
                self._positions[tp] = offset

    def _run_callbacks(self) -> None:
        """Run the callbacks owed, in order; an assign waits while the lease is
        not held (the Stop that follows a lapse withdraws it, see on_stop)."""
        while True:
            with self._lock:
                if not self._callbacks or (self._callbacks[0][0] == "assign"
                                           and not self.membership.holds_lease()):
                    return
                kind, partitions = self._callbacks.popleft()
            callback = self._on_assign if kind == "assign" else self._on_revoke
            if callback is not None:
                callback(partitions)

    def _finish(self) -> None:
        """The application has finished with every record handed out so far (lock held)."""
        self._finished = dict(self._positions)
        self._finishing.notify_all()

    def commit(self) -> None:
        """Mark the offsets of every record returned so far as consumed.

        Offsets travel to the coordinator with the answer to its next ping
        (within session_timeout / 3), or with the acknowledgement of a Stop.
        With auto-commit on, that happens without calling commit().
        """
        with self._lock:
            self._committed.update(self._positions)

    def close(self) -> None:
        """Leave the group cleanly: stop fetching, then close the connection.

        Every record poll() returned counts as finished, as at a next poll()
        (Kafka's close() commits them too): the leave hands the offsets after
        them to the coordinator, and whoever takes the partitions over starts
        there. Leaving a ``with`` block by an exception does not count the
        latest batch: it is delivered again."""
        self._close(finished=True)

    def _close(self, finished: bool) -> None:
        if self._closed:
            return
        with self._lock:
            self._closed = True  # a Stop waiting for the application waits no more
            if finished:
                self._finish()
            self._finishing.notify_all()
        self.membership.close()
        with self._lock:
            if self._fetcher is not None:
                self._fetcher.close()
                self._fetcher = None

    def __enter__(self) -> "Consumer":
        return self

    def __exit__(self, exc_type, *exc) -> None:
        # An exception out of the block: the application did not finish its latest batch.
        self._close(finished=exc_type is None)

    def __iter__(self) -> Iterator[Record]:
        while not self._closed:
            yield from self.poll(1000)

    # -- MembershipListener (the network thread) ------------------------------------------------------

    def on_start(self, partitions: dict[TopicPartition, int]) -> None:
        with self._lock:
            if self._fetcher is None:
                brokers = ",".join(f"{b.host}:{b.port}" for b in self.membership.brokers)
                if not brokers:
                    raise ZkcoordError("the cluster metadata named no broker to fetch from")
                # TLS as to the coordinator; a factory of plaintext fetchers is never asked to.
                extra = {"tls": self.membership.tls} if self.membership.tls is not None else {}
                extra["metrics"] = self.fetch_metrics
                # The member's credential serves the brokers' SASL as well.
                if self.config.user:
                    extra["credential"] = (self.config.user, self.config.password)
                    extra["plain_without_tls"] = self.config.password_without_tls
                if self.config.isolation_level != READ_UNCOMMITTED:
                    extra["isolation_level"] = self.config.isolation_level
                self._fetcher = self._fetcher_factory(brokers, self.consumer_id, **extra)
            added = {tp: o for tp, o in partitions.items() if tp not in self._fetcher.assignment()}
            if not added:
                return
            self._fetcher.assign({tp: o if o != NO_OFFSET else self._reset_offset() for tp, o in added.items()})
            for tp, offset in added.items():
                if offset == NO_OFFSET:
                    # Where the reset put us counts as consumed: a Stop before
                    # the first record reports it, so the next owner does not
                    # reset again and skip what came in between.
                    offset = self._fetcher.position(tp)
                    if offset is None:
                        # Not resolved yet (no leader answered): the fetcher
                        # knows the start once it does (_resolved_starts).
                        self._unresolved.add(tp)
                        continue
                    self._committed[tp] = offset
                self._positions[tp] = offset
                self._finished[tp] = offset  # nothing handed out yet: nothing to finish
            # As in Kafka, the application hears of new partitions before any
            # of their records can reach it (poll() runs this first).
            self._callbacks.append(("assign", set(added)))

    def _reset_offset(self) -> int:
        from zkcoord.fetch.columnar import EARLIEST, LATEST

        return EARLIEST if self.config.auto_offset_reset == wire.SMALLEST else LATEST

    def on_stop(self, partitions: frozenset[TopicPartition]) -> dict[TopicPartition, int]:
        """Stop ``partitions`` at once; return the offsets the application has
        finished with, once it has finished what it holds of them (below)."""
        with self._lock:
            self._resolved_starts()  # before the fetcher forgets where a reset put them
            unheard: set[TopicPartition] = set()
            try:
                try:
                    if self._fetcher is not None:
                        self._fetcher.revoke(partitions)
                finally:  # whatever the fetcher did, nothing of these reaches the application any more
                    self._buffer.drop(partitions)
                    unheard = self._withdraw_assigns(partitions)
                self._wait_until_finished(partitions)
                source = self._reported_offsets()
                return {tp: source[tp] for tp in partitions if tp in source}
            finally:
                for tp in partitions:
                    self._positions.pop(tp, None)
                    self._finished.pop(tp, None)
                    self._committed.pop(tp, None)
                    self._unresolved.discard(tp)
                heard = set(partitions) - unheard
                if heard:
                    self._callbacks.append(("revoke", heard))

    def _wait_until_finished(self, partitions: frozenset[TopicPartition]) -> None:
        """Wait (the lock released) until the application has finished every
        record of ``partitions`` it was handed: its next poll() or close().
        Its batch may hold records of partitions the coordinator is taking
        away; reported now, their offsets would either skip the rest of the
        batch, should the application then fail, or hand the batch to the
        next owner again while this one finishes it. Kafka's revocation runs
        inside poll() for the same reason. The wait lasts no longer than the
        lease allows (MemberProtocol.handoff_deadline); past it, the batch
        goes to the next owner again: at least once rather than maybe never,
        as when a Kafka consumer misses a rebalance."""
        def finished() -> bool:
            return self._closed or all(self._finished.get(tp) == self._positions.get(tp) for tp in partitions)

        clock = self.membership.clock
        if not self._finishing.wait_for(finished, max(0.0, self.membership.protocol.handoff_deadline(clock())
                                                      - clock())):
            log.warning("member %s: the application has not finished its batch of %s in time: "
                        "the next owner gets it again", self.consumer_id, sorted(partitions))

    def _withdraw_assigns(self, partitions) -> set[TopicPartition]:
        """Take ``partitions`` out of assigns the application has not heard yet
        and return those: it never learnt it owned them, so it hears no revoke
        of them either (lock held)."""
        stopped, unheard = set(partitions), set()
        for kind, pending in self._callbacks:
            if kind == "assign":
                unheard |= pending & stopped
                pending -= stopped
        kept = [entry for entry in self._callbacks if entry[1]]
        self._callbacks.clear()
        self._callbacks.extend(kept)
        return unheard

    def offsets(self) -> Optional[dict[TopicPartition, int]]:
        with self._lock:
            return self._reported_offsets()

    def _reported_offsets(self) -> dict[TopicPartition, int]:
        """What the coordinator is told: the positions where the latest poll()
        began (auto-commit: what the application has finished with) or
        commit()'s marks, and where a reset start landed for a partition
        nothing of which reached the application (lock held)."""
        offsets = dict(self._finished if self.config.auto_commit else self._committed)
        offsets.update(self._resolved_starts())
        return offsets

    def _resolved_starts(self) -> dict[TopicPartition, int]:
        """Reset starts the fetcher resolved after on_start: they count as
        consumed, as a start resolved at once does (lock held)."""
        start_offset = getattr(self._fetcher, "start_offset", None)
        found = {}
        for tp in list(self._unresolved):
            if tp in self._positions:  # records came: positions say more
                self._unresolved.discard(tp)
                continue
            offset = start_offset(tp) if start_offset is not None else None
            if offset is not None:
                found[tp] = offset
                self._positions.setdefault(tp, offset)
                self._finished.setdefault(tp, offset)
                self._committed.setdefault(tp, offset)
                self._unresolved.discard(tp)
        return found

    def last_poll_ms_ago(self) -> int:
        if self._last_poll is None:
            return -1
        return int((time.monotonic() - self._last_poll) * 1000)
