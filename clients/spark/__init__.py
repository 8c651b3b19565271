"""Spark over topics: the ``kraft-topic`` data source (``source.py``) reads topics into
DataFrames, in batch and in Structured Streaming, and writes DataFrames to topics, with the
options and schema of Spark's Kafka source. It needs the ``analytics`` extra (PySpark).

    from clients.spark import register
    register(spark)
    spark.read.format("kraft-topic").option("bootstrap.servers", "h:9092").option("subscribe", "t").load()
"""
from __future__ import annotations

from typing import Any


def register(spark: Any) -> None:
    """Make ``format("kraft-topic")`` available in this Spark session."""
    from .source import TopicDataSource
    spark.dataSource.register(TopicDataSource)
