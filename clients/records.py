"""Record batches: how a producer builds one, how a leader checks and stamps one, how a reader
gets the records back (Kafka's RecordBatch v2: its header fields carried as the ``RecordBatch``
protobuf, its records in Kafka's own encoding, so the Kafka listener converts a batch by
packing its header and nothing else).

The CRC is Kafka's: CRC-32C over ``attributes, last_offset_delta, base_timestamp,
max_timestamp, producer_id, producer_epoch, base_sequence, record_count`` packed big-endian
(Kafka's widths, producer id -1 when absent) and then the records as sent (compressed, if the
attributes name a codec). Like Kafka's, it leaves out the two fields the leader rewrites (base
offset and partition leader epoch), so it is computed once by the producer and checked by the
leader, every follower and every consumer.

A stored batch is a *frame*: the batch encoded as field 1 of ``RecordBatchSet``, so that a
fetch answer is stored frames concatenated, read from RocksDB and sent without decoding.
"""
from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from itertools import repeat
from typing import Any, NamedTuple

import crc32c
from google.protobuf.message import DecodeError

from protos import broker_pb2 as pb

from .compression import CODEC_MASK, MAX_UNCOMPRESSED_BYTES, Codec, CompressionError, compress, decompress
from common.errors import ErrorCode, KafkaError

NO_PRODUCER_ID = -1
#: Batch attribute bits beside the codec (Kafka's DefaultRecordBatch): a transactional
#: producer's batch, and a control batch (a transaction marker, written by the broker).
TRANSACTIONAL_FLAG = 0x10
CONTROL_FLAG = 0x20
#: Attribute bit 3, the timestamp type: set, the batch's max timestamp is the time the leader
#: appended it (LogAppendTime) and is every record's timestamp.
LOG_APPEND_TIME_FLAG = 0x08
#: Kafka's ControlRecordType of a transaction marker, its key's second field.
ABORT_MARKER, COMMIT_MARKER = 0, 1
_MARKER_KEY = struct.Struct(">hh")     # version 0, type
_MARKER_VALUE = struct.Struct(">hi")   # version 0, coordinator epoch (Kafka's EndTransactionMarker)
_CRC_HEADER = struct.Struct(">hiqqqhii")
_FRAME_TAG = b"\x0a"  # RecordBatchSet.batches: field 1, length-delimited
_RECORDS_TAG = b"\x42"  # RecordBatch.records: field 8, length-delimited

Header = tuple[str, bytes | None]


class ConsumerRecord(NamedTuple):
    """A record as a consumer sees it (a named tuple: consumers make them by the million)."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...] = ()
    leader_epoch: int = -1


class ProducerRecord(NamedTuple):
    """A record as ``Producer.send`` was given it (Kafka's ProducerRecord): what producer
    interceptors see and may replace, before the serializers; ``partition`` and ``timestamp``
    None until chosen."""

    topic: str
    value: Any
    key: Any = None
    partition: int | None = None
    timestamp: int | None = None
    headers: tuple[Header, ...] = ()


def batch_crc(batch: pb.RecordBatch, records: bytes | memoryview | None = None) -> int:
    """Kafka's CRC of ``batch`` (``records``: its records, when the caller has them already:
    each read of a protobuf's bytes field copies them)."""
    pid = batch.producer_id if batch.HasField("producer_id") else NO_PRODUCER_ID
    head = _CRC_HEADER.pack(batch.attributes, batch.last_offset_delta, batch.base_timestamp,
                            batch.max_timestamp, pid, batch.producer_epoch, batch.base_sequence,
                            batch.record_count)
    return crc32c.crc32c(batch.records if records is None else records, crc32c.crc32c(head))


def build_batch(entries: Sequence[tuple[bytes | None, bytes | None, int, Sequence[Header]]],
                codec: Codec = Codec.NONE) -> pb.RecordBatch:
    """A batch of ``(key, value, timestamp ms, headers)``, its records compressed with
    ``codec``; base offset and epoch left for the leader to assign, producer fields for
    ``set_producer``."""
    builder = RecordsBuilder()
    for key, value, ts, headers in entries:
        builder.append(key, value, ts, headers)
    return builder.build(codec)


def set_producer(batch: pb.RecordBatch, producer_id: int, epoch: int, base_sequence: int,
                 transactional: bool = False) -> None:
    """Stamp an idempotent producer's id, epoch and sequence on a batch (and its CRC), and the
    transactional attribute for a batch of a transaction."""
    batch.producer_id, batch.producer_epoch, batch.base_sequence = producer_id, epoch, base_sequence
    if transactional:
        batch.attributes |= TRANSACTIONAL_FLAG
    batch.crc = batch_crc(batch)


def set_log_append_time(batch: pb.RecordBatch, now_ms: int) -> None:
    """A leader stamping a batch for a topic with ``message.timestamp.type=LogAppendTime``
    (Kafka's setMaxTimestamp(LOG_APPEND_TIME, now)): the max timestamp and the timestamp-type
    bit, and the CRC that covers both; the records are untouched."""
    batch.max_timestamp = now_ms
    batch.attributes |= LOG_APPEND_TIME_FLAG
    batch.crc = batch_crc(batch)


def is_transactional(batch: pb.RecordBatch) -> bool:
    return bool(batch.attributes & TRANSACTIONAL_FLAG)


def is_control(batch: pb.RecordBatch) -> bool:
    return bool(batch.attributes & CONTROL_FLAG)


def marker_batch(producer_id: int, epoch: int, commit: bool, coordinator_epoch: int, timestamp: int) -> pb.RecordBatch:
    """A transaction marker: a transactional control batch of one record whose key is the
    marker's type and whose value is Kafka's EndTransactionMarker, as consumers skip it."""
    key = _MARKER_KEY.pack(0, COMMIT_MARKER if commit else ABORT_MARKER)
    batch = pb.RecordBatch(base_offset=0, partition_leader_epoch=-1, last_offset_delta=0, base_timestamp=timestamp,
                           max_timestamp=timestamp, record_count=1, attributes=TRANSACTIONAL_FLAG | CONTROL_FLAG,
                           records=encode_records([(key, _MARKER_VALUE.pack(0, coordinator_epoch), timestamp, ())],
                                                  timestamp),
                           producer_id=producer_id, producer_epoch=epoch, base_sequence=-1)
    batch.crc = batch_crc(batch)
    return batch


def marker_commits(batch: pb.RecordBatch) -> bool:
    """Whether a marker batch commits (else it aborts)."""
    key = decode_records(records_bytes(batch), batch.record_count, "a transaction marker")[0].key or b""
    return len(key) >= 4 and _MARKER_KEY.unpack_from(key)[1] == COMMIT_MARKER


def codec_of(batch: pb.RecordBatch) -> int:
    return batch.attributes & CODEC_MASK


def records_bytes(batch: pb.RecordBatch, limit: int = MAX_UNCOMPRESSED_BYTES, records: bytes | None = None) -> bytes:
    """The encoded records of a batch, decompressed; CORRUPT_MESSAGE if they cannot be
    (``records``: the batch's, as ``batch_crc`` takes them)."""
    codec = codec_of(batch)
    if records is None:
        records = batch.records
    if codec == Codec.NONE:
        return records
    try:
        return decompress(codec, records, limit)
    except CompressionError as e:
        raise KafkaError(ErrorCode.CORRUPT_MESSAGE, f"Record batch at offset {batch.base_offset}: {e}") from None


def recompress(batch: pb.RecordBatch, codec: Codec) -> pb.RecordBatch:
    """The batch with its records in ``codec`` (a topic whose ``compression.type`` is not
    ``producer``): a new batch with a new CRC, producer fields kept."""
    if codec_of(batch) == codec:
        return batch
    out = pb.RecordBatch()
    out.CopyFrom(batch)
    out.records = compress(codec, records_bytes(batch))
    out.attributes = (batch.attributes & ~CODEC_MASK) | int(codec)
    out.crc = batch_crc(out)
    return out


# -- records (Kafka's DefaultRecord) ---------------------------------------------------------
# A record on the wire: length, attributes (int8, unused), timestamp delta, offset delta, key
# length and key, value length and value, header count and headers (key length, UTF-8 key,
# value length, value); lengths and deltas are zigzag varints and -1 means null. The batch
# fields around them are the protobuf RecordBatch's; together they are Kafka's RecordBatch v2
# byte for byte, which is what lets the Kafka listener answer a fetch without touching records.

_SMALL = [bytes([i]) if i < 0x80 else bytes([(i & 0x7F) | 0x80, i >> 7]) for i in range(1 << 14)]
_NULL = b"\x01"  # zigzag(-1)


def _zz(n: int) -> bytes:
    """A zigzag varint (Kafka's ByteUtils.writeVarlong)."""
    z = (n << 1) ^ (n >> 63)
    return _SMALL[z] if z < 16384 else varint(z)


def _blob(b: bytes | None) -> bytes:
    return _NULL if b is None else _zz(len(b)) + b


class Record(NamedTuple):
    """One record of a batch, as stored: offset and timestamp are deltas from the batch's."""

    offset_delta: int
    timestamp_delta: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...] = ()


def _headers(headers: Sequence[Header]) -> bytes:
    """The header count, then each header's UTF-8 key and value."""
    return _zz(len(headers)) + b"".join(_blob(hk.encode()) + _blob(hv) for hk, hv in headers)


def encode_record(offset_delta: int, timestamp_delta: int, key: bytes | None, value: bytes | None,
                  headers: Sequence[Header] = ()) -> bytes:
    body = b"".join((b"\x00", _zz(timestamp_delta), _zz(offset_delta), _blob(key), _blob(value), _headers(headers)))
    return _zz(len(body)) + body


def encode_records(entries: Sequence[tuple[bytes | None, bytes | None, int, Sequence[Header]]], base_ts: int) -> bytes:
    """The records of ``(key, value, timestamp ms, headers)`` entries, offset deltas 0, 1, ..."""
    builder = RecordsBuilder(base_ts)
    for key, value, ts, headers in entries:
        builder.append(key, value, ts, headers)
    return bytes(builder.buf)


class RecordsBuilder:
    """A batch's records encoded as they are appended (Kafka's MemoryRecordsBuilder): each
    record goes straight into one bytearray, small varints from a table, so a producer keeps
    no object per record and closing the batch is one copy and one CRC. The same bytes as
    ``encode_record`` for each record in turn."""

    __slots__ = ("buf", "count", "base_timestamp", "max_timestamp")

    def __init__(self, base_timestamp: int | None = None) -> None:
        """``base_timestamp``: the batch's, from which records' deltas count; None: the first
        record's."""
        self.buf = bytearray()
        self.count = 0
        self.base_timestamp = base_timestamp
        self.max_timestamp = base_timestamp

    def append(self, key: bytes | None, value: bytes | None, timestamp: int, headers: Sequence[Header] = ()) -> int:
        """Encode a record after the others; returns its offset delta. Everything is encoded
        before the buffer is touched, so a record that cannot be (a bad header) leaves it as
        it was."""
        i = self.count
        base = self.base_timestamp
        if base is None:
            base = self.base_timestamp = self.max_timestamp = timestamp
        elif timestamp > self.max_timestamp:  # type: ignore[operator]  # set with base_timestamp
            self.max_timestamp = timestamp
        d = timestamp - base
        small = _SMALL
        head = b"\x00" + (small[d << 1] if 0 <= d < 8192 else _zz(d)) + (small[i << 1] if i < 8192 else _zz(i))
        if key is None:
            head += _NULL
        else:
            n = len(key)
            head += (small[n << 1] if n < 8192 else _zz(n)) + key
        tail = _headers(headers) if headers else b"\x00"
        if value is None:
            head += _NULL
            size = len(head) + len(tail)
        else:
            n = len(value)
            head += small[n << 1] if n < 8192 else _zz(n)
            size = len(head) + n + len(tail)
        buf = self.buf
        buf += small[size << 1] if size < 8192 else _zz(size)
        buf += head
        if value is not None:
            buf += value
        buf += tail
        self.count = i + 1
        return i

    def build(self, codec: Codec = Codec.NONE, producer_id: int | None = None, producer_epoch: int = 0,
              base_sequence: int = 0, transactional: bool = False) -> pb.RecordBatch:
        """The batch of the records appended, compressed with ``codec``, its CRC computed once
        (with an idempotent producer's fields, when given: what ``set_producer`` would stamp)."""
        n = self.count
        if not n:
            raise ValueError("a record batch needs at least one record")
        batch = pb.RecordBatch(base_offset=0, partition_leader_epoch=-1, last_offset_delta=n - 1,
                               base_timestamp=self.base_timestamp, max_timestamp=self.max_timestamp, record_count=n,
                               attributes=int(codec) | (TRANSACTIONAL_FLAG if transactional else 0),
                               records=compress(codec, bytes(self.buf)))
        if producer_id is not None:
            batch.producer_id, batch.producer_epoch, batch.base_sequence = producer_id, producer_epoch, base_sequence
        batch.crc = batch_crc(batch)
        return batch


def _undecodable(where: str, e: ValueError | IndexError) -> KafkaError:
    detail = "the bytes end inside a record" if isinstance(e, IndexError) else e
    return KafkaError(ErrorCode.CORRUPT_MESSAGE, f"Record batch for {where} holds records that cannot be decoded: "
                                                 f"{detail}")


def decode_records(data: bytes, count: int, where: str) -> list[Record]:
    """The ``count`` records in ``data``; CORRUPT_MESSAGE when the bytes do not hold exactly
    that many well-formed records (a truncated, padded or garbled batch)."""
    out: list[Record] = []
    pos, n = 0, len(data)
    try:
        for _ in range(count):
            length, pos = _read_zz(data, pos)
            end = pos + length
            if length < 1 or end > n:
                raise ValueError(f"a record length of {length}")
            ts, p = _read_zz(data, pos + 1)
            od, p = _read_zz(data, p)
            key, p = _read_blob(data, p)
            value, p = _read_blob(data, p)
            nh, p = _read_zz(data, p)
            headers: tuple[Header, ...] = ()
            if nh:
                if not 0 < nh <= end - p:
                    raise ValueError(f"{nh} headers")
                hs = []
                for _h in range(nh):
                    hk, p = _read_blob(data, p)
                    hv, p = _read_blob(data, p)
                    if hk is None:
                        raise ValueError("a null header key")
                    hs.append((hk.decode(), hv))
                headers = tuple(hs)
            if p != end:
                raise ValueError(f"a record of {length} bytes holding {p - pos}")
            out.append(Record(od, ts, key, value, headers))
            pos = end
        if pos != n:
            raise ValueError(f"{n - pos} bytes after the last of {count} records")
    except (ValueError, IndexError) as e:
        raise _undecodable(where, e) from None
    return out


def _read_zz(data: bytes, pos: int) -> tuple[int, int]:
    b = data[pos]
    pos += 1
    if b < 0x80:
        return (b >> 1) ^ -(b & 1), pos
    z, shift = b & 0x7F, 7
    while True:
        b = data[pos]
        pos += 1
        z |= (b & 0x7F) << shift
        if b < 0x80:
            return (z >> 1) ^ -(z & 1), pos
        shift += 7
        if shift > 63:
            raise ValueError("a varint longer than 10 bytes")


def _read_blob(data: bytes, pos: int) -> tuple[bytes | None, int]:
    length, pos = _read_zz(data, pos)
    if length < 0:
        if length != -1:
            raise ValueError(f"a length of {length}")
        return None, pos
    end = pos + length
    if end > len(data):
        raise IndexError
    return data[pos:end], end


def check_crc(batch: pb.RecordBatch, records: bytes | None = None) -> None:
    computed = batch_crc(batch, records)
    if computed != batch.crc:
        raise KafkaError(ErrorCode.CORRUPT_MESSAGE,
                          f"Record is corrupt (stored crc = {batch.crc}, computed crc = {computed})")


def rejected_records(errors: Sequence[tuple[int, str]]) -> KafkaError:
    """Kafka's LogValidator.processRecordErrors: the batch fails INVALID_RECORD with each bad
    record's index and reason, and a message showing the first three."""
    shown = ", ".join(f"RecordError(batchIndex={i}, message='{m}')" for i, m in errors[:3])
    return KafkaError(ErrorCode.INVALID_RECORD, f"One or more records have been rejected due to {len(errors)} record "
                       f"errors in total, and only showing the first three errors at most: [{shown}]",
                       tuple(errors))


def validate_batch(batch: pb.RecordBatch, where: str, max_message_bytes: int, *, require_keys: bool = False,
                   records: bytes | None = None) -> int:
    """Check a batch a producer sent (size, CRC, record count and offsets, and keys for a
    compacted topic); returns its size. Raises KafkaError with RECORD_TOO_LARGE,
    CORRUPT_MESSAGE or INVALID_RECORD. ``records``: ``batch.records``, when the caller has
    read them already; they are read once here otherwise (each read copies them)."""
    if records is None:
        records = batch.records
    size = batch_size(batch, len(records))
    if size > max_message_bytes:
        raise KafkaError(ErrorCode.RECORD_TOO_LARGE,
                          f"The record batch size in the append to {where} is {size} bytes which exceeds "
                          f"the maximum configured value of {max_message_bytes}.")
    count = batch.record_count
    if count < 1 or batch.last_offset_delta != count - 1:
        raise KafkaError(ErrorCode.INVALID_RECORD,
                          f"Record batch for {where} has record_count {count} and last_offset_delta "
                          f"{batch.last_offset_delta}; expected a positive count and count - 1")
    if batch.max_timestamp < batch.base_timestamp:
        raise KafkaError(ErrorCode.INVALID_RECORD,
                          f"Record batch for {where} has max_timestamp {batch.max_timestamp} below its "
                          f"base_timestamp {batch.base_timestamp}")
    check_crc(batch, records)
    if codec_of(batch) not in Codec.__members__.values():
        raise KafkaError(ErrorCode.CORRUPT_MESSAGE, f"Record batch for {where} names an unknown "
                                                     f"compression codec {codec_of(batch)}")
    if batch.attributes & ~(CODEC_MASK | TRANSACTIONAL_FLAG):
        raise KafkaError(ErrorCode.INVALID_RECORD, f"Record batch for {where} has attributes "
                                                    f"{batch.attributes:#x}; only the codec and transactional "
                                                    f"bits are supported")
    if is_transactional(batch) and not batch.HasField("producer_id"):
        raise KafkaError(ErrorCode.INVALID_RECORD, f"Transactional record batch for {where} has no producer id")
    if batch.HasField("producer_id") and (batch.producer_id < 0 or not 0 <= batch.producer_epoch <= 32767
                                          or batch.base_sequence < 0):
        raise KafkaError(ErrorCode.INVALID_RECORD, f"Record batch for {where} has producer id "
                                                    f"{batch.producer_id}, epoch {batch.producer_epoch}, "
                                                    f"sequence {batch.base_sequence}")
    data = records_bytes(batch, records=records)
    if require_keys:  # a compacted topic's keys: the one per-record check that needs every record decoded
        decoded = decode_records(data, count, where)
        first, last = decoded[0], decoded[-1]
        keyless = [i for i, r in enumerate(decoded) if r.key is None]
    else:
        last_start = _record_starts(data, count, where)
        first = decode_records(data[:_record_end(data, 0)], 1, where)[0]
        last = decode_records(data[last_start:], 1, where)[0] if count > 1 else first
        keyless = []
    if first.offset_delta != 0 or last.offset_delta != count - 1:
        raise KafkaError(ErrorCode.INVALID_RECORD,
                          f"Record batch for {where} declares {count} records with offset deltas "
                          f"{first.offset_delta}..{last.offset_delta}")
    if keyless:
        raise rejected_records([(i, f"Compacted topic cannot accept message without key in topic partition {where}.")
                                for i in keyless])
    return size


def _record_end(data: bytes, pos: int) -> int:
    length, p = _read_zz(data, pos)
    return p + length


def _record_starts(data: bytes, count: int, where: str) -> int:
    """Check that ``data`` holds exactly ``count`` length-prefixed records, stepping over each
    by its length alone (Kafka's "Incorrect declared batch size" check), and return where the
    last one starts. The CRC already vouches for the bytes, so the leader decodes only the
    first and the last record, not every one. Records of one size follow each other in runs
    (a producer's values of one size, offset and timestamp deltas of one varint width): after
    a record, the run of those with the very same length prefix is stepped over at once
    (``_same_length_run``), so the Python work is per run rather than per record."""
    pos, n, last, left = 0, len(data), 0, count
    try:
        while left:
            last = pos
            b = data[pos]
            if b < 0x80:  # a length below 64 bytes: one byte
                z, head = b, 1
            else:
                c = data[pos + 1]
                if c < 0x80:  # below 8 KiB: two bytes (the common case)
                    z, head = (b & 0x7F) | (c << 7), 2
                else:
                    length, p = _read_zz(data, pos)
                    z, head = (length << 1 if length >= 0 else 1), p - pos
            if z & 1 or not z:
                raise ValueError(f"a record length of {(z >> 1) ^ -(z & 1)}")
            size = head + (z >> 1)
            pos += size
            if pos > n:
                raise IndexError
            left -= 1
            if left and head <= 2:
                run = _same_length_run(data, pos, size, data[last:last + head], min(left, (n - pos) // size))
                if run:
                    pos += run * size
                    left -= run
                    last = pos - size
        if pos != n:
            raise ValueError(f"{n - pos} bytes after the last of {count} records")
    except (ValueError, IndexError) as e:
        raise _undecodable(where, e) from None
    return last


def _same_length_run(data: bytes, pos: int, size: int, prefix: bytes, most: int) -> int:
    """How many records from ``pos`` (at most ``most``, all of which fit in ``data``) begin with
    the length prefix ``prefix`` (one or two bytes) of a record of ``size`` bytes: those are
    records of that size one after the other, so it is enough to compare every ``size``-th
    byte, which slicing does in C. Chunks grow fourfold, so a short run costs one small slice."""
    run, chunk, first, second = 0, 8, prefix[:1], prefix[1:]
    while run < most:
        m = min(chunk, most - run)
        start = pos + run * size
        stop = start + m * size
        same = m - len(data[start:stop:size].lstrip(first))
        if second:
            same = min(same, m - len(data[start + 1:stop + 1:size].lstrip(second)))
        run += same
        if same < m:
            break
        chunk <<= 2
    return run


# -- frames ------------------------------------------------------------------------------------

def varint(n: int) -> bytes:
    """``n`` (not negative) as an unsigned varint (protobuf's, and Kafka's compact lengths and
    tags); one byte from a table below 128."""
    if n < 0x80:
        return _ONE_BYTE[n]
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


_ONE_BYTE = tuple(bytes((i,)) for i in range(0x80))


def batch_size(batch: pb.RecordBatch, records_size: int) -> int:
    """``batch.ByteSize()`` for a batch whose records are ``records_size`` bytes, from its other
    fields: protobuf's ``ByteSize`` encodes the whole message, records included, to measure it.
    Every field number is below 16 (a one-byte tag); proto3 leaves out zeros, but not a
    ``producer_id`` that is set; a negative int32 or int64 takes ten bytes."""
    size = 1 + _varint_size(records_size) + records_size if records_size else 0
    for value in (batch.base_offset, batch.partition_leader_epoch, batch.last_offset_delta, batch.base_timestamp,
                  batch.max_timestamp, batch.record_count, batch.crc, batch.attributes, batch.producer_epoch,
                  batch.base_sequence):
        if value:
            size += 1 + (_varint_size(value) if value > 0 else 10)
    if batch.HasField("producer_id"):
        pid = batch.producer_id
        size += 1 + (_varint_size(pid) if pid >= 0 else 10)
    return size


def _varint_size(n: int) -> int:
    """The bytes of ``n`` (not negative) as a varint."""
    return 1 if n < 0x80 else (n.bit_length() + 6) // 7


def frame_parts(batch: pb.RecordBatch, records: bytes | memoryview) -> tuple[bytes, bytes | memoryview, bytes]:
    """``frame(batch.SerializeToString())`` for ``batch`` holding ``records``, in three parts
    joined once where it is stored: what precedes the records, the records (passed through,
    not copied out of ``batch`` and serialized again), and the fields after them. protobuf
    writes fields in number order: 1-7, the records (8), then 9-12."""
    before = pb.RecordBatch(base_offset=batch.base_offset, partition_leader_epoch=batch.partition_leader_epoch,
                            last_offset_delta=batch.last_offset_delta, base_timestamp=batch.base_timestamp,
                            max_timestamp=batch.max_timestamp, record_count=batch.record_count,
                            crc=batch.crc).SerializeToString()
    tail = pb.RecordBatch(attributes=batch.attributes, producer_epoch=batch.producer_epoch,
                          base_sequence=batch.base_sequence)
    if batch.HasField("producer_id"):
        tail.producer_id = batch.producer_id
    after = tail.SerializeToString()
    n = len(records)
    field = _RECORDS_TAG + varint(n) if n else b""
    return frame_head(len(before) + len(field) + n + len(after)) + before + field, records, after


def frame(batch_bytes: bytes, prefix: bytes = b"") -> bytes:
    """A serialized batch as one element of a RecordBatchSet (after ``prefix``, in one copy)."""
    return b"".join((prefix, frame_head(len(batch_bytes)), batch_bytes))


def frame_head(size: int) -> bytes:
    """What precedes a serialized batch of ``size`` bytes in a RecordBatchSet: its tag and length."""
    return _FRAME_TAG + varint(size)


def frames(data: bytes | memoryview) -> list[memoryview]:
    """Each batch's frame in a RecordBatchSet (tag, length, batch), as views of ``data``:
    what a follower stores as it came, without serializing the batch again."""
    view = memoryview(data)
    out = []
    i, end = 0, len(view)
    while i < end:
        if view[i] != 0x0A:
            raise KafkaError(ErrorCode.CORRUPT_MESSAGE, "fetched record batches cannot be decoded")
        j, n, shift = i + 1, 0, 0
        while True:
            if j >= end:
                raise KafkaError(ErrorCode.CORRUPT_MESSAGE, "fetched record batches cannot be decoded")
            b = view[j]
            n |= (b & 0x7F) << shift
            j += 1
            if b < 0x80:
                break
            shift += 7
        out.append(view[i:j + n])
        i = j + n
    if i != end:
        raise KafkaError(ErrorCode.CORRUPT_MESSAGE, "fetched record batches cannot be decoded")
    return out


def batches(data: bytes) -> Sequence[pb.RecordBatch]:
    """The batches of a fetch answer (concatenated frames)."""
    if not data:
        return ()
    try:
        return pb.RecordBatchSet.FromString(data).batches
    except DecodeError:
        raise KafkaError(ErrorCode.CORRUPT_MESSAGE, "fetched record batches cannot be decoded") from None


@dataclass
class RecordColumns:
    """Decoded records as columns, in offset order: what a consumer turns into ConsumerRecords
    and the Spark source hands Arrow (clients/spark/columns.py) without an object per record."""

    offsets: list[int] = field(default_factory=list)
    timestamps: list[int] = field(default_factory=list)
    keys: list[bytes | None] = field(default_factory=list)
    values: list[bytes | None] = field(default_factory=list)
    #: one entry per row, None without headers; empty while no row has any
    headers: list[tuple[Header, ...] | None] = field(default_factory=list)


def records_of(batch: pb.RecordBatch, topic: str, partition: int, from_offset: int = 0,
               stop: int | None = None) -> Iterator[ConsumerRecord]:
    """The records of a batch from ``from_offset`` on and below ``stop`` (a fetch may start
    inside a batch; a consumer reads below the high watermark); none for a control batch (a
    transaction marker), which consumers never see. CORRUPT_MESSAGE, as ``decode_records``,
    when the bytes do not hold exactly the batch's records."""
    if batch.attributes & CONTROL_FLAG:
        return iter(())
    base, last = batch.base_offset, batch.base_offset + batch.last_offset_delta
    high = last + 1 if stop is None else stop  # a negative stop (an unknown last stable offset): none
    low, high = (-1, -1) if from_offset <= base and last < high else (max(from_offset, 0), high)  # -1: every record
    cols = RecordColumns()
    try:
        decode_columns(records_bytes(batch), batch.record_count, base, batch.base_timestamp,
                       batch.max_timestamp if batch.attributes & LOG_APPEND_TIME_FLAG else None, low, high, cols)
    except (ValueError, IndexError) as e:
        raise _undecodable(f"{topic}-{partition} at offset {base}", e) from None
    headers = [h or () for h in cols.headers] if cols.headers else repeat(())
    fields = zip(repeat(topic), repeat(partition), cols.offsets, cols.timestamps, cols.keys, cols.values, headers,
                 repeat(batch.partition_leader_epoch))  # noqa: B905  (the repeats are endless; the columns agree)
    return map(tuple.__new__, repeat(ConsumerRecord), fields)  # each a ConsumerRecord, built in C


def decode_columns(data: bytes, count: int, base: int, base_ts: int, appended: int | None, low: int, high: int,
                   out: RecordColumns) -> None:
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


def read_field(data: bytes, p: int, length: int, end: int) -> tuple[bytes | None, int]:
    """A key or value of ``length`` bytes at ``p`` (-1: null), within its record (which ends
    at ``end``)."""
    if length < 0:
        if length != -1:
            raise ValueError(f"a length of {length}")
        return None, p
    if p + length > end:
        raise ValueError(f"a length of {length} past its record")
    return data[p:p + length], p + length


def read_headers(data: bytes, p: int, end: int) -> tuple[Header, ...]:
    """A record's headers, from its header count at ``p`` to its ``end``."""
    nh, p = _read_zz(data, p)
    if not 0 <= nh <= end - p:
        raise ValueError(f"{nh} headers")
    hs = []
    for _ in range(nh):
        kl, p = _read_zz(data, p)
        hk, p = read_field(data, p, kl, end)
        vl, p = _read_zz(data, p)
        hv, p = read_field(data, p, vl, end)
        if hk is None:
            raise ValueError("a null header key")
        hs.append((hk.decode(), hv))
    if p != end:
        raise ValueError(f"a record ending at byte {end} holding {p}")
    return tuple(hs)
