"""The ``kraft`` PySpark data source (Spark 4's Python Data Source API).

    from metadata.analytics.source import register
    register(spark)
    spark.read.format("kraft").option("table", "partitions").load("/var/kraft/meta")

Options, tables and schemas are in docs/analytics.md; the planning is in ``plan``. Spark runs
``schema``/``reader``/``partitions`` in a Python worker on the driver's machine and ``read``
in tasks, so the path must be readable where the tasks run (local mode, or a shared
filesystem on a cluster).
"""
from __future__ import annotations

from collections.abc import Iterator, Sequence

import pyarrow as pa
from pyspark.sql import SparkSession
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from . import plan as P
from .schemas import TABLES

NAME = "kraft"


class KraftDataSource(DataSource):
    """Tables of a metadata snapshot file or a metadata log directory."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> StructType:
        return TABLES[P.ReadOptions.parse(self.options).table]

    def reader(self, schema: StructType) -> DataSourceReader:
        return KraftReader(P.ReadOptions.parse(self.options))


class KraftReader(DataSourceReader):
    def __init__(self, options: P.ReadOptions) -> None:
        self.options = options

    def partitions(self) -> Sequence[InputPartition]:
        return P.plan(self.options)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return P.read(partition)


def register(spark: SparkSession) -> None:
    """Make ``spark.read.format("kraft")`` available in this session."""
    spark.dataSource.register(KraftDataSource)
