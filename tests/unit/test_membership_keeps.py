"""A member's network thread keeping what it runs when its coordinator's
connection closes: a scripted coordinator on 127.0.0.1 starts it on two
partitions and then closes the connection; the test reads what the member
does next.

It keeps running them under its lease, registers again at once saying so,
and stops them only if that lease ends before it is registered.
"""

from __future__ import annotations

import queue
import time

from zkcoord import wire
from zkcoord.channel import Channel
from zkcoord.member.config import MemberConfig
from zkcoord.member.membership import GroupMembership
from zkcoord.testing import wait_until

from tests.unit.scripted_coordinator import Listener as QuietListener, ScriptedServer

EPOCH = 5
SESSION_MS = 2000
A, B = ("t", 0), ("t", 1)


class Listener(QuietListener):
    """Keeps what it runs, and when it was told to stop what."""

    def __init__(self) -> None:
        self.running: set = set()
        self.stopped: list = []  # (time.monotonic(), partitions)

    def on_start(self, partitions):
        self.running = set(partitions)

    def on_stop(self, partitions):
        self.stopped.append((time.monotonic(), set(partitions)))
        self.running -= set(partitions)
        return {}


class ClosingCoordinator(ScriptedServer):
    """Names itself coordinator at EPOCH; accepts the first registration,
    starts the member on A and B (generation 1), and closes the connection
    once the Start is answered. Later registrations are recorded (with when
    they came) and accepted if ``accept_again``, else left unanswered."""

    epoch = EPOCH

    def __init__(self, accept_again: bool):
        self.accept_again = accept_again
        self.registrations: queue.Queue = queue.Queue()
        self.closed_at: float | None = None
        super().__init__()

    def answer(self, channel: Channel, frame: wire.Frame) -> bool:
        message = frame.message
        if isinstance(message, wire.ClusterMetadataRequest):
            self.name_myself(channel, frame)
        elif isinstance(message, wire.RegisterConsumerRequest):
            first = self.registrations.empty() and self.closed_at is None
            if not first:
                self.registrations.put((time.monotonic(), message))
            if first or self.accept_again:
                channel.send(wire.RegisterConsumerResponse(coordinator_epoch=EPOCH), frame.correlation_id)
            if first:
                channel.send(wire.StartRequest(
                    coordinator_epoch=EPOCH, generation=1, strategy="range",
                    partitions=tuple(wire.TopicPartitionOffset(t, p, 0) for t, p in (A, B))))
        elif isinstance(message, wire.RestartFetcherResponse):
            self.closed_at = time.monotonic()
            return False  # closes the connection, as a coordinator killed does
        return True


def running_member(accept_again: bool):
    server = ClosingCoordinator(accept_again)
    listener = Listener()
    member = GroupMembership([f"127.0.0.1:{server.port}"],
                             MemberConfig(group="g", topics=("t",), session_timeout_ms=SESSION_MS), listener)
    member.start()
    wait_until(lambda: server.closed_at is not None, 10, message="the member started, its connection closed")
    return server, listener, member


def test_a_member_whose_connection_closes_keeps_its_partitions_and_says_so_as_it_registers_again():
    server, listener, member = running_member(accept_again=True)
    try:
        _, again = server.registrations.get(timeout=10)
        assert {(tp.topic, tp.partition) for tp in again.held} == {A, B}
        assert (again.held_epoch, again.held_generation) == (EPOCH, 1)
        wait_until(member.registered.is_set, 10, message="registered again")
        assert listener.stopped == [] and listener.running == {A, B} and member.holds_lease()
    finally:
        server.close()  # first: a member waiting for an answer would wait out close()'s timeout
        member.close(timeout=1)


def test_a_member_not_registered_again_within_its_lease_stops_everything_when_it_ends():
    server, listener, member = running_member(accept_again=False)
    try:
        came, _ = server.registrations.get(timeout=10)
        assert member.holds_lease()  # still running A and B while it waits for an answer
        wait_until(lambda: listener.stopped, SESSION_MS / 1000 + 5, message="the member stopped")
        stopped_at, partitions = listener.stopped[0]
        assert partitions == {A, B} and not member.holds_lease()
        # Its lease ran from before its first registration, which came before the Start.
        assert stopped_at <= came + SESSION_MS / 1000 + 1.0
    finally:
        server.close()  # first: a member waiting for an answer would wait out close()'s timeout
        member.close(timeout=1)
