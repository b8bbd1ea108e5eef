"""The JVM half of ``format("zkcoord")``: Java sources (``src/``) and the jar
built from them against the installed pyspark's own jars.

Executors read planned ranges in the JVM (``RangeReader.java``), one row per
record written straight from the fetched bytes, with no Python worker in
between; every plan is still made in Python (:mod:`zkcoord.spark.bridge`).
The jar is built by ``scripts/install.sh`` (``python -m zkcoord.spark.jvm``)
with the JDK's ``javac``, next to the sources, or in ``~/.cache/zkcoord``
(``$XDG_CACHE_HOME``) where the package's directory is read-only; its name
carries pyspark's version and a digest of the sources, so a stale jar is
never picked up. Without it the source runs on its Python data source, slower.

>>> jar_name("4.3.0", "0123456789abcdef")
'zkcoord-spark-4.3.0-0123456789ab.jar'
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Optional

from zkcoord.caches import user_cache
from zkcoord.java import JavaBuildError, cached_jar, source_digest

HERE = Path(__file__).resolve().parent
SOURCES = HERE / "src"
JAVA_RELEASE = "17"  # Spark 4's oldest Java


class JvmBuildError(JavaBuildError, RuntimeError):
    """The jar cannot be built here (no javac, no pyspark, a compile error)."""


def jar_name(pyspark_version: str, digest: str) -> str:
    return f"zkcoord-spark-{pyspark_version}-{digest[:12]}.jar"


def _pyspark() -> tuple[str, Path]:
    try:
        import pyspark
    except ImportError:
        raise JvmBuildError("pyspark is not installed (scripts/install.sh test,spark)") from None
    return pyspark.__version__, Path(pyspark.__file__).resolve().parent / "jars"


def _directories() -> list[Path]:
    """Where jars go: next to the sources, else a cache of the user's."""
    return [HERE, user_cache()]


def jar_path() -> Path:
    """Where the jar for the installed pyspark and these sources is, or
    would be built: the first of the directories that holds it or can."""
    version, _ = _pyspark()
    name = jar_name(version, source_digest(SOURCES))
    for directory in _directories():
        if (directory / name).is_file():
            return directory / name
    for directory in _directories():
        if os.access(directory, os.W_OK) or not directory.exists():
            return directory / name
    raise JvmBuildError(f"no writable directory for {name} among {[str(d) for d in _directories()]}")


def built_jar() -> Optional[Path]:
    """The jar, if it is built for the installed pyspark and these sources."""
    try:
        path = jar_path()
    except JvmBuildError:
        return None
    return path if path.is_file() else None


def build(*, force: bool = False) -> Path:
    """Compile the sources into the jar (once per pyspark version and sources)."""
    try:
        # Resources (the DataSourceRegister service entry) go in beside the classes.
        return cached_jar(SOURCES, lambda: [str(_pyspark()[1] / "*")], jar_path(), JAVA_RELEASE,
                          replaces="zkcoord-spark-*.jar", force=force)
    except JvmBuildError:
        raise
    except JavaBuildError as exc:
        raise JvmBuildError(str(exc)) from None


def main(argv: Optional[list[str]] = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m zkcoord.spark.jvm",
                                     description="Build the JVM reader of format('zkcoord').")
    parser.add_argument("--force", action="store_true", help="rebuild even if the jar is up to date")
    args = parser.parse_args(argv)
    try:
        print(build(force=args.force))
    except JvmBuildError as exc:
        print(f"zkcoord.spark.jvm: {exc}", file=sys.stderr)
        return 1
    return 0
