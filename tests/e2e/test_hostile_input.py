"""Hostile input to the coordinator's decisions, against real server processes.

A subscription pattern that would take a backtracking engine exponential
time is served without stalling the server; one that no linear-time engine
can run is refused with the reason.
"""

from __future__ import annotations

import threading
import time

from zkcoord import wire
from zkcoord.admin.topics import create_topic
from zkcoord.channel import Channel
from zkcoord.zk import layout
from zkcoord.zk.nodes import read_owners
from zkcoord.testing import wait_until
from tests.e2e.checks import wait_whole

SETTLE_S = 30
IO_TIMEOUT_S = 5.0
# ``([a-z]+)+X`` takes Python's re about 0.3 s on a 22-character name and 4x
# per 2 more characters: on one of these names, longer than the universe is old.
HOSTILE = "([a-z]+)+X"
LONG_TOPICS = [("a" * 200) + f"{n:03d}" for n in range(40)]


def request(port: int, message: wire.Message) -> wire.Message:
    channel = Channel.connect("127.0.0.1", port, IO_TIMEOUT_S)
    try:
        return channel.request(message, timeout=IO_TIMEOUT_S)
    finally:
        channel.close()


class LatencyProbe:
    """Times ClusterMetadata round trips to ``port``, one after another, in a thread."""

    def __init__(self, port: int):
        self.port = port
        self.latencies: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            began = time.monotonic()
            try:
                answer = request(self.port, wire.ClusterMetadataRequest())
                ok = answer.error_code == wire.ErrorCode.NONE
            except Exception:  # a timeout counts as the whole wait
                ok = False
            self.latencies.append(time.monotonic() - began if ok else float("inf"))
            self._stop.wait(0.02)

    def stop(self) -> list[float]:
        self._stop.set()
        self._thread.join(IO_TIMEOUT_S * 2)
        return self.latencies


def test_a_catastrophic_pattern_does_not_hold_the_server(cluster_factory, zk):
    cluster = cluster_factory(1)
    cluster.wait_for_brokers()
    server = cluster.servers[cluster.wait_for_coordinator()]
    for topic in LONG_TOPICS:
        create_topic(zk, topic, 1)
    create_topic(zk, "hostileX", 2)
    create_topic(zk, "plain", 2)
    probe = LatencyProbe(server.port)
    try:
        hostile = cluster.add_consumer("hostile", pattern=HOSTILE)
        began = time.monotonic()
        # Served: it gets the one topic it matches, and none of the long ones.
        wait_whole(zk, "hostile", [hostile], {("hostileX", 0), ("hostileX", 1)}, timeout=SETTLE_S)
        # Another group registers and settles meanwhile, as quickly as ever.
        other = cluster.add_consumer("other", topics=["plain"])
        settled = wait_whole(zk, "other", [other], {("plain", 0), ("plain", 1)}, timeout=SETTLE_S)
        # A topic created now is matched against the pattern by the topic watch.
        create_topic(zk, "late" + "a" * 100, 1)
        wait_until(lambda: probe.latencies and time.monotonic() - began > 3, timeout=SETTLE_S,
                   message="probes over a few seconds")
    finally:
        latencies = probe.stop()
    assert len(latencies) >= 20, latencies
    assert max(latencies) < 1.0, f"a ClusterMetadata took {max(latencies):.2f}s: the server stalled"
    assert settled < 10, settled
    assert set(read_owners(zk, "hostile")) == {("hostileX", 0), ("hostileX", 1)}


def test_a_pattern_no_linear_engine_runs_is_refused_with_its_reason(cluster_factory, zk):
    cluster = cluster_factory(1)
    server = cluster.servers[cluster.wait_for_coordinator()]
    for pattern, reason in ((r"(a+)\1", "invalid escape"), ("(?=a)a+", "(?="), ("a" * 1001, "at most 1000")):
        answer = request(server.port, wire.RegisterConsumerRequest(
            group_id="refused", consumer_id="c-1", topics=(), pattern=pattern, session_timeout_ms=4000))
        assert answer.error_code == wire.ErrorCode.INVALID_REGISTRATION, answer
        assert reason in answer.error_message, answer.error_message
    assert not zk.exists(layout.group_path("refused"))
