"""The clock leases are measured on, on both sides.

A lease (a member's, and the coordinator's on its office) must count time
the machine spent suspended: CLOCK_MONOTONIC stops while a Linux host
sleeps, so a laptop woken long after its session ended would still believe
it holds a lease. CLOCK_BOOTTIME keeps counting through a suspend; where
there is none, the monotonic clock is the best there is.
"""

from __future__ import annotations

import time

_BOOTTIME = getattr(time, "CLOCK_BOOTTIME", None)


def lease_clock() -> float:
    """Seconds on a clock that never goes back and counts a suspend."""
    if _BOOTTIME is not None:
        return time.clock_gettime(_BOOTTIME)
    return time.monotonic()
