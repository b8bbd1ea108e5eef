"""`zkcoord drill --kafka` as a user runs it: a short campaign over a real
Apache Kafka cluster of the drill's own, in each mode (Kafka 3.9 in
ZooKeeper mode, Kafka 4 in KRaft), with the Kafka fault kinds, must pass
every invariant; the kinds that cannot run over Kafka are left out with
the reason in the report; bad combinations are refused before anything
starts."""

from __future__ import annotations

import json
import re

import pytest

from tests.drill.test_drill_command import SUMMARY, drill, kill_processes_under, processes_under
from zkcoord.drill.schedule import left_out_over_kafka

pytestmark = pytest.mark.kafka

# Seed 20261130 draws, over either mode's three kinds, the partitions added
# first (learnt through ZooKeeper's topic watch, or through Kafka's metadata
# under KRaft), then the two Kafka faults on the grown topic.
SEED = "20261130"
CAMPAIGNS = {
    "3.9": ("add-partitions", "kafka-leader-kill", "kafka-controller-kill"),
    "4": ("add-partitions", "kafka-broker-pause", "kafka-controller-kill"),
}


@pytest.mark.timeout(480)
@pytest.mark.parametrize("release", sorted(CAMPAIGNS))
def test_a_short_drill_over_kafka_passes(tmp_path, release):
    directory = tmp_path / "drill"
    try:
        result = drill("--kafka", release, "--faults", "3", "--seed", SEED, "--kinds", ",".join(CAMPAIGNS[release]),
                       "--consumers", "3", "--dir", str(directory), timeout=420)
    finally:
        kill_processes_under(directory)
    lines = result.stdout.strip().splitlines()
    assert lines and SUMMARY.fullmatch(lines[-1]), result.stdout[-3000:] + result.stderr[-3000:]
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-3000:]
    report = json.loads((directory / "report.json").read_text())
    assert report["ok"] and report["summary"] == lines[-1]
    assert report["settings"]["data plane"].startswith(f"Apache Kafka {release} ")
    assert report["settings"]["kafka release"].startswith(f"{release}.")
    faults = report["faults"]
    assert [f["kind"] for f in faults] == list(CAMPAIGNS[release]), faults
    # Each injected, and each Kafka fault on a leader (its note says only when Kafka served again).
    assert all(re.fullmatch(r"Kafka served again \d+\.\d s in", f["note"]) if f["kind"].startswith("kafka-")
               else not f["note"] for f in faults), faults
    # The grown topic was the one the Kafka faults broke: 14 partitions.
    assert faults[0]["target"].endswith("12 -> 14 partitions")
    assert report["produced"] > 1000
    # Every acknowledged record was delivered: the checker counted none lost.
    assert report["violations"]["lost"] == 0 and report["delivered"] >= report["produced"]
    text = (directory / "report.txt").read_text()
    for kind, why in left_out_over_kafka().items():
        assert f"kind {kind} not run: not over Apache Kafka: {why}" in text
    assert processes_under(directory) == {}


@pytest.mark.parametrize("args, message", [
    (["--kafka", "5"], "--kafka must be one of 3.9, 4, not '5'"),
    (["--kafka", "4", "--zookeeper", "127.0.0.1:1", "--bootstrap", "127.0.0.1:1"],
     "--kafka runs the drill's own cluster"),
    (["--kafka", "3.9", "--stock-members", "1"], "--stock-members is not supported with --kafka"),
    (["--kafka", "3.9", "--secure"], "--secure is not supported with --kafka"),
    (["--kafka", "4", "--kinds", "stock-member-pause-long"], "not over Apache Kafka: stock-member-pause-long"),
    (["--kinds", "kafka-leader-kill"], "a drill over Kafka only (--kafka)"),
])
def test_bad_combinations_are_refused_before_anything_starts(tmp_path, args, message):
    result = drill(*args, "--dir", str(tmp_path / "d"))
    assert result.returncode == 2 and message in result.stderr, result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "d").exists()
