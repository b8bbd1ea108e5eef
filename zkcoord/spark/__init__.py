"""The ``zkcoord`` PySpark data source (batch and streaming); see docs/SPARK.md.

>>> from zkcoord.spark import register
>>> register(spark)  # doctest: +SKIP
>>> spark.read.format("zkcoord").option("zookeeper", "127.0.0.1:2181").option("subscribe", "t").load()  # doctest: +SKIP
"""

from __future__ import annotations


def register(spark) -> None:
    """Make ``format("zkcoord")`` available in ``spark``."""
    from zkcoord.spark.source import ZkcoordDataSource

    spark.dataSource.register(ZkcoordDataSource)


__all__ = ["register"]
