"""The ``zkcoord`` PySpark data source (batch and streaming); see docs/SPARK.md.

>>> from zkcoord.spark import register
>>> spark = SparkSession.builder.config("spark.jars", jar()).getOrCreate()  # doctest: +SKIP
>>> register(spark)  # doctest: +SKIP
>>> spark.read.format("zkcoord").option("zookeeper", "127.0.0.1:2181").option("subscribe", "t").load()  # doctest: +SKIP

Two paths serve ``format("zkcoord")``, planned by the same Python code:

* the JVM path, when the session was started with the source's jar
  (``spark.jars``, see :func:`jar`): executors read in the JVM
  (zkcoord/spark/jvm), and plans are made in this driver process
  (:mod:`zkcoord.spark.bridge`);
* the Python data source (:mod:`zkcoord.spark.source`) otherwise: plans and
  reads in Spark's Python workers.

Layer 8 of the map in docs/DESIGN.md: it may import every package below it
(the member side for its driver's membership, fetch, admin, zk and the
base modules); only the drill, the demo and the command line could import
it, and none does.
"""

from __future__ import annotations

import logging
from typing import Optional

log = logging.getLogger(__name__)

PYTHON_SOURCE_NAME = "zkcoord-python"  # the Python path, by name, next to the JVM one


def jar() -> str:
    """The path of the JVM source's jar, for ``spark.jars`` (or
    spark-submit's ``--jars``); raises JvmBuildError when it is not built
    (``python -m zkcoord.spark.jvm`` builds it)."""
    from zkcoord.spark.jvm import JvmBuildError, built_jar, jar_path

    found = built_jar()
    if found is None:
        raise JvmBuildError(f"{jar_path().name} is not built: run python -m zkcoord.spark.jvm")
    return str(found)


def register(spark, *, jvm: Optional[bool] = None) -> bool:
    """Make ``format("zkcoord")`` available in ``spark``; returns whether
    it reads on the JVM path.

    ``jvm``: None takes the JVM path when the session has the jar, True
    requires it, False keeps the Python data source. The Python source is
    also registered as ``format("zkcoord-python")`` in every case."""
    from zkcoord.spark import bridge
    from zkcoord.spark.errors import SparkSourceError
    from zkcoord.spark.source import ZkcoordDataSource, named

    spark.dataSource.register(named(PYTHON_SOURCE_NAME))
    loaded = bridge.jvm_source_loaded(spark)
    if jvm and not loaded:
        raise SparkSourceError("the session was started without the zkcoord source's jar: "
                           "SparkSession.builder.config('spark.jars', zkcoord.spark.jar())")
    if loaded and jvm is not False:
        bridge.install(spark)
        return True
    if loaded:
        raise SparkSourceError("format('zkcoord') is the JVM source in a session started with its jar; "
                           f"read with format({PYTHON_SOURCE_NAME!r}) for the Python data source")
    spark.dataSource.register(ZkcoordDataSource)
    log.info("format('zkcoord') reads through Spark's Python workers: start the session with "
             "spark.jars=zkcoord.spark.jar() for the faster JVM reader")
    return False


__all__ = ["PYTHON_SOURCE_NAME", "jar", "register"]
