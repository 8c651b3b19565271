"""Fetched record batches decoded straight into Arrow columns, for the ``kraft-topic`` source's
tasks. Why not the consumer's records: a task hands Spark columns, and building a
``ConsumerRecord`` per record only to take it apart again cost as much as decoding it. Here
each batch's records (Kafka's DefaultRecord, ``clients.records``) are read in one loop that
appends to the columns, with the common shapes of a record's varints (one or two bytes, a null
key, no headers) decoded inline; each column then enters Arrow in one call."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

import pyarrow as pa

from protos import broker_pb2 as pb

from ..records import CONTROL_FLAG, LOG_APPEND_TIME_FLAG, Header, _read_zz, read_field, read_headers, records_bytes
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
class Columns:
    """The columns of the rows read so far, in offset order."""

    offsets: list[int] = field(default_factory=list)
    timestamps: list[int] = field(default_factory=list)
    keys: list[bytes | None] = field(default_factory=list)
    values: list[bytes | None] = field(default_factory=list)
    #: one entry per row, None without headers; empty while no row has any
    headers: list[tuple[Header, ...] | None] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.offsets)

    def add(self, piece: BatchSlice, end: int) -> None:
        """The records of ``piece`` below ``end`` (the task's range) too."""
        b = piece.batch
        low, high = piece.start, min(piece.stop, end)
        if b.base_offset >= low and b.base_offset + b.last_offset_delta < high:
            low = high = -1  # the whole batch: no record is compared with the bounds
        try:
            _decode(records_bytes(b), b.record_count, b.base_offset, b.base_timestamp,
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


def _decode(data: bytes, count: int, base: int, base_ts: int, appended: int | None, low: int, high: int,
            out: Columns) -> None:
    """Append the ``count`` records of ``data`` whose offsets lie in [low, high) (every one
    when ``low`` is -1) to ``out``. ValueError or IndexError when the bytes do not hold
    exactly ``count`` well-formed records. Every varint is decoded inline when it is one or
    two bytes long (a record's length, deltas and lengths below 8192), through ``_read_zz`` else."""
    offsets, stamps, keys, values, headers = out.offsets, out.timestamps, out.keys, out.values, out.headers
    add_offset, add_stamp, add_key, add_value = offsets.append, stamps.append, keys.append, values.append
    pos, n = 0, len(data)
    for _ in range(count):
        b = data[pos]
        if b < 0x80:
            length, pos = (b >> 1) ^ -(b & 1), pos + 1
        elif data[pos + 1] < 0x80:
            z = (b & 0x7F) | data[pos + 1] << 7
            length, pos = (z >> 1) ^ -(z & 1), pos + 2
        else:
            length, pos = _read_zz(data, pos)
        end = pos + length
        if length < 1 or end > n:
            raise ValueError(f"a record length of {length}")
        p = pos + 1  # after the attributes
        b = data[p]
        if b < 0x80:
            ts, p = (b >> 1) ^ -(b & 1), p + 1
        elif data[p + 1] < 0x80:
            z = (b & 0x7F) | data[p + 1] << 7
            ts, p = (z >> 1) ^ -(z & 1), p + 2
        else:
            ts, p = _read_zz(data, p)
        b = data[p]
        if b < 0x80:
            od, p = (b >> 1) ^ -(b & 1), p + 1
        elif data[p + 1] < 0x80:
            z = (b & 0x7F) | data[p + 1] << 7
            od, p = (z >> 1) ^ -(z & 1), p + 2
        else:
            od, p = _read_zz(data, p)
        b = data[p]
        key: bytes | None
        value: bytes | None
        if b == 1:  # zigzag(-1): a null key
            key, p = None, p + 1
        else:
            kl, p = _read_zz(data, p)
            key, p = read_field(data, p, kl, end)
        b = data[p]
        if b < 0x80:
            vl, p = (b >> 1) ^ -(b & 1), p + 1
        elif data[p + 1] < 0x80:
            z = (b & 0x7F) | data[p + 1] << 7
            vl, p = (z >> 1) ^ -(z & 1), p + 2
        else:
            vl, p = _read_zz(data, p)
        if 0 <= vl and p + vl <= end:
            value, p = data[p:p + vl], p + vl
        else:
            value, p = read_field(data, p, vl, end)
        if data[p] == 0 and p + 1 == end:  # no headers
            hs = None
        else:
            hs = read_headers(data, p, end)
        pos = end
        offset = base + od
        if low >= 0 and not low <= offset < high:
            continue
        add_offset(offset)
        add_stamp(base_ts + ts if appended is None else appended)
        add_key(key)
        add_value(value)
        if hs is not None or headers:
            if not headers:
                headers.extend([None] * (len(offsets) - 1))  # the rows before had none
            headers.append(hs)
    if pos != n:
        raise ValueError(f"{n - pos} bytes after the last of {count} records")
