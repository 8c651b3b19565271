"""Fetched record batches decoded straight into Arrow columns, for the ``kraft-topic`` source's
tasks. Why not the consumer's records: a task hands Spark columns, and building a
``ConsumerRecord`` per record only to take it apart again cost as much as decoding it.

Why vectorized: even decoded into column lists (``clients.records.decode_columns``, one Python
loop per batch), the records were most of a task's CPU (6.6 of 9.1 seconds of a
300,000-record read under cProfile, docs/analytics.md "Per core, on a standalone cluster").
Here the only per-record Python is finding where each record starts (its length varint); the
fields of all the records of a fetch are then decoded at once with numpy, and keys and values
enter Arrow as views into the fetched bytes (Arrow's binary view layout), which pyarrow casts
to Spark's binary column in C++, without a ``bytes`` object per value.

Records that do not have the common shape (headers, a varint longer than nine bytes) and bytes
that are not well-formed records take ``decode_columns``' path, which decodes headers and
fails with the one line for bytes that cannot be decoded: both paths give the same rows
(``tests/test_spark_topics.py``)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np
import pyarrow as pa

from protos import broker_pb2 as pb

from ..records import CONTROL_FLAG, LOG_APPEND_TIME_FLAG, RecordColumns, _read_zz, decode_columns, records_bytes
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


class _Piece(NamedTuple):
    """A batch slice as ``decode_columns`` takes it: the records' bytes (decompressed), how
    many, and the offsets wanted, [low, high) (-1, -1: every record)."""

    records: bytes
    records_in: int
    base: int
    base_ts: int
    appended: int | None
    low: int
    high: int


class _Irregular(Exception):
    """Records the vectorized path does not decode: ``decode_columns`` decides."""


#: Zero bytes after the fetched bytes: a varint read runs at most ten bytes past a record's
#: end, four of them before positions are checked against it.
_PAD = b"\0" * 64


@dataclass
class Columns:
    """The batch slices of a task's rows so far, decoded into an Arrow batch by ``arrow``."""

    pieces: list[_Piece] = field(default_factory=list)
    #: rows at most: the records of the pieces within their bounds (exact unless a compacted
    #: topic's gaps or a range end inside a batch leave some out)
    rows: int = 0

    def __len__(self) -> int:
        return self.rows

    def add(self, piece: BatchSlice, end: int) -> None:
        """The records of ``piece`` below ``end`` (the task's range) too."""
        b = piece.batch
        first, last = b.base_offset, b.base_offset + b.last_offset_delta
        low, high = piece.start, min(piece.stop, end)
        if first >= low and last < high:
            low = high = -1  # the whole batch: no record is compared with the bounds
            self.rows += b.record_count
        else:
            self.rows += max(0, min(last + 1, high) - max(first, low))
        self.pieces.append(_Piece(records_bytes(b), b.record_count, first, b.base_timestamp,
                                  b.max_timestamp if b.attributes & LOG_APPEND_TIME_FLAG else None, low, high))

    def arrow(self, schema: pa.Schema, topic: str, partition: int, create_time: int) -> pa.RecordBatch:
        """The rows in Spark's Kafka source schema (``schema``): the columns every row shares
        repeated, not listed; headers one null column when no row has any."""
        try:
            return _vectorized(self.pieces, schema, topic, partition, create_time)
        except _Irregular:
            return _decoded(self.pieces, schema, topic, partition, create_time)


def _step(window: int) -> int:
    """How far a record's start is from the one before's, from the record's first two bytes
    (little-endian ``window``): its length varint's bytes plus the length; 0 when the varint
    is longer than two bytes or the length is not positive."""
    lo, hi = window & 0xFF, window >> 8
    if lo < 0x80:
        size, z = 1, lo
    elif hi < 0x80:
        size, z = 2, (lo & 0x7F) | hi << 7
    else:
        return 0
    length = (z >> 1) ^ -(z & 1)
    return size + length if length > 0 else 0


#: ``_step`` of every two bytes: the record loop's one lookup per record.
_STEPS = [_step(w) for w in range(1 << 16)]


def _record_starts(whole: bytes, pieces: list[_Piece]) -> np.ndarray:
    """Where each record of the pieces (laid end to end in ``whole``) starts: the one loop per
    record, since each start follows from the length of the record before; a lookup of its
    first two bytes (``_STEPS``) in a list comprehension, the cheapest loop Python has.
    Records of 8 KiB or more take ``_long_record_starts``."""
    steps = _STEPS
    ends: list[int] = []
    pos = 0
    try:
        for p in pieces:
            stop = pos + len(p.records)
            ends += [pos := pos + steps[whole[pos] | whole[pos + 1] << 8] for _ in range(p.records_in)]
            if pos != stop:
                return _long_record_starts(whole, pieces)
    except IndexError:
        return _long_record_starts(whole, pieces)
    starts = np.array([0, *ends], np.int64)
    if not (starts[1:] > starts[:-1]).all():  # a step of 0: a long length varint (or not a record)
        return _long_record_starts(whole, pieces)
    return starts[:-1]


def _long_record_starts(whole: bytes, pieces: list[_Piece]) -> np.ndarray:
    """``_record_starts`` for length varints of any size; _Irregular when the lengths do not
    tile each piece's bytes exactly."""
    starts: list[int] = []
    add = starts.append
    steps = _STEPS
    pos = 0
    try:
        for p in pieces:
            stop = pos + len(p.records)
            for _ in range(p.records_in):
                add(pos)
                step = steps[whole[pos] | whole[pos + 1] << 8]
                if not step:
                    length, body = _read_zz(whole, pos)
                    if length < 1:
                        raise _Irregular
                    step = body - pos + length
                pos += step
            if pos != stop:  # past it, a length was wrong: the slow path says which
                raise _Irregular
    except (IndexError, ValueError):
        raise _Irregular from None
    return np.array(starts, np.int64)


def _zigzag(buf: np.ndarray, at: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Kafka's zigzag varints (ByteUtils.readVarlong) starting at positions ``at``: their
    values and the positions after them. _Irregular for one longer than nine bytes."""
    b = buf[at]
    raw = (b & 0x7F).astype(np.uint64)
    more = b >= 0x80
    after = at + 1
    shift = 7
    while more.any():
        if shift > 56:
            raise _Irregular
        b = buf[after]
        raw |= np.where(more, (b & 0x7F).astype(np.uint64) << np.uint64(shift), np.uint64(0))
        after = after + more
        more &= b >= 0x80
        shift += 7
    return (raw >> np.uint64(1)).astype(np.int64) ^ -(raw & np.uint64(1)).astype(np.int64), after


def _vectorized(pieces: list[_Piece], schema: pa.Schema, topic: str, partition: int,
                create_time: int) -> pa.RecordBatch:
    whole = b"".join(p.records for p in pieces) + _PAD
    if len(whole) >= 1 << 31:
        raise _Irregular  # a view's position is 32 bits
    start = _record_starts(whole, pieces)
    buf = np.frombuffer(whole, np.uint8)
    length, body = _zigzag(buf, start)
    end = body + length
    ts, at = _zigzag(buf, body + 1)  # after the attributes (unused)
    delta, at = _zigzag(buf, at)
    key_length, key = _zigzag(buf, at)
    if ((key_length < -1) | (key + key_length >= end)).any():
        raise _Irregular
    value_length, value = _zigzag(buf, key + np.maximum(key_length, 0))
    headers = value + np.maximum(value_length, 0)
    if ((value_length < -1) | (headers + 1 != end)).any() or buf[headers].any():
        raise _Irregular  # headers (or bytes that are not records)
    counts = [p.records_in for p in pieces]
    offsets = np.repeat(np.array([p.base for p in pieces], np.int64), counts) + delta
    stamps = np.repeat(np.array([p.base_ts for p in pieces], np.int64), counts) + ts
    appended = [p.appended for p in pieces]
    if any(a is not None for a in appended):
        stamped = np.repeat(np.array([a is not None for a in appended]), counts)
        stamps = np.where(stamped, np.repeat(np.array([a or 0 for a in appended], np.int64), counts), stamps)
    if any(p.low >= 0 for p in pieces):
        low = np.repeat(np.array([p.low for p in pieces], np.int64), counts)
        high = np.repeat(np.array([p.high for p in pieces], np.int64), counts)
        keep = (low < 0) | ((low <= offsets) & (offsets < high))
        offsets, stamps, key, key_length, value, value_length = (
            a[keep] for a in (offsets, stamps, key, key_length, value, value_length))
    n = len(offsets)
    types = [f.type for f in schema]
    data = pa.py_buffer(whole)
    keys = pa.nulls(n, types[0]) if (key_length == -1).all() else _binary(buf, data, key, key_length, types[0])
    columns = [keys, _binary(buf, data, value, value_length, types[1]),
               pa.repeat(pa.scalar(topic, types[2]), n), pa.repeat(pa.scalar(partition, types[3]), n),
               pa.array(offsets, types[4]), pa.array(stamps, _MS).cast(types[5]),
               pa.repeat(pa.scalar(create_time, types[6]), n), pa.nulls(n, types[7])]
    return pa.RecordBatch.from_arrays(columns, schema=schema)


_INLINE = 12  # Arrow's binary view: values of up to 12 bytes sit in the view itself
_COLUMNS = np.arange(_INLINE)


def _binary(buf: np.ndarray, data: pa.Buffer, at: np.ndarray, length: np.ndarray, kind: pa.DataType) -> pa.Array:
    """The values ``buf[at:at + length]`` (length -1: null) as a ``kind`` (binary) column: a
    view per value into ``data`` (Arrow's layout: length, then the value if it fits in 12
    bytes, else its first four bytes, buffer 0 and its position), cast in C++."""
    n = len(at)
    size = np.maximum(length, 0).astype("<i4")
    views = np.zeros((n, 16), np.uint8)
    views[:, :4] = size.view(np.uint8).reshape(n, 4)
    head = buf[at[:, None] + _COLUMNS]
    inline = size <= _INLINE
    views[:, 4:] = np.where((_COLUMNS < size[:, None]) | ~inline[:, None], head, 0)
    words = views.view("<i4")
    words[~inline, 2] = 0
    words[~inline, 3] = at[~inline]
    null = length < 0
    validity = pa.py_buffer(np.packbits(~null, bitorder="little")) if null.any() else None
    return pa.Array.from_buffers(pa.binary_view(), n, [validity, pa.py_buffer(views), data],
                                 null_count=int(null.sum())).cast(kind)


def _decoded(pieces: list[_Piece], schema: pa.Schema, topic: str, partition: int,
             create_time: int) -> pa.RecordBatch:
    """The rows through ``decode_columns`` (a loop per record, headers decoded), which raises
    CORRUPT_MESSAGE for bytes that are not records."""
    cols = RecordColumns()
    for p in pieces:
        try:
            decode_columns(p.records, p.records_in, p.base, p.base_ts, p.appended, p.low, p.high, cols)
        except (ValueError, IndexError) as e:
            detail = "the bytes end inside a record" if isinstance(e, IndexError) else e
            raise KafkaError(ErrorCode.CORRUPT_MESSAGE, f"Record batch at offset {p.base} holds records that cannot "
                                                        f"be decoded: {detail}") from None
    n = len(cols.offsets)
    types = [f.type for f in schema]
    if cols.headers:
        listed = pa.array([[{"key": k, "value": v} for k, v in h] if h else None for h in cols.headers], types[7])
    else:
        listed = pa.nulls(n, types[7])
    columns = [pa.array(cols.keys, types[0]), pa.array(cols.values, types[1]),
               pa.repeat(pa.scalar(topic, types[2]), n), pa.repeat(pa.scalar(partition, types[3]), n),
               pa.array(cols.offsets, types[4]), pa.array(cols.timestamps, _MS).cast(types[5]),
               pa.repeat(pa.scalar(create_time, types[6]), n), listed]
    return pa.RecordBatch.from_arrays(columns, schema=schema)


_MS = pa.timestamp("ms", tz="UTC")  # a record's timestamp, before Spark's microseconds
