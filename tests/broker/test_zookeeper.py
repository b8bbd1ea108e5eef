"""The broker in ZooKeeper: its Kafka-format registration, the partitions it
takes on as topics appear and grow, state nodes, restart recovery, and the
topics admin commands."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time

import pytest
from confluent_kafka import Producer
from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse

from tests.broker.batches import make_batch, read_values
from tests.broker.test_clients import confluent_read
from tests.broker.test_protocol import Raw, fetch, produce
from zkcoord.security.secrets import write_private
from zkcoord.testing import ClusterError, wait_until
from zkcoord.admin import topics as admin
from zkcoord.zk import layout


def test_registration_is_kafka_json_and_goes_away_on_stop(cluster, zk):
    broker = cluster.start_broker(3, "--rack", "r1")
    data, stat = zk.get(layout.broker_path(3))
    assert stat.ephemeralOwner != 0
    reg = layout.decode_broker(3, data)
    assert (reg.host, reg.port, reg.rack) == ("127.0.0.1", broker.port, "r1")
    raw = json.loads(data)
    assert raw["endpoints"] == [f"PLAINTEXT://127.0.0.1:{broker.port}"]
    assert raw["listener_security_protocol_map"] == {"PLAINTEXT": "PLAINTEXT"}
    assert broker.terminate() == 0
    assert zk.exists(layout.broker_path(3)) is None


def test_duplicate_broker_id_is_refused(cluster):
    cluster.start_broker(1)
    with pytest.raises(ClusterError, match="registered by another"):
        cluster.start_broker(1, "--register-timeout-ms", "500")
    assert cluster.brokers[0].alive


def test_partitions_follow_topic_changes(cluster, zk):
    b0 = cluster.start_broker(0)
    b1 = cluster.start_broker(1)
    assignment = admin.create_topic(zk, "grow", 4)
    assert assignment == {0: (0,), 1: (1,), 2: (0,), 3: (1,)}
    cluster.wait_led("grow", 4)
    for p, (leader,) in assignment.items():
        state = layout.decode_partition_state(zk.get(layout.partition_state_path("grow", p))[0])
        assert (state.leader, state.isr) == (leader, (leader,))
    added = admin.add_partitions(zk, "grow", 6)
    assert set(added) == {4, 5}
    cluster.wait_led("grow", 6)
    # every partition is writable at its leader, and metadata from either
    # broker sends clients to the right one
    producer = Producer({"bootstrap.servers": b0.bootstrap, "linger.ms": 1})
    for p in range(6):
        producer.produce("grow", value=b"p%d" % p, partition=p)
    assert producer.flush(20) == 0
    for p in range(6):
        got = confluent_read(b1.bootstrap, "grow", p, 0, 1)
        assert got[0][2] == b"p%d" % p
    # a broker answers NOT_LEADER for a partition it does not lead
    raw = Raw(b0.port)
    assert produce(raw, "grow", 1, make_batch([b"x"])).error_code == 6
    raw.close()


def test_restart_recovers_a_torn_tail(cluster):
    # a short session so the killed broker's registration expires quickly
    broker = cluster.start_broker(0, "--zk-session-timeout", "1.5")
    cluster.create_topic("durable", 1)
    raw = Raw(broker.port)
    for i in range(10):
        assert produce(raw, "durable", 0, make_batch([b"m%d" % i] * 3)).error_code == 0
    raw.close()
    broker.kill()
    segment = broker.data_dir / "durable-0" / f"{0:020d}.log"
    good = segment.read_bytes()
    with open(segment, "ab") as f:
        f.write(make_batch([b"half written"])[:25])
    broker = cluster.start_broker(0, "--zk-session-timeout", "1.5")
    assert segment.read_bytes() == good
    raw = Raw(broker.port)
    values = read_values(fetch(raw, "durable", 0, 0).records)
    assert [v for _, v in values] == [b"m%d" % i for i in range(10) for _ in range(3)]
    assert produce(raw, "durable", 0, make_batch([b"after"])).base_offset == 30
    raw.close()


def test_retention_by_size_and_fetch_below_log_start(cluster):
    broker = cluster.start_broker(0, "--segment-bytes", "4096", "--retention-bytes", "8192",
                                  "--retention-check-ms", "100")
    cluster.create_topic("short", 1)
    raw = Raw(broker.port)
    for i in range(60):
        assert produce(raw, "short", 0, make_batch([b"%03d" % i + b"." * 300])).error_code == 0
    directory = broker.data_dir / "short-0"

    def settled():
        # what retention leaves: without its oldest segment the log is < 8192 bytes
        sizes = [f.stat().st_size for f in sorted(directory.glob("*.log"))]
        return len(sizes) > 1 and sum(sizes) - sizes[0] < 8192
    wait_until(settled, timeout=10, message="retention to delete old segments")
    below = fetch(raw, "short", 0, 0)
    assert below.error_code == 1  # OFFSET_OUT_OF_RANGE below the log start
    start = below.log_start_offset
    assert 0 < start < 60
    values, offset = [], start
    while offset < 60:  # a fetch returns batches of one segment at a time
        got = read_values(fetch(raw, "short", 0, offset).records)
        values += got
        offset = got[-1][0] + 1
    assert [v[:3] for _, v in values] == [b"%03d" % i for i in range(start, 60)]
    raw.close()


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "zkcoord.admin.topics", "topics", *args],
                          capture_output=True, text=True, timeout=60)


def test_topics_cli(cluster, zk_connect):
    cluster.start_broker(0)
    cluster.start_broker(1)
    ok = run_cli("create", "--zookeeper", zk_connect, "--topic", "orders", "--partitions", "3")
    assert ok.returncode == 0, ok.stderr
    assert run_cli("list", "--zookeeper", zk_connect).stdout.split() == ["orders"]
    cluster.wait_led("orders", 3)
    described = run_cli("describe", "--zookeeper", zk_connect, "--topic", "orders").stdout
    assert "PartitionCount: 3" in described and "Partition: 2\tLeader: 0" in described
    assert run_cli("add-partitions", "--zookeeper", zk_connect, "--topic", "orders",
                   "--partitions", "5").returncode == 0
    assert len(layout.decode_topic("orders", cluster.zk.get(layout.topic_path("orders"))[0]).partitions) == 5
    before = cluster.zk.get(layout.topic_path("orders"))[0]
    for bad in (["create", "--topic", "orders", "--partitions", "1"],        # exists
                ["create", "--topic", "bad name", "--partitions", "1"],      # name rules
                ["create", "--topic", "x" * 250, "--partitions", "1"],
                ["create", "--topic", "zero", "--partitions", "0"],
                ["create", "--topic", "rf", "--partitions", "1", "--replication-factor", "2"],
                ["add-partitions", "--topic", "orders", "--partitions", "2"],  # shrink
                ["describe", "--topic", "missing"]):
        result = run_cli(bad[0], "--zookeeper", zk_connect, *bad[1:])
        assert result.returncode == 2, (bad, result.stderr)
        assert result.stderr.startswith("zkcoord topics: "), result.stderr
    assert cluster.zk.get(layout.topic_path("orders"))[0] == before
    assert run_cli("list", "--zookeeper", zk_connect).stdout.split() == ["orders"]


def test_create_without_brokers_fails_clearly(zk):
    with pytest.raises(admin.NoBrokersError):
        admin.create_topic(zk, "lonely", 2)
    assert zk.exists(layout.topic_path("lonely")) is None


def test_plan_partitions_round_robin():
    assert admin.plan_partitions([5, 2], 0, 3) == {0: (2,), 1: (5,), 2: (2,)}
    assert admin.plan_partitions([5, 2], 3, 2, start_index=3) == {3: (5,), 4: (2,)}


def test_lost_registration_is_restored(cluster, zk):
    broker = cluster.start_broker(4)
    zk.delete(layout.broker_path(4))  # as after an expired session
    wait_until(lambda: zk.exists(layout.broker_path(4)), timeout=10,
               message="the broker to register again")
    assert layout.decode_broker(4, zk.get(layout.broker_path(4))[0]).port == broker.port


def unread_bytes(local_port: int, remote_port: int) -> int:
    """Bytes the kernel holds for the socket 127.0.0.1:local_port <- remote_port
    that its process has not read yet (from /proc/net/tcp)."""
    with open("/proc/net/tcp") as f:
        for line in f.readlines()[1:]:
            fields = line.split()
            local, remote = fields[1], fields[2]
            if (local.endswith(f":{local_port:04X}") and remote.endswith(f":{remote_port:04X}")
                    and fields[3] == "01"):
                return int(fields[4].split(":")[1], 16)
    raise LookupError("no such connection")


def test_sigterm_answers_a_waiting_fetch_and_exits(cluster):
    broker = cluster.start_broker(0)
    cluster.create_topic("drain", 1)
    raw = Raw(broker.port)
    produce(raw, "drain", 0, make_batch([b"only"]))
    result = {}

    def long_poll():
        result["part"] = fetch(raw, "drain", 0, 1, max_wait_ms=20_000)

    thread = threading.Thread(target=long_poll)
    thread.start()
    client_port = raw.sock.getsockname()[1]
    # once sent, the broker has read the fetch when its receive queue is empty
    wait_until(lambda: raw.sent == 2, timeout=5, message="the fetch to be sent")
    wait_until(lambda: unread_bytes(broker.port, client_port) == 0, timeout=5,
               message="the broker to read the fetch")
    started = time.monotonic()
    assert broker.terminate() == 0
    thread.join(timeout=15)
    assert time.monotonic() - started < 12
    assert result["part"].error_code == 0 and not result["part"].records
    raw.close()


def test_connection_cap(cluster):
    broker = cluster.start_broker(0, "--max-connections", "2")
    cluster.create_topic("capped", 1)
    first, second = Raw(broker.port), Raw(broker.port)
    assert fetch(first, "capped", 0, 0).error_code == 0
    assert fetch(second, "capped", 0, 0).error_code == 0
    third = Raw(broker.port)  # the kernel accepts it; the broker does not serve it yet
    third.sock.settimeout(1.0)
    request = ApiVersionsRequest(client_software_name="t", client_software_version="1")
    request.API_VERSION = 3
    request.with_header(correlation_id=1, client_id="raw")
    third.sock.sendall(request.encode(header=True, framed=True))
    with pytest.raises(socket.timeout):
        third.sock.recv(1)
    first.close()
    third.sock.settimeout(10)
    frame = third.recv_frame()
    assert ApiVersionsResponse.decode(frame, version=3, header=True).error_code == 0
    second.close()
    third.close()


def test_idle_connections_are_closed(cluster):
    broker = cluster.start_broker(0, "--idle-timeout-ms", "300")
    cluster.create_topic("idle", 1)
    raw = Raw(broker.port)
    assert fetch(raw, "idle", 0, 0).error_code == 0
    assert raw.closed_by_peer(timeout=10)
    raw.close()
    busy = Raw(broker.port)  # a long poll longer than the idle limit is not idleness
    assert fetch(busy, "idle", 0, 0, max_wait_ms=600).error_code == 0
    busy.close()


def test_port_in_use_is_a_clear_error(cluster):
    first = cluster.start_broker(0)
    proc = subprocess.run([sys.executable, "-m", "zkcoord.broker.cli", "--id", "1", "--zookeeper",
                           cluster.zookeeper, "--data-dir", str(cluster.directory / "data-1"),
                           "--port", str(first.port)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1
    assert "cannot listen on 127.0.0.1" in proc.stderr and "Traceback" not in proc.stderr
    assert cluster.zk.exists(layout.broker_path(1)) is None


def test_topics_cli_checks_arguments_before_connecting():
    started = time.monotonic()
    result = run_cli("create", "--zookeeper", "127.0.0.1:1", "--topic", "bad/name", "--partitions", "1")
    assert result.returncode == 2 and "topic name" in result.stderr
    assert time.monotonic() - started < 10  # no ZooKeeper connection was attempted


def test_producer_ids_are_claimed_in_kafkas_blocks_and_never_handed_out_twice(cluster, zk):
    """Review finding: ids were a start time, a 20-bit counter and the broker
    id, so about a million InitProducerId calls repeated ids. They now come
    from Kafka's /latest_producer_id_block, as Kafka's brokers claim them."""
    from kafka.protocol.producer import InitProducerIdRequest, InitProducerIdResponse

    def ids(broker, count):
        raw = Raw(broker.port)
        try:
            out = []
            for _ in range(count):
                answer = raw.call(InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=1000),
                                  InitProducerIdResponse, 4)
                assert answer.error_code == 0
                out.append(answer.producer_id)
            return out
        finally:
            raw.close()

    first, second = cluster.start_broker(0), cluster.start_broker(1)
    handed = ids(first, 3) + ids(second, 2)
    assert handed == [0, 1, 2, 1000, 1001]
    assert json.loads(zk.get(layout.PRODUCER_ID_BLOCK_PATH)[0]) == {
        "version": 1, "broker": 1, "block_start": "1000", "block_end": "1999"}
    handed += ids(first, layout.PRODUCER_ID_BLOCK_SIZE)  # past the end of its block: it claims the next
    first.terminate()
    restarted = cluster.start_broker(0)  # a new start never reuses its old block
    handed += ids(restarted, 1)
    assert len(set(handed)) == len(handed)
    assert handed[-1] == 3000 and max(handed[:-1]) < 3000


def test_producer_ids_are_claimed_from_the_empty_node_kafkas_brokers_create(zk):
    """Review finding: a Kafka broker's first start creates
    /latest_producer_id_block with no data (one of its top-level paths), and
    the broker, reading that as a bad block, could claim no producer ids at
    all: every idempotent producer was answered COORDINATOR_NOT_AVAILABLE.
    As Kafka's brokers: an empty node holds no block yet; the first is
    written over it, conditionally."""
    zk.create(layout.PRODUCER_ID_BLOCK_PATH)  # as Kafka's createTopLevelPaths leaves it: no data
    state = broker_state(zk, 3)
    assert state.claim_producer_ids() == layout.ProducerIdBlock(3, 0, layout.PRODUCER_ID_BLOCK_SIZE - 1)
    assert state.claim_producer_ids().first == layout.PRODUCER_ID_BLOCK_SIZE
    assert json.loads(zk.get(layout.PRODUCER_ID_BLOCK_PATH)[0])["block_start"] == str(layout.PRODUCER_ID_BLOCK_SIZE)


def broker_state(client, broker_id: int):
    """A broker's side of ZooKeeper through ``client``, with no broker around it."""
    from zkcoord.broker.zkstate import ZkState

    registration = layout.BrokerRegistration(broker_id=broker_id, host="127.0.0.1", port=9092,
                                             endpoints=(layout.ListenerEndpoint("PLAINTEXT", "PLAINTEXT",
                                                                               "127.0.0.1", 9092),))
    return ZkState(client, registration, wake=lambda: None)


def test_a_producer_id_block_others_may_change_is_refused_and_left_as_it_is(zk, zk_connect, tmp_path):
    """Review finding: a broker with credentials wrote its next
    block into a /latest_producer_id_block made by someone else, open to
    all, so anyone who reached ZooKeeper could rewind it and have the same
    producer ids handed out twice. A broker that authenticates claims only
    from a node its principal alone may change."""
    from kazoo.security import OPEN_ACL_UNSAFE

    from zkcoord.zk import client as zk_client
    from zkcoord.zk.security import ZkSecurity, ZooKeeperNodeOpen

    password = tmp_path / "zk.password"
    write_private(password, "broker-secret\n")
    client = zk_client.open_client(zk_connect, ZkSecurity(zk_auth="digest", zk_user="zkcoord",
                                                          zk_password_file=password))
    zk_client.start(client, timeout=15)
    try:
        rewound = layout.encode_producer_id_block(layout.ProducerIdBlock(0, 0, layout.PRODUCER_ID_BLOCK_SIZE - 1))
        zk.create(layout.PRODUCER_ID_BLOCK_PATH, rewound)  # by a client without credentials: open to all
        state = broker_state(client, 3)
        with pytest.raises(ZooKeeperNodeOpen, match="/latest_producer_id_block in ZooKeeper is not digest:zkcoord:"
                                                    ".*'s alone \\(world:anyone may write, create, delete, admin\\)"):
            state.claim_producer_ids()
        assert zk.get(layout.PRODUCER_ID_BLOCK_PATH)[0] == rewound
        assert zk.get_acls(layout.PRODUCER_ID_BLOCK_PATH)[0] == list(OPEN_ACL_UNSAFE)

        zk.delete(layout.PRODUCER_ID_BLOCK_PATH)  # the operator removes it: the broker makes its own
        assert state.claim_producer_ids() == layout.ProducerIdBlock(3, 0, layout.PRODUCER_ID_BLOCK_SIZE - 1)
        assert state.claim_producer_ids().first == layout.PRODUCER_ID_BLOCK_SIZE
    finally:
        client.delete(layout.PRODUCER_ID_BLOCK_PATH)  # its principal's alone: the chroot's clean-up has none
        client.stop()
        client.close()
