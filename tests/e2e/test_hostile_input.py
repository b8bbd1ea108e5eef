"""Hostile input to the coordinator's decisions, against real server processes.

A subscription pattern that would take a backtracking engine exponential
time is served without stalling the server; one that no linear-time engine
can run is refused with the reason. An offset beyond the partition's log
end, reported by a member or committed by a stock Kafka client, is refused
with a typed error, the stored offset kept, and the next owner starts there.
A group with no members and no committed offsets is forgotten after its
retention, in ZooKeeper too; one with offsets is kept.
"""

from __future__ import annotations

import threading
import time

from zkcoord import wire
from zkcoord.admin.topics import create_topic
from zkcoord.channel import Channel, ChannelClosed
from zkcoord.zk import layout
from zkcoord.zk.nodes import read_offsets, read_owners
from zkcoord.testing import wait_until
from tests.e2e.checks import produce, wait_whole
from tests.e2e.conftest import SERVER_ARGS

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
    # A stock client's KIP-848 subscribed_topic_regex: Kafka's INVALID_REQUEST, saying why.
    from zkcoord.broker.groups.messages import ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatResponse
    from zkcoord.fetch.connection import BrokerConnection

    cluster.wait_for_brokers()
    connection = BrokerConnection(server.broker, client_id="hostile", timeout_s=IO_TIMEOUT_S)
    try:
        answer = connection._request(ConsumerGroupHeartbeatRequest(
            version=1, group_id="refused-848", member_id="m-1", member_epoch=0, instance_id=None, rack_id=None,
            rebalance_timeout_ms=10_000, subscribed_topic_names=[], subscribed_topic_regex=r"(a+)\1",
            server_assignor=None, topic_partitions=[]), ConsumerGroupHeartbeatResponse, 1)
    finally:
        connection.close()
    assert answer.error_code == 42 and "invalid escape" in answer.error_message, answer  # INVALID_REQUEST
    assert not zk.exists(layout.group_path("refused-848"))


# -- offsets beyond the log end ----------------------------------------------------------------------------

WILD = 10**12


def crafted_member(port: int, group: str, topic: str) -> Channel:
    """A registered member that obeys its Starts and Stops; the test answers its pings."""
    channel = Channel.connect("127.0.0.1", port, IO_TIMEOUT_S)
    answer = channel.request(wire.RegisterConsumerRequest(group_id=group, consumer_id="c-crafted", topics=(topic,),
                                                          session_timeout_ms=4000), timeout=IO_TIMEOUT_S)
    assert answer.error_code == wire.ErrorCode.NONE, answer
    return channel


def serve_until(channel: Channel, report: dict, until, timeout: float = SETTLE_S):
    """Obey Starts and Stops, answer pings reporting ``report`` offsets, until
    ``until(frame)``, asked after each frame, returns something; that."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        frame = channel.receive(IO_TIMEOUT_S)
        if frame is None:
            continue
        message = frame.message
        if isinstance(message, wire.StartRequest):
            channel.send(wire.RestartFetcherResponse(), frame.correlation_id)
        elif isinstance(message, wire.StopRequest):
            channel.send(wire.StopResponse(offsets=()), frame.correlation_id)
        elif isinstance(message, wire.PingRequest):
            channel.send(wire.PingResponse(offsets=wire.offset_entries(report), last_poll_ms_ago=0),
                         frame.correlation_id)
        found = until(frame)  # after answering: the member stays in step whatever is waited for
        if found:
            return found
    raise AssertionError("the coordinator never sent what was waited for")


def test_a_member_reporting_an_offset_beyond_the_log_end_is_refused(cluster_factory, zk):
    cluster = cluster_factory(1)
    cluster.wait_for_brokers()
    server = cluster.servers[cluster.wait_for_coordinator()]
    cluster.create_topic("w", 1)
    produce(cluster, "w", 5)
    tp = ("w", 0)
    channel = crafted_member(server.port, "wild", "w")
    try:
        # A true offset is committed...
        serve_until(channel, {tp: 3}, lambda _f: read_offsets(zk, "wild").get(tp) == 3)
        # ...one beyond the log end (5) is refused, and the member told why.
        refusal = serve_until(channel, {tp: WILD}, lambda f: isinstance(f.message, wire.ErrorResponse) and f.message)
        assert refusal.error_code == wire.ErrorCode.OFFSET_OUT_OF_RANGE, refusal
        assert str(WILD) in refusal.message and "log end 5" in refusal.message, refusal.message
        wait_until(lambda: _closed(channel), timeout=SETTLE_S, message="the member dropped")
    finally:
        channel.close()
    assert read_offsets(zk, "wild").get(tp) == 3
    # The next owner starts where the group really was.
    member = cluster.add_consumer("wild", topics=["w"])
    wait_until(lambda: len(member.records()) >= 2, timeout=SETTLE_S, message="the next owner's records")
    assert [r["value"] for r in member.records()] == ["m-3", "m-4"]


def test_an_offset_below_a_recreated_topics_old_log_end_but_beyond_its_new_one_is_refused(cluster_factory, zk):
    # The log end learnt of the old topic (10) must not vouch for the new
    # one's: the same name and partition count, a new topic id, an empty log.
    from zkcoord.zk.nodes import read_brokers

    cluster = cluster_factory(2)
    cluster.wait_for_brokers()
    server = cluster.servers[cluster.wait_for_coordinator()]
    first, second = sorted(read_brokers(zk))
    create_topic(zk, "again", assignment={0: [first]})
    cluster.wait_led("again", 1)
    produce(cluster, "again", 10)
    tp = ("again", 0)
    channel = crafted_member(server.port, "recreated", "again")
    try:
        serve_until(channel, {tp: 8}, lambda _f: read_offsets(zk, "recreated").get(tp) == 8)
        old_id = layout.decode_topic("again", zk.get(layout.topic_path("again"))[0]).topic_id
        zk.delete(layout.topic_path("again"), recursive=True)
        create_topic(zk, "again", assignment={0: [second]})  # its log on the other broker: empty
        wait_until(lambda: layout.decode_topic("again", zk.get(layout.topic_path("again"))[0]).topic_id
                   not in (None, old_id), timeout=SETTLE_S, message="the recreated topic's new id")
        cluster.wait_led("again", 1)
        refusal = serve_until(channel, {tp: 9}, lambda f: isinstance(f.message, wire.ErrorResponse) and f.message)
        assert refusal.error_code == wire.ErrorCode.OFFSET_OUT_OF_RANGE, refusal
        assert "offset 9" in refusal.message and "log end 0" in refusal.message, refusal.message
    finally:
        channel.close()
    assert read_offsets(zk, "recreated").get(tp) == 8


def _closed(channel: Channel) -> bool:
    try:
        channel.receive(0.2)
    except ChannelClosed:
        return True
    return False


def test_a_stock_client_committing_beyond_the_log_end_gets_offset_out_of_range(cluster_factory, zk):
    from kafka import KafkaConsumer, OffsetAndMetadata, TopicPartition
    from kafka.errors import OffsetOutOfRangeError

    cluster = cluster_factory(1)
    cluster.wait_for_brokers()
    cluster.create_topic("k", 1)
    produce(cluster, "k", 5)
    tp = TopicPartition("k", 0)
    consumer = KafkaConsumer(bootstrap_servers=cluster.broker_list, group_id="kp", auto_offset_reset="earliest",
                             enable_auto_commit=False, session_timeout_ms=6000, heartbeat_interval_ms=500)
    try:
        consumer.subscribe(["k"])
        wait_until(lambda: consumer.poll(200) is not None and consumer.assignment(), timeout=SETTLE_S,
                   message="the kafka-python consumer assigned")
        consumer.commit({tp: OffsetAndMetadata(2, "", -1)})
        wait_until(lambda: read_offsets(zk, "kp").get(("k", 0)) == 2, timeout=SETTLE_S,
                   message="the true commit written")
        try:
            consumer.commit({tp: OffsetAndMetadata(WILD, "", -1)})
        except OffsetOutOfRangeError:
            pass
        else:
            raise AssertionError("a commit beyond the log end was accepted")
        assert consumer.committed(tp) == 2
    finally:
        consumer.close()
    assert read_offsets(zk, "kp").get(("k", 0)) == 2
    member = cluster.add_consumer("kp", topics=["k"])
    wait_until(lambda: len(member.records()) >= 3, timeout=SETTLE_S, message="the next owner's records")
    assert [r["value"] for r in member.records()] == ["m-2", "m-3", "m-4"]


# -- forgetting empty groups ---------------------------------------------------------------------------------

RETENTION_MS = 2000


def test_an_empty_group_without_offsets_is_forgotten_after_its_retention(cluster_factory, zk):
    cluster = cluster_factory(1, server_args=(*SERVER_ARGS, "--group-retention-ms", str(RETENTION_MS)))
    cluster.wait_for_brokers()
    cluster.wait_for_coordinator()
    cluster.create_topic("s", 1)
    produce(cluster, "s", 3)
    # A member whose pattern matches no topic runs nothing, so commits nothing.
    passing = cluster.add_consumer("passing", pattern="absent-.*")
    staying = cluster.add_consumer("staying", topics=["s"])
    state_of = {g: layout.group_state_path(g) for g in ("passing", "staying")}
    wait_until(lambda: zk.exists(state_of["passing"])
               and layout.decode_group_state(zk.get(state_of["passing"])[0]).assignment,
               timeout=SETTLE_S, message="the passing member in its group's state")
    wait_until(lambda: read_offsets(zk, "staying").get(("s", 0)) == 3, timeout=SETTLE_S,
               message="the staying group's offsets committed")
    leaving = time.monotonic()  # the group cannot be empty before this
    for member in (passing, staying):
        assert member.terminate() == 0  # a clean leave
    wait_until(lambda: all(zk.exists(p) and not layout.decode_group_state(zk.get(p)[0]).assignment
                           for p in state_of.values()), timeout=SETTLE_S, message="both groups written empty")
    wait_until(lambda: not zk.exists(state_of["passing"]), timeout=SETTLE_S,
               message=f"the passing group forgotten (its offsets: {read_offsets(zk, 'passing')})")
    assert time.monotonic() - leaving >= RETENTION_MS / 1000.0  # not before its retention
    assert not zk.exists(layout.group_path("passing"))
    assert not zk.exists(state_of["passing"].rsplit("/", 1)[0])
    # The group with offsets stays past its retention, and so do its offsets.
    stays(lambda: zk.exists(state_of["staying"]) and read_offsets(zk, "staying") == {("s", 0): 3},
          RETENTION_MS / 1000.0, "the group with committed offsets was forgotten")
    # A group of the same name later starts afresh.
    again = cluster.add_consumer("passing", pattern="absent-.*")
    wait_until(lambda: zk.exists(state_of["passing"]), timeout=SETTLE_S, message="the passing group again")
    assert layout.decode_group_state(zk.get(state_of["passing"])[0]).generation == 1
    assert again.alive


def stays(predicate, seconds: float, message: str) -> None:
    """Check ``predicate`` over a window of ``seconds``; fail as soon as it is false."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert predicate(), message
        time.sleep(0.05)


def test_a_member_told_its_offset_is_beyond_the_log_end_stops_and_its_application_is_told():
    """The member side, against a scripted coordinator: the refusal stops its
    partitions, it does not register again, and poll()'s caller gets the error."""
    from zkcoord.member.config import MemberConfig
    from zkcoord.member.membership import GroupMembership
    from tests.e2e.test_bad_input import Recorder, ScriptedCoordinator, _running_member

    coordinator, recorder = ScriptedCoordinator(epoch=5), Recorder()
    member = GroupMembership([f"127.0.0.1:{coordinator.port}"],
                             MemberConfig(group="g", topics=("t",), session_timeout_ms=3000), recorder)
    member.start()
    try:
        channel = _running_member(coordinator, member, recorder)
        channel.send(wire.ErrorResponse(error_code=wire.ErrorCode.OFFSET_OUT_OF_RANGE,
                                        message="offset 10 for t-0 is beyond the partition's log end 5"), 0)
        wait_until(lambda: member.error is not None, timeout=SETTLE_S, message="the member told")
        assert isinstance(member.error, wire.OffsetOutOfRange) and "log end 5" in str(member.error)
        assert recorder.stopped == [frozenset({("t", 0), ("t", 1)})] and recorder.running == {}
        assert coordinator.registered.empty()  # it does not come back
    finally:
        coordinator.close()
        member.close(timeout=5)
