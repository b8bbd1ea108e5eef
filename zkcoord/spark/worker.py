"""How the Python process that runs a streaming source ends, and the group
member's clean leave before it does.

When a query stops, or ends by itself (``Trigger.AvailableNow``, a failure),
Spark (4.3) ends its source's Python worker without waiting for it: it sends
SIGTERM (twice: the worker's stop, then its factory's) and closes the
worker's socket, in the order in which they reach the process. If the query
was interrupted while it talked to the worker, the socket closes first; the
runner then calls the reader's ``stop()`` from a ``finally``, which SIGTERM
interrupts a few milliseconds later. Otherwise SIGTERM comes first and, left
at its default, kills the process before anything runs. Either way a group
member would vanish without its LeaveGroupRequest, and the group would keep
the offsets of its last ping.

:func:`leave_before_terminating` makes SIGTERM first run the reader's leave
(once, whoever starts it), then end the process as SIGTERM would have.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from typing import Callable

log = logging.getLogger(__name__)

Leave = Callable[[], None]

_lock = threading.Lock()
_leaves: list[Leave] = []  # run, in order, when SIGTERM comes
_installed = False


def leave_before_terminating(leave: Leave) -> bool:
    """Run ``leave`` when SIGTERM comes, before the process ends. Only from
    the main thread of a process that leaves SIGTERM at its default action
    (Spark's worker does); returns whether ``leave`` is registered. ``leave``
    must be safe to call while another thread runs it too."""
    global _installed
    if threading.current_thread() is not threading.main_thread():
        return False
    with _lock:
        if not _installed:
            if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
                return False  # the application handles SIGTERM: not ours to take over
            signal.signal(signal.SIGTERM, _terminated)
            _installed = True
        _leaves.append(leave)
    return True


def forget(leave: Leave) -> None:
    """``leave`` has run (or is no longer needed): SIGTERM need not run it."""
    with _lock:
        if leave in _leaves:
            _leaves.remove(leave)


def _terminated(signum, frame) -> None:
    # A signal handler runs in the main thread between two bytecodes, perhaps
    # in the middle of the reader's own stop(): leave in a thread of our own,
    # which waits for a leave already under way instead of entering it again.
    # Spark's second SIGTERM must not cut the leave short.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    threading.Thread(target=_leave_then_exit, name="zkcoord-leave-on-sigterm").start()


def _leave_then_exit() -> None:
    with _lock:
        leaves = list(_leaves)
    for leave in leaves:
        try:
            leave()
        except Exception:  # noqa: BLE001 - the process ends anyway; the others still leave
            log.exception("leaving the group on SIGTERM failed")
    os._exit(128 + signal.SIGTERM)  # as SIGTERM's default action would have ended it
