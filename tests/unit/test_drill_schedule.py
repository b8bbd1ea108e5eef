"""The drill's schedule: fixed by the seed, drawn only from the kinds asked
for, with faults held past or below the timeouts their names promise."""

from __future__ import annotations

import pytest

from zkcoord.drill.schedule import KINDS, Timing, left_out_over_kafka, parse_kinds, plan
from zkcoord.errors import ConfigError

TIMING = Timing(consumer_session_s=3.0, zk_session_s=4.0, rebalance_timeout_s=5.0, kafka_session_s=4.5)


def test_the_same_seed_gives_the_same_schedule():
    assert plan(7, 50, list(KINDS), TIMING) == plan(7, 50, list(KINDS), TIMING)
    assert plan(7, 50, list(KINDS), TIMING) != plan(8, 50, list(KINDS), TIMING)


def test_faults_are_drawn_from_the_chosen_kinds_only():
    schedule = plan(1, 200, ["consumer-kill", "member-join"], TIMING)
    assert {f.kind for f in schedule} == {"consumer-kill", "member-join"}
    assert [f.index for f in schedule] == list(range(1, 201))
    assert all(f.planned == (f.kind == "member-join") for f in schedule)


def test_long_and_short_holds_straddle_the_timeouts():
    for f in plan(3, 300, list(KINDS), TIMING):
        if f.kind == "consumer-pause-long":
            assert f.hold_s > TIMING.consumer_session_s + 0.9
        elif f.kind == "consumer-pause-short":
            assert f.hold_s < TIMING.consumer_session_s / 2
        elif f.kind in ("coordinator-pause-long", "coordinator-zk-expiry"):
            assert f.hold_s > TIMING.zk_session_s + 0.9
        elif f.kind in ("coordinator-pause-short", "coordinator-zk-blip"):
            assert f.hold_s < TIMING.zk_session_s / 2
        elif KINDS[f.kind].kafka:  # a Kafka broker away past its session: its leaderships must move
            assert f.hold_s > TIMING.kafka_session_s + 0.9
        assert 0.5 <= f.settle_s <= 1.5


def test_a_big_group_stays_two_sessions_and_is_planned_exactly_when_it_leaves_cleanly():
    schedule = plan(5, 200, list(KINDS), TIMING)
    crowds = [f for f in schedule if f.kind == "big-group"]
    assert {f.clean for f in crowds} == {True, False}  # both ends are drawn
    for f in crowds:
        assert f.hold_s > 2 * TIMING.consumer_session_s + 0.9
        assert f.clean == (f.pick % 2 == 1) and f.planned == f.clean
    # No other kind ends either way: their planned flag is their kind's.
    assert all(not f.clean and f.planned == KINDS[f.kind].planned for f in schedule if f.kind != "big-group")


@pytest.mark.parametrize("count", [0, -3])
def test_a_fault_count_that_is_not_positive_is_refused(count):
    with pytest.raises(ConfigError, match="must be positive"):
        plan(1, count, ["consumer-kill"], TIMING)


def test_kinds_are_parsed_and_unknown_ones_named():
    # Without Kafka, "all" is every kind that was before the Kafka ones: a seed draws the schedule it always drew.
    kafka_kinds = ["kafka-leader-kill", "kafka-broker-pause", "kafka-controller-kill"]
    assert parse_kinds("all") == [k for k in KINDS if k not in kafka_kinds]
    assert list(KINDS)[-3:] == kafka_kinds
    # Over Kafka, every kind but those it cannot take.
    assert parse_kinds("all", over_kafka=True) == [k for k in KINDS if k not in left_out_over_kafka()]
    assert set(left_out_over_kafka()) == {"stock-member-pause-long", "stock-member-group-cut"}
    assert parse_kinds("consumer-kill, member-join,consumer-kill") == ["consumer-kill", "member-join"]
    with pytest.raises(ConfigError, match="unknown fault kind.*bogus"):
        parse_kinds("consumer-kill,bogus")
    with pytest.raises(ConfigError, match="no fault kind"):
        parse_kinds(" , ")
