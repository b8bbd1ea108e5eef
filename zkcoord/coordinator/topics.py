"""Partition counts of every topic, kept current by ZooKeeper watches, for each coordinator a server runs.

Seed 001's coordinator watches /brokers/topics (TopicChangeListener) and each
topic's node (TopicPartitionChangeListener). A server holding several
coordinator slots watches them once, here, and passes every change to each
of its coordinators: one read per change, however many slots it holds.
A coordinator that starts is first told every count known, then the changes.
"""

from __future__ import annotations

import logging
from typing import Callable, Optional

from kazoo.client import KazooClient

from zkcoord.zk import layout

log = logging.getLogger(__name__)

# (topic, partitions): 0 partitions for a topic deleted or unreadable.
Subscriber = Callable[[str, int], None]


def count_partitions(topic: str, data: Optional[bytes]) -> int:
    """Partitions in a /brokers/topics/<topic> node's data; 0 if absent or unreadable."""
    if data is None:
        return 0
    try:
        return len(layout.decode_topic(topic, data).partitions)
    except layout.LayoutError as exc:
        log.error("ignoring topic %s: %s", topic, exc)
        return 0


class TopicWatch:
    """Every topic's partition count, and who to tell when one changes.

    Callbacks run in the ZooKeeper client's watch greenlet (kazoo's
    recipes); a subscriber must not wait. kazoo's recipes watch again on a
    new session by themselves."""

    def __init__(self, zk: KazooClient):
        self.zk = zk
        self.counts: dict[str, int] = {}
        self._subscribers: list[Subscriber] = []
        self._watched: set[str] = set()

    def start(self) -> None:
        self.zk.ensure_path(layout.BROKER_TOPICS)
        self.zk.ChildrenWatch(layout.BROKER_TOPICS, self._on_topics)

    def subscribe(self, subscriber: Subscriber) -> None:
        """Tell ``subscriber`` every count known now, then every change."""
        for topic, count in sorted(self.counts.items()):
            subscriber(topic, count)
        self._subscribers.append(subscriber)

    def unsubscribe(self, subscriber: Subscriber) -> None:
        if subscriber in self._subscribers:
            self._subscribers.remove(subscriber)

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
            count = count_partitions(topic, data)
            if self.counts.get(topic) == count:
                return
            self.counts[topic] = count
            for subscriber in list(self._subscribers):
                subscriber(topic, count)

        return on_change
