"""What the coordinator learns of a KRaft Kafka from its Metadata: the answer
read into a value, the changes decided from it, and who is told."""

from __future__ import annotations

import uuid

import pytest
from kafka.protocol.metadata import MetadataResponse

from zkcoord.coordinator.kafka_cluster import KafkaClusterWatch, topic_changes
from zkcoord.fetch.cluster import ClusterMetadata, KafkaUnreachable, TopicMetadata
from zkcoord.fetch.connection import BrokerConnectionError, BrokerTooOld
from zkcoord.zk.layout.kafka import kafka_uuid

ORDERS_ID = uuid.UUID("5e0b63b4-8a3c-4d5e-9f00-0123456789ab")


def response(version: int, topics) -> MetadataResponse:
    Topic, Partition = MetadataResponse.MetadataResponseTopic, MetadataResponse.MetadataResponseTopic.MetadataResponsePartition
    return MetadataResponse(
        version=version, throttle_time_ms=0, cluster_id="c", controller_id=1,
        brokers=[MetadataResponse.MetadataResponseBroker(node_id=n, host="127.0.0.1", port=9090 + n, rack=None)
                 for n in (1, 2, 3)],
        topics=[Topic(error_code=error, name=name, topic_id=topic_id, is_internal=False,
                      partitions=[Partition(error_code=code, partition_index=p, leader_id=leader, leader_epoch=0,
                                            replica_nodes=[1, 2, 3], isr_nodes=[1, 2, 3], offline_replicas=[])
                                  for p, leader, code in partitions])
                for name, topic_id, error, partitions in topics])


def test_an_answer_with_topic_ids_is_read_with_leaders_and_kafkas_id_text():
    answer = response(12, [("orders", ORDERS_ID, 0, [(0, 2, 0), (1, 3, 0), (2, -1, 5)]),
                           ("secret", uuid.UUID(int=0), 29, [])])  # TOPIC_AUTHORIZATION_FAILED: nothing said
    read = ClusterMetadata.of(MetadataResponse.decode(answer.encode(version=12), version=12))
    assert read.brokers == {1: "127.0.0.1:9091", 2: "127.0.0.1:9092", 3: "127.0.0.1:9093"}
    assert read.topics == {"orders": TopicMetadata(kafka_uuid(ORDERS_ID.bytes),
                                                   {0: "127.0.0.1:9092", 1: "127.0.0.1:9093", 2: None})}
    assert read.topics["orders"].partition_count == 3
    assert read.refused == {"secret"}, "a topic refused to us is told apart from one unknown"


def test_an_answer_without_topic_ids_reads_none():
    answer = response(1, [("orders", None, 0, [(0, 1, 0)])])
    read = ClusterMetadata.of(MetadataResponse.decode(answer.encode(version=1), version=1))
    assert read.topics["orders"].topic_id is None


@pytest.mark.parametrize("version", [1, 9, 12])
def test_an_answer_read_from_its_bytes_is_the_value_of_its_whole_decode(version):
    answer = response(version, [("orders", ORDERS_ID, 0, [(0, 2, 0), (1, 3, 0), (2, -1, 5)]),
                                ("secret", uuid.UUID(int=0), 29, []), ("gone", uuid.UUID(int=0), 3, [])])
    raw = answer.encode(version=version)
    decodes = []

    def decode():
        decodes.append(version)
        return MetadataResponse.decode(raw, version=version)

    read = ClusterMetadata.read(raw, version, decode)
    assert read[:3] == ClusterMetadata.of(MetadataResponse.decode(raw, version=version))[:3]
    assert read.raw == raw
    # A flexible version's answer is scanned: decoded whole only for whoever reads the response.
    assert decodes == ([] if version >= 9 else [version])
    assert read.response.topics[0].name == "orders"
    assert decodes == [version]


def meta(count: int, topic_id: str) -> TopicMetadata:
    return TopicMetadata(topic_id, {p: None for p in range(count)})


@pytest.mark.parametrize("known, seen, missing_before, changes", [
    ({}, {"t": meta(2, "a")}, (), {"t": (2, "a")}),                      # new
    ({"t": (2, "a")}, {"t": meta(2, "a")}, (), {}),                      # unchanged
    ({"t": (2, "a")}, {"t": meta(5, "a")}, (), {"t": (5, "a")}),         # grown
    ({"t": (5, "a")}, {"t": meta(2, "a")}, (), {}),                      # a lagging broker: never shrunk
    ({"t": (5, "a")}, {"t": meta(2, "b")}, (), {"t": (2, "b")}),         # deleted and created again
    ({"t": (2, "a")}, {}, (), {}),                                       # missing once: not yet gone
    ({"t": (2, "a")}, {}, {"t"}, {"t": (0, None)}),                      # missing twice in a row: deleted
    ({"t": (0, None)}, {}, {"t"}, {}),                                   # deleted, already said
])
def test_topic_changes(known, seen, missing_before, changes):
    assert topic_changes(known, seen, missing_before) == changes


class FakeConnection:
    """A broker's Metadata answers, one per call, for the watch's decisions without a network."""

    def __init__(self, answers: list):
        self.answers = answers

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        pass

    def cluster(self, topics=None, previous=None):
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer


def cluster(brokers, **topics) -> ClusterMetadata:
    return ClusterMetadata({n: f"h:{n}" for n in brokers}, {t: meta(*known) for t, known in topics.items()})


def test_the_watch_tells_subscribers_and_broker_listeners_what_changed():
    answers = [cluster([1, 2], orders=(2, "a")), cluster([1, 2, 3], orders=(3, "a"), audit=(1, "b"))]
    watch = KafkaClusterWatch(["h:1"], 60.0, lambda address: FakeConnection(answers))
    told, broker_changes = [], []
    watch.on_brokers_changed(lambda: broker_changes.append(watch.addresses()))
    watch._apply(watch._read())
    watch.subscribe(lambda *change: told.append(change))
    assert told == [("orders", 2, "a")] and broker_changes == [["h:1", "h:2"]]
    watch._apply(watch._read())
    assert told[1:] == [("audit", 1, "b"), ("orders", 3, "a")]
    assert broker_changes[1:] == [["h:1", "h:2", "h:3"]]


def test_a_broker_that_fails_is_passed_over_and_none_answering_is_kafka_unreachable():
    down = BrokerConnectionError("cannot connect to broker h:1: refused")
    by_address = {"h:1": [down, down], "h:2": [cluster([2], orders=(1, "a")), down]}
    watch = KafkaClusterWatch(["h:1", "h:2"], 60.0, lambda address: FakeConnection(by_address[address]))
    watch._apply(watch._read())
    assert watch.known == {"orders": (1, "a")}
    with pytest.raises(KafkaUnreachable, match="h:1: refused"):
        watch.start()


def test_a_broker_too_old_stops_the_start_at_once():
    old = BrokerTooOld("broker h:1 offers Fetch versions 0..3; this client speaks 4..12")
    watch = KafkaClusterWatch(["h:1", "h:2"], 60.0, lambda address: FakeConnection([old]))
    with pytest.raises(BrokerTooOld):
        watch.start()


def test_a_member_naming_a_topic_not_known_asks_for_a_read_now():
    watch = KafkaClusterWatch(["h:1"], 60.0, lambda address: FakeConnection([cluster([1], orders=(2, "a"))]))
    watch._apply(watch._read())
    watch.look_for(["orders"])
    assert not watch._wanted.is_set()
    watch.look_for(["orders", "new"])
    assert watch._wanted.is_set()
    watch._wanted.clear()
    watch.look_for([], pattern=True)
    assert watch._wanted.is_set()


def test_a_topic_missing_from_one_answer_is_confirmed_by_another_broker_before_it_is_gone():
    # Broker 1 answers without "orders" once (its metadata not loaded yet,
    # say): the watch reads again at once, from broker 2, and the topic's
    # subscribers hear nothing. Missing from two answers in a row, it is gone.
    asked = []
    answers = {"h:1": [cluster([1, 2], orders=(2, "a")), cluster([1, 2]), cluster([1, 2])],
               "h:2": [cluster([1, 2], orders=(2, "a")), cluster([1, 2])]}

    def connect(address):
        asked.append(address)
        return FakeConnection(answers[address])

    watch = KafkaClusterWatch(["h:1", "h:2"], 60.0, connect)
    told = []
    watch._apply(watch._read())
    watch.subscribe(lambda *change: told.append(change))
    watch._apply(watch._read())
    assert watch._wanted.is_set(), "a topic missing once is read again at once"
    watch._apply(watch._read())
    assert asked == ["h:1", "h:1", "h:2"] and told == [("orders", 2, "a")], "the flap told nobody"
    assert watch.known == {"orders": (2, "a")} and not watch._missing
    watch._apply(watch._read())
    watch._apply(watch._read())
    assert asked[3:] == ["h:2", "h:1"] and told[1:] == [("orders", 0, None)], \
        "missing from two answers in a row, of two brokers: gone"
