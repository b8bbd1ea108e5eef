"""Streaming queries as members of a consumer group: the partitions split
between queries of one group, a joining query takes partitions over exactly
where the previous owner's last committed batch ended, a query that stops or
ends by itself leaves the group at the end of its last committed batch, and
queries in different groups each read everything."""

from __future__ import annotations

import threading
import uuid

import pytest

from tests.spark.sinks import read_sink, stream_to_parquet
from zkcoord.spark import PYTHON_SOURCE_NAME
from zkcoord.testing import wait_until
from zkcoord.zk import layout

PARTITIONS = 4
PER_PARTITION = 400


def owners(zk, group: str, topic: str) -> dict[int, str]:
    path = layout.owners_path(group, topic)
    if not zk.exists(path):
        return {}
    return {int(p): zk.get(f"{path}/{p}")[0].decode() for p in zk.get_children(path)}


def group_query(spark, cluster, topic, base, name, group):
    return stream_to_parquet(spark, cluster, topic, base, name=name, group=group,
                             startingOffsets="earliest", maxOffsetsPerTrigger="60",
                             handoffTimeoutMs="8000")


def test_queries_in_a_group_split_partitions_and_hand_them_over_exactly(spark, cluster, tmp_path):
    cluster.start(1)
    topic = f"g-{uuid.uuid4().hex[:8]}"
    cluster.create_topic(topic, PARTITIONS)
    group = "pipeline"
    produced = threading.Event()
    stop = threading.Event()
    third_joined = threading.Event()

    def produce():
        for i in range(0, PER_PARTITION, 10):
            if i == PER_PARTITION // 2:
                # the second half goes on while the third query joins and takes partitions over
                third_joined.wait(60)
            if stop.is_set():
                return
            cluster.produce(topic, [(p, b"k", f"v{p}-{j}".encode())
                                    for p in range(PARTITIONS) for j in range(i, i + 10)])
            stop.wait(0.25)
        produced.set()

    producer = threading.Thread(target=produce, daemon=True)
    producer.start()
    queries = {name: group_query(spark, cluster, topic, tmp_path, name, group) for name in ("a", "b")}
    try:
        wait_until(lambda: len(set(owners(cluster.zk, group, topic).values())) == 2
                   and len(owners(cluster.zk, group, topic)) == PARTITIONS,
                   timeout=60, message="two queries to own the partitions")
        wait_until(lambda: read_sink(spark, tmp_path, "a") and read_sink(spark, tmp_path, "b"),
                   timeout=60, interval=0.5, message="both queries to write records")
        split = {name: {p for _, p, _, _, _ in read_sink(spark, tmp_path, name)} for name in ("a", "b")}
        assert not split["a"] & split["b"], split
        queries["c"] = group_query(spark, cluster, topic, tmp_path, "c", group)
        third_joined.set()
        wait_until(lambda: len(set(owners(cluster.zk, group, topic).values())) == 3,
                   timeout=60, message="the third query to be granted partitions")
        wait_until(produced.is_set, timeout=90, message="production to finish")
        total = PARTITIONS * PER_PARTITION
        wait_until(lambda: sum(len(read_sink(spark, tmp_path, n)) for n in queries) >= total,
                   timeout=90, interval=0.5, message="every record in the sinks")
    finally:
        stop.set()
        for query in queries.values():
            query.stop()
    rows = {name: read_sink(spark, tmp_path, name) for name in queries}
    keys = [(p, o) for name in rows for _, p, o, _, _ in rows[name]]
    assert len(keys) == len(set(keys)), "a record was delivered twice across the sinks"
    assert sorted(keys) == [(p, o) for p in range(PARTITIONS) for o in range(PER_PARTITION)]
    assert rows["c"], "the joining query got no records"


def test_queries_in_different_groups_each_read_everything(spark, cluster, tmp_path):
    cluster.start(1)
    topic = f"g-{uuid.uuid4().hex[:8]}"
    cluster.create_topic(topic, 2)
    cluster.produce(topic, [(p, b"k", f"v{p}-{j}".encode()) for p in range(2) for j in range(100)])
    groups = ("one", "two")
    queries = [stream_to_parquet(spark, cluster, topic, tmp_path, name=g, group=g, startingOffsets="earliest")
               for g in groups]
    try:
        for g in groups:
            wait_until(lambda: len(read_sink(spark, tmp_path, g)) >= 200, timeout=60, interval=0.5,
                       message=f"group {g} to read the topic")
            # committed batches are reported on pings: group tools see the progress
            wait_until(lambda: committed(cluster.zk, g, topic) == {0: 100, 1: 100}, timeout=20,
                       message=f"group {g} offsets in ZooKeeper")
    finally:
        for query in queries:
            query.stop()
    for g in groups:
        got = sorted((p, o) for _, p, o, _, _ in read_sink(spark, tmp_path, g))
        assert got == [(p, o) for p in range(2) for o in range(100)]


def committed(zk, group: str, topic: str) -> dict[int, int]:
    path = layout.offsets_path(group, topic)
    if not zk.exists(path):
        return {}
    return {int(p): layout.decode_offset(zk.get(f"{path}/{p}")[0]) for p in zk.get_children(path)}


def test_a_group_query_restarted_from_its_checkpoint_reads_each_record_once(spark, cluster, tmp_path):
    cluster.start(1)
    topic = f"g-{uuid.uuid4().hex[:8]}"
    cluster.create_topic(topic, 2)

    def produce(first: int, count: int) -> None:
        cluster.produce(topic, [(p, b"k", f"v{p}-{j}".encode()) for p in range(2)
                                for j in range(first, first + count)])

    def run_until(rows: int) -> None:
        query = group_query(spark, cluster, topic, tmp_path, "q", "restarts")
        try:
            wait_until(lambda: len(read_sink(spark, tmp_path, "q")) >= rows, timeout=60, interval=0.5,
                       message=f"{rows} rows in the sink")
        finally:
            query.stop()

    produce(0, 150)
    run_until(300)
    produce(150, 150)
    run_until(600)
    keys = [(p, o) for _, p, o, _, _ in read_sink(spark, tmp_path, "q")]
    assert len(keys) == len(set(keys)), "a record was read twice across the restart"
    assert sorted(keys) == [(p, o) for p in range(2) for o in range(300)]


def produce_range(cluster, topic: str, partitions: int, first: int, count: int) -> None:
    cluster.produce(topic, [(p, b"k", f"v{p}-{j}".encode()) for p in range(partitions)
                            for j in range(first, first + count)])


# Both paths: on the JVM one Spark calls the source's stop(); on the Python
# one Spark ends the source's Python process instead (zkcoord/spark/worker.py).
BOTH_PATHS = pytest.mark.parametrize("source", ["zkcoord", PYTHON_SOURCE_NAME])


@BOTH_PATHS
def test_a_stopped_group_query_leaves_at_its_last_committed_batch(spark, cluster, tmp_path, source):
    # The member must hand the group its last committed batch, not its last ping's.
    cluster.start(1)
    topic = f"g-{uuid.uuid4().hex[:8]}"
    cluster.create_topic(topic, 2)
    produce_range(cluster, topic, 2, 0, 100)
    group = "stops"
    # Pings every 10 s: the stop below comes before one could carry the offsets.
    first = stream_to_parquet(spark, cluster, topic, tmp_path, name="a", group=group, source=source,
                              startingOffsets="earliest", sessionTimeoutMs="30000")
    try:
        # All in the sink, and a later trigger found no new data: Spark has
        # planned again after the last batch, so the source knows it committed.
        wait_until(lambda: len(read_sink(spark, tmp_path, "a")) >= 200 and not first.status["isDataAvailable"],
                   timeout=60, interval=0.2, message="the first query to read everything and plan again")
    finally:
        first.stop()
    wait_until(lambda: committed(cluster.zk, group, topic) == {0: 100, 1: 100}, timeout=20,
               message="the stopped query's last batch in the group's offsets")
    produce_range(cluster, topic, 2, 100, 50)
    second = stream_to_parquet(spark, cluster, topic, tmp_path, name="b", group=group, source=source,
                               startingOffsets="earliest")
    try:
        wait_until(lambda: len(read_sink(spark, tmp_path, "b")) >= 100, timeout=60, interval=0.5,
                   message="the next owner to read the new records")
    finally:
        second.stop()
    got = sorted((p, o) for _, p, o, _, _ in read_sink(spark, tmp_path, "b"))
    assert got == [(p, o) for p in range(2) for o in range(100, 150)], "the next owner read again"


@BOTH_PATHS
def test_an_available_now_group_query_commits_its_last_batch_to_the_group(spark, cluster, tmp_path, source):
    cluster.start(1)
    topic = f"g-{uuid.uuid4().hex[:8]}"
    cluster.create_topic(topic, 2)
    produce_range(cluster, topic, 2, 0, 300)
    group = "once"
    query = stream_to_parquet(spark, cluster, topic, tmp_path, group=group, trigger={"availableNow": True},
                              source=source, startingOffsets="earliest", maxOffsetsPerTrigger="250")
    assert query.awaitTermination(120)
    assert query.exception() is None
    wait_until(lambda: committed(cluster.zk, group, topic) == {0: 300, 1: 300}, timeout=20,
               message="the last batch's end in the group's offsets")
    got = sorted((p, o) for _, p, o, _, _ in read_sink(spark, tmp_path))
    assert got == [(p, o) for p in range(2) for o in range(300)]
