"""TLS on the coordinator protocol and on the broker's Kafka listener, with
certificates made here: thin consumers, stock clients, mutual TLS, and the
connections that get TLS wrong. Real servers, real ZooKeeper, real clients.
"""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import time
from collections import Counter
from types import SimpleNamespace

import pytest
from confluent_kafka.admin import AdminClient

from tests.e2e.checks import delivered_values, produce
from tests.e2e.conftest import SERVER_ARGS
from tests.e2e.test_stock_clients import PARTITIONS, TOPIC, ConfluentMember, PythonMember, _whole
from zkcoord import wire
from zkcoord.channel import Channel, ChannelClosed
from zkcoord.consumer.consumer import Consumer
from zkcoord.errors import TlsError
from zkcoord.fetch.connection import BrokerConnection, BrokerConnectionError
from zkcoord.security import certs, tls
from zkcoord.testing import zkcoord_command
from zkcoord.testing.waiting import wait_until
from zkcoord.zk import layout
from zkcoord.zk.nodes import read_offsets


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    directory = tmp_path_factory.mktemp("pki")
    ca = certs.make_ca(directory)
    other_ca = certs.make_ca(directory / "other", "another CA")
    return SimpleNamespace(ca=ca, server=certs.issue(ca, directory, "server"),
                           alice=certs.issue(ca, directory, "alice"),
                           stranger=certs.issue(other_ca, directory / "other", "mallory"))


def server_args(pki, client_auth: str = "none", *extra: str) -> tuple[str, ...]:
    return (*SERVER_ARGS, "--tls-cert", str(pki.server.cert), "--tls-key", str(pki.server.key),
            "--tls-ca", str(pki.ca.cert), "--tls-client-auth", client_auth, *extra)


def client(pki, who=None) -> tls.TlsConfig:
    """A client's TLS settings: the CA, and ``who``'s certificate if given."""
    if who is None:
        return tls.TlsConfig(ca=str(pki.ca.cert))
    return tls.TlsConfig(ca=str(pki.ca.cert), cert=str(who.cert), key=str(who.key))


def _exactly_once(values, count: int) -> None:
    delivered = Counter(values)
    assert [v for v, n in delivered.items() if n > 1] == []
    assert sorted(delivered) == sorted(f"m-{n}" for n in range(count))


def test_a_thin_group_consumes_over_tls_and_the_broker_registers_an_ssl_listener(cluster_factory, pki):
    cluster = cluster_factory(1, server_args=server_args(pki))
    cluster.client_settings = tls.librdkafka_settings(client(pki))
    server = cluster.servers[1]
    registration = json.loads(cluster.zk.get(layout.broker_path(1))[0])
    assert registration["endpoints"] == [f"SSL://127.0.0.1:{server.broker_port}"]
    assert registration["listener_security_protocol_map"] == {"SSL": "SSL"}
    assert registration["host"] is None and registration["port"] == -1  # no PLAINTEXT listener, as Kafka says it

    cluster.create_topic(TOPIC, PARTITIONS)
    produce(cluster, TOPIC, 300, partitions=PARTITIONS)
    consumers = [cluster.add_consumer("secure", [TOPIC], extra=["--tls-ca", str(pki.ca.cert)]) for _ in range(2)]
    wait_until(lambda: len(delivered_values(consumers)) >= 300 and all(c.assignment() for c in consumers),
               timeout=40, message="300 records over TLS, both members assigned")
    produce(cluster, TOPIC, 100, start=300, partitions=PARTITIONS)
    # Fetch responses past the broker's sendfile threshold: the file ranges go through TLS too.
    big = [f"big-{n}-" + "x" * 4000 for n in range(100)]
    cluster.produce(TOPIC, ((n % PARTITIONS, None, value.encode()) for n, value in enumerate(big)))
    wait_until(lambda: len(delivered_values(consumers)) >= 500, timeout=30, message="500 records")
    time.sleep(0.5)  # any duplicate would arrive right behind
    values = delivered_values(consumers)
    _exactly_once([v for v in values if v.startswith("m-")], 400)
    assert sorted(v for v in values if v.startswith("big-")) == sorted(big)

    # The admin command finds the coordinator, asks the brokers and resets, all over TLS.
    for consumer in consumers:
        consumer.terminate()
    # Their final offsets passed the coordinator's check against the log ends,
    # which it asks of the brokers: over TLS, as they listen.
    wait_until(lambda: sum(read_offsets(cluster.zk, "secure").values()) == 500, timeout=20,
               message="the final offsets, 500 records' worth, committed")
    reset = ("groups", "reset-offsets", "--bootstrap", server.address, "--group", "secure", "--topic", TOPIC,
             "--to-offset", "0", "--execute")
    refused = subprocess.run(zkcoord_command(*reset), capture_output=True, text=True, timeout=60)
    assert refused.returncode == 1 and "no server could say" in refused.stderr  # plaintext: nobody answers
    done = subprocess.run(zkcoord_command(*reset, "--tls-ca", str(pki.ca.cert)), capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    assert read_offsets(cluster.zk, "secure") == {(TOPIC, p): 0 for p in range(PARTITIONS)}


def test_stock_clients_produce_consume_and_describe_the_cluster_over_tls(cluster_factory, pki):
    cluster = cluster_factory(1, server_args=server_args(pki))
    settings = tls.librdkafka_settings(client(pki))
    cluster.client_settings = settings
    cluster.create_topic(TOPIC, PARTITIONS)
    produce(cluster, TOPIC, 200, partitions=PARTITIONS)  # confluent-kafka's producer, over TLS

    admin = AdminClient({"bootstrap.servers": cluster.broker_list, **settings})
    described = admin.describe_cluster(request_timeout=15).result(timeout=20)
    assert [(n.id, n.host, n.port) for n in described.nodes] == [(1, "127.0.0.1", cluster.servers[1].broker_port)]

    stock = ConfluentMember(cluster.broker_list, "stock", **settings)
    python = PythonMember(cluster.broker_list, "stock", security_protocol="SSL",
                          ssl_context=tls.client_context(client(pki)))
    # ... and `zkcoord consume --kafka-brokers`, a stock member on the command line.
    command = cluster.add_consumer("stock", [TOPIC], kafka_brokers=cluster.broker_list,
                                   extra=["--tls-ca", str(pki.ca.cert)])
    members = [stock, python]
    try:
        wait_until(lambda: stock.assigned and python.assigned and command.assignment()
                   and _whole(cluster.zk, "stock", members, [command]),
                   timeout=40, message="all three stock members assigned")
        produce(cluster, TOPIC, 200, start=200, partitions=PARTITIONS)

        def values():
            return stock.values + python.values + delivered_values([command])

        wait_until(lambda: len(values()) >= 400, timeout=30, message="400 records")
        time.sleep(0.5)
        _exactly_once(values(), 400)
        assert not stock.errors
    finally:
        for member in members:
            member.close()


def _lines_naming(server, principal: str) -> str:
    return "\n".join(line for line in server.log_tail(50000).splitlines() if principal in line)


def _metadata(channel: Channel) -> wire.Message:
    return channel.request(wire.ClusterMetadataRequest(group_id="g"), timeout=10)


def test_mutual_tls_names_the_principal_and_refuses_a_client_without_a_certificate(cluster_factory, pki):
    cluster = cluster_factory(1, server_args=server_args(pki, "required"))
    server = cluster.servers[1]
    cluster.client_settings = tls.librdkafka_settings(client(pki, pki.alice))
    cluster.create_topic(TOPIC, PARTITIONS)
    produce(cluster, TOPIC, 50, partitions=PARTITIONS)

    # With alice's certificate: served, and the server knows it is alice.
    with Consumer([server.address], group="mtls", topics=[TOPIC], tls=client(pki, pki.alice)) as alice:
        got = []
        wait_until(lambda: got.extend(alice.poll(200)) or len(got) >= 50, timeout=30, message="alice's records")
    # Both listeners name alice: the coordinator's (the consumer) and the broker's (the producer, the fetcher).
    wait_until(lambda: server.log_tail(50000).count("is User:alice by its TLS certificate") >= 2
               and "zkcoord.broker.server" in _lines_naming(server, "User:alice")
               and "zkcoord.coordinator.server" in _lines_naming(server, "User:alice"),
               timeout=10, message="both listeners to name alice")

    # Without a certificate: the member fails, and poll() raises why.
    started = time.monotonic()
    with Consumer([server.address], group="mtls", topics=[TOPIC], tls=client(pki)) as anonymous:
        with pytest.raises(TlsError, match="certificate"):
            wait_until(lambda: anonymous.poll(100) and False, timeout=20, message="never", fail_on=(TlsError,))
    assert time.monotonic() - started < 15
    # A certificate from another CA: refused as well, and the broker refuses it too.
    stranger = tls.client_context(tls.TlsConfig(ca=str(pki.ca.cert), cert=str(pki.stranger.cert),
                                                key=str(pki.stranger.key)))
    with pytest.raises(TlsError):
        _metadata(Channel.connect("127.0.0.1", server.port, 10, tls=stranger))
    with pytest.raises(TlsError):
        BrokerConnection(server.broker, tls=stranger, timeout_s=10)
    # ... while alice is still served by both.
    alice_context = tls.client_context(client(pki, pki.alice))
    assert isinstance(_metadata(Channel.connect("127.0.0.1", server.port, 10, tls=alice_context)),
                      wire.ClusterMetadataResponse)
    BrokerConnection(server.broker, tls=alice_context, timeout_s=10).close()
    assert server.alive


def test_tls_and_plaintext_mismatches_fail_fast_and_idle_handshakes_are_cut_off(cluster_factory, pki):
    secure = cluster_factory(1, server_args=server_args(pki, "none", "--tls-handshake-timeout-ms", "1000"))
    plain = cluster_factory(0)  # server 2 beside it, plaintext
    plain_server = plain.start_servers(1, first_id=2)[0]
    secure_server = secure.servers[1]
    context = tls.client_context(client(pki))

    # A client that connects and says nothing holds its slot for the handshake's deadline, no longer.
    idle = [socket.create_connection(("127.0.0.1", port), timeout=10)
            for port in (secure_server.port, secure_server.broker_port)]
    started = time.monotonic()
    for sock in idle:
        assert sock.recv(1) == b""  # the server closed it
        sock.close()
    assert time.monotonic() - started < 5

    # Plaintext against TLS: the connection is closed at once.
    started = time.monotonic()
    with pytest.raises(ChannelClosed):
        _metadata(Channel.connect("127.0.0.1", secure_server.port, 10))
    with pytest.raises(BrokerConnectionError):
        BrokerConnection(secure_server.broker, timeout_s=10)
    # TLS against plaintext: refused, saying why.
    with pytest.raises(TlsError, match="does not speak TLS|broke during the handshake"):
        _metadata(Channel.connect("127.0.0.1", plain_server.port, 10, tls=context))
    # (The broker closes on the ClientHello's "size" unread: to the client, a reset it may retry.)
    with pytest.raises((TlsError, BrokerConnectionError), match="speak TLS"):
        BrokerConnection(plain_server.broker, tls=context, timeout_s=10)
    assert time.monotonic() - started < 10

    # Neither server was hurt: both still serve their own kind.
    assert isinstance(_metadata(Channel.connect("127.0.0.1", secure_server.port, 10, tls=context)),
                      wire.ClusterMetadataResponse)
    assert isinstance(_metadata(Channel.connect("127.0.0.1", plain_server.port, 10)), wire.ClusterMetadataResponse)
    BrokerConnection(secure_server.broker, tls=context, timeout_s=10).close()
    BrokerConnection(plain_server.broker, timeout_s=10).close()
    assert secure_server.alive and plain_server.alive
    assert "does not speak TLS" in secure_server.log_tail(20000)


def test_an_aiokafka_consumer_joins_a_group_over_tls_and_commits(cluster_factory, pki):
    from aiokafka import AIOKafkaConsumer

    cluster = cluster_factory(1, server_args=server_args(pki))
    cluster.client_settings = tls.librdkafka_settings(client(pki))
    cluster.create_topic(TOPIC, PARTITIONS)
    produce(cluster, TOPIC, 200, partitions=PARTITIONS)
    values: list[str] = []

    async def consume():
        consumer = AIOKafkaConsumer(TOPIC, bootstrap_servers=cluster.broker_list, group_id="aio",
                                    security_protocol="SSL", ssl_context=tls.client_context(client(pki)),
                                    auto_offset_reset="earliest", session_timeout_ms=6000,
                                    heartbeat_interval_ms=500, auto_commit_interval_ms=200)
        await consumer.start()
        try:
            deadline = time.monotonic() + 30
            while len(values) < 200 and time.monotonic() < deadline:
                for records in (await consumer.getmany(timeout_ms=200)).values():
                    values.extend(r.value.decode() for r in records)
            await consumer.commit()
        finally:
            await consumer.stop()

    asyncio.run(consume())
    _exactly_once(values, 200)
    wait_until(lambda: sum(read_offsets(cluster.zk, "aio").values()) == 200, timeout=15,
               message="aiokafka's commits in ZooKeeper")
