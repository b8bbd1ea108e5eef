"""Jars from Maven Central, fetched once by the install step and read from a
cache afterwards: tests and benchmarks never download.

:func:`run_maven` is the one way the project runs Maven: in batch mode,
bounded in time, with settings of our own, one mirror for every repository,
so that nothing comes from anywhere but Maven Central whatever a POM or the
user's settings declare. :func:`copy_runtime_jars` has it resolve artifacts
with their runtime dependencies (``maven-dependency-plugin``'s
``copy-dependencies`` on a POM written for the purpose) and copies the jars
into one directory, replaced whole so that a failed fetch never leaves half
a cache; Kafka's releases are a Maven project of the repository's
(:mod:`zkcoord.testing.kafka_jars`).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence
from xml.sax.saxutils import escape

from zkcoord.errors import ZkcoordError

MAVEN_CENTRAL = "https://repo.maven.apache.org/maven2"
DEPENDENCY_PLUGIN = "org.apache.maven.plugins:maven-dependency-plugin:3.8.1"  # pinned: its options are relied on
FETCH_TIMEOUT_S = 600.0  # a cold local repository on a slow link


class JarCacheError(ZkcoordError):
    """Jars a benchmark or test needs are not in the cache (the install step
    fetches them), or could not be fetched into it."""


class ArtifactNotFound(JarCacheError):
    """Maven Central has no such artifact (at that version)."""


@dataclass(frozen=True)
class Artifact:
    group: str
    name: str
    version: str

    def __str__(self) -> str:
        return f"{self.group}:{self.name}:{self.version}"


def artifact_id(jar: str) -> str:
    """The artifact id of a jar named as Maven and Spark's distribution name
    them, ``<artifactId>-<version>.jar``: the version begins at the last
    ``-`` followed by digits and a dot.

    >>> [artifact_id(jar) for jar in ("spark-sql-kafka-0-10_2.13-4.2.0.jar", "zstd-jni-1.5.7-7.jar",
    ...                               "log4j-1.2-api-2.25.4.jar", "connect-repl.jar")]
    ['spark-sql-kafka-0-10_2.13', 'zstd-jni', 'log4j-1.2-api', 'connect-repl']
    """
    name = jar.removesuffix(".jar")
    versioned = re.match(r"(.+)-\d+\.", name)
    return versioned.group(1) if versioned else name


def _pom(artifacts: Sequence[Artifact]) -> str:
    dependencies = "".join(
        f"<dependency><groupId>{escape(a.group)}</groupId><artifactId>{escape(a.name)}</artifactId>"
        f"<version>{escape(a.version)}</version></dependency>" for a in artifacts)
    return ('<project xmlns="http://maven.apache.org/POM/4.0.0"><modelVersion>4.0.0</modelVersion>'
            "<groupId>zkcoord.fetch</groupId><artifactId>fetch</artifactId><version>0</version>"
            f"<packaging>pom</packaging><dependencies>{dependencies}</dependencies></project>")


def _settings() -> str:
    return ('<settings xmlns="http://maven.apache.org/SETTINGS/1.0.0"><mirrors><mirror>'
            f"<id>central-only</id><mirrorOf>*</mirrorOf><url>{MAVEN_CENTRAL}</url>"
            "</mirror></mirrors></settings>")


def _mvn() -> str:
    found = shutil.which("mvn")
    if found is None:
        raise JarCacheError("no mvn: install Maven (Debian's maven; scripts/install.sh spark or kafka does)")
    return found


class MavenFailed(JarCacheError):
    """Maven ran and failed; ``output`` is what it printed."""

    def __init__(self, message: str, output: str):
        super().__init__(message)
        self.output = output


def run_maven(pom: Path, *arguments: str, doing: str) -> None:
    """``mvn -B -q -U -f pom arguments...`` with Central-only settings,
    within FETCH_TIMEOUT_S. ``doing`` says what for, in the errors: raises
    JarCacheError without mvn or past the time, MavenFailed when it fails
    (its [ERROR] lines in the message)."""
    mvn = _mvn()
    with tempfile.TemporaryDirectory(prefix="zkcoord-maven-") as scratch:
        settings = Path(scratch) / "settings.xml"
        settings.write_text(_settings())
        # -U: an artifact missing at the last try is looked for again (it may have been published since).
        command = [mvn, "-B", "-q", "-U", "-Dstyle.color=never", "-f", str(pom), "-s", str(settings),
                   "-gs", str(settings), *arguments]
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=FETCH_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise JarCacheError(f"mvn took more than {FETCH_TIMEOUT_S:.0f} s {doing}") from None
    if done.returncode != 0:
        output = done.stdout + done.stderr
        errors = "\n".join(line for line in output.splitlines() if "[ERROR]" in line) or output
        raise MavenFailed(f"mvn failed {doing}:\n{errors}", output)


def copy_runtime_jars(artifacts: Sequence[Artifact], target: Path, *, exclude: Iterable[str] = ()) -> list[Path]:
    """Fetch ``artifacts`` and their compile and runtime dependencies from
    Maven Central into ``target`` (replacing it), leaving out the artifact
    ids in ``exclude`` (those the classpath has already); returns the jars.
    Raises ArtifactNotFound when Maven Central lacks one of ``artifacts``,
    JarCacheError when Maven fails otherwise."""
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".fetch-", dir=target.parent) as scratch:
        scratch_dir = Path(scratch)
        (scratch_dir / "pom.xml").write_text(_pom(artifacts))
        jars = scratch_dir / "jars"
        jars.mkdir()
        arguments = [f"{DEPENDENCY_PLUGIN}:copy-dependencies", "-DincludeScope=runtime", f"-DoutputDirectory={jars}"]
        excluded = sorted(set(exclude))
        if excluded:
            arguments.append(f"-DexcludeArtifactIds={','.join(excluded)}")
        try:
            run_maven(scratch_dir / "pom.xml", *arguments, doing=f"fetching {', '.join(map(str, artifacts))}")
        except MavenFailed as exc:
            for artifact in artifacts:
                jar = f"{artifact.group}:{artifact.name}:jar:{artifact.version}"
                if f"Could not find artifact {jar}" in exc.output or f"{jar} was not found" in exc.output:
                    raise ArtifactNotFound(f"{artifact} is not on Maven Central") from None
            raise
        if target.exists():
            shutil.rmtree(target)
        jars.replace(target)
    return sorted(target.glob("*.jar"))
