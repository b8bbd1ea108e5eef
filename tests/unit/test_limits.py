"""The listeners' limits as decisions, on a manual clock: the abuse log's
rate limit and summary, connections per address, the process's byte budget
and a frame's deadline and charge; and a Channel over a socket pair holding
a trickled frame to its deadline."""

from __future__ import annotations

import logging
import socket

import pytest

from zkcoord import limits, wire
from zkcoord.channel import Channel, FrameRefused, NotAuthenticated
from zkcoord.errors import ConfigError
from zkcoord.limits import AbuseLog, AddressCounter, ByteBudget, ConnectionLimits, FrameAccount, Guard, LimitExceeded


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


class Lines(logging.Handler):
    def __init__(self):
        super().__init__()
        self.lines = []

    def emit(self, record):
        self.lines.append(record.getMessage())


def abuse_log(lines=3, interval_s=10.0):
    logger = logging.getLogger("test.limits.abuse")
    logger.propagate = False
    logger.setLevel(logging.INFO)
    logger.handlers[:] = [handler := Lines()]
    clock = Clock()
    return AbuseLog(logger, lines, interval_s, clock), handler.lines, clock


def test_the_abuse_log_keeps_its_lines_per_kind_and_sums_up_the_rest():
    log, lines, clock = abuse_log(lines=3)
    logged = [log.log("malformed", logging.INFO, "bad frame %d", i) for i in range(50)]
    assert logged == [True] * 3 + [False] * 47
    assert log.log("unsolicited", logging.INFO, "other kind")  # a kind of its own
    assert lines == ["bad frame 0", "bad frame 1", "bad frame 2", "other kind"]
    clock.now += 10.0
    assert log.log("malformed", logging.INFO, "bad frame again")
    assert lines[4:] == ["... and 47 more malformed line(s) suppressed in 10 s", "bad frame again"]


def test_flush_sums_up_an_interval_that_is_over_without_another_line():
    log, lines, clock = abuse_log(lines=1)
    for _ in range(5):
        log.log("frame_deadline", logging.INFO, "late")
    log.flush()
    assert lines == ["late"]  # the interval is not over yet
    clock.now += 11.0
    log.flush()
    assert lines == ["late", "... and 4 more frame deadline line(s) suppressed in 10 s"]
    log.flush()
    assert len(lines) == 2


def test_an_address_holds_at_most_its_cap_and_gets_room_back_as_connections_end():
    counter = AddressCounter(2)
    assert counter.admit("10.0.0.1") and counter.admit("10.0.0.1")
    assert not counter.admit("10.0.0.1")
    assert counter.admit("10.0.0.2")
    counter.release("10.0.0.1")
    assert counter.admit("10.0.0.1")
    for _ in range(3):
        counter.release("10.0.0.2")
    assert counter.open("10.0.0.2") == 0


def account(timeout_ms=1000, cap=10_000):
    clock = Clock()
    budget = ByteBudget(cap)
    return FrameAccount(ConnectionLimits(frame_timeout_ms=timeout_ms), budget, "peer", clock), budget, clock


def test_a_frame_has_its_deadline_from_its_first_byte_not_from_its_last():
    frame, _budget, clock = account(timeout_ms=1000)
    assert frame.remaining() is None
    frame.progress(True, 1)
    clock.now += 0.6
    frame.progress(True, 2)  # more bytes do not restart it
    assert frame.remaining() == pytest.approx(0.4)
    clock.now += 0.4
    with pytest.raises(LimitExceeded) as refused:
        frame.progress(True, 3)
    assert refused.value.kind == limits.FRAME_DEADLINE
    assert "not whole within 1 s" in str(refused.value)


def test_a_completed_frame_ends_its_deadline_and_the_next_has_its_own():
    frame, _budget, clock = account(timeout_ms=1000)
    frame.progress(True, 10)
    clock.now += 0.9
    frame.progress(True, 5, completed=True)  # one frame done, the next begun in the same read
    clock.now += 0.9
    frame.check()
    frame.progress(False, 0, completed=True)
    assert frame.remaining() is None


def test_a_connection_that_must_authenticate_has_its_deadline_from_then_whatever_it_sends():
    clock = Clock()
    frame = FrameAccount(ConnectionLimits(frame_timeout_ms=1000, authentication_timeout_ms=3000), ByteBudget(10_000),
                         "10.0.0.7:5555", clock)
    assert frame.read_timeout(60.0) == (60.0, True)  # nothing to authenticate by: the idle limit
    frame.must_authenticate()
    assert frame.read_timeout(60.0) == (3.0, False)
    assert frame.read_timeout(None) == (3.0, False)
    clock.now += 1.0
    frame.progress(True, 10)  # a frame begun: its own deadline, but never past the connection's
    assert frame.read_timeout(60.0) == (pytest.approx(1.0), False)
    frame.progress(False, 0, completed=True)
    clock.now += 1.5
    assert frame.read_timeout(0.2) == (0.2, True)  # the idle limit, when it comes first
    frame.check()
    clock.now += 0.5
    for step in (frame.check, lambda: frame.progress(True, 4)):  # complete frames keep nothing alive
        with pytest.raises(LimitExceeded) as refused:
            step()
        assert refused.value.kind == limits.AUTHENTICATION_DEADLINE
        assert str(refused.value) == "10.0.0.7:5555 did not authenticate within 3 s of connecting"
    assert frame.read_timeout(60.0) == (0.0, False)


def test_once_authenticated_a_connection_has_no_such_deadline():
    clock = Clock()
    frame = FrameAccount(ConnectionLimits(authentication_timeout_ms=3000), ByteBudget(10_000), "peer", clock)
    frame.must_authenticate()
    clock.now += 2.0
    frame.authenticated()
    clock.now += 3600
    frame.check()
    assert frame.read_timeout(60.0) == (60.0, True) and frame.remaining() is None


def test_partial_frames_share_the_budget_and_one_over_it_is_refused_leaving_the_others():
    first, budget, _ = account(cap=1000)
    second = FrameAccount(ConnectionLimits(), budget, "other")
    first.progress(True, 600)
    with pytest.raises(LimitExceeded) as refused:
        second.progress(True, 500)
    assert refused.value.kind == limits.BUFFER_CAP and "cap of 1000 bytes" in str(refused.value)
    assert budget.used == 600
    second.close()
    first.progress(True, 200)  # shrinking gives back
    assert budget.used == 200
    first.close()
    assert budget.used == 0


def test_limits_are_checked():
    with pytest.raises(ConfigError):
        ConnectionLimits(frame_timeout_ms=0)
    with pytest.raises(ConfigError):
        ConnectionLimits(authentication_timeout_ms=0)
    with pytest.raises(ConfigError):
        ConnectionLimits(max_connections_per_address=0)


def tcp_pair() -> tuple[socket.socket, socket.socket]:
    """Two ends of a loopback TCP connection (a Channel names its peer by address and port)."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        theirs = socket.create_connection(listener.getsockname())
        ours, _ = listener.accept()
    return ours, theirs


def test_a_channel_refuses_a_trickled_frame_at_its_deadline_and_gives_its_bytes_back():
    refusals = []
    guard = Guard(ConnectionLimits(frame_timeout_ms=300), lambda listener, kind: refusals.append((listener, kind)))
    listener = guard.listener("coordinator")
    ours, theirs = tcp_pair()
    channel = Channel(ours, guard=listener)
    data = wire.encode(wire.ClusterMetadataRequest(), 1)
    try:
        theirs.sendall(data[:6])
        # The caller's (idle) timeout is long; the frame's deadline cuts it short.
        with pytest.raises(FrameRefused) as refused:
            while True:
                assert channel.receive(timeout=30.0) is None
        assert refused.value.kind == limits.FRAME_DEADLINE
        assert guard.budget.used > 0
        channel.report_refusal(refused.value)
        assert refusals == [("coordinator", limits.FRAME_DEADLINE)]
    finally:
        channel.close()
        theirs.close()
    assert guard.budget.used == 0


def test_a_channel_waits_the_idle_timeout_between_frames():
    guard = Guard(ConnectionLimits(frame_timeout_ms=50))
    ours, theirs = tcp_pair()
    channel = Channel(ours, guard=guard.listener("coordinator"))
    try:
        theirs.sendall(wire.encode(wire.ClusterMetadataRequest(), 7))
        assert channel.receive(timeout=5.0).correlation_id == 7
        assert channel.receive(timeout=0.2) is None  # longer than the frame timeout, and no frame refused
    finally:
        channel.close()
        theirs.close()


def test_a_channel_that_must_authenticate_is_refused_at_its_deadline_even_while_it_chats():
    refusals = []
    limits_ = ConnectionLimits(authentication_timeout_ms=300)
    guard = Guard(limits_, lambda listener, kind: refusals.append(kind))
    ours, theirs = tcp_pair()
    channel = Channel(ours, guard=guard.listener("coordinator"))
    clock = Clock()
    channel.account = FrameAccount(limits_, guard.budget, channel.peer, clock)
    channel.account.must_authenticate()
    try:
        theirs.sendall(wire.encode(wire.ClusterMetadataRequest(), 1))
        assert channel.receive(timeout=5.0).correlation_id == 1
        clock.now += 0.3
        theirs.sendall(wire.encode(wire.ClusterMetadataRequest(), 2))  # answered or not, no login
        with pytest.raises(NotAuthenticated) as refused:
            channel.receive(timeout=5.0)
        assert refused.value.code == wire.ErrorCode.AUTHENTICATION_FAILED
        assert str(refused.value).endswith("did not authenticate within 0.3 s of connecting")
        channel.report_refusal(refused.value)
        assert refusals == [limits.AUTHENTICATION_DEADLINE]
    finally:
        channel.close()
        theirs.close()


def test_a_channel_that_must_authenticate_waits_no_longer_than_its_deadline():
    guard = Guard(ConnectionLimits(authentication_timeout_ms=200))
    ours, theirs = tcp_pair()
    channel = Channel(ours, guard=guard.listener("coordinator"))
    channel.account.must_authenticate()
    try:
        with pytest.raises(NotAuthenticated):
            channel.receive(timeout=30.0)  # the idle timeout is long; the deadline cuts it short
    finally:
        channel.close()
        theirs.close()
