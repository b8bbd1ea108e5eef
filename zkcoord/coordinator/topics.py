"""Partition counts (and ids) of every topic, kept current, for each coordinator a server runs.

Two sources tell the same thing to the same subscribers: :class:`TopicWatch`
here, from ZooKeeper (the embedded broker, Kafka in ZooKeeper mode), and
:class:`~zkcoord.coordinator.kafka_cluster.KafkaClusterWatch`, from Kafka's
Metadata (Kafka in KRaft mode, which keeps nothing in ZooKeeper).

Seed 001's coordinator watches /brokers/topics (TopicChangeListener) and each
topic's node (TopicPartitionChangeListener). A server holding several
coordinator slots watches them once, here, and passes every change to each
of its coordinators: one read per change, however many slots it holds.
A coordinator that starts is first told every count known, then the changes.
A topic deleted and created again with as many partitions is a change too:
its id (Kafka's, in the topic's node) is new.
"""

from __future__ import annotations

import logging
from typing import Callable, Iterable, Optional

from kazoo.client import KazooClient

from zkcoord.zk import layout

log = logging.getLogger(__name__)

# (topic, partitions, topic id): 0 partitions for a topic deleted or
# unreadable; no id for one whose node has none (written before Kafka 2.8).
Subscriber = Callable[[str, int, Optional[str]], None]


def read_topic(topic: str, data: Optional[bytes]) -> tuple[int, Optional[str]]:
    """Partitions and topic id in a /brokers/topics/<topic> node's data; (0, None) if absent or unreadable."""
    if data is None:
        return 0, None
    try:
        assignment = layout.decode_topic(topic, data)
    except layout.LayoutError as exc:
        log.error("ignoring topic %s: %s", topic, exc)
        return 0, None
    return len(assignment.partitions), assignment.topic_id


class TopicSource:
    """Every topic's partition count and id as last learnt, and who to tell
    when one changes. A subscriber must not wait: it is called from the
    source's own greenlet (or thread)."""

    def __init__(self):
        self.known: dict[str, tuple[int, Optional[str]]] = {}  # topic -> (partitions, topic id)
        self._subscribers: list[Subscriber] = []

    def subscribe(self, subscriber: Subscriber) -> None:
        """Tell ``subscriber`` every count known now, then every change."""
        for topic, (count, topic_id) in sorted(self.known.items()):
            subscriber(topic, count, topic_id)
        self._subscribers.append(subscriber)

    def unsubscribe(self, subscriber: Subscriber) -> None:
        if subscriber in self._subscribers:
            self._subscribers.remove(subscriber)

    def start(self) -> None:
        """Start learning the topics."""

    def stop(self) -> None:
        """Stop learning them."""

    def look_for(self, topics: Iterable[str] = (), pattern: bool = False) -> None:
        """A member named ``topics`` (or subscribed to a pattern): a source
        that learns topics late looks again now if any is new to it."""
        if pattern or any(not self.known.get(topic, (0, None))[0] for topic in topics):
            self.refresh()

    def refresh(self) -> None:
        """Learn the topics again now, for a source that learns them late."""

    def _tell(self, topic: str, known: tuple[int, Optional[str]]) -> None:
        """Record ``topic``'s (partitions, id) and tell every subscriber, if it changed."""
        if self.known.get(topic) == known:
            return
        self.known[topic] = known
        for subscriber in list(self._subscribers):
            subscriber(topic, *known)


class TopicWatch(TopicSource):
    """:class:`TopicSource` kept by ZooKeeper watches on /brokers/topics.

    Callbacks run in the ZooKeeper client's watch greenlet (kazoo's
    recipes). kazoo's recipes watch again on a new session by themselves.
    Every topic is seen as soon as it is written: :meth:`refresh` has
    nothing to do."""

    def __init__(self, zk: KazooClient):
        super().__init__()
        self.zk = zk
        self._watched: set[str] = set()

    def start(self) -> None:
        self.zk.ensure_path(layout.BROKER_TOPICS)
        self.zk.ChildrenWatch(layout.BROKER_TOPICS, self._on_topics)

    def _on_topics(self, children: list[str]) -> None:
        for topic in children:
            if topic not in self._watched:
                self._watched.add(topic)
                try:
                    path = layout.topic_path(topic)
                except layout.LayoutError as exc:
                    log.error("ignoring topic %r: %s", topic, exc)
                    continue
                self.zk.DataWatch(path, self._on_partitions(topic))

    def _on_partitions(self, topic: str):
        def on_change(data, _stat) -> None:
            self._tell(topic, read_topic(topic, data))

        return on_change
