"""The group state the coordinator leaves in ZooKeeper stays true (core.py):
a member that has gone is named neither in the persisted state nor as an
owner, once its lease allows, and an empty group is written empty.
On a manual clock, as test_coordinator_core.py."""

from zkcoord import wire
from zkcoord.coordinator import actions
from zkcoord.coordinator.group import GroupPhase
from zkcoord.zk import layout

from tests.unit.core_harness import MARGIN, P, T, T_MS, TAKEOVER, CoreHarness, FakeZooKeeper, proofs


def one_member() -> CoreHarness:
    h = CoreHarness()
    h.register("a", "a")
    h.stable(["a"])
    assert h.zk.owners["g"] == {tp: "a" for tp in P} and set(h.zk.states["g"].assignment) == {"a"}
    return h


def assert_written_empty(h: CoreHarness, generation_before: int) -> None:
    state = h.zk.states["g"]
    assert state.assignment == {} and state.running == {} and state.lease_ms == 0
    assert state.generation == generation_before + 1
    assert h.zk.owners["g"] == {}
    assert h.core.groups["g"].phase is GroupPhase.EMPTY


def test_the_last_member_leaving_cleanly_leaves_the_group_written_empty():
    h = one_member()
    generation = h.zk.states["g"].generation
    h.answer("a", wire.LeaveGroupRequest(offsets=wire.offset_entries({tp: 40 + i for i, tp in enumerate(P)})),
             correlation_id=5)
    h.settle()
    assert h.sent["a"][-1] == (wire.LeaveGroupResponse(), 5)
    h.advance(0.2)  # the debounce; it left cleanly, so no lease to wait out
    assert_written_empty(h, generation)
    assert h.zk.offsets["g"] == {tp: 40 + i for i, tp in enumerate(P)}  # its offsets stay
    writes = len(h.zk.writes)
    h.advance(10.0)
    assert len(h.zk.writes) == writes  # written once: no round for an empty group that says so


def test_the_last_member_crashing_is_written_out_only_once_its_lease_has_ended():
    h = one_member()
    generation = h.zk.states["g"].generation
    lease_from = h.last_request_at("a")
    h.apply(h.core.connection_closed("a", h.now))  # closed on our side: it may still be fetching
    h.advance(lease_from + T + MARGIN - h.now - 0.01)
    # Still fenced: the state a successor would fence by, and the owners, stay as they were.
    assert set(h.zk.states["g"].assignment) == {"a"} and h.zk.owners["g"] == {tp: "a" for tp in P}
    h.advance(0.5)
    assert_written_empty(h, generation)


def test_a_member_that_leaves_while_others_remain_has_its_partitions_reassigned_and_is_forgotten():
    h = CoreHarness()
    h.register("a", "a")
    h.register("b", "b")
    h.stable(["a", "b"])
    h.answer("b", wire.LeaveGroupRequest(offsets=wire.offset_entries({P[2]: 7, P[3]: 8})), correlation_id=3)
    h.settle()
    h.advance(1.0, serve=("a",))
    assert h.zk.owners["g"] == {tp: "a" for tp in P}
    assert set(h.zk.states["g"].assignment) == {"a"} and "b" not in h.zk.states["g"].running
    assert h.core.groups["g"].phase is GroupPhase.STABLE


def test_a_member_that_ran_nothing_is_forgotten_when_it_leaves_and_named_when_it_joins():
    h = CoreHarness(partitions={"t": 1})
    h.register("a", "a")
    h.stable(["a"])
    h.register("b", "b")  # nothing left for it to run
    h.advance(1.0, serve=("a", "b"))
    assert h.zk.states["g"].assignment == {"a": (("t", 0),), "b": ()}
    assert h.requests("a", wire.StopRequest) == [] and h.requests("b", wire.StartRequest) == []
    generation = h.zk.states["g"].generation
    h.answer("b", wire.LeaveGroupRequest(), correlation_id=4)
    h.settle()
    h.advance(1.0, serve=("a",))
    assert h.zk.states["g"].assignment == {"a": (("t", 0),)} and h.zk.states["g"].generation == generation + 1
    assert h.zk.owners["g"] == {("t", 0): "a"}
    assert h.requests("a", wire.StopRequest) == []  # a kept running throughout


def test_a_successor_writes_out_a_group_whose_members_never_come_back_once_their_leases_have_ended():
    state = layout.GroupState(3, "range", {"a": tuple(P[:2]), "b": tuple(P[2:])}, lease_ms=T_MS)
    zk = FakeZooKeeper(owners={"g": {tp: ("a" if tp[1] < 2 else "b") for tp in P}}, states={"g": state})
    h = CoreHarness(states={"g": state}, zk=zk)
    h.advance(TAKEOVER - 0.01)
    assert h.zk.states["g"] is state and len(h.zk.owners["g"]) == 4  # fenced: nothing rewritten
    h.advance(0.5)
    assert_written_empty(h, 3)


def test_a_member_back_after_a_failover_keeps_its_place_in_the_state():
    state = layout.GroupState(3, "range", {"a": tuple(P)}, lease_ms=T_MS, proofs=proofs("a"))
    zk = FakeZooKeeper(owners={"g": {tp: "a" for tp in P}}, states={"g": state})
    h = CoreHarness(states={"g": state}, zk=zk)
    h.register("a", "a")
    h.advance(T + MARGIN + 1.0, serve=("a",))
    assert h.zk.states["g"].assignment == {"a": tuple(P)} and h.running("a") == set(P)
    assert h.zk.owners["g"] == {tp: "a" for tp in P}


def test_an_empty_state_that_fails_to_be_written_is_written_on_a_retry():
    h = one_member()
    generation = h.zk.states["g"].generation
    h.answer("a", wire.LeaveGroupRequest(), correlation_id=5)
    h.settle()
    h.advance(0.2, settle=False)
    h.complete(actions.WriteGroupState, error=RuntimeError("connection loss"))
    h.advance(2.0)
    state = h.zk.states["g"]
    assert state.assignment == {} and h.zk.owners["g"] == {} and state.generation > generation


def test_the_state_names_where_each_member_connected_from():
    h = CoreHarness()
    request = wire.RegisterConsumerRequest(group_id="g", consumer_id="a", topics=("t",), session_timeout_ms=T_MS)
    h.apply(h.core.register("a", request, 1, h.now, host="127.0.0.1", client_id="app"))
    h.register("b", "b")  # a registration that says nothing of itself
    h.stable(["a", "b"])
    assert h.zk.states["g"].clients == {"a": layout.MemberClient("127.0.0.1", "app", session_timeout_ms=T_MS),
                                        "b": layout.MemberClient("", session_timeout_ms=T_MS)}


def test_the_state_names_what_kind_of_client_each_member_is_as_it_said():
    h = CoreHarness()
    request = wire.RegisterConsumerRequest(group_id="g", consumer_id="a", topics=("t",), session_timeout_ms=T_MS,
                                           client_kind=wire.CONSUMER_PROTOCOL, client_id="rdkafka")
    h.apply(h.core.register("a", request, 1, h.now, host="127.0.0.1", client_id="ignored"))
    h.stable(["a"])
    assert h.zk.states["g"].clients == {"a": layout.MemberClient("127.0.0.1", "rdkafka", session_timeout_ms=T_MS,
                                                                 kind=wire.CONSUMER_PROTOCOL)}
