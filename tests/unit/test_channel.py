"""The framed channel's non-blocking read (channel.py read_available), over a real TCP connection on 127.0.0.1."""

from __future__ import annotations

import socket

import pytest

from zkcoord import wire
from zkcoord.channel import Channel, ChannelClosed


@pytest.fixture
def pair():
    with socket.create_server(("127.0.0.1", 0)) as listener:
        theirs = socket.create_connection(listener.getsockname())
        ours, _ = listener.accept()
    ours.setblocking(False)
    yield Channel(ours), theirs
    ours.close()
    theirs.close()


def test_nothing_waiting_is_no_frames_and_no_wait(pair):
    channel, _ = pair
    assert channel.read_available() == []


def test_every_complete_frame_is_returned_and_a_partial_one_kept(pair):
    channel, peer = pair
    pings = [wire.encode(wire.PingResponse(last_poll_ms_ago=i), i) for i in range(3)]
    peer.sendall(pings[0] + pings[1] + pings[2][:5])
    assert [f.correlation_id for f in channel.read_available()] == [0, 1]
    peer.sendall(pings[2][5:])
    assert [f.message.last_poll_ms_ago for f in channel.read_available()] == [2]


def test_frames_sent_just_before_the_peer_went_come_first_then_the_end(pair):
    channel, peer = pair
    peer.sendall(wire.encode(wire.PingResponse(), 7))
    peer.close()
    assert [f.correlation_id for f in channel.read_available()] == [7]
    with pytest.raises(ChannelClosed):
        channel.read_available()
    assert channel.peer_gone and not channel.closed  # the owner closes, once it stops watching


def test_a_bad_frame_is_a_wire_error(pair):
    channel, peer = pair
    peer.sendall((8).to_bytes(4, "big") + (4242).to_bytes(2, "big") + bytes(6))
    with pytest.raises(wire.UnknownMessageType):
        channel.read_available()


def test_a_fast_sender_is_read_a_bounded_amount_at_a_time(pair):
    import fcntl
    import struct
    import termios

    from zkcoord.channel import MAX_READS_AT_ONCE
    from zkcoord.testing import wait_until

    channel, peer = pair
    frame = wire.encode(wire.PingResponse(), 1)
    bound = MAX_READS_AT_ONCE * 65536
    channel.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 * bound)
    peer.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 * bound)
    peer.setblocking(False)
    burst = frame * (3 * bound // len(frame))
    sent = [0]

    def waiting_bytes() -> int:
        return struct.unpack("i", fcntl.ioctl(channel.sock.fileno(), termios.FIONREAD, b"\0" * 4))[0]

    def more_than_one_read_waiting() -> bool:
        try:
            sent[0] += peer.send(burst[sent[0]:])
        except BlockingIOError:
            pass
        return waiting_bytes() > bound + len(frame)

    wait_until(more_than_one_read_waiting, timeout=5, interval=0.01, message="more than one read_available's worth")
    first = channel.read_available()
    assert len(first) * len(frame) <= bound and waiting_bytes() > 0  # the rest waits for the next callback
