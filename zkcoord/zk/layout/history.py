"""A group's rebalance history: its last rounds, as its coordinator records them.

One node per group, /zkcoord/groups/<group>/history, beside its state: a
JSON object of version 1 holding the last rounds, oldest first. The
coordinator rewrites it, fenced, when a round ends (coordinator/core/history.py);
`zkcoord groups describe --history` and the console read it. Its size is
bounded: at most MAX_HISTORY_ROUNDS rounds, each with its texts cut to
MAX_HISTORY_TEXT characters (under 200 KB at the most, far below the 1 MB a
ZooKeeper node may hold).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Iterable, Optional

from zkcoord.zk.layout.json_codec import _prefix_errors, encode_json
from zkcoord.zk.layout.names import _INT32_MAX, _INT64_MAX, LayoutError, _is_int
from zkcoord.zk.layout.zkcoord_nodes import decode_versioned

HISTORY_VERSION = 1
# The most rounds a history node keeps (the coordinator's setting may ask fewer).
MAX_HISTORY_ROUNDS = 200
# A trigger, reason or error is cut to this many characters: a round may
# name many members, and the node must stay small.
MAX_HISTORY_TEXT = 240

COMPLETED, FAILED, SUPERSEDED = "completed", "failed", "superseded"
# completed: the owners of its generation are recorded; failed: it could not
# finish, and is tried again; superseded: it could not finish because the
# group changed under it (a member went mid-round), and the round that
# change asked for replaces it.
OUTCOMES = (COMPLETED, FAILED, SUPERSEDED)

_INTEGERS = ("generation", "epoch", "started_ms", "duration_ms", "members", "moved", "paused", "paused_ms")
_TEXTS = ("trigger", "reason")


def cut(text: str) -> str:
    """``text`` made fit for a history: encodable, at most MAX_HISTORY_TEXT characters."""
    text = text.encode("utf-8", "replace").decode("utf-8")
    return text if len(text) <= MAX_HISTORY_TEXT else text[:MAX_HISTORY_TEXT - 3] + "..."


@dataclass(frozen=True)
class RebalanceRecord:
    """One round of a group. ``started_ms``: when it began (wall clock, ms
    since the epoch); ``trigger``: what asked for it (joins, leaves, topic
    changes, a retry); ``reason``: why its plan moved anything (planner.py);
    ``members``: members of its target; ``moved``: partitions started on a
    member that did not run them; ``paused``: partitions stopped for the
    handoff; ``paused_ms``: partition-milliseconds they stood still (each
    from the Stops sent to the round's end); ``epoch``: the coordinator
    epoch that ran it; ``error``: why it did not complete (None if it did)."""

    generation: int
    epoch: int
    started_ms: int
    duration_ms: int
    trigger: str
    reason: str
    members: int
    moved: int
    paused: int
    paused_ms: int
    outcome: str
    error: Optional[str] = None

    def __post_init__(self) -> None:
        for name in _INTEGERS:
            value, top = getattr(self, name), _INT64_MAX if name.endswith("_ms") else _INT32_MAX
            if not _is_int(value) or not 0 <= value <= top:
                raise LayoutError(f"{name} must be an integer in [0, {top}], got {value!r}")
        for name in _TEXTS + (("error",) if self.error is not None else ()):
            value = getattr(self, name)
            if not isinstance(value, str) or len(value) > MAX_HISTORY_TEXT:
                raise LayoutError(f"{name} must be a string of at most {MAX_HISTORY_TEXT} characters")
        if self.outcome not in OUTCOMES:
            raise LayoutError(f"outcome must be one of {', '.join(OUTCOMES)}, got {self.outcome!r}")
        if (self.error is None) != (self.outcome == COMPLETED):
            raise LayoutError("a round has an error exactly when it did not complete")


def kept(older: Iterable[RebalanceRecord], newer: Iterable[RebalanceRecord], rounds: int) -> list[RebalanceRecord]:
    """The last ``rounds`` (at most MAX_HISTORY_ROUNDS) of ``older`` then ``newer``."""
    rounds = max(0, min(rounds, MAX_HISTORY_ROUNDS))
    records = [*older, *newer]
    return records[len(records) - rounds:] if rounds else []


def encode_history(records: Iterable[RebalanceRecord]) -> bytes:
    records = list(records)
    if len(records) > MAX_HISTORY_ROUNDS:
        raise LayoutError(f"a history keeps at most {MAX_HISTORY_ROUNDS} rounds, got {len(records)}")
    return encode_json({"version": HISTORY_VERSION, "rounds": [asdict(r) for r in records]})


def decode_history(data: bytes, where: str = "rebalance history") -> list[RebalanceRecord]:
    fields = decode_versioned(data, where, HISTORY_VERSION, ("rounds",))
    rounds = fields.get("rounds")
    if not isinstance(rounds, list) or len(rounds) > MAX_HISTORY_ROUNDS:
        raise fields.fail("rounds", f"must be a list of at most {MAX_HISTORY_ROUNDS} rounds")
    records = []
    for index, entry in enumerate(rounds):
        if not isinstance(entry, dict):
            raise fields.fail("rounds", f"entry {index} is not a JSON object")
        known = {name: entry.get(name) for name in (*_INTEGERS, *_TEXTS, "outcome", "error")}
        with _prefix_errors(f"{where}: round {index}"):
            records.append(RebalanceRecord(**known))
    return records
