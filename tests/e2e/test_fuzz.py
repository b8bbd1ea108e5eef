"""The fuzz benchmark, short: bench/bench_fuzz.py against a live
coordinator and broker, with a real group consuming beside them. No crash,
the group kept delivering and saw no rebalance, no handler failed on a
frame (a traceback in the server's log), and the server's memory stayed
bounded."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench" / "bench_fuzz.py"
FRAMES = 20_000
LAST_LINE = re.compile(r"frames (\d+); crashes (\d+); group deliveries during fuzz (\d+); "
                       r"server RSS growth (-?[\d.]+) MiB")
# A few MiB of allocator slack; a leak per connection (some thousands of
# them) or per frame would be far beyond it.
RSS_GROWTH_BOUND_MIB = 32.0


def test_a_short_fuzz_leaves_the_servers_and_the_group_unharmed():
    run = subprocess.run([sys.executable, str(BENCH), "--frames", str(FRAMES), "--max-seconds", "90"],
                         capture_output=True, text=True, timeout=170)
    lines = run.stdout.strip().splitlines()
    assert lines, run.stderr[-3000:]
    found = LAST_LINE.fullmatch(lines[-1])
    assert found, f"last line {lines[-1]!r}\n{run.stdout[-3000:]}\n{run.stderr[-3000:]}"
    frames, crashes, delivered, growth = int(found[1]), int(found[2]), int(found[3]), float(found[4])
    assert frames == FRAMES
    assert crashes == 0, run.stdout[-3000:]
    assert delivered > 0, run.stdout[-3000:]
    assert "Starts/Stops during the fuzz 0" in run.stdout, run.stdout[-3000:]
    assert "tracebacks in its log 0" in run.stdout, run.stdout[-3000:]  # a handler failing on a frame
    assert growth < RSS_GROWTH_BOUND_MIB, run.stdout[-3000:]
    assert run.returncode == 0, run.stdout[-3000:]
