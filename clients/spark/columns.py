"""Fetched record batches decoded straight into Arrow columns, for the ``kraft-topic`` source's
tasks. Why not the consumer's records: a task hands Spark columns, and building a
``ConsumerRecord`` per record only to take it apart again cost as much as decoding it. Here
each batch's records (Kafka's DefaultRecord, ``clients.records``) are read in one loop that
appends to the columns, with the common shapes of a record's varints (one or two bytes, a null
key, no headers) decoded inline; each column then enters Arrow in one call."""
from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import pyarrow as pa

from protos import broker_pb2 as pb

from ..records import CONTROL_FLAG, LOG_APPEND_TIME_FLAG, RecordColumns, decode_columns, records_bytes
from common.errors import ErrorCode, KafkaError


class BatchSlice(NamedTuple):
    """The part of a fetched batch a reader takes: offsets ``start`` (a fetch may begin inside
    a batch) to ``stop`` (exclusive: the high watermark or last stable offset). ``offset``
    is the last offset it covers, the consumer's next position less one."""

    batch: pb.RecordBatch
    start: int
    stop: int
    offset: int


def batch_slice(batch: pb.RecordBatch, start: int, stop: int) -> BatchSlice | None:
    """What a reader takes of ``batch`` between ``start`` and ``stop``; None for a control
    batch (a transaction marker), which readers never see."""
    if batch.attributes & CONTROL_FLAG:
        return None
    return BatchSlice(batch, start, stop, min(batch.base_offset + batch.last_offset_delta, stop - 1))


@dataclass
class Columns(RecordColumns):
    """The columns of the rows read so far, in offset order."""

    def __len__(self) -> int:
        return len(self.offsets)

    def add(self, piece: BatchSlice, end: int) -> None:
        """The records of ``piece`` below ``end`` (the task's range) too."""
        b = piece.batch
        low, high = piece.start, min(piece.stop, end)
        if b.base_offset >= low and b.base_offset + b.last_offset_delta < high:
            low = high = -1  # the whole batch: no record is compared with the bounds
        try:
            decode_columns(records_bytes(b), b.record_count, b.base_offset, b.base_timestamp,
                    b.max_timestamp if b.attributes & LOG_APPEND_TIME_FLAG else None, low, high, self)
        except (ValueError, IndexError) as e:
            detail = "the bytes end inside a record" if isinstance(e, IndexError) else e
            raise KafkaError(ErrorCode.CORRUPT_MESSAGE, f"Record batch at offset {b.base_offset} holds records that cannot "
                                                        f"be decoded: {detail}") from None

    def arrow(self, schema: pa.Schema, topic: str, partition: int, create_time: int) -> pa.RecordBatch:
        """The rows in Spark's Kafka source schema (``schema``): the columns every row shares
        repeated, not listed; headers one null column when no row has any."""
        n = len(self.offsets)
        types = [f.type for f in schema]
        if self.headers:
            listed = pa.array([[{"key": k, "value": v} for k, v in h] if h else None for h in self.headers], types[7])
        else:
            listed = pa.nulls(n, types[7])
        columns = [pa.array(self.keys, types[0]), pa.array(self.values, types[1]),
                   pa.repeat(pa.scalar(topic, types[2]), n), pa.repeat(pa.scalar(partition, types[3]), n),
                   pa.array(self.offsets, types[4]), pa.array(self.timestamps, _MS).cast(types[5]),
                   pa.repeat(pa.scalar(create_time, types[6]), n), listed]
        return pa.RecordBatch.from_arrays(columns, schema=schema)


_MS = pa.timestamp("ms", tz="UTC")  # a record's timestamp, before Spark's microseconds


