"""Real Apache Kafka clusters on 127.0.0.1, started as processes the way the
rest of the harness starts ZooKeeper, servers and brokers.

Two modes, each on the release line that has it (jars cached by
:mod:`~zkcoord.testing.kafka_jars`):

- ``zookeeper``, Kafka 3.9: brokers registered on our ensemble under the
  chroot zkcoord is given, so Kafka's ``/brokers`` and zkcoord's nodes are one
  tree (start it in :func:`~zkcoord.testing.zookeeper.fresh_chroot`);
- ``kraft``, Kafka 4: every node a combined broker and controller, its
  storage formatted once (Kafka's StorageTool) with the cluster's id.

Each broker is a :class:`KafkaBroker`, a :class:`ManagedProcess` running
``java -cp <jars> kafka.Kafka server.properties``, so kill -9, SIGSTOP and
SIGCONT, SIGTERM (Kafka's controlled shutdown) and log tails work as for
every other process, and a failing test shows its logs. A broker keeps its
node id, ports and log directory across restarts. Ports are picked free and
the start is retried on new ones if a broker could not bind them; a broker is
ready when it answers Metadata and is among the live brokers as the cluster
records them (ZooKeeper's /brokers/ids, or the controllers' metadata).
Heap and threads are sized for a 2-core machine.
"""

from __future__ import annotations

import json
import logging
import os
import re
import socket
import subprocess
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Mapping, Optional, Sequence

from confluent_kafka import Consumer, ElectionType, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ClusterMetadata, NewPartitions, NewTopic

from zkcoord.testing import kafka_jars
from zkcoord.testing.cluster import send_acknowledged
from zkcoord.testing.process import ClusterError, ManagedProcess, ProcessExited
from zkcoord.testing.waiting import wait_until
from zkcoord.zk import client as zk_client
from zkcoord.zk import layout
from zkcoord.zk.layout.kafka import kafka_uuid
from zkcoord.zk.nodes import read_topic

ZOOKEEPER_MODE = "zookeeper"
KRAFT_MODE = "kraft"
RELEASE_LINE = {ZOOKEEPER_MODE: "3.9", KRAFT_MODE: "4"}
# Where ZooKeeper mode's controller registers itself, under the brokers' chroot.
KAFKA_CONTROLLER_PATH = "/controller"
# Kafka's own quorum tool (kafka-metadata-quorum.sh): "describe --status" names the active controller.
QUORUM_TOOL = "org.apache.kafka.tools.MetadataQuorumCommand"
QUORUM_LEADER = re.compile(r"^LeaderId:\s*(\d+)\s*$", re.MULTILINE)
# A ZooKeeper-mode release older than every version zkcoord's client speaks:
# for the tests that a Kafka too old is refused with a clear error.
TOO_OLD_LINE = "0.10"

# A small heap and a serial collector: three brokers, ZooKeeper and the tests
# share two cores. Exit on OOM rather than limp on.
JVM_OPTIONS = ("-Xms64m", "-XX:+UseSerialGC", "-XX:+ExitOnOutOfMemoryError", "-Djava.awt.headless=true")
# The client compiler only: a Kafka node is ready in about half the time and
# half the CPU (on two loaded cores: 8.6 s and 7.5 s of CPU for three KRaft
# nodes, against 15.1 s and 12.6 s), which the tests start by the dozen. Its
# code runs slower once warm, so a benchmark of a broker's steady CPU asks
# for the full compiler (KafkaSettings.full_jit).
QUICK_START_JIT = ("-XX:TieredStopAtLevel=1",)
BIND_FAILURE = "Address already in use"
PORT_ATTEMPTS = 3
# KRaft's controller refuses an operation of more than 10,000 records
# (POLICY_VIOLATION, "excessively large batch operation"), one per partition:
# bigger topics are created at this size and grown in steps of it.
PARTITIONS_PER_OPERATION = 2000
# librdkafka's own log lines go through this logger (pytest shows them for a failing test).
CLIENT_LOG = logging.getLogger(__name__)

# Both logging configurations are written and named on the command line:
# Kafka 3.9 logs through log4j 1 (reload4j), Kafka 4 through log4j 2, and each
# ignores the other's. Everything goes to standard output, the process log.
LOG4J = """log4j.rootLogger=INFO, out
log4j.appender.out=org.apache.log4j.ConsoleAppender
log4j.appender.out.layout=org.apache.log4j.PatternLayout
log4j.appender.out.layout.ConversionPattern=[%d] %p %m (%c)%n
log4j.logger.kafka.request.logger=WARN
"""
LOG4J2 = """appender.out.type = Console
appender.out.name = out
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.out.ref = out
logger.request.name = kafka.request.logger
logger.request.level = WARN
"""


# librdkafka refuses a socket.timeout.ms above this.
SOCKET_TIMEOUT_MAX_MS = 300_000


@dataclass(frozen=True)
class KafkaSettings:
    """How a cluster is sized and tuned; ``properties`` override or add
    server.properties entries for every node."""

    mode: str
    brokers: int = 3
    min_insync_replicas: int = 2
    # How long a silent broker stays in the cluster: its ZooKeeper session
    # (ZooKeeper mode; our ensembles grant at most 5 s) or its registration
    # with the controllers (KRaft). Short, so that a kill -9 moves leaders soon.
    session_timeout_ms: int = 4000
    heap_mb: int = 384
    properties: Mapping[str, str] = field(default_factory=dict)
    release_line: Optional[str] = None  # None: the mode's (RELEASE_LINE); TOO_OLD_LINE in ZooKeeper mode
    full_jit: bool = False  # the JVM's optimising compiler too: for benchmarks, not for a quick start

    @property
    def jvm_options(self) -> tuple[str, ...]:
        """The nodes' JVM options beside their heap."""
        return JVM_OPTIONS if self.full_jit else JVM_OPTIONS + QUICK_START_JIT

    def __post_init__(self) -> None:
        if self.mode not in RELEASE_LINE:
            raise ClusterError(f"Kafka mode must be one of {sorted(RELEASE_LINE)}, not {self.mode!r}")
        if self.release_line not in (None, RELEASE_LINE[self.mode]) and \
                (self.mode, self.release_line) != (ZOOKEEPER_MODE, TOO_OLD_LINE):
            raise ClusterError(f"Kafka {self.release_line} does not run in {self.mode} mode here")
        if self.brokers < 1:
            raise ClusterError(f"a Kafka cluster needs a broker, not {self.brokers}")
        if not 1 <= self.min_insync_replicas <= self.brokers:
            raise ClusterError(f"min.insync.replicas {self.min_insync_replicas} must be 1 to {self.brokers}")

    @property
    def replication_factor(self) -> int:
        """Every topic's by default, the internal ones' too: 3, or every broker of a smaller cluster."""
        return min(3, self.brokers)


@dataclass(frozen=True)
class NodePorts:
    port: int  # the PLAINTEXT listener clients and other brokers use
    controller_port: Optional[int] = None  # KRaft's CONTROLLER listener


def server_properties(settings: KafkaSettings, node_id: int, log_dir: Path, ports: NodePorts,
                      voters: Mapping[int, NodePorts] = {}, zookeeper: Optional[str] = None) -> dict[str, str]:
    """One node's server.properties. ``zookeeper`` (ZooKeeper mode) is the
    connect string with the chroot; ``voters`` (KRaft) every controller's ports."""
    replication = settings.replication_factor
    listener = f"PLAINTEXT://127.0.0.1:{ports.port}"
    props = {
        "log.dirs": str(log_dir),
        "advertised.listeners": listener,
        "auto.create.topics.enable": "false",
        "group.initial.rebalance.delay.ms": "0",
        "min.insync.replicas": str(settings.min_insync_replicas),
        "default.replication.factor": str(replication),
        "offsets.topic.replication.factor": str(replication),
        "offsets.topic.num.partitions": "5",
        "transaction.state.log.replication.factor": str(replication),
        "transaction.state.log.min.isr": str(min(settings.min_insync_replicas, replication)),
        "transaction.state.log.num.partitions": "5",
        # Few threads and small buffers: the defaults suit a dedicated machine.
        "num.network.threads": "2",
        "num.io.threads": "2",
        "num.replica.fetchers": "1",
        "background.threads": "2",
        "num.recovery.threads.per.data.dir": "1",
        "log.cleaner.threads": "1",
        "log.cleaner.dedupe.buffer.size": str(16 * 1024 * 1024),
        # A follower that stops fetching (paused) leaves the ISR within seconds.
        "replica.lag.time.max.ms": "10000",
    }
    if settings.mode == ZOOKEEPER_MODE:
        if zookeeper is None:
            raise ClusterError("ZooKeeper mode needs the ZooKeeper connect string (with its chroot)")
        props.update({
            "broker.id": str(node_id),
            "listeners": listener,
            "zookeeper.connect": zookeeper,
            "zookeeper.session.timeout.ms": str(settings.session_timeout_ms),
        })
    else:
        props.update({
            "process.roles": "broker,controller",
            "node.id": str(node_id),
            "listeners": f"{listener},CONTROLLER://127.0.0.1:{ports.controller_port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "controller.quorum.voters": ",".join(f"{n}@127.0.0.1:{p.controller_port}"
                                                 for n, p in sorted(voters.items())),
            "broker.session.timeout.ms": str(settings.session_timeout_ms),
            "broker.heartbeat.interval.ms": str(max(250, settings.session_timeout_ms // 4)),
        })
    props.update(settings.properties)
    return props


@dataclass(frozen=True)
class Replicas:
    """Where a partition lives: its leader (-1: none), replicas (preferred
    first) and in-sync replicas."""

    leader: int
    replicas: tuple[int, ...]
    isr: frozenset[int]


def free_port() -> int:
    """A port free now (the kernel's pick); whoever binds it later checks that it could."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def quiet_client_config(bootstrap: str) -> dict:
    """librdkafka settings for the harness's own clients: its logs go to
    CLIENT_LOG instead of stderr (a killed broker makes every client
    complain), and a request a paused broker sits on fails in 10 s, not 60."""
    return {"bootstrap.servers": bootstrap, "logger": CLIENT_LOG, "socket.timeout.ms": 10000}


class KafkaBroker(ManagedProcess):
    """One Kafka node (a broker; in KRaft mode a controller too) in its own
    directory: ``server.properties``, the logging configurations, ``data/``
    (its log directory, kept across restarts) and ``kafka.log``."""

    def __init__(self, node_id: int, directory: Path, java: str, jars: Iterable[Path], heap_mb: int,
                 jvm_options: Sequence[str] = JVM_OPTIONS):
        directory = Path(directory)
        super().__init__(f"kafka {node_id}", directory, [
            java, f"-Xmx{heap_mb}m", *jvm_options,
            f"-Dlog4j.configuration=file:{directory / 'log4j.properties'}",
            f"-Dlog4j2.configurationFile={directory / 'log4j2.properties'}",
            "-cp", os.pathsep.join(str(j) for j in jars), "kafka.Kafka", str(directory / "server.properties"),
        ], log_name="kafka.log")
        self.node_id = node_id
        self.node_ports: Optional[NodePorts] = None
        self._log_offset = 0

    @property
    def log_dir(self) -> Path:
        return self.directory / "data"

    @property
    def config_path(self) -> Path:
        return self.directory / "server.properties"

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.node_ports.port}"

    def configure(self, ports: NodePorts, properties: Mapping[str, str]) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        self.node_ports = ports
        self.config_path.write_text("".join(f"{k}={v}\n" for k, v in properties.items()))
        (self.directory / "log4j.properties").write_text(LOG4J)
        (self.directory / "log4j2.properties").write_text(LOG4J2)

    def start(self, timeout: float = 60.0) -> "KafkaBroker":
        """Start the JVM (again: same ports and log directory) without waiting
        for it to serve; KafkaCluster.restart waits."""
        try:
            self._log_offset = self.log_path.stat().st_size
        except OSError:
            self._log_offset = 0
        super().start(timeout)
        return self

    def could_not_bind(self) -> bool:
        """Whether this run of it exited because a port of its was taken."""
        try:
            with open(self.log_path, "rb") as log:
                log.seek(self._log_offset)
                return not self.alive and BIND_FAILURE.encode() in log.read()
        except OSError:
            return False

    @property
    def reachable(self) -> bool:
        return self.alive and not self.paused

    def metadata(self, topic: Optional[str] = None, timeout: float = 2.0) -> ClusterMetadata:
        """Metadata asked by a new client bootstrapped on this broker alone.
        Any answer means this broker answered Metadata (the client learns of
        the others only from it); the answer itself may come from any broker
        the client met since, as librdkafka picks one at random."""
        return AdminClient(quiet_client_config(self.address)).list_topics(topic, timeout=timeout)

    def stop(self, timeout: float = 60.0) -> Optional[int]:
        """A clean stop: SIGTERM makes Kafka shut down in a controlled way
        (leadership handed over first); kill -9 only past ``timeout``."""
        return self.terminate(timeout)

    def rss_bytes(self) -> int:
        """Its resident memory now, from /proc."""
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        raise ClusterError(f"{self.name} has no resident set (exited?)")


class KafkaCluster:
    """``settings.brokers`` Kafka nodes under ``directory``, ids 1 to N.

    ``zookeeper`` is required in ZooKeeper mode: the connect string with the
    chroot the brokers register under (zkcoord's chroot, to share /brokers).
    Use as a context manager, or call close(): every node is killed then.
    """

    def __init__(self, directory: Path, settings: KafkaSettings, zookeeper: Optional[str] = None):
        if settings.mode == ZOOKEEPER_MODE and not zookeeper:
            raise ClusterError("a ZooKeeper-mode Kafka cluster needs a ZooKeeper connect string with a chroot")
        self.directory = Path(directory)
        self.settings = settings
        self.zookeeper = zookeeper
        self.version, jars = kafka_jars.classpath(settings.release_line or RELEASE_LINE[settings.mode])
        self.java = kafka_jars.java()
        self.jars = jars
        self.cluster_id = kafka_uuid(uuid.uuid4().bytes)  # KRaft's; ZooKeeper mode has Kafka make its own
        self.brokers: dict[int, KafkaBroker] = {
            n: KafkaBroker(n, self.directory / f"kafka-{n}", self.java, jars, settings.heap_mb, settings.jvm_options)
            for n in range(1, settings.brokers + 1)}
        self._zk = None

    @property
    def mode(self) -> str:
        return self.settings.mode

    # -- life -------------------------------------------------------------------------------------

    def start(self, timeout: float = 120.0) -> "KafkaCluster":
        """Start every node and wait until each serves and sees all the others."""
        for _attempt in range(PORT_ATTEMPTS):
            self._configure_all()
            if self.mode == KRAFT_MODE:
                self._format_storage()
            for broker in self.brokers.values():
                broker.start()
            try:
                for node_id in self.brokers:
                    self.wait_ready(node_id, timeout)
            except ProcessExited:
                if not any(b.could_not_bind() for b in self.brokers.values()):
                    raise
                for broker in self.brokers.values():  # the voters name every port: all start again
                    broker.kill()
                continue
            self.wait_for_brokers(set(self.brokers), timeout)
            return self
        raise ClusterError(f"Kafka nodes could not bind their ports in {PORT_ATTEMPTS} attempts")

    def _configure_all(self) -> None:
        ports = {n: NodePorts(free_port(), free_port() if self.mode == KRAFT_MODE else None) for n in self.brokers}
        for n, broker in self.brokers.items():
            broker.configure(ports[n], server_properties(self.settings, n, broker.log_dir, ports[n],
                                                         voters=ports, zookeeper=self.zookeeper))

    def _format_storage(self) -> None:
        """KRaft's first start: each node's log directory formatted with the
        cluster id (Kafka's StorageTool, as kafka-storage.sh runs it); the
        nodes format at once. A formatted directory is left as it is."""
        formats = {n: subprocess.Popen(
            [self.java, "-Xmx128m", *JVM_OPTIONS, *QUICK_START_JIT,
             f"-Dlog4j2.configurationFile={b.directory / 'log4j2.properties'}",
             "-cp", os.pathsep.join(str(j) for j in self.jars), "kafka.tools.StorageTool", "format",
             "--ignore-formatted", "--cluster-id", self.cluster_id, "--config", str(b.config_path)],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for n, b in self.brokers.items()}
        for n, process in formats.items():
            output, _ = process.communicate(timeout=120)
            if process.returncode != 0:
                raise ClusterError(f"formatting kafka {n}'s storage failed:\n{output}")

    def close(self) -> None:
        """kill -9 every node: the tests are over, and a controlled shutdown
        of the last brokers waits for leaders that have nowhere to go."""
        for broker in self.brokers.values():
            broker.kill()
        if self._zk is not None:
            self._zk.stop()
            self._zk.close()
            self._zk = None

    def __enter__(self) -> "KafkaCluster":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- the brokers --------------------------------------------------------------------------------

    @property
    def bootstrap(self) -> str:
        """Every node's address, dead or alive, as a client would be configured."""
        return ",".join(b.address for b in self.brokers.values() if b.node_ports)

    def new_admin(self, operation_timeout: float = 0.0) -> AdminClient:
        """A new admin client on the reachable brokers (see client_config).
        Keep it referenced until its futures are done: a client collected
        as garbage fails them (_DESTROY). ``operation_timeout``: how long
        a broker may hold the answer to its requests (CreateTopics waits
        for the new partitions' leaders), on top of the client's socket timeout."""
        config = self.client_config()
        config["socket.timeout.ms"] = min(config["socket.timeout.ms"] + int(operation_timeout * 1000),
                                          SOCKET_TIMEOUT_MAX_MS)
        return AdminClient(config)

    def client_config(self) -> dict:
        """Settings for a new client of the harness's, bootstrapped on the
        brokers that are running and not paused. Each harness operation uses
        a new client: a long-lived one keeps sending to the controller or
        broker it knew (ZooKeeper mode answers NOT_CONTROLLER once the
        controller moved), and a paused broker holds its requests."""
        reachable = ",".join(b.address for b in self.brokers.values() if b.node_ports and b.reachable)
        if not reachable:
            raise ClusterError("no Kafka broker is running and not paused")
        return quiet_client_config(reachable)

    @property
    def zk(self):
        """ZooKeeper-mode clusters: a kazoo client on the brokers' chroot, started on first use."""
        if self._zk is None:
            if self.zookeeper is None:
                raise ClusterError("a KRaft cluster keeps nothing in ZooKeeper")
            self._zk = zk_client.open_client(self.zookeeper)
            zk_client.start(self._zk, timeout=30)
        return self._zk

    def metadata(self, topic: Optional[str] = None, timeout: float = 2.0) -> ClusterMetadata:
        """The cluster's metadata (of every topic, or of ``topic``) from a
        reachable broker. Not through one long-lived client: librdkafka may
        keep asking a paused broker, which never answers."""
        errors = []
        for broker in self.brokers.values():
            if broker.reachable:
                try:
                    return broker.metadata(topic, timeout)
                except (KafkaException, ClusterError) as exc:
                    errors.append(f"{broker.name}: {exc}")
        raise ClusterError(f"no Kafka broker answered Metadata: {errors or 'none is running'}")

    def live_brokers(self) -> set[int]:
        """The live brokers where the cluster keeps them: registered in
        ZooKeeper (ZooKeeper mode), or unfenced in the metadata the
        controllers publish (KRaft). Not from a ZooKeeper-mode broker's
        Metadata: one just resumed answers from its cache of before the pause."""
        if self.mode == ZOOKEEPER_MODE:
            return {int(child) for child in self.zk.get_children(layout.BROKER_IDS)}
        return set(self.metadata().brokers)

    def wait_ready(self, node_id: int, timeout: float = 60.0) -> KafkaBroker:
        """Until the node answers Metadata and is among the live brokers."""
        broker = self.brokers[node_id]

        def serving() -> bool:
            if not broker.alive:
                raise ProcessExited(f"{broker.name} exited with {broker.returncode}:\n{broker.log_tail()}")
            broker.metadata()
            return node_id in self.live_brokers()

        wait_until(serving, timeout, interval=0.2, message=f"{broker.name} to serve", fail_on=(ProcessExited,))
        return broker

    def wait_for_brokers(self, ids: set[int], timeout: float = 60.0) -> None:
        """Until the cluster's live brokers are exactly ``ids``."""
        wait_until(lambda: self.live_brokers() == ids, timeout, interval=0.2,
                   message=f"Kafka brokers {sorted(ids)} to be the live ones")

    def pause_past_session(self, node_id: int, timeout: float = 60.0) -> None:
        """SIGSTOP a node and wait until the cluster counts it gone (its
        session with ZooKeeper or the controllers expired); it keeps its sockets."""
        remaining = self.live_brokers() - {node_id}
        self.brokers[node_id].pause()
        self.wait_for_brokers(remaining, timeout)

    def resume(self, node_id: int, timeout: float = 60.0) -> KafkaBroker:
        """SIGCONT a paused node and wait until it serves again."""
        self.brokers[node_id].resume()
        return self.wait_ready(node_id, timeout)

    def restart(self, node_id: int, timeout: float = 60.0) -> KafkaBroker:
        """Start a stopped or killed node again: same id, ports and log directory."""
        self.brokers[node_id].start()
        return self.wait_ready(node_id, timeout)

    def log_tails(self) -> dict[str, str]:
        return {b.name: b.log_tail() for b in self.brokers.values()}

    def controller(self, timeout: float = 60.0) -> int:
        """The node id of the active controller: the broker registered at
        /controller (ZooKeeper mode), or the leader of the controllers'
        quorum as Kafka's quorum tool describes it (KRaft; a JVM started
        for the question, a few seconds). ClusterError if there is none."""
        if self.mode == ZOOKEEPER_MODE:
            try:
                return int(json.loads(self.zk.get(KAFKA_CONTROLLER_PATH)[0])["brokerid"])
            except Exception as exc:  # noqa: BLE001 - kazoo's NoNodeError, a torn or unexpected node
                raise ClusterError(f"no Kafka controller registered at {KAFKA_CONTROLLER_PATH}: {exc!r}") from None
        bootstrap = self.client_config()["bootstrap.servers"]
        done = subprocess.run(
            [self.java, "-Xmx128m", *JVM_OPTIONS, *QUICK_START_JIT,
             f"-Dlog4j2.configurationFile={self.brokers[1].directory / 'log4j2.properties'}", "-cp", os.pathsep.join(str(j) for j in self.jars), QUORUM_TOOL, "--bootstrap-server", bootstrap,
             "describe", "--status"], capture_output=True, text=True, timeout=timeout)
        found = QUORUM_LEADER.search(done.stdout)
        if done.returncode != 0 or found is None:
            raise ClusterError(f"Kafka's quorum tool named no controller ({done.returncode}): "
                               f"{(done.stdout + done.stderr)[-2000:]}")
        return int(found.group(1))

    # -- topics and records ---------------------------------------------------------------------------

    def create_topic(self, topic: str, partitions: int = 1, replication_factor: Optional[int] = None,
                     config: Optional[Mapping[str, str]] = None, timeout: float = 30.0) -> None:
        """Create ``topic`` through Kafka's admin API (CreateTopics; past
        PARTITIONS_PER_OPERATION partitions, CreatePartitions too) and wait
        until every partition has a leader."""
        replication = replication_factor or self.settings.replication_factor
        admin = self.new_admin(operation_timeout=timeout)
        first = min(partitions, PARTITIONS_PER_OPERATION)
        futures = admin.create_topics([NewTopic(topic, first, replication, config=dict(config or {}))],
                                           operation_timeout=timeout, request_timeout=timeout)
        futures[topic].result(timeout)
        for total in range(first + PARTITIONS_PER_OPERATION, partitions + PARTITIONS_PER_OPERATION,
                           PARTITIONS_PER_OPERATION):
            self.add_partitions(topic, min(total, partitions), timeout)
        self.wait_led(topic, range(partitions), timeout)

    def add_partitions(self, topic: str, total: int, timeout: float = 30.0) -> None:
        """Grow ``topic`` to ``total`` partitions (CreatePartitions); wait until each has a leader."""
        admin = self.new_admin(operation_timeout=timeout)
        admin.create_partitions([NewPartitions(topic, total)], operation_timeout=timeout,
                                request_timeout=timeout)[topic].result(timeout)
        self.wait_led(topic, range(total), timeout)

    def partition(self, topic: str, partition: int) -> Replicas:
        """Where a partition lives, as the cluster records it: in ZooKeeper
        (ZooKeeper mode, read with zkcoord's codecs), or in the metadata the
        controllers publish (KRaft)."""
        if self.mode == ZOOKEEPER_MODE:
            assignment = self._assignment(topic)
            state = layout.decode_partition_state(self.zk.get(layout.partition_state_path(topic, partition))[0])
            return Replicas(state.leader, assignment.partitions[partition], frozenset(state.isr))
        return self.replicas_of(topic)[partition]

    def _assignment(self, topic: str) -> layout.TopicAssignment:
        """Where ZooKeeper says ``topic``'s partitions live (ZooKeeper mode)."""
        node = read_topic(self.zk, topic)
        if node is None:
            raise ClusterError(f"topic {topic} is not in ZooKeeper")
        return node.assignment

    def replicas_of(self, topic: str) -> dict[int, Replicas]:
        """Where every partition of ``topic`` lives, in one look at the
        cluster's records (as :meth:`partition` reads them)."""
        if self.mode == ZOOKEEPER_MODE:
            return {p: self.partition(topic, p) for p in self._assignment(topic).partitions}
        answer = self.metadata(topic).topics[topic]
        if answer.error is not None:
            raise ClusterError(f"topic {topic}: {answer.error}")
        return {p: Replicas(found.leader, tuple(found.replicas), frozenset(found.isrs))
                for p, found in answer.partitions.items()}

    def leader_of(self, topic: str, partition: int) -> int:
        """The partition's leader now (-1 if it has none)."""
        return self.partition(topic, partition).leader

    def wait_led(self, topic: str, partitions: Iterable[int], timeout: float = 30.0) -> None:
        wanted = list(partitions)

        def led() -> bool:
            if self.mode == ZOOKEEPER_MODE:
                return all(self.leader_of(topic, p) >= 0 for p in wanted)
            known = self.metadata(topic).topics[topic].partitions  # one Metadata for them all
            return all(p in known and known[p].leader >= 0 for p in wanted)

        wait_until(led, timeout, interval=0.2, message=f"{topic}'s {len(wanted)} partitions to have leaders")

    def wait_for_leader(self, topic: str, partition: int, not_on: Iterable[int] = (),
                        timeout: float = 30.0) -> int:
        """The partition's leader, once it has one that is not one of ``not_on``."""
        excluded = set(not_on)
        return wait_until(lambda: (lambda leader: leader if leader >= 0 and leader not in excluded else None)(
            self.leader_of(topic, partition)), timeout, interval=0.2,
            message=f"{topic}-{partition} to have a leader other than {sorted(excluded)}")

    def wait_for_isr(self, topic: str, partition: int, isr: Iterable[int], timeout: float = 60.0) -> None:
        """Until the partition's in-sync replicas are exactly ``isr``."""
        wanted = set(isr)
        wait_until(lambda: self.partition(topic, partition).isr == wanted, timeout, interval=0.2,
                   message=f"{topic}-{partition}'s ISR to be {sorted(wanted)}")

    def elect_preferred_leader(self, topic: str, partition: int, timeout: float = 30.0) -> int:
        """Hand the partition's leadership back to its preferred (first)
        replica through the admin API (ElectLeaders); returns that replica
        once it leads."""
        preferred = self.partition(topic, partition).replicas[0]

        def elected() -> bool:
            if self.leader_of(topic, partition) == preferred:
                return True
            # No timeout arguments: confluent-kafka 2.16's elect_leaders fails
            # on either (SystemError from its argument parsing); the future has one.
            admin = self.new_admin()
            outcome = admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition(topic, partition)]).result(timeout)
            # Asked again until it leads: a broker may still name a controller
            # that moved (NOT_CONTROLLER), and "not needed" is no error.
            errors = [e for e in outcome.values() if e is not None]
            if errors:
                raise ClusterError(f"electing {preferred} for {topic}-{partition}: {errors[0]}")
            return self.leader_of(topic, partition) == preferred

        wait_until(elected, timeout, interval=0.5, message=f"broker {preferred} to lead {topic}-{partition}")
        return preferred

    def produce(self, topic: str, records, timeout: float = 30.0) -> int:
        """Send (partition, key, value) records with acks=all through a new
        producer and wait until every one is acknowledged (see send_acknowledged)."""
        # Not idempotent: with a KRaft node paused, Kafka 4 kept refusing a new
        # producer id (COORDINATOR_LOAD_IN_PROGRESS) for over 30 s. One request
        # in flight keeps the records in order across retries.
        producer = Producer({**self.client_config(), "acks": "all", "linger.ms": 5,
                             "max.in.flight.requests.per.connection": 1})
        return send_acknowledged(producer, topic, records, timeout)

    def read(self, topic: str, partition: int, count: int, timeout: float = 30.0) -> list[tuple]:
        """The first ``count`` records of a partition as (offset, key, value),
        read by a confluent_kafka consumer from the leader (committed records only:
        nothing above the high watermark is returned to a consumer)."""
        consumer = Consumer({**self.client_config(), "group.id": f"harness-{uuid.uuid4().hex[:8]}",
                             "enable.auto.commit": False})
        records: list[tuple] = []
        try:
            consumer.assign([TopicPartition(topic, partition, 0)])

            def have_all() -> bool:
                for message in consumer.consume(count - len(records), timeout=0.5):
                    if message.error() is not None:
                        raise ClusterError(f"reading {topic}-{partition}: {message.error()}")
                    records.append((message.offset(), message.key(), message.value()))
                return len(records) >= count

            wait_until(have_all, timeout, interval=0, message=f"{count} records from {topic}-{partition}",
                       fail_on=(ClusterError,))
        finally:
            consumer.close()
        return records


__all__ = ["KRAFT_MODE", "KafkaBroker", "KafkaCluster", "KafkaSettings", "Replicas", "ZOOKEEPER_MODE",
           "server_properties"]
