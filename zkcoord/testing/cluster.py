"""A local zkcoord cluster of real processes on 127.0.0.1: servers (each with
its embedded broker), standalone brokers, and consumers.

``LocalCluster`` starts every process through :class:`ManagedProcess`, in its
own directory with its log, on ports the kernel picks (each server reports
them in its port file, so nothing races for a free port). A restarted server
binds the ports it had, so the consumers' bootstrap lists and the broker
registrations in ZooKeeper stay true. The demo, the drill, the tests and the
benchmarks all run on it, so what they exercise is what a user deploys.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Iterable, Iterator, Optional, Sequence

from zkcoord.testing.process import ClusterError, ManagedProcess, zkcoord_command
from zkcoord.testing.waiting import wait_until
from zkcoord.testing.zookeeper import fresh_chroot
from zkcoord.zk.security import ZkSecurity, command_line


class ServerProcess(ManagedProcess):
    """`zkcoord server`: a coordinator candidate with its embedded broker
    (unless ``--no-broker`` is among its arguments: records live elsewhere,
    in Kafka's brokers sharing the chroot; with ``--gateway`` its broker is a
    group gateway beside Kafka, and has no data directory)."""

    def __init__(self, server_id: int, zookeeper: str, directory: Path, server_args: Sequence[str] = ()):
        super().__init__(f"server {server_id}", directory, [], port_file=directory / "ports.json")
        self.server_id = server_id
        self.zookeeper = zookeeper
        self.server_args = tuple(server_args)
        self.embeds_broker = "--no-broker" not in self.server_args
        self.command = self._command(0, 0)

    def _command(self, port: int, broker_port: int) -> list[str]:
        return zkcoord_command(
            "server", "--id", str(self.server_id), "--zookeeper", self.zookeeper,
            "--port", str(port), "--broker-port", str(broker_port), "--port-file", str(self.port_file),
            *(() if "--gateway" in self.server_args else ("--data-dir", str(self.directory / "data"))),
            *self.server_args)

    def start(self, timeout: float = 30.0) -> "ServerProcess":
        if self.ports:  # a restart binds what it had
            self.command = self._command(self.port, self.ports.get("broker_port", 0))
        super().start(timeout)
        return self

    @property
    def port(self) -> int:
        return self.ports["port"]

    @property
    def broker_port(self) -> int:
        return self.ports["broker_port"]

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def broker(self) -> str:
        return f"127.0.0.1:{self.broker_port}"


class BrokerProcess(ManagedProcess):
    """`zkcoord broker`: the data plane alone."""

    def __init__(self, broker_id: int, zookeeper: str, directory: Path, broker_args: Sequence[str] = ()):
        port_file = directory / "port.json"
        super().__init__(f"broker {broker_id}", directory, zkcoord_command(
            "broker", "--id", str(broker_id), "--zookeeper", zookeeper, "--data-dir", str(directory / "data"),
            "--port", "0", "--port-file", str(port_file), *broker_args), port_file=port_file)
        self.broker_id = broker_id
        self.broker_args = tuple(broker_args)

    @property
    def data_dir(self) -> Path:
        return self.directory / "data"

    @property
    def port(self) -> int:
        return self.ports["port"]

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"


class ConsumerProcess(ManagedProcess):
    """`zkcoord consume`: one group member, keeping its status file, the
    records it delivered (with when and by whom) and the Starts and Stops it
    obeyed (``events.jsonl``), across its restarts."""

    DIRECTORY_PREFIX = "consumer-"  # consumer-1, consumer-2, ... under the cluster's directory
    STATUS = "status.json"
    RECORDS = "records.jsonl"
    EVENTS = "events.jsonl"

    def __init__(self, name: str, directory: Path, command: Sequence[str], group: str, netns=None):
        super().__init__(name, directory, command)
        self.group = group
        self.netns = netns  # the NetworkNamespace it runs in, if any
        self.stock = False  # a stock Kafka client (zkcoord consume --kafka-brokers), not a thin consumer

    def start(self, timeout: float = 30.0) -> "ConsumerProcess":
        # A new process is a new member: what the last one said of itself is stale.
        self.status_path.unlink(missing_ok=True)
        super().start(timeout)
        return self

    @property
    def reachable(self) -> bool:
        """Running, not paused, and not cut off the network: a member that can take part."""
        return self.alive and not self.paused and not (self.netns is not None and self.netns.is_cut)

    @property
    def status_path(self) -> Path:
        return self.directory / self.STATUS

    @property
    def output_path(self) -> Path:
        return self.directory / self.RECORDS

    @property
    def events_path(self) -> Path:
        return self.directory / self.EVENTS

    def status(self) -> Optional[dict]:
        try:
            return json.loads(self.status_path.read_text())
        except (OSError, ValueError):
            return None

    def assignment(self) -> set[tuple[str, int]]:
        status = self.status()
        return {(t, p) for t, p in status["assignment"]} if status and status["registered"] else set()

    def records(self) -> list[dict]:
        """Every record this consumer has delivered, across its restarts."""
        return read_json_lines(self.output_path)


def send_acknowledged(producer, topic: str, records, timeout: float = 30.0) -> int:
    """Send (partition, key, value) records (partition None: the producer's
    choice) through a confluent_kafka ``producer``; wait until every one is
    acknowledged as the producer's ``acks`` asks. Returns how many were sent;
    raises ClusterError naming the first failures otherwise."""
    failures = []

    def delivered(err, _msg):
        if err is not None:
            failures.append(err)

    count = 0
    for partition, key, value in records:
        while True:
            try:
                kwargs = {} if partition is None else {"partition": partition}
                producer.produce(topic, value=value, key=key, on_delivery=delivered, **kwargs)
                break
            except BufferError:
                producer.poll(0.05)
        count += 1
    left = producer.flush(timeout)
    if left or failures:
        raise ClusterError(f"{left} records unacknowledged, failures: {failures[:3]}")
    return count


def read_json_lines(path: Path) -> list[dict]:
    """The complete lines of a JSON-lines file that a process may be appending
    to, or may have been killed while writing (a torn line is left out); none
    if the file does not exist."""
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return []
    result = []
    for line in lines:
        try:
            result.append(json.loads(line))
        except ValueError:
            continue
    return result


class LocalCluster:
    """Servers, brokers and consumers against one ZooKeeper connect string,
    under ``directory``; servers take ``server_args`` on top of their ids and ports."""

    def __init__(self, zookeeper: str, directory: Path, server_args: Sequence[str] = (),
                 zk_security: Optional[ZkSecurity] = None):
        self.zookeeper = zookeeper
        self.directory = Path(directory)
        self.zk_security = zk_security or ZkSecurity()
        # Every server and broker of the cluster authenticates as the cluster's client does.
        self.server_args = (*command_line(self.zk_security), *server_args)
        self.servers: dict[int, ServerProcess] = {}
        self.brokers: list[BrokerProcess] = []
        self.consumers: list[ConsumerProcess] = []
        self._zk = None
        self._producer = None
        # librdkafka properties the producer adds (security.protocol=SSL and its files, for a TLS cluster).
        self.client_settings: dict[str, str] = {}

    @property
    def zk(self):
        """A kazoo client on the cluster's ZooKeeper, started on first use, closed by close()."""
        if self._zk is None:
            from zkcoord.zk import client as zk_client

            self._zk = zk_client.open_client(self.zookeeper, self.zk_security)
            zk_client.start(self._zk, timeout=30)
        return self._zk

    # -- servers ----------------------------------------------------------------------------------

    def add_server(self, server_id: int, start: bool = True, zookeeper: Optional[str] = None,
                   extra: Sequence[str] = ()) -> ServerProcess:
        server = ServerProcess(server_id, zookeeper or self.zookeeper, self.directory / f"server-{server_id}",
                               (*self.server_args, *extra))
        self.servers[server_id] = server
        if start:
            server.start()
        return server

    def start_servers(self, count: int, timeout: float = 30.0, first_id: int = 1) -> list[ServerProcess]:
        """Start servers first_id..first_id+count-1; wait until each serves and
        its broker is registered."""
        started = [self.add_server(i, start=False) for i in range(first_id, first_id + count)]
        for server in started:
            server.start(timeout)
        self.wait_for_brokers(timeout)
        return started

    def wait_for_brokers(self, timeout: float = 30.0) -> None:
        """Every live server's and broker's broker id registered in ZooKeeper."""
        from zkcoord.zk import layout

        wanted = {str(s.server_id) for s in self.servers.values() if s.alive and s.embeds_broker}
        wanted |= {str(b.broker_id) for b in self.brokers if b.alive}
        if not wanted:  # servers without brokers (beside a KRaft Kafka there may be no /brokers at all)
            return
        wait_until(lambda: wanted <= set(self.zk.get_children(layout.BROKER_IDS)), timeout,
                   message=f"brokers {sorted(wanted)} registered")

    def wait_for_coordinator(self, timeout: float = 30.0) -> int:
        """The id of the elected coordinator, once there is one."""
        from zkcoord.zk import layout

        wait_until(lambda: self.zk.exists(layout.COORDINATOR_PATH), timeout, message="a coordinator to be elected")
        return self.coordinator_id()

    def coordinator_id(self) -> int:
        from zkcoord.zk import layout

        return int(layout.decode_coordinator(self.zk.get(layout.COORDINATOR_PATH)[0]))

    @property
    def bootstrap(self) -> list[str]:
        """Every server's coordinator-protocol address, dead or alive (as a user would list them)."""
        return [s.address for s in self.servers.values() if s.ports]

    @property
    def broker_list(self) -> str:
        """The Kafka bootstrap string of every live broker, embedded or alone."""
        addresses = [s.broker for s in self.servers.values() if s.alive and "broker_port" in s.ports]
        addresses += [b.bootstrap for b in self.brokers if b.alive]
        return ",".join(addresses)

    # -- brokers ------------------------------------------------------------------------------------

    def add_broker(self, broker_id: int, extra: Sequence[str] = ()) -> BrokerProcess:
        broker = BrokerProcess(broker_id, self.zookeeper, self.directory / f"broker-{broker_id}",
                               (*command_line(self.zk_security), *extra))
        self.brokers.append(broker)
        broker.start()
        return broker

    # -- topics and records ---------------------------------------------------------------------------

    def create_topic(self, topic: str, partitions: int, leaders_ready: bool = True) -> dict[int, tuple[int, ...]]:
        """Create ``topic`` over the registered brokers; wait until each partition has a leader."""
        from zkcoord.admin import topics as topic_admin

        assignment = topic_admin.create_topic(self.zk, topic, partitions)
        if leaders_ready:
            self.wait_led(topic, partitions)
        return assignment

    def add_partitions(self, topic: str, total: int) -> dict[int, tuple[int, ...]]:
        from zkcoord.admin import topics as topic_admin

        before = len(topic_admin.read_topic(self.zk, topic)[0].partitions)
        added = topic_admin.add_partitions(self.zk, topic, total)
        self.wait_led(topic, total, first=before)
        if self._producer is not None:  # a fresh producer, so its metadata knows the new partitions
            self._producer.flush(10)
            self._producer = None
        return added

    def wait_led(self, topic: str, partitions: int, first: int = 0, timeout: float = 20.0) -> None:
        """Until partitions ``first`` to ``partitions - 1`` of ``topic`` have
        leaders in ZooKeeper and, where the brokers take anyone, every live broker
        knows them: a broker learns a topic from its ZooKeeper watch a moment
        after the nodes are written and answers UNKNOWN_TOPIC_OR_PARTITION
        until then, which a client retries but a test's raw request does not."""
        from zkcoord.zk import layout

        wait_until(lambda: all(self.zk.exists(layout.partition_state_path(topic, p))
                               for p in range(first, partitions)),
                   timeout, message=f"{topic} partitions to get leaders")
        if self._brokers_take_anyone:
            wait_until(lambda: all(self._broker_knows(address, topic, range(first, partitions))
                                   for address in self.broker_list.split(",") if address),
                       timeout, message=f"every broker to know {topic}'s partitions")

    @property
    def _brokers_take_anyone(self) -> bool:
        """Whether a client without TLS or a login may ask the brokers Metadata of any topic."""
        options = set(self.server_args).union(*(broker.broker_args for broker in self.brokers))
        return not self.client_settings and not {"--authentication-required", "--sasl-mechanism",
                                                 "--authorizer"} & options

    @staticmethod
    def _broker_knows(address: str, topic: str, partitions: Iterable[int]) -> bool:
        """Whether the broker at ``address`` answers Metadata with a leader for each of ``partitions``."""
        from zkcoord.errors import ZkcoordError
        from zkcoord.fetch.connection import BrokerConnection

        try:
            with BrokerConnection(address, timeout_s=5.0) as connection:
                known = connection.cluster([topic]).topics.get(topic)
        except ZkcoordError:
            return False
        return known is not None and all(known.leaders.get(p) is not None for p in partitions)

    def produce(self, topic: str, records, timeout: float = 30.0) -> int:
        """Send (partition, key, value) records with acks=all; wait until every
        one is acknowledged. Returns how many were sent."""
        from confluent_kafka import Producer

        if self._producer is None:
            self._producer = Producer({"bootstrap.servers": self.broker_list, "linger.ms": 5,
                                       "acks": "all", "log_level": 3, **self.client_settings})
        return send_acknowledged(self._producer, topic, records, timeout)

    # -- consumers ----------------------------------------------------------------------------------

    def add_consumer(
        self, group: str, topics: Sequence[str] = (), pattern: Optional[str] = None,
        consumer_id: Optional[str] = None, session_timeout_ms: int = 4000, extra: Sequence[str] = (),
        bootstrap: Optional[Sequence[str]] = None, start: bool = True, netns=None,
        kafka_brokers: Optional[str] = None,
    ) -> ConsumerProcess:
        """A `zkcoord consume` process; with ``netns`` (a
        :class:`~zkcoord.testing.netns.NetworkNamespace`), inside that namespace;
        with ``kafka_brokers``, a stock Kafka client joining through those brokers' group APIs."""
        index = len(self.consumers) + 1
        consumer = ConsumerProcess(f"consumer {index}", self.directory / f"{ConsumerProcess.DIRECTORY_PREFIX}{index}",
                                   [], group, netns)
        member = (["--kafka-brokers", kafka_brokers] if kafka_brokers
                  else ["--bootstrap", ",".join(bootstrap or self.bootstrap)])
        args = ["consume", *member, "--group", group,
                "--session-timeout-ms", str(session_timeout_ms), "--output", str(consumer.output_path),
                "--status", str(consumer.status_path), "--events", str(consumer.events_path)]
        for topic in topics:
            args += ["--topic", topic]
        if pattern:
            args += ["--pattern", pattern]
        if consumer_id:
            args += ["--consumer-id", consumer_id]
        consumer.command = zkcoord_command(*args, *extra)
        consumer.stock = kafka_brokers is not None
        if netns is not None:
            consumer.command = netns.command(*consumer.command)
        self.consumers.append(consumer)
        if start:
            consumer.start()
        return consumer

    # -- everything -----------------------------------------------------------------------------------

    def processes(self) -> list[ManagedProcess]:
        return [*self.servers.values(), *self.brokers, *self.consumers]

    def close(self) -> None:
        if self._producer is not None:
            self._producer.flush(5)
            self._producer = None
        for process in self.consumers:
            process.kill()
        for process in [*self.servers.values(), *self.brokers]:
            process.terminate(timeout=10)
        if self._zk is not None:
            try:
                self._zk.stop()
                self._zk.close()
            except Exception:  # noqa: BLE001 - closing down; ZooKeeper may already be gone
                pass
            self._zk = None

    def log_tails(self) -> dict[str, str]:
        return {p.name: p.log_tail() for p in self.processes()}

    def __enter__(self) -> "LocalCluster":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


@contextlib.contextmanager
def cluster_in_chroot(connect: str, directory: Path, prefix: str = "t",
                      cluster_type: type[LocalCluster] = LocalCluster,
                      server_args: Sequence[str] = ()) -> Iterator[LocalCluster]:
    """A cluster of ``cluster_type`` (its servers started with
    ``server_args``) in a fresh chroot of the ensemble at ``connect``, as a
    deployment sharing ZooKeeper would run; the cluster closes (its
    processes stop) before the chroot is deleted."""
    with fresh_chroot(connect, prefix) as (chrooted, _client), \
            cluster_type(chrooted, directory, server_args) as cluster:
        yield cluster


__all__ = ["BrokerProcess", "ClusterError", "ConsumerProcess", "LocalCluster", "ServerProcess", "cluster_in_chroot",
           "read_json_lines", "send_acknowledged"]
