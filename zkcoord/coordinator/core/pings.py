"""Pings (seed 001 section 3): each member asked every third of its session timeout.

Owns the ping schedule and its one timer. A ping renews the member's lease
and brings back its offsets (auto-commit) and how long ago its application
last polled: a member alive but not polling past its max poll interval
(seed 004) is told why and dropped, its partitions going to one that polls.
"""

from __future__ import annotations

from typing import Callable, Optional

from zkcoord import wire
from zkcoord.coordinator.actions import Send, SetTimer
from zkcoord.coordinator.core.groups import GroupTable
from zkcoord.coordinator.core.observed import EXPIRED_MAX_POLL, CoreMetrics
from zkcoord.coordinator.core.office import Office
from zkcoord.coordinator.core.offsets import Offsets
from zkcoord.coordinator.core.outbox import Outbox
from zkcoord.coordinator.core.requests import PING_TICK_S, Requests
from zkcoord.coordinator.group import Member
from zkcoord.coordinator.schedule import PingSchedule

PING_TIMER = ("ping",)
# Generations whose PingRequest is kept for reuse; past this many the cache starts over.
KEPT_PINGS = 256


def _ignore(*_args) -> None:
    pass


class Pings:
    def __init__(self, office: Office, out: Outbox, groups: GroupTable, requests: Requests, offsets: Offsets,
                 metrics: CoreMetrics, remove: Callable[[Member, str, float], None]):
        """``remove(member, why, now)``: drop a member (one that answered wrong, or stopped polling)."""
        self.office = office
        self.out = out
        self.groups = groups
        self.requests = requests
        self.offsets = offsets
        self.metrics = metrics
        self._remove = remove
        self.schedule = PingSchedule()
        self._ping_at: Optional[float] = None
        # One PingRequest per generation, sent to every member at it:
        # messages are immutable, and thousands go out a second.
        self._pings: dict[int, wire.PingRequest] = {}

    def add(self, member: Member, now: float) -> None:
        """Ping ``member`` every third of its session timeout from now on."""
        self.schedule.add(member, member.session_timeout / 3, now)
        self._arm()

    def remove(self, member: Member) -> None:
        self.schedule.remove(member)

    def due(self, now: float) -> None:
        """PING_TIMER: ping every member due within a tick."""
        self._ping_at = None
        for member in self.schedule.due(now + PING_TICK_S):
            # Suspended: let the leases run out. Busy (2.2): the request out renews it.
            if not self.office.active or member.outstanding is not None or member.leaving:
                continue
            group = self.groups.by_name[member.group]
            self.metrics.ping_sent()
            self.requests.request(member, self._ping_at_generation(group.generation),
                                  member.session_timeout, self._pinged, _ignore, now)
        self._arm()

    def _ping_at_generation(self, generation: int) -> wire.PingRequest:
        ping = self._pings.get(generation)
        if ping is None:
            if len(self._pings) >= KEPT_PINGS:
                self._pings.clear()
            ping = self._pings[generation] = wire.PingRequest(
                num_retries=0, coordinator_epoch=self.office.epoch, generation=generation)
        return ping

    def _arm(self) -> None:
        at = self.schedule.next_due()
        if at is not None and at != self._ping_at:
            self._ping_at = at
            self.out.emit(SetTimer(PING_TIMER, at))

    def _pinged(self, member: Member, answer: wire.Message, now: float) -> None:
        group = self.groups.by_name[member.group]
        if not isinstance(answer, wire.PingResponse):
            self._remove(member, f"it answered a ping with {type(answer).__name__}", now)
            return
        if answer.offsets is not None:
            self.offsets.accept(group, member, wire.offsets_of(answer.offsets), owned=member.running)
        idle_ms = answer.last_poll_ms_ago
        if idle_ms < 0:  # never polled: count from its registration
            idle_ms = int((now - member.registered_at) * 1000)
        if idle_ms > member.max_poll_interval_ms:
            # Alive but not consuming (seed 004's max.poll.interval.ms): its
            # partitions go to someone who is. It is told why, so that it
            # rejoins only once its application polls again.
            why = f"has not polled for {idle_ms} ms (max poll interval {member.max_poll_interval_ms} ms)"
            self.out.emit(Send(member.connection, wire.ErrorResponse(
                error_code=wire.ErrorCode.MAX_POLL_INTERVAL_EXCEEDED,
                message=f"member {member.member_id} {why}"), 0))
            self.metrics.member_expired(EXPIRED_MAX_POLL)
            self._remove(member, why, now)
