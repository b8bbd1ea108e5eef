"""Rebalance history: each group's last rounds, in a bounded ring, written to ZooKeeper.

Owns, per group, what asked for its next round (the triggers rounds.py is
handed: joins, leaves with their reason, topic changes, an operator's
reset), the round under way as it began (its generation, reason, what it
moves and pauses), the last ``rebalance_history_rounds`` rounds that ended
in this coordinator's office, and those of them not yet written.

A round's record is written when it ends, to the group's history node
(zk/layout/history.py), appended to what the node holds so that the
history runs on across coordinators; one write per group at a time (the
executor runs operations in parallel, and an older write landing last
would drop a round), fenced as every write of the coordinator. A write that
fails keeps its rounds for the next one, in the same bounded ring; nothing
is written while the office is not active, and what waited is written once
it is again.

Only rounds that planned a move are recorded: a round that found nothing
to change bumps no generation and is no rebalance. A round still running
when its coordinator is deposed is never recorded (its successor's round
replaces it, and says why: "the coordinator resumed the group").
"""

from __future__ import annotations

import logging
from collections import deque
from dataclasses import dataclass, field
from functools import partial
from typing import Mapping, Optional

from zkcoord.coordinator.actions import WriteRebalanceHistory
from zkcoord.coordinator.config import CoordinatorConfig
from zkcoord.coordinator.core.office import Office
from zkcoord.coordinator.core.outbox import Outbox
from zkcoord.coordinator.group import Group
from zkcoord.errors import describe
from zkcoord.records import TopicPartition
from zkcoord.zk import layout
from zkcoord.zk.layout.history import cut

log = logging.getLogger(__name__)

# A trigger names at most this many of the requests that asked for its
# round (a crowd joining at once asks once per member), and counts the rest.
MAX_TRIGGERS_NAMED = 4
RESUMED = "the coordinator resumed the group"


@dataclass(eq=False)
class _Open:
    """A round under way, as it began."""

    round: object  # rounds.Round: the ending must be of this very round
    started: float
    generation: int
    trigger: str
    reason: str
    members: int
    moved: int
    paused: int
    pausing_since: Optional[float] = None  # when its Stops went out


@dataclass(eq=False)
class _Ring:
    """One group's history in this office."""

    rounds: int
    triggers: list[str] = field(default_factory=list)
    asked: int = 0  # requests since the last round began, named in ``triggers`` or not
    records: deque = field(init=False)  # the last rounds ended, oldest first
    unwritten: deque = field(init=False)  # of those, the ones not yet in ZooKeeper
    writing: bool = False

    def __post_init__(self) -> None:
        self.records = deque(maxlen=self.rounds)
        self.unwritten = deque(maxlen=self.rounds)


class History:
    def __init__(self, config: CoordinatorConfig, office: Office, out: Outbox):
        self.config = config
        self.office = office
        self.out = out
        self._rings: dict[str, _Ring] = {}
        self._open: dict[str, _Open] = {}

    def _ring(self, name: str) -> _Ring:
        ring = self._rings.get(name)
        if ring is None:
            ring = self._rings[name] = _Ring(self.config.rebalance_history_rounds)
        return ring

    def recent(self, name: str) -> list[layout.RebalanceRecord]:
        """The last rounds of group ``name`` that ended in this office, oldest
        first (their ``started_ms`` on the core's clock: the executor dates
        them by the wall clock as it writes them)."""
        ring = self._rings.get(name)
        return list(ring.records) if ring is not None else []

    # -- what rounds.py tells it ------------------------------------------------------------------------

    def requested(self, name: str, why: str) -> None:
        """Something asked for a round of group ``name``: the trigger of its next one."""
        ring = self._ring(name)
        ring.asked += 1
        if why not in ring.triggers and len(ring.triggers) < MAX_TRIGGERS_NAMED:
            ring.triggers.append(why)

    def nothing_to_do(self, name: str) -> None:
        """The round asked for found nothing to change: what asked for it is answered."""
        ring = self._ring(name)
        ring.triggers, ring.asked = [], 0

    def began(self, group: Group, round_, reason: str,
              running: Mapping[str, frozenset[TopicPartition]], now: float) -> None:
        """``round_`` (a planned rounds.Round) began: ``running`` is what the
        connected members ran when it was planned."""
        ring = self._ring(group.name)
        self._open[group.name] = _Open(
            round=round_, started=now, generation=round_.generation, trigger=self._trigger(ring), reason=reason,
            members=len(round_.target),
            moved=sum(len(tps - running.get(member, frozenset())) for member, tps in round_.target.items()),
            paused=len(round_.plan.paused))
        ring.triggers, ring.asked = [], 0

    def pausing(self, name: str, round_, now: float) -> None:
        """The Stops of ``round_`` go out: its paused partitions stand still from now."""
        open_ = self._open.get(name)
        if open_ is not None and open_.round is round_:
            open_.pausing_since = now

    def ended(self, group: Group, round_, now: float, failure: Optional[str]) -> None:
        """``round_`` ended, with ``failure`` (None: it completed). One that
        failed while another round is already asked for (a member went
        mid-round) is superseded by it; else it failed, and is retried."""
        open_ = self._open.get(group.name)
        if open_ is None or open_.round is not round_:
            return  # it never planned anything (reading the owners failed): no rebalance to record
        del self._open[group.name]
        outcome = (layout.COMPLETED if failure is None
                   else layout.SUPERSEDED if group.rebalance_pending else layout.FAILED)
        paused_s = open_.paused * (now - open_.pausing_since) if open_.pausing_since is not None else 0.0
        record = layout.RebalanceRecord(
            generation=open_.generation, epoch=self.office.epoch, started_ms=_ms(open_.started),
            duration_ms=_ms(now - open_.started), trigger=cut(open_.trigger), reason=cut(open_.reason),
            members=open_.members, moved=open_.moved, paused=open_.paused, paused_ms=_ms(paused_s),
            outcome=outcome, error=None if failure is None else cut(failure))
        ring = self._ring(group.name)
        ring.records.append(record)
        ring.unwritten.append(record)
        self._write(group.name, ring)

    def write_pending(self) -> None:
        """The office is active again: write what ended while it was not."""
        for name, ring in list(self._rings.items()):
            self._write(name, ring)

    def forget(self, name: str) -> None:
        """Group ``name`` is forgotten (its nodes deleted with it): its history goes too."""
        self._rings.pop(name, None)
        self._open.pop(name, None)

    # -- writing --------------------------------------------------------------------------------------

    def _trigger(self, ring: _Ring) -> str:
        if not ring.triggers:
            last = ring.records[-1] if ring.records else None
            if last is not None and last.outcome != layout.COMPLETED:
                return f"retry after generation {last.generation} {last.outcome}"
            return RESUMED
        more = ring.asked - len(ring.triggers)
        return "; ".join(ring.triggers) + (f"; and {more} more" if more > 0 else "")

    def _write(self, name: str, ring: _Ring) -> None:
        if ring.writing or not ring.unwritten or not self.office.active:
            return
        batch = tuple(ring.unwritten)
        ring.unwritten.clear()
        ring.writing = True
        self.out.ask(partial(WriteRebalanceHistory, group=name, records=batch, rounds=ring.rounds),
                     partial(self._written, name, ring, batch))

    def _written(self, name: str, ring: _Ring, batch: tuple, _result, error, _now: float) -> None:
        ring.writing = False
        if error is not None:
            # Kept for the next write, behind nothing newer: the ring keeps the last rounds.
            ring.unwritten = deque([*batch, *ring.unwritten], maxlen=ring.rounds)
            log.warning("[group %s] rebalance history not written (kept for the next round's write): %s",
                        name, describe(error))
            return
        if self._rings.get(name) is ring:
            self._write(name, ring)


def _ms(seconds: float) -> int:
    return max(0, round(seconds * 1000))
