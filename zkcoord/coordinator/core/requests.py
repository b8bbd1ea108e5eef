"""Requests to members: who is on which connection, what each was asked, by when.

Owns the table of connected members by connection and the deadlines of the
requests sent to them (a queue per timeout, one timer at most once a tick). A member
holds at most one request unanswered and one queued behind it (seed 001's
held channel; ``Member.outstanding`` and ``Member.queued`` are moved only
here). Every request is dated on the member (``last_sent``) before it
leaves: its lease, which the fences go by, runs from then. Nothing is sent
unless the office is held; a request that cannot go fails at once.
"""

from __future__ import annotations

import collections
import itertools
from dataclasses import dataclass
from typing import Callable, Hashable, Optional

from zkcoord import wire
from zkcoord.coordinator.actions import Send, SetTimer
from zkcoord.coordinator.core.observed import EXPIRED_NO_ANSWER, CoreMetrics
from zkcoord.coordinator.core.office import Office
from zkcoord.coordinator.core.outbox import Outbox
from zkcoord.coordinator.group import Member

# One timer for every request's deadline: at the earliest, and at most once
# a tick; an answered request's deadline is skipped when it comes (thousands
# of pings a second would otherwise set and cancel a timer each). A member
# that does not answer is dropped up to a tick late: its lease, which the
# fences go by, runs from when the request was sent.
ANSWERS_TIMER = ("answers",)
# Members whose ping falls due within this of the one due now are pinged
# together (pings.py), and deadlines are looked at no more often.
PING_TICK_S = 0.05


@dataclass(eq=False)
class Request:
    """A request to a member: what to do with its answer, or with its failure
    (no answer, the member dropped, the coordinator suspended before it left)."""

    message: wire.Message
    timeout: float
    on_answer: Callable[[Member, wire.Message, float], None]
    on_failure: Callable[[Member, str, float], None]
    correlation_id: int = 0


class Requests:
    def __init__(self, office: Office, out: Outbox, metrics: CoreMetrics,
                 expire: Callable[[Member, str, float], None]):
        """``expire(member, why, now)``: drop a member that did not answer in time."""
        self.office = office
        self.out = out
        self.metrics = metrics
        self._expire = expire
        self.members: dict[Hashable, Member] = {}  # by connection
        # (at, n, conn, correlation id) by the request's timeout. Requests of
        # one timeout end in the order they left, so each queue is in order
        # and its head ends first: a push and a pop cost nothing, where a heap
        # of every deadline cost two log-n walks a ping.
        self._deadlines: dict[float, collections.deque] = {}
        self._deadline_numbers = itertools.count()  # ties broken in order, whatever conn is
        self._answers_at: Optional[float] = None  # when ANSWERS_TIMER is set for

    def member_on(self, conn: Hashable) -> Optional[Member]:
        return self.members.get(conn)

    def connected(self, member: Member) -> None:
        """``member`` is admitted on its connection."""
        self.members[member.connection] = member

    def hung_up(self, member: Member) -> None:
        """``member``'s connection is closed; its requests are failed next (fail_all)."""
        member.connected = False
        self.members.pop(member.connection, None)

    def fail_all(self, member: Member, why: str, now: float) -> None:
        """Fail the requests ``member`` holds (its connection is gone)."""
        failed = [r for r in (member.outstanding, member.queued) if r is not None]
        member.outstanding = member.queued = None
        for request in failed:
            request.on_failure(member, why, now)

    def request(self, member: Member, message: wire.Message, timeout: float,
                on_answer: Callable, on_failure: Callable, now: float) -> None:
        """Send ``message`` to ``member``, or queue it behind the one request
        it has not answered yet (a ping: seed 001's held channel)."""
        self._dispatch(member, Request(message, timeout, on_answer, on_failure), now)

    def answered(self, member: Member, message: wire.Message, correlation_id: int, now: float) -> bool:
        """``member``'s answer to its outstanding request; False if it answers none."""
        request: Optional[Request] = member.outstanding
        if request is None or request.correlation_id != correlation_id:
            return False
        member.outstanding = None  # its deadline will find it answered
        request.on_answer(member, message, now)
        request, member.queued = member.queued, None
        if request is not None:
            self._dispatch(member, request, now)
        return True

    def deadlines_due(self, now: float) -> None:
        """ANSWERS_TIMER: drop the members whose request's deadline has passed unanswered."""
        self._answers_at = None
        while True:
            timeout = self._earliest_deadline()
            if timeout is None or self._deadlines[timeout][0][0] > now:
                break
            queue = self._deadlines[timeout]
            _, _, conn, correlation_id = queue.popleft()
            if not queue:
                del self._deadlines[timeout]
            self._answer_overdue(conn, correlation_id, now)
        if timeout is not None:  # most are of requests answered long since: look once a tick at most
            self._answers_at = max(self._deadlines[timeout][0][0], now + PING_TICK_S)
            self.out.emit(SetTimer(ANSWERS_TIMER, self._answers_at))

    def _earliest_deadline(self) -> Optional[float]:
        """The timeout whose queue's head ends first, of all kept (None: none is)."""
        return min(self._deadlines, key=lambda timeout: self._deadlines[timeout][0][:2], default=None)

    def _dispatch(self, member: Member, request: Request, now: float) -> None:
        self.office.check(now)
        if not self.office.active:  # a request renews the member's lease: none unless in office and connected
            request.on_failure(member, "the coordinator is not active", now)
        elif not member.connected:
            request.on_failure(member, "it is not connected", now)
        elif member.outstanding is not None:
            member.queued = request
        else:
            self._send(member, request, now)

    def _send(self, member: Member, request: Request, now: float) -> None:
        member.last_correlation_id += 1
        request.correlation_id = member.last_correlation_id
        member.outstanding = request
        member.last_sent = now  # before it leaves: the member's lease ends by this + T
        self.out.emit(Send(member.connection, request.message, request.correlation_id))
        self._set_deadline(request.timeout, now + request.timeout, member.connection, request.correlation_id)

    def _set_deadline(self, timeout: float, at: float, conn: Hashable, correlation_id: int) -> None:
        queue = self._deadlines.get(timeout)
        if queue is None:
            queue = self._deadlines[timeout] = collections.deque()
        queue.append((at, next(self._deadline_numbers), conn, correlation_id))
        if self._answers_at is None or at < self._answers_at:
            self._answers_at = at
            self.out.emit(SetTimer(ANSWERS_TIMER, at))

    def _answer_overdue(self, conn: Hashable, correlation_id: int, now: float) -> None:
        member = self.members.get(conn)
        request = member.outstanding if member is not None else None
        if request is not None and request.correlation_id == correlation_id:
            self.metrics.member_expired(EXPIRED_NO_ANSWER)
            self._expire(member, f"no answer to {type(request.message).__name__} within "
                                 f"{request.timeout:.1f}s", now)
