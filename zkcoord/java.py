"""The JDK for zkcoord's JVM programs: finding its tools (java, javac) as the
JDK's own scripts do, and building a jar from a directory of sources against
a classpath, named by a digest of those sources so that a stale jar is never
picked up."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
import zipfile
from pathlib import Path
from typing import Callable, Optional, Sequence

from zkcoord.errors import ZkcoordError


class JavaBuildError(ZkcoordError):
    """A jar cannot be built here: no javac, or the sources do not compile."""


def java_tool(name: str) -> Optional[str]:
    """The path of the JDK program ``name``: the one under $JAVA_HOME if it
    is set and has it, else the one on PATH; None if there is none."""
    home = os.environ.get("JAVA_HOME")
    candidates = [Path(home) / "bin" / name] if home else []
    found = shutil.which(name)
    if found:
        candidates.append(Path(found))
    for candidate in candidates:
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    return None


def _files(sources: Path) -> list[Path]:
    return sorted(p for p in sources.rglob("*") if p.is_file())


def source_digest(sources: Path) -> str:
    """A digest of every file under ``sources``, names and contents."""
    h = hashlib.sha256()
    for path in _files(sources):
        h.update(str(path.relative_to(sources)).encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


def build_jar(sources: Path, classpath: Sequence[str], target: Path, release: str) -> Path:
    """Compile the ``.java`` files under ``sources`` for Java ``release``
    against ``classpath`` (entries as javac takes them, ``dir/*`` too) into
    the jar ``target``, with the other files under ``sources`` as its
    resources. The jar appears whole or not at all."""
    javac = java_tool("javac")
    if javac is None:
        raise JavaBuildError("no javac: install a JDK (Debian's default-jdk-headless)")
    files = _files(sources)
    with tempfile.TemporaryDirectory(prefix="zkcoord-javac-") as scratch:
        classes = Path(scratch) / "classes"
        classes.mkdir()
        # No -Werror: a newer library deprecating an API the sources use must not break installs.
        # javac's own JVM on the client compiler and the serial collector: a
        # build of a few files is over before the optimizing compiler and the
        # parallel collector's threads pay back (about 1 s instead of 3 on a
        # loaded 2-core machine).
        command = [javac, "-J-XX:TieredStopAtLevel=1", "-J-XX:+UseSerialGC", "--release", release, "-nowarn",
                   "-encoding", "UTF-8", "-cp", os.pathsep.join(classpath),
                   "-d", str(classes), *(str(p) for p in files if p.suffix == ".java")]
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            raise JavaBuildError(f"javac failed:\n{done.stdout}{done.stderr}")
        target.parent.mkdir(parents=True, exist_ok=True)
        # Beside the target, so that the rename is atomic; named apart, so that builds at once do not mix.
        with tempfile.NamedTemporaryFile(dir=target.parent, prefix=f".{target.name}.", delete=False) as partial:
            with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as jar:
                jar.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\r\nCreated-By: zkcoord\r\n\r\n")
                for path in sorted(classes.rglob("*.class")):
                    jar.write(path, str(path.relative_to(classes)))
                for path in files:
                    if path.suffix != ".java":
                        jar.write(path, str(path.relative_to(sources)))
        Path(partial.name).replace(target)
    return target


def cached_jar(sources: Path, classpath: Callable[[], Sequence[str]], target: Path, release: str, *,
               replaces: str, force: bool = False) -> Path:
    """The jar ``target`` (named by the sources' digest), built with
    :func:`build_jar` unless it is there already (or ``force``); older jars
    beside it matching the glob ``replaces`` go once it is built.
    ``classpath`` is asked only when a build is needed."""
    if target.is_file() and not force:
        return target
    build_jar(sources, classpath(), target, release)
    for old in target.parent.glob(replaces):
        if old != target:
            old.unlink(missing_ok=True)
    return target
