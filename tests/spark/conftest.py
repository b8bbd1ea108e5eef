"""Fixtures for the Spark source: one local SparkSession for the whole run,
and real ``zkcoord server`` processes (coordinator plus embedded broker) in a
chroot of the shared ZooKeeper ensemble."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Iterable, Iterator

import pytest
from kazoo.client import KazooClient

from tests.support import fresh_chroot, free_port, wait_until
from zkcoord.admin import topics as topic_admin
from zkcoord.zk import layout


def configure_spark_env() -> None:
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable


@pytest.fixture(scope="session")
def spark():
    configure_spark_env()
    from pyspark.sql import SparkSession

    from zkcoord.spark import register

    session = (
        SparkSession.builder.master("local[2,3]")  # 2 cores, a failed task tried up to 3 times
        .appName("zkcoord-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.python.worker.reuse", "true")
        .config("spark.sql.streaming.pollingDelay", "100ms")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    yield session
    session.stop()


class ServerProcess:
    """One ``zkcoord server`` subprocess; its log is attached to failing tests."""

    def __init__(self, server_id: int, zk_connect: str, base: Path, *extra: str):
        self.server_id = server_id
        self.zk_connect = zk_connect
        self.data_dir = base / f"data-{server_id}"
        self.log_path = base / f"server-{server_id}-{uuid.uuid4().hex[:6]}.log"
        self.extra = extra
        self.port = free_port()
        self.broker_port = free_port()
        self.proc = None

    def start(self) -> "ServerProcess":
        self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "zkcoord.cli", "server", "--id", str(self.server_id),
             "--zookeeper", self.zk_connect, "--port", str(self.port),
             "--broker-port", str(self.broker_port), "--data-dir", str(self.data_dir), *self.extra],
            stdout=self._log, stderr=subprocess.STDOUT)
        return self

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def broker(self) -> str:
        return f"127.0.0.1:{self.broker_port}"

    def stop(self, timeout: float = 20.0) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._log.close()

    def log_tail(self, max_bytes: int = 5000) -> str:
        try:
            return self.log_path.read_bytes()[-max_bytes:].decode(errors="replace")
        except FileNotFoundError:
            return ""


class Cluster:
    """Servers in one chroot, an admin ZooKeeper client, and a producer."""

    def __init__(self, connect: str, zk: KazooClient, base: Path):
        self.connect = connect
        self.zk = zk
        self.base = base
        self.servers: list[ServerProcess] = []
        self._producer = None

    def start(self, count: int = 1, *extra: str) -> "Cluster":
        started = [ServerProcess(len(self.servers) + i, self.connect, self.base, *extra).start()
                   for i in range(count)]
        self.servers.extend(started)
        for server in started:
            wait_until(lambda s=server: self._registered(s), timeout=30,
                       message=f"server {server.server_id} to register")
        wait_until(lambda: self.zk.exists(layout.COORDINATOR_PATH), timeout=30,
                   message="a coordinator to be elected")
        return self

    def _registered(self, server: ServerProcess) -> bool:
        if server.proc.poll() is not None:
            raise AssertionError(f"server {server.server_id} exited:\n{server.log_tail()}")
        return bool(self.zk.exists(layout.broker_path(server.server_id))
                    and self.zk.exists(layout.server_path(str(server.server_id))))

    @property
    def bootstrap(self) -> str:
        return ",".join(s.broker for s in self.servers)

    def create_topic(self, topic: str, partitions: int) -> None:
        topic_admin.create_topic(self.zk, topic, partitions)
        self.wait_led(topic, partitions)

    def add_partitions(self, topic: str, total: int) -> None:
        before = len(topic_admin.read_topic(self.zk, topic)[0].partitions)
        topic_admin.add_partitions(self.zk, topic, total)
        self.wait_led(topic, total, first=before)
        if self._producer is not None:
            # a fresh producer, so its metadata knows the new partitions
            self._producer.flush(10)
            self._producer = None

    def wait_led(self, topic: str, partitions: int, first: int = 0) -> None:
        wait_until(lambda: all(self.zk.exists(layout.partition_state_path(topic, p))
                               for p in range(first, partitions)),
                   timeout=20, message=f"{topic} partitions to get leaders")

    def produce(self, topic: str, records: Iterable[tuple[int, bytes, bytes]]) -> int:
        """Send (partition, key, value) records and wait until all are acknowledged."""
        from confluent_kafka import Producer

        if self._producer is None:
            self._producer = Producer({"bootstrap.servers": self.bootstrap, "linger.ms": 5,
                                       "acks": "all", "log_level": 3})
        failures = []
        count = 0

        def delivered(err, _msg):
            if err is not None:
                failures.append(err)

        for partition, key, value in records:
            while True:
                try:
                    self._producer.produce(topic, value=value, key=key, partition=partition,
                                           on_delivery=delivered)
                    break
                except BufferError:
                    self._producer.poll(0.05)
            count += 1
        left = self._producer.flush(30)
        assert left == 0 and not failures, f"{left} unsent, failures: {failures[:3]}"
        return count

    def stop(self) -> None:
        if self._producer is not None:
            self._producer.flush(5)
            self._producer = None
        for server in self.servers:
            server.stop()


_clusters_key = pytest.StashKey[list]()


@pytest.fixture
def cluster(request, zk_connect, zk, tmp_path) -> Iterator[Cluster]:
    c = Cluster(zk_connect, zk, tmp_path)
    request.node.stash[_clusters_key] = [c]
    yield c
    c.stop()


@pytest.fixture(scope="module")
def shared_cluster(request, zk_ensemble, tmp_path_factory) -> Iterator[Cluster]:
    """One server for a module of tests that each use their own topics."""
    with fresh_chroot(zk_ensemble, "s") as (connect, client):
        c = Cluster(connect, client, tmp_path_factory.mktemp("spark-cluster"))
        c.start(1)
        yield c
        c.stop()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    if report.failed:
        clusters = list(item.stash.get(_clusters_key, []))
        if "shared_cluster" in item.fixturenames:
            clusters.append(item.funcargs.get("shared_cluster"))
        for c in clusters:
            for server in getattr(c, "servers", []):
                report.sections.append((f"server {server.server_id} log (tail)", server.log_tail()))
    return report
