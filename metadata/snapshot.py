"""Metadata snapshot files: an image written as the records that rebuild it.

The layout is documented in ``docs/metadata-snapshot-format.md``. In short: a fixed prefix
(magic ``KMSN``, format version, header length and CRC), a ``SnapshotHeader`` protobuf, one
frame ``[u32 length][u32 crc32][MetadataRecord]`` per record, a footer holding a sparse index
(the byte offset of every N-th record) with its own CRC, and a fixed 16-byte trailer locating
the footer. The index lets a reader such as Spark cut a big snapshot into record ranges and
read them in parallel (``read_info``, ``record_ranges``, ``iter_records``).

Writes are reproducible: records come in a fixed order and the creation time is the caller's,
so one image always gives the same bytes. Reads and writes stream in bounded memory. Every
defect (empty or truncated file, bad magic, unknown version, CRC mismatch, malformed record)
raises ``SnapshotError`` with one line naming the file and the byte offset.
"""
from __future__ import annotations

import gc
import io
import os
import struct
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from google.protobuf.message import DecodeError

from protos import metadata_pb2 as pb
from raft.storage.frames import FRAME, FrameError, read_frame

from .delta import MetadataDelta
from .image import METADATA_VERSION, MetadataImage
from .records import (RECORD_VERSION, MetadataRecord, RecordError, access_control_entry, client_quota,
                      decode_record, user_scram_credential)

MAGIC = b"KMSN"
FORMAT_VERSION = 1
DEFAULT_INDEX_INTERVAL = 10_000
#: Larger frames are taken for corruption rather than allocated.
MAX_RECORD_BYTES = 16 << 20
MAX_HEADER_BYTES = 1 << 20

_PREFIX = struct.Struct(">4sIII")     # magic, format version, header length, header crc32
_FOOTER_HEAD = struct.Struct(">IQI")  # index interval, record count, index entry count
_INDEX_ENTRY = struct.Struct(">Q")    # byte offset of a record
_CRC = struct.Struct(">I")
_TRAILER = struct.Struct(">QI4s")     # footer offset, footer length, magic
_CHUNK = 1 << 20

Source = str | os.PathLike[str] | BinaryIO


class SnapshotError(Exception):
    """The snapshot cannot be read; the message names the file and the byte offset."""

    def __init__(self, name: str, offset: int, problem: str) -> None:
        self.name, self.offset, self.problem = name, offset, problem
        super().__init__(f"snapshot {name}: byte {offset}: {problem}")


@dataclass(frozen=True, slots=True)
class SnapshotInfo:
    """What a snapshot's header and footer say, without reading its records."""

    name: str
    cluster_id: str
    last_offset: int
    last_epoch: int
    created_ms: int
    record_count: int
    index_interval: int
    index: tuple[int, ...]  # byte offset of records 0, N, 2N, ...
    records_end: int        # byte offset of the footer


# -- writing -----------------------------------------------------------------------------------

def image_records(image: MetadataImage) -> Iterator[MetadataRecord]:
    """The records that rebuild ``image`` from an empty one, in the snapshot's fixed order:
    features (``metadata.version`` first, as the rest is read under it), brokers by id,
    producer ids, topics by name each followed by its partitions by id, then configs by
    (resource type, resource name, key), after the topics they name, then ACLs by id, SCRAM
    credentials by user and mechanism, and client quotas by entity and key."""
    return _records(image, reuse=False)


def _records(image: MetadataImage, reuse: bool) -> Iterator[MetadataRecord]:
    """``image_records``; with ``reuse``, every PartitionRecord is the same message object,
    refilled (half the cost of a new one), for a caller that serializes it at once."""
    def wrap(**kw: Any) -> MetadataRecord:
        return pb.MetadataRecord(version=RECORD_VERSION, **kw)

    for name in sorted(image.features, key=lambda n: (n != METADATA_VERSION, n)):
        yield wrap(feature_level=pb.FeatureLevelRecord(name=name,
                                                       feature_level=image.features[name]))
    for bid in sorted(image.brokers):
        b = image.brokers[bid]
        r = pb.RegisterBrokerRecord(
            broker_id=b.id, incarnation_id=b.incarnation_id.bytes, broker_epoch=b.epoch,
            endpoints=[pb.Endpoint(name=e.name, host=e.host, port=e.port,
                                   security_protocol=e.security_protocol.name)
                       for e in b.endpoints],
            fenced=b.fenced, in_controlled_shutdown=b.in_controlled_shutdown)
        if b.rack is not None:
            r.rack = b.rack
        yield wrap(register_broker=r)
    if image.next_producer_id:
        # As Kafka's ProducerIdsImage writes it: the block's owner is not part of the image.
        yield wrap(producer_ids=pb.ProducerIdsRecord(broker_id=-1, broker_epoch=-1,
                                                     next_producer_id=image.next_producer_id))
    for name in sorted(image.topics_by_name):
        t = image.topics_by_name[name]
        tid = t.id.bytes
        yield wrap(topic=pb.TopicRecord(name=name, topic_id=tid))
        record = wrap(partition=pb.PartitionRecord(topic_id=tid))
        for pid, p in sorted(t.partitions.items()):
            if not reuse:
                record = wrap(partition=pb.PartitionRecord(topic_id=tid))
            part = record.partition
            part.partition_id = pid
            part.replicas[:] = p.replicas
            part.isr[:] = p.isr
            part.leader = p.leader
            part.leader_epoch = p.leader_epoch
            part.partition_epoch = p.partition_epoch
            part.adding_replicas[:] = p.adding
            part.removing_replicas[:] = p.removing
            yield record
    for resource in sorted(image.configs):
        values = image.configs[resource]
        for key in sorted(values):
            yield wrap(config=pb.ConfigRecord(resource_type=resource.type.name,
                                              resource_name=resource.name, name=key,
                                              value=values[key]))
    for acl_id, acl in sorted(image.acls.by_id.items()):
        yield access_control_entry(acl_id, acl)
    for user in sorted(image.scram.users):
        for mechanism, credential in sorted(image.scram.users[user].items()):
            yield user_scram_credential(user, mechanism, credential)
    for entity, quotas in sorted(image.client_quotas.entities.items(), key=lambda eq: repr(eq[0])):
        for quota in sorted(quotas):
            yield client_quota(entity, quota, quotas[quota])


def count_records(image: MetadataImage) -> int:
    """How many records ``image_records`` yields, without building them."""
    return (len(image.features) + len(image.brokers) + (1 if image.next_producer_id else 0)
            + len(image.topics_by_id) + image.partition_count()
            + sum(len(v) for v in image.configs.values()) + len(image.acls.by_id)
            + sum(len(v) for v in image.scram.users.values())
            + sum(len(v) for v in image.client_quotas.entities.values()))


def write_snapshot(image: MetadataImage, target: Source, *, created_ms: int,
                   index_interval: int = DEFAULT_INDEX_INTERVAL) -> int:
    """Write ``image`` as a snapshot; return the bytes written. ``target`` is a binary file
    object (written from its current position) or a path (written to a temporary file, synced,
    then renamed over the path, so a crash leaves the old file or the new one)."""
    if index_interval < 1:
        raise ValueError(f"index_interval must be >= 1, got {index_interval}")
    if not isinstance(target, (str, os.PathLike)):
        return _write(image, target, created_ms, index_interval)
    path = Path(target)
    tmp = path.with_name(path.name + ".tmp")
    try:
        with open(tmp, "wb") as f:
            size = _write(image, f, created_ms, index_interval)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)  # make the rename itself durable
    finally:
        os.close(directory)
    return size


def _write(image: MetadataImage, f: BinaryIO, created_ms: int, interval: int) -> int:
    count = count_records(image)
    header = pb.SnapshotHeader(cluster_id=image.cluster_id, last_offset=image.offset,
                               last_epoch=image.epoch, record_count=count,
                               created_ms=created_ms, index_interval=interval
                               ).SerializeToString(deterministic=True)
    out: list[bytes] = [_PREFIX.pack(MAGIC, FORMAT_VERSION, len(header), zlib.crc32(header)),
                        header]
    pos = buffered = _PREFIX.size + len(header)
    index: list[int] = []
    crc32, frame = zlib.crc32, FRAME.pack
    written = 0
    for i, record in enumerate(_records(image, reuse=True)):
        if i % interval == 0:
            index.append(pos)
        data = record.SerializeToString(deterministic=True)
        out.append(frame(len(data), crc32(data)))
        out.append(data)
        n = FRAME.size + len(data)
        pos += n
        buffered += n
        written = i + 1
        if buffered >= _CHUNK:
            f.write(b"".join(out))
            out.clear()
            buffered = 0
    if written != count:
        raise AssertionError(f"wrote {written} records, counted {count}")
    body = _FOOTER_HEAD.pack(interval, count, len(index)) + b"".join(
        _INDEX_ENTRY.pack(p) for p in index)
    footer = body + _CRC.pack(zlib.crc32(body))
    out.append(footer)
    out.append(_TRAILER.pack(pos, len(footer), MAGIC))
    f.write(b"".join(out))
    return pos + len(footer) + _TRAILER.size


# -- reading -----------------------------------------------------------------------------------

class _Reader:
    """Sequential reads from a binary stream with the absolute position known, so that every
    error can say where it happened; reads ahead in large chunks."""

    def __init__(self, f: BinaryIO, name: str, pos: int = 0) -> None:
        self.f, self.name = f, name
        self.buf = b""
        self.at = 0         # next unread byte in buf
        self.base = pos     # file offset of buf[0]

    @property
    def pos(self) -> int:
        return self.base + self.at

    def error(self, problem: str, pos: int | None = None) -> SnapshotError:
        return SnapshotError(self.name, self.pos if pos is None else pos, problem)

    def take(self, n: int, what: str) -> bytes:
        if len(self.buf) - self.at < n:
            self._fill(n)
            if len(self.buf) - self.at < n:
                raise self.error(f"truncated: {what} needs {n} bytes, the file has "
                                 f"{len(self.buf) - self.at} left")
        start = self.at
        self.at = start + n
        return self.buf[start:self.at]

    def _fill(self, n: int) -> None:
        rest = self.buf[self.at:]
        self.base += self.at
        parts = [rest]
        have = len(rest)
        while have < n:
            chunk = self.f.read(max(_CHUNK, n - have))
            if not chunk:
                break
            parts.append(chunk)
            have += len(chunk)
        self.buf = b"".join(parts)
        self.at = 0

    def at_end(self) -> bool:
        if self.at < len(self.buf):
            return False
        self._fill(1)
        return self.at >= len(self.buf)


@contextmanager
def _open(source: Source) -> Iterator[tuple[BinaryIO, str]]:
    if isinstance(source, (str, os.PathLike)):
        with open(source, "rb") as f:
            yield f, os.fspath(source)
    else:
        yield source, str(getattr(source, "name", "<stream>"))


def _read_header(r: _Reader) -> pb.SnapshotHeader:
    if r.at_end():
        raise r.error("empty file")
    magic = r.take(len(MAGIC), "the magic")
    if magic != MAGIC:
        raise r.error(f"bad magic {magic!r} (expected {MAGIC!r}): not a metadata snapshot", 0)
    _, version, length, crc = _PREFIX.unpack(
        magic + r.take(_PREFIX.size - len(MAGIC), "the file prefix"))
    if version != FORMAT_VERSION:
        raise r.error(f"unsupported snapshot format version {version} "
                      f"(this reader supports {FORMAT_VERSION})", 4)
    if length > MAX_HEADER_BYTES:
        raise r.error(f"header length {length} exceeds {MAX_HEADER_BYTES}", 8)
    start = r.pos
    data = r.take(length, "the header")
    if zlib.crc32(data) != crc:
        raise r.error(f"header CRC mismatch (stored {crc:#010x}, computed "
                      f"{zlib.crc32(data):#010x})", start)
    try:
        header = pb.SnapshotHeader.FromString(data)
    except DecodeError as e:
        raise r.error(f"malformed header: {e}", start) from None
    if header.index_interval < 1:
        raise r.error(f"header has index interval {header.index_interval}", start)
    return header


def _read_frame(r: _Reader, i: int) -> tuple[int, bytes]:
    """The next frame's start and its record bytes, CRC checked."""
    at = r.at
    try:  # the common case: the whole frame is buffered
        data, r.at = read_frame(r.buf, at, MAX_RECORD_BYTES)
        return r.base + at, data
    except FrameError:
        pass  # read on if the buffer ends inside it; any damage is named below
    start = r.pos
    head = r.take(FRAME.size, f"the frame header of record {i}")
    length = FRAME.unpack(head)[0]
    body = r.take(length, f"record {i}") if length <= MAX_RECORD_BYTES else b""
    try:
        data, _ = read_frame(head + body, 0, MAX_RECORD_BYTES)
    except FrameError as e:
        raise r.error(f"record {i}: {e.problem}", start) from None
    return start, data


def _parse_record(r: _Reader, i: int, start: int, data: bytes) -> MetadataRecord:
    """Record ``i``, parsed and checked (type and version)."""
    try:
        return decode_record(data)
    except RecordError as e:
        raise r.error(f"record {i}: {e}", start) from None


def _read_footer(r: _Reader, count: int, interval: int) -> tuple[tuple[int, ...], int]:
    """The footer at the reader's position: (index, footer length), CRC and counts checked."""
    start = r.pos
    head = r.take(_FOOTER_HEAD.size, "the footer")
    f_interval, f_count, entries = _FOOTER_HEAD.unpack(head)
    expected = -(-count // interval)
    if (f_interval, f_count, entries) != (interval, count, expected):
        raise r.error(f"footer says {f_count} records, index interval {f_interval}, "
                      f"{entries} index entries; the header says {count} records, interval "
                      f"{interval} ({expected} entries)", start)
    raw = r.take(entries * _INDEX_ENTRY.size + _CRC.size, "the footer index")
    (crc,) = _CRC.unpack_from(raw, len(raw) - _CRC.size)
    body = head + raw[:-_CRC.size]
    if zlib.crc32(body) != crc:
        raise r.error(f"footer CRC mismatch (stored {crc:#010x}, computed "
                      f"{zlib.crc32(body):#010x})", start)
    index = struct.unpack_from(f">{entries}Q", raw)
    return index, len(body) + _CRC.size


def _check_trailer(r: _Reader, footer_start: int, footer_length: int) -> None:
    start = r.pos
    offset, length, magic = _TRAILER.unpack(r.take(_TRAILER.size, "the trailer"))
    if magic != MAGIC:
        raise r.error(f"bad trailer magic {magic!r} (expected {MAGIC!r})", start + 12)
    if (offset, length) != (footer_start, footer_length):
        raise r.error(f"trailer points to a footer of {length} bytes at byte {offset}, but "
                      f"it is {footer_length} bytes at byte {footer_start}", start)


def read_snapshot(source: Source) -> MetadataImage:
    """Read a whole snapshot back into the image it was written from, checking everything:
    every CRC, the index against the frames, the trailer, and that nothing follows it."""
    with _open(source) as (f, name):
        r = _Reader(f, name)
        header = _read_header(r)
        count, interval = header.record_count, header.index_interval
        offset, epoch = header.last_offset, header.last_epoch
        # The snapshot is one batch at its offset, replayed onto an image from before the
        # beginning (offset -1), so that even offset 0 is "after" it.
        delta = MetadataDelta(MetadataImage.empty(header.cluster_id).at(-1, -1))
        seen: list[int] = []  # where records 0, N, 2N, ... start, to check the index against
        where = [0, r.pos]    # the record being replayed: its number and byte offset

        def records() -> Iterator[MetadataRecord]:
            parse = pb.MetadataRecord.FromString
            for i in range(count):
                start, data = _read_frame(r, i)
                try:
                    record = parse(data)  # replay checks its type and version
                except DecodeError:
                    record = _parse_record(r, i, start, data)  # raises, naming the frame
                if i % interval == 0:
                    seen.append(start)
                where[0], where[1] = i, start
                yield record

        # A load creates objects by the million and frees none: the cyclic GC would only
        # rescan them, for a quarter of the load time. They hold no cycles and live as long as
        # the image, so they then leave the GC's generations (freeze): a collection walking
        # them holds the GIL, ~25 ms per 200,000 partitions, and would stall an event loop
        # even when the load itself runs in a thread.
        gc_enabled = gc.isenabled()
        gc.disable()
        try:
            delta.replay_batch(records(), offset, epoch)
        except RecordError as e:
            raise r.error(f"record {where[0]}: {e}", where[1]) from None
        finally:
            if gc_enabled:
                gc.freeze()
                gc.enable()
        footer_start = r.pos
        index, footer_length = _read_footer(r, count, interval)
        for k, (stored, actual) in enumerate(zip(index, seen, strict=True)):
            if stored != actual:
                raise r.error(f"index entry {k} says record {k * interval} is at byte {stored}, "
                              f"it is at byte {actual}", footer_start)
        _check_trailer(r, footer_start, footer_length)
        if not r.at_end():
            raise r.error("unexpected bytes after the trailer")
        return delta.apply().at(offset, epoch)


def read_info(source: Source) -> SnapshotInfo:
    """Header, footer and trailer of a seekable snapshot, checked; records are not read."""
    with _open(source) as (f, name):
        return _info(f, name)


def _info(f: BinaryIO, name: str) -> SnapshotInfo:
    f.seek(0)
    r = _Reader(f, name)
    header = _read_header(r)
    records_start = r.pos
    size = f.seek(0, io.SEEK_END)
    if size < records_start + _TRAILER.size:
        raise SnapshotError(name, size, "truncated: no room for the trailer")
    f.seek(size - _TRAILER.size)
    t = _Reader(f, name, size - _TRAILER.size)
    offset, length, magic = _TRAILER.unpack(t.take(_TRAILER.size, "the trailer"))
    if magic != MAGIC:
        raise SnapshotError(name, size - 4, f"bad trailer magic {magic!r} (expected "
                            f"{MAGIC!r}): truncated or not a snapshot")
    if not records_start <= offset <= size - _TRAILER.size - length:
        raise SnapshotError(name, size - _TRAILER.size,
                            f"trailer points to a footer at byte {offset} of {length} bytes, "
                            "outside the file")
    f.seek(offset)
    fr = _Reader(f, name, offset)
    index, footer_length = _read_footer(fr, header.record_count, header.index_interval)
    if footer_length != length or offset + length != size - _TRAILER.size:
        raise SnapshotError(name, size - _TRAILER.size,
                            f"trailer says the footer is {length} bytes, it is {footer_length}")
    previous = records_start - 1
    for k, p in enumerate(index):
        if not previous < p < offset:
            raise SnapshotError(name, offset, f"index entry {k} (byte {p}) is out of order "
                                "or outside the records")
        previous = p
    if index and index[0] != records_start:
        raise SnapshotError(name, offset, f"index entry 0 is byte {index[0]}, the records "
                            f"start at byte {records_start}")
    return SnapshotInfo(name, header.cluster_id, header.last_offset, header.last_epoch,
                        header.created_ms, header.record_count, header.index_interval,
                        tuple(index), offset)


def record_ranges(info: SnapshotInfo, parts: int) -> list[tuple[int, int]]:
    """Split the records into at most ``parts`` contiguous [start, end) ranges that begin on
    index entries, so each can be read independently with ``iter_records``."""
    if parts < 1:
        raise ValueError(f"parts must be >= 1, got {parts}")
    blocks = len(info.index)
    if blocks == 0:
        return []
    per = -(-blocks // parts)
    return [(b * info.index_interval, min((b + per) * info.index_interval, info.record_count))
            for b in range(0, blocks, per)]


def iter_records(source: Source, start_record: int = 0,
                 end_record: int | None = None) -> Iterator[MetadataRecord]:
    """Records ``start_record`` (inclusive) to ``end_record`` (exclusive, default: all) of a
    seekable snapshot, reached through the sparse index rather than by reading from the start.
    Every frame read is CRC checked."""
    with _open(source) as (f, name):
        info = _info(f, name)
        end = info.record_count if end_record is None else end_record
        if not 0 <= start_record <= end <= info.record_count:
            raise ValueError(f"record range [{start_record}, {end}) is not within "
                             f"[0, {info.record_count}]")
        if start_record == end:
            return
        block = start_record // info.index_interval
        pos = info.index[block]
        f.seek(pos)
        r = _Reader(f, name, pos)
        for i in range(block * info.index_interval, end):
            if r.pos >= info.records_end:
                raise r.error(f"record {i} would start inside the footer "
                              f"(byte {info.records_end})")
            start, data = _read_frame(r, i)
            if i >= start_record:
                yield _parse_record(r, i, start, data)
