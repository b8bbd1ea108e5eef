"""The reference Java client as group members: Kafka's own ``KafkaConsumer``
(``org.apache.kafka:kafka-clients``, the Kafka 4 release the harness caches),
N of them in one JVM, driven by the member driver
(``java/member-driver/``, ``zkcoord.kafka.MemberDriver``).

The driver is built by ``scripts/install.sh test`` (``python -m
zkcoord.testing.java_members``) with the JDK's javac against the cached
Kafka 4 classpath, into ``~/.cache/zkcoord/member-driver/``; its jar's name
carries the Kafka release and a digest of the sources, so a stale one is
never run (and a missing one is built on first use, where javac is).

Its command line, kept stable for the tests and ``bench/`` alike::

    java -cp DRIVER_JAR:KAFKA_JARS zkcoord.kafka.MemberDriver --topics t1,t2
         [--members N] [--properties FILE] [--instance-id-prefix P]
         [--records each|ranges] [--poll-ms MS] [--start now|go] [key=value ...]

Each member is one KafkaConsumer on a thread of its own, with the consumer
properties of FILE and then the key=value arguments; the driver turns auto
commit off and commits synchronously after each poll what it processed (and
what it processed of partitions it loses, before they go). It gives member
``i`` the client.id ``<client.id or group.id>-<i>`` and, with
``--instance-id-prefix``, the group.instance.id ``<P>-<i>``. With ``--start
go`` each member, once created and subscribed, waits for the ``go`` command
before its first poll (members of several JVMs, or created over seconds,
then join together; bench/bench_vs_kafka.py times from the go). Its events
and commands are every driver's (driven_members.py); the client's log is
at WARN unless ``log_level`` says otherwise.

:class:`JavaMembers` runs the driver as a managed process and reads its
events back (:class:`~zkcoord.testing.driven_members.DrivenMembers`).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Iterable, Mapping, Optional, Sequence

from zkcoord.caches import user_cache
from zkcoord.java import JavaBuildError, cached_jar, source_digest
from zkcoord.testing import kafka_jars
from zkcoord.testing.driven_members import DrivenMember, DrivenMembers
from zkcoord.testing.kafka import JVM_OPTIONS, QUICK_START_JIT

SOURCES = Path(__file__).resolve().parents[2] / "java" / "member-driver" / "src"
MAIN_CLASS = "zkcoord.kafka.MemberDriver"
KAFKA_LINE = "4"  # the client release the driver is built against and runs with
JAVA_RELEASE = "17"
INSTALL_HINT = "run scripts/install.sh test"


class MemberDriverUnavailable(kafka_jars.KafkaNotInstalled):
    """The Java member driver cannot run here: no Java, Kafka 4's jars are
    not cached, or its sources are missing or do not compile."""


def _kafka_classpath() -> tuple[str, list[Path]]:
    try:
        return kafka_jars.classpath(KAFKA_LINE)
    except kafka_jars.KafkaNotInstalled as exc:
        raise MemberDriverUnavailable(str(exc)) from None


def jar_path() -> Path:
    """Where the driver's jar for the cached Kafka release and these sources is, or goes."""
    if not SOURCES.is_dir():
        raise MemberDriverUnavailable(f"no member driver sources at {SOURCES}: it is built from a source checkout")
    version, _ = _kafka_classpath()
    return user_cache() / "member-driver" / f"member-driver-{version}-{source_digest(SOURCES)[:12]}.jar"


def build(*, force: bool = False) -> Path:
    """The driver's jar, compiled now if it is not built yet (or ``force``)."""
    try:
        return cached_jar(SOURCES, lambda: [str(jar) for jar in _kafka_classpath()[1]], jar_path(), JAVA_RELEASE,
                          replaces="member-driver-*.jar", force=force)
    except JavaBuildError as exc:
        raise MemberDriverUnavailable(f"the member driver cannot be built: {exc}") from None


def driver_command(arguments: Sequence[str], heap_mb: int, log_level: str = "WARN") -> list[str]:
    """The java command line running the driver with ``arguments``."""
    try:
        java = kafka_jars.java()
    except kafka_jars.KafkaNotInstalled as exc:
        raise MemberDriverUnavailable(str(exc)) from None
    jar = build()
    _, jars = _kafka_classpath()
    classpath = ":".join([str(jar), *(str(j) for j in jars)])  # the driver's log4j2.properties first
    return [java, f"-Xmx{heap_mb}m", *JVM_OPTIONS, *QUICK_START_JIT, f"-Dmember.driver.log.level={log_level}",
            "-cp", classpath, MAIN_CLASS, *arguments]


class JavaMembers(DrivenMembers):
    """``members`` KafkaConsumers in one JVM, subscribed to ``topics`` with
    the consumer ``properties`` (bootstrap.servers, group.id, ...), under
    ``directory`` (its events and log). ``heap_mb`` defaults to enough for
    ``members`` consumers of small records."""

    def __init__(self, directory: Path, topics: Iterable[str], properties: Mapping[str, object], *,
                 members: int = 1, instance_id_prefix: Optional[str] = None, records: str = "each",
                 poll_ms: int = 100, heap_mb: Optional[int] = None, log_level: str = "WARN",
                 name: str = "java-members", start_on_go: bool = False):
        arguments = ["--topics", ",".join(topics), "--members", str(members), "--records", records,
                     "--poll-ms", str(poll_ms)]
        if start_on_go:
            arguments += ["--start", "go"]
        if instance_id_prefix is not None:
            arguments += ["--instance-id-prefix", instance_id_prefix]
        arguments += [f"{key}={value}" for key, value in properties.items()]
        super().__init__(directory, driver_command(arguments, heap_mb or 128 + members, log_level),
                         members=members, name=name, client="Java")


class JavaMember(DrivenMember):
    """One KafkaConsumer in a JVM of its own (DrivenMember)."""

    def __init__(self, directory: Path, topics: Iterable[str], properties: Mapping[str, object],
                 name: str = "java-member"):
        super().__init__(JavaMembers(directory, topics, properties, name=name))


def main() -> int:
    try:
        print(build())
    except MemberDriverUnavailable as exc:
        print(f"zkcoord: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
