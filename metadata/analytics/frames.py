"""Bulk reading of a snapshot's record frames, and PartitionRecords decoded without a
protobuf parse each.

A million-partition snapshot is a million small PartitionRecords. Parsing each with
protobuf and reading its fields costs ~8 us in Python, most of the time of a Spark task, and
yet partitions repeat the same few replica lists: their bytes after the topic id and
partition number (replicas, ISR, leader, epochs: the "tail") take a few thousand distinct
values. So ``PartitionDecoder`` reads the topic id and partition number straight from the
bytes, in the layout every protobuf serializer writes (fields in number order), and parses
each distinct tail once. Records in any other layout take the ordinary parse, so the result
is always the parser's.

``frames`` walks the record frames (``raft.storage.frames``, docs/metadata-snapshot-format.md)
over a whole range read in large blocks, checking each CRC; its errors name the file, byte
and record as ``metadata.snapshot``'s do.
"""
from __future__ import annotations

from collections.abc import Iterator
from typing import BinaryIO

from google.protobuf.message import DecodeError

from metadata.log_dir import MetadataLogError
from metadata.records import MetadataRecord, RecordError, decode_record
from metadata.snapshot import MAX_RECORD_BYTES, SnapshotInfo
from protos import metadata_pb2 as pb
from raft.storage.frames import FRAME, FrameError, read_frame

_BLOCK = 4 << 20
#: A MetadataRecord of version 1 holding field 9 (``partition``), length-delimited.
_PARTITION_PREFIX = b"\x08\x01\x4a"
_TOPIC_ID = b"\x0a\x10"  # PartitionRecord field 1 (topic_id), 16 bytes
_PARTITION_ID = 0x10     # PartitionRecord field 2 (partition_id), varint
_MAX_SHAPES = 1 << 16

def _error(name: str, offset: int, problem: str) -> MetadataLogError:
    return MetadataLogError(f"snapshot {name}: byte {offset}: {problem}")


def byte_range(info: SnapshotInfo, start: int, end: int) -> tuple[int, int]:
    """Where records [start, end) lie: ``start`` must begin an index block; the end is the
    next block's start (or the footer), so a little more may be read than needed."""
    n = info.index_interval
    if start % n or not 0 <= start <= end <= info.record_count:
        raise ValueError(f"records [{start}, {end}) do not start on an index entry")
    first = info.index[start // n] if start < info.record_count else info.records_end
    last_block = -(-end // n)
    return first, info.index[last_block] if last_block < len(info.index) else info.records_end


def frames(f: BinaryIO, info: SnapshotInfo, start: int, end: int
           ) -> Iterator[tuple[int, int, bytes]]:
    """(record number, byte offset, record bytes) of records [start, end), CRC checked."""
    base, stop = byte_range(info, start, end)
    f.seek(base)
    buf, at = b"", 0  # buf holds the file from byte ``base``; the next frame is at buf[at]
    size = FRAME.size
    for i in range(start, end):
        pos = base + at
        while True:
            try:
                data, next_at = read_frame(buf, at, MAX_RECORD_BYTES)
                break
            except FrameError as e:
                if not e.short:
                    raise _error(info.name, pos, f"record {i}: {e.problem}") from None
                had = len(buf) - at  # the buffer ends inside the frame: read on
                buf, at, base = _refill(f, buf, at, base, size + e.length, stop)
                if len(buf) - at <= had:
                    raise _error(info.name, pos, f"truncated: record {i} ({e.problem}), the "
                                                 f"file has {had} bytes left") from None
        at = next_at
        if base + at > stop:
            raise _error(info.name, pos, f"record {i} runs past byte {stop}, where the index "
                                         "says the next block (or the footer) starts")
        yield i, pos, data


def _refill(f: BinaryIO, buf: bytes, at: int, base: int, need: int, stop: int
            ) -> tuple[bytes, int, int]:
    """Keep buf[at:], read on to have at least ``need`` bytes (a block, if the range has
    that many left); returns (buffer, 0, its new base)."""
    rest = buf[at:]
    base += at
    want = max(need - len(rest), min(_BLOCK, stop - base - len(rest)))
    parts = [rest]
    while want > 0:
        chunk = f.read(want)
        if not chunk:
            break
        parts.append(chunk)
        want -= len(chunk)
    return b"".join(parts), 0, base


def parse(info: SnapshotInfo, i: int, offset: int, data: bytes) -> MetadataRecord:
    """Record ``i`` (at byte ``offset``), parsed and checked."""
    try:
        return decode_record(data)
    except RecordError as e:
        raise _error(info.name, offset, f"record {i}: {e}") from None


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(data) or shift > 63:
            raise IndexError("bad varint")
        b = data[pos]
        value |= (b & 0x7F) << shift
        pos += 1
        if b < 0x80:
            return value, pos
        shift += 7


def is_partition(data: bytes) -> bool:
    """Whether the record is a PartitionRecord in the usual layout (no parse needed to skip
    it; False means: parse to know)."""
    if data[:3] != _PARTITION_PREFIX:
        return False
    try:
        length, pos = _varint(data, 3)
    except IndexError:
        return False
    return pos + length == len(data)


Shape = tuple[tuple[int, ...], tuple[int, ...], int, int, int]


class PartitionDecoder:
    """PartitionRecord fields from record bytes, parsing each distinct tail once.

    ``decode`` returns (topic id, partition, tail, shape): the tail is the record's bytes
    after the partition number, the shape what they hold, (replicas, isr, leader, leader
    epoch, partition epoch); equal tails have equal shapes, so callers may key on the tail.
    """

    def __init__(self) -> None:
        self._shapes: dict[bytes, Shape] = {}

    def decode(self, data: bytes) -> tuple[bytes, int, bytes, Shape] | None:
        """None if the bytes are not a PartitionRecord in the usual layout (parse them)."""
        # The common case inline: a one-byte length, a partition number below 16384.
        n = len(data)
        if (data[:3] != _PARTITION_PREFIX or data[3] >= 0x80 or data[3] + 4 != n
                or data[4:6] != _TOPIC_ID or n < 22):
            return self._decode_long(data)
        if n == 22 or data[22] != _PARTITION_ID:
            partition, tail = 0, data[22:]
        elif n > 23 and data[23] < 0x80:
            partition, tail = data[23], data[24:]
        elif n > 24 and data[24] < 0x80:
            partition, tail = (data[23] & 0x7F) | (data[24] << 7), data[25:]
        else:
            return self._decode_long(data)
        shape = self._shapes.get(tail)
        if shape is None:
            shape = self._shape(tail)
            if shape is None:
                return None
        return data[6:22], partition, tail, shape

    def _decode_long(self, data: bytes) -> tuple[bytes, int, bytes, Shape] | None:
        """The general layout: any varint lengths and partition numbers."""
        if data[:3] != _PARTITION_PREFIX:
            return None
        try:
            length, pos = _varint(data, 3)
            if pos + length != len(data) or data[pos:pos + 2] != _TOPIC_ID:
                return None
            topic = data[pos + 2:pos + 18]
            pos += 18
            partition = 0
            if pos < len(data) and data[pos] == _PARTITION_ID:
                partition, pos = _varint(data, pos + 1)
                partition &= 0xFFFFFFFF  # int32, as protobuf reads it
                if partition >= 1 << 31:
                    partition -= 1 << 32
        except IndexError:
            return None
        if len(topic) != 16:
            return None
        tail = data[pos:]
        shape = self._shapes.get(tail) or self._shape(tail)
        return None if shape is None else (topic, partition, tail, shape)

    def _shape(self, tail: bytes) -> Shape | None:
        try:
            p = pb.PartitionRecord.FromString(tail)
        except DecodeError:
            return None
        if p.topic_id or p.partition_id:  # a repeated field 1 or 2: the parser decides
            return None
        shape = (tuple(p.replicas), tuple(p.isr), p.leader, p.leader_epoch, p.partition_epoch)
        if len(self._shapes) >= _MAX_SHAPES:
            self._shapes.clear()
        self._shapes[tail] = shape
        return shape
