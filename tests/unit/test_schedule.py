"""The ping schedule, driven by hand: times are numbers the test chooses."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from zkcoord.coordinator.schedule import PingSchedule


def test_a_key_is_first_due_one_interval_after_it_is_added():
    schedule = PingSchedule()
    schedule.add("m", 3, now=10)
    assert schedule.next_due() == 13
    assert schedule.due(12.999) == []
    assert schedule.due(13) == ["m"]


def test_keys_come_due_in_time_order():
    schedule = PingSchedule()
    schedule.add("slow", 5, now=0)
    schedule.add("fast", 1, now=0)
    schedule.add("mid", 2, now=0.5)
    assert schedule.next_due() == 1
    assert schedule.due(4.9) == ["fast", "mid"]  # each at most once per call
    assert schedule.due(5) == ["slow"]


def test_keys_need_not_be_comparable():
    schedule = PingSchedule()
    a, b = object(), object()
    schedule.add(a, 1, now=0)
    schedule.add(b, 1, now=0)
    assert set(schedule.due(1)) == {a, b}


def test_rescheduling_keeps_the_interval_from_the_due_time_not_from_now():
    schedule = PingSchedule()
    schedule.add("m", 1, now=0)
    assert schedule.due(1.25) == ["m"]
    assert schedule.next_due() == 2  # not 2.25: a late check does not make pings drift
    assert schedule.due(2) == ["m"]
    assert schedule.next_due() == 3


def test_a_schedule_that_fell_behind_pings_once_and_starts_again_from_now():
    schedule = PingSchedule()
    schedule.add("m", 1, now=0)
    assert schedule.due(5.5) == ["m"]  # four intervals missed: one ping, not a burst
    assert schedule.next_due() == 6.5
    assert schedule.due(6.4) == []
    assert schedule.due(6.5) == ["m"]


def test_a_removed_key_is_never_due_again():
    schedule = PingSchedule()
    schedule.add("gone", 1, now=0)
    schedule.add("kept", 2, now=0)
    schedule.remove("gone")
    assert "gone" not in schedule and "kept" in schedule and len(schedule) == 1
    assert schedule.next_due() == 2  # the stale entry does not show through
    assert schedule.due(10) == ["kept"]
    schedule.remove("never-added")  # harmless
    schedule.remove("kept")
    assert len(schedule) == 0
    assert schedule.next_due() is None
    assert schedule.due(100) == []


def test_adding_a_key_again_replaces_its_schedule():
    schedule = PingSchedule()
    schedule.add("m", 10, now=0)
    schedule.add("m", 1, now=0)
    assert len(schedule) == 1
    assert schedule.next_due() == 1
    assert [schedule.due(t) for t in (1, 2, 3)] == [["m"], ["m"], ["m"]]


def test_a_key_removed_and_added_back_at_the_same_time_is_due_once():
    schedule = PingSchedule()
    schedule.add("m", 1, now=0)
    schedule.remove("m")
    schedule.add("m", 1, now=0)  # same due time as the stale entry
    assert schedule.due(1) == ["m"]
    assert schedule.due(1.5) == []


@pytest.mark.parametrize("interval", [0, -1])
def test_an_interval_must_be_positive(interval):
    schedule = PingSchedule()
    with pytest.raises(ValueError):
        schedule.add("m", interval, now=0)
    assert "m" not in schedule


@st.composite
def runs(draw):
    """Keys with integer intervals added at integer times, then a clock that
    advances in integer steps, with some keys removed (and maybe added back)
    along the way."""
    keys = draw(st.lists(st.sampled_from("abcdefgh"), min_size=1, max_size=6, unique=True))
    intervals = {k: draw(st.integers(1, 7)) for k in keys}
    added_at = {k: draw(st.integers(0, 5)) for k in keys}
    steps = draw(st.lists(st.integers(1, 9), min_size=1, max_size=40))
    removals = draw(st.lists(st.tuples(st.integers(0, len(steps) - 1), st.sampled_from(keys),
                                       st.booleans()), max_size=4))
    return intervals, added_at, steps, removals


@given(runs())
def test_never_early_and_once_per_interval_while_the_clock_keeps_up(run):
    intervals, added_at, steps, removals = run
    schedule = PingSchedule()
    since: dict[str, int] = {}  # when each key's current schedule began
    count: dict[str, int] = {}  # dues since then
    now = 0
    pending = sorted(added_at.items(), key=lambda item: item[1])
    for index, step in enumerate(steps):
        for key, when in [p for p in pending if p[1] <= now]:
            schedule.add(key, intervals[key], now)
            since[key], count[key] = now, 0
            pending.remove((key, when))
        for at, key, back in removals:
            if at == index and key in since:
                schedule.remove(key)
                del since[key]
                if back:
                    schedule.add(key, intervals[key], now)
                    since[key], count[key] = now, 0
        now += step
        due = schedule.due(now)
        assert len(due) == len(set(due))
        assert set(due) <= set(since), "a removed key came due"
        for key in due:
            count[key] += 1
        nxt = schedule.next_due()
        assert nxt is None or nxt > now
        for key, start in since.items():
            # Never early: at most one due per whole interval elapsed.
            owed = (now - start) // intervals[key]
            assert count[key] <= owed, (key, count[key], owed)
            # Once per interval: with steps no longer than the interval the
            # schedule never falls behind, so every interval gets its ping.
            if step <= intervals[key] and all(s <= intervals[key] for s in steps[:index + 1]):
                assert count[key] == owed, (key, count[key], owed)
