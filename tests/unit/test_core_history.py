"""Rebalance history (core/history.py, zk/layout/history.py): each round recorded as it ends, in a bounded ring."""

import dataclasses
from types import SimpleNamespace

import pytest

from zkcoord import wire
from zkcoord.coordinator import actions
from zkcoord.coordinator.core.history import RESUMED, History
from zkcoord.zk import layout

from tests.unit.core_harness import CONFIG
from tests.unit.parts_kit import T_MS, Kit

DEBOUNCE = CONFIG.rebalance_delay_ms / 1000.0
T_S = T_MS / 1000.0


def rounds_kit(config=CONFIG):
    kit = Kit(config)
    kit.build_membership()
    return kit, kit.rounds, kit.groups.named("g")


def test_a_round_is_recorded_with_its_trigger_reason_moves_and_pauses():
    kit, rounds, group = rounds_kit()
    kit.join("a")
    rounds.request(group, "member a joined", kit.now)
    kit.advance(2 * DEBOUNCE, serve=("a",))
    kit.join("b")
    asked_at = kit.now
    rounds.request(group, "member b joined", kit.now)
    kit.advance(2 * DEBOUNCE)  # the round began: its Stop to a waits for a's answer
    assert kit.requests_to("a", wire.StopRequest)
    kit.advance(0.5)
    kit.advance(0.0, serve=("a", "b"))
    first, second = kit.zk.histories["g"]
    assert (first.generation, first.trigger, first.reason, first.outcome) == (
        1, "member a joined", "no ownership recorded", layout.COMPLETED)
    assert (first.members, first.moved, first.paused, first.paused_ms, first.error) == (1, 4, 0, 0, None)
    assert (second.generation, second.trigger, second.members, second.outcome) == (
        2, "member b joined", 2, layout.COMPLETED)
    # b takes two of a's four partitions: two move, and stand still from a's Stop to the round's end.
    assert (second.moved, second.paused) == (2, 2)
    paused_s = DEBOUNCE + 0.5  # the Stop went out as the round began, DEBOUNCE into the last advance
    assert second.paused_ms == round(2 * paused_s * 1000) and second.duration_ms == round(paused_s * 1000)
    assert second.started_ms == round((asked_at + DEBOUNCE) * 1000)  # on the core's clock, until dated
    assert rounds.history.recent("g") == [first, second] and first.epoch == kit.office.epoch


def test_a_round_cut_short_by_a_member_going_is_superseded_and_the_next_one_says_why():
    kit, rounds, group = rounds_kit()
    kit.join("a", "b")
    rounds.request(group, "member a joined", kit.now)
    kit.advance(2 * DEBOUNCE, serve=("a", "b"))
    kit.join("c")
    rounds.request(group, "member c joined", kit.now)
    kit.advance(2 * DEBOUNCE, serve=("c",))  # a and b are asked to stop; b's connection closes instead
    kit.membership.connection_closed("b", kit.now)
    kit.advance(2 * T_S, serve=("a", "c"))  # b's partitions wait out its lease
    records = kit.zk.histories["g"]
    cut_short = records[1]
    assert cut_short.outcome == layout.SUPERSEDED and "member b" in cut_short.error
    after = records[2]
    assert after.trigger == "member b left: its connection closed" and after.outcome == layout.COMPLETED
    assert after.generation == cut_short.generation + 1 and after.members == 2


def test_a_round_that_fails_is_recorded_failed_and_its_retry_says_so():
    kit, rounds, group = rounds_kit()
    kit.join("a")
    kit.zk.refuse_writes, kit.zk.refused_kinds = RuntimeError("quota exceeded"), (actions.WriteGroupState,)
    rounds.request(group, "member a joined", kit.now)
    kit.advance(2 * DEBOUNCE)
    kit.zk.refuse_writes = None
    kit.advance(1.0, serve=("a",))
    *failed, retried = kit.zk.histories["g"]
    assert failed and all(f.outcome == layout.FAILED and "quota exceeded" in f.error and f.paused_ms == 0
                          for f in failed)
    assert failed[1].trigger == f"retry after generation {failed[0].generation} failed"
    failed = failed[-1]
    assert retried.trigger == f"retry after generation {failed.generation} failed"
    assert retried.outcome == layout.COMPLETED and retried.generation == failed.generation


def test_the_ring_keeps_the_last_rounds_and_a_failed_write_keeps_them_for_the_next():
    kit, rounds, group = rounds_kit(dataclasses.replace(CONFIG, rebalance_history_rounds=3))
    kit.join("a")
    kit.zk.refuse_writes, kit.zk.refused_kinds = RuntimeError("connection loss"), (actions.WriteRebalanceHistory,)
    for n in range(4):
        rounds.request(group, f"topic t now has {4 + n} partition(s)", kit.now)
        kit.groups.partitions["t"] = 4 + n
        kit.advance(2 * DEBOUNCE, serve=("a",))
    assert "g" not in kit.zk.histories and len(rounds.history.recent("g")) == 3
    kit.zk.refuse_writes = None
    rounds.request(group, "topic t now has 8 partition(s)", kit.now)
    kit.groups.partitions["t"] = 8
    kit.advance(2 * DEBOUNCE, serve=("a",))
    assert [r.generation for r in kit.zk.histories["g"]] == [3, 4, 5]
    assert [r.trigger for r in kit.zk.histories["g"]][-1] == "topic t now has 8 partition(s)"


def test_one_write_per_group_at_a_time_and_the_next_carries_what_ended_meanwhile():
    kit = Kit()
    history = History(CONFIG, kit.office, kit.out)
    group = SimpleNamespace(name="g", rebalance_pending=False)

    def one_round(generation):
        round_ = SimpleNamespace(generation=generation, target={"a": frozenset({("t", 0)})},
                                 plan=SimpleNamespace(paused=frozenset()))
        history.began(group, round_, "no ownership recorded", {}, kit.now)
        history.ended(group, round_, kit.now, None)

    one_round(1)
    one_round(2)
    written = [a for a in kit.out.take() if isinstance(a, actions.WriteRebalanceHistory)]
    assert [[r.generation for r in w.records] for w in written] == [[1]]
    kit.out.ended(written[0].token)(None, None, kit.now)
    written = [a for a in kit.out.take() if isinstance(a, actions.WriteRebalanceHistory)]
    assert [[r.generation for r in w.records] for w in written] == [[2]]
    assert history.recent("g")[0].trigger == RESUMED  # nothing asked for it: a takeover's round
    # A round that asked nothing to move answers what asked for it: the next round does not claim it.
    history.requested("g", "member x joined")
    history.nothing_to_do("g")
    one_round(3)
    assert history.recent("g")[-1].trigger == RESUMED


def test_the_executor_dates_records_by_the_wall_clock():
    record = layout.RebalanceRecord(1, 1, 2_000, 10, "t", "r", 1, 1, 0, 0, layout.COMPLETED)
    action = actions.WriteRebalanceHistory(1, "g", (record,), 20)
    assert action.dated(1_700_000_000.0).records[0].started_ms == 1_700_000_002_000


def test_a_history_node_round_trips_and_bad_ones_are_refused():
    records = [layout.RebalanceRecord(n, 1, 1000 * n, 10, "member a joined", "no ownership recorded", 1, 4, 2,
                                      40, layout.COMPLETED) for n in range(5)]
    assert layout.decode_history(layout.encode_history(records)) == records
    assert layout.kept(records[:3], records[3:], 2) == records[3:]
    for bad in (b"[]", b'{"version":2,"rounds":[]}', b'{"version":1,"rounds":[{"generation":-1}]}',
                b'{"version":1,"rounds":{}}', b"\xff"):
        with pytest.raises(layout.LayoutError):
            layout.decode_history(bad)
    with pytest.raises(layout.LayoutError):
        dataclasses.replace(records[0], outcome="lost")
    with pytest.raises(layout.LayoutError):
        dataclasses.replace(records[0], outcome=layout.FAILED)  # a failure says why
    with pytest.raises(layout.LayoutError):
        layout.encode_history(records * layout.MAX_HISTORY_ROUNDS)


def test_rounds_that_end_out_of_office_are_written_once_it_is_back():
    kit = Kit()
    history = History(CONFIG, kit.office, kit.out)
    group = SimpleNamespace(name="g", rebalance_pending=False)
    round_ = SimpleNamespace(generation=1, target={}, plan=SimpleNamespace(paused=frozenset()))
    history.began(group, round_, "member a gone", {}, kit.now)
    kit.office.session_suspended()
    history.ended(group, round_, kit.now, "the ZooKeeper connection is suspended")
    assert not [a for a in kit.out.take() if isinstance(a, actions.WriteRebalanceHistory)]
    kit.office.session_resumed(kit.now, None)
    kit.settle()  # the office proven again
    assert kit.office.active
    history.write_pending()
    kit.settle()
    assert [(r.generation, r.outcome) for r in kit.zk.histories["g"]] == [(1, layout.FAILED)]
