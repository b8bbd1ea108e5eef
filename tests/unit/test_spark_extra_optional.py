"""pyspark is an extra (scripts/install.sh spark): without it, every Spark
test module is still collected, so a run of the suite goes on and the tests
that need a SparkSession skip, instead of the run stopping at collection."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parents[2]

# pytest in an interpreter where importing pyspark fails, as it does where
# the extra is not installed.
WITHOUT_PYSPARK = """
import importlib.abc, sys

class NoPyspark(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] == "pyspark":
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, NoPyspark())
import pytest
sys.exit(pytest.main(sys.argv[1:]))
"""


def test_the_spark_tests_are_collected_without_pyspark():
    done = subprocess.run([sys.executable, "-c", WITHOUT_PYSPARK, "--collect-only", "-q", "-p", "no:cacheprovider",
                           "tests/spark"], cwd=REPOSITORY, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
