"""The actions the core's parts decide while one event is handled.

Owns the list of actions (actions.py) not yet handed to the executor and the
ZooKeeper and broker operations asked for and not yet ended, each with the
part's continuation for its end. Every part writes into the one outbox of
its core; the core takes the whole list at the end of each event, so the
executor sees the parts' actions in the order they were decided.
"""

from __future__ import annotations

from typing import Callable, Optional


class Outbox:
    def __init__(self) -> None:
        self._out: list = []
        self._operations: dict[int, Callable] = {}
        self._next_token = 0

    def emit(self, action) -> None:
        self._out.append(action)

    def ask(self, make: Callable[[int], object], callback: Callable) -> None:
        """Ask for the operation ``make(token)``; ``callback(result, error, now)`` takes its end."""
        self._next_token += 1
        self._operations[self._next_token] = callback
        self.emit(make(self._next_token))

    def ended(self, token: int) -> Optional[Callable]:
        """The continuation of operation ``token``, now ended (None: not asked, or ended already)."""
        return self._operations.pop(token, None)

    def take(self) -> list:
        """The actions decided since the last take, in order; the outbox is empty after."""
        out, self._out = self._out, []
        return out

    def discard(self) -> None:
        """Drop what was decided since the last take (a handler that raised)."""
        self._out.clear()
