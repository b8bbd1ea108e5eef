"""The ping schedule (seed 001 section 3) as a pure priority queue of due times.

The runtime asks ``due(now)`` for the members whose ping time has come; each
is rescheduled one interval (session_timeout / 3) later. Times are plain
floats from whatever clock the caller uses, so tests drive it by hand.
"""

from __future__ import annotations

import heapq
from typing import Hashable, Optional


class PingSchedule:
    def __init__(self) -> None:
        self._heap: list[tuple[float, int, Hashable]] = []
        self._interval: dict[Hashable, float] = {}
        self._due_at: dict[Hashable, float] = {}
        self._sequence = 0  # tie-breaker: keys need not be comparable

    def add(self, key: Hashable, interval: float, now: float) -> None:
        """Schedule ``key`` every ``interval``, first at ``now + interval``."""
        if interval <= 0:
            raise ValueError(f"ping interval must be positive, not {interval}")
        self._interval[key] = interval
        self._push(key, now + interval)

    def remove(self, key: Hashable) -> None:
        # Entries left in the heap are skipped lazily when they surface.
        self._interval.pop(key, None)
        self._due_at.pop(key, None)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._interval

    def __len__(self) -> int:
        return len(self._interval)

    def _push(self, key: Hashable, at: float) -> None:
        self._sequence += 1
        self._due_at[key] = at
        heapq.heappush(self._heap, (at, self._sequence, key))

    def next_due(self) -> Optional[float]:
        self._drop_stale()
        return self._heap[0][0] if self._heap else None

    def due(self, now: float) -> list[Hashable]:
        """Keys due at ``now``, each rescheduled one interval after its due
        time (seed 001), or one interval after ``now`` if it fell so far
        behind that the next time would already be past."""
        result = []
        while True:
            self._drop_stale()
            if not self._heap or self._heap[0][0] > now:
                return result
            at, _, key = heapq.heappop(self._heap)
            result.append(key)
            interval = self._interval[key]
            nxt = at + interval
            self._push(key, nxt if nxt > now else now + interval)

    def _drop_stale(self) -> None:
        while self._heap:
            at, _, key = self._heap[0]
            if self._due_at.get(key) == at:
                return
            heapq.heappop(self._heap)
