"""What runs beside the faults: a producer writing sequence-numbered records
at a steady rate, and a sampler recording the owners and committed offsets in
ZooKeeper. Each is a thread that writes its part of the history and stops
when told (or when its time bound passes)."""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path
from typing import Callable, Optional

from zkcoord.drill.history import PRODUCED, SAMPLES, append_lines, sample_to_json

log = logging.getLogger(__name__)

SAMPLE_INTERVAL_S = 0.2


class AcknowledgementWatch:
    """When each partition first had a record acknowledged above the offset
    given for it (``time.time()``), while the watch is open: the moment
    Kafka served the partition again after a fault."""

    def __init__(self, above: dict[tuple[str, int], int], close: Callable[["AcknowledgementWatch"], None]):
        self.above = dict(above)
        self.first: dict[tuple[str, int], float] = {}
        self._close = close

    def acknowledged(self, tp: tuple[str, int], offset: int, at: float) -> None:
        if tp not in self.first and offset > self.above.get(tp, -1):
            self.first[tp] = at

    def close(self) -> None:
        self._close(self)


class Producer(threading.Thread):
    """Writes ``rate`` records a second to ``topic`` (values are sequence
    numbers) until stopped, and records each one the broker acknowledged.
    ``client_settings`` are librdkafka properties on top (TLS, SASL)."""

    def __init__(self, brokers: str, topic: str, rate: int, directory: Path, max_seconds: float,
                 client_settings: Optional[dict[str, str]] = None):
        super().__init__(name="drill-producer", daemon=True)
        self.brokers, self.topic, self.rate = brokers, topic, rate
        self.client_settings = dict(client_settings or {})
        self.path = Path(directory) / PRODUCED
        self.max_seconds = max_seconds
        self.sent = 0
        self.acked = 0
        self.failed = 0
        self.refused: dict[str, int] = {}  # produce() calls the client refused at once, by error
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._pending: list[dict] = []
        self._highest: dict[tuple[str, int], int] = {}  # the highest offset acknowledged, by partition
        self._watches: list[AcknowledgementWatch] = []

    def stop(self) -> None:
        self._stopping.set()

    def _delivered(self, err, msg) -> None:
        if err is not None:
            self.failed += 1
            return
        tp, now = (msg.topic(), msg.partition()), time.time()
        with self._lock:
            self._pending.append({"topic": tp[0], "partition": tp[1], "offset": msg.offset(),
                                  "seq": int(msg.value()), "ts": now})
            self._highest[tp] = max(self._highest.get(tp, -1), msg.offset())
            for watch in self._watches:
                watch.acknowledged(tp, msg.offset(), now)
        self.acked += 1

    def watch_acknowledgements(self) -> AcknowledgementWatch:
        """A watch of the partitions' next acknowledgements, above what was
        acknowledged so far (taken with them, so none falls between)."""
        with self._lock:
            watch = AcknowledgementWatch(self._highest, self._unwatch)
            self._watches.append(watch)
        return watch

    def _unwatch(self, watch: AcknowledgementWatch) -> None:
        with self._lock:
            if watch in self._watches:
                self._watches.remove(watch)

    def _flush_history(self) -> None:
        with self._lock:
            pending, self._pending = self._pending, []
        if pending:
            append_lines(self.path, pending)

    def _refused(self, exc) -> None:
        """A record the client refused to take (it holds an error for the
        topic, an authorization refused, say, until its next metadata):
        counted, and said once per kind of error rather than per record."""
        name = exc.args[0].name() if exc.args and hasattr(exc.args[0], "name") else type(exc).__name__
        self.refused[name] = self.refused.get(name, 0) + 1
        if self.refused[name] == 1:
            log.warning("producer: the client refused a record: %s (retrying at the same rate)", exc)

    def run(self) -> None:
        from confluent_kafka import KafkaException
        from confluent_kafka import Producer as KafkaProducer

        producer = KafkaProducer({
            "bootstrap.servers": self.brokers, "acks": "all", "linger.ms": 5, "log_level": 0,
            "enable.idempotence": False,
            "message.timeout.ms": 300_000,           # outlast any fault: a record waits for its leader
            "topic.metadata.refresh.interval.ms": 1000,  # learn added partitions quickly
            **self.client_settings,
        })
        started = time.monotonic()
        step = 0.05
        per_step = max(1, round(self.rate * step))
        try:
            while not self._stopping.is_set() and time.monotonic() - started < self.max_seconds:
                for _ in range(per_step):
                    try:
                        producer.produce(self.topic, value=str(self.sent).encode(), on_delivery=self._delivered)
                        self.sent += 1
                    except BufferError:
                        break
                    except KafkaException as exc:
                        self._refused(exc)
                        break
                producer.poll(0)
                self._flush_history()
                self._stopping.wait(step)
        finally:
            left = producer.flush(60)
            if left:
                log.warning("producer: %d records never acknowledged", left)
            self._flush_history()


class Sampler(threading.Thread):
    """Reads the group's owners and committed offsets every SAMPLE_INTERVAL_S."""

    def __init__(self, zookeeper: str, group: str, directory: Path, max_seconds: float, security=None):
        super().__init__(name="drill-sampler", daemon=True)
        self.zookeeper, self.group, self.security = zookeeper, group, security
        self.path = Path(directory) / SAMPLES
        self.max_seconds = max_seconds
        self.samples = 0
        self._stopping = threading.Event()

    def stop(self) -> None:
        self._stopping.set()

    def run(self) -> None:
        from kazoo.retry import KazooRetry

        from zkcoord.zk import client as zk_client

        from zkcoord.zk.nodes import read_offsets, read_owners

        # Retry connecting for ever: the drill takes ZooKeeper's quorum away on purpose.
        client = zk_client.open_client(self.zookeeper, self.security,
                                       connection_retry=KazooRetry(max_tries=-1, max_delay=1))
        zk_client.start(client, timeout=30)
        started = time.monotonic()
        try:
            while not self._stopping.is_set() and time.monotonic() - started < self.max_seconds:
                try:
                    owners, offsets = read_owners(client, self.group), read_offsets(client, self.group)
                except Exception as exc:  # noqa: BLE001 - ZooKeeper away (a drilled fault): skip this sample
                    log.debug("sampler: %s", exc)
                else:
                    # Stamped after the reads: everything read was committed by then.
                    append_lines(self.path, [sample_to_json(time.time(), owners, offsets)])
                    self.samples += 1
                self._stopping.wait(SAMPLE_INTERVAL_S)
        finally:
            client.stop()
            client.close()
