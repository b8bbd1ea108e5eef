"""A local zkcoord cluster of real processes on 127.0.0.1: servers and consumers.

``LocalCluster`` starts `zkcoord server` processes (each with its embedded
broker) against a ZooKeeper connect string, and `zkcoord consume` processes
as group members, each in its own directory with its log. It can kill -9,
pause (SIGSTOP) and resume any of them. The demo, the end-to-end tests and
the benchmarks all run on it, so what they show is what a user deploys.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional, Sequence

from zkcoord.errors import ZkcoordError


class ClusterError(ZkcoordError):
    """A process of the local cluster did not start or stop as expected."""


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def wait_for(predicate: Callable[[], object], timeout: float, what: str, interval: float = 0.05):
    deadline = time.monotonic() + timeout
    while True:
        try:
            value = predicate()
        except Exception:  # not checkable yet (file half written, node missing)
            value = None
        if value:
            return value
        if time.monotonic() > deadline:
            raise ClusterError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


def _zkcoord_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "zkcoord.cli", *args]


@dataclass
class _Process:
    name: str
    directory: Path
    command: list[str]
    proc: Optional[subprocess.Popen] = None

    @property
    def log_path(self) -> Path:
        return self.directory / "process.log"

    def start(self) -> None:
        if self.alive:
            return
        self.directory.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                self.command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def pid(self) -> int:
        if self.proc is None:
            raise ClusterError(f"{self.name} was never started")
        return self.proc.pid

    def kill(self) -> None:
        """kill -9: a crash."""
        if self.alive:
            self.proc.send_signal(signal.SIGCONT)  # a paused process must be able to die
            self.proc.kill()
            self.proc.wait(10)

    def terminate(self, timeout: float = 20.0) -> None:
        """SIGTERM: a clean shutdown, then kill -9 if it lingers."""
        if not self.alive:
            return
        self.proc.send_signal(signal.SIGCONT)
        self.proc.terminate()
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()

    def pause(self) -> None:
        os.kill(self.pid, signal.SIGSTOP)

    def resume(self) -> None:
        os.kill(self.pid, signal.SIGCONT)

    def log_tail(self, max_bytes: int = 6000) -> str:
        try:
            data = self.log_path.read_bytes()
        except OSError:
            return ""
        return data[-max_bytes:].decode("utf-8", "replace")


@dataclass
class ServerProcess(_Process):
    server_id: int = 0
    port: int = 0
    broker_port: int = 0


@dataclass
class ConsumerProcess(_Process):
    group: str = ""

    @property
    def status_path(self) -> Path:
        return self.directory / "status.json"

    @property
    def output_path(self) -> Path:
        return self.directory / "records.jsonl"

    def status(self) -> Optional[dict]:
        try:
            return json.loads(self.status_path.read_text())
        except (OSError, ValueError):
            return None

    def assignment(self) -> set[tuple[str, int]]:
        status = self.status()
        return {(t, p) for t, p in status["assignment"]} if status and status["registered"] else set()

    def records(self) -> list[dict]:
        """Every record this consumer has written, across its restarts."""
        try:
            lines = self.output_path.read_text().splitlines()
        except OSError:
            return []
        result = []
        for line in lines:
            try:
                result.append(json.loads(line))
            except ValueError:
                break  # a line being written as we read
        return result


@dataclass
class LocalCluster:
    zookeeper: str
    directory: Path
    server_args: Sequence[str] = ()
    servers: dict[int, ServerProcess] = field(default_factory=dict)
    consumers: list[ConsumerProcess] = field(default_factory=list)

    # -- servers --------------------------------------------------------------------------------

    def add_server(self, server_id: int, start: bool = True) -> ServerProcess:
        port, broker_port = free_port(), free_port()
        directory = self.directory / f"server-{server_id}"
        server = ServerProcess(
            name=f"server {server_id}", directory=directory,
            command=_zkcoord_command(
                "server", "--id", str(server_id), "--zookeeper", self.zookeeper,
                "--port", str(port), "--broker-port", str(broker_port),
                "--data-dir", str(directory / "data"), *self.server_args,
            ),
            server_id=server_id, port=port, broker_port=broker_port,
        )
        self.servers[server_id] = server
        if start:
            server.start()
        return server

    def start_servers(self, count: int, timeout: float = 30.0) -> None:
        """Start servers 1..count and wait until each listens and its broker is registered."""
        for server_id in range(1, count + 1):
            self.add_server(server_id)
        for server in self.servers.values():
            wait_for(lambda s=server: self._listening(s), timeout, f"{server.name} to listen")
        self.wait_for_brokers(timeout)

    def wait_for_brokers(self, timeout: float = 30.0) -> None:
        from kazoo.client import KazooClient

        from zkcoord.zk import layout

        zk = KazooClient(hosts=self.zookeeper)
        zk.start(timeout=timeout)
        try:
            wanted = {str(s.server_id) for s in self.servers.values() if s.alive}
            wait_for(lambda: wanted <= set(zk.get_children(layout.BROKER_IDS)), timeout,
                     f"brokers {sorted(wanted)} registered")
        finally:
            zk.stop()
            zk.close()

    @staticmethod
    def _listening(server: ServerProcess) -> bool:
        if not server.alive:
            raise ClusterError(f"{server.name} exited:\n{server.log_tail()}")
        for port in (server.port, server.broker_port):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            except OSError:
                return False
        return True

    @property
    def bootstrap(self) -> list[str]:
        return [f"127.0.0.1:{s.port}" for s in self.servers.values()]

    @property
    def brokers(self) -> str:
        return ",".join(f"127.0.0.1:{s.broker_port}" for s in self.servers.values() if s.alive)

    # -- consumers ------------------------------------------------------------------------------

    def add_consumer(
        self, group: str, topics: Sequence[str] = (), pattern: Optional[str] = None,
        consumer_id: Optional[str] = None, session_timeout_ms: int = 4000, extra: Sequence[str] = (),
        bootstrap: Optional[Sequence[str]] = None,
    ) -> ConsumerProcess:
        index = len(self.consumers) + 1
        directory = self.directory / f"consumer-{index}"
        args = ["consume", "--bootstrap", ",".join(bootstrap or self.bootstrap), "--group", group,
                "--session-timeout-ms", str(session_timeout_ms),
                "--output", str(directory / "records.jsonl"), "--status", str(directory / "status.json")]
        for topic in topics:
            args += ["--topic", topic]
        if pattern:
            args += ["--pattern", pattern]
        if consumer_id:
            args += ["--consumer-id", consumer_id]
        consumer = ConsumerProcess(name=f"consumer {index}", directory=directory,
                                   command=_zkcoord_command(*args, *extra), group=group)
        self.consumers.append(consumer)
        consumer.start()
        return consumer

    # -- everything -------------------------------------------------------------------------------

    def processes(self) -> list[_Process]:
        return [*self.servers.values(), *self.consumers]

    def close(self) -> None:
        for process in self.consumers:
            process.kill()
        for process in self.servers.values():
            process.terminate(timeout=10)

    def log_tails(self) -> dict[str, str]:
        return {p.name: p.log_tail() for p in self.processes()}


class OwnershipViolation(ClusterError):
    """Two live members hold the same partition at once (invariant 1 broken)."""


def group_is_whole(zk, group: str, consumers: Sequence[ConsumerProcess], partitions: set,
                   every_member_holds: bool = False) -> bool:
    """Exclusive and complete, seen from outside: the live members' status files
    partition ``partitions`` exactly, every live member is registered (and holds
    something, if asked), and ZooKeeper's owners say the same. Raises
    OwnershipViolation if two live members hold one partition."""
    from zkcoord.admin.groups import read_owners

    held: dict[tuple[str, int], str] = {}
    for consumer in (c for c in consumers if c.alive):
        status = consumer.status()
        if not status or not status["registered"] or (every_member_holds and not status["assignment"]):
            return False
        for topic, partition in status["assignment"]:
            if (topic, partition) in held:
                raise OwnershipViolation(f"{topic}-{partition} held by {held[(topic, partition)]} "
                                         f"and {status['consumer_id']}")
            held[(topic, partition)] = status["consumer_id"]
    return set(held) == partitions and read_owners(zk, group) == held
