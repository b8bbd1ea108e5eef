"""Rebalance rounds alone (core/rounds.py): debounced, persisted first, Stops and their offsets before Starts."""

from zkcoord import wire
from zkcoord.coordinator import actions
from zkcoord.coordinator.group import GroupPhase
from zkcoord.zk.layout import GroupFailure

from tests.unit.core_harness import CONFIG
from tests.unit.parts_kit import Kit

DEBOUNCE = CONFIG.rebalance_delay_ms / 1000.0
P = [("t", i) for i in range(4)]


def kinds(done) -> list:
    """The writes and requests of a round, in order."""
    return [type(a.message).__name__ if isinstance(a, actions.Send) else type(a).__name__ for a in done
            if isinstance(a, (actions.Send, actions.WriteGroupState, actions.WriteOffsets, actions.WriteOwners))]


def test_requests_within_the_debounce_make_one_round_persisted_before_anyone_is_told():
    kit = Kit()
    rounds = kit.build_rounds()
    a, b = kit.join("a", "b")
    group = kit.groups.by_name["g"]
    rounds.request(group, "a joined", kit.now)
    kit.advance(DEBOUNCE / 2)
    rounds.request(group, "b joined", kit.now)
    kit.advance(DEBOUNCE, serve=("a", "b"))
    assert group.phase is GroupPhase.STABLE and group.generation == 1
    assert kit.zk.states["g"].generation == 1 and len(kit.zk.writes) == 2  # one state, one owners
    assert a.running | b.running == frozenset(P) and not a.running & b.running
    assert rounds.last.generation == 1 and kit.metrics.rebalances == [rounds.last]


def test_every_stop_is_answered_and_its_offsets_written_before_any_start_goes_out():
    kit = Kit()
    rounds = kit.build_rounds()
    (a,) = kit.join("a")
    group = kit.groups.by_name["g"]
    rounds.request(group, "a joined", kit.now)
    kit.advance(2 * DEBOUNCE, serve=("a",))
    kit.join("b")
    rounds.request(group, "b joined", kit.now)
    done = []
    kit.out.emit = lambda action, emit=kit.out.emit: done.append(action) or emit(action)
    kit.advance(2 * DEBOUNCE, serve=("a", "b"))
    steps = kinds(done)
    assert steps.index("WriteGroupState") < steps.index("StopRequest") < steps.index("WriteOffsets") \
        < steps.index("StartRequest") < steps.index("WriteOwners")
    moved = kit.groups.by_name["g"].members["b"].running
    assert moved and all(kit.zk.offsets["g"][tp] == 10 for tp in moved)  # what a's Stop reported
    starts = [m for m, _ in kit.requests_to("b", wire.StartRequest)]
    assert {(p.topic, p.partition): p.offset for p in starts[0].partitions} == {tp: 10 for tp in moved}


def test_a_round_waits_for_fenced_partitions_and_a_failing_write_is_retried_until_the_group_is_failed():
    kit = Kit()
    rounds = kit.build_rounds()
    kit.join("a")
    group = kit.groups.by_name["g"]
    group.fences.fence("gone", P[:1], until=5.0)
    rounds.request(group, "a joined", kit.now)
    kit.advance(1.0)
    assert group.generation == 0 and kit.timers[("rebalance", "g")] == 5.0
    kit.zk.refuse_writes, kit.zk.refused_kinds = RuntimeError("quota exceeded"), (actions.WriteGroupState,)
    kit.advance(120.0)
    assert group.phase is GroupPhase.FAILED and kit.metrics.counts["rebalance_failed"] > CONFIG.max_rebalance_retries + 1
    # Its failure node says why, written once, not at every retry.
    assert kit.zk.failures["g"] == GroupFailure.of(0, CONFIG.max_rebalance_retries + 1, group.last_error)
    assert sum(isinstance(w, actions.WriteGroupFailure) for w in kit.zk.writes) == 1
    kit.zk.refuse_writes = None
    kit.advance(CONFIG.max_rebalance_backoff_ms / 1000.0, serve=("a",))
    assert group.phase is GroupPhase.STABLE and group.failures == 0 and kit.zk.failures["g"] is None
