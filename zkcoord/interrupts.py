"""Ctrl-C and SIGTERM for the commands that run until stopped: the one place
where a zkcoord process takes over its stop signals.

A process does not always start with SIGINT at its default action. A shell
starts a background job (``make test &``, a step of a CI script) with SIGINT
ignored, and an ignored signal stays ignored across exec; Python then
installs no KeyboardInterrupt handler of its own. A command that counts on
Python's default never hears Ctrl-C there: a drill sent SIGINT at its second
fault ran all fifty and exited 0. So every long-running command installs its
handling here, explicitly, whatever disposition it inherited:

- :class:`Interruptible`: the signals raise KeyboardInterrupt in the main
  thread, for commands written as plain Python (the drill; ``zkcoord.cli``
  gives every command Ctrl-C so, the demo and ``zk up`` waiting for its
  quorum among them); :meth:`Interruptible.shield` then keeps a second
  signal from cutting a clean-up short;
- :func:`on_stop`: a callback instead, for commands with a shutdown of their
  own (``server``, ``broker``, ``consume``, the load generator).
"""

from __future__ import annotations

import signal
from typing import Callable, Sequence

# Ctrl-C, and what `kill`, `timeout` and service managers send.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def _raise_interrupt(signum, frame) -> None:
    raise KeyboardInterrupt


class Interruptible:
    """Within ``with Interruptible():`` each of ``signals`` raises
    KeyboardInterrupt in the main thread; on leaving, each gets back the
    handler it had. Only from the main thread, as ``signal.signal`` requires.

    >>> with Interruptible() as stop:       # doctest: +SKIP
    ...     try:
    ...         run_until_done()
    ...     finally:
    ...         stop.shield()               # a second Ctrl-C must not cut this short
    ...         clean_up()
    """

    def __init__(self, signals: Sequence[int] = STOP_SIGNALS):
        self.signals = tuple(signals)
        self._previous: dict[int, object] = {}

    def __enter__(self) -> "Interruptible":
        for signum in self.signals:
            self._previous[signum] = signal.signal(signum, _raise_interrupt)
        return self

    def shield(self) -> None:
        """Ignore the signals until the ``with`` block ends: for the clean-up
        that the first one started, which a second one would interrupt."""
        for signum in self.signals:
            signal.signal(signum, signal.SIG_IGN)

    def __exit__(self, *exc_info) -> None:
        for signum, previous in self._previous.items():
            # None: a handler installed outside Python (gevent's); the default is the safe guess.
            signal.signal(signum, signal.SIG_DFL if previous is None else previous)
        self._previous.clear()


def on_stop(callback: Callable[[], object], signals: Sequence[int] = STOP_SIGNALS, *,
            greenlet: bool = False) -> None:
    """Call ``callback`` whenever one of ``signals`` arrives, from now on.

    With ``greenlet`` (a gevent process) it runs in a greenlet of its own,
    where it may block as greenlets do: a plain handler could run inside
    gevent's hub, where blocking is an error. Otherwise it runs in the main
    thread between two bytecodes, so it should only set a flag or an event.
    """
    if greenlet:
        import gevent

        for signum in signals:
            gevent.signal_handler(signum, callback)
    else:
        for signum in signals:
            signal.signal(signum, lambda _signum, _frame: callback())
