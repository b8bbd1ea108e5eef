"""Spark's own Kafka source (``format("kafka")``, Maven Central's
``org.apache.spark:spark-sql-kafka-0-10``), which the Spark benchmark and
its test read beside ours: the jars fetched for the installed pyspark by the
install step (``python -m zkcoord.testing.spark_kafka``) into the user's
cache, and handed to a session as ``spark.jars`` (:func:`jars`); never
``spark.jars.packages``, which would download at run time.

Fetched are the source, the Kafka client and the rest of its runtime
dependencies that pyspark's own jars lack (the Kafka source's POM declares
Spark itself as provided; the compression codecs, Hadoop and Scala come
with pyspark, so their older copies are left out rather than shadowed).

Where Maven Central has no Kafka source at pyspark's version, the release in
:data:`NEAREST_PUBLISHED` is fetched instead, and said so.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

from zkcoord.caches import user_cache
from zkcoord.testing.maven import Artifact, ArtifactNotFound, JarCacheError, artifact_id, copy_runtime_jars
from zkcoord.testing.spark import spark_home

GROUP = "org.apache.spark"
SOURCE = "spark-sql-kafka-0-10"
# pyspark releases whose Kafka source is not (yet) on Maven Central, and the
# release taken instead: the nearest before it, which reads with it (the
# Kafka source's content test, tests/spark/test_kafka_source.py, checks).
NEAREST_PUBLISHED = {"4.3.0": "4.2.0"}
FETCHED_VERSION = "fetched-version"  # written last: its presence marks a complete cache


def pyspark_version() -> str:
    try:
        import pyspark
    except ImportError:
        raise JarCacheError("pyspark is not installed (scripts/install.sh spark)") from None
    return pyspark.__version__


def _spark_jars() -> list[str]:
    return sorted(path.name for path in (spark_home() / "jars").glob("*.jar"))


def _scala_suffix() -> str:
    """``_2.13``: the Scala version pyspark's jars are built for, as Spark's artifact ids end."""
    for name in _spark_jars():
        if name.startswith("spark-core_"):
            return artifact_id(name).removeprefix("spark-core")
    raise JarCacheError(f"no spark-core jar in {spark_home() / 'jars'}")


def cache_directory(version: Optional[str] = None) -> Path:
    return user_cache() / "spark-kafka" / (version or pyspark_version())


def fetch() -> Path:
    """Fetch the Kafka source for the installed pyspark into its cache
    directory, unless it is there already; returns the directory."""
    version = pyspark_version()
    target = cache_directory(version)
    if (target / FETCHED_VERSION).is_file():
        return target
    name = SOURCE + _scala_suffix()
    have = {artifact_id(jar) for jar in _spark_jars()}
    try:
        copy_runtime_jars([Artifact(GROUP, name, version)], target, exclude=have)
        fetched = version
    except ArtifactNotFound:
        fetched = NEAREST_PUBLISHED.get(version)
        if fetched is None:
            raise JarCacheError(f"{GROUP}:{name}:{version} (pyspark's version) is not on Maven Central, and no "
                                "nearest release is named for it in zkcoord.testing.spark_kafka") from None
        print(f"{GROUP}:{name}:{version} is not on Maven Central: fetching {fetched}, the nearest release",
              file=sys.stderr)
        copy_runtime_jars([Artifact(GROUP, name, fetched)], target, exclude=have)
    (target / FETCHED_VERSION).write_text(fetched + "\n")
    return target


def source_version() -> str:
    """The Kafka source's version in the cache (pyspark's, or the nearest published)."""
    marker = cache_directory() / FETCHED_VERSION
    if not marker.is_file():
        raise JarCacheError(f"Spark's Kafka source for pyspark {pyspark_version()} is not fetched "
                            f"(no {cache_directory()}): run python -m zkcoord.testing.spark_kafka, "
                            "as scripts/install.sh spark does")
    return marker.read_text().strip()


def jars() -> list[str]:
    """The jars to add to ``spark.jars`` for ``format("kafka")``; raises
    JarCacheError when the install step has not fetched them."""
    source_version()  # raises when the cache is missing or incomplete
    return [str(path) for path in sorted(cache_directory().glob("*.jar"))]


def main() -> int:
    try:
        directory = fetch()
    except JarCacheError as exc:
        print(f"zkcoord.testing.spark_kafka: {exc}", file=sys.stderr)
        return 1
    print(directory)
    return 0


if __name__ == "__main__":
    sys.exit(main())
