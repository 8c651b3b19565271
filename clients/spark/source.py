"""``spark.read.format("kraft-topic")``: topics as DataFrames, in batch and in Structured
Streaming, and DataFrames written to topics (Spark 4's Python Data Source API).

The driver plans (which partitions, which offsets: ``ranges``), each task reads one offset
range from the partition's leader or writes its rows (``tasks``). A streaming query keeps its
offsets, {topic: {partition: next offset}}, in Spark's checkpoint: a restarted query plans
the same micro-batch again from there and reads exactly those offsets again, so a sink that
is idempotent per batch (Spark's file sinks, foreachBatch by batch id) holds each record
once. Options and schema follow Spark's Kafka source (docs/analytics.md, "Topics").
"""
from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (DataSource, DataSourceReader, DataSourceStreamReader, DataSourceStreamWriter,
                                    DataSourceWriter, InputPartition, WriterCommitMessage)
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow
from pyspark.sql.types import StructType

from ..admin import Admin
from .options import EARLIEST, LATEST, TopicOptions, TopicPartition, TopicSourceError, bootstrap_of, lowered
from .ranges import OffsetRange, Offsets, from_json, partitions, resolve, split, to_json
from .tasks import SCHEMA, read_range, run, write_rows

NAME = "kraft-topic"

WRITABLE = {"key", "value", "topic", "partition", "headers"}


def _with_admin(bootstrap: str, fn: Any) -> Any:
    """``fn(admin)`` run to its answer on this process's event loop (planning is synchronous)."""
    async def ask() -> Any:
        async with Admin(bootstrap) as admin:
            return await fn(admin)
    return run(ask())


class TopicDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> StructType:
        return SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        return TopicReader(TopicOptions.parse(self.options))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return TopicStreamReader(TopicOptions.parse(self.options, streaming=True))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        return TopicWriter(*_write_options(self.options, schema))

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        return TopicStreamWriter(*_write_options(self.options, schema))


def _read(opts: TopicOptions, partition: InputPartition) -> Iterator[pa.RecordBatch]:
    assert isinstance(partition, OffsetRange)
    return read_range(opts.bootstrap, partition, fail_on_data_loss=opts.fail_on_data_loss,
                      poll_timeout_ms=opts.poll_timeout_ms, isolation_level=opts.isolation_level)


class TopicReader(DataSourceReader):
    """A batch read: every record between the starting and ending offsets."""

    def __init__(self, opts: TopicOptions) -> None:
        if opts.starting == "latest":
            raise TopicSourceError("startingOffsets 'latest' is not valid for a batch read (it would read nothing)")
        self.opts = opts

    def partitions(self) -> Sequence[InputPartition]:
        async def plan(admin: Admin) -> list[OffsetRange]:
            tps = await partitions(admin, self.opts)
            committed = self.opts.read_committed
            starts = await resolve(admin, self.opts.starting, tps, default=EARLIEST, read_committed=committed)
            ends = await resolve(admin, self.opts.ending, tps, default=LATEST, read_committed=committed)
            for tp in tps:
                if ends[tp] < starts[tp]:
                    raise TopicSourceError(f"the ending offset {ends[tp]} of {tp[0]}-{tp[1]} is before its starting "
                                           f"offset {starts[tp]}")
            return split(starts, ends, self.opts.max_records_per_partition)
        return _with_admin(self.opts.bootstrap, plan)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read(self.opts, partition)


class TopicStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batches: each reads from where the last ended to the high watermarks, at most
    ``maxOffsetsPerTrigger`` records, shared among the partitions by what each has waiting.
    With Trigger.AvailableNow, no further than the high watermarks when the query started."""

    def __init__(self, opts: TopicOptions) -> None:
        self.opts = opts
        self.target: dict[TopicPartition, int] | None = None

    def prepareForTriggerAvailableNow(self) -> None:
        async def now(admin: Admin) -> dict[TopicPartition, int]:
            tps = await partitions(admin, self.opts)
            return await resolve(admin, "latest", tps, default=LATEST, read_committed=self.opts.read_committed)
        self.target = _with_admin(self.opts.bootstrap, now)

    def initialOffset(self) -> Offsets:
        async def first(admin: Admin) -> Offsets:
            tps = await partitions(admin, self.opts)
            return to_json(await resolve(admin, self.opts.starting, tps, default=EARLIEST,
                                         read_committed=self.opts.read_committed))
        return _with_admin(self.opts.bootstrap, first)

    def getDefaultReadLimit(self) -> ReadLimit:
        n = self.opts.max_offsets_per_trigger
        return ReadMaxRows(n) if n else ReadAllAvailable()

    def latestOffset(self, start: Offsets, limit: ReadLimit) -> Offsets:
        async def latest(admin: Admin) -> Offsets:
            tps = await partitions(admin, self.opts, missing_ok=True)
            if self.target is not None:
                tps = [tp for tp in tps if tp in self.target]
            done = from_json(start)
            gone = sorted(set(done) - set(tps))
            if gone and self.opts.fail_on_data_loss:
                raise TopicSourceError(f"partitions {', '.join(f'{t}-{p}' for t, p in gone)} are gone (a topic was "
                                       f"deleted); set failOnDataLoss=false to go on without them")
            if not tps and not done:
                raise TopicSourceError("no partition to read: the topics do not exist")
            new = [tp for tp in tps if tp not in done]
            committed = self.opts.read_committed
            starts = {**{tp: done[tp] for tp in tps if tp in done},  # new partitions: from the start
                      **(await resolve(admin, "earliest", new, default=EARLIEST, read_committed=committed))}
            ends = await resolve(admin, "latest", tps, default=LATEST, read_committed=committed)
            if self.target is not None:
                ends = {tp: min(end, self.target[tp]) for tp, end in ends.items()}
            for tp in tps:
                if ends[tp] < starts[tp]:
                    if self.opts.fail_on_data_loss:
                        raise TopicSourceError(f"{tp[0]}-{tp[1]} ends at {ends[tp]}, before the {starts[tp]} already "
                                               f"read (the topic was deleted and created again?); set "
                                               f"failOnDataLoss=false to read it from its start")
                    starts[tp] = ends[tp]
            if isinstance(limit, ReadMaxRows):
                ends = _capped(starts, ends, limit.max_rows)
            return to_json(ends)
        return _with_admin(self.opts.bootstrap, latest)

    def partitions(self, start: Offsets, end: Offsets) -> Sequence[InputPartition]:
        starts, ends = from_json(start), from_json(end)
        new = [tp for tp in ends if tp not in starts]
        if new:  # appeared in this micro-batch: from where their logs start (as planned)
            starts.update(_with_admin(self.opts.bootstrap, lambda admin: resolve(
                admin, "earliest", new, default=EARLIEST, read_committed=self.opts.read_committed)))
        return split(starts, ends, self.opts.max_records_per_partition)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read(self.opts, partition)

    def commit(self, end: Offsets) -> None:
        """Nothing to do: the offsets live in Spark's checkpoint, not in a consumer group."""


def _capped(starts: dict[TopicPartition, int], ends: dict[TopicPartition, int], most: int) -> dict[TopicPartition, int]:
    """At most ``most`` offsets in all, each partition's share in proportion to what it has
    waiting (as Spark's Kafka source divides maxOffsetsPerTrigger)."""
    waiting = {tp: ends[tp] - starts.get(tp, 0) for tp in ends}
    total = sum(waiting.values())
    if total <= most:
        return ends
    out = {}
    for tp, n in waiting.items():
        share = n * most // total
        out[tp] = starts.get(tp, 0) + max(share, 1 if n else 0)
    return out


# -- writing ---------------------------------------------------------------------------------------

@dataclass
class Written(WriterCommitMessage):
    records: int


def _write_options(options: Mapping[str, str], schema: StructType) -> tuple[str, str | None, dict[str, Any]]:
    o = lowered(options)
    bootstrap = bootstrap_of(o)
    names = {f.name for f in schema.fields}
    if "value" not in names:
        raise TopicSourceError("the DataFrame to write needs a 'value' column (and may have key, topic, partition, "
                               "headers)")
    extra = sorted(names - WRITABLE)
    if extra:
        raise TopicSourceError(f"columns {', '.join(extra)} cannot be written: a record has key, value, topic, "
                               f"partition and headers")
    topic = o.get("topic")
    if not topic and "topic" not in names:
        raise TopicSourceError("topic option required when no 'topic' attribute is present in the data")
    producer = {"compression_type": o.get("compression.type", "none"), "linger_ms": int(o.get("linger.ms", "5"))}
    return bootstrap, topic, producer


class _Sends:
    """What a writing task does, batch or streaming: send its rows, answer how many."""

    def __init__(self, bootstrap: str, topic: str | None, producer: dict[str, Any]) -> None:
        self.bootstrap, self.topic, self.producer = bootstrap, topic, producer

    def write(self, iterator: Iterator[Any]) -> WriterCommitMessage:
        return Written(write_rows(self.bootstrap, iterator, self.topic, self.producer))


class TopicWriter(_Sends, DataSourceWriter):
    """Each task sends its rows with an idempotent producer, acks=all: a batch the producer
    retries is written once. A task Spark runs again after a failure sends its rows again
    (at least once across task attempts)."""


class TopicStreamWriter(_Sends, DataSourceStreamWriter):
    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Every record of the micro-batch is acknowledged once its tasks have returned."""
