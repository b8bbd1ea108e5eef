"""Bad input from the network, end to end.

Against real server processes: malformed frames and refused registrations
get a typed error and a closed connection, and nothing else changes (the
server keeps serving, a registered member keeps its place). Against a
scripted coordinator: a real GroupMembership refuses requests from a stale
coordinator epoch or an older generation, drops the connection and stops
its partitions.
"""

from __future__ import annotations

import queue
import socket
import threading
import time
from typing import Optional

import pytest

from zkcoord import wire
from zkcoord.admin.topics import create_topic
from zkcoord.channel import Channel, ChannelClosed
from zkcoord.member.config import MemberConfig
from zkcoord.member.membership import GroupMembership
from zkcoord.zk import layout
from tests.e2e.checks import wait_whole
from zkcoord.testing import partitions_of
from zkcoord.zk.nodes import read_owners
from zkcoord.testing import wait_until

SETTLE_S = 20
IO_TIMEOUT_S = 5.0
# A member dropped by mistake would see a rebalance within the rebalance
# delay (100 ms) plus a ping interval (a third of its 4 s session timeout).
QUIET_S = 2.0


def coordinator_id(zk) -> int:
    data = wait_until(lambda: zk.get(layout.COORDINATOR_PATH)[0], timeout=SETTLE_S, message="a coordinator")
    return int(layout.decode_coordinator(data))


def connect(port: int) -> Channel:
    return Channel.connect("127.0.0.1", port, IO_TIMEOUT_S)


def exchange_raw(port: int, data: bytes) -> tuple[list[wire.Frame], bool]:
    """Send ``data`` on a new connection; the frames the server answers with,
    and whether it then closed the connection (within the I/O timeout)."""
    decoder = wire.FrameDecoder()
    frames: list[wire.Frame] = []
    with socket.create_connection(("127.0.0.1", port), timeout=IO_TIMEOUT_S) as sock:
        sock.sendall(data)
        deadline = time.monotonic() + IO_TIMEOUT_S
        while time.monotonic() < deadline:
            try:
                chunk = sock.recv(65536)
            except socket.timeout:
                return frames, False
            except ConnectionResetError:
                return frames, True
            if not chunk:
                return frames, True
            frames.extend(decoder.feed(chunk))
    return frames, False


def frame(type_id: int, version: int, correlation_id: int, body: bytes = b"") -> bytes:
    header = type_id.to_bytes(2, "big", signed=True) + version.to_bytes(2, "big", signed=True)
    header += correlation_id.to_bytes(4, "big", signed=True)
    return (len(header) + len(body)).to_bytes(4, "big", signed=True) + header + body


def cluster_metadata(port: int) -> wire.ClusterMetadataResponse:
    channel = connect(port)
    try:
        return channel.request(wire.ClusterMetadataRequest(), timeout=IO_TIMEOUT_S)
    finally:
        channel.close()


def stays(predicate, seconds: float, message: str) -> None:
    """Check ``predicate`` over a window of ``seconds``; fail as soon as it is false."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert predicate(), message
        time.sleep(0.05)


def settled_member(cluster, zk, topic: str = "t"):
    # A server's ports accept connections a moment before its broker is in
    # ZooKeeper; the topic's replicas go to the brokers registered.
    wait_until(lambda: len(zk.get_children(layout.BROKER_IDS)) == len(cluster.servers),
               timeout=SETTLE_S, message="every broker registered")
    create_topic(zk, topic, 2)
    member = cluster.add_consumer("g", topics=[topic])
    wait_whole(zk, "g", [member], partitions_of(zk, [topic]), timeout=SETTLE_S)
    return member


def assert_member_unaffected(cluster, zk, member, before: dict, owners: dict) -> None:
    assert before["registered"] and before["generation"] >= 1
    stays(lambda: member.status() == before and read_owners(zk, "g") == owners
          and all(s.alive for s in cluster.servers.values()),
          QUIET_S, "the registered member or its group changed")


# -- malformed frames --------------------------------------------------------------------------------

REGISTER = wire.RegisterConsumerRequest(group_id="g2", consumer_id="c-bad", topics=("t",),
                                        session_timeout_ms=4000)
_register_bytes = wire.encode(REGISTER, 41)
_truncated = _register_bytes[4:-6]

BAD_FRAMES = {
    # name: (bytes, expected error code, expected correlation id)
    "garbage": (b"\x00\x00\x00\x03\xde\xad\xbe\xef", wire.ErrorCode.MALFORMED_FRAME, 0),
    "negative size": (b"\xff\xff\xff\xfe" + b"x" * 12, wire.ErrorCode.MALFORMED_FRAME, 0),
    "http request": (b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", wire.ErrorCode.FRAME_TOO_LARGE, 0),
    "oversized": ((wire.MAX_FRAME_SIZE + 1).to_bytes(4, "big") + b"\x03\xe8\x00\x01\x00\x00\x00\x07",
                  wire.ErrorCode.FRAME_TOO_LARGE, 0),
    "unknown type": (frame(999, 0, 77), wire.ErrorCode.UNKNOWN_MESSAGE_TYPE, 77),
    "unsupported version": (frame(wire.MessageType.CLUSTER_METADATA_REQUEST, 9, 78),
                            wire.ErrorCode.UNSUPPORTED_VERSION, 78),
    "truncated body": (len(_truncated).to_bytes(4, "big") + _truncated, wire.ErrorCode.MALFORMED_FRAME, 41),
    "trailing bytes": (frame(wire.MessageType.CLUSTER_METADATA_REQUEST, 1, 79, b"\x00"),
                       wire.ErrorCode.MALFORMED_FRAME, 79),
    "a response": (wire.encode(wire.PingResponse(offsets=None), 80), wire.ErrorCode.ILLEGAL_STATE, 80),
}


def test_malformed_frames_get_a_typed_error_and_a_closed_connection(cluster, zk):
    member = settled_member(cluster, zk)
    before, owners = member.status(), read_owners(zk, "g")
    coordinator = cluster.servers[coordinator_id(zk)]
    other = next(s for s in cluster.servers.values() if s is not coordinator)
    for server in (coordinator, other):
        for name, (data, code, correlation_id) in BAD_FRAMES.items():
            frames, closed = exchange_raw(server.port, data)
            assert len(frames) == 1 and isinstance(frames[0].message, wire.ErrorResponse), (name, frames)
            assert frames[0].message.error_code == code, (name, frames[0].message)
            assert frames[0].correlation_id == correlation_id, name
            assert frames[0].message.message, f"{name}: the error says nothing"
            assert closed, f"{name}: the server kept the connection open"
        # The server keeps serving new connections.
        metadata = cluster_metadata(server.port)
        assert metadata.error_code == wire.ErrorCode.NONE
        assert metadata.coordinator_id == coordinator.server_id
        assert {s.id for s in metadata.servers} == set(cluster.servers)
    # Connections that close in the middle of a frame: in the size, the header, the body.
    for cut in (2, 6, len(_register_bytes) - 1):
        with socket.create_connection(("127.0.0.1", coordinator.port), timeout=IO_TIMEOUT_S) as sock:
            sock.sendall(_register_bytes[:cut])
    assert cluster_metadata(coordinator.port).coordinator_id == coordinator.server_id
    assert_member_unaffected(cluster, zk, member, before, owners)


# -- refused registrations ---------------------------------------------------------------------------------

def register(port: int, request: wire.RegisterConsumerRequest) -> tuple[wire.RegisterConsumerResponse, bool]:
    """Send a registration; the answer, and whether the server then closed the connection."""
    channel = connect(port)
    try:
        channel.send(request, 5)
        answer = channel.receive(IO_TIMEOUT_S)
        assert answer is not None and answer.correlation_id == 5
        try:
            channel.receive(IO_TIMEOUT_S)  # a frame or a timeout: still open
            closed = False
        except ChannelClosed:
            closed = True
        return answer.message, closed
    finally:
        channel.close()


def valid(**changes) -> wire.RegisterConsumerRequest:
    fields = dict(group_id="other", consumer_id="c-1", topics=("t",), session_timeout_ms=4000,
                  auto_offset_reset="smallest")
    fields.update(changes)
    return wire.RegisterConsumerRequest(**fields)


INVALID = {
    "session timeout below the minimum": (valid(session_timeout_ms=999), wire.ErrorCode.INVALID_SESSION_TIMEOUT),
    "session timeout above the maximum": (valid(session_timeout_ms=600_001), wire.ErrorCode.INVALID_SESSION_TIMEOUT),
    "empty group": (valid(group_id=""), wire.ErrorCode.INVALID_REGISTRATION),
    "bad auto_offset_reset": (valid(auto_offset_reset="earliest"), wire.ErrorCode.INVALID_REGISTRATION),
    "bad regex": (valid(topics=(), pattern="w-(["), wire.ErrorCode.INVALID_REGISTRATION),
    "no topics": (valid(topics=(), pattern=""), wire.ErrorCode.INVALID_REGISTRATION),
    "bad topic name": (valid(topics=("a/b",)), wire.ErrorCode.INVALID_REGISTRATION),
    "empty consumer id": (valid(consumer_id=""), wire.ErrorCode.INVALID_REGISTRATION),
    "unknown strategy": (valid(assignment_strategies=("no-such",)), wire.ErrorCode.NO_COMMON_STRATEGY),
}


def test_refused_registrations_change_nothing(cluster, zk):
    member = settled_member(cluster, zk)
    before, owners = member.status(), read_owners(zk, "g")
    coordinator = cluster.servers[coordinator_id(zk)]

    # The live member's id, from another connection: refused, the member stays.
    answer, closed = register(coordinator.port, valid(group_id="g", consumer_id=before["consumer_id"]))
    assert answer.error_code == wire.ErrorCode.CONSUMER_ID_IN_USE and closed
    assert before["consumer_id"] in answer.error_message

    for name, (request, code) in INVALID.items():
        answer, closed = register(coordinator.port, request)
        assert answer.error_code == code, (name, answer)
        assert answer.error_message, f"{name}: the refusal says nothing"
        assert closed, f"{name}: the server kept the connection open"

    # Servers that are not the coordinator send consumers on.
    for server in cluster.servers.values():
        if server is not coordinator:
            answer, closed = register(server.port, valid())
            assert answer.error_code == wire.ErrorCode.NOT_COORDINATOR and closed

    assert_member_unaffected(cluster, zk, member, before, owners)
    # Nothing refused left a group behind; a valid registration still works.
    assert not zk.exists(layout.group_path("other"))
    channel = connect(coordinator.port)
    try:
        assert channel.request(valid(), timeout=IO_TIMEOUT_S).error_code == wire.ErrorCode.NONE
    finally:
        channel.close()


# -- a member facing a stale coordinator -------------------------------------------------------------------

class ScriptedCoordinator:
    """A coordinator played by the test: it answers ClusterMetadata and
    RegisterConsumer like a server of epoch ``epoch``, and hands every
    registered connection to the test, which then pushes what it likes."""

    def __init__(self, epoch: int):
        self.epoch = epoch
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.registered: "queue.Queue[tuple[Channel, wire.RegisterConsumerRequest]]" = queue.Queue()
        self._channels: list[Channel] = []
        self._stopped = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._stopped.is_set():
            try:
                sock, _ = self.listener.accept()
            except OSError:
                return
            channel = Channel(sock)
            self._channels.append(channel)
            threading.Thread(target=self._serve, args=(channel,), daemon=True).start()

    def _serve(self, channel: Channel) -> None:
        try:
            while not self._stopped.is_set():
                got = channel.receive(timeout=0.1)
                if got is None:
                    continue
                if isinstance(got.message, wire.ClusterMetadataRequest):
                    channel.send(wire.ClusterMetadataResponse(
                        coordinator_id=1, coordinator_epoch=self.epoch,
                        servers=(wire.NodeAddress(1, "127.0.0.1", self.port),)), got.correlation_id)
                elif isinstance(got.message, wire.RegisterConsumerRequest):
                    channel.send(wire.RegisterConsumerResponse(coordinator_epoch=self.epoch), got.correlation_id)
                    self.registered.put((channel, got.message))
                    return  # the test speaks on this connection from now on
        except (ChannelClosed, wire.WireError):
            channel.close()

    def next_member(self) -> tuple[Channel, wire.RegisterConsumerRequest]:
        return self.registered.get(timeout=SETTLE_S)

    def close(self) -> None:
        self._stopped.set()
        self.listener.close()
        for channel in self._channels:
            channel.close()


class Recorder:
    """A membership listener that records what it is told."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.running: dict[tuple[str, int], int] = {}
        self.stopped: list[frozenset] = []

    def on_start(self, partitions):
        with self.lock:
            self.running = dict(partitions)

    def on_stop(self, partitions):
        with self.lock:
            self.stopped.append(frozenset(partitions))
            for tp in partitions:
                self.running.pop(tp, None)
        return {tp: 42 for tp in partitions}

    def offsets(self) -> Optional[dict]:
        return None

    def last_poll_ms_ago(self) -> int:
        return 0


def push(channel: Channel, message: wire.Message) -> wire.Frame:
    correlation_id = channel.send(message)
    answer = channel.receive(IO_TIMEOUT_S)
    assert answer is not None, f"no answer to {message}"
    assert answer.correlation_id == correlation_id
    return answer


def start(epoch: int, generation: int, *partitions: int) -> wire.StartRequest:
    return wire.StartRequest(coordinator_epoch=epoch, generation=generation, strategy="range",
                             partitions=tuple(wire.TopicPartitionOffset("t", p, -1) for p in partitions))


@pytest.fixture
def scripted():
    coordinator = ScriptedCoordinator(epoch=5)
    recorder = Recorder()
    member = GroupMembership([f"127.0.0.1:{coordinator.port}"],
                             MemberConfig(group="g", topics=("t",), session_timeout_ms=3000), recorder)
    member.start()
    yield coordinator, member, recorder
    coordinator.close()
    member.close(timeout=5)


def _running_member(coordinator, member, recorder):
    channel, registration = coordinator.next_member()
    assert registration.consumer_id == member.consumer_id and registration.offsets == ()
    answer = push(channel, wire.PingRequest(coordinator_epoch=5, generation=0))
    assert isinstance(answer.message, wire.PingResponse)
    answer = push(channel, start(5, 2, 0, 1))
    assert isinstance(answer.message, wire.RestartFetcherResponse)
    assert answer.message.error_code == wire.ErrorCode.NONE and answer.message.generation == 2
    assert recorder.running == {("t", 0): -1, ("t", 1): -1}
    return channel


def _refused(channel, request, code, recorder, coordinator, member) -> None:
    answer = push(channel, request)
    assert isinstance(answer.message, wire.ErrorResponse), answer
    assert answer.message.error_code == code and answer.message.message
    with pytest.raises(ChannelClosed):  # the member drops the connection
        while True:
            assert channel.receive(IO_TIMEOUT_S) is not None, "the member kept the connection open"
    # Its partitions stop, and it registers again handing over their final offsets.
    assert recorder.stopped == [frozenset({("t", 0), ("t", 1)})] and recorder.running == {}
    _, again = coordinator.next_member()
    assert again.consumer_id == member.consumer_id
    assert sorted(again.offsets, key=lambda o: o.partition) == [
        wire.TopicPartitionOffset("t", 0, 42), wire.TopicPartitionOffset("t", 1, 42)]


@pytest.mark.parametrize("stale", [
    wire.PingRequest(coordinator_epoch=3, generation=2),
    start(3, 9, 0, 1, 2),
    wire.StopRequest(coordinator_epoch=3, generation=9, revoke_all=True),
], ids=["ping", "start", "stop"])
def test_a_member_refuses_a_stale_coordinator_epoch(scripted, stale):
    coordinator, member, recorder = scripted
    channel = _running_member(coordinator, member, recorder)
    _refused(channel, stale, wire.ErrorCode.STALE_EPOCH, recorder, coordinator, member)
    assert member.epoch == 5


@pytest.mark.parametrize("stale", [
    start(5, 1, 0, 1, 2),
    wire.StopRequest(coordinator_epoch=5, generation=1, revoke_all=True),
], ids=["start", "stop"])
def test_a_member_refuses_an_older_generation(scripted, stale):
    coordinator, member, recorder = scripted
    channel = _running_member(coordinator, member, recorder)
    _refused(channel, stale, wire.ErrorCode.STALE_GENERATION, recorder, coordinator, member)
    assert member.generation == 2
