"""The checks on Kafka's verifiable clients' event streams
(zkcoord.testing.verifiable_events), on hand-made streams: a sound group
passes every check, and each stream below breaks exactly the rule it is named for."""

from __future__ import annotations

import pytest

from zkcoord.testing import verifiable_events as ve

T = "t"


def assigned(ts, *partitions):
    return {"name": "partitions_assigned", "timestamp": ts, "partitions": [{"topic": T, "partition": p}
                                                                           for p in partitions]}


def revoked(ts, *partitions):
    return {"name": "partitions_revoked", "timestamp": ts, "partitions": [{"topic": T, "partition": p}
                                                                          for p in partitions]}


def consumed(ts, partition, first, last, count=None):
    count = last - first + 1 if count is None else count
    return {"name": "records_consumed", "timestamp": ts, "count": count, "partitions": [
        {"topic": T, "partition": partition, "count": count, "minOffset": first, "maxOffset": last}]}


def committed(ts, partition, offset, success=True):
    return {"name": "offsets_committed", "timestamp": ts, "success": success,
            "offsets": [{"topic": T, "partition": partition, "offset": offset}]}


def shutdown(ts):
    return {"name": "shutdown_complete", "timestamp": ts}


def sent(partition, offset):
    return {"name": "producer_send_success", "timestamp": 0, "topic": T, "partition": partition, "offset": offset,
            "key": None, "value": str(offset)}


# A group of two over partitions 0 and 1: "a" reads both, "b" joins (eager: both
# revoke, each gets one), "a" leaves cleanly, "b" reads the rest of both.
SOUND = {
    "a": [{"name": "startup_complete", "timestamp": 1}, assigned(2, 0, 1), consumed(3, 0, 0, 4), committed(4, 0, 5),
          consumed(5, 1, 0, 2), committed(6, 1, 3), revoked(10), assigned(12, 0), consumed(13, 0, 5, 6),
          committed(14, 0, 7), revoked(20, 0), shutdown(21)],
    "b": [{"name": "startup_complete", "timestamp": 9}, revoked(10), assigned(12, 1), consumed(13, 1, 3, 3),
          committed(14, 1, 4), revoked(21, 1), assigned(22, 0, 1), consumed(23, 0, 7, 9), committed(24, 0, 10),
          consumed(25, 1, 4, 5), committed(26, 1, 6)],
}
ACKED = [sent(0, o) for o in range(10)] + [sent(1, o) for o in range(6)]


def all_violations(streams, incremental=False):
    found = [v for client, events in streams.items() for v in ve.consumer_violations(client, events, incremental)]
    return found + ve.group_violations(ve.merge(streams))


def test_a_sound_group_passes_every_check():
    merged = ve.merge(SOUND)
    assert all_violations(SOUND) == []
    assert ve.lost(ve.acked(ACKED), merged) == []
    assert list(ve.duplicates(merged)) == []
    assert ve.last_commits(merged) == {(T, 0): 10, (T, 1): 6}


def test_a_record_acknowledged_and_never_consumed_is_lost():
    acked = ve.acked(ACKED + [sent(1, 6), {"name": "producer_send_error", "timestamp": 0, "topic": T}])
    assert ve.lost(acked, ve.merge(SOUND)) == [((T, 1), 6)]


def test_a_record_read_twice_is_a_duplicate_dated_by_its_second_read():
    streams = {**SOUND, "b": SOUND["b"] + [consumed(30, 1, 5, 5)]}
    assert list(ve.duplicates(ve.merge(streams))) == [ve.Duplicate(((T, 1), 5), "b", 30)]


def only(violations, *kinds):
    assert [v.kind for v in violations] == list(kinds), [str(v) for v in violations]


@pytest.mark.parametrize("events,incremental,kinds", [
    ([consumed(1, 0, 0, 1)], False, (ve.NOT_JOINED, ve.NOT_ASSIGNED)),
    ([assigned(1, 0), revoked(2), consumed(3, 0, 0, 1)], False, ve.NOT_JOINED),
    ([assigned(1, 1), consumed(2, 0, 0, 1)], False, ve.NOT_ASSIGNED),
    ([assigned(1, 0), consumed(2, 0, 0, 4), consumed(3, 0, 7, 9)], False, ve.UNEXPECTED_OFFSET),
    ([assigned(1, 0), consumed(2, 0, 0, 4), consumed(3, 0, 3, 9)], False, ve.UNEXPECTED_OFFSET),
    ([assigned(1, 0), consumed(2, 0, 0, 4, count=3)], False, ve.NOT_CONTIGUOUS),
    ([assigned(1, 0), consumed(2, 0, 0, 4), committed(3, 0, 6)], False, ve.COMMITTED_UNREAD),
    ([assigned(1, 0), consumed(2, 0, 0, 4), assigned(3, 1), committed(4, 0, 5)], False, ve.COMMITTED_UNHELD),
    ([assigned(1, 0), revoked(2, 1), assigned(3, 0)], True, ve.REVOKED_UNHELD),
    # Cooperative: an assignment adds, so the first partition is still held.
    ([assigned(1, 0), consumed(2, 0, 0, 4), assigned(3, 1), consumed(4, 1, 0, 0), revoked(5, 0), assigned(6),
      consumed(7, 0, 5, 5)], True, ve.NOT_ASSIGNED),
], ids=["before-any-assignment", "after-a-revocation", "unassigned", "gap", "repeat", "not-contiguous",
        "commit-unread", "commit-unheld", "revoke-unheld", "cooperative-revoked"])
def test_each_of_one_consumers_rules_fails_the_stream_that_breaks_it(events, incremental, kinds):
    kinds = kinds if isinstance(kinds, tuple) else (kinds,)
    only(ve.consumer_violations("c", events, incremental), *kinds)


def test_a_failed_commit_is_no_commit():
    events = [assigned(1, 0), consumed(2, 0, 0, 4), committed(3, 0, 9, success=False)]
    assert ve.consumer_violations("c", events, False) == []
    assert ve.group_violations(ve.merge({"c": events})) == []


def test_reading_below_the_groups_last_commit_fails():
    # "b" starts from 3 although "a" committed 5 before it was given the partition.
    streams = {"a": [assigned(1, 0), consumed(2, 0, 0, 4), committed(3, 0, 5), revoked(4)],
               "b": [assigned(5, 0), consumed(6, 0, 3, 6), committed(7, 0, 7)]}
    only(all_violations(streams), ve.BEHIND_COMMITTED)


def test_reading_again_from_the_last_commit_is_allowed():
    # "a" read past its last commit and died: "b" reads again from that commit.
    streams = {"a": [assigned(1, 0), consumed(2, 0, 0, 4), committed(3, 0, 5), consumed(4, 0, 5, 8)],
               "b": [assigned(9, 0), consumed(10, 0, 5, 9), committed(11, 0, 10)]}
    assert all_violations(streams) == []
    assert [d.record for d in ve.duplicates(ve.merge(streams))] == [((T, 0), o) for o in range(5, 9)]


def test_committing_past_what_the_group_read_fails():
    streams = {"a": [assigned(1, 0), consumed(2, 0, 0, 4)], "b": [assigned(3, 1), committed(4, 0, 9)]}
    kinds = {v.kind for v in ve.group_violations(ve.merge(streams))}
    assert kinds == {ve.COMMITTED_AHEAD}


def test_a_commit_below_an_earlier_one_fails():
    # "a" committed 5 and died; its commit was not kept, "b" read from 2 and committed 4.
    streams = {"a": [assigned(1, 0), consumed(2, 0, 0, 4), committed(3, 0, 5)],
               "b": [assigned(4, 0), consumed(5, 0, 2, 3), committed(6, 0, 4)]}
    kinds = [v.kind for v in ve.group_violations(ve.merge(streams))]
    assert kinds == [ve.BEHIND_COMMITTED, ve.COMMITTED_BACKWARDS]


def test_merge_orders_by_time_and_keeps_a_clients_order_within_a_millisecond():
    merged = ve.merge({"a": [consumed(5, 0, 0, 0), committed(5, 0, 1)], "b": [assigned(3, 0)]})
    assert [(client, event["name"]) for client, event in merged] == [
        ("b", "partitions_assigned"), ("a", "records_consumed"), ("a", "offsets_committed")]


# "a" commits 5 at 3 and 9 at 8, and is killed at 10: its commit of 9 is in
# the crash's window (lost), that of 5 is not (kept).
BEFORE_CRASH = [assigned(1, 0), consumed(2, 0, 0, 4), committed(3, 0, 5), consumed(7, 0, 5, 8), committed(8, 0, 9)]


def test_a_crash_excuses_reading_again_from_the_last_commit_it_kept():
    streams = {"a": BEFORE_CRASH, "b": [assigned(12, 0), consumed(13, 0, 5, 10), committed(14, 0, 11)]}
    only(ve.group_violations(ve.merge(streams)), ve.BEHIND_COMMITTED)
    assert ve.group_violations(ve.merge(streams), [ve.Crash(at=10, window_ms=4)]) == []
    assert ve.group_violations(ve.merge(streams), [ve.Crash(at=10, window_ms=4, clients=frozenset("a"))]) == []


def test_a_crash_does_not_excuse_reading_below_a_commit_older_than_its_window():
    streams = {"a": BEFORE_CRASH, "b": [assigned(12, 0), consumed(13, 0, 3, 10), committed(14, 0, 11)]}
    only(ve.group_violations(ve.merge(streams), [ve.Crash(at=10, window_ms=4)]), ve.BEHIND_COMMITTED)
    # A window too short for the commit of 9 counts it as kept.
    streams = {"a": BEFORE_CRASH, "b": [assigned(12, 0), consumed(13, 0, 5, 10), committed(14, 0, 11)]}
    only(ve.group_violations(ve.merge(streams), [ve.Crash(at=10, window_ms=1)]), ve.BEHIND_COMMITTED)


def test_a_crash_of_one_client_keeps_the_others_commits():
    streams = {"a": BEFORE_CRASH, "b": [assigned(12, 0), consumed(13, 0, 5, 10), committed(14, 0, 11)]}
    only(ve.group_violations(ve.merge(streams), [ve.Crash(at=10, window_ms=4, clients=frozenset({"b"}))]),
         ve.BEHIND_COMMITTED)


def test_a_commit_lost_in_a_crash_does_not_return_in_a_later_one():
    streams = {"a": BEFORE_CRASH, "b": [assigned(12, 0), consumed(13, 0, 5, 6), committed(14, 0, 7)],
               "c": [assigned(30, 0), consumed(31, 0, 7, 7)]}
    crashes = [ve.Crash(at=10, window_ms=4), ve.Crash(at=20, window_ms=4)]
    assert ve.group_violations(ve.merge(streams), crashes) == []


def test_a_crash_may_lose_a_commit_acknowledged_just_after_it_but_no_later_one():
    # "a" commits 9 at 11, just after the kill at 10, by a broker that has
    # not yet seen its coordinator go; "b" then reads on from 5.
    late = BEFORE_CRASH[:3] + [consumed(7, 0, 5, 8), committed(11, 0, 9)]
    streams = {"a": late, "b": [assigned(14, 0), consumed(15, 0, 5, 10), committed(16, 0, 11)]}
    only(ve.group_violations(ve.merge(streams), [ve.Crash(at=10, window_ms=4)]), ve.BEHIND_COMMITTED)
    assert ve.group_violations(ve.merge(streams), [ve.Crash(at=10, window_ms=4, after_ms=2)]) == []
    # A commit later than after_ms counts as kept.
    later = BEFORE_CRASH[:3] + [consumed(7, 0, 5, 8), committed(13, 0, 9)]
    streams = {"a": later, "b": [assigned(14, 0), consumed(15, 0, 5, 10), committed(16, 0, 11)]}
    only(ve.group_violations(ve.merge(streams), [ve.Crash(at=10, window_ms=4, after_ms=2)]), ve.BEHIND_COMMITTED)
