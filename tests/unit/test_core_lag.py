"""Consumer lag (core/lag.py): committed offsets against the log ends learnt, refreshed now and then."""

import dataclasses

from zkcoord.coordinator import actions
from zkcoord.coordinator.core.lag import ConsumerLag
from zkcoord.records import LogEnd

from tests.unit.core_harness import CONFIG
from tests.unit.parts_kit import Kit

REFRESH = dataclasses.replace(CONFIG, lag_refresh_ms=1000)


def lag_kit(config=REFRESH):
    kit = Kit(config)
    offsets = kit.build_offsets()
    kit.groups.named("g")
    lag = ConsumerLag(config, kit.office, kit.out, kit.groups, offsets, kit.log_ends)
    kit.routes["lag"] = lambda key, now: lag.due(now)
    return kit, offsets, lag


def asked(done) -> list:
    return [a for a in done if isinstance(a, actions.ReadLogEnds)]


def test_the_lag_is_the_log_ends_learnt_less_the_committed_offsets_by_group_and_topic():
    kit, offsets, lag = lag_kit(CONFIG)
    offsets.committed["g"] = {("t", 0): 10, ("t", 1): 50, ("t", 2): 7, ("u", 0): 3}
    offsets.committed["gone"] = {("t", 0): 0}  # no longer a group of this coordinator
    question = kit.log_ends.question([("t", 0), ("t", 1), ("u", 0)])
    kit.log_ends.learn({("t", 0): LogEnd(25), ("t", 1): LogEnd(40), ("u", 0): LogEnd(3)}, question)
    # t-1's end learnt before a commit beyond it counts 0, never less; t-2's end is not known: left out.
    assert lag.by_topic() == {("g", "t"): 15, ("g", "u"): 0}
    lag.start(kit.now)
    assert not asked(kit.settle()) and ("lag",) not in kit.timers  # 0: never asked


def test_the_leaders_are_asked_every_interval_one_question_at_a_time_and_only_in_office():
    kit, offsets, lag = lag_kit()
    offsets.committed["g"] = {("t", 0): 10, ("t", 1): 20}
    lag.start(kit.now)
    kit.zk.default_log_end = 100
    kit.advance(1.0)
    assert lag.by_topic() == {("g", "t"): 90 + 80}
    kit.zk.default_log_end = 130
    kit.advance(1.0)
    assert lag.by_topic() == {("g", "t"): 120 + 110}
    # A question not answered yet is not asked again.
    done = []
    kit.out.emit = lambda action, emit=kit.out.emit: done.append(action) or emit(action)
    lag.due(kit.now)
    lag.due(kit.now)
    assert len(asked(done)) == 1
    kit.settle()
    # Out of office (the ZooKeeper connection suspended), nothing is asked; the timer still runs.
    kit.office.session_suspended()
    done.clear()
    kit.advance(2.0)
    assert not asked(done) and ("lag",) in kit.timers


def test_a_leader_that_does_not_answer_leaves_the_lag_as_it_was():
    kit, offsets, lag = lag_kit()
    offsets.committed["g"] = {("t", 0): 10}
    lag.start(kit.now)
    kit.zk.default_log_end = 100
    kit.advance(1.0)
    kit.zk.default_log_end = None  # its leader does not say
    kit.advance(1.0)
    assert lag.by_topic() == {("g", "t"): 90}
