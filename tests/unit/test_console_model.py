"""The console's decisions without I/O: when a group's lag is growing, and
which problems come first."""

from __future__ import annotations

from zkcoord.console.model import (EXPIRING, FAILED, LAG_GROWING, REBALANCING, VACANT_SLOT, LagTrend, expiring,
                                   hide_topics, problems)


def test_lag_grows_when_each_of_the_last_readings_a_gap_apart_is_higher():
    now = [0.0]
    trend = LagTrend(lambda: now[0], samples=3, min_gap_s=5)
    for lag in (10, 20, 15, 30):
        trend.observe("g", lag)
        now[0] += 6
    assert trend.growing("g") is None  # 20, 15, 30: not each higher
    trend.observe("g", 40)
    assert trend.growing("g") == [15, 30, 40]
    now[0] += 1
    trend.observe("g", 35)  # within the gap: it stands for the latest reading
    assert trend.growing("g") == [15, 30, 35]
    now[0] += 1
    trend.observe("g", 29)
    assert trend.growing("g") is None
    trend.observe("g", None)  # lag unknown (no broker answered): no reading
    assert trend.growing("g") is None


def test_readings_taken_close_together_make_no_trend():
    now = [0.0]
    trend = LagTrend(lambda: now[0], samples=3, min_gap_s=5)
    for lag in (1, 2, 3, 4, 5):
        trend.observe("g", lag)
        now[0] += 1
    assert trend.growing("g") is None


def test_problems_come_worst_first():
    def group(name, state="Stable", failure=None, lag_growing=None):
        return {"group": name, "state": state, "generation": 4, "failure": failure, "lag_growing": lag_growing}

    found = problems([{"slot": 0, "server": "1"}, {"slot": 1, "server": None}],
                     [group("a", lag_growing=[1, 2, 3]), group("b", "PreparingRebalance"),
                      group("c", "PreparingRebalance", failure={"generation": 4, "attempts": 3, "error": "boom"}),
                      group("d")])
    assert [(p["kind"], p["subject"]) for p in found] == [(FAILED, "c"), (VACANT_SLOT, "slot 1"), (REBALANCING, "b"),
                                                          (LAG_GROWING, "a")]
    assert "boom" in found[0]["text"] and found[3]["text"] == "lag growing: 1 \u2192 2 \u2192 3"


def test_a_rounds_trigger_names_no_topic_the_viewer_may_not_see():
    record = {"generation": 3, "trigger": "member a joined; topic secret now has 4 partition(s); "
                                          "topic t now has 2 partition(s)"}
    shown = hide_topics(record, lambda topic: topic == "t")
    assert shown == {"generation": 3, "trigger": "member a joined; a topic changed; topic t now has 2 partition(s)"}


def test_a_member_whose_lease_is_running_out_is_a_problem_after_a_rebalance_and_before_lag():
    # A member is asked every third of its session: more than two thirds of
    # its lease gone means a request went unanswered.
    members = [{"consumer_id": "fresh", "lease_remaining_ms": 2500, "session_timeout_ms": 3000},
               {"consumer_id": "late", "lease_remaining_ms": 900, "session_timeout_ms": 3000},
               {"consumer_id": "zk-only", "lease_remaining_ms": None, "session_timeout_ms": 3000},
               {"consumer_id": "away", "lease_remaining_ms": None, "session_timeout_ms": 3000, "connected": False}]
    assert [m["consumer_id"] for m in expiring(members)] == ["late"]
    group = {"group": "g", "state": "Stable", "generation": 4, "failure": None, "lag_growing": [1, 2, 3],
             "expiring": [{"consumer_id": "late", "lease_remaining_ms": 900, "session_timeout_ms": 3000}]}
    rebalancing = {"group": "h", "state": "PreparingRebalance", "generation": 2, "failure": None,
                   "lag_growing": None}
    found = problems([], [group, rebalancing])
    assert [(p["kind"], p["subject"]) for p in found] == [(REBALANCING, "h"), (EXPIRING, "g"), (LAG_GROWING, "g")]
    assert found[1]["text"].startswith("member late's lease runs out in 0.9 s (session 3.0 s)")
