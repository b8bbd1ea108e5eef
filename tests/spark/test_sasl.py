"""The Spark source with SASL on both paths, against servers whose brokers
require authentication and whose authorizer is on: a user with Read reads
in batch and in a group's stream (SCRAM-SHA-512, and PLAIN over TLS); a
wrong password, a password changed under a running query, a user without
Read and PLAIN over a connection without TLS each fail the query with an
error that says so, never a wait for a timeout."""

from __future__ import annotations

import uuid

import pytest

from tests.spark.conftest import SparkCluster
from tests.spark.sinks import read_sink, stream_to_parquet
from tests.spark.test_batch import records
from zkcoord.security import acl, certs, scram
from zkcoord.security.config import TlsConfig, librdkafka_settings
from zkcoord.security.secrets import write_private
from zkcoord.spark import PYTHON_SOURCE_NAME
from zkcoord.spark.errors import SourceOptionError
from zkcoord.spark.login import Login
from zkcoord.spark.offsets import OffsetRange
from zkcoord.spark.options import SaslOptions, parse_options
from zkcoord.spark.reader import ReadTask
from zkcoord.testing import cluster_in_chroot, wait_until
from zkcoord.zk import security_store as store

SOURCES = ("zkcoord", PYTHON_SOURCE_NAME)  # the JVM path, the Python data source
SECURED = ("--authentication-required", "--authorizer", "on", "--super-user", "User:admin",
           "--super-user", "User:broker", "--bridge-user", "broker", "--bridge-password-without-tls")


def _topic() -> str:
    return f"sasl-{uuid.uuid4().hex[:8]}"


def password_file(directory, user: str, password: str) -> str:
    path = directory / f"{user}.password"
    write_private(path, password + "\n")
    return str(path)


def secure(cluster, directory, *server_args, mechanism="SCRAM-SHA-512", tls=None):
    """Start ``cluster`` secured, with the users of every test here: reader
    may Read every topic and group, peeker only Describe topics; admin (the
    producer) and broker (the server's own) are super users."""
    for user in ("reader", "peeker", "admin", "broker"):
        store.set_user(cluster.zk, user, f"{user}-pw")
    store.add_acls(cluster.zk, acl.topic("*"), [acl.AclEntry("User:reader", acl.ALLOW, acl.READ),
                                                acl.AclEntry("User:peeker", acl.ALLOW, acl.DESCRIBE)])
    store.add_acls(cluster.zk, acl.group("*"), [acl.AclEntry("User:reader", acl.ALLOW, acl.READ)])
    protocol = "SASL_PLAINTEXT"
    if tls is not None:
        cluster.client_settings = librdkafka_settings(TlsConfig(ca=tls))
        protocol = "SASL_SSL"
    cluster.client_settings.update({"security.protocol": protocol, "sasl.mechanism": mechanism,
                                    "sasl.username": "admin", "sasl.password": "admin-pw"})
    cluster.start(1, *SECURED, "--bridge-password-file", password_file(directory, "broker", "broker-pw"),
                  *server_args)


@pytest.fixture(scope="module")
def scram_cluster(zk_ensemble, tmp_path_factory):
    """Every mechanism offered: the source chooses SCRAM-SHA-512."""
    directory = tmp_path_factory.mktemp("spark-sasl")
    with cluster_in_chroot(zk_ensemble.connect_string, directory, "sasl", SparkCluster) as cluster:
        secure(cluster, directory)
        yield cluster


def load(spark, cluster, topic, source, user, password, directory, **options):
    reader = (spark.read.format(source).option("zookeeper", cluster.zookeeper).option("subscribe", topic)
              .option("sasl.username", user).option("sasl.passwordFile", password_file(directory, user, password)))
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def rows_of(df) -> list[tuple]:
    return sorted((r.partition, bytes(r.key), bytes(r.value)) for r in df.collect())


# -- options, and where the password goes ------------------------------------------------------

def test_sasl_options_are_checked_and_the_password_read_from_a_file_or_the_environment(tmp_path, monkeypatch):
    base = {"zookeeper": "h", "subscribe": "a"}
    options = parse_options({**base, "sasl.username": "alice", "sasl.passwordFile": "/p"}, streaming=False)
    assert options.sasl == SaslOptions("alice", "/p")
    assert parse_options({**base, "sasl.username": "alice", "sasl.passwordEnv": "PW",
                          "sasl.passwordWithoutTls": "true"}, streaming=True).sasl == \
        SaslOptions("alice", None, "PW", plain_without_tls=True)
    assert parse_options(base, streaming=False).sasl is None
    for bad, reason in [({"sasl.passwordFile": "/p"}, "sasl.passwordfile without sasl.username"),
                        ({"sasl.username": "a", "sasl.passwordFile": "/p", "sasl.passwordEnv": "PW"}, "not both"),
                        ({"sasl.username": " a"}, "must be a user name"),
                        ({"sasl.username": "a", "sasl.passwordWithoutTls": "yes"}, "'true' or 'false'"),
                        ({"sasl.username": "a", "sasl.password": "secret"}, "unknown option")]:
        with pytest.raises(SourceOptionError, match=reason):
            parse_options({**base, **bad}, streaming=False)

    # The password is read when the driver plans: from the file, else the variable.
    monkeypatch.setenv("PW", "from-env")
    assert SaslOptions("alice", password_env="PW").login() == Login("alice", "from-env")
    assert SaslOptions("alice", password_file(tmp_path, "alice", "from-file")).login().password == "from-file"
    monkeypatch.delenv("PW")
    with pytest.raises(SourceOptionError, match=r"sasl.username alice needs a password: sasl.passwordFile "
                                                r"PATH or \$PW"):
        SaslOptions("alice", password_env="PW").login()


def test_the_password_travels_in_the_task_and_shows_in_no_repr():
    # Spark's InputPartition prints its fields.
    task = ReadTask(OffsetRange("t", 0, 0, 5), "127.0.0.1:9092", login=Login("alice", "s3cret"))
    assert "s3cret" not in repr(task) and "alice" in repr(task)
    pytest.importorskip("pyspark")  # the bridge to the JVM reader is pyspark's
    from zkcoord.spark.bridge import task_to_jvm

    assert task_to_jvm(task)["sasl"] == {"user": "alice", "password": "s3cret", "plainWithoutTls": False}


def test_the_jvm_scram_client_follows_rfc_7677_and_our_server(spark):
    exchange = spark._jvm.zkcoord.spark.ScramClient.exchange
    # RFC 7677 section 3, SCRAM-SHA-256: the client-final message and the server's signature.
    nonce = "rOprNGfwEbeRWgbNEkqO"
    server_first = f"r={nonce}%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
    assert exchange("SCRAM-SHA-256", "user", "pencil", nonce, server_first,
                    "v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=").split("\n") == [
        f"c=biws,r={nonce}%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=", "true"]
    # Each mechanism against zkcoord's own server: it takes the proof, the client its signature, and no other.
    for mechanism in scram.SCRAM_MECHANISMS:
        credential = scram.derive(mechanism, "pässword", iterations=4096)
        server = scram.ScramServer(mechanism, lambda user: credential if user == "a,b=c" else None)
        first = server.first(f"n,,n=a=2Cb=3Dc,r={nonce}".encode()).decode()
        final, _ = exchange(mechanism, "a,b=c", "pässword", nonce, first, "").split("\n")
        signature = server.final(final.encode()).decode()
        assert exchange(mechanism, "a,b=c", "pässword", nonce, first, signature) == f"{final}\ntrue"
        assert exchange(mechanism, "a,b=c", "pässword", nonce, first, "v=" + "A" * 88).endswith("\nfalse")


# -- SCRAM: reads that work ------------------------------------------------------------------------

# A group query's registration carries the password: these clusters speak no TLS.
COORDINATOR_WITHOUT_TLS = {"sasl.passwordWithoutTls": "true"}


@pytest.mark.parametrize("source", SOURCES)
def test_a_user_with_read_reads_a_batch_with_scram(spark, scram_cluster, tmp_path, source):
    topic = _topic()
    scram_cluster.create_topic(topic, 2)
    sent = records(2, 200)
    scram_cluster.produce(topic, sent)
    assert rows_of(load(spark, scram_cluster, topic, source, "reader", "reader-pw", tmp_path)) == sorted(sent)


@pytest.mark.parametrize("source", SOURCES)
def test_a_user_with_read_streams_as_a_group_member_with_scram(spark, scram_cluster, tmp_path, source):
    topic, group = _topic(), f"g-{uuid.uuid4().hex[:6]}"
    scram_cluster.create_topic(topic, 2)
    sent = records(2, 150)
    scram_cluster.produce(topic, sent)
    query = stream_to_parquet(spark, scram_cluster, topic, tmp_path, source=source, group=group,
                              trigger={"availableNow": True}, startingOffsets="earliest",
                              **{"sasl.username": "reader", **COORDINATOR_WITHOUT_TLS,
                                 "sasl.passwordFile": password_file(tmp_path, "reader", "reader-pw")})
    assert query.awaitTermination(120)
    assert query.exception() is None
    assert sorted((p, k, v) for _, p, _, k, v in read_sink(spark, tmp_path)) == sorted(sent)


@pytest.mark.parametrize("source", SOURCES)
def test_a_group_stream_without_tls_does_not_send_its_password_unless_allowed(spark, scram_cluster, tmp_path,
                                                                              source):
    """SCRAM hides the password from the brokers, but the registration at the
    coordinator carries it: without TLS the query needs the option."""
    topic = _topic()
    scram_cluster.create_topic(topic, 1)
    query = stream_to_parquet(spark, scram_cluster, topic, tmp_path, source=source, group=f"g-{uuid.uuid4().hex[:6]}",
                              **{"sasl.username": "reader",
                                 "sasl.passwordFile": password_file(tmp_path, "reader", "reader-pw")})
    wait_until(lambda: not query.isActive, timeout=60, message="the query to fail")
    assert ("PasswordWithoutTls: user 'reader''s password would cross the coordinator connections readable, "
            "without TLS: refused (give a CA to speak TLS, or allow it with the option "
            "sasl.passwordWithoutTls=true)") in str(query.exception())


# -- SCRAM: refusals the Spark user sees ------------------------------------------------------------

@pytest.mark.parametrize("source", SOURCES)
def test_a_wrong_password_fails_a_batch_read_naming_authentication(spark, scram_cluster, tmp_path, source):
    topic = _topic()
    scram_cluster.create_topic(topic, 1)
    scram_cluster.produce(topic, records(1, 5))
    with pytest.raises(Exception, match=r"AuthenticationError: SASL authentication as user 'reader' failed: "
                                        r"broker \S+ refused user 'reader': authentication failed for user "
                                        r"'reader' with SCRAM-SHA-512: unknown user or wrong password"):
        load(spark, scram_cluster, topic, source, "reader", "not-the-pw", tmp_path).collect()


@pytest.mark.parametrize("source", SOURCES)
def test_a_wrong_password_fails_a_group_stream_naming_authentication(spark, scram_cluster, tmp_path, source):
    topic = _topic()
    scram_cluster.create_topic(topic, 1)
    query = stream_to_parquet(spark, scram_cluster, topic, tmp_path, source=source, group=f"g-{uuid.uuid4().hex[:6]}",
                              **{"sasl.username": "reader", **COORDINATOR_WITHOUT_TLS,
                                 "sasl.passwordFile": password_file(tmp_path, "reader", "not-the-pw")})
    wait_until(lambda: not query.isActive, timeout=60, message="the query to fail")
    assert "authentication failed for user 'reader'" in str(query.exception())


@pytest.mark.parametrize("source", SOURCES)
def test_a_user_without_read_fails_on_the_executor_naming_the_acl(spark, scram_cluster, tmp_path, source):
    topic = _topic()
    scram_cluster.create_topic(topic, 1)
    scram_cluster.produce(topic, records(1, 5))
    # peeker may Describe (the driver plans) but not Read: the tasks are refused, not retried until pollTimeoutMs.
    with pytest.raises(Exception, match=rf"TopicAuthorizationError: {topic}-0: User:peeker is not authorized "
                                        rf"to Read topic '{topic}'"):
        load(spark, scram_cluster, topic, source, "peeker", "peeker-pw", tmp_path,
             **{"kafkaConsumer.pollTimeoutMs": "600000"}).collect()


@pytest.mark.parametrize("source", SOURCES)
def test_a_password_changed_under_a_running_stream_fails_its_tasks_naming_authentication(
        spark, scram_cluster, tmp_path, source):
    topic, user = _topic(), f"rotating-{uuid.uuid4().hex[:6]}"
    store.set_user(scram_cluster.zk, user, "old-pw")
    store.add_acls(scram_cluster.zk, acl.topic(topic), [acl.AclEntry(f"User:{user}", acl.ALLOW, acl.READ)])
    scram_cluster.create_topic(topic, 1)
    scram_cluster.produce(topic, records(1, 10))
    query = stream_to_parquet(spark, scram_cluster, topic, tmp_path, source=source, startingOffsets="earliest",
                              **{"sasl.username": user, "sasl.passwordFile": password_file(tmp_path, user, "old-pw"),
                                 "kafkaConsumer.pollTimeoutMs": "600000"})
    try:
        wait_until(lambda: len(read_sink(spark, tmp_path)) == 10, timeout=60, message="the first records")
        # The driver plans on the connection it opened with the old password;
        # each task opens its own, and the broker refuses it.
        store.set_user(scram_cluster.zk, user, "new-pw")
        scram_cluster.produce(topic, records(1, 10))
        wait_until(lambda: not query.isActive, timeout=90, message="the query to fail")
        failure = str(query.exception())
        assert f"SASL authentication as user '{user}' failed" in failure
        assert "RangeReader.fetch" in failure or "in read_task" in failure  # a task's, not the planner's
    finally:
        query.stop()


# -- PLAIN ----------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def plain_clusters(zk_ensemble, tmp_path_factory):
    """Two servers offering only PLAIN: one over TLS, one without."""
    directory = tmp_path_factory.mktemp("spark-plain")
    ca = certs.make_ca(directory / "pki")
    server = certs.issue(ca, directory / "pki", "server")
    tls_args = ("--tls-cert", str(server.cert), "--tls-key", str(server.key), "--tls-ca", str(ca.cert))
    with cluster_in_chroot(zk_ensemble.connect_string, directory / "tls", "plain-tls", SparkCluster) as over_tls, \
            cluster_in_chroot(zk_ensemble.connect_string, directory / "plain", "plain", SparkCluster) as without_tls:
        secure(over_tls, directory, "--sasl-mechanism", "PLAIN", *tls_args, mechanism="PLAIN", tls=str(ca.cert))
        secure(without_tls, directory, "--sasl-mechanism", "PLAIN", mechanism="PLAIN")
        over_tls.ca = ca
        yield over_tls, without_tls


def test_plain_over_tls_reads_on_both_paths(spark, plain_clusters, tmp_path):
    over_tls, _ = plain_clusters
    topic = _topic()
    over_tls.create_topic(topic, 2)
    sent = records(2, 100)
    over_tls.produce(topic, sent)
    for source in SOURCES:
        df = load(spark, over_tls, topic, source, "reader", "reader-pw", tmp_path,
                  **{"ssl.ca.location": str(over_tls.ca.cert)})
        assert rows_of(df) == sorted(sent), source
        with pytest.raises(Exception, match="AuthenticationError: SASL authentication as user 'reader' failed: "
                                            r"broker \S+ refused user 'reader': authentication failed"):
            load(spark, over_tls, topic, source, "reader", "wrong", tmp_path,
                 **{"ssl.ca.location": str(over_tls.ca.cert)}).collect()


def test_plain_without_tls_is_refused_unless_allowed(spark, plain_clusters, tmp_path):
    _, without_tls = plain_clusters
    topic = _topic()
    without_tls.create_topic(topic, 1)
    sent = records(1, 50)
    without_tls.produce(topic, sent)
    for source in SOURCES:
        with pytest.raises(Exception, match=r"AuthenticationError: SASL authentication as user 'reader': broker "
                                            r"\S+ offers only SASL/PLAIN, which would send user 'reader''s "
                                            r"password over a connection without TLS: refused; the option "
                                            r"ssl.ca.location gives TLS, sasl.passwordWithoutTls=true allows it"):
            load(spark, without_tls, topic, source, "reader", "reader-pw", tmp_path).collect()
        allowed = load(spark, without_tls, topic, source, "reader", "reader-pw", tmp_path,
                       **{"sasl.passwordWithoutTls": "true"})
        assert rows_of(allowed) == sorted(sent), source
