"""The pure parts of `zkcoord groups`: a group's state as Kafka names it,
the tables, and reset-offsets' arguments and plan."""

from datetime import datetime, timedelta, timezone

import pytest

from zkcoord.admin import groups
from zkcoord.admin.reset import Mode, ResetArgumentError, parse_datetime, parse_duration, parse_topic, plan_offsets
from zkcoord.zk import layout

T0, T1 = ("t", 0), ("t", 1)


@pytest.mark.parametrize("state,owners,failure,offsets,name", [
    (None, {}, None, False, "Dead"),
    (None, {}, None, True, "Empty"),
    (layout.GroupState(3, "range", {}), {}, None, True, "Empty"),
    (layout.GroupState(3, "range", {"a": (T0,)}), {T0: "a"}, None, True, "Stable"),
    (layout.GroupState(3, "range", {"a": (T0,), "b": ()}), {T0: "a"}, None, True, "Stable"),
    (layout.GroupState(3, "range", {"a": (T0,), "b": (T1,)}), {T0: "a", T1: "a"}, None, True, "PreparingRebalance"),
    (layout.GroupState(3, "range", {"a": (T0,)}), {T0: "a"}, layout.GroupFailure(3, 4, "x"), True,
     "PreparingRebalance"),
])
def test_a_groups_state_is_named_as_kafka_names_it(state, owners, failure, offsets, name):
    assert groups.state_name(state, owners, failure, offsets) == name


def test_tables_are_left_aligned_with_kafkas_fixed_widths():
    lines = groups.table(["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"], [["g", "events", "0", "5"]], {2: 10})
    assert lines == ["GROUP TOPIC  PARTITION  NEW-OFFSET", "g     events 0          5"]


@pytest.mark.parametrize("text,expected", [
    ("P1D", timedelta(days=1)), ("PT2H30M", timedelta(hours=2, minutes=30)),
    ("P1DT1H1M1.5S", timedelta(days=1, hours=1, minutes=1, seconds=1.5)), ("-PT5M", -timedelta(minutes=5)),
    ("pt10s", timedelta(seconds=10)),
])
def test_durations_are_iso_8601(text, expected):
    assert parse_duration(text) == expected


@pytest.mark.parametrize("text", ["", "P", "PT", "1D", "P1H", "PT1D", "P1DT", "yesterday"])
def test_bad_durations_are_argument_errors(text):
    with pytest.raises(ResetArgumentError):
        parse_duration(text)


def test_datetimes_take_kafkas_form_with_or_without_a_zone():
    assert parse_datetime("2024-05-01T12:00:00.000Z") == 1714564800000
    assert parse_datetime("2024-05-01T14:00:00.000+02:00") == 1714564800000
    local = datetime(2024, 5, 1, 12, 0).astimezone()  # no zone: the local one, as Kafka's tool reads it
    assert parse_datetime("2024-05-01T12:00:00") == int(local.astimezone(timezone.utc).timestamp() * 1000)
    with pytest.raises(ResetArgumentError):
        parse_datetime("May 1st")


@pytest.mark.parametrize("spec,expected", [("t", ("t", None)), ("t:2,0,2", ("t", (0, 2)))])
def test_topics_name_all_or_some_partitions(spec, expected):
    assert parse_topic(spec) == expected


@pytest.mark.parametrize("spec", ["", "a/b", "t:", "t:x", "t:-1", "t:1,,2"])
def test_bad_topics_are_argument_errors(spec):
    with pytest.raises(ResetArgumentError):
        parse_topic(spec)


LOW, HIGH = {T0: 10, T1: 0}, {T0: 100, T1: 50}


@pytest.mark.parametrize("mode,at_time,expected", [
    (Mode("earliest"), None, {T0: 10, T1: 0}),
    (Mode("latest"), None, {T0: 100, T1: 50}),
    (Mode("offset", 60), None, {T0: 60, T1: 50}),  # clamped to the log end
    (Mode("offset", 0), None, {T0: 10, T1: 0}),  # and to the log start
    (Mode("time", 1), {T0: 42, T1: -1}, {T0: 42, T1: 50}),  # no record since: the log end
    (Mode("shift", -30), None, {T0: 10, T1: 0}),
    (Mode("shift", 7), None, {T0: 27, T1: 12}),
])
def test_the_plan_is_clamped_to_each_log(mode, at_time, expected):
    assert plan_offsets(mode, [T0, T1], {T0: 20, T1: 5}, LOW, HIGH, at_time) == expected


def test_a_shift_needs_a_committed_offset():
    with pytest.raises(ResetArgumentError, match="t-1 has no committed offset"):
        plan_offsets(Mode("shift", 1), [T0, T1], {T0: 20}, LOW, HIGH)


def test_the_history_is_printed_newest_first_with_the_error_in_place_of_the_reason():
    view = {"group": "g", "generation": 3, "strategy": "range", "state": "Stable", "failure": None,
            "coordinator": {"server": "1", "host": None, "port": None, "slot": 0, "slots": 1, "epoch": 2},
            "history": [
                {"started_ms": 1_700_000_000_000, "generation": 2, "outcome": "superseded", "duration_ms": 40,
                 "members": 2, "moved": 1, "paused": 1, "paused_ms": 30, "trigger": "member b joined",
                 "reason": "1 partition(s) not owned", "error": "member b: its connection closed"},
                {"started_ms": 1_700_000_004_250, "generation": 3, "outcome": "completed", "duration_ms": 12,
                 "members": 1, "moved": 1, "paused": 0, "paused_ms": 0,
                 "trigger": "member b left: its connection closed", "reason": "ownership differs", "error": None}]}
    lines = groups.render_history(view)
    header = lines.index(next(line for line in lines if line.startswith("STARTED")))
    assert lines[header + 1].split()[:9] == ["2023-11-14", "22:13:24.250", "3", "completed", "12", "ms", "1", "1", "0"]
    assert lines[header + 1].endswith("member b left: its connection closed ownership differs")
    assert lines[header + 2].split()[2:4] == ["2", "superseded"]
    assert lines[header + 2].endswith("member b: its connection closed")
    assert groups.render_history({**view, "history": []})[-1] == "Consumer group 'g' has no rebalance recorded."
