"""What a Spark task does: read one offset range with the consumer, as Arrow record batches in
the Kafka source's schema; or write its rows with the idempotent producer (acks=all).

Tasks run in Spark's Python workers, which are plain synchronous code and serve one task after
another, so the asyncio clients run on one event loop per process that is never closed: gRPC's
asyncio support binds itself to the first loop it meets in a process."""
from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable, Iterator
from typing import Any, Awaitable, TypeVar

import pyarrow as pa
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import (ArrayType, BinaryType, IntegerType, LongType, StringType, StructField, StructType,
                               TimestampType)

from protos import broker_pb2 as pb

from ..cluster_view import CLIENT_ERRORS
from ..consumer import Consumer, TopicPartition
from ..producer import Producer
from .columns import Columns, batch_slice
from .options import TopicSourceError
from .ranges import OffsetRange

T = TypeVar("T")
BATCH_ROWS = 8192
_loop: asyncio.AbstractEventLoop | None = None


def run(work: Awaitable[T]) -> T:
    """``work`` to completion on this process's event loop."""
    global _loop
    if _loop is None:
        _loop = asyncio.new_event_loop()
    return _loop.run_until_complete(work)
CREATE_TIME = 0  # timestampType: Kafka's CreateTime
#: Spark's Kafka source schema (spark-sql-kafka), headers included.
SCHEMA = StructType([
    StructField("key", BinaryType(), True),
    StructField("value", BinaryType(), True),
    StructField("topic", StringType(), False),
    StructField("partition", IntegerType(), False),
    StructField("offset", LongType(), False),
    StructField("timestamp", TimestampType(), False),
    StructField("timestampType", IntegerType(), False),
    StructField("headers", ArrayType(StructType([StructField("key", StringType(), False),
                                                 StructField("value", BinaryType(), True)]), False), True),
])
ARROW_SCHEMA = to_arrow_schema(SCHEMA, timezone="UTC")


class _BatchConsumer(Consumer):
    """The consumer, buffering fetched batches as slices for ``Columns`` to decode rather
    than as records (its fetching, positions, retries and read_committed filtering as they are)."""

    def _buffered(self, batch: pb.RecordBatch, tp: TopicPartition, start: int, stop: int) -> Iterable[Any]:
        piece = batch_slice(batch, start, stop)
        return () if piece is None else (piece,)


#: Batch slices a poll returns at most: a fetch answer's worth (8 MiB, some 30 batches of our
#: producer's), so that one Arrow batch holds the rows of about one fetch.
POLL_SLICES = 64


def read_range(bootstrap: str, r: OffsetRange, *, fail_on_data_loss: bool, poll_timeout_ms: int,
               isolation_level: str = "read_committed") -> Iterator[pa.RecordBatch]:
    """The records of ``r`` from the partition's leader, in offset order (a compacted topic
    has gaps; so do transaction markers, and with read_committed, aborted transactions), as
    Arrow batches of at least ``BATCH_ROWS`` rows (the last one fewer; a compacted topic's
    gaps may make one fewer, since rows are counted before they are decoded). Offsets retention has
    removed fail the task with ``fail_on_data_loss``, and are skipped without it."""
    if r.end <= r.start:
        return
    consumer = _BatchConsumer(bootstrap, auto_offset_reset="none" if fail_on_data_loss else "earliest",
                              enable_auto_commit=False, max_poll_records=POLL_SLICES,
                              max_partition_fetch_bytes=8 << 20, isolation_level=isolation_level)
    tp = (r.topic, r.partition)
    try:
        run(consumer.start())
        run(consumer.assign([tp]))
        consumer.seek(r.topic, r.partition, r.start)
        rows = Columns()
        progress = time.monotonic()
        while True:
            position = consumer.position(*tp)
            if position is not None and position >= r.end:
                break
            got: list[Any] = run(consumer.poll(200))  # short: a range may end in records that are skipped
            if got:
                progress = time.monotonic()
                for piece in got:
                    rows.add(piece, r.end)
                if len(rows) >= BATCH_ROWS:
                    yield from _nonempty(rows.arrow(ARROW_SCHEMA, r.topic, r.partition, CREATE_TIME))
                    rows = Columns()
            elif time.monotonic() - progress > poll_timeout_ms / 1000:
                raise TopicSourceError(f"no record of {r.topic}-{r.partition} at offsets {position}..{r.end} "
                                       f"arrived within {poll_timeout_ms} ms (kafkaConsumer.pollTimeoutMs)")
        if len(rows):
            yield from _nonempty(rows.arrow(ARROW_SCHEMA, r.topic, r.partition, CREATE_TIME))
    except TopicSourceError:
        raise
    except CLIENT_ERRORS as e:
        if "out of range" in str(e):
            raise TopicSourceError(
                f"offsets {r.start} to {r.end} of {r.topic}-{r.partition} are no longer in the log (retention "
                f"removed them, or the topic was deleted and created again); set failOnDataLoss=false to skip "
                f"what is gone") from None
        raise TopicSourceError(f"reading {r.topic}-{r.partition}: {e}") from None
    finally:
        run(consumer.close())


def _nonempty(batch: pa.RecordBatch) -> Iterator[pa.RecordBatch]:
    """``batch`` unless it has no row: ``Columns`` counts rows before decoding them, at most
    (a poll may return the batch after the range's end, none of whose records are in it)."""
    if batch.num_rows:
        yield batch


def _bytes(v: Any) -> bytes | None:
    if v is None or isinstance(v, bytes):
        return v
    if isinstance(v, str):
        return v.encode()
    return bytes(v)


def write_rows(bootstrap: str, rows: Iterator[Any], topic: str | None, producer_options: dict[str, Any]) -> int:
    """Send each row (columns key, value, topic, partition, headers as Spark's Kafka sink has
    them) with the idempotent producer, acks=all; returns how many, once all are acknowledged.
    A row without a topic (no column, no ``topic`` option) fails the task."""
    async def send() -> int:
        n = 0
        async with Producer(bootstrap, acks="all", **producer_options) as p:
            futures = []
            for row in rows:
                d = row.asDict() if hasattr(row, "asDict") else dict(row)
                name = topic or d.get("topic")  # the option wins, as in Spark's Kafka sink
                if not name:
                    raise TopicSourceError("a row has no topic: give a 'topic' column or the 'topic' option")
                headers = [(h["key"], _bytes(h["value"])) for h in d.get("headers") or ()]
                futures.append(await p.send(name, _bytes(d.get("value")), _bytes(d.get("key")),
                                            partition=d.get("partition"), headers=headers))
                n += 1
            await p.flush()
            for f in futures:
                await f
        return n

    try:
        return run(send())
    except CLIENT_ERRORS as e:
        raise TopicSourceError(f"writing to the brokers failed: {e}") from None
