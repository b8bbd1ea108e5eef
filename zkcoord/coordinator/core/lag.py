"""Consumer lag: how far each group's committed offsets are behind the logs' ends.

Owns when the partitions' leaders are next asked where their logs end for
the lag's sake, and whether such a question is out. The lag itself is
computed at each scrape from what the core knows already: the committed
offsets (offsets.py) and the log ends learnt last (known_log_ends.py).

Those log ends are otherwise learnt only when an offset reported lies
beyond them, so a group that stops committing would keep the lag it had
then, however much is produced meanwhile: every ``lag_refresh_ms`` the
leaders of every partition with a committed offset are asked (one
ListOffsets per leader, as the commits' own questions), and the answers
are learnt as any other (a fresher log end only lets a commit through
without asking again). With ``lag_refresh_ms`` 0 nothing is asked: the lag
is then as of the log ends the commits learnt, a lower bound.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from functools import partial

from zkcoord.coordinator.actions import ReadLogEnds, SetTimer
from zkcoord.coordinator.config import CoordinatorConfig
from zkcoord.coordinator.core.groups import GroupTable
from zkcoord.coordinator.core.known_log_ends import KnownLogEnds, LogEndQuestion
from zkcoord.coordinator.core.office import Office
from zkcoord.coordinator.core.offsets import Offsets
from zkcoord.coordinator.core.outbox import Outbox
from zkcoord.errors import describe

log = logging.getLogger(__name__)

LAG_TIMER = ("lag",)


class ConsumerLag:
    def __init__(self, config: CoordinatorConfig, office: Office, out: Outbox, groups: GroupTable,
                 offsets: Offsets, log_ends: KnownLogEnds):
        self.config = config
        self.office = office
        self.out = out
        self.groups = groups
        self.offsets = offsets
        self.log_ends = log_ends
        self._asking = False
        self._failing = ""  # why the last question failed, said once until it changes

    def by_topic(self) -> dict[tuple[str, str], int]:
        """(group, topic) -> the sum of its partitions' lag: each one's log
        end learnt last less its committed offset (never below 0). A
        partition without either is left out; a group or topic with none
        left, absent."""
        lag: dict[tuple[str, str], int] = defaultdict(int)
        for name, committed in self.offsets.committed.items():
            if self.groups.get(name) is None:
                continue
            for tp, offset in committed.items():
                end = self.log_ends.of(tp)
                if end >= 0:
                    lag[(name, tp[0])] += max(0, end - offset)
        return dict(lag)

    def start(self, now: float) -> None:
        """The office began: the first question after one interval."""
        if self.config.lag_refresh_ms:
            self.out.emit(SetTimer(LAG_TIMER, now + self.config.lag_refresh_ms / 1000.0))

    def due(self, now: float) -> None:
        """The lag timer: ask again, unless the last question is still out."""
        self.start(now)
        if self._asking or not self.office.active:
            return
        partitions = frozenset(tp for name, committed in self.offsets.committed.items()
                               if self.groups.get(name) is not None for tp in committed)
        if not partitions:
            return
        self._asking = True
        self.out.ask(partial(ReadLogEnds, partitions=partitions),
                     partial(self._answered, partitions, self.log_ends.question(partitions)))

    def _answered(self, partitions, question: LogEndQuestion, found, error, _now: float) -> None:
        self._asking = False
        why = describe(error) if error is not None else ""
        if why and why != self._failing:
            log.info("log ends of %d partition(s) not learnt for the lag: %s", len(partitions), why)
        self._failing = why
        if error is None:
            self.log_ends.learn(found, question)
