"""The consistent-region handoff of QueryMember, driven directly (no Spark,
no sockets): a Stop waits for the batch in flight and answers with the
offsets of the last committed batch; a stopped query leaves with them at
once; SIGTERM, which is how Spark ends the source's process, runs that leave
before the process ends."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

import zkcoord
from zkcoord import wire
from zkcoord.member.protocol import MemberProtocol
from zkcoord.spark.group import QueryMember
from zkcoord.spark.offsets import StreamOffset
from zkcoord.spark.options import parse_options
from zkcoord.testing import wait_until

A, B = ("t", 0), ("t", 1)


def member(handoff_ms: int = 5000) -> QueryMember:
    options = parse_options({"zookeeper": "unused:1", "subscribe": "t", "group": "g",
                             "handoffTimeoutMs": str(handoff_ms)}, streaming=True)
    return QueryMember(options, view=None)


def test_stop_waits_for_the_batch_in_flight_then_hands_over_its_end():
    m = member()
    m.on_start({A: 5, B: -1})
    with m.planning() as plan:
        assert plan.owned(StreamOffset({})) == {A: 5, B: None}
        plan.planned(StreamOffset({A: 9, B: 4}, {A: 5, B: 0}), reading={A, B})
    answer = {}
    stopper = threading.Thread(target=lambda: answer.update(m.on_stop(frozenset({A}))))
    stopper.start()
    stopper.join(0.3)
    assert stopper.is_alive(), "the Stop must wait while a batch reading A is in flight"
    with m.planning() as plan:  # Spark plans the next batch: the one ending at A=9 is committed
        owned = plan.owned(StreamOffset({A: 9, B: 4}))
        plan.planned(StreamOffset({A: 9, B: 6}), reading={B})
    stopper.join(5)
    assert answer == {A: 9}
    assert owned == {B: None}, "a partition being stopped is no longer planned"
    assert m.offsets() == {B: 4}


def test_stop_of_a_partition_never_planned_returns_the_granted_offset():
    m = member()
    m.on_start({A: 7, B: -1})
    assert m.on_stop(frozenset({A, B})) == {A: 7}
    assert m.granted() == set()


def test_stop_gives_up_waiting_after_the_handoff_timeout():
    m = member(handoff_ms=200)
    m.on_start({A: 0})
    with m.planning() as plan:
        plan.owned(StreamOffset({A: 3}))
        plan.planned(StreamOffset({A: 8}), reading={A})
    assert m.on_stop(frozenset({A})) == {A: 3}  # the last committed batch, not the one in flight


def test_readers_pickle_without_their_connections():
    import pickle
    import threading as th

    from zkcoord.spark.source import BatchReader, StreamReader

    options = parse_options({"zookeeper": "unused:1", "subscribe": "t", "group": "g"}, streaming=True)
    reader = StreamReader(options)
    reader._view._zk = th.Lock()  # stands for a live session: unpicklable
    reader._group = member()
    copy = pickle.loads(pickle.dumps(reader))
    assert copy.options == options and copy._group is None and copy._view._zk is None
    batch = BatchReader(parse_options({"zookeeper": "unused:1", "subscribe": "t"}, streaming=False))
    assert pickle.loads(pickle.dumps(batch)).options == batch.options


class Leaving:
    """What GroupMembership.close() does to its listener: the protocol's leave."""

    def __init__(self, m: QueryMember):
        self.protocol = MemberProtocol(wire.RegisterConsumerRequest(group_id="g", consumer_id="q"), m)
        self.protocol.register(0.0)
        self.protocol.registered(wire.RegisterConsumerResponse(coordinator_epoch=1))
        self.request = None
        self.error = None  # what ended the membership, as GroupMembership's

    def close(self) -> None:
        self.request = self.protocol.leave()


def test_a_stopped_query_leaves_with_its_last_committed_batch_without_waiting():
    m = member(handoff_ms=30_000)
    membership = m._membership = Leaving(m)
    membership.protocol.answer(wire.StartRequest(coordinator_epoch=1, generation=1, partitions=[
        wire.TopicPartitionOffset("t", 0, 0), wire.TopicPartitionOffset("t", 1, 2)]), 0.0)
    with m.planning() as plan:
        plan.owned(StreamOffset({A: 4, B: 2}))
        plan.planned(StreamOffset({A: 9, B: 2}), reading={A})  # Spark stops the query during this batch
    began = time.monotonic()
    m.close()
    assert time.monotonic() - began < 5, "Spark calls no more: the batch in flight never commits"
    assert wire.offsets_of(membership.request.offsets) == {A: 4, B: 2}


def test_a_refused_membership_fails_the_next_planning_and_the_wait_for_partitions():
    m = member()
    membership = m._membership = Leaving(m)
    with m.planning():
        pass
    refusal = wire.AuthenticationFailed("authentication failed for user 'alice'")
    # The membership's thread records the refusal while the query waits for partitions.
    threading.Timer(0.3, lambda: setattr(membership, "error", refusal)).start()
    began = time.monotonic()
    with pytest.raises(wire.AuthenticationFailed):
        m.wait_for_assignment(30)
    assert time.monotonic() - began < 5, "a refusal ends the wait for partitions that never come"
    with pytest.raises(wire.AuthenticationFailed, match="user 'alice'"):
        with m.planning():
            pass


# Stands for Spark's source runner: the reader's stop() runs when its socket
# closes (here stdin), and SIGTERM comes too, in either order.
RUNNER = textwrap.dedent("""
    import os, sys, time
    from zkcoord.spark import worker
    from zkcoord.spark.options import parse_options
    from zkcoord.spark.source import StreamReader

    log, go = sys.argv[1], sys.argv[2]

    def note(line):
        with open(log, "a") as f:
            f.write(line + "\\n")

    class Group:  # a member whose leave takes until the test says go
        def close(self):
            note("leaving")
            deadline = time.monotonic() + 30
            while not os.path.exists(go) and time.monotonic() < deadline:
                time.sleep(0.01)
            note("left")

    reader = StreamReader(parse_options({"zookeeper": "unused:1", "subscribe": "t", "group": "g"},
                                        streaming=True))
    reader._group = Group()
    assert worker.leave_before_terminating(reader.stop)
    note("ready")
    try:
        sys.stdin.read()
    finally:
        reader.stop()
    note("exits")
""")


def run_runner(tmp_path, eof_first: bool) -> tuple[int, list[str]]:
    log, go = tmp_path / "log", tmp_path / "go"

    def lines() -> list[str]:
        return log.read_text().splitlines() if log.exists() else []

    # Run from the checkout this test imported zkcoord from.
    root = Path(zkcoord.__file__).resolve().parent.parent
    process = subprocess.Popen([sys.executable, "-c", RUNNER, str(log), str(go)], stdin=subprocess.PIPE, cwd=root)
    try:
        wait_until(lambda: "ready" in lines(), timeout=30, message="the runner to start")
        if eof_first:
            process.stdin.close()  # the query was interrupted while it called the reader
        else:
            process.send_signal(signal.SIGTERM)
        wait_until(lambda: "leaving" in lines(), timeout=10, message="the leave to begin")
        process.send_signal(signal.SIGTERM)  # Spark sends it twice; neither may cut the leave short
        if not eof_first:
            process.stdin.close()
        go.touch()
        return process.wait(30), lines()
    finally:
        if process.poll() is None:
            process.kill()


def test_sigterm_first_leaves_then_ends_the_process_as_sigterm(tmp_path):
    code, lines = run_runner(tmp_path, eof_first=False)
    assert lines.count("leaving") == lines.count("left") == 1, lines
    assert code == 128 + signal.SIGTERM


def test_sigterm_during_the_readers_own_stop_lets_it_finish(tmp_path):
    code, lines = run_runner(tmp_path, eof_first=True)
    assert lines.count("leaving") == lines.count("left") == 1, lines
    assert code in (0, 128 + signal.SIGTERM)
