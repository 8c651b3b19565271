"""Record batches on Kafka's wire (RecordBatch v2, magic 2) and as stored here.

A stored batch (``pb.RecordBatch``) holds Kafka's header fields and Kafka's encoded records
(clients/records.py), so converting either way packs or unpacks the 61-byte header and
copies the records untouched: the CRC a Kafka producer computed is the one every replica and
consumer checks, and a fetch never decodes a record.
"""
from __future__ import annotations

import struct

from crc32c import crc32c

from clients.records import CONTROL_FLAG, NO_PRODUCER_ID, frame_head, varint
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
    if not stored:
        return b""
    parts: list[bytes] = []
    for b in pb.RecordBatchSet.FromString(stored).batches:
        records = b.records
        parts += (_header(b, records), records)
    return b"".join(parts)


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
_RECORDS_TAG = b"\x42"  # RecordBatch.records: field 8, length-delimited

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
        # protobuf writes fields in number order and leaves out zeros (proto3): fields 1-7,
        # the records (8), then 9-12; protobuf itself serializes the two runs of small fields
        batch = pb.RecordBatch(base_offset=base_offset, partition_leader_epoch=epoch, last_offset_delta=last_delta,
                               base_timestamp=base_ts, max_timestamp=max_ts, record_count=count, crc=crc)
        before = batch.SerializeToString()
        batch.attributes, batch.producer_epoch, batch.base_sequence = attributes, producer_epoch, base_sequence
        if pid != NO_PRODUCER_ID:
            batch.producer_id = pid
        after = batch.SerializeToString()[len(before):]
        records = view[pos + HEADER_BYTES:stop]
        size = len(records)
        field = _RECORDS_TAG + varint(size) if size else b""
        head = frame_head(len(before) + len(field) + size + len(after)) + before + field
        if attributes & CONTROL_FLAG:
            batch.records = records.tobytes()
        out.append((batch, (head, records, after)))
        pos = stop
    return out


def wire_to_stored(data: bytes, where: str) -> bytes:
    """A fetch answer's Kafka batches as the stored frames they are (a RecordBatchSet): the
    inverse of ``stored_to_wire``."""
    return b"".join(part for _, parts in wire_to_frames(data, where) for part in parts)
