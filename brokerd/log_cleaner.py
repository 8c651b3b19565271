"""Log compaction (Kafka's LogCleaner) for topics with ``cleanup.policy`` compact.

A pass over a partition keeps, of every key, only its latest record below the high watermark:
it first maps each key to the offset of its latest record, then rewrites each older batch with
the records that are still the latest of their key. A rewritten batch keeps its base offset,
its offset span, its timestamps and its producer fields, and each record keeps its offset
delta, so every surviving record stays at its original offset; a batch left with no records
is removed (consumers and followers step over the gap, as in Kafka). A tombstone (a null
value) is kept until it is ``delete.retention.ms`` old, so that consumers have time to see the
deletion, and then goes too; records without a key go, as Kafka's cleaner drops them.

Transactions, by Kafka's rules: a pass stops at the last stable offset, so nothing of an open
transaction (nor anything after its start) is compacted; the records of aborted transactions
(the aborted-transaction index) go, whatever their keys; a committed transaction's records are
compacted like any others; a marker stays while any record of its transaction does, and then
for ``delete.retention.ms`` more (counted from the pass that first found its transaction
empty, kept in memory: a restart only keeps it longer), so that a reader who saw the records
also sees how their transaction ended.

Producer state survives compaction (Kafka's "last batch of each active producer"): the last
data batch of every producer the partition still remembers stays, emptied of the records
that go, because it carries the producer's epoch and last sequence; a follower that copies the
log, or a log rebuilt after a truncation, then knows the producer, whose next batch is
accepted instead of failing with UNKNOWN_PRODUCER_ID or OUT_OF_ORDER_SEQUENCE_NUMBER. A
producer whose last entry is a marker (a bump of its epoch) keeps that marker. A transaction's
marker stays while any batch of it does, emptied or not.

A pass runs when at least ``min.cleanable.dirty.ratio`` of the cleanable bytes were written
since the last pass (``PartitionLog.first_dirty_offset``), or when a tombstone the last pass
kept has since passed ``delete.retention.ms`` (and once after a restart, to find out). It works on the event loop in
steps of ``STEP`` batches, so appends and fetches go on meanwhile; its result is written in one
atomic RocksDB write that skips any batch retention removed in the meantime (a truncation
meanwhile voids the pass: the offsets it mapped may hold other records by then), and
RocksDB then compacts the partition's range in a thread so the space comes back at once.
"""
from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass

from clients.compression import CODEC_MASK, Codec, compress
from clients.records import (Record, batch_crc, codec_of, decode_records, encode_record, is_control,
                             is_transactional, records_bytes)
from protos import broker_pb2 as pb

from .config import LogConfig
from .partition_log import PartitionLog

log = logging.getLogger("brokerd.log_cleaner")

STEP = 200  # batches between yields to the event loop


@dataclass(frozen=True, slots=True)
class CleanResult:
    batches_rewritten: int
    batches_removed: int
    records_removed: int
    bytes_freed: int
    cleaned_to: int


def _records(batch: pb.RecordBatch) -> list[Record]:
    return decode_records(records_bytes(batch), batch.record_count, f"offset {batch.base_offset}")


async def clean(plog: PartitionLog, cfg: LogConfig, now_ms: int) -> CleanResult | None:
    """One compaction pass over the log below its last stable offset; None when there is not
    enough new data to be worth it."""
    end = plog.last_stable_offset
    heads = [h for h in plog.stored_batches(plog.log_start_offset) if h.last_offset < end]
    total = sum(h.size for h in heads)
    dirty = sum(h.size for h in heads if h.last_offset >= plog.first_dirty_offset)
    horizon = now_ms - cfg.delete_retention_ms
    tombstones_due = plog.oldest_tombstone_ms is None or plog.oldest_tombstone_ms < horizon
    if not heads or not (dirty and dirty / total >= cfg.min_cleanable_dirty_ratio or tombstones_due):
        return None
    truncations = plog.truncations
    aborted = _aborted(plog)
    last_of_producer = _last_of_producer(plog)
    # 1. The offset of each key's latest record (of plain and committed data).
    latest: dict[bytes, int] = {}
    for i, h in enumerate(heads):
        batch = plog.batch_at(h.base_offset)
        if batch is not None and not is_control(batch) and not aborted(batch):
            for r in _records(batch):
                if r.key is not None:
                    latest[r.key] = batch.base_offset + r.offset_delta
        if i % STEP == STEP - 1:
            await asyncio.sleep(0)
    # 2. Each batch with the records that are still the latest of their key; markers whose
    #    transaction has nothing left.
    replacements: dict[int, pb.RecordBatch | None] = {}
    removed = 0
    oldest_tombstone = float("inf")
    alive: dict[int, bool] = {}  # producer id -> whether a record of its current transaction stays
    for i, h in enumerate(heads):
        batch = plog.batch_at(h.base_offset)
        if batch is None:
            continue
        if is_control(batch):
            if alive.pop(batch.producer_id, False) or last_of_producer(batch):
                plog.empty_markers.pop(batch.base_offset, None)
                continue
            since = plog.empty_markers.setdefault(batch.base_offset, now_ms)  # its transaction is empty
            if since < horizon:
                replacements[batch.base_offset] = None
                plog.empty_markers.pop(batch.base_offset)
            else:
                oldest_tombstone = min(oldest_tombstone, since)  # a pass is due when it may go
            continue
        records = _records(batch)
        kept = [] if aborted(batch) else [
            r for r in records
            if r.key is not None and latest.get(r.key) == batch.base_offset + r.offset_delta
            and (r.value is not None or batch.base_timestamp + r.timestamp_delta >= horizon)]
        for r in kept:
            if r.value is None:
                oldest_tombstone = min(oldest_tombstone, batch.base_timestamp + r.timestamp_delta)
        stays = bool(kept) or last_of_producer(batch)
        if is_transactional(batch) and stays:
            alive[batch.producer_id] = True
        if len(kept) < len(records) or not stays:  # (an emptied batch goes once it is no producer's last)
            removed += len(records) - len(kept)
            replacements[h.base_offset] = _rewritten(batch, kept) if stays else None
        if i % STEP == STEP - 1:
            await asyncio.sleep(0)
    if plog.truncations != truncations:
        return None  # a truncation (a follower meeting a new leader) moved under the pass: next time
    freed = plog.replace_batches(replacements, end)
    plog.oldest_tombstone_ms = oldest_tombstone
    if replacements:
        await plog.store.in_thread(plog.reclaim_space)  # close() waits for it
    return CleanResult(sum(1 for b in replacements.values() if b is not None),
                       sum(1 for b in replacements.values() if b is None), removed, freed, end)


def _aborted(plog: PartitionLog) -> Callable[[pb.RecordBatch], bool]:
    """Whether a data batch belongs to an aborted transaction (the aborted-transaction index)."""
    by_producer: dict[int, list[tuple[int, int]]] = {}
    for a in plog.producers.aborted:
        by_producer.setdefault(a.producer_id, []).append((a.first_offset, a.last_offset))

    def aborted(batch: pb.RecordBatch) -> bool:
        return is_transactional(batch) and not is_control(batch) and any(
            first <= batch.base_offset < marker for first, marker in by_producer.get(batch.producer_id, ()))
    return aborted


def _last_of_producer(plog: PartitionLog) -> Callable[[pb.RecordBatch], bool]:
    """Whether a batch is the last of a producer the partition remembers (Kafka's
    isBatchLastRecordOfProducer): its last data batch, or, when a marker started its current
    epoch, a marker of that epoch."""
    producers = plog.producers.producers

    def last(batch: pb.RecordBatch) -> bool:
        e = producers.get(batch.producer_id) if batch.producer_id >= 0 else None
        if e is None:
            return False
        if e.batches:
            return not is_control(batch) and batch.base_offset + batch.last_offset_delta == e.batches[-1].last_offset
        return is_control(batch) and batch.producer_epoch == e.epoch
    return last


def _rewritten(batch: pb.RecordBatch, kept: list[Record]) -> pb.RecordBatch:
    out = pb.RecordBatch()
    out.CopyFrom(batch)
    out.record_count = len(kept)
    if kept:
        out.records = compress(Codec(codec_of(batch)), b"".join(encode_record(*r) for r in kept))
    else:  # only its producer fields are kept: a bare header, uncompressed, as Kafka writes one
        out.records = b""
        out.attributes &= ~CODEC_MASK
    out.crc = batch_crc(out)
    return out
