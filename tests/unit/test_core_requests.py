"""Requests to members alone (core/requests.py): one at a time per member, dated, with deadlines, on a manual clock."""

from zkcoord import wire
from zkcoord.coordinator.core.observed import EXPIRED_NO_ANSWER
from zkcoord.coordinator.core.requests import PING_TICK_S

from tests.unit.parts_kit import Kit

PING = wire.PingRequest(num_retries=0, coordinator_epoch=1, generation=0)


def test_a_request_waits_behind_the_unanswered_one_and_each_is_dated_when_it_leaves():
    kit = Kit()
    requests = kit.build_requests()
    (a,) = kit.join("a")
    answers = []
    requests.request(a, PING, 3.0, lambda m, answer, now: answers.append(now), None, kit.now)
    kit.advance(0.5)
    requests.request(a, PING, 3.0, lambda m, answer, now: answers.append(now), None, kit.now)
    kit.settle()
    assert len(kit.sent["a"]) == 1 and a.last_sent == 0.0  # the second is queued, not sent
    assert requests.answered(a, wire.PingResponse(), kit.sent["a"][0][1], kit.now)
    kit.settle()
    assert answers == [0.5] and len(kit.sent["a"]) == 2 and a.last_sent == 0.5
    assert not requests.answered(a, wire.PingResponse(), kit.sent["a"][0][1], kit.now)  # answered already


def test_a_member_that_does_not_answer_in_time_is_expired_within_a_tick_and_one_that_does_is_not():
    kit = Kit()
    requests = kit.build_requests()
    a, b = kit.join("a", "b")
    for m in (a, b):
        requests.request(m, PING, 1.0, lambda m, answer, now: None, None, kit.now)
    kit.settle()
    requests.answered(a, wire.PingResponse(), kit.sent["a"][0][1], kit.now)
    kit.advance(0.9)
    assert kit.dropped == []
    kit.advance(0.1 + PING_TICK_S)
    assert [member_id for member_id, _ in kit.dropped] == ["b"] and "PingRequest" in kit.dropped[0][1]
    assert kit.metrics.counts[EXPIRED_NO_ANSWER] == 1


def test_nothing_is_sent_out_of_office_and_a_hung_up_member_fails_what_it_held():
    kit = Kit()
    requests = kit.build_requests()
    a, b = kit.join("a", "b")
    failures = []
    fail = lambda m, why, now: failures.append((m.member_id, why))  # noqa: E731
    kit.office.session_suspended()
    requests.request(a, PING, 1.0, None, fail, kit.now)
    assert failures == [("a", "the coordinator is not active")] and not kit.settle()
    kit.office.session_resumed(kit.now, None)
    kit.settle()
    requests.request(b, PING, 1.0, None, fail, kit.now)
    requests.request(b, PING, 1.0, None, fail, kit.now)  # queued behind the first
    requests.hung_up(b)
    requests.fail_all(b, "its connection closed", kit.now)
    assert failures[1:] == [("b", "its connection closed")] * 2
    assert requests.member_on("b") is None and b.outstanding is None and b.queued is None


def test_deadlines_of_different_timeouts_are_met_in_the_order_they_end():
    # Kept in one queue per timeout: a later request of a shorter timeout ends first.
    kit = Kit()
    requests = kit.build_requests()
    a, b, c = kit.join("a", "b", "c")
    requests.request(a, PING, 3.0, lambda m, answer, now: None, None, kit.now)  # ends at 3.0
    kit.advance(0.5)
    requests.request(b, PING, 1.0, lambda m, answer, now: None, None, kit.now)  # ends at 1.5
    kit.advance(0.5)
    requests.request(c, PING, 3.0, lambda m, answer, now: None, None, kit.now)  # ends at 4.0
    kit.settle()
    dropped = lambda: [member_id for member_id, _ in kit.dropped]  # noqa: E731
    kit.advance(0.5 + PING_TICK_S)
    assert dropped() == ["b"]
    kit.advance(1.5)
    assert dropped() == ["b", "a"]
    kit.advance(1.0)
    assert dropped() == ["b", "a", "c"]
