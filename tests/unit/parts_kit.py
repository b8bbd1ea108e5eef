"""What the tests of one part of the coordinator's core (zkcoord/coordinator/core/) stand on.

A manual clock (``now``, moved only by ``advance``), an office proven at 0
(and renewed as the clock moves, unless ``prove_office`` is False), the
outbox every part writes into, and the in-memory ZooKeeper of
core_harness.py answering what the parts ask (``settle``). Each test builds
the part it tests, and only what lies below it, on this; timers fire
through ``routes`` (the timer kind -> ``handler(key, now)``), as the
composing core routes them.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Callable, Optional

from zkcoord import wire
from zkcoord.coordinator import actions
from zkcoord.coordinator.core.groups import GroupTable
from zkcoord.coordinator.core.known_log_ends import KnownLogEnds
from zkcoord.coordinator.core.membership import Membership
from zkcoord.coordinator.core.office import Office
from zkcoord.coordinator.core.offsets import Offsets
from zkcoord.coordinator.core.outbox import Outbox
from zkcoord.coordinator.core.pings import Pings
from zkcoord.coordinator.core.requests import Requests
from zkcoord.coordinator.core.rounds import Rounds
from zkcoord.coordinator.group import Member
from zkcoord.coordinator.planner import Subscription

from tests.unit.core_harness import CONFIG, ZK_SESSION_MS, FakeZooKeeper, Recorded, carry_out

T_MS = 3000


def member(member_id: str, group: str = "g", session_timeout_ms: int = T_MS, **kwargs) -> Member:
    """A member of ``group`` on the connection named after it, subscribed to topic t."""
    return Member(member_id=member_id, group=group, subscription=Subscription(frozenset({"t"}), None),
                  session_timeout_ms=session_timeout_ms, max_poll_interval_ms=kwargs.pop("max_poll_interval_ms", 300_000),
                  auto_commit=True, auto_offset_reset="latest", is_static=kwargs.pop("is_static", False),
                  strategies=("range",), connection=member_id, **kwargs)


class Kit:
    def __init__(self, config=CONFIG, start: bool = True):
        self.config = config
        self.now = 0.0
        self.out = Outbox()
        self.activated: list[float] = []
        self.office = Office(1, ZK_SESSION_MS, self.out, on_active=self.activated.append)
        self.groups = GroupTable()
        self.zk = FakeZooKeeper()
        self.prove_office = True
        self.timers: dict = {}
        self.sent: dict = defaultdict(list)  # conn -> [(message, correlation id)]
        self.closed: set = set()
        self.pending: dict = {}  # token -> operation not answered yet
        self.requests = None  # the Requests part, once a test builds one: members answer through it
        self.membership = None
        self.routes: dict[str, Callable] = {"office": lambda key, now: self.office.renewal_due(now),
                                            "second-proof": lambda key, now: self.office.prove(now)}
        self.metrics = Recorded()
        self.log_ends = KnownLogEnds()
        # What the parts above the one under test would be told: members
        # dropped (member id, why) and groups emptied (name).
        self.dropped: list = []
        self.emptied: list = []
        self.groups.partitions["t"] = 4
        if start:
            self.office.loaded(proven_at=0.0)
            self.office.start(0.0)
            self.settle()

    def settle(self, answers: Optional[int] = None) -> list:
        """Carry out what the parts decided; ZooKeeper answers every operation
        (the office's round trips only while ``prove_office``), or only the
        oldest ``answers`` of them. Returns the actions."""
        done = []
        while True:
            todo = self.out.take()
            if not todo:
                answerable = [t for t, op in self.pending.items()
                              if self.prove_office or not isinstance(op, actions.ProveOffice)]
                if not answerable or answers == 0:
                    return done
                answers = None if answers is None else answers - 1
                token = min(answerable)
                result, error = self.zk.answer(self.pending.pop(token))
                self.out.ended(token)(result, error, self.now)
                continue
            done.extend(todo)
            for action in todo:
                if not carry_out(action, self.sent, self.closed, self.timers):
                    self.pending[action.token] = action

    def advance(self, seconds: float, serve: tuple = ()) -> None:
        """Move the clock, firing timers in order; members in ``serve`` answer what they are asked."""
        end = self.now + seconds
        while True:
            self.settle()
            for conn in serve:
                self.obey(conn)
            due = sorted((at, repr(key), key) for key, at in self.timers.items() if at <= end)
            if not due:
                break
            at, _, key = due[0]
            self.now = max(self.now, at)
            del self.timers[key]
            self.office.check(self.now)
            route = self.routes.get(key[0])
            if route is not None:
                route(key, self.now)
        self.now = end
        self.settle()

    def requests_to(self, conn, kind) -> list:
        return [(m, c) for m, c in self.sent[conn] if isinstance(m, kind)]

    def obey(self, conn) -> None:
        """``conn``'s member answers what it is asked as a healthy member would
        (a Stop reports offset 10 per partition), through ``self.requests``."""
        member_ = self.requests.member_on(conn) if self.requests is not None else None
        while member_ is not None and member_.outstanding is not None:
            request = member_.outstanding.message
            if isinstance(request, wire.PingRequest):
                reply = wire.PingResponse(last_poll_ms_ago=0)
            elif isinstance(request, wire.StopRequest):
                reply = wire.StopResponse(offsets=wire.offset_entries(
                    {(tp.topic, tp.partition): 10 for tp in request.partitions}))
            else:
                reply = wire.RestartFetcherResponse()
            self.requests.answered(member_, reply, member_.outstanding.correlation_id, self.now)
            self.settle()

    # -- the parts, each built on those below it ------------------------------------------------

    def drop(self, member_: Member, why: str, now: float) -> None:
        """A part drops a member: recorded, and (once built) membership drops it, as the core wires it."""
        self.dropped.append((member_.member_id, why))
        if self.membership is not None:
            self.membership.remove(member_, why, now)

    def build_requests(self) -> Requests:
        self.requests = Requests(self.office, self.out, self.metrics, expire=self.drop)
        self.routes["answers"] = lambda key, now: self.requests.deadlines_due(now)
        return self.requests

    def build_offsets(self) -> Offsets:
        self.offsets = Offsets(self.config, self.office, self.out, self.groups, self.log_ends, self.metrics,
                               remove=self.drop)
        self.routes["flush"] = lambda key, now: self.offsets.flush_due(now)
        return self.offsets

    def build_pings(self) -> Pings:
        self.pings = Pings(self.office, self.out, self.groups, self.build_requests(), self.build_offsets(),
                           self.metrics, remove=self.drop)
        self.routes["ping"] = lambda key, now: self.pings.due(now)
        return self.pings

    def build_rounds(self) -> Rounds:
        self.build_pings()
        self.rounds = Rounds(self.config, self.office, self.out, self.groups, self.requests, self.offsets,
                             self.metrics, remove=self.drop,
                             empty=lambda group, now: self.emptied.append(group.name))
        self.routes["rebalance"] = lambda key, now: self.rounds.due(key[1], now)
        return self.rounds

    def build_membership(self) -> Membership:
        self.build_rounds()
        self.membership = Membership(self.config, self.office, self.out, self.groups, self.requests, self.pings,
                                     self.offsets, self.rounds, self.metrics)
        self.routes["static"] = lambda key, now: self.membership.static_overdue(key[1], now)
        return self.membership

    def join(self, *member_ids: str, group: str = "g") -> list[Member]:
        """Members of ``group`` in it and connected, as membership admits them (without a round)."""
        joined = []
        for member_id in member_ids:
            m = member(member_id, group)
            self.groups.named(group).add_member(m)
            self.requests.connected(m)
            joined.append(m)
        return joined
