"""A server's metrics endpoint, scraped over HTTP as Prometheus does, while a
group of real consumer processes joins, consumes, loses a member that stops
answering, and leaves."""

from __future__ import annotations

from confluent_kafka.admin import AdminClient

from tests.e2e.conftest import SERVER_ARGS
from zkcoord.testing import wait_until

TOPIC = "events"
PARTITIONS = 4
RECORDS = 400
VALUE = b"v" * 100


def scrape_until(process, holds, message: str, timeout: float = 20.0):
    """The first scrape of ``process`` for which ``holds(scrape)`` is true."""
    def scraped():
        metrics = process.scrape()
        return metrics if holds(metrics) else None

    return wait_until(scraped, timeout, message=message)


def test_the_metrics_follow_the_group_and_the_broker(cluster_factory):
    cluster = cluster_factory(servers=1, server_args=(*SERVER_ARGS, "--metrics-port", "0"))
    server = cluster.servers[1]
    cluster.create_topic(TOPIC, PARTITIONS)
    cluster.produce(TOPIC, ((i % PARTITIONS, None, VALUE) for i in range(RECORDS)))

    quiet = server.scrape()
    assert quiet.value("zkcoord_coordinator_slots", state="active") == 1
    assert quiet.value("zkcoord_coordinator_slot_count") == 1
    assert quiet.value("zkcoord_coordinator_epoch", slot="0") >= 1
    assert quiet.value("zkcoord_members") == 0
    assert quiet.value("zkcoord_broker_produce_records_total", topic=TOPIC) == RECORDS
    assert quiet.value("zkcoord_broker_produce_bytes_total", topic=TOPIC) >= RECORDS * len(VALUE)
    assert quiet.value("zkcoord_broker_requests_total", api="Produce") >= 1
    assert quiet.value("zkcoord_zookeeper_connected") == 1
    assert quiet.value("zkcoord_zookeeper_request_duration_seconds_count") > 0

    consumers = [cluster.add_consumer("g", [TOPIC]) for _ in range(2)]
    wait_until(lambda: sum(len(c.records()) for c in consumers) >= RECORDS, 30, message="every record consumed")
    live = scrape_until(server, lambda m: m.value("zkcoord_groups", state="stable") == 1
                        and m.value("zkcoord_pings_sent_total") > 0 and m.value("zkcoord_offset_flushes_total") > 0,
                        "a stable group, pinged, its offsets flushed")
    assert live.value("zkcoord_members", state="active") == len(consumers)
    assert live.value("zkcoord_members") == len(consumers)
    rebalances = live.value("zkcoord_rebalances_total")
    assert rebalances >= 1
    assert live.value("zkcoord_rebalance_duration_seconds_count") == rebalances
    assert live.value("zkcoord_broker_fetch_records_total", topic=TOPIC) >= RECORDS
    assert live.value("zkcoord_broker_fetch_bytes_total", topic=TOPIC) >= RECORDS * len(VALUE)
    assert live.value("zkcoord_broker_requests_total", api="Fetch") >= 1
    assert live.value("zkcoord_broker_connections") >= len(consumers)  # each consumer's fetcher
    assert live.value("zkcoord_offset_flush_failures_total") == 0
    assert live.value("zkcoord_offset_flush_duration_seconds_count") == live.value("zkcoord_offset_flushes_total")
    assert live.value("zkcoord_member_expiries_total") == 0

    # An answer that carries an error code is counted by API and code.
    admin = AdminClient({"bootstrap.servers": server.broker, "log_level": 3})
    assert admin.list_topics(topic="missing", timeout=10).topics["missing"].error is not None
    errors = server.scrape().value("zkcoord_broker_errors_total", api="Metadata", code="3",
                                   error="UNKNOWN_TOPIC_OR_PARTITION")
    assert errors >= 1

    # A member that stops answering is dropped when its ping goes unanswered.
    consumers[1].pause()
    dropped = scrape_until(server, lambda m: m.value("zkcoord_member_expiries_total", reason="no_answer") == 1
                           and m.value("zkcoord_groups", state="stable") == 1
                           and m.value("zkcoord_rebalances_total") > rebalances,
                           "the paused member dropped and the group rebalanced")
    assert dropped.value("zkcoord_members", state="active") == 1

    for consumer in consumers:
        consumer.terminate()
    gone = scrape_until(server, lambda m: m.value("zkcoord_members") == 0
                        and m.value("zkcoord_groups", state="empty") == 1, "every member gone")
    assert gone.value("zkcoord_groups") == 1
