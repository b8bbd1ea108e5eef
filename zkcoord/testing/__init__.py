"""The one harness for real processes, in the manner of ``kazoo.testing``:
the demo, the drill, the tests and the benchmarks start and break processes
only through this package.

- :mod:`~zkcoord.testing.process`: a managed process (readiness by port file,
  kill -9, SIGSTOP/SIGCONT, SIGTERM, log tail, CPU seconds), and a command
  started as a shell's background job would be (SIGINT ignored);
- :mod:`~zkcoord.testing.cluster`: servers, brokers and consumers as processes;
- :mod:`~zkcoord.testing.zookeeper`: ensembles and fresh chroots;
- :mod:`~zkcoord.testing.kafka`: real Apache Kafka clusters as processes (Kafka 3.9 in
  ZooKeeper mode sharing zkcoord's chroot, Kafka 4 in KRaft mode);
- :mod:`~zkcoord.testing.kafka_jars`: Kafka's releases, fetched from Maven Central and cached;
- :mod:`~zkcoord.testing.kafka_tools`: Kafka's own command-line tools, run from those jars;
- :mod:`~zkcoord.testing.verifiable_events`: the checks Kafka's system tests make on the event
  streams of its verifiable producer and consumer;
- :mod:`~zkcoord.testing.java_members`: Kafka's own Java ``KafkaConsumer`` as group members,
  N to a JVM, reporting every assignment, record, commit and error;
- :mod:`~zkcoord.testing.spark`: a Spark standalone cluster (master and workers) as processes;
- :mod:`~zkcoord.testing.faults`: TCP proxies that drop or cut connections, session expiry;
- :mod:`~zkcoord.testing.checks`: the invariants seen from outside;
- :mod:`~zkcoord.testing.console`: the web console as a process, and headless Chromium to look at it;
- :mod:`~zkcoord.testing.waiting`: ``wait_until``, the one way to wait.

Layer 8 of the map in docs/DESIGN.md: it may import every package below it
(it starts servers, brokers and consumers, and reads ZooKeeper through
``zk``); the drill, the demo, the console's tests and the command line
import it.
"""

from zkcoord.testing.checks import OwnershipViolation, group_is_whole, partitions_of
from zkcoord.testing.cluster import (BrokerProcess, ConsumerProcess, LocalCluster, ServerProcess,
                                     cluster_in_chroot, read_json_lines)
from zkcoord.testing.faults import CpuLoad, ProxiedEnsemble, TcpProxy, expire_session
from zkcoord.testing.kafka import KRAFT_MODE, ZOOKEEPER_MODE, KafkaBroker, KafkaCluster, KafkaSettings
from zkcoord.testing.kafka_jars import KafkaNotInstalled
from zkcoord.testing.process import (ClusterError, ManagedProcess, as_background_job, cpu_seconds, exit_on_signal,
                                     zkcoord_command)
from zkcoord.testing.spark import SparkStandalone
from zkcoord.testing.waiting import WaitTimeout, wait_until
from zkcoord.testing.zookeeper import FAST_TICK_MS, fresh_chroot, scratch_ensemble, start_ensemble

__all__ = [
    "BrokerProcess", "ClusterError", "ConsumerProcess", "CpuLoad", "FAST_TICK_MS", "KRAFT_MODE", "KafkaBroker",
    "KafkaCluster", "KafkaNotInstalled", "KafkaSettings", "LocalCluster", "ManagedProcess",
    "OwnershipViolation", "ProxiedEnsemble", "ServerProcess", "SparkStandalone", "TcpProxy", "WaitTimeout",
    "as_background_job", "cluster_in_chroot", "cpu_seconds", "exit_on_signal", "expire_session", "fresh_chroot",
    "group_is_whole", "partitions_of", "read_json_lines", "scratch_ensemble", "start_ensemble", "wait_until",
    "ZOOKEEPER_MODE", "zkcoord_command",
]
