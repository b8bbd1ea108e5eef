"""The steps every fault shares: picking its target, holding it, waiting
within its bound, and the record of what was done and when.
"""

from __future__ import annotations

import logging
import time
from typing import Callable, Optional

from zkcoord.drill.history import FaultRecord
from zkcoord.drill.schedule import PlannedFault

log = logging.getLogger(__name__)


def pick(candidates: list, fault: PlannedFault):
    if not candidates:
        return None
    return candidates[fault.pick % len(candidates)]


def record(fault: PlannedFault, target: str, injected: float, restored: float, recovery_from: float,
            whole_at: Optional[float], rejoined_at: Optional[float], bound: float, note: str = "") -> FaultRecord:
    return FaultRecord(index=fault.index, kind=fault.kind, target=target, planned=fault.planned,
                       injected=injected, restored=restored, recovery_from=recovery_from, whole_at=whole_at,
                       rejoined_at=rejoined_at, bound_s=round(bound, 3), note=note)


def wait_bound(bound: float) -> float:
    """How long to wait for a whole group before calling it stuck: well past the bound."""
    return 2 * bound + 10


def hold(seconds: float, watch: Optional[Callable[[], bool]] = None) -> Optional[float]:
    """Let the fault last ``seconds`` (the fault is the passage of time), and
    return when ``watch`` first held during it (None: never, or no watch)."""
    deadline = time.monotonic() + seconds
    seen = None
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return seen
        if seen is None and watch is not None:
            try:
                if watch():
                    seen = time.time()
            except Exception:  # noqa: BLE001 - ZooKeeper may be what the fault took away
                pass
        time.sleep(min(0.1, left))


def skipped(fault: PlannedFault, why: str) -> FaultRecord:
    """A fault the drill did not inject."""
    now = time.time()
    return record(fault, "-", now, now, now, now, now, 0.0, note=f"skipped: {why}")


def interrupted(fault: PlannedFault, injected: float) -> FaultRecord:
    """A fault under way when the drill stopped: its window still covers what happened under it."""
    return record(fault, "?", injected, time.time(), injected, None, None, 0.0,
                   note="the drill stopped during this fault")
