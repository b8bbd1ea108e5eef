"""The executor's side: read one offset range straight from its partition's
leader over the Kafka protocol, as Arrow record batches in the columns of
Spark's Kafka source.

Each Fetch response's record batches are decoded into Arrow buffers in one
pass (:mod:`zkcoord.fetch.records`), so no Python object is made per record.
Each call opens its own connection and closes it when the range is done:
nothing is shared between tasks, nothing is pickled but the plain ReadTask.
A task Spark retries after its broker died finds the partition's new leader
through the other brokers the plan knew. A task logs in with the SASL login
its plan carries (:mod:`zkcoord.spark.login`); a refused login or a missing
ACL fails the task at once, as no retry helps.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Iterator, Optional

from zkcoord.fetch.connection import (
    EARLIEST_TIMESTAMP, OFFSET_OUT_OF_RANGE, BrokerConnection, BrokerConnectionError, PartitionError,
)
from zkcoord.fetch.isolation import READ_UNCOMMITTED
from zkcoord.spark.login import Login, open_broker, refusal
from zkcoord.security.config import PLAIN, TlsConfig
from zkcoord.security.tls import client_context
from zkcoord.spark.errors import DataLossError, ReadTimeoutError, SparkSourceError
from zkcoord.spark.offsets import OffsetRange

SCHEMA_DDL = ("key BINARY, value BINARY, topic STRING, partition INT, offset BIGINT, "
              "timestamp TIMESTAMP, timestampType INT")
FETCH_BYTES = 8 * 1024 * 1024  # per request: large enough to amortise a round trip
MAX_FETCH_BYTES = 256 * 1024 * 1024  # a single batch larger than this is not read
FETCH_WAIT_MS = 100  # how long the broker holds a fetch that finds nothing yet
RETRY_BACKOFF_S = (0.05, 1.0)  # first and longest pause between failed attempts


@dataclass(frozen=True)
class ReadTask:
    """A planned range and where to read it; plain values only. ``brokers``
    are every broker the plan knew, to find a new leader through."""

    range: OffsetRange
    broker: str
    poll_timeout_ms: int = 120_000
    fail_on_data_loss: bool = True
    brokers: tuple[str, ...] = ()
    tls: TlsConfig = PLAIN  # how to reach the brokers
    login: Optional[Login] = None  # SASL with the brokers; None: anonymous
    isolation_level: str = READ_UNCOMMITTED  # read_committed: no aborted record, none past the stable offset


def read_task(task: ReadTask) -> Iterator:
    """Record batches holding exactly the offsets ``[start, end)`` that exist
    (transaction markers and compacted-away offsets leave gaps, and so do
    aborted transactions when reading committed)."""
    r = task.range
    if r.start >= r.end:
        return
    reader = _RangeReader(task)
    try:
        yield from reader.batches()
    finally:
        reader.close()


class _RangeReader:
    def __init__(self, task: ReadTask):
        self.task = task
        self.range = task.range
        self.leader = task.broker
        self.tls = client_context(task.tls)  # None: plaintext
        self.connection: Optional[BrokerConnection] = None
        self.fetch_bytes = FETCH_BYTES
        self.backoff = RETRY_BACKOFF_S[0]

    def batches(self) -> Iterator:
        r = self.range
        position = r.start
        deadline = self._deadline()
        last_problem = "no answer"
        while position < r.end:
            try:
                connection = self._connect()
                fetched = connection.fetch(r.topic, r.partition, position, max_wait_ms=FETCH_WAIT_MS,
                                           partition_max_bytes=self.fetch_bytes)
            except PartitionError as exc:
                if exc.code == OFFSET_OUT_OF_RANGE:
                    position = self._on_data_loss(position)
                    deadline = self._deadline()
                    continue
                refused = refusal(exc, r.topic, r.partition, self.task.login, "Read", self.leader)
                if refused:
                    raise refused from None
                if not exc.retriable:
                    raise SparkSourceError(f"reading {r.topic}-{r.partition} from {self.leader}: {exc}") from None
                last_problem = str(exc)
                self._lost_leader()
                self._pause(deadline, position, last_problem)
                continue
            except BrokerConnectionError as exc:
                last_problem = str(exc)
                self._lost_leader()
                self._pause(deadline, position, last_problem)
                continue
            columns = fetched.decode(position, r.end)
            if columns.rows:
                yield columns.to_arrow(r.topic, r.partition)
            if columns.next_offset > position:
                position = columns.next_offset
                deadline = self._deadline()
                self.backoff = RETRY_BACKOFF_S[0]
                continue
            if len(fetched.records) and columns.consumed == 0:
                # One batch is larger than the fetch size: ask for more.
                if self.fetch_bytes >= MAX_FETCH_BYTES:
                    raise SparkSourceError(f"{r.topic}-{r.partition}: the record batch at offset {position} "
                                           f"is larger than {MAX_FETCH_BYTES} bytes")
                self.fetch_bytes *= 2
                continue
            last_problem = (f"the log ends at {fetched.high_watermark}" if fetched.aborted_transactions is None else
                            f"the last stable offset is {fetched.last_stable_offset}")
            if time.monotonic() > deadline:
                self._timeout(position, last_problem)

    def _deadline(self) -> float:
        return time.monotonic() + self.task.poll_timeout_ms / 1000.0

    def _timeout(self, position: int, problem: str) -> None:
        r = self.range
        raise ReadTimeoutError(
            f"{r.topic}-{r.partition}: no record at offset {position} from {self.leader} "
            f"within {self.task.poll_timeout_ms} ms (range {r.start}..{r.end}; {problem})")

    def _pause(self, deadline: float, position: int, problem: str) -> None:
        if time.monotonic() + self.backoff > deadline:
            self._timeout(position, problem)
        time.sleep(self.backoff)
        self.backoff = min(self.backoff * 2, RETRY_BACKOFF_S[1])

    def _connect(self) -> BrokerConnection:
        if self.connection is None:
            self.connection = self._open(self.leader, 30.0)
        return self.connection

    def _open(self, address: str, timeout_s: float) -> BrokerConnection:
        return open_broker(address, self.task.login, client_id="zkcoord-spark-reader", timeout_s=timeout_s,
                           tls=self.tls, isolation_level=self.task.isolation_level)

    def _lost_leader(self) -> None:
        """The leader failed us: drop the connection and ask every broker
        the plan knew where the partition is led now."""
        self.close()
        r = self.range
        for address in dict.fromkeys((self.leader, *self.task.brokers)):
            try:
                with self._open(address, 5.0) as probe:
                    leader = probe.leader(r.topic, r.partition)
            except BrokerConnectionError:
                continue
            if leader is not None:
                self.leader = leader
                return

    def _on_data_loss(self, position: int) -> int:
        r = self.range
        low = self._connect().list_offset(r.topic, r.partition, EARLIEST_TIMESTAMP)
        if self.task.fail_on_data_loss or low <= position:
            raise DataLossError(
                f"{r.topic}-{r.partition}: offset {position} is gone (the log starts at {low}); "
                "set failOnDataLoss=false to skip lost records")
        return low

    def close(self) -> None:
        if self.connection is not None:
            self.connection.close()
            self.connection = None
