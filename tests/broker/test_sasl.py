"""SASL on a real broker process: confluent-kafka (librdkafka) and
kafka-python authenticate with PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512
against credentials stored in ZooKeeper, produce and read back; a wrong
password is an authentication error the client reports at once; nothing is
served to a client that has not authenticated."""

from __future__ import annotations

import logging
import socket

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from kafka import KafkaConsumer, KafkaProducer
from kafka.errors import KafkaError as PythonKafkaError
from kafka.protocol.metadata import MetadataRequest
from kafka.protocol.sasl import SaslHandshakeRequest
from kafka.structs import TopicPartition as KpTopicPartition

from tests.broker.conftest import BrokerCluster
from zkcoord.testing import cluster_in_chroot, wait_until
from zkcoord.zk import security_store as store

MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
TOPIC = "secured"


@pytest.fixture(scope="module")
def sasl_broker(zk_ensemble, tmp_path_factory):
    """One broker offering every mechanism and requiring authentication, for the module
    (whose wrong passwords, kafka-python's retries among them, stay within its failed-login allowance)."""
    with cluster_in_chroot(zk_ensemble.connect_string, tmp_path_factory.mktemp("sasl"), "sasl",
                           BrokerCluster) as cluster:
        store.set_user(cluster.zk, "alice", "alice-secret")
        broker = cluster.start_broker(0, *[a for m in MECHANISMS for a in ("--sasl-mechanism", m)],
                                      "--authentication-required", "--login-failures-burst", "1000")
        cluster.create_topic(TOPIC, 1)
        yield broker


def confluent_conf(bootstrap, mechanism, password="alice-secret", **extra):
    return {"bootstrap.servers": bootstrap, "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": mechanism,
            "sasl.username": "alice", "sasl.password": password, **extra}


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_confluent_clients_authenticate_produce_and_read(sasl_broker, mechanism):
    producer = Producer(confluent_conf(sasl_broker.bootstrap, mechanism, **{"linger.ms": 5}))
    values = [f"{mechanism}-{i}".encode() for i in range(20)]
    for value in values:
        producer.produce(TOPIC, value=value, partition=0)
    assert producer.flush(20) == 0
    consumer = Consumer(confluent_conf(sasl_broker.bootstrap, mechanism, **{"group.id": "unused",
                                                                            "enable.auto.commit": False}))
    try:
        consumer.assign([TopicPartition(TOPIC, 0, 0)])
        got = []

        def read():
            for msg in consumer.consume(100, timeout=0.2):
                assert msg.error() is None, msg.error()
                got.append(msg.value())
            return set(values) <= set(got)
        wait_until(read, timeout=20, interval=0, message="the produced values read back over SASL")
    finally:
        consumer.close()


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_kafka_python_authenticates_produces_and_reads(sasl_broker, mechanism):
    conf = dict(bootstrap_servers=sasl_broker.bootstrap, security_protocol="SASL_PLAINTEXT",
                sasl_mechanism=mechanism, sasl_plain_username="alice", sasl_plain_password="alice-secret")
    producer = KafkaProducer(**conf)
    value = f"py-{mechanism}".encode()
    producer.send(TOPIC, value=value, partition=0).get(timeout=20)
    producer.close()
    consumer = KafkaConsumer(**conf, enable_auto_commit=False, consumer_timeout_ms=500)
    try:
        consumer.assign([KpTopicPartition(TOPIC, 0)])
        consumer.seek_to_beginning()
        got = []
        wait_until(lambda: got.extend(r.value for r in consumer) or value in got, timeout=20,
                   message="the produced value read back over SASL")
    finally:
        consumer.close()


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-512"])
def test_a_wrong_password_is_an_authentication_error_at_once(sasl_broker, mechanism, caplog):
    errors = []
    producer = Producer(confluent_conf(sasl_broker.bootstrap, mechanism, password="wrong",
                                       error_cb=errors.append))
    # librdkafka connects at once and reports the broker's refusal through its
    # error callback: it must arrive within a few polls, not by a timeout.
    wait_until(lambda: producer.poll(0.1) is not None and errors, timeout=5, interval=0,
               message="the client's authentication error")
    assert errors[0].code() == KafkaError._AUTHENTICATION, errors
    assert "unknown user or wrong password" in errors[0].str(), errors[0].str()
    # kafka-python retries its bootstrap until bootstrap_timeout_ms and logs each
    # refusal, with the broker's reason, as it goes.
    caplog.set_level(logging.WARNING, logger="kafka")
    with pytest.raises(PythonKafkaError):
        KafkaProducer(bootstrap_servers=sasl_broker.bootstrap, security_protocol="SASL_PLAINTEXT",
                      sasl_mechanism=mechanism, sasl_plain_username="alice", sasl_plain_password="wrong",
                      bootstrap_timeout_ms=3000)
    refusals = [r.getMessage() for r in caplog.records if "SaslAuthenticationFailedError" in r.getMessage()]
    assert refusals and "unknown user or wrong password" in refusals[0], caplog.text[-2000:]


def _exchange(sock, request, correlation_id=1):
    request.with_header(correlation_id=correlation_id, client_id="raw")
    sock.sendall(request.encode(header=True, framed=True))
    return _frame(sock)


def _frame(sock) -> bytes:
    size = int.from_bytes(_recv(sock, 4), "big")
    return _recv(sock, size)


def _recv(sock, n) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError("closed by the broker")
        data += chunk
    return data


def test_nothing_is_served_before_authentication(sasl_broker):
    with socket.create_connection(("127.0.0.1", sasl_broker.port), timeout=10) as sock:
        with pytest.raises((ConnectionError, OSError)):
            _exchange(sock, MetadataRequest(version=1, topics=None))


def test_before_authentication_a_request_is_held_to_what_sasl_needs(sasl_broker):
    # Review finding: an unauthenticated client could announce (and trickle)
    # up to the whole request limit, filling the process's partial-frame budget.
    with socket.create_connection(("127.0.0.1", sasl_broker.port), timeout=10) as sock:
        sock.sendall((512 * 1024 + 1).to_bytes(4, "big") + b"\0" * 1024)
        with pytest.raises((ConnectionError, OSError)):
            _frame(sock)
    wait_until(lambda: b"request of 524289 bytes (limit 524288)" in sasl_broker.log_path.read_bytes(), timeout=10,
               message="the refusal logged")


def test_version_0_handshake_then_bare_tokens(sasl_broker):
    with socket.create_connection(("127.0.0.1", sasl_broker.port), timeout=10) as sock:
        answer = _exchange(sock, SaslHandshakeRequest(version=0, mechanism="PLAIN"))
        assert answer[4:6] == b"\0\0"  # correlation id, then error code NONE
        sock.sendall((len(b"\0alice\0alice-secret")).to_bytes(4, "big") + b"\0alice\0alice-secret")
        assert _frame(sock) == b""  # PLAIN's empty success
        assert _exchange(sock, MetadataRequest(version=1, topics=None), 2)[:4] == (2).to_bytes(4, "big")
    with socket.create_connection(("127.0.0.1", sasl_broker.port), timeout=10) as sock:
        _exchange(sock, SaslHandshakeRequest(version=0, mechanism="PLAIN"))
        sock.sendall((len(b"\0alice\0nope")).to_bytes(4, "big") + b"\0alice\0nope")
        with pytest.raises((ConnectionError, OSError)):
            _frame(sock)


def test_an_unoffered_mechanism_is_refused(cluster, zk):
    broker = cluster.start_broker(0, "--sasl-mechanism", "SCRAM-SHA-512")
    with socket.create_connection(("127.0.0.1", broker.port), timeout=10) as sock:
        answer = _exchange(sock, SaslHandshakeRequest(version=1, mechanism="PLAIN"))
        assert int.from_bytes(answer[4:6], "big") == 33  # UNSUPPORTED_SASL_MECHANISM
        assert b"SCRAM-SHA-512" in answer
