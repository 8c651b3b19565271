"""The broker's log directories (``log.dirs``): one RocksDB store in each, and which directory
holds which partition. A new partition goes to the directory holding the fewest, as Kafka
places new logs.

A replica moved to another directory (AlterReplicaLogDirs, ``log_dir_moves``) has a *future*
log there until it has caught up, as Kafka's LogManager keeps ``-future`` directories: a
marker key in the destination store says its log of the partition is the future one. The swap
cannot be one write (two RocksDBs), so it goes in three, each recoverable after a crash:

1. the current store is marked *moved* (its log is replaced by the future one, complete);
2. the future store gets the current log's epochs, producer state and log start in the write
   that drops its future marker: it is now the current log;
3. the old log and its *moved* marker are deleted.

At start, a *moved* marker finishes steps 2-3; a future marker alone is a move to resume.
"""
from __future__ import annotations

import logging
import uuid
from collections.abc import Callable

from rocksdict import WriteBatch

from .log_store import FlushPolicy, LogStore, StorageFailure, tp_prefix
from .partition_log import _STATE, PartitionLog, stored_state  # _STATE: the state record's one layout

TopicPartitionId = tuple[uuid.UUID, int]

log = logging.getLogger("brokerd.log")

_FUTURE = b"f"  # + tp: this store's log of tp is a future log
_MOVED = b"x"   # + tp: this store's log of tp is being replaced by the future log elsewhere
#: What the future log takes from the current one at the swap: epochs, producers, open
#: transactions, the aborted index and where compaction got to (key layout in ``log_store``).
_COPIED = (b"e", b"p", b"t", b"a", b"c")
_END = b"\xff" * 9


class LogManager:
    def __init__(self, log_dirs: tuple[str, ...], policy: FlushPolicy,
                 on_failure: Callable[[StorageFailure], None] | None = None) -> None:
        """``on_failure``: each store's (``LogStore``), the broker's halt."""
        self.stores = [LogStore(d, policy, on_failure) for d in log_dirs]
        self._where: dict[TopicPartitionId, LogStore] = {}
        self._future: dict[TopicPartitionId, LogStore] = {}
        #: Where a replica this broker does not host yet goes when it comes (AlterReplicaLogDirs
        #: ahead of a reassignment; Kafka's preferred log dirs, kept in memory as Kafka does).
        self._preferred: dict[TopicPartitionId, LogStore] = {}
        moved: list[tuple[TopicPartitionId, LogStore]] = []
        for s in self.stores:
            futures, moving = set(_marked(s, _FUTURE)), set(_marked(s, _MOVED))
            for tp in s.local_partitions():
                if tp in futures:
                    self._future[tp] = s
                elif tp in moving:
                    moved.append((tp, s))
                else:
                    self._where[tp] = s
            for tp in (futures | moving) - set(s.local_partitions()):
                _unmark(s, _FUTURE, tp)  # a log deleted before its marker
                _unmark(s, _MOVED, tp)
        for tp, old in moved:
            self._finish_swap(tp, old)
        for tp in [tp for tp in self._future if tp not in self._where]:
            self.drop_future(*tp)  # nothing to catch up with

    def _finish_swap(self, tp: TopicPartitionId, old: LogStore) -> None:
        """A swap a crash interrupted after step 1: the future log has everything."""
        new = self._future.pop(tp, None)
        if new is not None:
            state = stored_state(old.db, *tp)
            assert state is not None
            _promote(tp, old, new, state[0], state[1])
        elif self._where.get(tp) is None:  # no other copy (cannot happen): keep this one
            _unmark(old, _MOVED, tp)
            self._where[tp] = old
            return
        else:
            new = self._where[tp]
        self._where[tp] = new
        PartitionLog(old, *tp).delete_all()
        _unmark(old, _MOVED, tp)
        log.info("finished moving partition %d of topic id %s to %s", tp[1], tp[0], new.log_dir)

    def start(self) -> None:
        for s in self.stores:
            s.start()

    def local_partitions(self) -> list[TopicPartitionId]:
        return list(self._where)

    def open(self, topic_id: uuid.UUID, partition: int) -> PartitionLog:
        tp = (topic_id, partition)
        store = self._where.get(tp) or self._preferred.pop(tp, None)
        if store is None:
            counts = {id(s): 0 for s in self.stores}
            for s in self._where.values():
                counts[id(s)] += 1
            store = min(self.stores, key=lambda s: counts[id(s)])
        self._where[tp] = store
        return PartitionLog(store, topic_id, partition)

    def delete(self, topic_id: uuid.UUID, partition: int, log: PartitionLog | None = None) -> None:
        self.drop_future(topic_id, partition)
        store = self._where.pop((topic_id, partition), None)
        if store is not None:
            (log or PartitionLog(store, topic_id, partition)).delete_all()

    def prefer(self, topic_id: uuid.UUID, partition: int, store: LogStore) -> None:
        """Create the partition's log in ``store`` when this broker gets a replica of it."""
        self._preferred[(topic_id, partition)] = store

    # -- future logs (AlterReplicaLogDirs) ---------------------------------------------------------

    def future_store(self, topic_id: uuid.UUID, partition: int) -> LogStore | None:
        """The directory a future log of the partition is in, if one is."""
        return self._future.get((topic_id, partition))

    def open_future(self, topic_id: uuid.UUID, partition: int, store: LogStore) -> PartitionLog:
        """The future log in ``store`` (the one there, or a new empty one), marked as future
        before anything of it is written."""
        tp = (topic_id, partition)
        if self._future.get(tp) not in (None, store):
            self.drop_future(topic_id, partition)
        if tp not in self._future:
            wb = WriteBatch(raw_mode=True)
            wb.put(_FUTURE + tp_prefix(*tp), b"")
            store.write_now(wb)
            self._future[tp] = store
        return PartitionLog(store, topic_id, partition)

    def drop_future(self, topic_id: uuid.UUID, partition: int) -> None:
        """Delete the future log (a cancelled move): its data first, then its marker, so that it
        is never taken for a current log."""
        store = self._future.pop((topic_id, partition), None)
        if store is not None:
            PartitionLog(store, topic_id, partition).delete_all()
            _unmark(store, _FUTURE, (topic_id, partition))

    def swap(self, current: PartitionLog, future: PartitionLog) -> PartitionLog:
        """Make the caught-up ``future`` log the current one and delete ``current`` (steps 1-3
        above, each a write in this call: nothing is appended in between; with
        ``log.flush.interval.messages=1`` steps 1 and 2 are fsynced, blocking the loop twice per
        move). Returns the new current log, read back from its store."""
        tp = (current.topic_id, current.partition)
        old, new = current.store, future.store
        current.checkpoint()  # the high watermark a restart after step 1 promotes with
        wb = WriteBatch(raw_mode=True)
        wb.put(_MOVED + tp_prefix(*tp), b"")
        old.write_now(wb)
        durable = old.policy.sync_every_write  # log.flush.interval.messages=1: each step fsynced in order
        if durable:
            old.db.flush_wal(True)
        _promote(tp, old, new, current.log_start_offset, current.high_watermark)
        if durable:
            new.db.flush_wal(True)  # the copied log too, before the old one goes
        self._future.pop(tp, None)
        self._where[tp] = new
        current.truncations += 1  # a compaction pass still reading the old log gives up
        current.delete_all()
        _unmark(old, _MOVED, tp)
        return PartitionLog(new, *tp)

    async def close(self) -> None:
        for s in self.stores:
            await s.close()


def _marked(store: LogStore, kind: bytes) -> list[TopicPartitionId]:
    out = []
    it = store.db.iter()
    it.seek(kind)
    while it.valid() and it.key().startswith(kind):
        k = it.key()
        out.append((uuid.UUID(bytes=k[1:17]), int.from_bytes(k[17:21], "big")))
        it.next()
    return out


def _unmark(store: LogStore, kind: bytes, tp: TopicPartitionId) -> None:
    wb = WriteBatch(raw_mode=True)
    wb.delete(kind + tp_prefix(*tp))
    store.write_now(wb)


def _promote(tp: TopicPartitionId, old: LogStore, new: LogStore, log_start: int, high_watermark: int) -> None:
    """Step 2 of a swap, one write in ``new``: the current log's epochs, producer state,
    aborted index and log start and high watermark, and no more future marker."""
    prefix = tp_prefix(*tp)
    wb = WriteBatch(raw_mode=True)
    for kind in _COPIED:
        wb.delete_range(kind + prefix, kind + prefix + _END)
        it = old.db.iter()
        it.seek(kind + prefix)
        while it.valid() and it.key().startswith(kind + prefix):
            wb.put(it.key(), it.value())
            it.next()
    state = stored_state(new.db, *tp)
    assert state is not None
    _, _, end, size = state
    wb.put(b"s" + prefix, _STATE.pack(log_start, min(high_watermark, end), end, size))
    wb.delete(_FUTURE + prefix)
    new.write_now(wb)
