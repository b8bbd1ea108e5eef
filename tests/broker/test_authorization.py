"""The cluster-level ACLs on a real broker with the authorizer on and SASL,
seen from stock clients: an idempotent producer's id (IdempotentWrite on the
cluster, or Write on any topic), DescribeConfigs (on the topic, or on the
cluster for a broker), DescribeCluster (answered to anyone; the cluster's
authorized operations to those who may Describe it) and CreateTopics (Create
on the cluster creates any topic). Each refusal reaches the client as
Kafka's error; granting the ACL makes the same call work."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic, ResourceType

from tests.broker.conftest import BrokerCluster
from zkcoord.security import acl
from zkcoord.testing import cluster_in_chroot, wait_until
from zkcoord.zk import security_store as store

TOPIC = "guarded"
USERS = ("admin", "alice", "bob", "carol", "dave", "erin", "frank")


@pytest.fixture(scope="module")
def secured(zk_ensemble, tmp_path_factory):
    with cluster_in_chroot(zk_ensemble.connect_string, tmp_path_factory.mktemp("authz"), "authz",
                           BrokerCluster) as cluster:
        for name in USERS:
            store.set_user(cluster.zk, name, f"{name}-pw")
        # Every refusal logged, none summed up: a test may look for the lack of one.
        broker = cluster.start_broker(0, "--sasl-mechanism", "SCRAM-SHA-256", "--authentication-required",
                                      "--authorizer", "on", "--super-user", "User:admin",
                                      "--abuse-log-lines", "1000000")
        cluster.create_topic(TOPIC, 1)
        yield cluster, broker


def conf(broker, user, **extra):
    return {"bootstrap.servers": broker.bootstrap, "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": user, "sasl.password": f"{user}-pw", **extra}


def grant(cluster, resource, user, operation):
    """Add an ACL; the broker acts on it once its cache has read the change (callers wait)."""
    store.add_acls(cluster.zk, resource, [acl.AclEntry(f"User:{user}", acl.ALLOW, operation)])


def idempotent_produce(broker, user, idempotence: bool = True) -> list:
    """The errors an idempotent producer (or another) meets producing one record (none: it was written)."""
    errors = []
    producer = Producer(conf(broker, user, **{"enable.idempotence": idempotence, "error_cb": errors.append,
                                              "message.timeout.ms": 10000}))
    delivered = []
    producer.produce(TOPIC, value=user.encode(), partition=0, on_delivery=lambda err, _m: delivered.append(err))
    producer.flush(15)
    errors += [err for err in delivered if err is not None]
    return [e.code() for e in errors]


def python_idempotent_produce(broker, user):
    """kafka-python's idempotent producer: "" when its record was written, else its error."""
    from kafka import KafkaProducer
    from kafka.errors import KafkaError as PythonKafkaError

    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, security_protocol="SASL_PLAINTEXT",
                             sasl_mechanism="SCRAM-SHA-256", sasl_plain_username=user,
                             sasl_plain_password=f"{user}-pw", enable_idempotence=True, max_block_ms=10000)
    try:
        producer.send(TOPIC, value=user.encode(), partition=0).get(timeout=15)
        return ""
    except PythonKafkaError as exc:
        return str(exc)
    finally:
        producer.close(timeout=5)


def test_an_idempotent_producer_needs_idempotent_write_on_the_cluster_or_write_on_a_topic(secured):
    cluster, broker = secured
    grant(cluster, acl.topic(TOPIC), "bob", acl.DESCRIBE)  # it may look the topic up: Describe is no Write
    wait_until(lambda: "[Error 31] ClusterAuthorizationFailedError" in python_idempotent_produce(broker, "bob"),
               timeout=30, interval=0.2, message="bob's idempotent producer refused its id")
    assert "User:bob is not authorized to IdempotentWrite cluster 'kafka-cluster'" in broker.log_tail(20000)
    grant(cluster, acl.cluster(), "bob", acl.IDEMPOTENT_WRITE)
    # Given its id, the producer meets the next refusal: it may not Write the topic.
    wait_until(lambda: "TopicAuthorizationFailed" in python_idempotent_produce(broker, "bob"), timeout=30,
               interval=0.2, message="bob's idempotent producer given an id once allowed")
    # Kafka 3.0 (KIP-679): Write on any topic is enough.
    grant(cluster, acl.topic(TOPIC), "carol", acl.WRITE)
    wait_until(lambda: idempotent_produce(broker, "carol") == [], timeout=30, interval=0.2,
               message="carol's idempotent producer with Write on the topic")
    assert python_idempotent_produce(broker, "carol") == ""


def describe_configs(broker, user, resource):
    admin = AdminClient(conf(broker, user))
    try:
        return admin.describe_configs([resource], request_timeout=20)[resource].result(timeout=30), None
    except KafkaException as exc:
        return None, exc.args[0]


def test_describe_configs_asks_describe_configs_on_the_topic_or_the_cluster(secured):
    cluster, broker = secured
    topic = ConfigResource(ResourceType.TOPIC, TOPIC)
    missing = ConfigResource(ResourceType.TOPIC, "no-such-topic")
    own = ConfigResource(ResourceType.BROKER, "0")
    grant(cluster, acl.topic(TOPIC), "dave", acl.DESCRIBE)  # Describe does not imply DescribeConfigs
    _, refused = describe_configs(broker, "dave", topic)
    assert refused.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert "User:dave is not authorized to DescribeConfigs topic 'guarded'" in refused.str()
    # a topic that does not exist is refused alike: the answer does not tell
    _, hidden = describe_configs(broker, "dave", missing)
    assert hidden.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    _, refused = describe_configs(broker, "dave", own)
    assert refused.code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED
    assert "User:dave is not authorized to DescribeConfigs cluster 'kafka-cluster'" in refused.str()

    grant(cluster, acl.topic(TOPIC), "dave", acl.ALTER_CONFIGS)  # implies DescribeConfigs, as in Kafka
    grant(cluster, acl.cluster(), "dave", acl.DESCRIBE_CONFIGS)
    wait_until(lambda: describe_configs(broker, "dave", topic)[0] is not None, timeout=30, interval=0.2,
               message="dave allowed to describe the topic's configs")
    assert "retention.ms" in describe_configs(broker, "dave", topic)[0]
    assert "log.retention.ms" in describe_configs(broker, "dave", own)[0]
    _, unknown = describe_configs(broker, "admin", missing)
    assert unknown.code() == KafkaError.UNKNOWN_TOPIC_OR_PART


def test_describe_cluster_is_answered_and_tells_the_cluster_operations_to_those_who_may_describe_it(secured):
    cluster, broker = secured

    def describe(user):
        admin = AdminClient(conf(broker, user))
        return admin.describe_cluster(include_authorized_operations=True, request_timeout=20).result(timeout=30)

    anyone = describe("erin")
    assert [node.id for node in anyone.nodes] == [0] and anyone.cluster_id
    assert not anyone.authorized_operations
    grant(cluster, acl.cluster(), "erin", acl.DESCRIBE)
    grant(cluster, acl.cluster(), "erin", acl.IDEMPOTENT_WRITE)
    wait_until(lambda: describe("erin").authorized_operations, timeout=30, interval=0.2,
               message="erin's cluster operations")
    assert sorted(op.name for op in describe("erin").authorized_operations) == ["DESCRIBE", "IDEMPOTENT_WRITE"]
    assert len(describe("admin").authorized_operations) == 7  # a super user: every cluster operation


def test_create_on_the_cluster_creates_any_topic(secured):
    cluster, broker = secured

    def create(topic):
        admin = AdminClient(conf(broker, "erin"))
        try:
            admin.create_topics([NewTopic(topic, 1, 1)], request_timeout=20)[topic].result(timeout=30)
            return None
        except KafkaException as exc:
            return exc.args[0].code()

    assert create("erin-1") == KafkaError.TOPIC_AUTHORIZATION_FAILED
    grant(cluster, acl.cluster(), "erin", acl.CREATE)
    wait_until(lambda: create("erin-2") is None, timeout=30, interval=0.2,
               message="erin allowed to create topics by Create on the cluster")


def test_the_broker_logs_who_was_refused_what_on_a_topic_but_not_what_a_listing_left_out(secured):
    """The client hears an error code only; the broker's log names the
    principal, the operation and the topic, for an operator to act on."""
    cluster, broker = secured
    cluster.create_topic("unlisted", 1)
    grant(cluster, acl.topic(TOPIC), "frank", acl.DESCRIBE)  # it may look the topic up, not write it
    # Until the broker has the grant, Metadata refuses the topic and no Produce is sent: try again.
    wait_until(lambda: idempotent_produce(broker, "frank", idempotence=False)
               == [KafkaError.TOPIC_AUTHORIZATION_FAILED]
               and "User:frank is not authorized to Write topic 'guarded' (no ACL allows it)"
               in broker.log_tail(200000), timeout=30, interval=0.2, message="frank's Write refused and logged")
    refused_describe = "User:frank is not authorized to Describe topic 'unlisted'"
    admin = AdminClient(conf(broker, "frank"))
    listing = admin.list_topics(timeout=20).topics
    assert TOPIC in listing and "unlisted" not in listing
    # A refusal is logged before it is answered: the listing left the topic out without a word.
    assert refused_describe not in broker.log_tail(200000)
    named = admin.list_topics(topic="unlisted", timeout=20).topics["unlisted"]
    assert named.error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert refused_describe in broker.log_tail(200000)
