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
         [--records each|ranges] [--poll-ms MS] [key=value ...]

Each member is one KafkaConsumer on a thread of its own, with the consumer
properties of FILE and then the key=value arguments; the driver turns auto
commit off and commits synchronously after each poll what it processed (and
what it processed of partitions it loses, before they go). It gives member
``i`` the client.id ``<client.id or group.id>-<i>`` and, with
``--instance-id-prefix``, the group.instance.id ``<P>-<i>``. Stdout is one
JSON object a line, each with ``event``, ``member`` (its index; none for the
driver's own) and ``ts`` (epoch ms):

- ``started``; ``closed`` (the consumer closed: it left its group);
- ``assigned``, ``revoked``, ``lost``: ``partitions``, ``[[topic, partition], ...]``;
- ``record``: ``topic``, ``partition``, ``offset`` of each record consumed
  (``--records each``), or ``records``: ``topic``, ``partition``, ``first``,
  ``last``, ``count`` per partition and poll (``--records ranges``);
- ``committed``: ``offsets``, ``[[topic, partition, next offset], ...]``;
- ``error``: ``phase`` (create, poll, commit, close, command), ``class``
  (the exception's Java class), ``message``;
- ``ready`` once every member is started, ``exit`` last.

Stdin takes ``close <i>`` (member i leaves cleanly) and ``quit`` (all leave,
the driver exits); end of input is a quit. The client's log goes to stderr
(the process's log here), at WARN unless ``log_level`` says otherwise. A
crash is the whole JVM's (kill -9): a member to be killed alone runs in a
driver of its own.

:class:`JavaMembers` runs the driver as a managed process and reads its
events back: who holds what, what was consumed, committed, and refused.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Callable, Iterable, Mapping, Optional, Sequence

from zkcoord.caches import user_cache
from zkcoord.java import JavaBuildError, cached_jar, source_digest
from zkcoord.testing import kafka_jars
from zkcoord.testing.kafka import JVM_OPTIONS, QUICK_START_JIT
from zkcoord.testing.process import ClusterError, ManagedProcess, ProcessExited
from zkcoord.testing.waiting import wait_until

SOURCES = Path(__file__).resolve().parents[2] / "java" / "member-driver" / "src"
MAIN_CLASS = "zkcoord.kafka.MemberDriver"
KAFKA_LINE = "4"  # the client release the driver is built against and runs with
JAVA_RELEASE = "17"
EVENTS_FILE = "events.jsonl"
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


Partition = tuple[str, int]


class JavaMembers:
    """``members`` KafkaConsumers in one JVM, subscribed to ``topics`` with
    the consumer ``properties`` (bootstrap.servers, group.id, ...), under
    ``directory`` (its events and log). ``heap_mb`` defaults to enough for
    ``members`` consumers of small records."""

    def __init__(self, directory: Path, topics: Iterable[str], properties: Mapping[str, object], *,
                 members: int = 1, instance_id_prefix: Optional[str] = None, records: str = "each",
                 poll_ms: int = 100, heap_mb: Optional[int] = None, log_level: str = "WARN",
                 name: str = "java-members"):
        arguments = ["--topics", ",".join(topics), "--members", str(members), "--records", records,
                     "--poll-ms", str(poll_ms)]
        if instance_id_prefix is not None:
            arguments += ["--instance-id-prefix", instance_id_prefix]
        arguments += [f"{key}={value}" for key, value in properties.items()]
        self.members = members
        self.process = ManagedProcess(name, Path(directory),
                                      driver_command(arguments, heap_mb or 128 + members, log_level),
                                      log_name="driver.log", stdout_name=EVENTS_FILE, commands=True)
        self._forget()

    def _forget(self) -> None:
        """What has been read of the events, and what they add up to so far
        (kept as they are read: a thousand members write many)."""
        self._events: list[dict] = []
        self._read_at = 0
        self._held: dict[int, set[Partition]] = {}
        self._closed: set[int] = set()
        self._records: list[tuple[str, int, int]] = []
        self._consumed = 0
        self._committed: dict[Partition, int] = {}

    # -- life -------------------------------------------------------------------------------------

    def start(self, timeout: float = 60.0, wait: bool = True) -> "JavaMembers":
        """Start the JVM and (``wait``) wait until every member has been
        created or failed to be (:meth:`wait_ready` waits later)."""
        self.process.stdout_path.unlink(missing_ok=True)
        self._forget()
        self.process.start()
        if wait:
            self.wait_ready(timeout)
        return self

    def wait_ready(self, timeout: float = 60.0) -> None:
        self.wait_for(lambda: self.events("ready"), timeout, "the Java members to start")

    def command(self, line: str) -> None:
        if not self.process.alive:
            raise ProcessExited(f"{self.process.name} is not running:\n{self.process.log_tail()}")
        self.process.proc.stdin.write(line.encode() + b"\n")
        self.process.proc.stdin.flush()

    def close_member(self, index: int, timeout: float = 30.0) -> None:
        """Member ``index`` leaves its group cleanly (KafkaConsumer.close); waits until it has."""
        self.command(f"close {index}")
        self.wait_for(lambda: self.closed(index), timeout, f"Java member {index} to close")

    def stop(self, timeout: float = 30.0) -> Optional[int]:
        """Every member leaves cleanly and the JVM exits (kill -9 if it does not in time)."""
        if self.process.alive:
            try:
                self.command("quit")
                self.process.proc.stdin.close()
                self.process.proc.wait(timeout)
            except (OSError, ProcessExited):
                pass  # it died meanwhile
            except subprocess.TimeoutExpired:
                self.process.kill()
        return self.process.terminate(1)

    def kill(self) -> None:
        """kill -9: every member crashes at once."""
        self.process.kill()

    def __enter__(self) -> "JavaMembers":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- reading its events -----------------------------------------------------------------------

    def _read(self) -> list[dict]:
        """Every whole line written so far (one being written waits for its newline)."""
        try:
            with open(self.process.stdout_path, "rb") as output:
                output.seek(self._read_at)
                chunk = output.read()
        except OSError:
            return self._events
        complete = chunk.rfind(b"\n") + 1
        for line in chunk[:complete].splitlines():
            try:
                event = json.loads(line)
            except ValueError:
                raise ClusterError(f"{self.process.name} wrote a line that is not JSON: {line[:200]!r}") from None
            self._events.append(event)
            self._take(event)
        self._read_at += complete
        return self._events

    def _take(self, event: dict) -> None:
        kind, member = event["event"], event.get("member")
        partitions = {(t, p) for t, p in event.get("partitions", ())}
        if kind == "assigned":
            self._held.setdefault(member, set()).update(partitions)
        elif kind in ("revoked", "lost"):
            self._held.setdefault(member, set()).difference_update(partitions)
        elif kind == "closed":
            self._held.pop(member, None)
            self._closed.add(member)
        elif kind == "record":
            self._records.append((event["topic"], event["partition"], event["offset"]))
            self._consumed += 1
        elif kind == "records":
            self._consumed += event["count"]
        elif kind == "committed":
            for topic, partition, offset in event["offsets"]:
                self._committed[(topic, partition)] = offset

    def events(self, kind: Optional[str] = None, member: Optional[int] = None) -> list[dict]:
        return [e for e in self._read() if (kind is None or e["event"] == kind)
                and (member is None or e.get("member") == member)]

    def errors(self, member: Optional[int] = None) -> list[dict]:
        return self.events("error", member)

    def assignment(self, member: int) -> frozenset[Partition]:
        """What member ``member`` holds now, as its rebalance listener was told."""
        self._read()
        return frozenset(self._held.get(member, ()))

    def assignments(self) -> dict[int, frozenset[Partition]]:
        self._read()
        return {i: frozenset(self._held.get(i, ())) for i in range(self.members)}

    def records(self) -> list[tuple[str, int, int]]:
        """(topic, partition, offset) of every record consumed, by any member,
        in order (``records="each"``)."""
        self._read()
        return list(self._records)

    def consumed(self) -> int:
        """How many records were consumed, in either ``records`` mode."""
        self._read()
        return self._consumed

    def committed(self) -> dict[Partition, int]:
        """The last offset committed for each partition, by whichever member."""
        self._read()
        return dict(self._committed)

    def closed(self, member: int) -> bool:
        self._read()
        return member in self._closed

    def wait_for(self, predicate: Callable[[], object], timeout: float, message: str):
        """wait_until, failing at once if the JVM exits meanwhile."""
        def check():
            result = predicate()
            if not result and not self.process.alive:
                raise ProcessExited(f"{self.process.name} exited ({self.process.returncode}) waiting for "
                                    f"{message}:\n{self.process.log_tail()}")
            return result
        return wait_until(check, timeout, message=message, fail_on=(ProcessExited,))

    def wait_assigned(self, member: int = 0, timeout: float = 30.0) -> frozenset[Partition]:
        return self.wait_for(lambda: self.assignment(member), timeout, f"Java member {member} to be assigned")

    def counts(self) -> Counter:
        """How often each (topic, partition, offset) was consumed (``records="each"``)."""
        return Counter(self.records())


class JavaMember:
    """One KafkaConsumer in a JVM of its own, seen as the harness sees a
    stock member run by ``zkcoord consume --kafka-brokers`` (a
    ConsumerProcess): ``records()`` as dicts with topic, partition and
    offset, ``assignment()``, ``alive``, ``terminate()`` (it leaves its group
    cleanly and the JVM exits; the exit code), ``kill()``; so a test that
    takes stock members of any client library takes Kafka's own too."""

    stock = True

    def __init__(self, directory: Path, topics: Iterable[str], properties: Mapping[str, object],
                 name: str = "java-member"):
        self.name = name
        self.driver = JavaMembers(directory, topics, properties, name=name)

    def start(self, timeout: float = 60.0) -> "JavaMember":
        self.driver.start(timeout)
        return self

    @property
    def alive(self) -> bool:
        return self.driver.process.alive and not self.driver.closed(0)

    def assignment(self) -> set[Partition]:
        return set(self.driver.assignment(0))

    def records(self) -> list[dict]:
        return [{"topic": topic, "partition": partition, "offset": offset}
                for topic, partition, offset in self.driver.records()]

    def terminate(self, timeout: float = 30.0) -> Optional[int]:
        return self.driver.stop(timeout)

    def kill(self) -> None:
        self.driver.kill()


def main() -> int:
    try:
        print(build())
    except MemberDriverUnavailable as exc:
        print(f"zkcoord: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
