"""Replicas moving between this broker's log directories (AlterReplicaLogDirs; Kafka's
ReplicaAlterLogDirsManager and its ReplicaAlterLogDirsThread).

A move copies the current log into a *future* log in the destination directory while the
current one keeps serving produce and fetch, then follows its appends like a follower follows
its leader (the same ``append_as_follower``), mirroring its log start, high watermark and
truncations. Once the future log has everything and no append is in flight, the partition
switches to it in one step of the event loop (``LogManager.swap``) and the old copy is
deleted. A broker stopped mid-move resumes it at start from what the future log holds.
The copy is throttled by ``replica.alter.log.dirs.io.max.bytes.per.second`` (a dynamic
broker config, as in Kafka), so that a move does not starve the disks' other work.
"""
from __future__ import annotations

import asyncio
import logging
import uuid

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
        try:
            await self._copy(p, future)
        except asyncio.CancelledError:
            raise
        except Exception as e:  # StorageFailure, or a bug: one line, the replica stays
            log.error("%s: moving to %s failed, the replica stays in %s: %s", p.name, future.store.log_dir,
                      p.log.store.log_dir, e)
            if self._moves.get(key, (None,))[0] is future:
                del self._moves[key]
                self.logs.drop_future(p.topic_id, p.index)
            return
        if self._moves.get(key, (None,))[0] is future:
            del self._moves[key]

    async def _copy(self, p: Partition, future: PartitionLog) -> None:
        """Catch ``future`` up with ``p``'s current log, then swap them."""
        current = p.log
        truncations = current.truncations  # the current log's truncations the future log has seen
        if not _same_history(current, future):
            await future.truncate_fully_and_start_at(current.log_start_offset)
        while not p.stopped:
            current = p.log
            if current.truncations != truncations or future.log_end_offset > current.log_end_offset \
                    or future.log_end_offset < current.log_start_offset:
                # The current log was truncated, or its start moved past what was copied: copy
                # again from its start.
                truncations = current.truncations
                await future.truncate_fully_and_start_at(current.log_start_offset)
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
                frames, size = current.read(future.log_end_offset, step, current.log_end_offset)
                if frames:
                    await future.append_as_follower(batches(b"".join(frames)))
                    self.quota.record(size)
                await asyncio.sleep(0 if frames else RETRY_S)
                continue
            if current.log_end_offset != current.next_offset or future.log_end_offset != future.next_offset \
                    or future.log_start_offset != current.log_start_offset:
                await asyncio.sleep(RETRY_S)  # an append in flight: the swap waits for it
                continue
            # Caught up, nothing in flight: swap, without yielding to the loop in between.
            before = current.store.log_dir
            p.log = self.logs.swap(current, future)
            p.notify()
            log.info("%s: moved from %s to %s (log end %d)", p.name, before, p.log.store.log_dir,
                     p.log.log_end_offset)
            return


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
