"""The bridge's decisions that need no I/O (broker/groups/answers.py)."""

from __future__ import annotations

from types import SimpleNamespace

from kafka.protocol.consumer.metadata import ConsumerProtocolAssignment, ConsumerProtocolSubscription

from zkcoord import wire
from zkcoord.broker.groups import answers
from zkcoord.records import TopicPartition

A0, A1, B0 = TopicPartition("a", 0), TopicPartition("a", 1), TopicPartition("b", 0)


def test_silence_is_judged_but_for_a_while_after_a_stall():
    watch = answers.StallWatch(now=100.0)
    assert watch.judging(100.5)
    # Two looks more than STALL_S apart: the process was stalled.
    stalled_at = 100.5 + answers.STALL_S + 0.1
    assert not watch.judging(stalled_at)
    assert not watch.judging(stalled_at + answers.STALL_S / 2)
    assert watch.judging(stalled_at + answers.STALL_S)


def test_an_offset_past_the_log_end_is_beyond_it_and_an_unknown_end_judges_nothing():
    assert answers.beyond_log_end(11, log_end=10)
    assert not answers.beyond_log_end(10, log_end=10)
    assert not answers.beyond_log_end(10**9, log_end=None)


def test_offset_delete_refuses_unreadable_topics_then_consumed_ones_then_committed_offsets():
    committed = {A0: 5}
    assert answers.offset_delete_error(A0, readable=False, consumed={"a"}, committed=committed) == \
        answers.TOPIC_AUTHORIZATION_FAILED
    assert answers.offset_delete_error(A0, readable=True, consumed={"a"}, committed=committed) == \
        answers.GROUP_SUBSCRIBED_TO_TOPIC
    assert answers.offset_delete_error(A0, readable=True, consumed={"b"}, committed=committed) == \
        answers.POLICY_VIOLATION
    assert answers.offset_delete_error(A1, readable=True, consumed={"b"}, committed=committed) == answers.NONE


def test_refusals_of_the_coordinator_become_kafkas_errors_and_an_unknown_one_a_server_error():
    refused = wire.error_for(wire.ErrorCode.INVALID_SESSION_TIMEOUT, "too short")
    assert answers.registration_refusal(refused) == answers.INVALID_SESSION_TIMEOUT
    assert answers.registration_refusal(wire.error_for(wire.ErrorCode.ILLEGAL_STATE, "?")) == \
        answers.UNKNOWN_SERVER_ERROR
    assert answers.reset_refusal(wire.ErrorCode.NONE) == answers.NONE
    assert answers.reset_refusal(wire.ErrorCode.GROUP_NOT_EMPTY) == answers.classic.UNKNOWN_MEMBER_ID


def test_a_member_registers_under_its_instance_id_else_its_member_id_without_slashes():
    assert answers.registration_id(SimpleNamespace(instance_id="web-1", member_id="m")) == "web-1"
    assert answers.registration_id(SimpleNamespace(instance_id=None, member_id="rd/kafka+x")) == "rd_kafka+x"


def test_assignments_and_subscriptions_decode_to_what_was_encoded():
    encoded = answers.assignment_bytes({B0, A1, A0}, version=1)
    decoded = ConsumerProtocolAssignment.decode(encoded)
    assert [(t.topic, t.partitions) for t in decoded.assigned_partitions] == [("a", [0, 1]), ("b", [0])]
    assert ConsumerProtocolSubscription.decode(answers.subscription_bytes({B0, A0})).topics == ["a", "b"]
    assert answers.as_kafka_host("10.0.0.1") == "/10.0.0.1" and answers.as_kafka_host("") == ""
