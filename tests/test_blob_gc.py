"""Blob garbage collection in the partition store (brokerd/log_store.py, BlobGarbageCollection):
off while retention empties the oldest blob files on its own (always on, RocksDB moved their
batches into new files just before retention deleted them), on while blob files that cannot
empty hold over half garbage."""
from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path

from rocksdict import Rdict

from brokerd.log_store import LogStore
from brokerd.partition_log import PartitionLog
from tests.test_log_store_files import _append, _files, _frames

TOPIC = uuid.UUID(int=32)


def _blob_files(store: LogStore) -> set[str]:
    return {f.name for f in _files(store, ".blob")}


def _settle(db: Rdict) -> None:
    """Until RocksDB runs and owes no flush or compaction (in a thread: ``LogStore.in_thread``)."""
    deadline = time.monotonic() + 60
    while any(db.property_int_value(f"rocksdb.{p}") for p in (
            "num-running-compactions", "num-running-flushes", "compaction-pending", "mem-table-flush-pending")):
        assert time.monotonic() < deadline, "RocksDB's compactions did not end within 60 s"
        time.sleep(0.05)


def test_retention_empties_the_oldest_blob_files_without_rewriting_their_batches(tmp_path: Path) -> None:
    """Every partition trimmed alike: the file holding only deleted batches goes, and the next
    oldest, whose batches are retained, is left as it is while flushes and compactions go on
    (with the collection always on, RocksDB moved the oldest quarter's batches into new files
    at the next compaction, just before retention would delete them)."""
    async def go() -> None:
        store = LogStore(str(tmp_path))
        logs = [PartitionLog(store, TOPIC, p) for p in range(3)]
        for round_ in range(8):  # 8 blob files, each with 10 batches of every partition
            for plog in logs:
                await _append(plog, 10, round_ * 20)
            store.db.flush(True)
        files = sorted(_blob_files(store))
        assert len(files) == 8, "a compaction moved batches into a blob file of its own"
        for plog in logs:  # retention: the oldest 10 batches (20 records) of every partition
            assert plog.delete_before(20) > 0
            await store.in_thread(plog.reclaim_space)
        for round_ in range(8, 12):  # appends go on: four more flushes, and compactions
            for plog in logs:
                await _append(plog, 10, round_ * 20)
            store.db.flush(True)
        await store.in_thread(_settle, store.db)
        assert store.db.property_int_value("rocksdb.num-files-at-level0") == 0  # compacted
        left = _blob_files(store)
        assert files[0] not in left and set(files[1:]) <= left, "retained batches were rewritten"
        assert [len(_frames(plog)) for plog in logs] == [110] * 3
        assert not store.blob_gc.check(store.db)
        await store.close()
    asyncio.run(go())


def test_blob_files_a_long_retained_partition_keeps_are_collected_once_half_is_garbage(tmp_path: Path) -> None:
    """A partition retained whole keeps a batch in every blob file: none empties, and once over
    half their bytes are garbage the collection is switched on, and off again when done."""
    async def go() -> None:
        store = LogStore(str(tmp_path))
        slow, fast = PartitionLog(store, TOPIC, 0), PartitionLog(store, TOPIC, 1)
        for round_ in range(8):  # 8 blob files, each with 1 batch of the slow partition, 20 of the fast
            await _append(slow, 1, round_)
            await _append(fast, 20, round_ * 20)
            store.db.flush(True)
        kept = _frames(slow)
        assert fast.delete_before(2 * 20 * 7) > 0  # the fast partition keeps its last 20 batches
        await store.in_thread(fast.reclaim_space)
        before = _blob_files(store)
        assert len(before) == 8  # the slow partition keeps every file
        assert not store.blob_gc.on
        assert store.blob_gc.check(store.db)  # over half of them is garbage: on
        for round_ in range(8, 12):  # writes go on: their flushes and compactions collect
            await _append(fast, 20, round_ * 20)
            store.db.flush(True)
        await store.in_thread(_settle, store.db)
        # the oldest quarter of the files (RocksDB's age cutoff) had their slow batches moved out
        # and went; everything reads back as written
        assert not set(sorted(before)[:2]) & _blob_files(store)
        assert _frames(slow) == kept
        assert not store.blob_gc.check(store.db)  # less than a quarter is garbage now: off again
        await store.close()
    asyncio.run(go())
