"""Forgetting empty groups (Kafka's offsets.retention.minutes).

Owns the forget timer of each empty group and the forgetting itself: a group
with no members past its retention is dropped from ZooKeeper and from the
core, with its committed offsets if they expire (``expire_offsets``), else
only if it has none. A group busy with anything (a round, a flush, a fence,
a registration) is looked at again later; one that has members again is
looked at when it next empties. Of a group it moves only ``forgetting``, and
what a failed forget leaves unknown.
"""

from __future__ import annotations

import logging
from functools import partial
from typing import Callable, Optional

from zkcoord.coordinator.actions import ForgetGroup, ReadOffsets, SetTimer
from zkcoord.coordinator.config import CoordinatorConfig
from zkcoord.coordinator.core.groups import GroupTable
from zkcoord.coordinator.core.office import Office
from zkcoord.coordinator.core.offsets import Offsets
from zkcoord.coordinator.core.outbox import Outbox
from zkcoord.coordinator.core.rounds import Rounds
from zkcoord.coordinator.group import Group, GroupPhase
from zkcoord.errors import describe

log = logging.getLogger(__name__)

# A group due to be forgotten but busy (a flush, a round, a fence) is looked
# at again after this, or its retention if shorter.
FORGET_RETRY_S = 60.0


def forget_timer(group: str) -> tuple:
    return ("forget", group)


class Retention:
    def __init__(self, config: CoordinatorConfig, office: Office, out: Outbox, groups: GroupTable,
                 offsets: Offsets, rounds: Rounds, registering_in: Callable[[str], bool]):
        """``registering_in(name)``: whether a member of group ``name`` is registering."""
        self.config = config
        self.office = office
        self.out = out
        self.groups = groups
        self.offsets = offsets
        self.rounds = rounds
        self._registering_in = registering_in

    def empty(self, group: Group, now: float, after: Optional[float] = None) -> None:
        """``group`` has no members now: forget it after its retention
        (``after`` seconds, by default the retention) unless someone joins."""
        retention = self.config.group_retention_ms / 1000.0
        self.out.emit(SetTimer(forget_timer(group.name), now + (retention if after is None else after)))

    def _later(self, group: Group, now: float) -> None:
        self.empty(group, now, after=min(FORGET_RETRY_S, self.config.group_retention_ms / 1000.0))

    def due(self, name: str, now: float) -> None:
        """The forget timer: forget the group if it still has no members and
        has no committed offset, or (``expire_offsets``, Kafka's offset
        expiry) whatever offsets it has, which go with it. Without expiry a
        group with offsets is kept for good. A group that has members again
        is looked at when it next empties."""
        group = self.groups.get(name)
        if group is None or group.forgetting or group.members or group.phase is not GroupPhase.EMPTY:
            return
        busy = (not self.office.active or self.rounds.busy(name) or self.offsets.busy(name)
                or self._registering_in(name) or group.fences.until(now) is not None)
        if busy:
            self._later(group, now)
            return
        if self.offsets.committed.get(name) and not self.config.expire_offsets:
            log.debug("%s kept past its retention: it has committed offsets", group.describe())
            return
        group.forgetting = True
        self.out.ask(partial(ReadOffsets, group=name, partitions=None), partial(self._offsets_read, group))

    def _offsets_read(self, group: Group, found, error, now: float) -> None:
        if error is not None or (found and not self.config.expire_offsets):
            group.forgetting = False
            if error is not None:
                log.warning("%s not forgotten yet: reading its offsets failed: %s", group.describe(), describe(error))
                self._later(group, now)
            else:
                self.offsets.learn(group.name, frozenset(found), found)
                log.debug("%s kept past its retention: it has committed offsets", group.describe())
            return
        expiring = bool(found) or bool(self.offsets.committed.get(group.name))
        self.out.ask(partial(ForgetGroup, group=group.name, offsets=expiring),
                     partial(self._forgotten, group, expiring))

    def _forgotten(self, group: Group, expiring: bool, _result, error, now: float) -> None:
        group.forgetting = False
        if error is not None:
            group.state_exists = None  # what is left of it is read again by its next round
            group.recorded_owners = None
            log.warning("%s not forgotten yet: %s", group.describe(), error)
            self._later(group, now)
            return
        self.groups.drop(group)
        self.offsets.forget_group(group.name)
        self.rounds.history.forget(group.name)  # deleted with its nodes
        log.info("[group %s] forgotten%s: no members for %d ms", group.name,
                 ", its committed offsets expired" if expiring else " (it had no committed offsets)",
                 self.config.group_retention_ms)
