"""The clock leases are measured on, on both sides, and what it cannot see.

A lease (a member's, and the coordinator's on its office) must count time
the machine spent suspended: CLOCK_MONOTONIC stops while a Linux host
sleeps, so a laptop woken long after its session ended would still believe
it holds a lease. CLOCK_BOOTTIME keeps counting through a suspend; where
there is none, the monotonic clock is the best there is.

Neither counts the time a hypervisor held a virtual machine paused (a
snapshot, a live migration): the guest's clocks stand still with it, and it
wakes believing its lease still runs. Its wall clock is usually put right
afterwards by a step (the hypervisor's time sync or guest agent on resume,
NTP once it notices), and on Linux the wall clock and the boot clock move
apart only by such steps (NTP's slewing speeds and slows both alike; a
suspend advances both). So :class:`PauseWatch` compares their advances
between two readings: when the wall clock has gained on the lease clock by
more than PAUSE_TOLERANCE_S, the machine was paused, or its wall clock
stepped forward, and the caller gives up its lease (docs/DESIGN.md, "A
paused machine"). Where the lease clock is the monotonic clock, a suspend
shows the same way and is rightly taken for a pause. The watch itself reads
no clock: it is handed both readings, so that tests move each clock by hand.
"""

from __future__ import annotations

import time

_BOOTTIME = getattr(time, "CLOCK_BOOTTIME", None)

# How far the wall clock may gain on the lease clock between two readings
# before it counts as a pause. Above the jitter of reading two clocks one
# after the other; below the coordinator's lease margin (200 ms by default),
# which therefore still covers a pause too short to be seen.
PAUSE_TOLERANCE_S = 0.1


def lease_clock() -> float:
    """Seconds on a clock that never goes back and counts a suspend."""
    if _BOOTTIME is not None:
        return time.clock_gettime(_BOOTTIME)
    return time.monotonic()


def wall_clock() -> float:
    """Seconds of the wall clock (CLOCK_REALTIME), read only beside :func:`lease_clock`."""
    return time.time()


class PauseWatch:
    """Notices a pause the lease clock did not count, from two clocks' readings.

    >>> watch = PauseWatch()
    >>> watch.observe(lease=100.0, wall=5000.0)  # the first reading only sets the base
    0.0
    >>> watch.observe(lease=101.0, wall=5001.0)  # both advanced alike
    0.0
    >>> watch.observe(lease=101.5, wall=5031.5)  # the wall clock gained 30 s: a pause
    30.0
    >>> watch.observe(lease=102.0, wall=5032.05)  # 50 ms: within the tolerance, not seen
    0.0
    >>> watch.observe(lease=103.0, wall=5013.05)  # stepped back: nothing to conclude
    0.0

    Readings may come from several threads: each is compared with whichever
    was recorded last, a pair read together, so a pause is never missed; at
    worst one is reported twice.
    """

    def __init__(self, tolerance: float = PAUSE_TOLERANCE_S):
        self.tolerance = tolerance
        self._offset: float | None = None  # wall minus lease clock at the last reading

    def observe(self, lease: float, wall: float) -> float:
        """Seconds the wall clock gained on the lease clock since the last
        reading, if more than the tolerance (a pause); else 0.0."""
        offset = wall - lease
        last, self._offset = self._offset, offset
        if last is None:
            return 0.0
        gained = offset - last
        return gained if gained > self.tolerance else 0.0
