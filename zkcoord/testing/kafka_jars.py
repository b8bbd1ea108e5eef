"""Apache Kafka's jars for the harness: which releases are cached, where, and
fetching them from Maven Central.

The releases are the modules of the Maven project under ``kafka/`` in the
source tree (one per release line: ``kafka/0.10``, ``kafka/3.9``, ``kafka/4``; a module's
version is the Kafka release). ``scripts/install.sh kafka`` runs this module,
which has Maven (:func:`zkcoord.testing.maven.run_maven`: Central only,
bounded in time) copy each release's runtime jars into
``~/.cache/zkcoord/kafka/<version>/`` (``$XDG_CACHE_HOME``) and write
``classpath.txt`` there last, so a release is cached only when that file is
and every jar it names exists. Nothing is fetched from anywhere but Maven
Central, and a cached release is not fetched again unless its classpath
lacks a jar its module declares (one added to the module since).

>>> release_line("3.9.1"), release_line("0.10.2.2")
('3.9', '0.10')
>>> newest(["4.0.0", "4.10.1", "4.4.0", "3.9.1"], line="4")
'4.10.1'
"""

from __future__ import annotations

import os
import sys
import xml.etree.ElementTree as ElementTree
from pathlib import Path
from typing import Iterable, Optional

from zkcoord.caches import user_cache
from zkcoord.java import java_tool
from zkcoord.testing import maven
from zkcoord.testing.process import ClusterError

MAVEN_PROJECT = Path(__file__).resolve().parents[2] / "kafka"
CLASSPATH_FILE = "classpath.txt"
INSTALL_HINT = "run scripts/install.sh kafka"
_POM = "{http://maven.apache.org/POM/4.0.0}"


class KafkaNotInstalled(ClusterError):
    """Kafka cannot be started here: no Java, or the release's jars are not
    cached (``scripts/install.sh kafka`` fetches them)."""


def cache_root() -> Path:
    """Where releases are cached, one directory per version."""
    return user_cache() / "kafka"


def release_line(version: str) -> str:
    """The line a release belongs to as the harness names lines: "3.9" for
    the 3.x releases (ZooKeeper mode), "4" for 4.x (KRaft only), "0.10" for
    0.10.x (a Kafka too old for zkcoord's client, for the tests that say so)."""
    major, minor = version.split(".")[:2]
    return f"{major}.{minor}" if major in ("0", "3") else major


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split(".") if part.isdigit())


def newest(versions: Iterable[str], line: str) -> Optional[str]:
    """The newest of ``versions`` in ``line``, or None."""
    matching = [v for v in versions if release_line(v) == line]
    return max(matching, key=_version_key, default=None)


def cached_classpath(version: str, root: Optional[Path] = None) -> Optional[list[Path]]:
    """The jars of a fully cached release, in Maven's order, or None."""
    directory = (root or cache_root()) / version
    try:
        names = (directory / CLASSPATH_FILE).read_text().strip().split(os.pathsep)
    except OSError:
        return None
    jars = [directory / name for name in names if name]
    return jars if jars and all(jar.is_file() for jar in jars) else None


def cached_versions(root: Optional[Path] = None) -> list[str]:
    root = root or cache_root()
    try:
        candidates = [entry.name for entry in root.iterdir() if entry.is_dir()]
    except OSError:
        return []
    return sorted((v for v in candidates if cached_classpath(v, root)), key=_version_key)


def classpath(line: str, root: Optional[Path] = None) -> tuple[str, list[Path]]:
    """(version, jars) of the newest cached release of ``line`` ("3.9" or "4")."""
    root = root or cache_root()
    version = newest(cached_versions(root), line)
    if version is None:
        raise KafkaNotInstalled(f"no Kafka {line} release is cached in {root}: {INSTALL_HINT}")
    return version, cached_classpath(version, root)


def java() -> str:
    """The java launcher: $JAVA_HOME's, else the one on PATH."""
    found = java_tool("java")
    if found is None:
        raise KafkaNotInstalled(f"no java found (JAVA_HOME or PATH): {INSTALL_HINT}")
    return found


# -- fetching -------------------------------------------------------------------------------------

def project_modules(project: Path = MAVEN_PROJECT) -> dict[str, Path]:
    """The pom of each module of the Maven project, by the Kafka release it fetches."""
    parent = ElementTree.parse(project / "pom.xml").getroot()
    modules = {}
    for module in parent.iter(f"{_POM}module"):
        pom = project / module.text / "pom.xml"
        modules[ElementTree.parse(pom).getroot().findtext(f"{_POM}version")] = pom
    return modules


def project_versions(project: Path = MAVEN_PROJECT) -> list[str]:
    """The Kafka release each module of the Maven project fetches."""
    return list(project_modules(project))


def declared_jars(pom: Path) -> set[str]:
    """The file names of the jars a module declares as its dependencies
    (``<artifactId>-<version>.jar``), which a copy made from it lists."""
    root = ElementTree.parse(pom).getroot()
    version = root.findtext(f"{_POM}version")
    return {f"{d.findtext(f'{_POM}artifactId')}-"
            f"{d.findtext(f'{_POM}version').replace('${project.version}', version)}.jar"
            for d in root.iter(f"{_POM}dependency")}


def stale_versions(project: Path = MAVEN_PROJECT, root: Optional[Path] = None) -> list[str]:
    """The releases of the Maven project not cached whole with every jar their module declares."""
    root = root or cache_root()
    stale = []
    for version, pom in project_modules(project).items():
        jars = cached_classpath(version, root)
        if jars is None or not declared_jars(pom) <= {jar.name for jar in jars}:
            stale.append(version)
    return stale


def fetch(project: Path = MAVEN_PROJECT, root: Optional[Path] = None) -> list[str]:
    """Cache every release of the Maven project that is not cached yet;
    returns the versions fetched (none when all were there)."""
    root = root or cache_root()
    if not (project / "pom.xml").is_file():
        raise KafkaNotInstalled(f"no Maven project at {project}: Kafka is fetched from a source checkout")
    missing = stale_versions(project, root)
    if not missing:
        return []
    try:
        maven.run_maven(project / "pom.xml", "generate-resources", f"-Dkafka.cache={root}",
                        doing=f"fetching Kafka {', '.join(missing)}")
    except maven.JarCacheError as exc:
        raise KafkaNotInstalled(str(exc)) from None
    return missing


def main() -> int:
    try:
        fetched = fetch()
    except KafkaNotInstalled as exc:
        print(f"zkcoord: {exc}", file=sys.stderr)
        return 1
    for version in fetched:
        print(f"fetched Kafka {version} into {cache_root() / version}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
