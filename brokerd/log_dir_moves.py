"""Replicas moving between this broker's log directories (AlterReplicaLogDirs; Kafka's
ReplicaAlterLogDirsManager and its ReplicaAlterLogDirsThread).

A move copies the current log into a *future* log in the destination directory while the
current one keeps serving produce and fetch, then follows its appends like a follower follows
its leader (the same ``stage_as_follower``, batches stored as read), mirroring its log start,
high watermark and truncations. Once the future log has everything and no append is in flight, the partition
switches to it in one step of the event loop (``LogManager.swap``) and the old copy is
deleted. A broker stopped mid-move resumes it at start from what the future log holds.
The copy is throttled by ``replica.alter.log.dirs.io.max.bytes.per.second`` (a dynamic
broker config, as in Kafka), so that a move does not starve the disks' other work.
"""
from __future__ import annotations

import asyncio
import logging
import uuid

from rocksdict import WriteBatch

from clients.records import batches

from .log_manager import LogManager
from .log_store import LogStore
from .partition import Partition
from .partition_log import PartitionLog
from .replication_quota import ReplicationQuota

log = logging.getLogger("brokerd.log_dirs")

#: The dynamic broker config capping the bytes moves copy per second (0: unthrottled).
IO_RATE = "replica.alter.log.dirs.io.max.bytes.per.second"
#: How much one copying step reads from the current log (Kafka's replica.fetch.max.bytes).
STEP_BYTES = 1 << 20
#: How long a caught-up move waits for an append in flight before it tries to swap again.
RETRY_S = 0.005


class LogDirMoves:
    def __init__(self, logs: LogManager) -> None:
        self.logs = logs
        self.quota = ReplicationQuota()  # IO_RATE, shared by every move
        self._moves: dict[tuple[uuid.UUID, int], tuple[PartitionLog, asyncio.Task]] = {}

    def future(self, p: Partition) -> PartitionLog | None:
        """The future log of ``p`` being filled, if it is moving."""
        move = self._moves.get((p.topic_id, p.index))
        return move[0] if move is not None else None

    def start(self, p: Partition, dest: LogStore) -> None:
        """Move ``p`` to ``dest``: nothing if it is there or on its way there; a move to another
        directory is cancelled first (and one back to where the replica is just cancelled), as
        Kafka's ReplicaManager.alterReplicaLogDirs does."""
        key = (p.topic_id, p.index)
        moving = self._moves.get(key)
        if moving is not None and moving[0].store is dest:
            return
        if moving is not None or dest is p.log.store:
            self.cancel(p)
        if dest is p.log.store:
            return
        future = self.logs.open_future(p.topic_id, p.index, dest)
        log.info("%s: moving from %s to %s (the future log starts at %d)", p.name, p.log.store.log_dir,
                 dest.log_dir, future.log_end_offset)
        self._moves[key] = (future, asyncio.get_running_loop().create_task(self._run(p, future)))

    def resume(self, p: Partition) -> None:
        """The move a stopped broker left: its future log is on disk."""
        dest = self.logs.future_store(p.topic_id, p.index)
        if dest is not None:
            self.start(p, dest)

    def cancel(self, p: Partition) -> None:
        """Stop moving ``p`` and delete its future log."""
        move = self._moves.pop((p.topic_id, p.index), None)
        if move is not None:
            move[1].cancel()
        self.logs.drop_future(p.topic_id, p.index)

    async def stop(self) -> None:
        """The broker stops: future logs stay on disk, for the moves to resume at start."""
        tasks = [t for _, t in self._moves.values()]
        self._moves.clear()
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _run(self, p: Partition, future: PartitionLog) -> None:
        key = (p.topic_id, p.index)
        mine = asyncio.current_task()
        try:
            await self._copy(p, future)
        except asyncio.CancelledError:
            raise
        except Exception as e:  # StorageFailure, or a bug: one line, the replica stays
            log.error("%s: moving to %s failed, the replica stays in %s: %s", p.name, future.store.log_dir,
                      p.log.store.log_dir, e)
            if self._moves.get(key, (None, None))[1] is mine:
                del self._moves[key]
                self.logs.drop_future(p.topic_id, p.index)
            return
        if self._moves.get(key, (None, None))[1] is mine:
            del self._moves[key]

    def _restart(self, p: Partition, future: PartitionLog) -> PartitionLog:
        """An empty future log in the same directory, to copy into again."""
        self.logs.drop_future(p.topic_id, p.index)
        fresh = self.logs.open_future(p.topic_id, p.index, future.store)
        task = asyncio.current_task()
        assert task is not None
        self._moves[(p.topic_id, p.index)] = (fresh, task)
        return fresh

    async def _copy(self, p: Partition, future: PartitionLog) -> None:
        """Catch ``future`` up with ``p``'s current log, then swap them. Every write to the
        future log is done before the call that makes it returns (``write_now``, never a queued
        write), so that a cancelled move leaves nothing written after its log was deleted."""
        current = p.log
        truncations = current.truncations  # the current log's truncations the future log has seen
        if not _same_history(current, future):
            future = self._restart(p, future)
        while not p.stopped:
            current = p.log
            if current.truncations != truncations or future.log_end_offset > current.log_end_offset:
                truncations = current.truncations  # the current log was truncated: copy it again
                future = self._restart(p, future)
                continue
            future.set_high_watermark(current.high_watermark)
            if current.log_start_offset > future.log_start_offset:
                future.delete_before(current.log_start_offset)  # retention, DeleteRecords
            if future.log_end_offset < current.log_end_offset:
                wait = self.quota.wait_seconds()
                if wait:
                    await asyncio.sleep(wait)
                    continue
                step = min(STEP_BYTES, self.quota.rate) if self.quota.rate else STEP_BYTES
                frames, size = current.read(max(future.log_end_offset, current.log_start_offset), step,
                                            current.log_end_offset)
                if frames:
                    try:
                        _append(future, frames)
                    except ValueError:  # overlaps what the future log has: copy again
                        future = self._restart(p, future)
                        continue
                    self.quota.record(size)
                await asyncio.sleep(0 if frames else RETRY_S)
                continue
            if current.log_end_offset != current.next_offset or future.log_start_offset != current.log_start_offset:
                await asyncio.sleep(RETRY_S)  # an append in flight: the swap waits for it
                continue
            # Caught up, nothing in flight: swap, without yielding to the loop in between.
            before = current.store.log_dir
            p.log = self.logs.swap(current, future)
            p.notify()
            log.info("%s: moved from %s to %s (log end %d)", p.name, before, p.log.store.log_dir,
                     p.log.log_end_offset)
            return



def _append(future: PartitionLog, frames: list[memoryview]) -> None:
    """The batches of ``frames`` (read from the current log), stored as they are."""
    wb = WriteBatch(raw_mode=True)
    staged = future.stage_as_follower(wb, batches(b"".join(frames)), [(f,) for f in frames])
    if staged is not None:
        future.store.write_now(wb)
        future.appended(staged)


def _same_history(current: PartitionLog, future: PartitionLog) -> bool:
    """Whether a future log found at start (a move resumed) is a prefix of the current log:
    its last batch has the same offset and leader epoch in both (Raft's log matching, as Kafka's
    truncation by leader epochs relies on). A current log truncated after the future copied
    beyond the cut fails this, and the copy starts again."""
    end = future.log_end_offset
    if end <= future.log_start_offset:
        return True
    mine, theirs = future.batch_at(end - 1), current.batch_at(end - 1)
    return mine is not None and theirs is not None and mine.base_offset == theirs.base_offset \
        and mine.partition_leader_epoch == theirs.partition_leader_epoch
