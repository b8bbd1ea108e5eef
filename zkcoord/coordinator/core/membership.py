"""Membership: who registers, who is admitted, who leaves, who is dropped.

Owns the registrations waiting for their handed-over offsets to be written,
and the static members away (disconnected, kept until their session
timeout in case they come back, seed 004). Of a group it adds and removes
members and sets the fences of those dropped: a member dropped without
acknowledging that it stopped leaves what it may run fenced until its lease
has surely ended, on every path (lease.py). Every change of membership asks
for a round (rounds.py).

A member that lost its coordinator (or only its connection) may have kept
running what it held, under its lease, and says so when it registers
(RegisterConsumerRequest version 6). It keeps what it alone may be running as
far as this coordinator knows (``_kept``): then it runs them from its
admission on, as if a Start had given them, with no Stop or Start. Anything
else it holds is refused before it is admitted: it stops those and registers
again, and they stay fenced meanwhile.
"""

from __future__ import annotations

import logging
from functools import partial
from typing import Hashable

from zkcoord import limits, wire
from zkcoord.coordinator.actions import CancelTimer, Close, ReadOwners, Send, SetTimer
from zkcoord.coordinator.assignors import NoCommonStrategyError, choose_strategy
from zkcoord.coordinator.config import CoordinatorConfig
from zkcoord.coordinator.core.describe import check_client
from zkcoord.coordinator.core.groups import GroupTable
from zkcoord.coordinator.core.observed import EXPIRED_STATIC, CoreMetrics
from zkcoord.coordinator.core.office import Office
from zkcoord.coordinator.core.offsets import Offsets
from zkcoord.coordinator.core.outbox import Outbox
from zkcoord.coordinator.core.pings import Pings
from zkcoord.coordinator.core.requests import Requests
from zkcoord.coordinator.core.rounds import Rounds
from zkcoord.coordinator.group import Group, Member
from zkcoord.coordinator.lease import incarnation_proof, lease_end
from zkcoord.coordinator.planner import Subscription
from zkcoord.patterns import PatternError, check_pattern
from zkcoord.records import TopicPartition
from zkcoord.security.principal import ANONYMOUS, Principal
from zkcoord.zk import layout

log = logging.getLogger(__name__)


def static_timer(conn: Hashable) -> tuple:
    return ("static", conn)


class Membership:
    def __init__(self, config: CoordinatorConfig, office: Office, out: Outbox, groups: GroupTable,
                 requests: Requests, pings: Pings, offsets: Offsets, rounds: Rounds, metrics: CoreMetrics):
        self.config = config
        self.office = office
        self.out = out
        self.groups = groups
        self.requests = requests
        self.pings = pings
        self.offsets = offsets
        self.rounds = rounds
        self.metrics = metrics
        self.registering: dict[Hashable, Member] = {}  # waiting for their handover to be written
        self._away: dict[Hashable, Member] = {}  # static members gone, by their old connection

    def registering_in(self, name: str) -> bool:
        return any(m.group == name for m in self.registering.values())

    # -- registration -------------------------------------------------------------------------------

    def validate(self, request: wire.RegisterConsumerRequest, principal: Principal = ANONYMOUS) -> None:
        """Registration checks; raises the wire error to send back."""
        try:
            layout.group_path(request.group_id)  # validates the id, and refuses "coordinator"
        except layout.LayoutError as exc:
            raise wire.InvalidRegistration(str(exc)) from None
        if not request.consumer_id or "/" in request.consumer_id:
            raise wire.InvalidRegistration(f"invalid consumer id {request.consumer_id!r}")
        if not request.topics and not request.pattern:
            raise wire.InvalidRegistration("the subscription names no topic and no pattern")
        for topic in request.topics:
            try:
                layout.validate_topic_name(topic)
            except layout.LayoutError as exc:
                raise wire.InvalidRegistration(str(exc)) from None
        if request.pattern:
            try:
                check_pattern(request.pattern)
            except PatternError as exc:
                raise wire.InvalidRegistration(str(exc)) from None
        check_client(request)
        if request.auto_offset_reset not in wire.OFFSET_RESETS:
            raise wire.InvalidRegistration(
                f"auto_offset_reset must be one of {wire.OFFSET_RESETS}, not {request.auto_offset_reset!r}"
            )
        if request.session_timeout_ms < self.config.min_session_timeout_ms:
            raise wire.InvalidSessionTimeout(
                f"session timeout {request.session_timeout_ms} ms is below the minimum "
                f"{self.config.min_session_timeout_ms} ms"
            )
        if request.session_timeout_ms > self.config.max_session_timeout_ms:
            raise wire.InvalidSessionTimeout(
                f"session timeout {request.session_timeout_ms} ms exceeds the maximum "
                f"{self.config.max_session_timeout_ms} ms"
            )
        group = self.groups.get(request.group_id)
        others = list(group.strategy_lists) if group else []  # whether one is common: each list once will do
        try:
            choose_strategy(others + [tuple(request.assignment_strategies)])
        except NoCommonStrategyError as exc:
            raise wire.NoCommonStrategy(str(exc)) from None
        if group is not None and group.forgetting:
            raise wire.CoordinatorNotAvailable(f"group {request.group_id} is being forgotten (it was empty past "
                                               "its retention); try again in a moment")
        existing = group.members.get(request.consumer_id) if group else None
        if existing is not None and existing.is_static and request.is_static and existing.principal != principal:
            raise wire.StaticMemberOwnedByOtherPrincipal(
                f"static consumer id {request.consumer_id} of group {request.group_id} is held by "
                f"{existing.principal}; {principal} may not take it over")
        if existing is not None and not (existing.is_static and request.is_static) \
                and not self._same_incarnation(existing, request, principal):
            # A static member may take its own place back (its old connection
            # is closed and fenced); a dynamic id is unique while it lives,
            # but for the process that holds it, back on a new connection
            # (the old one may be open on our side only).
            raise wire.ConsumerIdInUse(
                f"consumer id {request.consumer_id} is already registered in group {request.group_id}"
            )
        if not self.office.active:
            raise wire.CoordinatorNotAvailable("the coordinator is suspended: ZooKeeper is unreachable or its "
                                               "office is not proven yet")

    @staticmethod
    def _same_incarnation(existing: Member, request: wire.RegisterConsumerRequest, principal: Principal) -> bool:
        """Is ``request`` the dynamic member ``existing`` back, on a new connection?"""
        return (not existing.is_static and not request.is_static and existing.principal == principal
                and bool(existing.proof) and existing.proof == incarnation_proof(request.incarnation, principal))

    def register(self, conn: Hashable, request: wire.RegisterConsumerRequest, correlation_id: int,
                 now: float, host: str, client_id: str, principal: Principal) -> None:
        """See CoordinatorCore.register."""
        try:
            self.validate(request, principal)
        except wire.WireError as exc:
            self._refuse(conn, request, correlation_id, exc)
            return
        member = Member(
            member_id=request.consumer_id,
            group=request.group_id,
            subscription=Subscription(frozenset(request.topics), request.pattern or None),
            session_timeout_ms=request.session_timeout_ms,
            max_poll_interval_ms=request.max_poll_interval_ms,
            auto_commit=request.auto_commit,
            auto_offset_reset=request.auto_offset_reset,
            is_static=request.is_static,
            strategies=tuple(request.assignment_strategies),
            connection=conn,
            # Its lease runs from before it sent this registration: earlier than now.
            last_sent=now,
            registered_at=now,
            host=host,
            client_id=request.client_id or client_id,
            client_kind=request.client_kind,
            principal=principal,
            proof=incarnation_proof(request.incarnation, principal),
        )
        group = self.groups.named(request.group_id)
        try:
            handed_over = self._accept_handover(group, member, request.offsets, request.held) if request.offsets else 0
        except wire.RebalanceInProgress as exc:
            self._refuse(conn, request, correlation_id, exc)
            return
        if handed_over:
            self.registering[conn] = member
            self.offsets.flush(group.name, now, [partial(self._handover_written, member, request, correlation_id)])
        else:
            self._admit(group, member, request, correlation_id, now)

    def _accept_handover(self, group: Group, member: Member, entries, held=()) -> int:
        """A returning member's final offsets for the partitions it ran last:
        it was fenced on them when dropped (after a failover: all it ran or
        was given in the last persisted generation), and nobody has been sent
        a Start of them since, however long ago its fence lapsed. It stopped
        them before registering, so they are exact: whoever runs them next
        redelivers nothing (never taken below the committed offset). Offsets
        of anything else are stale; ignored, and so are those of partitions
        it says it still runs (``held``): a final offset is final only for
        what it stopped.

        Raises RebalanceInProgress, taking nothing, if the round under way
        will start some of them: its Starts could carry the committed offsets
        from before the handover is written, and if it fails before starting
        them the handover would be lost. The member keeps it and registers
        again once the round has ended."""
        # Only the incarnation that ran them knows what it consumed: offsets
        # from anyone else under the id are ignored, a static registration's
        # among them (a new process of a static id has none to hand over, and
        # a static registration may name a dropped dynamic member's id).
        proven = group.fences.proves(member.member_id, member.proof)
        owned = group.fences.last_ran_by(member.member_id) if proven else frozenset()
        previous = group.members.get(member.member_id)
        if previous is not None:  # a static member or this incarnation back (validated): what it ran
            owned |= previous.may_run
        owned -= {(tp.topic, tp.partition) for tp in held}
        contested = owned & self.rounds.planned_starts(group.name) & set(wire.offsets_of(entries))
        if contested:
            raise wire.RebalanceInProgress(
                f"a rebalance under way will start {len(contested)} partition(s) whose offsets you hand "
                "over; register again once it has ended")
        taken = self.offsets.accept(group, member, wire.offsets_of(entries), owned=owned)
        log.info("%s member %s hands over offsets of %d partition(s)", group.describe(), member.member_id, taken)
        return taken

    def _refuse(self, conn, request, correlation_id: int, exc: wire.WireError) -> None:
        # While suspended every member that tries is refused, thousands a
        # second; the suspension itself is logged once, as a warning.
        level = logging.DEBUG if isinstance(exc, wire.CoordinatorNotAvailable) else logging.INFO
        limits.abuse_log.log(limits.REFUSED_REGISTRATION, level, "refused consumer %s of group %s: %s",
                             request.consumer_id, request.group_id, exc)
        self.out.emit(Send(conn, wire.RegisterConsumerResponse(error_code=exc.code, error_message=str(exc),
                                                               coordinator_epoch=self.office.epoch,
                                                               refused=getattr(exc, "refused", ())), correlation_id))
        self.out.emit(Close(conn))

    def _handover_written(self, member: Member, request, correlation_id: int, error, now: float) -> None:
        if self.registering.pop(member.connection, None) is not member:
            return  # its connection closed meanwhile
        group = self.groups.named(member.group)
        if error is not None:  # those offsets stay pending: records are redelivered, never lost
            log.warning("%s handover of member %s not written yet: %s", group.describe(), member.member_id, error)
        try:
            self.validate(request, member.principal)  # things may have changed while the handover was written
        except wire.WireError as exc:
            self._refuse(member.connection, request, correlation_id, exc)
            return
        self._admit(group, member, request, correlation_id, now)

    def _kept(self, group: Group, member: Member, request: wire.RegisterConsumerRequest,
              now: float) -> frozenset:
        """What of ``request.held`` the member keeps running from its
        admission on; raises the refusal to send if it may not keep it all.

        It keeps a partition only if it alone may be running it, as far as
        this coordinator knows: still registered here under this incarnation
        (its old connection open on our side only) and running it or being
        started on it; or fenced on it alone, its lease there still running,
        nobody started on it since, with the proof of the incarnation fenced
        (lease.Fences.keepable: after a takeover, what the persisted state
        gave it; after its connection closed here, what it ran). And only if
        the round under way, if any, will not start it elsewhere, and its
        claim is of this group's lineage: a generation this coordinator has
        reached, an epoch not above its own. A static id keeps nothing (it may
        be taken over by another process while the old one runs). Accepting
        renews the member's lease on what it keeps, as a request does: only
        while in office. Whatever it may not keep stays fenced (or counted
        as running, still registered) until it registers again without it."""
        held = frozenset((tp.topic, tp.partition) for tp in request.held)
        if not held:
            return frozenset()
        if request.held_epoch > self.office.epoch:
            raise wire.NotCoordinator(f"the partitions held were got under coordinator epoch {request.held_epoch}, "
                                      f"newer than this one's ({self.office.epoch})")
        self.office.check(now)
        if not self.office.active:
            raise wire.CoordinatorNotAvailable("the coordinator is suspended: its office is not proven")
        previous = group.members.get(member.member_id)
        if member.is_static or request.held_generation > group.generation:
            kept = frozenset()
        elif previous is not None:  # this incarnation (validated), still registered on its old connection
            kept = held & previous.may_run
        else:
            settled = self._recorded_as_own(group, member.member_id, group.fences.shared(member.member_id, held))
            kept = group.fences.keepable(member.member_id, member.proof, held, now, settled)
        kept -= self.rounds.planned_starts(group.name)
        refused = held - kept
        if refused:
            raise wire.HeldPartitionsRefused(
                f"{len(refused)} of the {len(held)} partition(s) held may not be kept (another member may be "
                f"given them, the lease under which they were held has ended, or nobody can tell); stop them "
                f"and register again", refused=tuple(TopicPartition(t, p) for t, p in sorted(refused)))
        return kept

    @staticmethod
    def _recorded_as_own(group: Group, member_id: str, shared: frozenset) -> frozenset:
        """Of ``shared`` (partitions ``member_id`` is fenced on with others),
        those ZooKeeper records as its own in a round that ended: the last
        persisted generation gives them to it and their owner nodes name it.
        Owners are written only once a round has ended, every Stop and Start
        of it answered, so the other holders, named in that generation only
        for what they ran as it began, have stopped them. Raises
        RebalanceInProgress while the owners are being read (the member
        keeps what it holds and registers again in a moment)."""
        record = group.resumed
        if not shared or record is None or record.generation != group.generation:
            return frozenset()
        if group.recorded_owners is None:
            raise wire.RebalanceInProgress("the owners recorded in ZooKeeper are being read; register again "
                                           "in a moment")
        given = frozenset(record.assignment.get(member_id, ()))
        return frozenset(tp for tp in shared if tp in given and group.recorded_owners.get(tp) == member_id)

    def read_owners(self, group: Group) -> None:
        """A group taken over: read the owners recorded, which members back
        keeping partitions are checked against (and the first round starts from)."""
        self.out.ask(partial(ReadOwners, group=group.name), partial(self._owners_read, group))

    @staticmethod
    def _owners_read(group: Group, owners, error, now: float) -> None:
        if error is not None:
            group.resumed = None  # nothing to check against: members keep only what they alone may run
            log.warning("%s the owners recorded could not be read: %s", group.describe(), error)
        elif group.recorded_owners is None and group.resumed is not None \
                and group.generation == group.resumed.generation:  # else a round of ours read or wrote newer
            group.recorded_owners = owners

    def _admit(self, group: Group, member: Member, request: wire.RegisterConsumerRequest, correlation_id: int,
               now: float) -> None:
        try:
            kept = self._kept(group, member, request, now)
        except wire.WireError as exc:
            self._refuse(member.connection, request, correlation_id, exc)
            return
        previous = group.members.get(member.member_id)
        if previous is not None and previous.is_static:  # a static member back; its old connection may be open
            member.assigned = previous.assigned
            self._fence(group, previous, now)  # which may be another process, still running
            self._forget(previous, "its static id registered again", now)
            log.info("%s static member %s is back", group.describe(), member.member_id)
        elif previous is not None:  # the same incarnation (validated), its old connection open on our side only
            member.assigned = previous.assigned
            # It stopped everything before it registered, but what it keeps (below).
            previous.running = previous.starting = frozenset()
            self._forget(previous, "it registered again on a new connection", now)
            log.info("%s member %s is back on a new connection", group.describe(), member.member_id)
        if kept:
            # It runs them from now on, under a lease renewed by this answer,
            # as if a Start had given them: the round keeps them where they are.
            member.running = kept
            member.assigned = member.assigned | kept
            group.fences.kept_by(member.member_id, kept)  # a stale claim by another holder finds no fence
            log.info("%s member %s keeps the %d partition(s) it held", group.describe(), member.member_id, len(kept))
        if not member.is_static and group.fences.proves(member.member_id, member.proof):
            # The process fenced under this id, which stops everything before
            # it registers but what it keeps (counted as running above): what
            # it held is free. Anyone else registering under the id (ids are
            # no secret), or a static id's new process, waits for the fences
            # to run out.
            group.fences.release(member.member_id)
        group.add_member(member)
        self.requests.connected(member)
        self.pings.add(member, now)
        self.out.emit(Send(member.connection, wire.RegisterConsumerResponse(coordinator_epoch=self.office.epoch),
                           correlation_id))
        log.info("%s member %s registered", group.describe(), member.member_id)
        self.rounds.request(group, f"member {member.member_id} joined", now, joined=True)

    # -- what members say, and their connections ----------------------------------------------------

    def received(self, conn: Hashable, message: wire.Message, correlation_id: int, now: float) -> None:
        """See CoordinatorCore.received."""
        member = self.requests.member_on(conn)
        if member is None or self.office.deposed:
            return
        if isinstance(message, wire.LeaveGroupRequest):
            self._leave(member, message, correlation_id, now)
        elif isinstance(message, wire.ErrorResponse):
            log.warning("member %s refused a request: %s", member.member_id, message.message)
            self._disconnected(member, f"it refused a request: {message.message}", now)
        elif not self.requests.answered(member, message, correlation_id, now):
            # Rate-limited: a member (or anyone who registered) could send thousands a second.
            limits.abuse_log.log(limits.UNSOLICITED, logging.WARNING, "member %s sent an unsolicited %s",
                                 member.member_id, type(message).__name__)

    def connection_closed(self, conn: Hashable, now: float) -> None:
        if self.registering.pop(conn, None) is None:
            member = self.requests.member_on(conn)
            if member is not None and not self.office.deposed:
                self._disconnected(member, "its connection closed", now)

    def close_all(self) -> None:
        """Close every member's connection (stepping down)."""
        for conn in list(self.requests.members) + list(self.registering):
            self.out.emit(Close(conn))
        self.requests.members.clear()
        self.registering.clear()

    def _leave(self, member: Member, message: wire.LeaveGroupRequest, correlation_id: int, now: float) -> None:
        """A clean leave: take the final offsets (the member has stopped
        everything), make them durable, and only then answer and let it go."""
        group = self.groups.get(member.group)
        if group is None or group.members.get(member.member_id) is not member or not self.office.active:
            self.out.emit(Send(member.connection, wire.LeaveGroupResponse(
                error_code=wire.ErrorCode.COORDINATOR_NOT_AVAILABLE), correlation_id))
            self._disconnected(member, "it left", now)
            return
        self.offsets.accept(group, member, wire.offsets_of(message.offsets), owned=member.may_run)
        member.running = member.starting = frozenset()  # it stopped everything before it asked
        member.leaving = True

        def written(error, now: float) -> None:
            if error is not None:
                log.warning("%s offsets of leaving member %s not written: %s",
                            group.describe(), member.member_id, error)
            code = wire.ErrorCode.NONE if error is None else wire.code_for(error)
            self.out.emit(Send(member.connection, wire.LeaveGroupResponse(error_code=code), correlation_id))
            self._disconnected(member, "it left", now)

        self.offsets.flush(group.name, now, [written])

    def _disconnected(self, member: Member, why: str, now: float) -> None:
        """The member's connection is gone (or going). A dynamic member leaves
        at once; a static one keeps its partitions until its session timeout,
        in case it comes back (seed 004's static membership). Either way the
        member may not have seen the connection close (a reset on our side
        only): what it ran stays fenced until its lease has ended."""
        group = self.groups.get(member.group)
        if not member.is_static or group is None or group.members.get(member.member_id) is not member:
            self.remove(member, why, now)
            return
        if not member.connected:
            return
        self._fence(group, member, now)
        member.running = member.starting = frozenset()
        self._forget(member, why, now)
        self._away[member.connection] = member
        self.out.emit(SetTimer(static_timer(member.connection), now + member.session_timeout))
        log.info("%s static member %s disconnected (%s); its partitions wait %d ms for it",
                 group.describe(), member.member_id, why, member.session_timeout_ms)

    def static_overdue(self, conn: Hashable, now: float) -> None:
        """The static timer of a member away on ``conn``: it did not come back."""
        member = self._away.pop(conn, None)
        if member is None:
            return
        group = self.groups.get(member.group)
        if group is not None and group.members.get(member.member_id) is member:
            self.metrics.member_expired(EXPIRED_STATIC)
            self.remove(member, "it did not come back within its session timeout", now)

    # -- dropping members ---------------------------------------------------------------------------

    def remove(self, member: Member, why: str, now: float) -> None:
        """Drop a member and rebalance its group; what it may still be
        fetching stays fenced until its lease has ended (lease.py)."""
        group = self.groups.get(member.group)
        current = group is not None and group.members.get(member.member_id) is member
        if current:
            self._fence(group, member, now)
            group.remove_member(member.member_id)
            log.info("%s member %s removed: %s", group.describe(), member.member_id, why)
            # Before its requests fail: the round they belong to then knows
            # that another one follows.
            self.rounds.request(group, f"member {member.member_id} left: {why}", now)
        self._forget(member, why, now)

    def _fence(self, group: Group, member: Member, now: float) -> None:
        """Hold what ``member`` may still fetch until its lease has surely ended."""
        if member.may_run:
            until = lease_end(member.last_sent, member.session_timeout_ms, self.config.lease_margin_ms)
            group.fences.fence(member.member_id, member.may_run, until, member.proof)
            log.info("%s member %s may run %d partition(s) for %.1fs more; fenced",
                     group.describe(), member.member_id, len(member.may_run), until - now)

    def _forget(self, member: Member, why: str, now: float) -> None:
        """Close the member's connection; its requests fail."""
        if self._away.pop(member.connection, None) is not None:
            self.out.emit(CancelTimer(static_timer(member.connection)))
        if not member.connected:
            return
        self.requests.hung_up(member)
        self.pings.remove(member)
        self.out.emit(Close(member.connection))
        self.requests.fail_all(member, why, now)
