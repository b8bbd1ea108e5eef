"""Apache Kafka's own command-line tools (``kafka-consumer-groups``,
``kafka-topics``, ``kafka-configs``, ``kafka-console-consumer``), run from
the jars :mod:`~zkcoord.testing.kafka_jars` caches, as their shell scripts
would run them: ``java -cp <jars> <tool class> <arguments>``.

:func:`run_tool` runs one to its end within a timeout and returns what it
printed; :func:`start_tool` starts one that runs until stopped (the console
consumer) as a :class:`~zkcoord.testing.process.ManagedProcess`. The tools'
own logs go to a file beside their output (Kafka's scripts send them to the
terminal at WARN), so their standard output is only what they print for the
user: the tables :func:`parse_table` reads, or records.

Each JVM starts in a second or two: a test groups its invocations. Once per
machine (per java and jars), :func:`runtime` writes a class-data sharing
archive (the JDK's dynamic AppCDS) of the classes the tools share beside the
cached jars, and every run maps it: a tool then starts in about a third of
the time.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

from zkcoord.testing import kafka_jars
from zkcoord.testing.process import ClusterError, ManagedProcess

# The tools' classes in Kafka 4 (the kafka-tools jar), by the script that runs each.
CONSUMER_GROUPS = "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand"
TOPICS = "org.apache.kafka.tools.TopicCommand"
CONFIGS = "org.apache.kafka.tools.ConfigCommand"
CONSOLE_CONSUMER = "org.apache.kafka.tools.consumer.ConsoleConsumer"
# Kafka's system-test clients (kafka-verifiable-producer.sh, kafka-verifiable-consumer.sh):
# JSON events a line on stdout, read by zkcoord.testing.verifiable_events.
VERIFIABLE_PRODUCER = "org.apache.kafka.tools.VerifiableProducer"
VERIFIABLE_CONSUMER = "org.apache.kafka.tools.VerifiableConsumer"
TOOLS_JAR = "kafka-tools-"  # the jar they come in: older caches lack it
RELEASE_LINE = "4"

# A client JVM: small, quick to start, serial collector on two shared cores.
JVM_OPTIONS = ("-Xms32m", "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xshare:auto",
               "-Djava.awt.headless=true")
DEFAULT_TIMEOUT_S = 60.0
# The run that writes the class-data archive (the dump at its exit is slow on a loaded machine).
ARCHIVE_TIMEOUT_S = 180.0
# The JVM's own warnings (a class-data archive it cannot use, say) to stderr: stdout is the tool's.
JVM_LOGGING = ("-Xlog:disable", "-Xlog:all=warning:stderr")
# log4j 2: warnings and errors to the file named by the tool.log property, nothing to the terminal.
LOG4J2 = """appender.file.type = File
appender.file.name = file
appender.file.fileName = ${sys:tool.log}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = WARN
rootLogger.appenderRef.file.ref = file
"""


class KafkaToolError(ClusterError):
    """A Kafka tool could not be run, or ran past its timeout (killed)."""


class KafkaToolFailed(KafkaToolError):
    """A Kafka tool exited with an error status; ``run`` holds what it printed."""

    def __init__(self, run: "ToolRun"):
        super().__init__(f"{run.tool} exited with {run.returncode}:\n{run.stdout}{run.stderr}")
        self.run = run


@dataclass(frozen=True)
class ToolRun:
    tool: str
    args: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str

    @property
    def output(self) -> str:
        """Everything it printed (tools print some refusals to stdout, others to stderr)."""
        return self.stdout + self.stderr


@dataclass(frozen=True)
class ToolRuntime:
    """The java launcher and the cached release's jars the tools run from."""

    java: str
    version: str
    jars: tuple[Path, ...]

    @classmethod
    def find(cls) -> "ToolRuntime":
        """The newest cached Kafka 4 release; KafkaNotInstalled, saying what
        to run, without Java, without the release, or with a release cached
        before its tools were."""
        java = kafka_jars.java()
        version, jars = kafka_jars.classpath(RELEASE_LINE)
        if not any(jar.name.startswith(TOOLS_JAR) for jar in jars):
            raise kafka_jars.KafkaNotInstalled(
                f"the cached Kafka {version} lacks its command-line tools (kafka-tools): "
                f"{kafka_jars.INSTALL_HINT}")
        return cls(java, version, tuple(jars))

    @property
    def archive(self) -> Path:
        """The class-data archive of this java and these jars (a JVM maps
        only an archive made with its own classpath), beside the jars."""
        key = hashlib.sha256("\0".join([os.path.realpath(self.java), *map(str, self.jars)]).encode())
        return self.jars[0].parent / f"tools-{key.hexdigest()[:16]}.jsa"

    def command(self, tool: str, args: Sequence[str], log_dir: Path, archive_to: Optional[Path] = None) -> list[str]:
        """The java command line running ``tool`` with ``args``, logging
        under ``log_dir``; mapping the class-data archive if there is one,
        or writing one to ``archive_to`` when it exits."""
        config = log_dir / "log4j2.properties"
        if not config.exists():
            config.write_text(LOG4J2)
        if archive_to is not None:
            sharing = [f"-XX:ArchiveClassesAtExit={archive_to}"]
        else:
            sharing = [f"-XX:SharedArchiveFile={self.archive}"] if self.archive.exists() else []
        return [self.java, *JVM_OPTIONS, *JVM_LOGGING, *sharing, f"-Dlog4j2.configurationFile={config}",
                f"-Dtool.log={log_dir / 'tool.log'}", "-cp", os.pathsep.join(map(str, self.jars)), tool,
                *args]


    def write_archive(self) -> None:
        """Write the class-data archive, if there is none, from a run of
        kafka-consumer-groups that loads what the tools share (the admin
        client, the network layer) and gives up on a port where nothing
        listens. Best effort: without an archive the tools run, slower."""
        if self.archive.exists():
            return
        part = self.archive.with_name(f"{self.archive.name}.{os.getpid()}.part")
        with tempfile.TemporaryDirectory(prefix="kafka-tool-") as scratch:
            command = self.command(CONSUMER_GROUPS, ["--bootstrap-server", "127.0.0.1:9", "--list", "--timeout",
                                                     "1000"], Path(scratch), archive_to=part)
            try:
                subprocess.run(command, stdin=subprocess.DEVNULL, capture_output=True, timeout=ARCHIVE_TIMEOUT_S)
                if part.exists():
                    os.replace(part, self.archive)  # whole, or not at all
            except (subprocess.TimeoutExpired, OSError):
                pass
            finally:
                part.unlink(missing_ok=True)


_runtime: Optional[ToolRuntime] = None


def runtime() -> ToolRuntime:
    """The ToolRuntime, found once per process (its class-data archive written if missing)."""
    global _runtime
    if _runtime is None:
        found = ToolRuntime.find()
        found.write_archive()
        _runtime = found
    return _runtime


def run_tool(tool: str, args: Sequence[str], *, timeout: float = DEFAULT_TIMEOUT_S, check: bool = True,
             log_dir: Optional[Path] = None) -> ToolRun:
    """Run Kafka tool class ``tool`` with ``args`` to its end. Raises
    KafkaToolError past ``timeout`` (the JVM is killed), KafkaToolFailed on
    an error status when ``check``, KafkaNotInstalled without Java or jars."""
    found = runtime()
    with tempfile.TemporaryDirectory(prefix="kafka-tool-") as scratch:
        directory = Path(log_dir) if log_dir is not None else Path(scratch)
        directory.mkdir(parents=True, exist_ok=True)
        try:
            done = subprocess.run(found.command(tool, args, directory), stdin=subprocess.DEVNULL,
                                  capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired as exc:
            raise KafkaToolError(f"{tool.rsplit('.', 1)[-1]} {' '.join(args)} ran past {timeout:.0f} s; "
                                 f"killed. It printed:\n{_text(exc.stdout)}{_text(exc.stderr)}") from None
    run = ToolRun(tool, tuple(args), done.returncode, done.stdout, done.stderr)
    if check and run.returncode != 0:
        raise KafkaToolFailed(run)
    return run


def _text(output) -> str:
    if output is None:
        return ""
    return output.decode(errors="replace") if isinstance(output, bytes) else output


def start_tool(name: str, directory: Path, tool: str, args: Sequence[str],
               stdout_name: Optional[str] = None) -> ManagedProcess:
    """Start Kafka tool class ``tool`` as a managed process (until it is
    stopped or ends), its output in ``directory``/``name``.out (with
    ``stdout_name``, its standard output alone in ``directory``/``stdout_name``:
    a tool whose output is data) and its logs in ``directory``/tool.log."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    process = ManagedProcess(name, directory, runtime().command(tool, args, directory), log_name=f"{name}.out",
                             stdout_name=stdout_name)
    return process.start()


def parse_table(text: str) -> list[dict[str, str]]:
    r"""The rows of the tables a tool printed, each as {column: value}. A
    table is a header line of upper-case column names followed by rows of
    whitespace-separated values; blank lines separate tables, and lines that
    are not part of one (messages) are skipped. The last column takes the
    rest of its row (a STATUS may hold spaces); a parenthesised word belongs
    to the column or value before it (``COORDINATOR (ID)``, ``host:9092 (1)``).
    Kafka's tools print ``-`` for a value they do not have.

    >>> parse_table("\nGROUP  COORDINATOR (ID)    #MEMBERS  STATUS\ng      h:1  (1)            2         Error: no\n")
    [{'GROUP': 'g', 'COORDINATOR (ID)': 'h:1 (1)', '#MEMBERS': '2', 'STATUS': 'Error: no'}]
    """
    rows: list[dict[str, str]] = []
    header: Optional[list[str]] = None
    for line in text.splitlines():
        fields = _words(line)
        if not fields:
            header = None
        elif header is None:
            if len(fields) > 1 and all(_is_column(f) for f in fields):
                header = fields
        elif len(fields) >= len(header):
            last = len(header) - 1
            rows.append({**dict(zip(header[:last], fields)), header[last]: " ".join(fields[last:])})
        else:
            header = None
    return rows


def _words(line: str) -> list[str]:
    words: list[str] = []
    for word in line.split():
        if word.startswith("(") and word.endswith(")") and words:
            words[-1] += " " + word
        else:
            words.append(word)
    return words


def _is_column(name: str) -> bool:
    bare = name.replace("-", "").replace("_", "").replace("#", "").replace(" (", "").replace(")", "")
    return bare.isalpha() and name.upper() == name


def parse_fields(line: str) -> dict[str, str]:
    r"""``Key: value`` pairs separated by tabs, as kafka-topics --describe
    prints a topic or a partition.

    >>> parse_fields("Topic: t\tTopicId: abc\tPartitionCount: 2\tConfigs: ")
    {'Topic': 't', 'TopicId': 'abc', 'PartitionCount': '2', 'Configs': ''}
    """
    pairs = {}
    for part in line.strip().split("\t"):
        key, sep, value = part.partition(":")
        if sep:
            pairs[key.strip()] = value.strip()
    return pairs
