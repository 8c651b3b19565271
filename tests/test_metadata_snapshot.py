"""Metadata snapshot files: exact round trips, reproducible bytes, ranged reads through the
index, and one clear line naming the file and byte offset for every kind of damage."""
from __future__ import annotations

import io
import re
import struct
import uuid
import zlib
from itertools import pairwise
from pathlib import Path

import pytest

from metadata import records as R
from metadata import snapshot as S
from metadata.delta import MetadataDelta
from metadata.image import MetadataImage, ResourceType
from metadata.records import NO_LEADER
from metadata.snapshot import (SnapshotError, image_records, iter_records, read_info,
                               read_snapshot, record_ranges, write_snapshot)
from protos import metadata_pb2 as pb

T = [uuid.UUID(int=0x100 + i) for i in range(4)]


def build(order: int = 0) -> MetadataImage:
    """A cluster touching every part of the image; ``order`` replays the same content in a
    different order, which must not change the snapshot's bytes."""
    brokers = [
        R.register_broker(1, uuid.UUID(int=1), 5, [R.endpoint("PLAINTEXT", "b1", 9092),
                                                   R.endpoint("SSL", "b1", 9093, pb.Endpoint.SSL)],
                          rack="r1", fenced=False),
        R.register_broker(2, uuid.UUID(int=2), 6, [R.endpoint("PLAINTEXT", "b2", 9092)],
                          rack=None, fenced=True, in_controlled_shutdown=True),
        R.register_broker(3, uuid.UUID(int=3), 7, rack="r2", fenced=False),
    ]
    topics = [[R.topic(f"topic-{i}", T[i])]
              + [R.partition(T[i], p, [1 + (p + k) % 3 for k in range(2)]) for p in range(4)]
              for i in range(3)]
    configs = [R.config(ResourceType.TOPIC, "topic-1", "retention.ms", "60000"),
               R.config(ResourceType.TOPIC, "topic-1", "cleanup.policy", "compact"),
               R.config(ResourceType.BROKER, "", "log.retention.hours", "1"),
               R.config(ResourceType.BROKER, "2", "log.cleaner.threads", "2")]
    features = [R.feature_level("metadata.version", 3), R.feature_level("kraft.version", 1)]
    changes = [R.partition_change(T[0], 1, isr=[2]),
               R.partition_change(T[0], 2, leader=NO_LEADER, isr=[]),
               R.producer_ids(1, 5, 3000)]
    if order:
        brokers.reverse()
        topics.reverse()
        configs.reverse()
        features.reverse()
    d = MetadataDelta(MetadataImage.empty("cluster-A"))
    entries = [features, brokers, *topics, configs, changes]
    for i, entry in enumerate(entries):
        d.replay_batch(entry, i + 1, 2)
    return d.apply().at(41, 3)


def snapshot_bytes(image: MetadataImage, interval: int = 3) -> bytes:
    out = io.BytesIO()
    size = write_snapshot(image, out, created_ms=1700000000000, index_interval=interval)
    assert size == len(out.getvalue())
    return out.getvalue()


@pytest.fixture
def image() -> MetadataImage:
    return build()


@pytest.fixture
def snap(tmp_path: Path, image: MetadataImage) -> Path:
    path = tmp_path / "meta.snapshot"
    write_snapshot(image, path, created_ms=1700000000000, index_interval=3)
    return path


def expect_error(path: Path, offset: int, fragment: str, read=read_snapshot) -> SnapshotError:
    with pytest.raises(SnapshotError) as e:
        result = read(path)
        if not isinstance(result, MetadataImage):
            list(result)
    msg = str(e.value)
    assert msg.startswith(f"snapshot {path}: byte {offset}: "), msg
    assert fragment in msg, msg
    assert "\n" not in msg
    assert (e.value.name, e.value.offset) == (str(path), offset)
    return e.value


def frames(data: bytes) -> list[tuple[int, int]]:
    """(start, length) of every record frame, found by walking the documented layout."""
    _, _, hlen, _ = struct.unpack_from(">4sIII", data)
    pos, out = 16 + hlen, []
    footer = struct.unpack_from(">Q", data, len(data) - 16)[0]
    while pos < footer:
        length = struct.unpack_from(">I", data, pos)[0]
        out.append((pos, length))
        pos += 8 + length
    return out


def with_record(data: bytes, k: int, new: bytes) -> bytes:
    """Replace record k by bytes of the same length, with a matching CRC."""
    start, length = frames(data)[k]
    assert len(new) == length
    return (data[:start] + struct.pack(">II", length, zlib.crc32(new)) + new
            + data[start + 8 + length:])


# -- round trips and reproducibility ------------------------------------------------------

def test_round_trip_is_exact(snap: Path, image: MetadataImage) -> None:
    back = read_snapshot(snap)
    assert back == image
    assert (back.cluster_id, back.offset, back.epoch) == ("cluster-A", 41, 3)
    assert back.brokers[2].rack is None and back.brokers[2].in_controlled_shutdown
    assert back.partition(T[0], 2).leader == NO_LEADER and back.partition(T[0], 2).isr == ()
    assert back.partition(T[0], 2).leader_epoch == 1 and back.next_producer_id == 3000
    assert back.topics_by_name["topic-1"] is back.topics_by_id[T[1]]
    assert not snap.with_name(snap.name + ".tmp").exists()


def test_writes_are_byte_identical(image: MetadataImage) -> None:
    first = snapshot_bytes(image)
    assert snapshot_bytes(image) == first
    assert snapshot_bytes(read_snapshot(io.BytesIO(first))) == first
    other_order = build(order=1)
    assert other_order == image
    assert snapshot_bytes(other_order) == first


def test_records_come_in_the_documented_order(image: MetadataImage) -> None:
    kinds = [r.WhichOneof("record") for r in image_records(image)]
    assert kinds[:2] == ["feature_level", "feature_level"]
    assert next(image_records(image)).feature_level.name == "metadata.version"
    assert kinds[2:5] == ["register_broker"] * 3
    assert kinds[5] == "producer_ids"
    assert kinds[6:21] == (["topic"] + ["partition"] * 4) * 3
    assert kinds[21:] == ["config"] * 4
    assert len(kinds) == S.count_records(image)


def test_empty_image_round_trips(tmp_path: Path) -> None:
    path = tmp_path / "empty.snapshot"
    write_snapshot(MetadataImage.empty("c0"), path, created_ms=0)
    assert read_snapshot(path) == MetadataImage.empty("c0")
    info = read_info(path)
    assert (info.record_count, info.index, info.last_offset) == (0, (), 0)
    assert list(iter_records(path)) == [] and record_ranges(info, 4) == []


def test_streams_without_seek_or_name(image: MetadataImage) -> None:
    data = snapshot_bytes(image)

    class WriteOnly:
        def __init__(self) -> None:
            self.parts: list[bytes] = []

        def write(self, b: bytes) -> int:
            self.parts.append(bytes(b))
            return len(b)

    class ReadOnly:
        def __init__(self, b: bytes) -> None:
            self._b = io.BytesIO(b)

        def read(self, n: int = -1) -> bytes:
            return self._b.read(n)

    sink = WriteOnly()
    write_snapshot(image, sink,  # type: ignore[arg-type]
                   created_ms=1700000000000, index_interval=3)
    assert b"".join(sink.parts) == data
    assert read_snapshot(ReadOnly(data)) == image  # type: ignore[arg-type]
    with pytest.raises(SnapshotError, match=r"^snapshot <stream>: byte 0: bad magic"):
        read_snapshot(ReadOnly(b"nope" + data[4:]))  # type: ignore[arg-type]


def test_the_format_is_what_the_doc_says(image: MetadataImage) -> None:
    """An independent writer following docs/metadata-snapshot-format.md gives the same bytes."""
    recs = [r.SerializeToString(deterministic=True) for r in image_records(image)]
    assert snapshot_bytes(image, interval=4) == raw_snapshot(recs, interval=4)


def raw_snapshot(recs: list[bytes], *, interval: int = 4, offset: int = 41, epoch: int = 3,
                 index: list[int] | None = None) -> bytes:
    header = pb.SnapshotHeader(cluster_id="cluster-A", last_offset=offset, last_epoch=epoch,
                               record_count=len(recs), created_ms=1700000000000,
                               index_interval=interval).SerializeToString()
    out = bytearray(b"KMSN" + struct.pack(">III", 1, len(header), zlib.crc32(header)) + header)
    positions = []
    for i, r in enumerate(recs):
        if i % interval == 0:
            positions.append(len(out))
        out += struct.pack(">II", len(r), zlib.crc32(r)) + r
    footer_at = len(out)
    positions = positions if index is None else index
    body = struct.pack(">IQI", interval, len(recs), len(positions)) + b"".join(
        struct.pack(">Q", p) for p in positions)
    footer = body + struct.pack(">I", zlib.crc32(body))
    return bytes(out + footer + struct.pack(">QI4s", footer_at, len(footer), b"KMSN"))


# -- the index and ranged reads -----------------------------------------------------------

def test_index_and_ranged_reads(snap: Path, image: MetadataImage) -> None:
    everything = list(image_records(image))
    info = read_info(snap)
    assert (info.record_count, info.index_interval, info.created_ms) == (len(everything), 3,
                                                                         1700000000000)
    assert len(info.index) == -(-len(everything) // 3)
    assert [s for s, _ in frames(snap.read_bytes())][::3] == list(info.index)
    assert list(iter_records(snap)) == everything
    n = len(everything)
    for start in range(n + 1):
        for end in range(start, min(n, start + 7) + 1):
            assert list(iter_records(snap, start, end)) == everything[start:end], (start, end)
    for bad in [(-1, 2), (3, 2), (0, n + 1)]:
        with pytest.raises(ValueError, match="record range"):
            list(iter_records(snap, *bad))


def test_record_ranges_split_on_index_entries(snap: Path, image: MetadataImage) -> None:
    info = read_info(snap)
    everything = list(image_records(image))
    for parts in (1, 2, 3, 5, 100):
        ranges = record_ranges(info, parts)
        assert len(ranges) <= parts
        assert ranges[0][0] == 0 and ranges[-1][1] == info.record_count
        assert all(a[1] == b[0] for a, b in pairwise(ranges))
        assert all(s % info.index_interval == 0 for s, _ in ranges)
        assert [r for s, e in ranges for r in iter_records(snap, s, e)] == everything


# -- damage -----------------------------------------------------------------------------------

def test_empty_file(tmp_path: Path) -> None:
    path = tmp_path / "empty"
    path.write_bytes(b"")
    expect_error(path, 0, "empty file")
    expect_error(path, 0, "empty file", read=read_info)


def test_bad_magic_and_unsupported_version(snap: Path) -> None:
    data = snap.read_bytes()
    snap.write_bytes(b"PK\x03\x04" + data[4:])
    expect_error(snap, 0, "bad magic b'PK\\x03\\x04' (expected b'KMSN'): not a metadata snapshot")
    snap.write_bytes(data[:4] + struct.pack(">I", 2) + data[8:])
    expect_error(snap, 4, "unsupported snapshot format version 2 (this reader supports 1)")
    expect_error(snap, 4, "unsupported snapshot format version 2", read=read_info)


def test_header_damage(snap: Path) -> None:
    data = snap.read_bytes()
    snap.write_bytes(data[:20] + bytes([data[20] ^ 0x40]) + data[21:])
    expect_error(snap, 16, "header CRC mismatch (stored 0x")
    snap.write_bytes(data[:8] + struct.pack(">I", 1 << 30) + data[12:])
    expect_error(snap, 8, "header length 1073741824 exceeds")


def test_truncation_anywhere_is_named(snap: Path) -> None:
    data = snap.read_bytes()
    info = read_info(snap)
    first, second = frames(data)[0], frames(data)[1]
    cases = [
        (2, 0, "truncated: the magic needs 4 bytes, the file has 2 left"),
        (10, 4, "truncated: the file prefix needs 12 bytes, the file has 6 left"),
        (20, 16, "truncated: the header needs"),
        (first[0] + 5, first[0], "truncated: the frame header of record 0 needs 8 bytes, the "
                                 "file has 5 left"),
        (second[0] + 8 + 2, second[0] + 8, f"truncated: record 1 needs {second[1]} bytes, the "
                                           "file has 2 left"),
        (info.records_end + 10, info.records_end, "truncated: the footer"),
        (len(data) - 5, len(data) - 16, "truncated: the trailer needs 16 bytes, the file has 11"),
    ]
    for cut, offset, fragment in cases:
        snap.write_bytes(data[:cut])
        expect_error(snap, offset, fragment)
    # Seeking readers find the trailer gone first.
    snap.write_bytes(data[:-1])
    expect_error(snap, len(data) - 5, "bad trailer magic", read=read_info)
    expect_error(snap, len(data) - 5, "truncated or not a snapshot", read=iter_records)


def test_crc_mismatch_at_a_frame(snap: Path) -> None:
    data = snap.read_bytes()
    start, length = frames(data)[7]
    damaged = bytearray(data)
    damaged[start + 8 + length // 2] ^= 0x01
    snap.write_bytes(bytes(damaged))
    expect_error(snap, start, "record 7: CRC mismatch (stored 0x")
    expect_error(snap, start, "record 7: CRC mismatch", read=lambda p: iter_records(p, 6, 8))
    assert len(list(iter_records(snap, 0, 6))) == 6  # other ranges still read
    damaged = bytearray(data)
    damaged[start] = 0xFF  # the length itself
    snap.write_bytes(bytes(damaged))
    expect_error(snap, start, "record 7: length")


def test_malformed_and_unknown_records(snap: Path) -> None:
    data = snap.read_bytes()
    start, length = frames(data)[8]  # a PartitionRecord
    snap.write_bytes(with_record(data, 8, b"\xff" * length))
    expect_error(snap, start, "record 8: malformed record")
    expect_error(snap, start, "record 8: malformed record", read=iter_records)
    rec = data[start + 8:start + 8 + length]
    assert rec[:2] == b"\x08\x01"  # version 1
    snap.write_bytes(with_record(data, 8, b"\x08\x07" + rec[2:]))
    expect_error(snap, start, "record 8: at offset 41: unsupported version 7 of PartitionRecord "
                              "(this reader supports version 1)")
    expect_error(snap, start, "unsupported version 7 of PartitionRecord", read=iter_records)


def test_records_that_do_not_replay(tmp_path: Path) -> None:
    tid = uuid.UUID(int=9)
    recs = [R.topic("a", tid), R.partition(tid, 0, [1]), R.partition(uuid.UUID(int=8), 0, [1])]
    raw = raw_snapshot([r.SerializeToString() for r in recs])
    path = tmp_path / "dangling"
    path.write_bytes(raw)
    start = frames(raw)[2][0]
    expect_error(path, start, "record 2: PartitionRecord at offset 41: topic "
                              "00000000-0000-0000-0000-000000000008 does not exist")


def test_footer_and_trailer_damage(snap: Path) -> None:
    data = snap.read_bytes()
    info = read_info(snap)
    footer = info.records_end
    damaged = bytearray(data)
    damaged[footer + 20] ^= 0x10  # inside the index
    snap.write_bytes(bytes(damaged))
    expect_error(snap, footer, "footer CRC mismatch")
    expect_error(snap, footer, "footer CRC mismatch", read=read_info)
    snap.write_bytes(data[:-4] + b"XXXX")
    expect_error(snap, len(data) - 4, "bad trailer magic b'XXXX'")
    expect_error(snap, len(data) - 4, "bad trailer magic", read=read_info)
    snap.write_bytes(data[:-16] + struct.pack(">QI4s", footer + 1, 40, b"KMSN"))
    expect_error(snap, len(data) - 16, "trailer points to a footer")
    snap.write_bytes(data + b"\x00")
    expect_error(snap, len(data), "unexpected bytes after the trailer")


def test_index_that_lies(tmp_path: Path, image: MetadataImage) -> None:
    recs = [r.SerializeToString(deterministic=True) for r in image_records(image)]
    good = raw_snapshot(recs, interval=4)
    starts = [s for s, _ in frames(good)][::4]
    lying = raw_snapshot(recs, interval=4, index=[starts[0], starts[1] + 1, *starts[2:]])
    path = tmp_path / "lying"
    path.write_bytes(lying)
    footer = read_info(path).records_end
    expect_error(path, footer, f"index entry 1 says record 4 is at byte {starts[1] + 1}, it is "
                               f"at byte {starts[1]}")
    out_of_order = raw_snapshot(recs, interval=4, index=[starts[0], starts[2], starts[1],
                                                         *starts[3:]])
    path.write_bytes(out_of_order)
    expect_error(path, footer, "index entry 2", read=read_info)


def test_every_error_is_a_single_line_naming_the_file(snap: Path) -> None:
    data = snap.read_bytes()
    for cut in range(0, len(data), 7):
        snap.write_bytes(data[:cut])
        with pytest.raises(SnapshotError) as e:
            read_snapshot(snap)
        assert re.fullmatch(rf"snapshot {re.escape(str(snap))}: byte \d+: [^\n]+", str(e.value))
