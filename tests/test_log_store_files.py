"""The partition store's files (brokerd/log_store.py): a store written with other RocksDB
options is opened with LogStore's own (rocksdict otherwise keeps the options saved in the
store), and a byte flipped in a table or blob file fails a read with StorageFailure rather
than return the log cut short at the bad block; with the broker's handler, a failed directory
halts the broker and a store that failed a read is not opened again. A fetch reads without
RocksDB's checksums and checks each value itself (brokerd/stored_batch.py): a byte flipped in
a value's CRC-covered records, in the fields Kafka's CRC leaves out, or in a table file's key
is found there, and the read again with RocksDB's checksums fails the directory."""
from __future__ import annotations

import asyncio
import os
import uuid
from pathlib import Path

import pytest
from rocksdict import BlockBasedOptions, DBCompressionType, Options, WriteBatch

import brokerd.log_dir_failure
import brokerd.log_store
from brokerd.log_dir_failure import MARKER, halt_broker, refuse_failed
from brokerd.log_store import LogStore, StorageFailure
from brokerd.partition_log import PartitionLog
from brokerd.stored_batch import HEAD_BYTES
from clients.records import build_batch, varint
from protos import broker_pb2 as pb

TS0 = 1_700_000_000_000
TOPIC = uuid.UUID(int=31)


def values_in_tables() -> Options:
    """Options a store might have been made with: LogStore's without blob files."""
    o = Options(raw_mode=True)
    o.create_if_missing(True)
    o.set_compression_type(DBCompressionType.none())
    return o


def _batch(i: int) -> pb.RecordBatch:
    """Two records, 6-13 KB in all: over LogStore's min_blob_size."""
    return build_batch([(b"k%d" % i, os.urandom(3000 + 700 * (i % 10)), TS0 + i, ()),
                        (b"k%d" % (i + 1), os.urandom(3000), TS0 + i, ())])


async def _append(plog: PartitionLog, n: int, first: int) -> None:
    for i in range(first, first + n):
        await plog.append_as_leader(_batch(i), 0)
    plog.set_high_watermark(plog.log_end_offset)
    plog.checkpoint()


def _frames(plog: PartitionLog) -> list[bytes]:
    """Every stored batch's frame, read as a fetch reads them."""
    frames, _ = plog.read(plog.log_start_offset, 1 << 30, plog.log_end_offset)
    return [bytes(f) for f in frames]


def _flip(path: Path, at: int) -> None:
    data = bytearray(path.read_bytes())
    data[at] ^= 0x55
    path.write_bytes(bytes(data))


def _in_file(path: Path, part: bytes) -> int:
    """Where ``part`` (of a stored value or key) is in ``path``: a byte flipped there is one a read
    of that value or key reads (a blob record's own header and key are not read by a fetch)."""
    at = path.read_bytes().find(part)
    assert at >= 0
    return at


def _files(store: LogStore, suffix: str) -> list[Path]:
    return sorted(Path(store.path).glob(f"*{suffix}"))


def _open(log_dir: Path, monkeypatch: pytest.MonkeyPatch, other_options: bool = False) -> LogStore:
    with monkeypatch.context() as m:
        if other_options:
            m.setattr(brokerd.log_store, "store_options", values_in_tables)
        return LogStore(str(log_dir))


def test_a_store_made_with_other_options_is_opened_with_the_stores_own(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Before, LogStore's options were passed to rocksdict and silently replaced by the ones
    saved in the store: a store made without blob files never got any."""
    async def go() -> None:
        store = _open(tmp_path, monkeypatch, other_options=True)
        logs = [PartitionLog(store, TOPIC, p) for p in range(2)]
        for plog in logs:
            await _append(plog, 30, 0)
        store.db.flush(True)
        old = [_frames(plog) for plog in logs]
        assert all(len(f) == 30 for f in old) and not _files(store, ".blob")
        await store.close()

        # LogStore opens it: everything reads back, and what it appends goes to blob files
        store = _open(tmp_path, monkeypatch)
        logs = [PartitionLog(store, TOPIC, p) for p in range(2)]
        assert [(plog.log_start_offset, plog.high_watermark, plog.log_end_offset) for plog in logs] == [(0, 60, 60)] * 2
        assert [_frames(plog) for plog in logs] == old
        for plog in logs:
            await _append(plog, 20, 30)
        store.db.flush(True)
        assert _files(store, ".blob"), "LogStore's appends went to the table files: its options were not taken"
        whole = [_frames(plog) for plog in logs]
        assert [w[:30] for w in whole] == old and all(len(w) == 50 for w in whole)

        # retention on one partition, compactions (as the log cleaner runs them), a restart
        assert logs[0].delete_before(40) > 0 and logs[0].log_start_offset == 40  # 20 batches of 2 records
        for plog in logs:
            await store.in_thread(plog.reclaim_space)
        assert _frames(logs[0]) == whole[0][20:] and _frames(logs[1]) == whole[1]
        await store.close()
        store = _open(tmp_path, monkeypatch)
        logs = [PartitionLog(store, TOPIC, p) for p in range(2)]
        assert _frames(logs[0]) == whole[0][20:] and _frames(logs[1]) == whole[1]
        assert [(plog.log_start_offset, plog.log_end_offset) for plog in logs] == [(40, 100), (0, 100)]
        await store.close()
    asyncio.run(go())


@pytest.mark.parametrize("suffix", [".blob", ".sst"])
def test_a_flipped_byte_in_a_store_file_fails_the_read_not_cuts_it_short(tmp_path: Path, suffix: str,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """RocksDB ends an iterator at a blob (CRC32C) or table block (XXH3) that fails its check,
    and only the iterator's status says so. Before LogStore.check, a fetch got the batches
    before the bad one and nothing after, as if the log ended there. (``.sst``: the table
    holds values too, from a store made without blob files.)"""
    async def go() -> None:
        store = _open(tmp_path, monkeypatch, other_options=suffix == ".sst")
        plog = PartitionLog(store, TOPIC, 0)
        await _append(plog, 20, 0)
        records = _frames(plog)[10][-400:-300]
        store.db.flush(True)
        await store.close()
        data_file = max(_files(store, suffix), key=lambda f: f.stat().st_size)
        _flip(data_file, _in_file(data_file, records) + 50)  # within a batch's records, halfway through the log

        store = _open(tmp_path, monkeypatch)
        plog = PartitionLog(store, TOPIC, 0)
        with pytest.raises(StorageFailure) as e:
            plog.read(0, 1 << 30, plog.log_end_offset)
        assert "Corruption" in str(e.value) and str(tmp_path) in str(e.value) and "\n" not in str(e.value)
        with pytest.raises(StorageFailure):  # retention's view of the log too
            plog.stored_batches()
        with pytest.raises(StorageFailure):  # and the directory has failed, as on a failed write
            store.write_now(WriteBatch(raw_mode=True))
        await store.close()
    asyncio.run(go())


class _Halted(Exception):
    """What the broker's halt (os._exit) raises here, so that the test process goes on."""


def _halting(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    statuses: list[int] = []

    def halt(status: int) -> None:
        statuses.append(status)
        raise _Halted
    monkeypatch.setattr(brokerd.log_dir_failure, "halt", halt)
    return statuses


def test_a_failed_read_halts_the_broker_and_keeps_it_off_the_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                   caplog: pytest.LogCaptureFixture) -> None:
    """With the broker's handler (brokerd/log_dir_failure.py), a read failing its checksum halts
    at once (status 1, one line naming the directory and the cause), before the read returns,
    and marks the store: a restart refuses it in one line until the store and the marker are
    removed. Before, the broker went on answering KAFKA_STORAGE_ERROR, and restarted it served
    the store again."""
    statuses = _halting(monkeypatch)

    async def go() -> None:
        store = _open(tmp_path, monkeypatch)
        plog = PartitionLog(store, TOPIC, 0)
        await _append(plog, 20, 0)
        records = _frames(plog)[10][-400:-300]
        store.db.flush(True)
        await store.close()
        data_file = max(_files(store, ".blob"), key=lambda f: f.stat().st_size)
        _flip(data_file, _in_file(data_file, records) + 50)

        refuse_failed((str(tmp_path),))  # nothing marked yet
        store = LogStore(str(tmp_path), on_failure=halt_broker)
        plog = PartitionLog(store, TOPIC, 0)
        caplog.clear()
        with pytest.raises(_Halted):
            plog.read(0, 1 << 30, plog.log_end_offset)
        assert statuses == [1]
        [line] = [r.getMessage() for r in caplog.records]
        assert line.startswith(f"Shutdown broker because log directory {tmp_path} has failed: Corruption") and \
            "\n" not in line
        await store.close()
    asyncio.run(go())
    assert (tmp_path / MARKER).read_text().count("\n") == 1
    with pytest.raises(StorageFailure) as e:
        refuse_failed((str(tmp_path / "other"), str(tmp_path)))
    message = str(e.value)
    assert message.startswith(f"log directory {tmp_path} holds a partition store that failed a read (at ")
    assert "Corruption" in message and f"remove {tmp_path / 'partitions'} and {tmp_path / MARKER}" in message
    assert "\n" not in message


def test_a_failed_write_or_fsync_halts_the_broker_without_marking_the_store(tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """A write or an fsync that fails halts too (Kafka fails the directory on either), but
    leaves no marker: RocksDB's files stay consistent after a failed write, and its recovery at
    the next open checks its write-ahead log. Before, a failed fsync was only logged."""
    statuses = _halting(monkeypatch)

    def broken(*args: object) -> None:
        raise OSError(5, "Input/output error")

    async def go() -> None:
        for call in ("write", "flush_wal"):
            store = LogStore(str(tmp_path), on_failure=halt_broker)
            db = store.db
            store.db = type("Broken", (), {"close": db.close, "flush_wal": db.flush_wal, call: broken})()
            with pytest.raises(_Halted):
                if call == "write":
                    store.write_now(WriteBatch(raw_mode=True))
                else:
                    await store.flush()
            store.db = db
            await store.close()
    asyncio.run(go())
    assert statuses == [1, 1]
    assert not (tmp_path / MARKER).exists()
    refuse_failed((str(tmp_path),))


def test_a_failed_point_read_fails_the_directory_like_an_iterators(tmp_path: Path) -> None:
    """A partition's state and a compaction's old batch are read with one ``get``, not an
    iterator: a checksum that fails there fails the directory as ``check`` does (the broker
    halts and marks the store). Before, rocksdict's plain exception escaped the open."""
    async def go() -> None:
        store = LogStore(str(tmp_path))
        await _append(PartitionLog(store, TOPIC, 0), 2, 0)
        db = store.db

        def corrupted(key: bytes) -> bytes:
            raise Exception("Corruption: block checksum mismatch")
        store.db = type("Corrupted", (), {"get": staticmethod(corrupted), "iter": db.iter})()
        with pytest.raises(StorageFailure, match="Corruption: block checksum mismatch"):
            PartitionLog(store, TOPIC, 0)
        assert store.failure is not None and store.failure.unreadable
        store.db = db
        await store.close()
    asyncio.run(go())


def _value_parts(value: bytes) -> dict[str, int]:
    """Where each part of a stored value (brokerd/stored_batch.py) starts, from the value's start."""
    p = HEAD_BYTES + 1
    while value[p] & 0x80:  # the frame's length
        p += 1
    p += 1
    epoch = p + 1 + len(varint(int.from_bytes(value[:8], "big") - 1))  # past field 1, the base offset
    assert value[p] == 0x08 and value[epoch] == 0x10, "base offset (field 1), then the leader epoch (field 2)"
    return {"head": 3, "frame length": HEAD_BYTES + 1, "base offset": p + 1, "leader epoch": epoch + 1,
            "records": len(value) - 500}


@pytest.mark.parametrize("part", ["records", "head", "frame length", "base offset", "leader epoch"])
def test_a_fetch_finds_a_flipped_byte_in_a_value_without_rocksdbs_checksums(tmp_path: Path, part: str,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """A fetch reads values without RocksDB's blob CRC32C (software in rocksdict's build) and
    checks each itself: Kafka's CRC-32C over the records and the fields it covers, and the
    fields outside it against the key (base offset), the leader epoch cache (the epoch) and the
    value's size (the frame's length); the head against the batch. A byte flipped in any of
    them is found there (``rereads``), and the read done again with RocksDB's checksums fails
    the directory, as before."""
    async def go() -> None:
        store = _open(tmp_path, monkeypatch)
        plog = PartitionLog(store, TOPIC, 0)
        for i in range(20):  # base offsets 2i; epoch 3, then 4
            await plog.append_as_leader(_batch(i), 3 if i < 10 else 4)
        plog.set_high_watermark(plog.log_end_offset)
        value = store.get(plog._key(20))  # the eleventh batch
        assert value is not None
        store.db.flush(True)
        assert plog.read(0, 1 << 30, plog.log_end_offset)[0] and plog.rereads == 0
        await store.close()
        blob = max(_files(store, ".blob"), key=lambda f: f.stat().st_size)
        _flip(blob, _in_file(blob, value[:200]) + _value_parts(value)[part])

        store = _open(tmp_path, monkeypatch)
        plog = PartitionLog(store, TOPIC, 0)
        with pytest.raises(StorageFailure, match="Corruption"):
            plog.read(0, 1 << 30, plog.log_end_offset)
        assert plog.rereads == 1, "the fetch's own check found it"
        await store.close()
    asyncio.run(go())


def test_a_fetch_finds_a_flipped_byte_in_a_tables_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The table files hold the keys (and where each value is in the blob files); a fetch reads
    their blocks without RocksDB's XXH3 too, and does not put them in the block cache. A byte
    flipped in a key's offset: the key's offset is not the base offset of the value under it, so
    the read is done again with RocksDB's checksums, which fails at the block. (Small blocks, so
    that the partition's state, read with checksums when the log opens, is in another block.)"""
    options = brokerd.log_store.store_options

    def small_blocks() -> Options:
        opts = options()
        table = BlockBasedOptions()
        table.set_block_size(256)
        opts.set_block_based_table_factory(table)
        return opts
    monkeypatch.setattr(brokerd.log_store, "store_options", small_blocks)

    async def go() -> None:
        store = LogStore(str(tmp_path))
        plog = PartitionLog(store, TOPIC, 0)
        await _append(plog, 40, 0)
        store.db.flush(True)
        await store.close()
        [table] = _files(store, ".sst")
        # A key in full (at a block's restart point): the partition's key prefix, the offset,
        # then RocksDB's sequence number and type, a blob index (0x11): one in a data block.
        data, n = table.read_bytes(), len(plog._data)
        at = next(i for i in range(len(data)) if data.startswith(plog._data, i)
                  and 10 <= int.from_bytes(data[i + n:i + n + 8], "big") < 80 and data[i + n + 8] == 0x11)
        _flip(table, at + len(plog._data) + 7)

        store = LogStore(str(tmp_path))
        plog = PartitionLog(store, TOPIC, 0)
        with pytest.raises(StorageFailure, match="Corruption"):
            plog.read(0, 1 << 30, plog.log_end_offset)
        assert plog.rereads == 1
        await store.close()
    asyncio.run(go())
