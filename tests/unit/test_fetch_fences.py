"""Fetch fences (broker/groups/fences.py, and the bridge that sets them): what
the brokers refuse to a stock client's fetches, from when its member may
still be fetching partitions it no longer holds until its client shows that
it let them go. On a manual clock, with the member's registration stood in
for by hand."""

from __future__ import annotations

import threading
from types import SimpleNamespace

import pytest

from zkcoord.broker.groups import classic
from zkcoord.broker.groups.bridge import GroupBridge, _Bridged
from zkcoord.broker.groups.classic import ClassicMember
from zkcoord.broker.groups.fences import BridgeFences, FenceIndex, Tie
from zkcoord.broker.handlers import NOT_LEADER_OR_FOLLOWER, Handlers, MetadataCache
from zkcoord.broker.protocol import JoinGroupRequest, SyncGroupRequest
from zkcoord.records import TopicPartition

A, B, C = TopicPartition("t", 0), TopicPartition("t", 1), TopicPartition("t", 2)
HOST, CLIENT = "10.0.0.7", "app-1"
TIE = Tie(HOST, CLIENT)
IDLE_MS = 60_000  # a gone member's fence lapses after this long with no fetch of its client refused


# -- the pure halves ------------------------------------------------------------------------------


def test_a_fence_refuses_its_partitions_to_its_tie_only():
    fences = BridgeFences()
    assert fences.set("g", "m-1", TIE, {A, B})
    index = FenceIndex(fences.fences().values())
    assert index.refused(HOST, CLIENT) == {A, B}
    # Another process on the host (its own client id), or the same id from elsewhere: served.
    assert index.refused(HOST, "app-2") == frozenset()
    assert index.refused("10.0.0.8", CLIENT) == frozenset()


def test_a_client_that_joins_afresh_lifts_its_former_member_s_fence():
    fences = BridgeFences()
    fences.set("g", "m-1", TIE, {A, B})
    fences.set("other", "m-9", TIE, {C})
    # It lost its member and joined again owning nothing (an eager client
    # revokes everything first; a cooperative one says what it owns).
    assert fences.joined("g", "m-2", TIE, owned=None)
    assert fences.fenced("g", "m-1") == frozenset()
    assert fences.fenced("other", "m-9") == {C}  # another group's member is another matter
    fences.set("g", "m-1", TIE, {A, B})
    fences.joined("g", "m-3", TIE, owned={B})
    assert fences.fenced("g", "m-1") == {B}


def test_a_partition_given_to_a_member_of_the_same_tie_is_not_refused_to_it():
    """Two processes sharing host and client id cannot be told apart: refusing
    the owner would be worse than letting the stale one through."""
    fences = BridgeFences()
    fences.set("g", "m-1", TIE, {A, B})
    assert fences.granted("g", "m-2", TIE, {A})
    assert fences.fenced("g", "m-1") == {B}
    assert not fences.granted("g", "m-2", Tie(HOST, "app-2"), {B})


def test_a_fence_set_to_nothing_is_gone():
    fences = BridgeFences()
    fences.set("g", "m-1", TIE, {A})
    assert fences.set("g", "m-1", TIE, ())
    assert fences.fences() == {}
    assert not fences.set("g", "m-1", TIE, ())


def test_a_fence_is_idle_from_its_last_change_or_the_last_fetch_refused_to_its_client():
    now = [0.0]
    fences = BridgeFences(lambda: now[0])
    fences.set("g", "m-1", TIE, {A, B})
    fences.set("g", "m-2", Tie(HOST, "app-2"), {C})
    now[0] = 30.0
    fences.fetched("g", "m-1")  # a broker refused m-1's client: it still fetches
    fences.narrow("g", "m-2", {C})  # unchanged: no news of its client
    now[0] = 60.0
    assert fences.idle(60.0) == [("g", "m-2")]
    assert fences.lift("g", "m-2") and not fences.lift("g", "m-2")
    fences.fetched("g", "m-2")  # lifted: nothing to keep
    now[0] = 89.0
    assert fences.idle(60.0) == [] and fences.fenced("g", "m-1") == {A, B}
    fences.set("g", "m-1", TIE, {A})  # a change counts as news
    now[0] = 148.0
    assert fences.idle(60.0) == []
    now[0] = 149.0
    assert fences.idle(60.0) == [("g", "m-1")]


def test_a_refused_partition_gets_not_leader_and_no_records():
    from kafka.protocol.consumer import FetchRequest

    from zkcoord.broker.handlers import PartitionInfo

    cache = MetadataCache(topics={"t": {0: PartitionInfo(1, 0, (1,), (1,)), 1: PartitionInfo(1, 0, (1,), (1,))}})
    logs = {("t", 0): _EmptyLog(), ("t", 1): _EmptyLog()}
    handlers = Handlers(1, cache, logs, lambda: 0, 1 << 20)
    Topic = FetchRequest.FetchTopic
    request = FetchRequest(version=4, replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20,
                           isolation_level=0, topics=[Topic(topic="t", partitions=[
                               Topic.FetchPartition(partition=p, fetch_offset=0, partition_max_bytes=1 << 20)
                               for p in (0, 1)])])
    outcome = handlers.fetch(request, refused=frozenset({A}))
    errors = {p.partition_index: p.error_code for t in outcome.response.responses for p in t.partitions}
    assert errors == {0: NOT_LEADER_OR_FOLLOWER, 1: 0}
    assert outcome.has_error


class _EmptyLog:
    log_end_offset = 0
    log_start_offset = 0

    def read(self, offset, limit):
        return None


# -- the bridge sets them ---------------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def bridge():
    clock = Clock()
    published, lifted = [], []
    bridge = GroupBridge(1, None, lambda: {}, lambda: {}, heartbeat_interval_ms=3000, session_timeout_ms=10000,
                         fence_idle_ms=IDLE_MS, clock=clock, publish_fences=published.append,
                         lift_fences_elsewhere=lambda group, tie: lifted.append((group, tie)),
                         fenced_anywhere=lambda tie: bridge.refused_anywhere.get(tie, frozenset()))
    bridge.test_clock, bridge.published, bridge.lifted, bridge.refused_anywhere = clock, published, lifted, {}
    yield bridge
    bridge.close()


class Registration:
    """A stand-in for a member's GroupMembership: registered, its lease ending at ``lease_end``."""

    def __init__(self, clock: Clock, lease_end: float):
        self.clock = clock
        self.registered = threading.Event()
        self.registered.set()
        self.protocol = SimpleNamespace(lease_deadline=lease_end)
        self.closed = False
        self.error = None
        self.abandoned = False

    def abandon(self) -> None:
        self.abandoned = True

    def close(self, timeout: float = 10.0) -> None:
        self.closed = True


def holding_member(bridge, partitions=(A, B)) -> _Bridged:
    """A member (eager) whose client holds ``partitions``, its registration's lease ending in 10 s."""
    now = bridge.test_clock()
    member = ClassicMember("m-1", ("t",), session_timeout_ms=6000, rebalance_timeout_ms=20000, client_id=CLIENT,
                           client_host=HOST, last_heard=now)
    bridged = bridge._add(member, "g")
    bridged.membership = Registration(bridge.test_clock, now + 10.0)
    member.start({tp: 0 for tp in partitions}, now)
    member.join(None, now)
    member.sync(member.generation, now)
    return bridged


def last_fences(bridge) -> dict:
    return {key: fence.partitions for key, fence in (bridge.published[-1] if bridge.published else {}).items()}


def test_a_member_whose_lease_runs_low_is_fenced_until_it_lets_go(bridge):
    bridged = holding_member(bridge)
    member = bridged.member
    bridge._watch_lease(bridged, bridge.test_clock())
    assert last_fences(bridge) == {}
    bridge.test_clock.now += 9.0  # 1 s left: within its warning (1.5 s of a 6 s session)
    bridge._watch_lease(bridged, bridge.test_clock())
    assert member.suspended
    assert last_fences(bridge) == {("g", "m-1"): {A, B}}
    # It hears REBALANCE_IN_PROGRESS and joins again, having revoked everything.
    assert member.heartbeat(member.generation, bridge.test_clock()) == classic.REBALANCE_IN_PROGRESS
    assert bridge.join_group(_join("m-1"), HOST).error_code == 0
    assert last_fences(bridge) == {}


def test_a_renewed_lease_lifts_the_fence(bridge):
    bridged = holding_member(bridge)
    bridge.test_clock.now += 9.0
    bridge._watch_lease(bridged, bridge.test_clock())
    assert last_fences(bridge) == {("g", "m-1"): {A, B}}
    bridged.membership.protocol.lease_deadline = bridge.test_clock() + 6.0
    bridge._watch_lease(bridged, bridge.test_clock())
    assert last_fences(bridge) == {}


def test_an_abandoned_member_stays_fenced_until_its_client_joins_afresh(bridge):
    bridged = holding_member(bridge)
    bridge._drop(bridged, "it did not answer in time")
    assert bridged.membership is None
    assert last_fences(bridge) == {("g", "m-1"): {A, B}}
    # Its client comes back (a pause ends): its heartbeat is refused, and it joins with no member id.
    def registered_and_started(bridged, strategies):  # no coordinator here: its first Start comes at once
        bridged.started.set()
        return 0

    bridge._register = registered_and_started
    assert bridge.join_group(_join(""), HOST).error_code == 0
    assert last_fences(bridge) == {}


def test_a_member_silent_past_its_session_is_fenced_on_what_its_client_held(bridge):
    """Cut off from this broker only (or paused), the client may fetch on
    from the other leaders: taken as gone for its silence, its member is
    fenced like one abandoned for keeping a revoked partition. From review:
    the expiry took the member as gone (holding nothing) before the bridge
    dropped it, so nothing was fenced, and the partitions were served to it
    once started elsewhere."""
    bridged = holding_member(bridge)
    registration = bridged.membership
    for _ in range(25):  # the expiry loop's ticks over its 6 s session; the registration's lease stays renewed
        bridge.test_clock.now += 0.25
        registration.protocol.lease_deadline = bridge.test_clock() + 6.0
        bridge._expire(bridge.test_clock())
    assert bridged.member.gone and bridged.membership is None and bridged.left is False
    assert last_fences(bridge) == {("g", "m-1"): {A, B}}


def test_a_gone_member_whose_client_fetches_nothing_for_the_idle_time_is_fenced_no_more(bridge):
    """Its client never comes back (it died, or its host did): the fence
    does not outlive it by more than the idle time."""
    stale = holding_member(bridge)
    bridge._drop(stale, "it did not answer in time")
    bridge.test_clock.now += IDLE_MS / 1000.0 - 1.0
    bridge.fence_fetched(("g", "m-1"))  # a broker refused it a fetch: it still runs
    bridge.test_clock.now += IDLE_MS / 1000.0 - 1.0
    bridge._lapse_idle_fences()
    assert last_fences(bridge) == {("g", "m-1"): {A, B}}
    bridge.test_clock.now += 1.0
    bridge._lapse_idle_fences()
    assert last_fences(bridge) == {}


def test_a_live_member_s_fence_follows_its_lease_however_idle(bridge):
    bridged = holding_member(bridge)
    bridge.test_clock.now += 9.0  # within its warning: fenced while it lets go
    bridge._watch_lease(bridged, bridge.test_clock())
    bridge.test_clock.now += IDLE_MS / 1000.0
    bridge._lapse_idle_fences()
    assert last_fences(bridge) == {("g", "m-1"): {A, B}}


def test_a_member_that_leaves_cleanly_is_not_fenced(bridge):
    bridged = holding_member(bridge)
    bridged.member.join(None, bridge.test_clock())  # an eager client let everything go
    bridge._drop(bridged, "it left", left=True)
    assert last_fences(bridge) == {}


def test_a_sync_that_gives_a_fenced_partition_to_another_member_of_the_tie_lifts_it(bridge):
    stale = holding_member(bridge)
    bridge._drop(stale, "it did not answer in time")
    other = ClassicMember("m-2", ("t",), session_timeout_ms=6000, rebalance_timeout_ms=20000, client_id=CLIENT,
                          client_host=HOST, last_heard=bridge.test_clock())
    bridge._add(other, "g")
    other.start({A: 0}, bridge.test_clock())
    other.join(None, bridge.test_clock())
    sync = SyncGroupRequest(version=3, group_id="g", generation_id=other.generation, member_id="m-2",
                            group_instance_id=None, assignments=[])
    assert bridge.sync_group(sync).error_code == 0
    assert last_fences(bridge) == {("g", "m-1"): {B}}


def _join(member_id: str) -> JoinGroupRequest:
    """The JoinGroup of an eager client of ``TIE`` (version 3: no member id asked for first)."""
    from kafka.protocol.consumer.metadata import ConsumerProtocolSubscription

    subscription = bytes(ConsumerProtocolSubscription(version=0, topics=["t"], user_data=None).encode(version=0))
    join = JoinGroupRequest(version=3, group_id="g", session_timeout_ms=6000, rebalance_timeout_ms=20000,
                            member_id=member_id, protocol_type="consumer",
                            protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name="range",
                                                                                 metadata=subscription)])
    join.with_header(client_id=CLIENT)
    return join


def test_a_client_that_joins_afresh_lifts_the_fences_other_brokers_keep_for_it(bridge):
    # It followed its group here from another broker, which abandoned its
    # old member once silent and fenced what it held: that broker never sees
    # it again, so the let-go it shows here must reach that fence.
    bridged = holding_member(bridge)
    member = bridged.member
    bridge.test_clock.now += 9.0
    bridge._watch_lease(bridged, bridge.test_clock())
    assert member.heartbeat(member.generation, bridge.test_clock()) == classic.REBALANCE_IN_PROGRESS
    assert bridge.lifted == []
    assert bridge.join_group(_join("m-1"), HOST).error_code == 0
    assert bridge.lifted == [("g", Tie(HOST, CLIENT))]


def test_an_owner_refused_what_it_holds_by_another_brokers_fence_asks_again_for_the_lift(bridge):
    # The lift was missed (the old broker fenced after the client joined
    # here), undone or lost: while the owner is refused what it holds, the
    # bridge asks again at each check, and not once it is not.
    bridged = holding_member(bridge)
    bridge._unfence_owner(bridged)
    assert bridge.lifted == []
    bridge.refused_anywhere[Tie(HOST, CLIENT)] = frozenset({A})
    bridge._unfence_owner(bridged)
    assert bridge.lifted == [("g", Tie(HOST, CLIENT))]


def test_a_fence_another_broker_lifted_is_dropped_by_its_writer(bridge):
    bridged = holding_member(bridge)
    bridge.test_clock.now += 9.0
    bridge._watch_lease(bridged, bridge.test_clock())
    assert last_fences(bridge) == {("g", "m-1"): {A, B}}
    bridge._drop(bridged, "it did not answer in time")  # abandoned: fenced on what it held
    assert last_fences(bridge) == {("g", "m-1"): {A, B}}
    bridge.fence_lifted(("g", "m-1"))
    assert bridge._fences.fences() == {}
