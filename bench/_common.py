"""Helpers the coordinator benchmarks share: a harness (a local ZooKeeper
ensemble with `zkcoord server` processes, started through zkcoord.testing),
and many GroupMembership clients in the bench process that record what their
listeners were told and when.

The membership helpers use gevent: a bench that imports them calls
``gevent.monkey.patch_all()`` before importing this module, so every
membership's network thread is a greenlet.
"""

from __future__ import annotations

import logging
import re
import resource
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional, Sequence

import gevent
from kazoo.client import KazooClient
from zkcoord.zk import client as zk_client
from zkcoord.zk.gevent_handler import GeventHandler

from zkcoord.member.config import MemberConfig
from zkcoord.member.membership import GroupMembership
from zkcoord.testing import LocalCluster, exit_on_signal, start_ensemble, wait_until
from zkcoord.zk import layout
from zkcoord.zk.ensemble import LocalEnsemble

ZK_SESSION_TIMEOUT_MS = 4000  # the servers' ZooKeeper session
ZK_TICK_MS = 250
SETTLE_S = 0.5  # quiet time that says a group has stopped moving
# A server's log as it takes office in a slot: (slot, epoch, load time in ms).
LOADED_LINE = re.compile(r"is the coordinator of slot (\d+), epoch (\d+) \(loaded in (\d+) ms\)")
NO_BROKER = 0  # a brokerless topic's partitions name a broker that no process runs
STABLE_LINE = re.compile(r"\[group (\S+) gen (\d+)\] stable: (\d+) member\(s\), (\d+) partition\(s\), "
                         r"(\d+) paused, (\d+) ms")


def brokerless_topic(zk: KazooClient, name: str, partitions: int) -> str:
    """Write topic ``name`` straight into ZooKeeper, its partitions led by no
    broker: a coordinator needs their count, not their logs (a broker's log
    and index for each of 10,000 partitions pass the open-file limit)."""
    assignment = layout.new_topic_assignment({p: (NO_BROKER,) for p in range(partitions)})
    zk.create(layout.topic_path(name), layout.encode_topic(assignment), makepath=True)
    return name


class Recorder:
    """A membership listener that records when things happened to one member."""

    def __init__(self):
        self.membership: Optional[GroupMembership] = None
        self.held: frozenset = frozenset()
        self.last_start = 0.0
        self.start_epoch = -1
        self.start_generation = -1
        self.last_event = 0.0
        self.first_stop_after = 0.0  # first on_stop after mark()
        self.mark_at = 0.0
        self.events = 0
        self.pings = 0
        self.last_ping = 0.0
        self.max_gap = 0.0

    def on_start(self, partitions):
        now = time.perf_counter()
        self.held = frozenset(partitions)
        self.last_start = self.last_event = now
        self.start_epoch, self.start_generation = self.membership.epoch, self.membership.generation
        self.events += 1

    def on_stop(self, partitions):
        now = time.perf_counter()
        self.held = self.held - frozenset(partitions)
        self.last_event = now
        if self.mark_at and not self.first_stop_after and now >= self.mark_at:
            self.first_stop_after = now
        self.events += 1
        return {}

    def offsets(self):  # called on every Ping: count them, report nothing to commit
        now = time.perf_counter()
        if self.last_ping:
            self.max_gap = max(self.max_gap, now - self.last_ping)
        self.last_ping = now
        self.pings += 1
        return None

    def last_poll_ms_ago(self):
        return 0  # always "just polled": max.poll.interval never evicts a bench member

    def mark(self) -> None:
        """Start a measurement window."""
        self.mark_at = time.perf_counter()
        self.first_stop_after = 0.0
        self.events = self.pings = 0
        self.max_gap = 0.0


class TimedMember:
    """A benchmark's group member: a GroupMembership over the network, its
    listener recording what it was told and when (not the coordinator's
    record of a member, coordinator/group.py's Member)."""

    def __init__(self, bootstrap, group: str, topic: str, session_timeout_ms: int,
                 recorder: Optional[Recorder] = None, **member_settings):
        self.recorder = recorder if recorder is not None else Recorder()
        self.membership = GroupMembership(bootstrap, MemberConfig(
            group=group, topics=(topic,), session_timeout_ms=session_timeout_ms, **member_settings), self.recorder)
        self.recorder.membership = self.membership
        self.started_at = time.perf_counter()
        self.registered_at = 0.0
        self.membership.start()
        gevent.spawn(self._watch_registration)

    def _watch_registration(self):
        self.membership.registered.wait()
        self.registered_at = time.perf_counter()


def complete(members: list[TimedMember], partitions: int, epoch: Optional[int] = None) -> bool:
    """Every member registered and running something (under ``epoch`` if
    given), and together they hold each partition exactly once."""
    total = 0
    union = set()
    for m in members:
        held = m.recorder.held
        if not m.membership.registered.is_set() or not held:
            return False
        if epoch is not None and m.recorder.start_epoch != epoch:
            return False
        total += len(held)
        union |= held
    return total == partitions and len(union) == partitions


def settle(members: list[TimedMember], timeout: float = 30.0) -> None:
    """Wait until no member's listener has run for SETTLE_S."""
    wait_until(lambda: time.perf_counter() - max(m.recorder.last_event for m in members) > SETTLE_S,
               timeout, message="the group to settle", interval=0.05)


def close_all(members: list[TimedMember]) -> None:
    """Leave cleanly, all at once (each leave is a small exchange with the coordinator)."""
    jobs = [gevent.spawn(m.membership.close, 5.0) for m in members]
    gevent.joinall(jobs, timeout=60)


class Harness:
    """A ZooKeeper ensemble (``zk_nodes``, 3 by default) and ``servers`` `zkcoord server` processes
    (each with its embedded broker) on 127.0.0.1, under ``work``; the
    servers take ``server_args`` on top of a short ZooKeeper session."""

    def __init__(self, work: Path, server_args: Sequence[str] = (), zk_nodes: int = 3):
        self.work = work
        self.zk_nodes = zk_nodes
        # Every member runs on this host: one address, past the per-address cap meant for the network.
        self.server_args = ("--zk-session-timeout-ms", str(ZK_SESSION_TIMEOUT_MS),
                            "--max-connections-per-address", "1000000", *server_args)
        self.ensemble: Optional[LocalEnsemble] = None
        self.cluster: Optional[LocalCluster] = None
        self.zk: Optional[KazooClient] = None
        self.results: list[str] = []

    def start(self, servers: int = 3) -> None:
        self.ensemble = start_ensemble(self.work / "zk", nodes=self.zk_nodes, tick_ms=ZK_TICK_MS, timeout=90)
        self.zk = zk_client.open_client(self.ensemble.connect_string, handler=GeventHandler())
        zk_client.start(self.zk, 30)
        self.cluster = LocalCluster(self.ensemble.connect_string, self.work / "cluster", self.server_args)
        self.cluster.start_servers(servers, timeout=60)  # waits until every broker is registered too
        self.cluster.wait_for_coordinator(60)

    def stop(self) -> None:
        if self.zk is not None:
            try:
                self.zk.stop()
            except Exception:  # closing down: the ensemble may already be gone
                pass
        if self.cluster is not None:
            self.cluster.close()
        if self.ensemble is not None:
            self.ensemble.stop()

    def topic(self, name: str, partitions: int) -> str:
        # Members need the partitions in ZooKeeper, not their leaders: no wait.
        self.cluster.create_topic(name, partitions, leaders_ready=False)
        return name

    def coordinator(self) -> tuple[int, int]:
        """(server id, epoch) of the coordinator now."""
        server_id = int(layout.decode_coordinator(self.zk.get(layout.COORDINATOR_PATH)[0]))
        epoch = layout.decode_coordinator_epoch(self.zk.get(layout.COORDINATOR_EPOCH_PATH)[0])
        return server_id, epoch

    def coordinator_log(self, server_id: int) -> str:
        return self.cluster.servers[server_id].log_path.read_text(errors="replace")

    def members(self, group: str, topic: str, count: int, session_timeout_ms: int) -> list[TimedMember]:
        return [TimedMember(self.cluster.bootstrap, group, topic, session_timeout_ms) for _ in range(count)]

    def say(self, line: str) -> None:
        print(line, flush=True)
        self.results.append(line)

    def dump_logs(self) -> None:
        """Print the tail of every server's log (on a failure)."""
        if self.cluster is not None:
            for name, tail in self.cluster.log_tails().items():
                print(f"--- {name} log (tail) ---\n{tail[-2000:]}", file=sys.stderr)


class CountingHandler(logging.Handler):
    """Counts the members' warnings (a failed metadata round, a dropped
    connection) instead of printing thousands of them."""

    def __init__(self):
        super().__init__(logging.WARNING)
        self.count = 0

    def emit(self, record):
        self.count += 1


MEMBER_WARNINGS = CountingHandler()


def quiet_logs() -> None:
    member_log = logging.getLogger("zkcoord.member.membership")
    member_log.addHandler(MEMBER_WARNINGS)
    member_log.propagate = False
    logging.getLogger("kazoo").setLevel(logging.ERROR)


def run_in_scratch(prefix: str, run, args) -> int:
    """A fleet benchmark's main: SIGTERM as Ctrl-C, members' chatter quiet,
    ``run(args, work)`` in a scratch directory (kept with ``args.keep``),
    and its last line printed."""
    signal.signal(signal.SIGTERM, exit_on_signal)
    quiet_logs()
    work = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        line = run(args, work)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    print(line, flush=True)
    return 0


def raise_fd_limit() -> int:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


