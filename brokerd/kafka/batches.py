"""Record batches on Kafka's wire (RecordBatch v2, magic 2) and as stored here.

A stored batch (``pb.RecordBatch``) holds Kafka's header fields and Kafka's encoded records
(clients/records.py), so converting either way packs or unpacks the 61-byte header and
copies the records untouched: the CRC a Kafka producer computed is the one every replica and
consumer checks, and a fetch never decodes a record.
"""
from __future__ import annotations

import struct

from crc32c import crc32c
from google.protobuf.message import DecodeError

from clients.records import CONTROL_FLAG, NO_PRODUCER_ID, frame_parts
from common.errors import ErrorCode, KafkaError
from protos import broker_pb2 as pb

# baseOffset, batchLength, partitionLeaderEpoch, magic, crc, attributes, lastOffsetDelta,
# baseTimestamp, maxTimestamp, producerId, producerEpoch, baseSequence, recordsCount
_HEAD = struct.Struct(">qiibIhiqqqhii")
HEADER_BYTES = _HEAD.size            # 61
_LENGTH_FIELDS = 12                  # baseOffset and batchLength precede what batchLength counts
MAGIC = 2


def _header(batch: pb.RecordBatch, records: bytes) -> bytes:
    pid = batch.producer_id if batch.HasField("producer_id") else NO_PRODUCER_ID
    return _HEAD.pack(batch.base_offset, HEADER_BYTES - _LENGTH_FIELDS + len(records), batch.partition_leader_epoch,
                      MAGIC, batch.crc, batch.attributes, batch.last_offset_delta, batch.base_timestamp,
                      batch.max_timestamp, pid, batch.producer_epoch, batch.base_sequence, batch.record_count)


def to_wire(batch: pb.RecordBatch) -> bytes:
    records = batch.records
    return _header(batch, records) + records


def stored_to_wire(stored: bytes) -> bytes:
    """A fetch answer's stored frames (a RecordBatchSet) as Kafka's concatenated batches."""
    return b"".join(stored_to_wire_parts(stored))


def stored_to_wire_parts(stored: bytes | memoryview | list[memoryview]) -> list[bytes | memoryview]:
    """A fetch answer's stored frames (a RecordBatchSet, or a list of its frames as the log
    read them: ``FetchPartitionResponse.frames``) as Kafka's batches, in parts: each batch's
    packed header, then a view of its records in ``stored``.

    The frames are walked by their protobuf fields here rather than parsed by protobuf, and the
    records are not copied at all until the response is framed: a parsed message copied them
    twice more (into the message, then out of it as bytes), about 0.7 us per 256-byte record,
    most of a consumer's cost to the broker; joining the parts here copied each batch once more
    (a 200 KB batch about 25 us on the leader answering a follower)."""
    if not stored:
        return []
    if isinstance(stored, list):
        parts: list[bytes | memoryview] = []
        for frame in stored:
            parts += stored_to_wire_parts(frame)
        return parts
    view = memoryview(stored)
    parts = []
    pos, end = 0, len(stored)
    try:
        while pos < end:
            key, pos = _uvarint(stored, pos)
            if key >> 3 == 1 and key & 7 == _LENGTH_DELIMITED:  # RecordBatchSet.batches
                length, pos = _uvarint(stored, pos)
                if pos + length > end:
                    raise DecodeError(f"a stored batch of {length} bytes at {pos} runs past the {end} stored")
                parts += _batch_to_wire(stored, view, pos, pos + length)
                pos += length
            else:
                pos = _skip(stored, pos, key & 7, end)
    except IndexError:
        raise DecodeError("stored batches cut short") from None
    return parts


_LENGTH_DELIMITED = 2
_U64, _I64_SIGN, _U32, _I32_SIGN = (1 << 64) - 1, 1 << 63, 0xFFFFFFFF, 1 << 31
#: RecordBatch's varint fields by number (broker.proto): signed 64-bit, signed 32-bit, unsigned 32-bit
_INT64_FIELDS, _INT32_FIELDS, _CRC = frozenset((1, 4, 5, 10)), frozenset((2, 3, 6, 9, 11, 12)), 7
_RECORDS = 8


def _batch_to_wire(data: bytes | memoryview, view: memoryview, pos: int, stop: int) -> tuple[bytes, memoryview]:
    """One stored RecordBatch (``data[pos:stop]``) as Kafka's header and a view of its records;
    fields as protobuf reads them (absent: 0, producer id absent: none; the last one wins)."""
    fields = [0] * 13
    fields[10] = NO_PRODUCER_ID
    records = view[0:0]
    while pos < stop:
        key, pos = _uvarint(data, pos)
        number, wire_type = key >> 3, key & 7
        if wire_type == 0 and (number in _INT64_FIELDS or number in _INT32_FIELDS or number == _CRC):
            value, pos = _uvarint(data, pos)
            if number == _CRC:
                value &= _U32
            elif number in _INT64_FIELDS:
                value &= _U64
                value -= (value & _I64_SIGN) << 1
            else:
                value &= _U32
                value -= (value & _I32_SIGN) << 1
            fields[number] = value
        elif number == _RECORDS and wire_type == _LENGTH_DELIMITED:
            length, pos = _uvarint(data, pos)
            if pos + length > stop:
                raise DecodeError(f"a stored batch's records of {length} bytes run past the batch")
            records = view[pos:pos + length]
            pos += length
        else:
            pos = _skip(data, pos, wire_type, stop)
    if pos != stop:
        raise DecodeError("a stored batch's last field runs past the batch")
    (_, base_offset, epoch, last_delta, base_ts, max_ts, count, crc, _, attributes, pid, producer_epoch,
     base_sequence) = fields
    return (_HEAD.pack(base_offset, HEADER_BYTES - _LENGTH_FIELDS + len(records), epoch, MAGIC, crc, attributes,
                       last_delta, base_ts, max_ts, pid, producer_epoch, base_sequence, count), records)


def _uvarint(data: bytes | memoryview, pos: int) -> tuple[int, int]:
    """A protobuf varint at ``pos``: its value and the position after it (IndexError if cut short)."""
    b = data[pos]
    if b < 0x80:
        return b, pos + 1
    value, shift = b & 0x7F, 7
    while True:
        pos += 1
        b = data[pos]
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, pos + 1
        shift += 7
        if shift > 63:
            raise DecodeError("a varint longer than 10 bytes")


def _skip(data: bytes | memoryview, pos: int, wire_type: int, stop: int) -> int:
    """Past a field this reader does not use (protobuf keeps unknown fields; a fetch drops them)."""
    if wire_type == 0:
        return _uvarint(data, pos)[1]
    if wire_type == 1 or wire_type == 5:
        pos += 8 if wire_type == 1 else 4
    elif wire_type == _LENGTH_DELIMITED:
        length, pos = _uvarint(data, pos)
        pos += length
    else:
        raise DecodeError(f"a stored field of wire type {wire_type}")
    if pos > stop:
        raise DecodeError("a stored field runs past its batch")
    return pos


def from_wire(data: bytes, where: str) -> pb.RecordBatch:
    """The one batch of a produce request's partition (Kafka requires exactly one since
    Produce v3); CORRUPT_MESSAGE or INVALID_RECORD for anything else. The CRC is checked by
    ``validate_batch`` afterwards, over the very fields Kafka's covers."""
    if len(data) < HEADER_BYTES:
        raise KafkaError(ErrorCode.CORRUPT_MESSAGE, f"Record batch for {where} has {len(data)} bytes, "
                                                     f"fewer than a batch header's {HEADER_BYTES}")
    (base_offset, length, epoch, magic, crc, attributes, last_delta, base_ts, max_ts, pid, producer_epoch,
     base_sequence, count) = _HEAD.unpack_from(data)
    if magic != MAGIC:
        raise KafkaError(ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT,
                          f"Record batch for {where} has magic {magic}; only message format v2 is supported")
    if length + _LENGTH_FIELDS != len(data):
        raise KafkaError(ErrorCode.INVALID_RECORD,
                          f"Produce requests with version 3 or above must contain exactly one record batch "
                          f"(the batch for {where} is {length + _LENGTH_FIELDS} bytes of {len(data)})")
    batch = pb.RecordBatch(base_offset=0, partition_leader_epoch=epoch, last_offset_delta=last_delta,
                           base_timestamp=base_ts, max_timestamp=max_ts, record_count=count, crc=crc,
                           records=data[HEADER_BYTES:], attributes=attributes, producer_epoch=producer_epoch,
                           base_sequence=base_sequence)
    if pid != NO_PRODUCER_ID:
        batch.producer_id = pid
    return batch


#: Kafka's CRC covers the batch from its attributes (after base offset, length, epoch, magic
#: and the CRC itself) to its end: on the wire, one contiguous range.
_CRC_FROM = 21

#: A fetched batch as a follower stages it: its header fields (a ``pb.RecordBatch`` without its
#: records, but a control batch's, whose marker is decoded), and its stored frame in parts.
FetchedBatch = tuple[pb.RecordBatch, tuple[bytes | memoryview, ...]]


def wire_to_frames(data: bytes, where: str) -> list[FetchedBatch]:
    """A fetch answer's Kafka batches (a follower's, from its leader's Kafka listener), each
    with its CRC checked (CORRUPT_MESSAGE, as ``check_crc``) and its stored frame: the
    ``RecordBatchSet`` element the leader stored, byte for byte, with the leader's offsets,
    epochs and producer fields, as (the frame up to the records, the records as a view of
    ``data``, the fields after them), so that staging copies the records once, joining the
    parts. Why: building a RecordBatchSet and parsing it back copied every batch about ten
    times (docs/brokers.md, "The data path's codec"). A partial batch at the end is dropped,
    as Kafka's clients drop one cut short by the fetch's size limit."""
    out: list[FetchedBatch] = []
    view = memoryview(data)
    pos, end = 0, len(view)
    while end - pos >= HEADER_BYTES:
        (base_offset, length, epoch, magic, crc, attributes, last_delta, base_ts, max_ts, pid, producer_epoch,
         base_sequence, count) = _HEAD.unpack_from(view, pos)
        stop = pos + _LENGTH_FIELDS + length
        if magic != MAGIC or length < HEADER_BYTES - _LENGTH_FIELDS:
            raise KafkaError(ErrorCode.CORRUPT_MESSAGE, f"Record batch for {where} at offset {base_offset} has "
                                                         f"magic {magic} and length {length}")
        if stop > end:
            break
        computed = crc32c(view[pos + _CRC_FROM:stop])
        if computed != crc:
            raise KafkaError(ErrorCode.CORRUPT_MESSAGE,
                              f"Record is corrupt (stored crc = {crc}, computed crc = {computed})")
        batch = pb.RecordBatch(base_offset=base_offset, partition_leader_epoch=epoch, last_offset_delta=last_delta,
                               base_timestamp=base_ts, max_timestamp=max_ts, record_count=count, crc=crc,
                               attributes=attributes, producer_epoch=producer_epoch, base_sequence=base_sequence)
        if pid != NO_PRODUCER_ID:
            batch.producer_id = pid
        records = view[pos + HEADER_BYTES:stop]
        head, _, after = frame_parts(batch, records)
        if attributes & CONTROL_FLAG:
            batch.records = records.tobytes()
        out.append((batch, (head, records, after)))
        pos = stop
    return out


def wire_to_stored(data: bytes, where: str) -> bytes:
    """A fetch answer's Kafka batches as the stored frames they are (a RecordBatchSet): the
    inverse of ``stored_to_wire``."""
    return b"".join(part for _, parts in wire_to_frames(data, where) for part in parts)
