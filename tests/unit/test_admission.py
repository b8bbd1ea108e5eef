"""Accepting connections only while the hub keeps up (coordinator/admission.py)."""

from __future__ import annotations

import socket
import time

import gevent
import gevent.event
import gevent.monkey
import gevent.pool

from zkcoord.coordinator.admission import (PAUSE_AT_LAG_S, PROBE_INTERVAL_S, RESUME_AT_LAG_S, CallbackLag,
                                           GatedStreamServer, should_accept)
from zkcoord.testing import wait_until as _wait_until


def wait_until(predicate, timeout, message):
    return _wait_until(predicate, timeout, interval=0.01, message=message, sleep=gevent.sleep)


def test_accepting_pauses_past_the_high_mark_and_resumes_only_below_the_low_one():
    assert should_accept(True, 0.0)
    assert should_accept(True, PAUSE_AT_LAG_S - 0.01)
    assert not should_accept(True, PAUSE_AT_LAG_S)
    between = (PAUSE_AT_LAG_S + RESUME_AT_LAG_S) / 2
    assert should_accept(True, between)  # no flapping in the band between
    assert not should_accept(False, between)
    assert should_accept(False, RESUME_AT_LAG_S - 0.01)


# A flood that puts the hub past the pause mark with room to spare: the gate
# then stays shut for some 0.7 s, time enough for a test to act while it is.
BEHIND_S = PAUSE_AT_LAG_S + 0.7


def flood(seconds: float, pieces: int = 2000) -> None:
    """Queue ``seconds`` of callbacks that hold the hub, as a crowd's wake-ups
    would. They block in a sleep rather than spin: the hub is held as long,
    and the CPU is left to the machine's other work. Each sleeps until its
    share of the flood is over, so late wake-ups do not add up."""
    sleep = gevent.monkey.get_original("time", "sleep")
    began: list[float] = []

    def hold(piece: int) -> None:
        if not began:
            began.append(time.monotonic())
        left = began[0] + (piece + 1) * seconds / pieces - time.monotonic()
        if left > 0:
            sleep(left)

    for piece in range(pieces):
        gevent.get_hub().loop.run_callback(hold, piece)


def test_the_lag_measured_is_the_time_a_wake_up_waits_in_the_hubs_queue():
    lag = CallbackLag()
    lag.start()
    try:
        gevent.sleep(PROBE_INTERVAL_S * 3)
        assert lag.worst_s < 0.05  # an idle hub
        flood(1.0)
        wait_until(lambda: lag.worst_s >= 0.5, 10, message="the flood to show as lag")
        wait_until(lambda: lag.lag_s < 0.05, 10, message="the lag to go once the queue drains")
    finally:
        lag.stop()


def test_a_server_behind_stops_accepting_and_serves_the_waiting_connections_once_it_catches_up():
    served = []
    server = GatedStreamServer(("127.0.0.1", 0), lambda sock, address: served.append(address),
                               spawn=gevent.pool.Pool(100))
    server.start()
    try:
        flood(BEHIND_S)
        wait_until(lambda: server.gated, 10, message="the server to stop accepting")
        clients = [socket.create_connection(("127.0.0.1", server.server_port)) for _ in range(5)]
        assert server._watcher is None  # not listening while gated: the kernel's backlog holds them
        wait_until(lambda: not server.gated, 20, message="the server to accept again")
        wait_until(lambda: len(served) == 5, 10, message="the waiting connections to be served")
        assert server.pauses == 1
        for client in clients:
            client.close()
    finally:
        server.stop()


def test_the_connection_limit_leaves_room_for_open_files_the_brokers_connections_and_a_reserve(monkeypatch):
    from zkcoord.coordinator import server

    monkeypatch.setattr(server.resource, "getrlimit", lambda what: (20_000, 20_000))
    monkeypatch.setattr(server, "open_files", lambda: 205)  # a broker's 100 partitions: a log and an index each
    assert server.connection_limit(None) == 20_000 - 205 - server.RESERVED_FILES
    assert server.connection_limit(None, others=1000) == 20_000 - 205 - 1000 - server.RESERVED_FILES
    assert server.connection_limit(500, others=1000) == 500


def test_a_server_whose_pool_is_full_when_it_catches_up_accepts_again_once_a_connection_ends():
    release = gevent.event.Event()
    served = []

    def handle(sock, address):
        served.append(address)
        release.wait()

    server = GatedStreamServer(("127.0.0.1", 0), handle, spawn=gevent.pool.Pool(1))
    server.max_accept = 1
    server.start()
    try:
        first = socket.create_connection(("127.0.0.1", server.server_port))
        wait_until(lambda: len(served) == 1, 10, message="the first connection served")  # the pool is full
        flood(BEHIND_S)
        wait_until(lambda: server.gated, 10, message="the server to stop accepting")
        wait_until(lambda: not server.gated, 20, message="the server to catch up, its pool still full")
        second = socket.create_connection(("127.0.0.1", server.server_port))
        release.set()  # the first connection ends: room in the pool
        wait_until(lambda: len(served) == 2, 10, message="the second connection served")
        first.close()
        second.close()
    finally:
        release.set()
        server.stop()
