"""A server's metrics endpoint, scraped over HTTP as Prometheus does, while a
group of real consumer processes joins, consumes, loses a member that stops
answering, and leaves."""

from __future__ import annotations

import json
import re
from pathlib import Path

from confluent_kafka.admin import AdminClient
from prometheus_client.parser import text_string_to_metric_families

from tests.e2e.conftest import SERVER_ARGS
from zkcoord.testing import wait_until

TOPIC = "events"
PARTITIONS = 4
RECORDS = 400
LATE = 30  # records produced once the group has no members
VALUE = b"v" * 100
DASHBOARD = Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "zkcoord.json"
METRIC_NAME = re.compile(r"\b((?:zkcoord|process)_[a-z0-9_]+)\b")
# Sample names Prometheus keeps for a family of each type (a family with no
# labelled child yet still has its HELP and TYPE lines).
SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"), "gauge": ("",)}


def scrape_until(process, holds, message: str, timeout: float = 20.0):
    """The first scrape of ``process`` for which ``holds(scrape)`` is true."""
    def scraped():
        metrics = process.scrape()
        return metrics if holds(metrics) else None

    return wait_until(scraped, timeout, message=message)


def test_the_metrics_follow_the_group_and_the_broker(cluster_factory):
    cluster = cluster_factory(servers=1, server_args=(*SERVER_ARGS, "--metrics-port", "0", "--lag-refresh-ms", "500"))
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

    # Nobody consumes: what is produced now is the group's lag, learnt from the leaders without any commit.
    scrape_until(server, lambda m: m.has("zkcoord_consumer_lag")
                 and m.value("zkcoord_consumer_lag", group="g", topic=TOPIC) == 0, "no lag once all is committed")
    cluster.produce(TOPIC, ((i % PARTITIONS, None, VALUE) for i in range(LATE)))
    scrape_until(server, lambda m: m.value("zkcoord_consumer_lag", group="g", topic=TOPIC) == LATE,
                 f"a lag of the {LATE} records produced since")


def dashboard_queries() -> list[str]:
    """Every PromQL expression of the Grafana dashboard: its panels' and its variables'."""
    dashboard = json.loads(DASHBOARD.read_text())
    queries = [target["expr"] for panel in dashboard["panels"] for target in panel.get("targets", ())]
    queries += [variable["definition"] for variable in dashboard["templating"]["list"] if "definition" in variable]
    return queries


def exported_names(text: str) -> tuple[set[str], set[str]]:
    """(sample names a scrape can hold, family names) of an endpoint's text."""
    samples, families = set(), set()
    for family in text_string_to_metric_families(text):
        families.add(family.name)
        samples.update(family.name + suffix for suffix in SUFFIXES.get(family.type, ("",)))
        samples.update(sample.name for sample in family.samples)
    return samples, families


def test_the_grafana_dashboard_graphs_what_a_server_serves(cluster_factory):
    cluster = cluster_factory(servers=1, server_args=(*SERVER_ARGS, "--metrics-port", "0"))
    samples, families = exported_names(cluster.servers[1].scrape().text)
    queries = dashboard_queries()
    named = {name for query in queries for name in METRIC_NAME.findall(query)}
    assert named, "the dashboard names no metric"
    assert named - samples == set(), "dashboard queries name metrics no server exports"
    # A counter's or histogram's creation time (``*_created``) is Prometheus's
    # bookkeeping, not something to graph.
    served = {family for family in families if family.startswith("zkcoord_") and not family.endswith("_created")}
    missing = {family for family in served if not any(name.startswith(family) for name in named)}
    assert missing == set(), "metrics a server exports that the dashboard does not show"


def test_the_grafana_dashboard_is_laid_out_without_overlaps():
    dashboard = json.loads(DASHBOARD.read_text())
    panels = dashboard["panels"]
    assert len({panel["id"] for panel in panels}) == len(panels)
    cells = set()
    for panel in panels:
        grid = panel["gridPos"]
        assert 0 <= grid["x"] and grid["x"] + grid["w"] <= 24, panel["title"]
        area = {(grid["x"] + dx, grid["y"] + dy) for dx in range(grid["w"]) for dy in range(grid["h"])}
        assert not area & cells, f"{panel['title']} overlaps another panel"
        cells |= area
        if panel["type"] != "row":
            assert panel["targets"] and panel["datasource"]["uid"] == "${datasource}", panel["title"]
