"""Closing a log directory's RocksDB while a thread still calls it fails with rocksdict's
"Already borrowed" (a broker's shutdown logged "shutdown of LogManager: Already borrowed") and
leaves the database open: ``LogStore.close`` must wait for every blocking call it handed to a
thread, even when the task that started the call was cancelled (the broker's shutdown cancels
the log cleaner and the periodic flush)."""
from __future__ import annotations

import asyncio
import threading
import time
import uuid

from brokerd.log_cleaner import clean
from brokerd.log_store import FlushPolicy, LogStore
from brokerd.partition_log import PartitionLog
from tests.test_compaction import COMPACT, _fill
from clients.compression import Codec


def _blocking(call, entered: threading.Event, release: threading.Event):
    """``call`` whose first run waits for ``release`` and then calls the database (as the
    broker's calls in threads do, for as long as a compaction or an fsync takes)."""
    def run(*args):
        if not entered.is_set():
            entered.set()
            release.wait(10)
        return call(*args)
    return run


async def _close_waits_for(store: LogStore, task: asyncio.Task, entered: threading.Event,
                           release: threading.Event) -> None:
    """Cancel ``task`` while its call runs in a thread: close() may only end after the call."""
    assert await asyncio.to_thread(entered.wait, 10), "the blocking call never started"
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    closing = asyncio.ensure_future(store.close())
    try:
        await asyncio.sleep(0.2)
        assert not closing.done(), "close() did not wait for the call still running in a thread"
    finally:
        release.set()
    await asyncio.wait_for(closing, 10)  # raises RuntimeError('Already borrowed') when it did not wait
    assert store.closed


def test_close_waits_for_a_cancelled_compactions_reclaim(tmp_path, monkeypatch):
    async def go():
        store = LogStore(str(tmp_path))
        plog = PartitionLog(store, uuid.uuid4(), 0)
        now = int(time.time() * 1000)
        await _fill(plog, Codec.NONE, now)
        entered, release = threading.Event(), threading.Event()
        monkeypatch.setattr(plog, "reclaim_space", _blocking(plog.reclaim_space, entered, release))
        task = asyncio.ensure_future(clean(plog, COMPACT, now))  # the cleaner, cancelled by stop()
        await _close_waits_for(store, task, entered, release)
    asyncio.run(go())


def test_close_waits_for_a_cancelled_periodic_flush(tmp_path, monkeypatch):
    async def go():
        store = LogStore(str(tmp_path), FlushPolicy(interval_ms=10))
        entered, release = threading.Event(), threading.Event()
        monkeypatch.setattr(store, "db", _Wrapped(store.db, "flush_wal", entered, release))
        store.start()
        await _close_waits_for(store, store._periodic, entered, release)
    asyncio.run(go())


class _Wrapped:
    """The database with one method made blocking (rocksdict's Rdict cannot be patched)."""

    def __init__(self, db, name: str, entered: threading.Event, release: threading.Event) -> None:
        self._db, self._name = db, name
        self._call = _blocking(getattr(db, name), entered, release)

    def __getattr__(self, name: str):
        return self._call if name == self._name else getattr(self._db, name)
