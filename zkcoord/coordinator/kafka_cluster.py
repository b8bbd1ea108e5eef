"""Brokers, topics, partition counts and topic ids learnt from Kafka's Metadata, for a server beside a KRaft Kafka.

A Kafka cluster in KRaft mode keeps nothing in ZooKeeper: no /brokers/ids to
learn where the brokers are, no /brokers/topics to watch. A server started
with ``--kafka-bootstrap`` asks Kafka instead. :class:`KafkaClusterWatch`
reads the whole cluster's Metadata from one broker every interval (decoding
it only when it differs from the last answer, byte for byte), and at
once when something meets a topic it does not know (a member naming one, a
pattern subscription, a broker answering UNKNOWN_TOPIC_OR_PARTITION); it
tells its subscribers what changed, as the ZooKeeper watch does
(:class:`~zkcoord.coordinator.topics.TopicSource`), and the listeners of
its brokers when they change (the ClusterMetadata view, the log-end reader).
ZooKeeper still keeps zkcoord's own state: election, groups, owners, offsets.

What changed is decided by :func:`topic_changes`, pure; the polling is the rest.
Written with ``threading``: a server is monkey-patched, so its threads are greenlets.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Callable, Collection, Iterable, Mapping, Optional

from zkcoord.coordinator.topics import TopicSource
from zkcoord.errors import ZkcoordError
from zkcoord.fetch.cluster import ClusterMetadata, TopicMetadata, ask_any

log = logging.getLogger(__name__)

# Looks asked for in a burst (a crowd registering with new topics) make one
# read, and reads are this far apart at least.
MIN_GAP_S = 0.2


def topic_changes(known: Mapping[str, tuple[int, Optional[str]]], seen: Mapping[str, TopicMetadata],
                  missing_before: Collection[str] = ()) -> dict[str, tuple[int, Optional[str]]]:
    """The (partitions, topic id) of every topic whose Metadata answer
    ``seen`` differs from ``known``; (0, None) for one known and now gone.

    Kafka never takes partitions away: a topic answered with fewer partitions
    and the same id is a broker whose metadata lags behind another's, and the
    larger count stands. A new id is a topic deleted and created again, with
    whatever count it now has.

    A topic is gone only when missing from two answers in a row: it was
    missing from the answer before too (``missing_before``, from
    :func:`missing`). One answer without it may be a broker whose metadata
    is not loaded yet (one just restarted); taken at its word, the topic's
    groups would lose every partition and get them back a moment later.

    >>> known = {"a": (2, "id-a"), "b": (1, "id-b"), "c": (4, "id-c")}
    >>> seen = {"a": TopicMetadata("id-a", {0: None, 1: None, 2: None}),  # grown
    ...         "c": TopicMetadata("id-c", {0: None, 1: None}),           # a lagging broker
    ...         "d": TopicMetadata("id-d", {0: None})}                    # new
    >>> sorted(topic_changes(known, seen).items())                        # b missing once: not yet gone
    [('a', (3, 'id-a')), ('d', (1, 'id-d'))]
    >>> sorted(topic_changes(known, seen, missing_before={"b"}).items())  # missing again: gone
    [('a', (3, 'id-a')), ('b', (0, None)), ('d', (1, 'id-d'))]
    """
    changes = {}
    for topic, data in seen.items():
        now = (data.partition_count, data.topic_id)
        before = known.get(topic)
        if before == now or (before is not None and before[1] == now[1] and before[0] > now[0]):
            continue
        changes[topic] = now
    for topic in missing(known, seen):
        if topic in missing_before:
            changes[topic] = (0, None)
    return changes


def missing(known: Mapping[str, tuple[int, Optional[str]]], seen: Mapping[str, TopicMetadata]) -> set[str]:
    """The topics ``known`` to exist that the answer ``seen`` lacks."""
    return {topic for topic, (count, _) in known.items() if count and topic not in seen}


class KafkaClusterWatch(TopicSource):
    """The topics and brokers of the Kafka cluster at ``bootstrap`` (a list
    of host:port), read every ``interval_s`` with ``connect`` (address -> a
    BrokerConnection with the server's TLS and credential)."""

    def __init__(self, bootstrap: Iterable[str], interval_s: float, connect: Callable[[str], object]):
        super().__init__()
        self.bootstrap = list(bootstrap)
        self.interval_s = interval_s
        self._connect = connect
        self.brokers: dict[int, str] = {}  # node id -> host:port, as last read
        self.last: Optional[ClusterMetadata] = None  # the whole of the last answer read
        self.reads = 0  # Metadata answers read: for tests and the state dump
        self._broker_listeners: list[Callable[[], None]] = []
        self._read_listeners: list[Callable[[], None]] = []
        self._wanted = threading.Event()
        self._running = False
        self._answered: Optional[str] = None  # the broker that answered last: asked first
        self._missing: set[str] = set()  # known topics the last answer lacked: gone if the next lacks them too

    def start(self) -> None:
        """Read once (raising KafkaUnreachable, or BrokerTooOld or a refused
        login, which no retry helps), then keep reading in the background."""
        self._apply(self._read())
        self._running = True
        threading.Thread(target=self._poll_forever, name="kafka metadata", daemon=True).start()

    def stop(self) -> None:
        self._running = False
        self._wanted.set()

    def on_brokers_changed(self, listener: Callable[[], None]) -> None:
        """Call ``listener`` (it must not wait) whenever the brokers change."""
        self._broker_listeners.append(listener)

    def on_read(self, listener: Callable[[], None]) -> None:
        """Call ``listener`` (it must not wait) after every answer read (a
        gateway repeats the leaders to its clients: it follows each read)."""
        self._read_listeners.append(listener)

    def addresses(self) -> list[str]:
        return list(self.brokers.values())

    def refresh(self) -> None:
        self._wanted.set()

    def _poll_forever(self) -> None:
        while self._running:
            self._wanted.wait(self.interval_s)
            self._wanted.clear()
            if not self._running:
                return
            try:
                self._apply(self._read())
            except ZkcoordError as exc:
                log.warning("Kafka's metadata not read: %s", exc)
            time.sleep(MIN_GAP_S)

    def _read(self) -> ClusterMetadata:
        # The broker that answered last first: one broker's view, not several
        # brokers' views in turn, each a little behind or ahead of the others.
        # But a topic missing from its answer is confirmed by another broker:
        # the one that answered may be the one whose view lags.
        ordered = list(dict.fromkeys(([self._answered] if self._answered else []) + self.addresses()
                                     + self.bootstrap))
        if self._missing and len(ordered) > 1:
            ordered = ordered[1:] + ordered[:1]
        # An answer the same as the last is not decoded again: most are.
        answer = ask_any(ordered, self._answering, previous=self.last)
        self.reads += 1
        return answer

    def _answering(self, address: str):
        connection = self._connect(address)
        self._answered = address
        return connection

    def _apply(self, seen: ClusterMetadata) -> None:
        self.last = seen
        missing_now = missing(self.known, seen.topics)
        changes = topic_changes(self.known, seen.topics, self._missing)
        self._missing = missing_now - set(changes)
        if self._missing:
            log.info("Kafka topic(s) %s missing from a Metadata answer: reading again to confirm",
                     ", ".join(sorted(self._missing)))
            self._wanted.set()
        for topic, known in sorted(changes.items()):
            if known[0] != self.known.get(topic, (0, None))[0]:
                log.info("Kafka topic %s has %d partition(s)", topic, known[0])
            self._tell(topic, known)
        if seen.brokers != self.brokers:
            log.info("Kafka brokers: %s", ", ".join(f"{i} at {a}" for i, a in sorted(seen.brokers.items())))
            self.brokers = dict(seen.brokers)
            for listener in list(self._broker_listeners):
                listener()
        for listener in list(self._read_listeners):
            listener()
