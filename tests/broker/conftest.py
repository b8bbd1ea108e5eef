"""Brokers for the data-plane tests: real ``zkcoord broker`` processes on
ephemeral 127.0.0.1 ports, registered in a chroot of the shared ensemble."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Iterator

import pytest
from kazoo.client import KazooClient

from tests.support import fresh_chroot, wait_until
from zkcoord.admin import topics as topic_admin


class BrokerProcess:
    """One broker subprocess; its log is attached to failing tests."""

    def __init__(self, broker_id: int, zk_connect: str, data_dir: Path, *extra: str):
        self.broker_id = broker_id
        self.zk_connect = zk_connect
        self.data_dir = data_dir
        self.extra = extra
        self.log_path = data_dir.parent / f"broker-{broker_id}-{uuid.uuid4().hex[:6]}.log"
        self.proc = None
        self.port = None

    def start(self, timeout: float = 30.0) -> "BrokerProcess":
        port_file = self.data_dir.parent / f"port-{self.broker_id}-{uuid.uuid4().hex[:6]}"
        self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "zkcoord.broker.cli", "--id", str(self.broker_id),
             "--zookeeper", self.zk_connect, "--data-dir", str(self.data_dir), "--port", "0",
             "--port-file", str(port_file), *self.extra],
            stdout=self._log, stderr=subprocess.STDOUT)
        wait_until(lambda: port_file.exists() or self.proc.poll() is not None, timeout=timeout,
                   message=f"broker {self.broker_id} to start")
        if self.proc.poll() is not None:
            raise AssertionError(f"broker exited {self.proc.returncode}:\n{self.log_tail()}")
        self.port = int(port_file.read_text())
        return self

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def stop(self, sig=signal.SIGTERM, timeout: float = 20.0) -> int:
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else 0
        self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()
        finally:
            self._log.close()

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_tail(self, max_bytes: int = 6000) -> str:
        try:
            return self.log_path.read_bytes()[-max_bytes:].decode(errors="replace")
        except FileNotFoundError:
            return ""

    def cpu_seconds(self) -> float:
        """utime + stime of the broker process, from /proc."""
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Cluster:
    """A chroot with brokers and an admin client to make topics."""

    def __init__(self, connect: str, zk: KazooClient, base: Path):
        self.connect = connect
        self.zk = zk
        self.base = base
        self.brokers: list[BrokerProcess] = []

    def start_broker(self, broker_id: int = 0, *extra: str) -> BrokerProcess:
        broker = BrokerProcess(broker_id, self.connect, self.base / f"data-{broker_id}", *extra)
        self.brokers.append(broker)
        return broker.start()

    def create_topic(self, topic: str, partitions: int, leaders_ready: bool = True):
        assignment = topic_admin.create_topic(self.zk, topic, partitions)
        if leaders_ready:
            self.wait_led(topic, partitions)
        return assignment

    def wait_led(self, topic: str, partitions: int) -> None:
        from zkcoord.zk import layout
        wait_until(lambda: all(self.zk.exists(layout.partition_state_path(topic, p))
                               for p in range(partitions)),
                   timeout=15, message=f"{topic} partitions to get leaders")

    def stop(self) -> None:
        for broker in self.brokers:
            broker.stop()


_clusters_key = pytest.StashKey[list]()


@pytest.fixture
def cluster(request, zk_connect, zk, tmp_path) -> Iterator[Cluster]:
    c = Cluster(zk_connect, zk, tmp_path)
    request.node.stash[_clusters_key] = [c]
    yield c
    c.stop()


@pytest.fixture(scope="module")
def shared_cluster(request, zk_ensemble, tmp_path_factory) -> Iterator[Cluster]:
    """One broker for a whole module of read/write tests that do not disturb it."""
    with fresh_chroot(zk_ensemble, "m") as (connect, client):
        c = Cluster(connect, client, tmp_path_factory.mktemp("broker"))
        c.start_broker(0)
        yield c
        c.stop()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    if report.failed:
        clusters = list(item.stash.get(_clusters_key, []))
        for name in ("shared_cluster",):
            if name in item.fixturenames:
                clusters.append(item.funcargs.get(name))
        for c in clusters:
            for broker in getattr(c, "brokers", []):
                report.sections.append((f"broker {broker.broker_id} log (tail)", broker.log_tail()))
    return report
