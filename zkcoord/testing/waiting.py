"""Waiting on a condition with a deadline: the one way the harness, the tests,
the drill and the benchmarks wait (never a bare sleep)."""

from __future__ import annotations

import time
from typing import Callable, Optional, TypeVar

from zkcoord.errors import ZkcoordError

T = TypeVar("T")


class WaitTimeout(ZkcoordError, AssertionError):
    """A condition did not hold before its deadline. An AssertionError too, so
    a test that waits fails as a test, not as an error in the harness."""


def wait_until(predicate: Callable[[], T], timeout: float = 10.0, interval: float = 0.05,
               message: str = "condition", fail_on: tuple[type[BaseException], ...] = (),
               sleep: Callable[[float], None] = time.sleep) -> T:
    """Poll ``predicate`` until it returns something truthy, and return that.

    An exception from the predicate means "not checkable yet" (a file half
    written, a node missing), except one of ``fail_on``, which says the
    condition can never hold (a process died) and is raised at once. After
    ``timeout`` seconds, raises WaitTimeout naming ``message`` and the
    predicate's last error. ``sleep`` waits between polls (gevent.sleep
    where greenlets must run meanwhile in an unpatched process).
    """
    deadline = time.monotonic() + timeout
    last_error: Optional[BaseException] = None
    while True:
        try:
            result = predicate()
            if result:
                return result
        except fail_on:
            raise
        except Exception as exc:  # noqa: BLE001 - not checkable yet
            last_error = exc
        if time.monotonic() >= deadline:
            detail = f" (last error: {last_error!r})" if last_error else ""
            raise WaitTimeout(f"timed out after {timeout:.1f}s waiting for {message}{detail}")
        sleep(interval)
