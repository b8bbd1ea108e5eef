"""What every Kafka cluster of the harness must do, whatever its mode:
replicated topics through Kafka's admin API, acks=all, and a leader killed,
a broker paused past its session, each coming back. A test module runs
these by subclassing :class:`ReplicationChecks` and giving a ``kafka`` fixture."""

from __future__ import annotations

from confluent_kafka.admin import ConfigResource, ResourceType

from zkcoord.testing.kafka import KafkaCluster


def values(prefix: str, count: int) -> list[bytes]:
    return [f"{prefix}-{i}".encode() for i in range(count)]


def send(kafka: KafkaCluster, topic: str, payloads: list[bytes]) -> None:
    kafka.produce(topic, [(0, None, value) for value in payloads])


class ReplicationChecks:
    def test_brokers_run_with_the_settings_asked(self, kafka: KafkaCluster):
        admin = kafka.new_admin()
        config = admin.describe_configs([ConfigResource(ResourceType.BROKER, "1")])
        entries = next(iter(config.values())).result(30)
        assert entries["min.insync.replicas"].value == "2"
        assert entries["auto.create.topics.enable"].value == "false"
        assert kafka.live_brokers() == {1, 2, 3}

    def test_replicated_topic_round_trip_with_acks_all(self, kafka: KafkaCluster):
        topic = "round-trip"
        kafka.create_topic(topic, partitions=2, replication_factor=3)
        for partition in (0, 1):
            assert sorted(kafka.partition(topic, partition).replicas) == [1, 2, 3]
            kafka.wait_for_isr(topic, partition, {1, 2, 3})
        send(kafka, topic, values("rt", 50))
        assert [value for _, _, value in kafka.read(topic, 0, 50)] == values("rt", 50)

    def test_killed_leader_moves_and_rejoins_the_isr_after_restart(self, kafka: KafkaCluster):
        topic = "killed-leader"
        everyone = set(kafka.brokers)
        kafka.create_topic(topic, partitions=1, replication_factor=3)
        kafka.wait_for_isr(topic, 0, everyone)
        send(kafka, topic, values("before", 20))
        old = kafka.leader_of(topic, 0)

        kafka.brokers[old].kill()
        try:
            assert kafka.wait_for_leader(topic, 0, not_on={old}) in everyone - {old}
            # Two in-sync replicas left, as many as min.insync.replicas: acks=all still succeeds.
            kafka.wait_for_isr(topic, 0, everyone - {old})
            send(kafka, topic, values("after", 20))
        finally:
            kafka.restart(old)  # the next test gets the whole cluster back, whatever happened

        kafka.wait_for_isr(topic, 0, everyone)
        if kafka.partition(topic, 0).replicas[0] == old:
            # The restarted broker leads again and serves what it kept and what it caught up on.
            kafka.elect_preferred_leader(topic, 0)
        written = values("before", 20) + values("after", 20)
        assert [value for _, _, value in kafka.read(topic, 0, 40)] == written

    def test_broker_paused_past_its_session_leaves_and_comes_back(self, kafka: KafkaCluster):
        topic = "paused"
        everyone = set(kafka.brokers)
        kafka.create_topic(topic, partitions=1, replication_factor=3)
        kafka.wait_for_isr(topic, 0, everyone)
        paused = next(n for n in sorted(everyone) if n != kafka.leader_of(topic, 0))

        kafka.pause_past_session(paused)
        try:
            kafka.wait_for_isr(topic, 0, everyone - {paused})
            send(kafka, topic, values("paused", 10))
        finally:
            kafka.resume(paused)

        kafka.wait_for_brokers(everyone)
        kafka.wait_for_isr(topic, 0, everyone)
        assert [value for _, _, value in kafka.read(topic, 0, 10)] == values("paused", 10)
