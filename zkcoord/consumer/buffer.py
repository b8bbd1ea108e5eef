"""Records fetched but not yet returned by poll(), handed out as seed 003 decides.

Greedy round robin over partitions: take as many records as fit from one
partition, then move to the next, and keep where we left off so that the
next poll() begins there (the seed's words). Two refinements make "no
partition starves" hold even when partitions are refilled between polls:
the partition left off mid-way resumes only for the records it had left
then, and the others are visited in the order they last became ready (a
partition goes to the back of that order whenever it is served). A partition
therefore waits only for records buffered before its turn came up, never for
records that arrive later, however often its neighbours are refilled.
Pure data structure, no I/O.
"""

from __future__ import annotations

import itertools
from collections import deque
from typing import Iterable, Optional

from zkcoord.records import Record, TopicPartition


class RecordBuffer:
    def __init__(self) -> None:
        self._queues: dict[TopicPartition, deque[Record]] = {}
        self._ready: dict[TopicPartition, int] = {}  # place in the rotation
        self._sequence = itertools.count()
        self._carry: Optional[tuple[TopicPartition, int]] = None  # left off: partition, records it had left
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def add(self, records: Iterable[Record]) -> None:
        for record in records:
            tp = (record.topic, record.partition)
            queue = self._queues.get(tp)
            if queue is None:
                queue = self._queues[tp] = deque()
                self._ready[tp] = next(self._sequence)
            queue.append(record)
            self._count += 1

    def drop(self, partitions: Iterable[TopicPartition]) -> None:
        """Forget everything buffered for ``partitions`` (they were revoked)."""
        for tp in partitions:
            queue = self._queues.pop(tp, None)
            if queue is not None:
                self._count -= len(queue)
            self._ready.pop(tp, None)
            if self._carry is not None and self._carry[0] == tp:
                self._carry = None

    def take(self, max_records: int) -> list[Record]:
        """Up to ``max_records`` records, greedily from one partition after another.

        >>> b = RecordBuffer()
        >>> b.add([Record("t", p, o, None, b"", 0) for p in (0, 1) for o in range(3)])
        >>> [(r.partition, r.offset) for r in b.take(4)]
        [(0, 0), (0, 1), (0, 2), (1, 0)]
        >>> [(r.partition, r.offset) for r in b.take(4)]
        [(1, 1), (1, 2)]
        >>> b.add([Record("t", p, o, None, b"", 0) for p in (0, 1) for o in range(3, 6)])
        >>> [(r.partition, r.offset) for r in b.take(2)]
        [(0, 3), (0, 4)]
        >>> [(r.partition, r.offset) for r in b.take(2)]  # 0 resumes for the one it had left, then 1
        [(0, 5), (1, 3)]
        """
        result: list[Record] = []
        if max_records <= 0:
            return result
        if self._carry is not None:
            tp, left = self._carry
            self._carry = None
            self._serve(tp, min(left, max_records), result)
            if left > max_records:
                self._carry = (tp, left - max_records)
                return result
        for tp in sorted(self._queues, key=self._ready.__getitem__):
            if len(result) >= max_records:
                break
            self._serve(tp, max_records - len(result), result)
            if tp in self._queues and len(result) >= max_records:
                self._carry = (tp, len(self._queues[tp]))
        return result

    def _serve(self, tp: TopicPartition, limit: int, into: list[Record]) -> None:
        queue = self._queues[tp]
        taken = min(limit, len(queue))
        for _ in range(taken):
            into.append(queue.popleft())
        self._count -= taken
        if queue:
            self._ready[tp] = next(self._sequence)  # to the back of the rotation
        else:
            del self._queues[tp]
            del self._ready[tp]
