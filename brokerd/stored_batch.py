"""A stored batch, the value of a ``d`` key (``log_store``): its head, then its frame, and the
check that lets a fetch read it without RocksDB's checksums.

    head (34 bytes): last offset, max timestamp, producer id (-1: none), producer epoch,
                     base sequence (what retention, truncation and producer state read
                     without decoding the frame)
    frame:           0x0A, the batch's length as a varint, the ``pb.RecordBatch`` as protobuf
                     writes it: fields 1-7, the records (field 8), fields 9-12 (clients/records.py)

Why a check of our own: RocksDB checks a blob's CRC32C on every read, and rocksdict's build has
no hardware CRC32C, so on a consumer's fetch of values in blob files that check was a fifth of
the broker's thread CPU (docs/brokers.md, "librdkafka's consume per broker core"), while every
batch already carries Kafka's CRC-32C, which the ``crc32c`` package computes in hardware. It
covers attributes to the records (``clients.records.batch_crc``); ``intact`` checks what it
leaves out against what the key and the log know, so that a value it accepts is, byte for byte,
the value that was written:

- the frame: its tag, and its length equal to the value's less the head;
- the protobuf layout: the encoding of the batch's fields other than the records must be the one
  protobuf writes for them (fields in order, each once, shortest varints, zeros left out, no
  unknown field), so a changed tag or length byte cannot leave the fields' values as they were;
- the base offset (field 1): the key's offset;
- the partition leader epoch (field 2): the leader epoch cache's epoch at the base offset;
- the CRC (field 7): Kafka's CRC-32C over the fields it covers and the records;
- the head: each field equal to the batch's (last offset = base offset + last offset delta).

A byte changed anywhere in the value changes the frame's length or layout, a field outside the
CRC (checked against the key or the epoch cache), or a byte the CRC covers, which CRC-32C
detects (any error in up to 32 adjacent bits). ``intact`` only accepts: a value it does not
accept is read again with RocksDB's checks (``PartitionLog.read``), whose verdict stands, so a
value it cannot vouch for (a layout protobuf would not write, an epoch the cache does not
expect) costs a second read and never a failed directory.
"""
from __future__ import annotations

import re
import struct
from google.protobuf.message import DecodeError

from clients.records import NO_PRODUCER_ID, batch_crc
from protos import broker_pb2 as pb

HEAD = struct.Struct(">qqqhi")
HEAD_BYTES = HEAD.size
_FRAME_TAG = 0x0A
#: Fields 1-7 (varints: each tag, then up to nine bytes with the continuation bit and a last
#: without), then the records' tag (field 8, length-delimited): where the records start.
_BEFORE_RECORDS = re.compile(rb"(?:[\x08\x10\x18\x20\x28\x30\x38][\x80-\xff]{0,9}[\x00-\x7f])*\x42", re.DOTALL)


def _uvarint(data: bytes, pos: int) -> tuple[int, int]:
    """A varint at ``pos`` (at most five bytes: a length): its value and the position after it."""
    value = shift = 0
    for p in range(pos, min(pos + 5, len(data))):
        b = data[p]
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, p + 1
        shift += 7
    return -1, pos


def intact(value: bytes, base_offset: int, leader_epoch: int | None) -> int | None:
    """The batch's last offset if ``value``, stored under ``base_offset``, is exactly what was
    written (the module's checks), else None: read it again with RocksDB's checks.
    ``leader_epoch``: the epoch cache's epoch at ``base_offset``."""
    n = len(value)
    if n <= HEAD_BYTES + 2 or value[HEAD_BYTES] != _FRAME_TAG:
        return None
    length, p = _uvarint(value, HEAD_BYTES + 1)
    if length < 0 or p + length != n or value[p - 1] == 0 and p - HEAD_BYTES > 2:  # in its shortest varint
        return None
    m = _BEFORE_RECORDS.match(value, p)
    if m is None:
        return None
    tag_end = m.end()
    records_length, records_start = _uvarint(value, tag_end)
    records_end = records_start + records_length
    if records_length <= 0 or records_end > n or value[records_start - 1] == 0 and records_start - tag_end > 1:
        return None
    fields = value[p:tag_end - 1] + value[records_end:]
    try:
        batch = pb.RecordBatch.FromString(fields)
    except DecodeError:
        return None
    # The layout protobuf writes, and no field twice or unknown: serialized again, the same bytes.
    if batch.records:
        return None
    batch.DiscardUnknownFields()
    if batch.SerializeToString() != fields:
        return None
    last = base_offset + batch.last_offset_delta
    pid = batch.producer_id if batch.HasField("producer_id") else NO_PRODUCER_ID
    if (batch.base_offset != base_offset or batch.partition_leader_epoch != leader_epoch
            or HEAD.unpack_from(value) != (last, batch.max_timestamp, pid, batch.producer_epoch, batch.base_sequence)
            or batch_crc(batch, memoryview(value)[records_start:records_end]) != batch.crc):
        return None
    return last
