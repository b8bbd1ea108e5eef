"""What the coordinator's core reports to its metrics, event by event on a
manual clock; the census the endpoint reads at each scrape; the error codes
found in Kafka answers; registries kept apart; every metric documented."""

from __future__ import annotations

import re
from pathlib import Path

from kafka.protocol.consumer import FetchResponse
from kafka.protocol.metadata import MetadataResponse

from zkcoord import wire
from zkcoord.coordinator import actions
from zkcoord.coordinator.core import EXPIRED_NO_ANSWER, EXPIRED_STATIC, CoordinatorCore
from zkcoord.metrics import families

from tests.unit.core_harness import T_MS, CoreHarness, Recorded

T = T_MS / 1000.0
DOCS = Path(__file__).resolve().parents[2] / "docs" / "METRICS.md"


def harness() -> tuple[CoreHarness, Recorded]:
    h = CoreHarness()
    h.core.metrics = recorded = Recorded()
    return h, recorded


def test_a_rebalance_is_reported_with_its_duration_and_pings_as_they_go():
    h, recorded = harness()
    h.register("a", "a")
    h.register("b", "b")
    h.stable(["a", "b"])
    (report,) = recorded.rebalances
    assert report == h.core.last_rebalance and report.partitions == 4
    h.advance(3 * T, serve=("a", "b"))
    pings = sum(isinstance(m, wire.PingRequest) for conn in ("a", "b") for m, _ in h.sent[conn])
    assert recorded.counts["ping"] == pings > 0
    assert h.core.census().members == {"registering": 0, "active": 2, "leaving": 0, "away": 0}
    assert h.core.census().groups["stable"] == 1


def test_a_member_that_does_not_answer_is_an_expiry_and_a_connection_closed_is_not():
    h, recorded = harness()
    for conn in ("a", "b", "c"):
        h.register(conn, conn)
    h.stable(["a", "b", "c"])
    h.apply(h.core.connection_closed("c", h.now))  # gone: not an expiry
    h.advance(3 * T, serve=("a",))  # b stops answering
    assert "b" not in h.core.groups["g"].members
    assert recorded.counts[EXPIRED_NO_ANSWER] == 1 and recorded.counts[EXPIRED_STATIC] == 0
    assert h.core.census().members["active"] == 1


def test_a_static_member_away_is_counted_away_and_then_expired():
    h, recorded = harness()
    h.register("a", "a", is_static=True)
    h.stable(["a"])
    h.apply(h.core.connection_closed("a", h.now))
    assert h.core.census().members == {"registering": 0, "active": 0, "leaving": 0, "away": 1}
    h.advance(2 * T)
    assert recorded.counts[EXPIRED_STATIC] == 1 and recorded.counts[EXPIRED_NO_ANSWER] == 0
    assert sum(h.core.census().members.values()) == 0


def test_offset_flushes_are_reported_with_their_time_and_failures():
    h, recorded = harness()
    h.register("a", "a")
    h.stable(["a"])
    h.advance(T / 3)  # a ping out, unanswered yet
    h.answer("a", wire.PingResponse(offsets=wire.offset_entries({("t", 0): 5})))
    h.apply(h.core.flush_all(h.now))
    began = h.now
    h.now += 0.25
    h.complete(actions.WriteOffsets, error=RuntimeError("connection loss"))
    assert recorded.flushes[-1] == (h.now - began, True)
    h.apply(h.core.flush_all(h.now))
    h.settle()
    assert recorded.flushes[-1] == (0.0, False)


def test_a_failed_rebalance_attempt_is_reported():
    h, recorded = harness()
    h.register("a", "a")
    h.advance(0.1, settle=False)  # the round reads the owners
    h.complete(actions.ReadOwners, error=RuntimeError("connection loss"))
    assert recorded.counts["rebalance_failed"] == 1 and recorded.rebalances == []


def test_an_empty_core_has_every_state_at_zero():
    census = CoordinatorCore.empty_census()
    assert set(census.groups) == {"empty", "stable", "rebalancing", "failed"}
    assert set(census.members) == {"registering", "active", "leaving", "away"}
    assert not any(census.groups.values()) and not any(census.members.values())


def test_error_codes_are_found_at_every_depth():
    Topic = MetadataResponse.MetadataResponseTopic
    metadata = MetadataResponse(version=1, throttle_time_ms=0, brokers=[], cluster_id=None, controller_id=1, topics=[
        Topic(error_code=3, name="x", is_internal=False, partitions=[]),
        Topic(error_code=0, name="y", is_internal=False, partitions=[
            Topic.MetadataResponsePartition(error_code=5, partition_index=0, leader_id=-1, leader_epoch=0,
                                            replica_nodes=[], isr_nodes=[], offline_replicas=[])])])
    assert sorted(families.error_codes(metadata)) == [3, 5]
    Fetched = FetchResponse.FetchableTopicResponse
    fetch = FetchResponse(version=4, throttle_time_ms=0, error_code=0, session_id=0, responses=[
        Fetched(topic="t", partitions=[Fetched.PartitionData(partition_index=0, error_code=0, high_watermark=0),
                                       Fetched.PartitionData(partition_index=1, error_code=1, high_watermark=0)])])
    assert list(families.error_codes(fetch)) == [1]


def test_two_servers_in_one_process_count_apart():
    made = []
    for _ in range(2):
        registry = families.new_registry()
        made.append((registry, families.CoordinatorMetrics(registry), families.BrokerMetrics(registry),
                     families.ZooKeeperMetrics(registry)))
    (first, coordinator, broker, zookeeper), (second, *_) = made
    coordinator.ping_sent()
    broker.produced("t", 100, 3)
    broker.fetched([("t", 40, 1), ("t", 60, 2)])
    zookeeper.observe(0.002)
    assert first.get_sample_value("zkcoord_pings_sent_total") == 1
    assert first.get_sample_value("zkcoord_broker_produce_records_total", {"topic": "t"}) == 3
    assert first.get_sample_value("zkcoord_broker_fetch_bytes_total", {"topic": "t"}) == 100
    assert first.get_sample_value("zkcoord_zookeeper_request_duration_seconds_count") == 1
    assert second.get_sample_value("zkcoord_pings_sent_total") == 0
    assert second.get_sample_value("zkcoord_broker_produce_records_total", {"topic": "t"}) is None


def test_every_metric_is_documented_and_every_documented_one_exists():
    registry = families.new_registry()
    families.ZooKeeperMetrics(registry)
    families.CoordinatorMetrics(registry)
    families.BrokerMetrics(registry)
    families.ListenerMetrics(registry)
    families.LoginMetrics(registry)
    families.FetcherMetrics(registry)
    registry.register(families.CoordinatorCollector(dict, lambda: 1))
    # A counter's family is named without the _total its sample has; the docs name the sample.
    exposed = {f.name + ("_total" if f.type == "counter" else "") for f in registry.collect()
               if f.name.startswith(families.PREFIX)}
    documented = set(re.findall(r"^\| `(zkcoord_[a-z_]+)`", DOCS.read_text(), re.MULTILINE))
    assert exposed == documented
