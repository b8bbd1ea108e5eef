"""The group APIs of the Kafka protocol, bridged into the zkcoord coordinator.

A stock Kafka client that joins a group through this broker becomes an
ordinary member of the zkcoord group: the bridge registers it with the
group's coordinator as a thin consumer would (a :class:`GroupMembership`
per client, under the client's member id), so the coordinator assigns it
with everyone else and pushes Stop and Start to it. What the coordinator
pushes, :class:`~zkcoord.broker.groups.classic.ClassicMember` (or KIP-848's
:class:`~zkcoord.broker.groups.kip848.ConsumerMember`) turns into the
answers the client's requests get; a Stop is answered only once the client
has let the partitions go.

This module owns the bridge's state and its I/O: the members and their
registrations, their drop, the fetch fences (fences.py) and the expiry of
silent clients. The requests are served by its parts, one per family of
APIs: ``classic_apis`` (JoinGroup, SyncGroup, Heartbeat, LeaveGroup),
``kip848_apis`` (ConsumerGroupHeartbeat), ``offsets`` (OffsetCommit,
OffsetFetch, OffsetDelete), ``directory`` (FindCoordinator, ListGroups,
DescribeGroups); what they answer, where it needs no I/O, is decided in
``answers``.

Runs on gevent: each request is served in its connection's greenlet, and a
JoinGroup waits there for its member's registration as Kafka's does.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Optional

import gevent
import gevent.event

from zkcoord import wire
from zkcoord.broker.groups import classic
from zkcoord.broker.groups.answers import (
    COORDINATOR_NOT_AVAILABLE, FENCED_INSTANCE_ID, INVALID_REQUEST, MAX_PENDING_IDS, NONE, StallWatch, registration_id,
    registration_refusal,
)
from zkcoord.broker.groups.classic import ClassicMember
from zkcoord.broker.groups.classic_apis import ClassicApis
from zkcoord.broker.groups.directory import GroupDirectory
from zkcoord.broker.groups.fences import BridgeFences, tie_of
from zkcoord.broker.groups.kip848_apis import ConsumerGroupApis
from zkcoord.broker.groups.offsets import OffsetApis
from zkcoord.errors import ConfigError, ZkcoordError
from zkcoord.limits import REFUSED_AUTHORIZATION, abuse_log
from zkcoord.member.config import MemberConfig
from zkcoord.member.membership import GroupMembership
from zkcoord.security import acl
from zkcoord.security.principal import Principal
from zkcoord.zk.nodes import read_servers

log = logging.getLogger(__name__)

# How long a new member's JoinGroup waits for the coordinator to register it.
REGISTER_WAIT_S = 15.0
EXPIRY_CHECK_S = 0.25


@dataclass
class _Bridged:
    """One client's member, its registration with the coordinator, and the
    event its waiters (JoinGroup, the Stop being answered) wake on."""

    member: ClassicMember
    group: str
    membership: Optional[GroupMembership] = None
    # Dropped after the client let everything go (its LeaveGroup, or nothing held).
    left: bool = False
    changed: gevent.event.Event = field(default_factory=gevent.event.Event)
    started: gevent.event.Event = field(default_factory=gevent.event.Event)

    def notify(self) -> None:
        self.changed.set()
        self.changed = gevent.event.Event()


class _MemberListener:
    """What the coordinator pushes to a bridged member, carried to its client."""

    def __init__(self, bridged: _Bridged, bridge: "GroupBridge"):
        self.bridged = bridged
        self.bridge = bridge
        self.clock = bridge.clock

    def on_start(self, partitions: dict) -> None:
        self.bridged.member.start(partitions, self.clock())
        self.bridged.started.set()
        self.bridged.notify()

    def on_stop(self, partitions: frozenset) -> dict:
        """Answered once the client has let ``partitions`` go (or had nothing
        left when it went). A client that keeps them past its rebalance
        timeout, or falls silent for its session timeout, is dropped without
        an answer (member.deadline: Kafka's rule): the coordinator sees the
        registration's connection close and fences the partitions until its
        lease has ended, as after a crash, while the client's next heartbeat
        is refused."""
        member = self.bridged.member
        member.stop(partitions, self.clock())
        self.bridged.notify()
        while partitions & member.revoking and not member.gone:
            waiting_on = self.bridged.changed
            waiting_on.wait(timeout=max(0.05, member.deadline() - self.clock()))
            now = self.clock()
            if not self.bridge.judging_silence(now):
                continue
            # Dropped while it still holds what it held (_drop fences that), not after taking it as gone.
            if member.expired(now):
                self.bridge._drop(self.bridged, f"it did not let {sorted(partitions & member.revoking)} go in time")
        if member.gone and not self.bridged.left:
            # Abandoned: the registration's connection is closed already, so
            # this answer never reaches the coordinator, which fences instead.
            return {}
        return {tp: member.committed[tp] for tp in partitions if tp in member.committed}

    def offsets(self) -> dict:
        member = self.bridged.member
        return {tp: o for tp, o in member.committed.items() if tp in member.assignment or tp in member.revoking}

    def last_poll_ms_ago(self) -> int:
        """Since the client was last heard: its requests are its polls (a
        client that stops polling stops heartbeating within its rebalance
        timeout, or leaves; the bridge judges that itself, sooner)."""
        return max(0, int((self.clock() - self.bridged.member.last_heard) * 1000))


class GroupBridge(ClassicApis, ConsumerGroupApis, OffsetApis, GroupDirectory):
    """The group APIs of one broker. ``zk`` is the broker's (gevent) client;
    ``brokers`` returns the live brokers {id: (host, port)}."""

    def __init__(self, broker_id: int, zk, brokers, topic_ids, *, heartbeat_interval_ms: int,
                 session_timeout_ms: int, fence_idle_ms: int, clock=time.monotonic, log_end=None, tls_context=None,
                 authorize=None, credential: Optional[tuple[str, str]] = None, password_without_tls: bool = False,
                 publish_fences=None, lift_fences_elsewhere=None, fenced_anywhere=None):
        """``topic_ids`` returns {topic: Kafka Uuid string} of the topics that
        have one. ``heartbeat_interval_ms`` and ``session_timeout_ms`` are
        those of KIP-848's members, which the broker sets, not the client.
        ``fence_idle_ms``: a gone member's fetch fence lapses once no broker
        has refused its client a fetch for this long (fence_fetched).
        ``log_end(tp)``: the partition's log end offset if this broker leads
        it, else None (the coordinator checks those against their leader).
        ``tls_context``: the client SSLContext its members reach the coordinators
        with (None: plaintext), built once by the broker, as the server's own
        clients build theirs, and shared by every member.
        ``authorize(principal, operation, resource, host)`` decides what a
        client may do (None: everything, the authorizer is off).
        ``credential`` (user, password): the broker's own with the
        coordinators, a super user's, with which it registers each member on
        behalf of the principal its client authenticated as (None: members
        register with no credential); ``password_without_tls``: it may send
        that credential without TLS (SecurityConfig.bridge_password_without_tls).
        ``publish_fences(fences)``: tells every broker the fetch fences this
        bridge's members need now, {(group, member id): FetchFence} (None:
        kept, told to nobody); ``lift_fences_elsewhere(group, tie)``: the
        client of ``tie`` showed here that it let go of what it held in
        ``group``, which lifts the fences other brokers keep for it there;
        ``fenced_anywhere(tie)``: what every broker's fences refuse that
        client now."""
        self.authorize = authorize
        self._credential = credential
        self._password_without_tls = password_without_tls
        self.broker_id = broker_id
        self.zk = zk
        self._brokers = brokers
        self._topic_ids = topic_ids
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.session_timeout_ms = session_timeout_ms
        self.clock = clock
        self._log_end = log_end
        self._tls_context = tls_context
        self._groups: dict[str, dict[str, _Bridged]] = {}
        # Member ids handed out with MEMBER_ID_REQUIRED, oldest first: a
        # client joins with its id at once, so only the latest few are kept.
        self._pending_ids: OrderedDict[tuple[str, str], None] = OrderedDict()
        # Member ids of static members whose instance joined again (as many).
        self._fenced: OrderedDict[tuple[str, str], None] = OrderedDict()
        self._closed = False
        self._fences = BridgeFences(clock)
        self._fence_idle_s = fence_idle_ms / 1000.0
        self._publish_fences = publish_fences or (lambda fences: None)
        self._lift_fences_elsewhere = lift_fences_elsewhere or (lambda group, tie: None)
        self._fenced_anywhere = fenced_anywhere or (lambda tie: frozenset())
        self._stall_watch = StallWatch(clock())
        self._expiry = gevent.spawn(self._expire_loop)

    def close(self) -> None:
        """The broker is stopping: every registration ends (abandoned unless
        its client holds nothing: the clients go on fetching from other brokers)."""
        self._closed = True
        self._expiry.kill(block=False)
        for members in list(self._groups.values()):
            for bridged in list(members.values()):
                self._drop(bridged, "the broker is stopping")

    def _find_own(self, group: str, member_id: str, principal: Principal) -> Optional[_Bridged]:
        """The bridged member ``member_id`` if ``principal`` is the one it joined as:
        another principal's request about it is about an unknown member."""
        bridged = self._find(group, member_id)
        return bridged if bridged is not None and bridged.member.principal == principal else None

    def _allowed(self, principal: Principal, operation: str, resource: acl.Resource, host: str) -> bool:
        if self.authorize is None or self.authorize(principal, operation, resource, host):
            return True
        abuse_log.log(REFUSED_AUTHORIZATION, logging.INFO, "%s: %s", host, acl.refusal(principal, operation, resource))
        return False

    def _register(self, bridged: _Bridged, strategies: tuple[str, ...]) -> int:
        """Register the member with its coordinator; the error for its client."""
        member = bridged.member
        if not member.topics and not member.pattern:
            return NONE  # subscribed to nothing yet: a member that gets nothing, without a registration
        try:
            servers = read_servers(self.zk)
        except ZkcoordError as exc:
            log.warning("group %s: cannot read the servers: %s", bridged.group, exc)
            return COORDINATOR_NOT_AVAILABLE
        if not servers:
            return COORDINATOR_NOT_AVAILABLE
        try:
            config = MemberConfig(
                group=bridged.group, topics=member.topics, pattern=member.pattern,
                consumer_id=registration_id(member) if member.instance_id else None,
                session_timeout_ms=member.session_timeout_ms,
                max_poll_interval_ms=max(member.rebalance_timeout_ms, 1), auto_commit=True,
                assignment_strategies=strategies, client_kind=member.client_kind,
                client_id=wire.clipped_client_id(member.client_id), **self._on_behalf_of(member.principal))
        except ConfigError as exc:
            log.info("group %s: member %s cannot register: %s", bridged.group, member.member_id, exc)
            return INVALID_REQUEST
        # A stock client is told to let go when its registration's lease nears
        # its end (docs/DESIGN.md, "What a stock member is promised"); keeping
        # its partitions through the loss of the coordinator is not bridged yet.
        membership = GroupMembership([f"{s.host}:{s.port}" for s in servers.values()], config,
                                     _MemberListener(bridged, self), dynamic_id=registration_id(member),
                                     tls_context=self._tls_context, keep_on_loss=False)
        bridged.membership = membership
        membership.start()
        deadline = self.clock() + min(REGISTER_WAIT_S, member.rebalance_timeout_ms / 1000.0)
        while not membership.registered.wait(timeout=0.05):
            if membership.error is not None or self.clock() >= deadline or self._closed:
                refusal = membership.error
                membership.close(timeout=1)
                bridged.membership = None
                if isinstance(refusal, wire.WireError):
                    log.info("group %s: member %s refused: %s", bridged.group, member.member_id, refusal)
                    return registration_refusal(refusal)
                log.info("group %s: no coordinator registered member %s in time", bridged.group,
                         member.member_id)
                return COORDINATOR_NOT_AVAILABLE
        if self._closed:  # the broker stopped while this registration went on
            membership.close(timeout=1)
            bridged.membership = None
            return COORDINATOR_NOT_AVAILABLE
        return NONE

    @staticmethod
    def _held_by_other(members, instance_id: str, principal: Principal, group: str) -> bool:
        """Whether another principal's live member holds the static ``instance_id``."""
        for other in members.values():
            if other.member.instance_id == instance_id and not other.member.gone \
                    and other.member.principal != principal:
                log.info("group %s: static member %s is held by %s; %s may not take it over", group,
                         instance_id, other.member.principal, principal)
                return True
        return False

    def _on_behalf_of(self, principal: Principal) -> dict:
        if self._credential is None:
            # With the authorizer on and no credential, the server's client
            # certificate is its credential (the configuration demands one or
            # the other): the coordinator must still judge the client's principal.
            return {"on_behalf_of": str(principal)} if self.authorize is not None else {}
        user, password = self._credential
        # Always named, ANONYMOUS too: the broker's own rights are never a client's.
        return {"user": user, "password": password, "on_behalf_of": str(principal),
                "password_without_tls": self._password_without_tls}

    def _replaced(self, old: _Bridged, member_id: str) -> None:
        """A static member's instance joined again under a new member id: the
        old id is fenced, so its process, if alive, cannot take the place back."""
        self._fenced[(old.group, old.member.member_id)] = None
        while len(self._fenced) > MAX_PENDING_IDS:
            self._fenced.popitem(last=False)
        self._drop(old, f"instance {old.member.instance_id} joined again as {member_id}")

    def _unknown(self, group: str, member_id: str) -> int:
        """The error for a request from a member id not in the group."""
        return FENCED_INSTANCE_ID if (group, member_id) in self._fenced else classic.UNKNOWN_MEMBER_ID

    def _taken(self, group: str, member_id: str) -> bool:
        """Whether a live member of ``group`` holds ``member_id``."""
        other = self._find(group, member_id)
        return other is not None and not other.member.gone

    def _add(self, member, group: str) -> _Bridged:
        if self._taken(group, member.member_id):
            # Replacing it would orphan its registration, still answering its
            # coordinator's pings and holding its partitions for nobody.
            raise ZkcoordError(f"member {member.member_id} of group {group} is live; it is not replaced")
        bridged = _Bridged(member, group)
        self._groups.setdefault(group, {})[member.member_id] = bridged
        return bridged

    def _find(self, group: str, member_id: str) -> Optional[_Bridged]:
        return self._groups.get(group, {}).get(member_id)

    def _drop(self, bridged: _Bridged, why: str, left: bool = False) -> None:
        """The member is gone; its requests are refused from now on. If the
        client has let everything go (``left``: its LeaveGroup, or it holds
        nothing), its registration leaves with the offsets it committed;
        otherwise it is abandoned, and the coordinator fences what it may
        still fetch until the registration's lease has ended."""
        member = bridged.member
        if not member.gone:
            bridged.left = left or not member.holding
            # Abandoned, the client may go on fetching what it holds, past the
            # registration's lease: its fetches of them are refused until it
            # shows it let go (fences.py).
            if not self._closed:
                self._fences_changed(self._fences.set(bridged.group, member.member_id, tie_of(member),
                                                      () if bridged.left else member.holding))
        member.leave()
        bridged.notify()
        members = self._groups.get(bridged.group, {})
        if members.get(member.member_id) is bridged:
            del members[member.member_id]
            log.info("member %s of group %s is gone: %s", member.member_id, bridged.group, why)
        if not members:
            self._groups.pop(bridged.group, None)
        membership, bridged.membership = bridged.membership, None
        if membership is not None:
            if bridged.left:
                gevent.spawn(membership.close)
            else:
                membership.abandon()

    # -- fetch fences (fences.py) ----------------------------------------------------------

    def _refence(self, bridged: _Bridged) -> None:
        """A live member is fenced on what its client holds while its
        registration's lease is in doubt (the client is being asked to let
        it all go), and on nothing otherwise."""
        member = bridged.member
        if member.gone or self._closed:
            return  # a gone member's fence was set when it went, and only narrows (joined, granted)
        self._fences_changed(self._fences.set(bridged.group, member.member_id, tie_of(member),
                                              member.holding if member.suspended else ()))

    def _granted(self, bridged: _Bridged, partitions) -> None:
        member = bridged.member
        self._fences_changed(self._fences.granted(bridged.group, member.member_id, tie_of(member), partitions))
        if partitions:
            self._lift_fences_elsewhere(bridged.group, tie_of(member))

    def _fences_changed(self, changed: bool) -> None:
        if changed:
            self._publish_fences(self._fences.fences())

    def _unfence_owner(self, bridged: _Bridged) -> None:
        """A client this bridge serves, its lease not in doubt, refused a
        partition it holds: the fence is another broker's, kept for an old
        member of the same client that let go (its lift was missed, undone
        or written after the client joined here). Ask again: refusing the
        owner would keep the partition from everyone."""
        member = bridged.member
        if not member.suspended and member.holding and self._fenced_anywhere(tie_of(member)) & member.holding:
            self._lift_fences_elsewhere(bridged.group, tie_of(member))

    def fence_lifted(self, key: tuple[str, str]) -> None:
        """Another broker lifted the fence of member ``key`` (group, member
        id), whose client let go there: it is not to be written again."""
        self._fences.lift(*key)

    def fence_fetched(self, key: tuple[str, str]) -> None:
        """A broker refused the client of member ``key`` (group, member id) a fetch lately."""
        self._fences.fetched(*key)

    def _lapse_idle_fences(self) -> None:
        """A gone member whose client no broker has refused a fetch for the
        idle time has stopped (or stays away from every broker): its fence
        lapses. A live member's fence follows its lease (_refence)."""
        changed = False
        for group, member_id in self._fences.idle(self._fence_idle_s):
            if self._find(group, member_id) is None:
                log.info("member %s of group %s: no fetch of its client refused for %.0fs: its fetch fence lapses",
                         member_id, group, self._fence_idle_s)
                changed |= self._fences.lift(group, member_id)
        self._fences_changed(changed)

    def judging_silence(self, now: float) -> bool:
        """May a client's silence be held against it now? Not just after this
        process was stalled (paused, starved): the clients' requests then wait
        unread in their sockets, so silence proves nothing yet."""
        return self._stall_watch.judging(now)

    def _expire_loop(self) -> None:
        while True:
            gevent.sleep(EXPIRY_CHECK_S)
            self._expire(self.clock())

    def _expire(self, now: float) -> None:
        """Drop the members gone silent; watch the others' leases; lift the fences gone idle."""
        self._lapse_idle_fences()
        judging = self.judging_silence(now)
        for members in list(self._groups.values()):
            for bridged in list(members.values()):
                if bridged.member.gone or (judging and bridged.member.expired(now)):
                    self._drop(bridged, "it did not answer in time")  # fenced on what its client held
                elif bridged.membership is not None and bridged.membership.closed is False \
                        and bridged.membership.error is not None:
                    self._drop(bridged, f"its registration failed: {bridged.membership.error}")
                elif bridged.membership is not None:
                    self._watch_lease(bridged, now)
                    self._unfence_owner(bridged)

    def _watch_lease(self, bridged: _Bridged, now: float) -> None:
        """A thin consumer stops when its lease runs out; a stock client needs
        time to be told and to let go. So once the registration's lease is
        within the client's warning of its end (member.lease_warning_s: its
        heartbeat interval and a second to let go), the client is asked to
        give everything up, and its fetches of what it holds are refused;
        once a request renews the lease, it gets its partitions back."""
        membership = bridged.membership
        member = bridged.member
        if not membership.registered.is_set():
            at_risk = bool(member.holding)
        else:
            at_risk = member.lease_at_risk(membership.protocol.lease_deadline - membership.clock())
        if at_risk != member.suspended:
            log.info("member %s of group %s: %s", member.member_id, bridged.group,
                     "its registration's lease is running out: the client is to let everything go" if at_risk
                     else "its registration's lease is renewed")
            member.suspend(at_risk, now)
            bridged.notify()
        self._refence(bridged)
