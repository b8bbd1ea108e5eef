"""`zkcoord demo --kafka` as a user runs it: the demo's story on a 3-broker
Kafka 4 cluster in KRaft mode, a Kafka leader killed while the messages
flow, and every check still passing (the Spark pipeline left out: its
start-up alone takes a minute; tests/spark drives the source over Kafka)."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from tests.drill.test_drill_command import kill_processes_under, processes_under

pytestmark = pytest.mark.kafka


@pytest.mark.timeout(420)
def test_the_demo_over_kafka_kills_a_kafka_leader_and_every_check_passes(tmp_path):
    directory = tmp_path / "demo"
    try:
        result = subprocess.run([sys.executable, "-m", "zkcoord.cli", "demo", "--kafka", "--no-spark",
                                 "--messages", "4000", "--dir", str(directory)],
                                capture_output=True, text=True, timeout=360, stdin=subprocess.DEVNULL)
    finally:
        kill_processes_under(directory)
    out = result.stdout
    assert result.returncode == 0, out[-6000:] + result.stderr[-3000:]
    assert "in KRaft mode (the records' home)" in out and "no broker of their own" in out
    killed = re.search(r"kafka (\d), leader of events-0 and \d+ other partition\(s\), killed while producing", out)
    assert killed, out
    assert re.search(rf"kafka (?!{killed.group(1)})\d leads events-0 after", out), out
    assert "[FAILED]" not in out and "4 of 4 checks passed" in out, out
    assert "every one of the 4000 messages delivered (no loss)" in out
    assert processes_under(directory) == {}
