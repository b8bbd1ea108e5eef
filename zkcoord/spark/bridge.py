"""The planner of the JVM source (zkcoord/spark/jvm): it runs in the
driver's Python process and answers, through Py4J, each question the JVM
source asks (``Planner.java``): the read tasks of a batch query, and a
streaming query's offsets, micro-batch tasks, commits and stop.

Every answer comes from the same code as on the Python data source's path
(:class:`~zkcoord.spark.source.BatchReader` and
:class:`~zkcoord.spark.source.StreamReader`, with the group membership of
a streaming query), so the two paths plan alike; only the reading moves to
the JVM. Answers are JSON, ``{"result": ...}`` or ``{"error": name,
"message": text}``: an error reaches the query as the JVM's SourceException
with the same name (SourceOptionError, DataLossError...).
"""

from __future__ import annotations

import itertools
import json
import logging
import threading
from typing import Any, Callable

from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

from zkcoord.fetch.connection import retriable_codes
from zkcoord.fetch.isolation import READ_COMMITTED
from zkcoord.spark.options import parse_options
from zkcoord.spark.reader import FETCH_BYTES, FETCH_WAIT_MS, MAX_FETCH_BYTES, ReadTask

log = logging.getLogger(__name__)

_RETRIABLE_CODES = retriable_codes()


def task_to_jvm(task: ReadTask) -> dict[str, Any]:
    """A ReadTask as RangePartition.java reads it."""
    r = task.range
    tls = None
    if task.tls.ca is not None:
        tls = {"ca": task.tls.ca, "cert": task.tls.cert, "key": task.tls.key}
    sasl = None
    if task.login is not None:  # the task's serialized bytes carry it to the executor; it never prints it
        sasl = {"user": task.login.user, "password": task.login.password,
                "plainWithoutTls": task.login.plain_without_tls}
    return {"topic": r.topic, "partition": r.partition, "start": r.start, "end": r.end,
            "leader": task.broker, "brokers": list(task.brokers), "pollTimeoutMs": task.poll_timeout_ms,
            "failOnDataLoss": task.fail_on_data_loss, "fetchBytes": FETCH_BYTES,
            "maxFetchBytes": MAX_FETCH_BYTES, "fetchWaitMs": FETCH_WAIT_MS,
            "retriableErrors": _RETRIABLE_CODES, "tls": tls, "sasl": sasl,
            "readCommitted": task.isolation_level == READ_COMMITTED}


def _answer(question: Callable[[], Any]) -> str:
    try:
        return json.dumps({"result": question()})
    except Exception as exc:  # noqa: BLE001 - every failure goes back to the query, named
        log.debug("the JVM source's question failed", exc_info=True)
        return json.dumps({"error": type(exc).__name__, "message": str(exc)})


class Planner:
    """Implements the Java interface ``zkcoord.spark.Planner``; one per
    driver process, holding the open streaming queries' readers."""

    class Java:
        implements = ["zkcoord.spark.Planner"]

    def __init__(self) -> None:
        self._streams: dict[str, Any] = {}
        self._ids = itertools.count(1)
        self._lock = threading.Lock()

    def planBatch(self, options: str) -> str:
        from zkcoord.spark.source import BatchReader

        def plan():
            reader = BatchReader(parse_options(json.loads(options), streaming=False))
            return [task_to_jvm(p.task) for p in reader.partitions()]
        return _answer(plan)

    # -- streaming queries -------------------------------------------------------------------

    def openStream(self, options: str) -> str:
        from zkcoord.spark.source import StreamReader

        def open_():
            reader = StreamReader(parse_options(json.loads(options), streaming=True))
            with self._lock:
                stream = f"stream-{next(self._ids)}"
                self._streams[stream] = reader
            return stream
        return _answer(open_)

    def _reader(self, stream: str):
        with self._lock:
            reader = self._streams.get(stream)
        if reader is None:
            raise KeyError(f"no open stream {stream!r} (stopped, or opened by another driver process)")
        return reader

    def initialOffset(self, stream: str) -> str:
        return _answer(lambda: json.dumps(self._reader(stream).initialOffset()))

    def defaultMaxRows(self, stream: str) -> str:
        def limit():
            chosen = self._reader(stream).getDefaultReadLimit()
            return chosen.max_rows if isinstance(chosen, ReadMaxRows) else -1
        return _answer(limit)

    def prepareForTriggerAvailableNow(self, stream: str) -> str:
        return _answer(lambda: self._reader(stream).prepareForTriggerAvailableNow())

    def latestOffset(self, stream: str, start: str, max_rows: int) -> str:
        limit = ReadMaxRows(int(max_rows)) if max_rows > 0 else ReadAllAvailable()
        return _answer(lambda: json.dumps(self._reader(stream).latestOffset(json.loads(start), limit)))

    def planMicroBatch(self, stream: str, start: str, end: str) -> str:
        return _answer(lambda: [task_to_jvm(p.task) for p in
                                self._reader(stream).partitions(json.loads(start), json.loads(end))])

    def commit(self, stream: str, end: str) -> str:
        return _answer(lambda: self._reader(stream).commit(json.loads(end)))

    def stop(self, stream: str) -> str:
        def stop_():
            with self._lock:
                reader = self._streams.pop(stream, None)
            if reader is not None:
                reader.stop()
        return _answer(stop_)


_installed: dict[int, Planner] = {}  # id of the Py4J gateway -> its planner


def install(spark) -> Planner:
    """Start Py4J's callback server in this process (PySpark's own helper,
    which starts it once) and install the planner in ``spark``'s JVM: one
    planner per gateway, installed again by every call (cheap, and right
    after a JVM-side reset)."""
    from pyspark.java_gateway import ensure_callback_server_started

    gateway = spark.sparkContext._gateway
    ensure_callback_server_started(gateway)
    planner = _installed.get(id(gateway))
    if planner is None:
        planner = _installed[id(gateway)] = Planner()
    spark._jvm.zkcoord.spark.Planners.install(planner)
    return planner


def jvm_source_loaded(spark) -> bool:
    """Whether ``spark``'s JVM has the source's classes (its jar on
    spark.jars); never for a Spark Connect session, which has no Py4J."""
    try:
        jvm = spark._jvm
    except Exception:  # noqa: BLE001 - pyspark's Connect session raises its own error type here
        return False
    return bool(jvm.org.apache.spark.util.Utils.classIsLoadable("zkcoord.spark.ZkcoordSource"))
