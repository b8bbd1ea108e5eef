"""The example pipeline on a Spark standalone cluster: a master and two
workers as separate processes, the driver a process of its own and a member
of a consumer group, executors in the workers reading straight from the
brokers; the driver crashes mid-stream and a new one resumes from the
checkpoint, and every record is counted exactly once."""

from __future__ import annotations

import signal
import sys
from collections import defaultdict
from pathlib import Path

import pytest

from zkcoord.spark.jvm import built_jar
from zkcoord.testing import ManagedProcess, SparkStandalone, wait_until
from zkcoord.testing.process import ProcessExited
from zkcoord.zk import layout

PARTITIONS = 4
BEFORE_CRASH = 300  # records per partition produced before the first driver starts
AFTER_CRASH = 200  # ... and after it crashed
PER_TRIGGER = 400  # maxOffsetsPerTrigger: several micro-batches, so the crash comes mid-stream
GROUP = "cluster-pipeline"
TOPIC = "events"


@pytest.fixture
def standalone(tmp_path) -> SparkStandalone:
    with SparkStandalone(tmp_path / "spark", workers=2, cores=1) as spark_cluster:
        yield spark_cluster.start()


def produce(cluster, first: int, count: int) -> None:
    """Each partition p gets records with key p<p>, so the pipeline's
    aggregate per key is its aggregate per partition."""
    cluster.produce(TOPIC, [(p, f"p{p}".encode(), f"event {p}-{i}".encode())
                            for p in range(PARTITIONS) for i in range(first, first + count)])


def pipeline_driver(standalone: SparkStandalone, cluster, directory: Path, out: Path, *args: str) -> ManagedProcess:
    """`python -m zkcoord.examples.pipeline` as the driver of an application on ``standalone``."""
    command = [sys.executable, "-m", "zkcoord.examples.pipeline", "--zookeeper", cluster.zookeeper,
               "--topic", TOPIC, "--out", str(out), "--group", GROUP,
               "--max-offsets-per-trigger", str(PER_TRIGGER), *args]
    return ManagedProcess(f"spark driver ({directory.name})", directory, command, env=standalone.driver_env())


def application_of(driver: ManagedProcess) -> str:
    """The application id the pipeline prints once its session is up."""
    for line in driver.log_tail(max_bytes=1 << 20).splitlines():
        if line.startswith("application app-"):
            return line.split()[1]
    return ""


def owners(zk) -> dict[int, str]:
    path = layout.owners_path(GROUP, TOPIC)
    return {int(p): zk.get(f"{path}/{p}")[0].decode() for p in zk.get_children(path)}


def logged_batches(checkpoint: Path, log: str) -> int:
    """How many batches the query's ``offsets`` (planned) or ``commits`` log holds."""
    directory = checkpoint / log
    return len([f for f in directory.iterdir() if f.name.isdigit()]) if directory.is_dir() else 0


def crash_with_a_batch_in_flight(driver: ManagedProcess, checkpoint: Path) -> bool:
    """Freeze the driver; if a batch with records is planned and not yet
    committed (batch 0 is the group's empty first plan), kill -9 it with its
    JVM, else let it run on. Frozen, it cannot commit between the look and the kill."""
    if not driver.alive:
        raise ProcessExited(f"{driver.name} exited with {driver.returncode}:\n{driver.log_tail()}")
    driver.signal_group(signal.SIGSTOP)
    in_flight = False
    try:
        committed = logged_batches(checkpoint, "commits")
        in_flight = committed >= 2 and logged_batches(checkpoint, "offsets") > committed
    finally:
        if in_flight:
            driver.kill_group()
        else:
            driver.signal_group(signal.SIGCONT)
    return in_flight


def read_output(out: Path) -> dict[str, list[dict]]:
    """The pipeline's rows (records, first_offset, last_offset and batch, per key), by key."""
    import pyarrow.dataset as ds

    rows = defaultdict(list)
    for row in ds.dataset(str(out), format="parquet", partitioning="hive").to_table().to_pylist():
        rows[row["key"]].append(row)
    return rows


def check_ran_on_the_workers(standalone: SparkStandalone, app_id: str) -> None:
    """The application's executors were started by both workers, ran its
    tasks there, and loaded the source's JVM reader there."""
    app = standalone.applications()[app_id]
    assert app["name"] == "zkcoord-pipeline", app
    executors = standalone.executors(app_id)
    assert all(executors.values()), f"not every worker ran an executor of {app_id}: {executors}"
    logs = standalone.executor_logs(app_id)
    assert all(logs.values()), f"executor logs of {app_id}: {logs}"
    texts = {worker: "".join(path.read_text(errors="replace") for path in paths) for worker, paths in logs.items()}
    for worker, text in texts.items():
        assert "Finished task" in text, f"the executor on {worker} ran no task of {app_id}"
    for worker, text in texts.items():
        assert built_jar().name in text, f"the executor on {worker} did not fetch the source's jar"


@pytest.mark.timeout(170)
def test_the_pipeline_on_a_standalone_cluster_counts_every_record_once_across_a_driver_crash(
        standalone, cluster, tmp_path):
    cluster.start(1)
    cluster.create_topic(TOPIC, PARTITIONS)
    produce(cluster, 0, BEFORE_CRASH)
    out = tmp_path / "agg"
    checkpoint = out / "_checkpoint"

    first = pipeline_driver(standalone, cluster, tmp_path / "driver-1", out)
    try:
        first.start()
        first_app = wait_until(lambda: application_of(first), timeout=60,
                               message="the first driver's application to start")
        # The driver is the group's one member: the coordinator grants it every partition.
        wait_until(lambda: len(owners(cluster.zk)) == PARTITIONS and len(set(owners(cluster.zk).values())) == 1,
                   timeout=60, message="the query to own every partition")
        wait_until(lambda: crash_with_a_batch_in_flight(first, checkpoint), timeout=60, interval=0.1,
                   message="the first driver to commit a batch of records and plan the next one",
                   fail_on=(ProcessExited,))
    finally:
        first.kill_group()  # the driver crashes: its Python process, its JVM and its Python workers
    assert first.returncode == -signal.SIGKILL
    assert logged_batches(checkpoint, "offsets") == logged_batches(checkpoint, "commits") + 1, \
        "the crash left no batch to replay"
    # Its executors go with it: the master frees their cores for the next application.
    wait_until(standalone.idle, timeout=30, message="the master to end the crashed application")

    produce(cluster, BEFORE_CRASH, AFTER_CRASH)
    second = pipeline_driver(standalone, cluster, tmp_path / "driver-2", out, "--available-now")
    try:
        second.start()
        wait_until(lambda: second.returncode is not None, timeout=90,
                   message="the second driver to process what is there and end")
    finally:
        second.kill_group()
    assert second.returncode == 0, second.log_tail()
    second_app = application_of(second)
    assert second_app and second_app != first_app

    total = BEFORE_CRASH + AFTER_CRASH
    rows = read_output(out)
    assert sorted(rows) == [f"p{p}" for p in range(PARTITIONS)]
    for key, batches in rows.items():
        offsets = []
        for row in batches:
            # a batch reads one contiguous range of the key's partition: as many records as offsets
            assert row["records"] == row["last_offset"] - row["first_offset"] + 1, row
            offsets.extend(range(row["first_offset"], row["last_offset"] + 1))
        assert sorted(offsets) == list(range(total)), f"{key}: a record was lost or counted twice"
    # The driver's own totals, computed on the cluster from the same output.
    printed = second.log_tail(max_bytes=1 << 20)
    for p in range(PARTITIONS):
        assert f"p{p}: {total} records" in printed, printed[-2000:]

    for app_id in (first_app, second_app):
        check_ran_on_the_workers(standalone, app_id)
