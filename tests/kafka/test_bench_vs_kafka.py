"""bench/bench_vs_kafka.py runs end to end at a few members: both systems
measured on every workload, the reference Java client's rows beside the load
generator's, and its last line in the form RESULTS.md quotes."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.kafka

BENCH = Path(__file__).resolve().parents[2] / "bench" / "bench_vs_kafka.py"
RUN_TIMEOUT_S = 600  # Kafka's cluster alone starts in 15 s to a minute on two loaded cores
WORKLOADS = ("formation", "one join", "coordinator failure", "member failure", "capacity")
JAVA_WORKLOADS = ("formation", "one join", "member failure")  # a quick run kills no coordinator under Java members
JAVA = "kafka consumer protocol (KIP-848), Java client"
LAST_LINE = re.compile(r"vs kafka: formation ([\d.]+)x; one join ([\d.]+)x; coordinator failure ([\d.]+)x; "
                       r"member failure ([\d.]+)x; capacity ([\d.]+)x")


def test_the_quick_run_measures_both_systems_on_every_workload():
    # One Kafka protocol keeps it short; the full run measures all three. Its
    # Java client rows (one JVM more per group, no coordinator failure in a
    # quick run) add some 20 s.
    bench = subprocess.Popen([sys.executable, str(BENCH), "--quick", "--kafka", "consumer", "--java", "consumer"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = bench.communicate(timeout=RUN_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        bench.terminate()  # SIGTERM: the bench stops every process it started (a kill would leave them)
        out, err = bench.communicate(timeout=120)
        pytest.fail(f"the quick run took over {RUN_TIMEOUT_S} s:\n{out}")
    assert bench.returncode == 0, err[-3000:]
    lines = out.strip().splitlines()
    last = LAST_LINE.fullmatch(lines[-1])
    assert last, lines[-1]
    assert all(float(ratio) > 0 for ratio in last.groups()), lines[-1]
    for workload in WORKLOADS:
        for system in ("kafka consumer protocol (KIP-848)", "zkcoord"):
            assert any(line.startswith(workload) and f": {system}: " in line for line in lines), (workload, system)
    for workload in JAVA_WORKLOADS:
        assert any(line.startswith(workload) and f": {JAVA}: " in line for line in lines), workload
        assert any(line.startswith(f"java client beside the load generator: {workload}") for line in lines), workload
    assert not [line for line in lines if "not whole by the deadline" in line]
