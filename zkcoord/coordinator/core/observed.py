"""What the core tells whoever watches it: counts as it decides, and its census.

Owns no state: the interface the core's parts count into (:class:`CoreMetrics`,
which the server's metrics implement), the report of a finished rebalance,
why a member was dropped, and the census of groups and members counted at
each scrape.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping

from zkcoord.coordinator.group import Group, GroupPhase


@dataclass(frozen=True)
class RebalanceReport:
    """The last finished rebalance, for logs, benchmarks and tests."""

    group: str
    generation: int
    paused: int
    partitions: int
    seconds: float


# Why a member was dropped without leaving (CoreMetrics.member_expired).
EXPIRED_NO_ANSWER = "no_answer"  # a request went unanswered within its timeout
EXPIRED_MAX_POLL = "max_poll_interval"  # alive, but its application stopped polling
EXPIRED_STATIC = "static_timeout"  # a static member did not come back within its session timeout
EXPIRY_REASONS = (EXPIRED_NO_ANSWER, EXPIRED_MAX_POLL, EXPIRED_STATIC)


class CoreMetrics:
    """What the core counts as it decides, for whoever watches it (Kafka's
    GroupCoordinatorMetricsShard). These do nothing; the server's metrics
    (zkcoord/metrics/families.py) count. Called on hot paths (a ping each):
    an implementation only increments."""

    def ping_sent(self) -> None:
        pass

    def member_expired(self, reason: str) -> None:
        pass

    def rebalanced(self, report: RebalanceReport) -> None:
        pass

    def rebalance_failed(self) -> None:
        pass

    def offsets_flushed(self, seconds: float, failed: bool) -> None:
        pass


NO_METRICS = CoreMetrics()


@dataclass(frozen=True)
class Census:
    """How many groups are in each phase and members in each state, now
    (what the metrics endpoint reports at each scrape). A member is
    registering (its handover being written), active, leaving (its leave
    being written) or away (a static member disconnected, waiting for it)."""

    groups: Mapping[str, int]
    members: Mapping[str, int]


MEMBER_STATES = ("registering", "active", "leaving", "away")


def empty_census() -> Census:
    """Every phase and every member state, at 0."""
    return Census(dict.fromkeys((phase.value for phase in GroupPhase), 0), dict.fromkeys(MEMBER_STATES, 0))


def census_of(groups: Iterable[Group], registering: int) -> Census:
    """Groups by phase and members by state, counted now; ``registering``
    members are not in their groups yet."""
    empty = empty_census()
    by_phase, by_state = dict(empty.groups), dict(empty.members)
    for group in groups:
        by_phase[group.phase.value] += 1
        for member in group.members.values():
            state = "away" if not member.connected else "leaving" if member.leaving else "active"
            by_state[state] += 1
    by_state["registering"] = registering
    return Census(by_phase, by_state)
