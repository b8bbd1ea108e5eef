"""A standalone broker's metrics endpoint: its traffic per topic, its requests
and the error codes it answered, scraped over HTTP while real clients
produce and fetch."""

from __future__ import annotations

import subprocess

import pytest

from tests.broker.test_clients import confluent_produce, confluent_read, unique_topic
from zkcoord.testing.process import ProcessExited

RECORDS = 300
VALUE = b"r" * 50


def test_a_standalone_broker_counts_its_traffic_and_errors(cluster):
    broker = cluster.start_broker(0, "--metrics-port", "0")
    topic = unique_topic("metrics")
    cluster.create_topic(topic, 1)
    confluent_produce(broker.bootstrap, topic, 0, [VALUE] * RECORDS)

    produced = broker.scrape()
    assert produced.value("zkcoord_broker_produce_records_total", topic=topic) == RECORDS
    assert produced.value("zkcoord_broker_produce_bytes_total", topic=topic) >= RECORDS * len(VALUE)
    assert produced.value("zkcoord_broker_fetch_records_total", topic=topic) == 0
    assert not produced.has("zkcoord_members")  # no coordinator in this process

    # Fetched from offset 100: records count as the offsets the fetches moved
    # the consumer past, whatever the batches held before that offset.
    assert len(confluent_read(broker.bootstrap, topic, 0, 100, RECORDS - 100)) == RECORDS - 100
    fetched = broker.scrape()
    assert fetched.value("zkcoord_broker_fetch_records_total", topic=topic) == RECORDS - 100
    assert fetched.value("zkcoord_broker_fetch_bytes_total", topic=topic) >= (RECORDS - 100) * len(VALUE)
    assert fetched.value("zkcoord_broker_requests_total", api="Fetch") >= 1
    assert fetched.value("zkcoord_broker_errors_total", api="Fetch") == 0

    # A fetch beyond the log's end is answered OFFSET_OUT_OF_RANGE, and counted.
    subprocess.run(["kcat", "-b", broker.bootstrap, "-C", "-t", topic, "-p", "0", "-o", str(RECORDS + 1000), "-e",
                    "-q"], check=False, timeout=30, capture_output=True)
    errors = broker.scrape().value("zkcoord_broker_errors_total", api="Fetch", code="1", error="OFFSET_OUT_OF_RANGE")
    assert errors >= 1


def test_a_metrics_port_taken_is_a_clear_error_at_start(cluster):
    first = cluster.start_broker(0, "--metrics-port", "0")
    with pytest.raises(ProcessExited, match=f"cannot serve metrics on 127.0.0.1:{first.ports['metrics_port']}"):
        cluster.start_broker(1, "--metrics-port", str(first.ports["metrics_port"]))
