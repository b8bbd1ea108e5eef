"""The coordinators' log-end questions (coordinator/log_ends.py) against real
brokers in ZooKeeper: the answers and their leader epochs, one connection per
broker however many ask at once, a broker restarted elsewhere, one that
hangs, and a broker that requires SCRAM over TLS."""

from __future__ import annotations

import threading
import time

import pytest

from tests.broker.conftest import BrokerCluster
from zkcoord.coordinator.log_ends import LogEndReader
from zkcoord.records import LogEnd, TopicPartition
from zkcoord.security import certs, tls
from zkcoord.testing import cluster_in_chroot, wait_until
from zkcoord.zk import security_store as store

TOPIC = "ends"
P0, P1 = TopicPartition(TOPIC, 0), TopicPartition(TOPIC, 1)


def filled(cluster: BrokerCluster, counts: dict) -> None:
    cluster.produce(TOPIC, [(tp.partition, None, b"x") for tp, n in counts.items() for _ in range(n)])


def requests(broker, api: str) -> float:
    return broker.scrape().value("zkcoord_broker_requests_total", api=api)


def test_answers_carry_the_log_end_and_the_leaders_epoch(cluster):
    cluster.start_broker(0)
    cluster.create_topic(TOPIC, 2)
    filled(cluster, {P0: 5, P1: 3})
    reader = LogEndReader(cluster.zk, 5.0)
    try:
        assert reader.log_ends({P0, P1, (TOPIC, 7)}, 5.0) == {P0: LogEnd(5, 0), P1: LogEnd(3, 0)}
        filled(cluster, {P0: 2})
        assert reader.log_ends({P0}, 5.0) == {P0: LogEnd(7, 0)}
    finally:
        reader.close()


def test_concurrent_questions_share_one_connection_and_merge_into_few_requests(cluster):
    broker = cluster.start_broker(0, "--metrics-port", "0")
    cluster.create_topic(TOPIC, 2)
    filled(cluster, {P0: 4, P1: 1})
    before = {api: requests(broker, api) for api in ("ApiVersions", "ListOffsets")}
    connections = broker.scrape().value("zkcoord_broker_connections")  # the producer's
    reader = LogEndReader(cluster.zk, 5.0)
    answers = []
    try:
        askers = [threading.Thread(target=lambda: answers.append(reader.log_ends({P0, P1}, 5.0)))
                  for _ in range(40)]
        for asker in askers:
            asker.start()
        for asker in askers:
            asker.join()
        assert answers == [{P0: LogEnd(4, 0), P1: LogEnd(1, 0)}] * 40
        assert requests(broker, "ApiVersions") - before["ApiVersions"] == 1  # one connection, opened once
        assert requests(broker, "ListOffsets") - before["ListOffsets"] < 40  # questions merged
        reader.log_ends({P0}, 5.0)
        assert broker.scrape().value("zkcoord_broker_connections") == connections + 1
        assert requests(broker, "ApiVersions") - before["ApiVersions"] == 1  # and kept
    finally:
        reader.close()
    wait_until(lambda: broker.scrape().value("zkcoord_broker_connections") == connections, timeout=10,
               message="the reader's connection closed")


def test_a_broker_restarted_on_another_port_is_found_again(cluster):
    broker = cluster.start_broker(0)
    cluster.create_topic(TOPIC, 1)
    filled(cluster, {P0: 3})
    reader = LogEndReader(cluster.zk, 2.0)
    try:
        assert reader.log_ends({P0}, 2.0) == {P0: LogEnd(3, 0)}
        old_port = broker.port
        broker.kill()  # a crash: the reader's connection is cut, and its registration goes with its session
        broker.start()  # port 0: another one; the same log
        assert broker.port != old_port
        wait_until(lambda: reader.log_ends({P0}, 2.0).get(P0, LogEnd(-1)).offset == 3, timeout=20,
                   message="the log end asked of the restarted broker")
    finally:
        reader.close()


def test_a_broker_that_hangs_costs_only_its_own_partitions(cluster):
    cluster.start_broker(0)
    hanging = cluster.start_broker(1)
    from zkcoord.admin import topics as topic_admin

    topic_admin.create_topic(cluster.zk, TOPIC, assignment={0: [0], 1: [1]})
    cluster.wait_led(TOPIC, 2)
    filled(cluster, {P0: 2, P1: 1})
    reader = LogEndReader(cluster.zk, 1.0)
    try:
        assert reader.log_ends({P0, P1}, 5.0) == {P0: LogEnd(2, 0), P1: LogEnd(1, 0)}
        hanging.pause()
        try:
            began = time.monotonic()
            assert reader.log_ends({P0, P1}, 1.0) == {P0: LogEnd(2, 0)}
            assert time.monotonic() - began < 3.0  # the question's time, not a connection's per broker
            assert reader.log_ends({P0}, 1.0) == {P0: LogEnd(2, 0)}  # the other broker's link is free
        finally:
            hanging.resume()
        wait_until(lambda: reader.log_ends({P1}, 1.0) == {P1: LogEnd(1, 0)}, timeout=20,
                   message="the resumed broker answering again")
    finally:
        reader.close()


@pytest.fixture(scope="module")
def secured_broker(zk_ensemble, tmp_path_factory):
    """A broker that requires SCRAM over TLS, and a TLS context that trusts it."""
    directory = tmp_path_factory.mktemp("pki")
    ca = certs.make_ca(directory)
    server = certs.issue(ca, directory, "server")
    with cluster_in_chroot(zk_ensemble.connect_string, tmp_path_factory.mktemp("secured"), "secured",
                           BrokerCluster) as cluster:
        store.set_user(cluster.zk, "coordinator", "its-secret")
        cluster.start_broker(0, "--sasl-mechanism", "SCRAM-SHA-512", "--authentication-required",
                             "--tls-cert", str(server.cert), "--tls-key", str(server.key), "--metrics-port", "0")
        cluster.create_topic(TOPIC, 1)
        yield cluster, tls.client_context(tls.TlsConfig(ca=str(ca.cert)))


def test_a_broker_requiring_scram_over_tls_answers_the_credential(secured_broker):
    cluster, context = secured_broker
    broker = cluster.brokers[0]
    reader = LogEndReader(cluster.zk, 5.0, tls=context, credential=("coordinator", "its-secret"))
    try:
        before = requests(broker, "SaslAuthenticate")
        for _ in range(3):
            assert reader.log_ends({P0}, 5.0) == {P0: LogEnd(0, 0)}
        assert requests(broker, "SaslAuthenticate") - before == 2  # SCRAM's two steps, once
    finally:
        reader.close()
    stranger = LogEndReader(cluster.zk, 5.0, tls=context, credential=("coordinator", "wrong"))
    try:
        assert stranger.log_ends({P0}, 2.0) == {}  # refused: nothing learnt
    finally:
        stranger.close()


def test_a_broker_that_keeps_failing_leaves_one_registration_watcher(zk):
    """Review finding: every failed connection made the next question read
    the registrations again with a new watcher, and kazoo keeps each until
    the watch fires: a broker refusing the reader's login for days grew the
    client's watchers by one a question."""
    from zkcoord.fetch.connection import BrokerAuthenticationError
    from zkcoord.zk import layout

    registration = layout.BrokerRegistration(broker_id=0, host="127.0.0.1", port=1,
                                             endpoints=(layout.ListenerEndpoint("PLAINTEXT", "PLAINTEXT",
                                                                               "127.0.0.1", 1),))
    zk.create(layout.broker_path(0), layout.encode_broker(registration), makepath=True)
    attempts = []

    def refused(address, **_options):
        attempts.append(address)
        raise BrokerAuthenticationError(f"broker {address} refused the login")

    def watchers() -> int:
        return sum(len(watching) for watching in zk._child_watchers.values())

    before = watchers()
    reader = LogEndReader(zk, 1.0, connect=refused)
    try:
        for _ in range(20):
            assert reader.log_ends({P0}, 1.0) == {}
        assert len(attempts) >= 20  # every question tried, and read the registrations again
        assert watchers() - before == 1
    finally:
        reader.close()
