"""Records fetched but not yet returned by poll(), handed out as seed 003 decides.

Greedy round robin over partitions: take as many records as fit from one
partition, then move to the next; a cursor kept between calls says where the
next poll() starts, so no partition starves. Pure data structure, no I/O.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from typing import Iterable

from zkcoord.records import Record

TopicPartition = tuple[str, int]


class RecordBuffer:
    def __init__(self) -> None:
        self._queues: "OrderedDict[TopicPartition, deque[Record]]" = OrderedDict()
        self._cursor = 0
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def add(self, records: Iterable[Record]) -> None:
        for record in records:
            tp = (record.topic, record.partition)
            queue = self._queues.get(tp)
            if queue is None:
                queue = self._queues[tp] = deque()
            queue.append(record)
            self._count += 1

    def drop(self, partitions: Iterable[TopicPartition]) -> None:
        """Forget everything buffered for ``partitions`` (they were revoked)."""
        for tp in partitions:
            queue = self._queues.pop(tp, None)
            if queue is not None:
                self._count -= len(queue)
        if self._queues:
            self._cursor %= len(self._queues)
        else:
            self._cursor = 0

    def take(self, max_records: int) -> list[Record]:
        """Up to ``max_records`` records, greedily from one partition after another.

        >>> b = RecordBuffer()
        >>> b.add([Record("t", p, o, None, b"", 0) for p in (0, 1) for o in range(3)])
        >>> [(r.partition, r.offset) for r in b.take(4)]
        [(0, 0), (0, 1), (0, 2), (1, 0)]
        >>> [(r.partition, r.offset) for r in b.take(4)]
        [(1, 1), (1, 2)]
        """
        result: list[Record] = []
        partitions = list(self._queues)
        if not partitions or max_records <= 0:
            return result
        start = self._cursor % len(partitions)
        index = start
        for step in range(len(partitions)):
            index = (start + step) % len(partitions)
            queue = self._queues[partitions[index]]
            while queue and len(result) < max_records:
                result.append(queue.popleft())
            if len(result) >= max_records:
                break
        self._count -= len(result)
        # Resume after the last partition served; if it still has records, resume at it.
        last = partitions[index]
        self._cursor = index if self._queues[last] else index + 1
        for tp in [tp for tp, q in self._queues.items() if not q]:
            del self._queues[tp]
        remaining = list(self._queues)
        if remaining:
            # Map the cursor onto the partitions that remain, preserving order.
            after = [tp for tp in partitions[self._cursor % len(partitions):] if tp in self._queues]
            self._cursor = remaining.index(after[0]) if after else 0
        else:
            self._cursor = 0
        return result
