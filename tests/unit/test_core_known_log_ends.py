"""The log ends learnt from the partitions' leaders alone (core/known_log_ends.py)."""

from zkcoord.coordinator.core.known_log_ends import KnownLogEnds, beyond_log_end
from zkcoord.records import LogEnd

TP = ("t", 0)


def test_a_later_leader_replaces_what_was_learnt_even_lower_and_an_older_answer_does_not():
    ends = KnownLogEnds()
    first, second = ends.question([TP]), ends.question([TP])
    assert ends.learn({TP: LogEnd(100, leader_epoch=1)}, second) == {TP: 100}
    # An answer to the earlier question, from the same leader, is older: it
    # changes nothing, and the later answer judges that question's offsets.
    assert ends.learn({TP: LogEnd(120, leader_epoch=1)}, first) == {TP: 100}
    assert ends.of(TP) == 100
    # A later leader's log lost its tail: what it says is the log end, lower or not.
    assert ends.learn({TP: LogEnd(80, leader_epoch=2)}, first) == {TP: 80}
    assert ends.of(TP) == 80
    # Within one leader's epoch, an answer to an earlier question replaces nothing.
    third = ends.question([TP])
    assert ends.learn({TP: LogEnd(90, leader_epoch=2)}, third) == {TP: 90}
    assert ends.learn({TP: LogEnd(95, leader_epoch=2)}, second) == {TP: 90} and ends.of(TP) == 90


def test_a_topic_deleted_or_created_again_starts_its_logs_anew_and_answers_about_the_old_one_are_ignored():
    ends = KnownLogEnds()
    ends.topic_changed("t", 2, "id-1")
    asked = ends.question([TP, ("t", 1)])
    ends.learn({TP: LogEnd(50), ("t", 1): LogEnd(60)}, asked)
    ends.topic_changed("t", 1, "id-1")  # shrunk: partition 1 is gone
    assert ends.of(TP) == 50 and ends.of(("t", 1)) == -1
    ends.topic_changed("t", 1, "id-2")  # created again
    assert ends.of(TP) == -1
    assert ends.renewed([TP], asked) == {TP}
    assert ends.learn({TP: LogEnd(70)}, asked) == {} and ends.of(TP) == -1


def test_an_offset_may_be_the_log_end_but_not_beyond_nor_unchecked():
    assert beyond_log_end(TP, 10, 10) is None
    assert "beyond" in beyond_log_end(TP, 11, 10)
    assert "could not be checked" in beyond_log_end(TP, 1, None)
