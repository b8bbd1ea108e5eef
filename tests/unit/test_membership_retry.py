"""How a member looks for its coordinator again after a refusal: a scripted
coordinator on 127.0.0.1 answers its requests, and the test reads what the
member asks next.

A refusal by the coordinator the metadata named, at the epoch it named
(loading, or cut off from ZooKeeper for a moment), is retried after the
backoff; only a coordinator that has moved on makes the member ask for a
newer one, whose answer a server may hold for up to METADATA_WAIT_MS.
"""

from __future__ import annotations

import queue

import pytest

from zkcoord import wire
from zkcoord.channel import Channel
from zkcoord.member.config import MemberConfig
from zkcoord.member.membership import METADATA_WAIT_MS, GroupMembership
from zkcoord.testing import wait_until

from tests.unit.scripted_coordinator import Listener, ScriptedServer

EPOCH = 5


class ScriptedCoordinator(ScriptedServer):
    """One server that names itself coordinator at EPOCH, refuses the first
    registration with ``refusal`` and records every ClusterMetadata request."""

    epoch = EPOCH

    def __init__(self, refusal: wire.RegisterConsumerResponse):
        self.refusal = refusal
        self.metadata_requests: queue.Queue = queue.Queue()
        self.registrations = 0
        super().__init__()

    def answer(self, channel: Channel, frame: wire.Frame) -> bool:
        channel.level = frame.version
        message = frame.message
        if isinstance(message, wire.ClusterMetadataRequest):
            self.metadata_requests.put(message)
            self.name_myself(channel, frame)
        elif isinstance(message, wire.RegisterConsumerRequest):
            self.registrations += 1
            # The first is refused; the others are left unanswered
            # (the test has seen what it wanted by then).
            if self.registrations == 1:
                channel.send(self.refusal, frame.correlation_id)
                return False
        return True


def metadata_after_refusal(refusal: wire.RegisterConsumerResponse) -> wire.ClusterMetadataRequest:
    server = ScriptedCoordinator(refusal)
    member = GroupMembership([f"127.0.0.1:{server.port}"], MemberConfig(group="g", topics=("t",)), Listener())
    member.start()
    try:
        first = server.metadata_requests.get(timeout=10)
        assert first.max_wait_ms == 0  # nothing known yet: answered at once
        wait_until(lambda: server.registrations >= 1, 10, message="the member registers")
        return server.metadata_requests.get(timeout=10)
    finally:
        server.close()  # first: a member waiting for an answer would wait out close()'s timeout
        member.close(timeout=1)


def test_a_loading_coordinator_is_asked_again_without_waiting_for_a_newer_one():
    again = metadata_after_refusal(wire.RegisterConsumerResponse(
        error_code=wire.ErrorCode.COORDINATOR_NOT_AVAILABLE, error_message="loading", coordinator_epoch=EPOCH))
    assert again.max_wait_ms == 0 and again.known_epoch == -1


@pytest.mark.parametrize("refusal", [
    wire.RegisterConsumerResponse(error_code=wire.ErrorCode.NOT_COORDINATOR, error_message="moved",
                                  coordinator_epoch=EPOCH),
    # Refused by a coordinator of another epoch than the metadata named: the
    # metadata was stale, so a newer answer is worth waiting for.
    wire.RegisterConsumerResponse(error_code=wire.ErrorCode.COORDINATOR_NOT_AVAILABLE, error_message="deposed",
                                  coordinator_epoch=EPOCH - 1),
], ids=["not-coordinator", "other-epoch"])
def test_a_coordinator_that_moved_on_makes_the_member_wait_for_a_newer_one(refusal):
    again = metadata_after_refusal(refusal)
    assert again.known_epoch == EPOCH and again.max_wait_ms == METADATA_WAIT_MS
