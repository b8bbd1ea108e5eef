"""The drill's checker over hand-made histories: every invariant it judges,
found when broken and not found when kept, including the interleavings at the
edge (a poll that straddles another member's Start)."""

from __future__ import annotations

import json
import re

import pytest

from zkcoord.drill.checker import check
from zkcoord.drill.history import Delivery, FaultRecord, History, OwnershipEvent, Produced, Sample

P0 = ("t", 0)
P1 = ("t", 1)


def produced(tp, offsets):
    return [Produced(tp[0], tp[1], o, seq=o, ts=0.0) for o in offsets]


def delivered(member, tp, offsets, began, returned=None):
    return [Delivery(member, tp[0], tp[1], o, began, began + 0.01 if returned is None else returned)
            for o in offsets]


def start(member, ts, *tps):
    return OwnershipEvent(member, ts, True, tuple(tps))


def stop(member, ts, *tps):
    return OwnershipEvent(member, ts, False, tuple(tps))


def fault(index, kind, injected, whole_at, planned=False, bound=10.0, restored=None, rejoined_at=None):
    return FaultRecord(index=index, kind=kind, target="x", planned=planned, injected=injected,
                       restored=injected if restored is None else restored, recovery_from=injected,
                       whole_at=whole_at, bound_s=bound, rejoined_at=whole_at if rejoined_at is None else rejoined_at)


def history(produced=(), deliveries=(), events=(), samples=(), faults=()):
    return History(list(produced), list(deliveries), sorted(events, key=lambda e: e.ts), list(samples), list(faults))


def test_a_clean_handoff_breaks_nothing():
    verdict = check(history(
        produced=produced(P0, range(10)),
        deliveries=delivered("a", P0, range(5), began=1.0) + delivered("b", P0, range(5, 10), began=6.0),
        events=[start("a", 0.5, P0), stop("a", 5.0, P0), start("b", 5.5, P0)],
        samples=[Sample(2.0, {P0: "a"}, {P0: 5}), Sample(7.0, {P0: "b"}, {P0: 10})],
        faults=[fault(1, "member-join", 4.9, 5.6, planned=True)],
    ))
    assert verdict.ok, verdict.violations
    assert (verdict.produced, verdict.delivered) == (10, 10)
    assert verdict.summary_line() == ("faults 1; lost 0; duplicates 0 (planned 0); double ownership 0 (max 0 ms); "
                                      "offset regressions 0; max time to whole 0.7 s")


def test_an_acknowledged_record_never_delivered_is_lost():
    verdict = check(history(produced=produced(P0, range(6)), deliveries=delivered("a", P0, [0, 1, 2, 3, 5], 1.0),
                            events=[start("a", 0.5, P0)]))
    assert verdict.lost == [(P0, 4)]
    assert not verdict.ok


def test_redelivery_on_a_planned_change_is_a_planned_duplicate():
    verdict = check(history(
        produced=produced(P0, range(7)),
        deliveries=delivered("a", P0, range(5), began=1.0) + delivered("b", P0, range(3, 7), began=6.0),
        events=[start("a", 0.5, P0), stop("a", 5.0, P0), start("b", 5.5, P0)],
        faults=[fault(1, "member-leave", 4.9, 5.6, planned=True)],
    ))
    assert [(d.offset, d.member, d.fault, d.planned) for d in verdict.duplicates] == [
        (3, "b", 1, True), (4, "b", 1, True)]
    assert verdict.violations["planned duplicates"] == 2
    assert "duplicates 2 (planned 2)" in verdict.summary_line()


def test_redelivery_with_no_fault_around_counts_as_planned():
    verdict = check(history(
        produced=produced(P0, range(3)),
        deliveries=delivered("a", P0, range(3), began=1.0) + delivered("b", P0, [2], began=30.0),
        events=[start("a", 0.5, P0), stop("a", 20.0, P0), start("b", 29.0, P0)],
        faults=[fault(1, "consumer-kill", 4.0, 6.0)],
    ))
    assert [d.planned for d in verdict.duplicates] == [True]


def test_redelivery_after_a_crash_is_allowed_within_the_uncommitted_window():
    verdict = check(history(
        produced=produced(P0, range(7)),
        deliveries=delivered("a", P0, range(5), began=1.0) + delivered("b", P0, range(3, 7), began=9.0),
        events=[start("a", 0.5, P0), start("b", 8.0, P0)],
        samples=[Sample(2.0, {P0: "a"}, {P0: 3})],
        faults=[fault(1, "consumer-kill", 4.0, 8.5)],
    ))
    assert [(d.offset, d.planned, d.below_committed) for d in verdict.duplicates] == [(3, False, None),
                                                                                       (4, False, None)]
    assert verdict.ok, verdict.violations


def test_redelivery_below_a_committed_offset_is_a_violation_even_after_a_crash():
    verdict = check(history(
        produced=produced(P0, range(6)),
        deliveries=delivered("a", P0, range(5), began=1.0) + delivered("b", P0, range(2, 6), began=9.0),
        events=[start("a", 0.5, P0), start("b", 8.0, P0)],
        samples=[Sample(2.0, {P0: "a"}, {P0: 3}), Sample(8.5, {P0: "b"}, {P0: 3})],
        faults=[fault(1, "consumer-kill", 4.0, 8.5)],
    ))
    assert [d.offset for d in verdict.duplicates_below_committed] == [2]
    assert not verdict.ok


def test_a_member_delivering_after_another_was_started_is_double_ownership():
    # b is started on p0 at t=10 while a never obeyed a Stop (it was paused):
    # a's polls that began after 10 s are double ownership, one episode.
    verdict = check(history(
        produced=produced(P0, range(8)),
        deliveries=(delivered("a", P0, [0, 1], began=1.0) + delivered("a", P0, [2, 3], began=11.0)
                    + delivered("a", P0, [4], began=12.5) + delivered("b", P0, [2, 3, 4, 5, 6, 7], began=10.5)),
        events=[start("a", 0.5, P0), start("b", 10.0, P0)],
        faults=[fault(1, "consumer-pause-long", 5.0, 13.0)],
    ))
    [episode] = verdict.double_ownership
    assert (episode.tp, episode.member, episode.superseded_by, episode.deliveries, episode.fault) == (
        P0, "a", "b", 3, 1)
    assert episode.length_ms == pytest.approx(2500)
    assert "double ownership 1 (max 2500 ms)" in verdict.summary_line()
    assert not verdict.ok


def test_a_poll_that_began_before_the_other_start_is_not_counted():
    # The poll ran from 9.9 to 10.1 s and b was started at 10.0 s: the records
    # may have reached a before b was started, so this is not proof.
    verdict = check(history(
        produced=produced(P0, range(4)),
        deliveries=delivered("a", P0, [0, 1], began=9.9, returned=10.1) + delivered("b", P0, [2, 3], began=10.2),
        events=[start("a", 0.5, P0), stop("a", 9.95, P0), start("b", 10.0, P0)],
    ))
    assert verdict.double_ownership == []


def test_a_member_started_again_owns_the_partition_again():
    verdict = check(history(
        produced=produced(P0, range(6)),
        deliveries=(delivered("a", P0, [0, 1], began=1.0) + delivered("b", P0, [2, 3], began=6.0)
                    + delivered("a", P0, [4, 5], began=21.0)),
        events=[start("a", 0.5, P0), stop("a", 5.0, P0), start("b", 5.5, P0), stop("b", 19.0, P0),
                start("a", 20.0, P0)],
        samples=[Sample(30.0, {P0: "a"}, {P0: 6})],
    ))
    assert verdict.double_ownership == [] and verdict.deliveries_after_stop == [] and verdict.ok


def test_ownership_is_judged_per_partition():
    verdict = check(history(
        produced=produced(P0, range(2)) + produced(P1, range(2)),
        deliveries=delivered("a", P0, [0, 1], began=12.0) + delivered("b", P1, [0, 1], began=12.0),
        events=[start("a", 0.5, P0), start("b", 10.0, P1)],
    ))
    assert verdict.double_ownership == []


def test_a_committed_offset_moving_back_is_a_regression():
    verdict = check(history(samples=[Sample(1.0, {}, {P0: 5}), Sample(2.0, {}, {P0: 7}), Sample(3.0, {}, {P0: 6}),
                                     Sample(4.0, {}, {P0: 7})]))
    assert [(r.tp, r.before, r.after, r.at) for r in verdict.offset_regressions] == [(P0, 7, 6, 3.0)]


def test_a_commit_beyond_what_was_delivered_is_reported_once():
    verdict = check(history(
        produced=produced(P0, range(10)),
        deliveries=delivered("a", P0, range(5), began=1.0) + delivered("a", P0, range(5, 10), began=5.0),
        events=[start("a", 0.5, P0)],
        samples=[Sample(2.0, {}, {P0: 5}), Sample(3.0, {}, {P0: 10}), Sample(4.0, {}, {P0: 10}),
                 Sample(6.0, {}, {P0: 10})],
    ))
    assert [(c.committed, c.delivered_next, c.at) for c in verdict.commits_ahead] == [(10, 5, 3.0)]


def test_a_group_not_whole_within_its_bound_is_a_liveness_violation():
    verdict = check(history(faults=[fault(1, "coordinator-kill", 0.0, 5.0, bound=8.0),
                                    fault(2, "coordinator-kill", 10.0, 21.0, bound=8.0),
                                    fault(3, "zk-quorum-loss", 30.0, None, bound=8.0),
                                    fault(4, "consumer-pause-long", 40.0, 42.0, bound=8.0, rejoined_at=-1.0)]))
    verdict.faults[3].rejoined_at = None  # whole while the member was paused, never again once it resumed
    assert [f.index for f in verdict.slow_recoveries] == [2, 3, 4]
    assert verdict.max_time_to_whole == pytest.approx(11.0)


def test_the_summary_line_keeps_its_format():
    line = check(history()).summary_line()
    assert re.fullmatch(r"faults \d+; lost \d+; duplicates \d+ \(planned \d+\); double ownership \d+ "
                        r"\(max \d+ ms\); offset regressions \d+; max time to whole \d+\.\d s", line), line


def test_a_stale_members_repeats_fall_under_the_fault_that_made_it_stale():
    # a was paused; b took p0 over at 10 s; a, resumed, delivers 2..3 again at
    # 11 s. a's own Start (0.5 s) lies before any fault, so the repeats are
    # attributed by when they were delivered: under fault 1, not planned.
    verdict = check(history(
        produced=produced(P0, range(4)),
        deliveries=(delivered("a", P0, [0, 1], began=1.0) + delivered("b", P0, [2, 3], began=10.5)
                    + delivered("a", P0, [2, 3], began=11.0)),
        events=[start("a", 0.5, P0), start("b", 10.0, P0)],
        faults=[fault(1, "consumer-pause-long", 5.0, 10.6, restored=10.4)],
    ))
    assert [(d.member, d.fault, d.planned) for d in verdict.duplicates] == [("a", 1, False), ("a", 1, False)]
    assert len(verdict.double_ownership) == 1


def test_a_member_delivering_after_its_own_stop_is_reported_apart():
    verdict = check(history(
        produced=produced(P0, range(4)),
        deliveries=delivered("a", P0, [0, 1], began=1.0) + delivered("a", P0, [2, 3], began=6.0),
        events=[start("a", 0.5, P0), stop("a", 5.0, P0)],
        samples=[Sample(7.0, {}, {P0: 4})],
    ))
    assert verdict.double_ownership == []
    [episode] = verdict.deliveries_after_stop
    assert (episode.member, episode.superseded_by, episode.start, episode.deliveries) == ("a", "a", 5.0, 2)
    assert verdict.violations["deliveries after the member's own Stop"] == 1 and not verdict.ok


def test_a_stale_member_is_blamed_on_the_fault_under_way_not_on_the_change_that_started_it():
    # a was started during a planned join (fault 1), later paused (fault 2):
    # its repeats of what b delivered belong to fault 2, not to the join.
    verdict = check(history(
        produced=produced(P0, range(4)),
        deliveries=(delivered("a", P0, [0, 1], began=2.0) + delivered("b", P0, [2, 3], began=20.5)
                    + delivered("a", P0, [2, 3], began=21.0)),
        events=[start("a", 1.0, P0), start("b", 20.0, P0)],
        faults=[fault(1, "member-join", 0.5, 1.5, planned=True), fault(2, "consumer-pause-long", 15.0, 20.6)],
    ))
    assert [(d.member, d.fault, d.planned) for d in verdict.duplicates] == [("a", 2, False), ("a", 2, False)]


def test_after_an_interrupted_run_only_skipped_records_count_as_lost():
    records = produced(P0, range(10))
    verdict = check(history(
        produced=records, deliveries=delivered("a", P0, [0, 1, 3, 4], began=1.0),
        events=[start("a", 0.5, P0)], samples=[Sample(2.0, {P0: "a"}, {P0: 5})],
    ), interrupted=True)
    assert verdict.lost == [(P0, 2)]  # below the committed 5: skipped for good
    assert verdict.undelivered == 5   # 5..9: the run stopped before the group got there
    complete = check(history(produced=records, deliveries=delivered("a", P0, [0, 1, 3, 4], began=1.0),
                             events=[start("a", 0.5, P0)], samples=[Sample(2.0, {P0: "a"}, {P0: 5})]))
    assert len(complete.lost) == 6 and complete.undelivered == 0


def test_one_drop_of_a_committed_offset_is_one_regression_however_long_it_stays():
    verdict = check(history(samples=[Sample(1.0, {}, {P0: 10})] + [Sample(2.0 + i, {}, {P0: 5}) for i in range(5)]))
    assert len(verdict.offset_regressions) == 1


def test_a_history_with_nothing_in_it_proves_nothing():
    verdict = check(history())
    assert verdict.violations["empty history (nothing produced or sampled)"] == 1 and not verdict.ok


def test_the_members_of_a_big_group_crowd_are_judged_with_the_consumers(tmp_path):
    """A crowd (many members in one process, the big-group fault) writes its
    records and events under consumer-crowd-F/: a consumer delivering a
    partition after a crowd member was started on it is double ownership."""
    def write(directory, name, lines):
        (tmp_path / directory).mkdir(exist_ok=True)
        (tmp_path / directory / name).write_text("".join(json.dumps(line) + "\n" for line in lines))

    def event(member, ts, kind):
        return {"ts": ts, "member": member, "event": kind, "partitions": [["t", 0]], "epoch": 1, "generation": 1}

    def record(member, offset, ts):
        return {"topic": "t", "partition": 0, "offset": offset, "value": "", "member": member, "ts": ts,
                "te": ts + 0.01}

    write("consumer-1", "events.jsonl", [event("a", 1.0, "start")])
    write("consumer-1", "records.jsonl", [record("a", 0, 2.0), record("a", 1, 6.0)])
    write("consumer-crowd-2", "events.jsonl", [event("crowd-member", 5.0, "start")])
    write("consumer-crowd-2", "records.jsonl", [record("crowd-member", 1, 5.5)])
    loaded = History.load(tmp_path)
    assert {d.member for d in loaded.deliveries} == {"a", "crowd-member"}
    verdict = check(loaded)
    assert [(w.member, w.superseded_by, w.start) for w in verdict.double_ownership] == [("a", "crowd-member", 5.0)]


def test_a_repeat_after_a_planned_change_is_blamed_on_the_fault_that_ended_the_first_tenure():
    # a delivered 0-2 and was cut off (fault 1, unplanned) before its commit
    # landed; another member took over in that fault. A planned join later
    # moves the partition again, and c repeats 1-2 from the old commit: the
    # cut lost that commit, not the join.
    verdict = check(history(
        produced=produced(P0, range(3)),
        deliveries=(delivered("a", P0, range(3), began=1.0) + delivered("b", P0, [], began=5.0)
                    + delivered("c", P0, [1, 2], began=12.0)),
        events=[start("a", 0.5, P0), start("b", 4.0, P0), stop("b", 11.0, P0), start("c", 11.5, P0)],
        samples=[Sample(0.9, {P0: "a"}, {P0: 1})],
        faults=[fault(1, "stock-member-group-cut", 1.5, 6.0), fault(2, "member-join", 10.5, 12.5, planned=True)],
    ))
    assert [(d.offset, d.fault, d.planned) for d in verdict.duplicates] == [(1, 1, False), (2, 1, False)]


def test_a_tenure_that_ended_cleanly_long_after_a_fault_leaves_a_repeat_planned():
    verdict = check(history(
        produced=produced(P0, range(3)),
        deliveries=delivered("a", P0, range(3), began=1.0) + delivered("b", P0, [2], began=21.0),
        events=[start("a", 0.5, P0), stop("a", 20.0, P0), start("b", 20.5, P0)],
        faults=[fault(1, "consumer-kill", 4.0, 6.0), fault(2, "member-leave", 19.5, 21.5, planned=True)],
    ))
    assert [(d.fault, d.planned) for d in verdict.duplicates] == [(2, True)]


def test_a_planned_change_right_after_an_unplanned_fault_keeps_the_blame_for_what_it_ended():
    # The kill (of another process) is over at 5.0; the join at 6.0 ends a's
    # tenure at 6.3 and c repeats what a delivered after the kill: the join's.
    verdict = check(history(
        produced=produced(P0, range(3)),
        deliveries=delivered("a", P0, range(3), began=5.6) + delivered("c", P0, [1, 2], began=6.5),
        events=[start("a", 0.5, P0), stop("a", 6.3, P0), start("c", 6.4, P0)],
        faults=[fault(1, "consumer-kill", 4.0, 5.0), fault(2, "member-join", 6.0, 7.0, planned=True)],
    ))
    assert [(d.fault, d.planned) for d in verdict.duplicates] == [(2, True), (2, True)]


def test_the_blame_follows_the_latest_deliverer_not_the_first():
    # a crashed in fault 1 and b took over, delivering 3-4 itself well after;
    # a planned leave then repeats 3-4 at c: b's commit was the change's to keep.
    verdict = check(history(
        produced=produced(P0, range(5)),
        deliveries=(delivered("a", P0, range(5), began=1.0) + delivered("b", P0, range(2, 5), began=10.0)
                    + delivered("c", P0, [3, 4], began=31.0)),
        events=[start("a", 0.5, P0), start("b", 9.5, P0), stop("b", 30.2, P0), start("c", 30.5, P0)],
        faults=[fault(1, "consumer-kill", 2.0, 9.6), fault(2, "member-leave", 30.0, 31.0, planned=True)],
    ))
    assert [(d.member, d.fault, d.planned) for d in verdict.duplicates] == [
        ("b", 1, False), ("b", 1, False), ("b", 1, False), ("c", 2, True), ("c", 2, True)]
