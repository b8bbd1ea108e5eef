"""What a peer may hold of a real server's two listeners (the coordinator
protocol's and the embedded broker's Kafka one), end to end: a frame
trickled byte by byte is cut at its deadline while a well-behaved client of
the same server is answered; an address past its connection cap is refused;
a partial frame past the process's buffered-bytes cap is refused; a flood
of bad frames is logged a few lines at a time, the rest summed up; and,
where authentication is required, a connection that does not log in is
closed at its deadline, one that does is kept. Each refusal is counted in
the server's metrics."""

from __future__ import annotations

import socket
import time
from typing import Iterator

import pytest
from kafka.protocol.metadata import ApiVersionsRequest, MetadataRequest
from kafka.protocol.sasl import SaslAuthenticateRequest, SaslHandshakeRequest

from tests.e2e.conftest import SERVER_ARGS
from zkcoord import wire
from zkcoord.channel import Channel
from zkcoord.security.secrets import write_private
from zkcoord.testing import LocalCluster, cluster_in_chroot, wait_until
from zkcoord.zk import security_store as store

FRAME_TIMEOUT_S = 1.0
PER_ADDRESS = 6
BUFFER_CAP = 600_000
ABUSE_LINES = 3
ABUSE_INTERVAL_S = 2.0
LIMIT_ARGS = (
    "--frame-timeout-ms", str(int(FRAME_TIMEOUT_S * 1000)),
    "--max-connections-per-address", str(PER_ADDRESS),
    "--max-buffered-bytes", str(BUFFER_CAP),
    "--abuse-log-lines", str(ABUSE_LINES),
    "--abuse-log-interval-ms", str(int(ABUSE_INTERVAL_S * 1000)),
    "--metrics-port", "0",
)
IO_TIMEOUT_S = 5.0


@pytest.fixture(scope="module")
def server(zk_ensemble, tmp_path_factory) -> Iterator:
    with cluster_in_chroot(zk_ensemble.connect_string, tmp_path_factory.mktemp("limits"), "lim") as cluster:
        cluster: LocalCluster
        cluster.server_args = (*SERVER_ARGS, *LIMIT_ARGS)
        (process,) = cluster.start_servers(1)
        cluster.wait_for_coordinator()
        yield process


def coordinator_frame(correlation_id: int = 1) -> bytes:
    return wire.encode(wire.ClusterMetadataRequest(), correlation_id)


def kafka_frame(correlation_id: int = 1, request=None) -> bytes:
    """``request`` (default: ApiVersions, which needs no login) as a frame."""
    request = ApiVersionsRequest[0]() if request is None else request
    request.with_header(correlation_id=correlation_id, client_id="limits-test")
    return bytes(request.encode(header=True, framed=True))


# The two listeners: their port, a valid request as bytes, and how to see it answered.
LISTENERS = {"coordinator": ("port", coordinator_frame), "broker": ("broker_port", kafka_frame)}


def port_of(server, listener: str) -> int:
    return getattr(server, LISTENERS[listener][0])


def valid_frame(listener: str, correlation_id: int = 1) -> bytes:
    return LISTENERS[listener][1](correlation_id)


def connect(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=IO_TIMEOUT_S)


def answered(sock: socket.socket, frame: bytes) -> bool:
    """Whether the server answers ``frame`` on ``sock`` (with a whole frame, within the I/O timeout)."""
    try:
        sock.sendall(frame)
    except OSError:  # closed already
        return False
    got = b""
    deadline = time.monotonic() + IO_TIMEOUT_S
    while time.monotonic() < deadline:
        try:
            chunk = sock.recv(65536)
        except (socket.timeout, ConnectionResetError):
            return False
        if not chunk:
            return False
        got += chunk
        if len(got) >= 4 and len(got) >= 4 + int.from_bytes(got[:4], "big"):
            return True
    return False


def closed_by_server(sock: socket.socket, timeout: float = IO_TIMEOUT_S) -> bool:
    """Whether the server closes ``sock`` within ``timeout`` (it is expected to send nothing first)."""
    sock.settimeout(timeout)
    try:
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                return True
    except ConnectionResetError:
        return True
    except socket.timeout:
        return False


def refusals(server, listener: str, kind: str) -> float:
    return server.scrape().value("zkcoord_listener_refusals_total", listener=listener, kind=kind) or 0.0


@pytest.mark.parametrize("listener", sorted(LISTENERS))
def test_a_trickled_frame_is_cut_at_its_deadline_while_a_good_client_is_served(server, listener):
    port = port_of(server, listener)
    before = refusals(server, listener, "frame_deadline")
    trickler = connect(port)
    good = connect(port)
    try:
        trickler.settimeout(0.05)
        started = time.monotonic()
        cut_after = None
        sent = 0
        # A frame of 1000 bytes announced, then one byte every 100 ms: a
        # byte restarts no clock, so the frame is cut about FRAME_TIMEOUT_S in.
        trickler.sendall((1000).to_bytes(4, "big"))
        while time.monotonic() - started < 4 * FRAME_TIMEOUT_S:
            try:
                trickler.send(b"\x00")
                sent += 1
            except OSError:
                cut_after = time.monotonic() - started
                break
            try:
                if trickler.recv(65536) == b"":
                    cut_after = time.monotonic() - started
                    break
            except socket.timeout:
                pass
            except OSError:
                cut_after = time.monotonic() - started
                break
            assert answered(good, valid_frame(listener, sent + 1)), "the well-behaved client went unanswered"
            time.sleep(0.05)  # the trickle's pace, not a synchronisation
        assert cut_after is not None, f"a frame trickled for {4 * FRAME_TIMEOUT_S} s was never cut"
        assert FRAME_TIMEOUT_S * 0.9 <= cut_after <= FRAME_TIMEOUT_S + 1.5
        assert answered(good, valid_frame(listener, 999)), "the well-behaved client is still served"
    finally:
        trickler.close()
        good.close()
    wait_until(lambda: refusals(server, listener, "frame_deadline") >= before + 1, 5,
               message="the deadline miss counted")


@pytest.mark.parametrize("listener", sorted(LISTENERS))
def test_an_address_past_its_connection_cap_is_refused_until_one_closes(server, listener):
    port = port_of(server, listener)
    before = refusals(server, listener, "per_address")
    held = [connect(port) for _ in range(PER_ADDRESS)]
    try:
        for sock in held:  # each is served: the server has counted it
            assert answered(sock, valid_frame(listener))
        extra = connect(port)
        assert closed_by_server(extra), f"connection {PER_ADDRESS + 1} from one address was not refused"
        extra.close()
        held.pop().close()
        # The room comes back once the server has seen the close.
        def served_again():
            sock = connect(port)
            try:
                return answered(sock, valid_frame(listener))
            finally:
                sock.close()
        wait_until(served_again, 10, message="a connection served again after one closed")
    finally:
        for sock in held:
            sock.close()
    assert refusals(server, listener, "per_address") >= before + 1


@pytest.mark.parametrize("listener", sorted(LISTENERS))
def test_a_partial_frame_past_the_buffered_bytes_cap_is_refused(server, listener):
    port = port_of(server, listener)
    before = refusals(server, listener, "buffer_cap")
    big = connect(port)
    try:
        # Announced below each listener's largest frame, and sent in part,
        # past the process's cap on bytes kept for partial frames.
        size = 1_000_000
        body = bytes(12) + b"\x00" * (BUFFER_CAP + 50_000)
        big.sendall(size.to_bytes(4, "big") + body[:4])
        try:
            big.sendall(body[4:])
        except OSError:
            pass  # closed already
        assert closed_by_server(big), "a partial frame past the cap was kept"
    finally:
        big.close()
    good = connect(port)
    try:
        assert answered(good, valid_frame(listener)), "the cap's bytes were given back"
    finally:
        good.close()
    assert refusals(server, listener, "buffer_cap") >= before + 1


def test_a_flood_of_bad_frames_is_logged_a_few_lines_at_a_time(server):
    port = server.port
    marker = b"\x7f\x01"  # an unknown message type, to be named in the refusals' lines
    lines_before = server.log_path.read_text(errors="replace").count("after a bad frame")
    floods = 60
    began = time.monotonic()
    for i in range(floods):
        sock = connect(port)
        try:
            bad = marker + b"\x00\x00" + i.to_bytes(4, "big")
            sock.sendall(len(bad).to_bytes(4, "big") + bad)
            closed_by_server(sock)
        finally:
            sock.close()
    intervals = (time.monotonic() - began) // ABUSE_INTERVAL_S + 2  # the flood's, and the one it began in
    # Then the summary of what was held back, once the interval is over.
    wait_until(lambda: "more malformed line(s) suppressed" in server.log_path.read_text(errors="replace"),
               ABUSE_INTERVAL_S + 5, message="a summary of the suppressed lines")
    logged = server.log_path.read_text(errors="replace").count("after a bad frame") - lines_before
    assert 1 <= logged <= ABUSE_LINES * intervals
    assert logged < floods / 2
    assert refusals(server, "coordinator", "malformed") >= floods  # every one counted, if not logged


def test_a_server_channel_served_after_all_that(server):
    channel = Channel.connect("127.0.0.1", server.port, IO_TIMEOUT_S)
    try:
        response = channel.request(wire.ClusterMetadataRequest(), IO_TIMEOUT_S)
        assert response.error_code == 0
    finally:
        channel.close()


def test_a_registered_member_trickling_a_frame_is_cut_at_its_deadline(server):
    """A member's connection is read by the coordinator's event loop, not by
    a greenlet waiting on it: a timer holds its partial frame to the deadline."""
    before = refusals(server, "coordinator", "frame_deadline")
    channel = Channel.connect("127.0.0.1", server.port, IO_TIMEOUT_S)
    try:
        # A long session: nothing but the frame's deadline ends this connection within the test.
        registered = channel.request(wire.RegisterConsumerRequest(
            group_id="limits-member", consumer_id="trickler", topics=("limits-topic",), session_timeout_ms=30_000),
            IO_TIMEOUT_S)
        assert registered.error_code == 0
        channel.sock.sendall((1000).to_bytes(4, "big") + b"\x00")  # a frame begun, never finished
        started = time.monotonic()
        assert closed_by_server(channel.sock, timeout=FRAME_TIMEOUT_S + 5), "the partial frame was kept"
        assert time.monotonic() - started <= FRAME_TIMEOUT_S + 1.5
    finally:
        channel.close()
    wait_until(lambda: refusals(server, "coordinator", "frame_deadline") >= before + 1, 5,
               message="the deadline miss counted")


def test_unsolicited_frames_from_a_member_are_logged_a_few_lines_at_a_time(server):
    """Every unsolicited frame once logged a warning of its own."""
    log_before = server.log_path.read_text(errors="replace").count("sent an unsolicited")
    channel = Channel.connect("127.0.0.1", server.port, IO_TIMEOUT_S)
    floods = 200
    try:
        registered = channel.request(wire.RegisterConsumerRequest(
            group_id="limits-unsolicited", consumer_id="chatty", topics=("limits-topic",),
            session_timeout_ms=30_000), IO_TIMEOUT_S)
        assert registered.error_code == 0
        began = time.monotonic()
        for i in range(floods):
            channel.send(wire.PingResponse(), correlation_id=1_000_000 + i)  # answers to nothing asked
        with connect(server.port) as other:  # the server serves on, busy logging nothing
            assert answered(other, coordinator_frame())
    finally:
        channel.close()
    intervals = (time.monotonic() - began) // ABUSE_INTERVAL_S + 2
    wait_until(lambda: "more unsolicited line(s) suppressed" in server.log_path.read_text(errors="replace"),
               ABUSE_INTERVAL_S + 5, message="a summary of the suppressed lines")
    logged = server.log_path.read_text(errors="replace").count("sent an unsolicited") - log_before
    assert 1 <= logged <= ABUSE_LINES * intervals


AUTHENTICATION_TIMEOUT_S = 1.0


@pytest.fixture(scope="module")
def secured_server(zk_ensemble, tmp_path_factory) -> Iterator:
    """A server requiring authentication on both listeners (SASL PLAIN at
    its broker), with a short deadline to authenticate by."""
    directory = tmp_path_factory.mktemp("limits-auth")
    secret = directory / "broker-pw"
    write_private(secret, "broker-pw\n")
    with cluster_in_chroot(zk_ensemble.connect_string, directory, "lauth") as cluster:
        cluster: LocalCluster
        for name in ("alice", "broker"):
            store.set_user(cluster.zk, name, f"{name}-pw")
        cluster.server_args = (
            *SERVER_ARGS, "--metrics-port", "0", "--authentication-required", "--sasl-mechanism", "PLAIN",
            "--super-user", "User:broker", "--bridge-user", "broker", "--bridge-password-file", str(secret),
            "--bridge-password-without-tls",  # this server speaks no TLS
            "--authentication-timeout-ms", str(int(AUTHENTICATION_TIMEOUT_S * 1000)))
        (process,) = cluster.start_servers(1)
        cluster.wait_for_coordinator()
        yield process


@pytest.mark.parametrize("listener", sorted(LISTENERS))
def test_a_connection_that_never_logs_in_is_closed_at_its_deadline(secured_server, listener):
    port = port_of(secured_server, listener)
    before = refusals(secured_server, listener, "authentication_deadline")
    idle = connect(port)
    began = time.monotonic()
    try:
        assert closed_by_server(idle, timeout=AUTHENTICATION_TIMEOUT_S + 5), "an idle connection was kept"
        idle_for = time.monotonic() - began
    finally:
        idle.close()
    # Requests allowed before a login (ClusterMetadata, ApiVersions) keep nothing open.
    chatty = connect(port)
    began = time.monotonic()
    asked = 0
    try:
        while answered(chatty, valid_frame(listener, asked + 1)):
            asked += 1
            assert time.monotonic() - began < AUTHENTICATION_TIMEOUT_S + 5, "a chatty connection was kept"
            time.sleep(0.05)  # the requests' pace, not a synchronisation
        chatty_for = time.monotonic() - began
    finally:
        chatty.close()
    assert AUTHENTICATION_TIMEOUT_S * 0.9 <= idle_for <= AUTHENTICATION_TIMEOUT_S + 1.5, idle_for
    assert asked >= 2 and chatty_for <= AUTHENTICATION_TIMEOUT_S + 1.5, (asked, chatty_for)
    wait_until(lambda: refusals(secured_server, listener, "authentication_deadline") >= before + 2, 5,
               message="both closes counted")
    assert "did not authenticate within 1 s of connecting" in secured_server.log_path.read_text(errors="replace")


def test_a_registered_member_outlives_the_deadline(secured_server):
    channel = Channel.connect("127.0.0.1", secured_server.port, IO_TIMEOUT_S)
    try:
        registered = channel.request(wire.RegisterConsumerRequest(
            group_id="limits-auth", consumer_id="member", topics=("limits-topic",), session_timeout_ms=30_000,
            user="alice", password="alice-pw"), IO_TIMEOUT_S)
        assert registered.error_code == 0, registered
        assert not closed_by_server(channel.sock, timeout=3 * AUTHENTICATION_TIMEOUT_S), "a member was cut off"
    finally:
        channel.close()


def test_a_client_logged_in_at_the_broker_outlives_the_deadline(secured_server):
    sock = connect(secured_server.broker_port)
    try:
        assert answered(sock, kafka_frame(1, SaslHandshakeRequest[1](mechanism="PLAIN")))
        assert answered(sock, kafka_frame(2, SaslAuthenticateRequest[0](auth_bytes=b"\0alice\0alice-pw")))
        assert not closed_by_server(sock, timeout=2 * AUTHENTICATION_TIMEOUT_S), "a logged-in client was cut off"
        # Answered: a request only a logged-in client may make.
        assert answered(sock, kafka_frame(3, MetadataRequest[0](topics=[])))
    finally:
        sock.close()
