"""One RocksDB per log directory holding every partition log kept there, and the flush policy
that decides when its writes are made durable.

Keys sort by (kind, topic id, partition, offset), big-endian, so one partition's batches are
adjacent and in offset order: a fetch is a range scan from the batch holding the fetch
offset, retention and truncation are range deletes.

    b"d" topic_id(16) partition(4) base_offset(8)  ->  batch head + frame   (partition_log)
    b"s" topic_id(16) partition(4)                 ->  log start, high watermark, log end, size
    b"e" topic_id(16) partition(4) epoch(4)        ->  the epoch's start offset (leader_epochs)
    b"t" topic_id(16) partition(4) producer_id(8)  ->  its open transaction's first offset (producer_state)
    b"a" topic_id(16) partition(4) last_offset(8)  ->  an aborted transaction (the aborted index)

Durability follows Kafka's ``log.flush.interval.messages`` / ``log.flush.interval.ms``
(docs/brokers.md has the measurements):

- default (neither set): every write goes to RocksDB's write-ahead log in the OS page cache
  (``sync=False``): it survives the broker process dying (kill -9), not the machine losing
  power; like Kafka, durability against machine failure comes from replication (acks=all).
- ``log.flush.interval.messages=1``: every append is fsynced (``sync=True``) before it is
  acknowledged or replicated; concurrent appends share one fsync (group commit, in a thread).
- ``log.flush.interval.messages=N`` or ``log.flush.interval.ms=T``: the WAL is fsynced in the
  background after N messages or every T ms; acknowledgements do not wait for it.
"""
from __future__ import annotations

import asyncio
import logging
import os
import uuid
from collections.abc import Callable
from concurrent.futures import Executor, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, NoReturn, TypeVar

from rocksdict import DBCompressionType, Options, Rdict, WriteBatch, WriteOptions

log = logging.getLogger("brokerd.log")

T = TypeVar("T")

LONG_MAX = (1 << 63) - 1
PARTITIONS_DIR = "partitions"


class StorageFailure(Exception):
    """A log directory cannot be written or read (Kafka's KafkaStorageException).
    ``cause``: RocksDB's error; ``unreadable``: a read failed (a checksum, an I/O error), so the
    stored data itself is bad and reopening the store would not mend it (``log_dir_failure``
    keeps the broker off it)."""

    def __init__(self, message: str, log_dir: str = "", cause: str = "", unreadable: bool = False) -> None:
        super().__init__(message)
        self.log_dir = log_dir
        self.cause = cause or message
        self.unreadable = unreadable


@dataclass(frozen=True, slots=True)
class FlushPolicy:
    interval_messages: int = LONG_MAX  # log.flush.interval.messages
    interval_ms: int = LONG_MAX        # log.flush.interval.ms

    @property
    def sync_every_write(self) -> bool:
        return self.interval_messages <= 1


def store_options() -> Options:
    """The partition store's RocksDB options (docs/brokers.md, "RocksDB settings"): no
    compression (record values rarely compress; save the CPU), 64 MiB write buffers, and
    batches of 4 KiB and more in blob files at flush (BlobDB, WiscKey-style), so compactions
    move keys, not the record bytes. Values in SST blocks instead (checked with XXH3, where
    blob reads are checked with a software CRC32C in rocksdict's build) read about three times
    cheaper, but cost more per byte written than that saves, with slower writes, longer
    stalls and more disk (``bench.partition_store --sustained``; the figures in the docs).

    Blob garbage collection starts off: ``BlobGarbageCollection`` turns it on while garbage
    is more than half of the blob files' bytes. Retention deletes every partition's oldest
    batches, so the oldest blob files empty and go on their own; with it always on, RocksDB
    moved the batches of the oldest quarter of the blob files into new ones, just before
    retention deleted them (a third to a half of the bytes put written again: 5.35 against 4.02 ms
    of CPU per MB written, "The brokers' storage CPU per MB produced" in the docs). It is still needed where a blob file
    cannot empty (a partition retained far longer than the others keeps a batch in each); while
    it runs, the oldest blob files with more than half garbage are compacted at once
    (``blob_gc_force_threshold``)."""
    opts = Options(raw_mode=True)
    opts.create_if_missing(True)
    opts.set_compression_type(DBCompressionType.none())
    opts.set_max_background_jobs(2)
    opts.set_write_buffer_size(64 << 20)
    opts.set_max_write_buffer_number(4)
    opts.set_enable_blob_files(True)
    opts.set_min_blob_size(4096)
    opts.set_blob_file_size(256 << 20)
    opts.set_enable_blob_gc(False)
    opts.set_blob_gc_force_threshold(BlobGarbageCollection.ON)
    return opts


class BlobGarbageCollection:
    """RocksDB's blob garbage collection, on while the blob files' garbage (the bytes of
    batches deleted or relocated whose files still hold them) is more than ``ON`` of their
    bytes, and off again once it is below ``OFF`` (``check``, every ``EVERY`` bytes staged and
    at open): disk space stays within about twice the live batches whatever the partitions'
    retention, and no batch is moved that retention deletes anyway (``store_options``)."""

    ON, OFF = 0.5, 0.25
    EVERY = 64 << 20  # a write buffer's worth: garbage appears as flushes and compactions run

    def __init__(self) -> None:
        self.on = False
        self.next_check = 0  # in LogStore.staged_bytes

    def check(self, db: Rdict) -> bool:
        """Switch the collection on or off as the garbage says; returns whether it is on."""
        total = db.property_int_value("rocksdb.live-blob-file-size") or 0
        garbage = db.property_int_value("rocksdb.live-blob-file-garbage-size") or 0
        wanted = garbage > total * (self.OFF if self.on else self.ON)
        if wanted != self.on:
            db.set_options({"enable_blob_garbage_collection": "true" if wanted else "false"})
            self.on = wanted
            log.info("blob garbage collection %s: %d of %d bytes of blob files are garbage",
                     "on" if wanted else "off", garbage, total)
        return wanted


def tp_prefix(topic_id: uuid.UUID, partition: int) -> bytes:
    return topic_id.bytes + partition.to_bytes(4, "big")


class LogStore:
    """A log directory's RocksDB. Every write goes through ``write`` so that writes reach the
    database in the order they were made, whatever the flush policy."""

    def __init__(self, log_dir: str, policy: FlushPolicy = FlushPolicy(),
                 on_failure: Callable[[StorageFailure], None] | None = None) -> None:
        """``on_failure``: called once, at the directory's first failure, before the failing
        call raises (the broker halts there: ``log_dir_failure``); without it the failure is
        logged and every later call raises it (tools, unit tests)."""
        self.log_dir = log_dir
        self.on_failure = on_failure
        self.path = os.path.join(log_dir, PARTITIONS_DIR)
        self.policy = policy
        try:
            # The default column family's options named too: rocksdict otherwise opens an
            # existing store with the options saved in it (its OPTIONS file), whatever is passed.
            opts = store_options()
            self.db = Rdict(self.path, opts, column_families={"default": opts})
        except Exception as e:  # rocksdict raises plain exceptions
            raise StorageFailure(f"cannot open the partition store in {self.path}: {e}") from None
        self._plain = WriteOptions()
        self._synced = WriteOptions()
        self._synced.sync = True
        self._queue: list[tuple[WriteBatch, asyncio.Future]] = []
        self._drainer: asyncio.Task | None = None
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="log-flush")
        self._unflushed = 0
        self._flushing = False
        self._periodic: asyncio.Task | None = None
        # Flushes started by log.flush.interval.messages, kept until they end (the loop holds
        # only weak references to tasks); close() awaits them.
        self._flushes: set[asyncio.Task] = set()
        # Calls on the database running in threads; close() waits for them.
        self._in_threads: set[asyncio.Future] = set()
        self.failure: StorageFailure | None = None
        self.closed = False
        #: Bytes of batches staged in this store's writes since it opened (``PartitionLog._stage``):
        #: how far back, in the store's writes, a batch was appended.
        self.staged_bytes = 0
        self.blob_gc = BlobGarbageCollection()
        self._check_blob_gc()

    # -- writes -------------------------------------------------------------------------------

    def write(self, wb: WriteBatch, messages: int = 0) -> asyncio.Future | None:
        """Write ``wb``; returns None once written, or a future that completes when it is
        durable (``log.flush.interval.messages=1``). Raises StorageFailure."""
        if self.failure is not None:
            raise self.failure
        if self.staged_bytes >= self.blob_gc.next_check:
            self._check_blob_gc()
        if self.policy.sync_every_write:
            fut = asyncio.get_running_loop().create_future()
            self._queue.append((wb, fut))
            if self._drainer is None:
                self._drainer = asyncio.get_running_loop().create_task(self._drain())
            return fut
        try:
            self.db.write(wb, self._plain)
        except Exception as e:
            self._fail(e)
        if messages and self.policy.interval_messages < LONG_MAX:
            self._unflushed += messages
            if self._unflushed >= self.policy.interval_messages and not self._flushing:
                self._unflushed = 0
                task = asyncio.get_running_loop().create_task(self.flush())
                self._flushes.add(task)
                task.add_done_callback(self._flushes.discard)
        return None

    def _check_blob_gc(self) -> None:
        """``BlobGarbageCollection.check``, then again ``EVERY`` bytes staged from now; a
        failure to read the properties or set the option is logged, not a failed directory
        (nothing was read or written)."""
        self.blob_gc.next_check = self.staged_bytes + self.blob_gc.EVERY
        try:
            self.blob_gc.check(self.db)
        except Exception as e:  # rocksdict raises plain exceptions
            log.warning("cannot switch blob garbage collection in %s: %s", self.path, e)

    def write_now(self, wb: WriteBatch) -> None:
        """A write that need not be durable at once (high watermark checkpoints)."""
        if self.failure is not None:
            raise self.failure
        try:
            self.db.write(wb, self._plain)
        except Exception as e:
            self._fail(e)

    async def _drain(self) -> None:
        """Group commit: everything queued while the previous fsync ran shares the next one."""
        try:
            while self._queue:
                group, self._queue = self._queue, []
                try:
                    await self._in_thread(self._executor, self._write_group, [wb for wb, _ in group])
                except StorageFailure as e:
                    for _, fut in group:
                        if not fut.done():
                            fut.set_exception(e)
                    continue
                for _, fut in group:
                    if not fut.done():
                        fut.set_result(None)
        finally:
            self._drainer = None

    def _write_group(self, group: list[WriteBatch]) -> None:
        try:
            for wb in group[:-1]:
                self.db.write(wb, self._plain)
            # One fsync of the WAL covers every write before it.
            self.db.write(group[-1], self._synced if self.policy.sync_every_write else self._plain)
        except Exception as e:
            self._fail(e)

    def _failed(self, e: BaseException, *, unreadable: bool = False) -> StorageFailure:
        """The directory's failure, made and reported at the first one."""
        if self.failure is None:
            self.failure = StorageFailure(f"log directory {self.log_dir} failed: {e}", self.log_dir, str(e),
                                          unreadable)
            if self.on_failure is not None:
                self.on_failure(self.failure)
            else:
                log.error("%s", self.failure)
        return self.failure

    def _fail(self, e: BaseException, *, unreadable: bool = False) -> NoReturn:
        raise self._failed(e, unreadable=unreadable)

    async def flush(self) -> None:
        """fsync the write-ahead log (in a thread: the event loop keeps serving)."""
        if self.closed or self._flushing:
            return
        self._flushing = True
        try:
            await self._in_thread(self._executor, self.db.flush_wal, True)
        except Exception as e:  # what was acknowledged may not be on the disk: the directory failed
            self._failed(e)
        finally:
            self._flushing = False

    def start(self) -> None:
        if self.policy.interval_ms < LONG_MAX:
            self._periodic = asyncio.get_running_loop().create_task(self._flush_every(self.policy.interval_ms / 1000))

    async def _flush_every(self, period: float) -> None:
        while True:
            await asyncio.sleep(period)
            await self.flush()

    async def in_thread(self, call: Callable[..., T], *args: object) -> T:
        """Run a blocking call on the database (a compaction) in a thread, so the loop keeps serving."""
        return await self._in_thread(None, call, *args)

    async def _in_thread(self, executor: Executor | None, call: Callable[..., T], *args: object) -> T:
        """``call`` in ``executor``, tracked until it ends even if the caller is cancelled (the
        broker's stop cancels the cleaner and the periodic flush mid-call): RocksDB cannot be
        closed under a running call (rocksdict refuses with "Already borrowed")."""
        fut = asyncio.get_running_loop().run_in_executor(executor, call, *args)
        self._in_threads.add(fut)
        fut.add_done_callback(self._in_threads.discard)
        return await asyncio.shield(fut)  # (shield retrieves its outcome when the caller is gone)

    # -- reads --------------------------------------------------------------------------------

    def check(self, it: Any) -> None:
        """Raise StorageFailure if iterator ``it`` ended on an error, not at the end of its
        range: RocksDB ends an iterator at a block or blob whose checksum fails and
        only its status says so, so a read would otherwise return the log cut short. The
        directory fails as on a failed write (Kafka takes a log directory offline on an I/O
        error in a read too), its data unreadable."""
        try:
            it.status()
        except Exception as e:  # rocksdict raises plain exceptions
            self._fail(e, unreadable=True)

    def get(self, key: bytes) -> bytes | None:
        """One value, or None: a read that fails (a checksum, an I/O error) fails the directory
        as an iterator's does (``check``), instead of escaping as rocksdict's plain exception."""
        try:
            value: bytes | None = self.db.get(key)
        except Exception as e:  # rocksdict raises plain exceptions
            self._fail(e, unreadable=True)
        return value

    def count_staged(self, size: int) -> int:
        """Count a batch of ``size`` bytes staged in a write; returns ``staged_bytes`` before it,
        its mark for ``in_memtables``."""
        mark = self.staged_bytes
        self.staged_bytes = mark + size
        return mark

    def in_memtables(self, staged: int) -> bool:
        """Whether a batch staged when ``staged_bytes`` was ``staged`` is most likely still in
        RocksDB's memtables (not flushed): it and what was staged since are fewer bytes than
        half of what the memtables hold (their size counts keys and overhead too, 2 KiB when
        empty; a hint, not a promise)."""
        since = self.staged_bytes - staged
        return since < (self.db.property_int_value("rocksdb.cur-size-all-mem-tables") or 0) // 2

    def local_partitions(self) -> list[tuple[uuid.UUID, int]]:
        """Every partition with a log in this directory."""
        out = []
        it = self.db.iter()
        it.seek(b"s")
        while it.valid():
            k = it.key()
            if not k.startswith(b"s"):
                break
            out.append((uuid.UUID(bytes=k[1:17]), int.from_bytes(k[17:21], "big")))
            it.next()
        return out

    async def close(self) -> None:
        if self.closed:
            return
        if self._periodic is not None:
            self._periodic.cancel()
            await asyncio.gather(self._periodic, return_exceptions=True)
        while (drainer := self._drainer) is not None:  # writes queued meanwhile start another
            await asyncio.wait([drainer])  # not cancelled if close() is
        await asyncio.gather(*self._flushes, return_exceptions=True)
        while self._in_threads:  # calls whose callers were cancelled still run
            await asyncio.wait(list(self._in_threads))
        self.closed = True
        try:
            self.db.flush_wal(True)
        except Exception as e:
            log.warning("final fsync of %s failed: %s", self.path, e)
        self.db.close()
        self._executor.shutdown(wait=True)
