"""A partition's log in RocksDB: record batches keyed by (topic id, partition, base offset),
with the log start offset, log end offset, high watermark and size persisted next to them
(key layout in ``log_store``), and the state of its idempotent and transactional producers
(``producer_state``): open transactions and the aborted-transaction index are written in the
same atomic write as the batch or marker that changes them, and rebuilt from the batches
after a truncation.

Each append is one atomic RocksDB write holding the batches, the new log end and size, any new
leader epoch and the producers' updated entries, so after a crash the log, its end offset, its
epochs and its producer state agree. The
high watermark is checkpointed with every append and every few seconds otherwise (Kafka's
``replica.high.watermark.checkpoint.interval.ms``): a stale one after a crash only delays
what consumers may read until followers fetch again.

Offsets: log start <= high watermark <= log end (LEO, the next offset to assign). Consumers
read below the high watermark, followers up to the log end.
"""
from __future__ import annotations

import asyncio
import struct
import uuid
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from rocksdict import ReadOptions, WriteBatch

from protos import broker_pb2 as pb

from .leader_epochs import LeaderEpochCache
from .log_store import LogStore, tp_prefix
from .stored_batch import HEAD as _HEAD
from .stored_batch import intact
from .producer_state import AbortedTxn, ProducerEntry, ProducerStateManager, last_sequence
from clients.records import (NO_PRODUCER_ID, decode_records, frame, frame_parts, is_control, is_transactional,
                             marker_commits, records_bytes)

_STATE = struct.Struct(">qqqq")   # log start offset, high watermark, log end offset, size in bytes
_EPOCH = struct.Struct(">q")      # an epoch's start offset
_END = b"\xff" * 9                # after every 8-byte offset


@dataclass(frozen=True, slots=True)
class AppendInfo:
    first_offset: int
    last_offset: int
    records: int
    bytes: int
    duplicate: bool = False  # a producer's retry of a batch already in the log: not written again


@dataclass(frozen=True, slots=True)
class StoredBatch:
    """What a stored batch's head says, without decoding the batch."""

    base_offset: int
    last_offset: int
    max_timestamp: int
    size: int
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = 0
    base_sequence: int = 0


@dataclass(frozen=True, slots=True)
class RetentionCut:
    """Where retention moves a log's start (``start``), with what its scan read on the way: the
    offset after the last batch it removes (``end``, None: none whole) and their bytes
    (``freed``). Why: each value that scan reads from a blob file costs a ``pread`` of the batch
    and RocksDB's CRC32C (software in rocksdict's build), and deleting the batches read them all
    again; under sustained appends retention removes as much as is produced, so that second
    read was about a fifth of the brokers' CPU per MB (docs/brokers.md, "Long produce runs")."""

    start: int
    end: int | None
    freed: int


class RecentBatchSizes:
    """The stored sizes of the batches this process last appended to a log, by base offset.

    Why: a fetch reads batches until the next does not fit its limit, and RocksDB reads a value
    when its iterator steps onto it (with blob files: a ``pread``, its CRC32C and a copy), so
    finding that the next batch does not fit cost a whole read only to drop it; with
    librdkafka's ~256 KiB batches and 1 MiB per partition, one read in five of a consumer's
    fetch (docs/brokers.md, "librdkafka's consume per broker core"). The key carries no size
    and the stored format stays as it is, so the sizes are kept here as batches are staged:
    only hints, for ``PartitionLog.read`` to stop before a batch it knows does not fit; a batch
    not found here is read as before. Also when each was staged, in the bytes the store had
    staged before it (``LogStore.staged_bytes``): how ``read`` tells a batch most likely still in
    RocksDB's memtable. Three arrays in base-offset order (appends come in order; a truncation
    or compaction clears or updates them), at most ``LIMIT`` entries (24 bytes each), the older
    half dropped when full."""

    __slots__ = ("bases", "sizes", "staged")
    LIMIT = 512

    def __init__(self) -> None:
        self.bases = array("q")
        self.sizes = array("q")
        self.staged = array("q")

    def add(self, base: int, size: int, staged: int = 0) -> None:
        bases = self.bases
        if bases and base <= bases[-1]:  # not after the last: the log was cut back, start over
            self.clear()
        elif len(bases) >= self.LIMIT:
            del bases[:self.LIMIT // 2]
            del self.sizes[:self.LIMIT // 2]
            del self.staged[:self.LIMIT // 2]
        bases.append(base)
        self.sizes.append(size)
        self.staged.append(staged)

    def staged_at(self, offset: int) -> int | None:
        """When the batch holding ``offset`` (the last at or before it) was staged, in the
        store's staged bytes, if it is known, else None."""
        i = bisect_right(self.bases, offset) - 1
        return self.staged[i] if i >= 0 else None

    def get(self, base: int) -> int | None:
        """The stored size of the batch at ``base`` if it is known, else None."""
        bases = self.bases
        i = bisect_left(bases, base)
        return self.sizes[i] if i < len(bases) and bases[i] == base else None

    def replace(self, base: int, size: int | None) -> None:
        """The batch at ``base`` was rewritten to ``size`` bytes (None: removed) by compaction."""
        i = bisect_left(self.bases, base)
        if i < len(self.bases) and self.bases[i] == base:
            if size is None:
                del self.bases[i]
                del self.sizes[i]
                del self.staged[i]
            else:
                self.sizes[i] = size

    def clear(self) -> None:
        del self.bases[:]
        del self.sizes[:]
        del self.staged[:]


class PartitionLog:
    def __init__(self, store: LogStore, topic_id: uuid.UUID, partition: int) -> None:
        self.store = store
        self.db = store.db
        self.topic_id = topic_id
        self.partition = partition
        prefix = tp_prefix(topic_id, partition)
        self._data = b"d" + prefix
        self._state_key = b"s" + prefix
        self._epochs_key = b"e" + prefix
        self._producers_key = b"p" + prefix
        self._clean_key = b"c" + prefix
        self._ongoing_key = b"t" + prefix
        self._aborted_key = b"a" + prefix
        raw = store.get(self._state_key)
        if raw is None:
            self.log_start_offset = self.high_watermark = self.log_end_offset = self.size_bytes = 0
            self.next_offset = 0
            wb = WriteBatch(raw_mode=True)
            wb.put(self._state_key, self._state())
            store.write_now(wb)
        else:
            (self.log_start_offset, self.high_watermark, self.log_end_offset,
             self.size_bytes) = _STATE.unpack(raw)
        self.next_offset = self.log_end_offset  # assigned, possibly not yet durable
        self.epochs = LeaderEpochCache(self._load_epochs())
        self.producers = ProducerStateManager(
            f"{topic_id}-{partition}", self._load_producers(),
            {pid: _EPOCH.unpack(v)[0] for pid, v in self._scan(self._ongoing_key)},
            [AbortedTxn.decode(last, v) for last, v in self._scan(self._aborted_key)])
        clean = store.get(self._clean_key)
        #: Where the part of the log not yet compacted starts (``log_cleaner``).
        self.first_dirty_offset = _EPOCH.unpack(clean)[0] if clean is not None else 0
        #: The oldest tombstone the last compaction kept (inf: none; None: not known yet).
        self.oldest_tombstone_ms: float | None = None
        #: Markers whose transaction compaction found empty, by offset: since when (log_cleaner).
        self.empty_markers: dict[int, int] = {}
        #: Counts truncations, so a compaction pass that spans one can tell and give up (the
        #: offsets it mapped may since hold other records).
        self.truncations = 0
        self._hw_dirty = False
        #: What ``read`` knows of the next batch's size before reading it.
        self.recent_sizes = RecentBatchSizes()
        #: Reads done again with RocksDB's checksums: what ``read`` found was not as appended.
        self.rereads = 0

    # -- keys and state ---------------------------------------------------------------------

    def _key(self, offset: int) -> bytes:
        return self._data + offset.to_bytes(8, "big")

    def _state(self) -> bytes:
        return _STATE.pack(self.log_start_offset, self.high_watermark, self.next_offset, self.size_bytes)

    def _scan(self, prefix: bytes) -> Iterator[tuple[int, bytes]]:
        """(the key's number after ``prefix``, value) of every key under ``prefix``."""
        it = self.db.iter()
        it.seek(prefix)
        n = len(prefix)
        while it.valid():
            k = it.key()
            if not k.startswith(prefix):
                break
            yield int.from_bytes(k[n:], "big"), it.value()
            it.next()

    def _load_epochs(self) -> list[tuple[int, int]]:
        return [(epoch, _EPOCH.unpack(v)[0]) for epoch, v in self._scan(self._epochs_key)]

    def _load_producers(self) -> list[ProducerEntry]:
        return [ProducerEntry.decode(pid, v) for pid, v in self._scan(self._producers_key)]

    def _producer_key(self, producer_id: int) -> bytes:
        return self._producers_key + producer_id.to_bytes(8, "big")

    def _save_producers(self, wb: WriteBatch, producer_ids: Iterable[int]) -> None:
        for pid in producer_ids:
            e = self.producers.producers.get(pid)
            if e is None:
                wb.delete(self._producer_key(pid))
            else:
                wb.put(self._producer_key(pid), e.encode())

    def _epoch_key(self, epoch: int) -> bytes:
        return self._epochs_key + epoch.to_bytes(4, "big")

    def _range(self, start: int | None = None) -> ReadOptions:
        ro = ReadOptions()
        ro.set_iterate_lower_bound(self._data if start is None else self._key(start))
        ro.set_iterate_upper_bound(self._data + _END)
        return ro

    # -- appends ------------------------------------------------------------------------------

    def _stage(self, wb: WriteBatch, batch: pb.RecordBatch, framed: Sequence[bytes | memoryview] | None = None) -> int:
        """Put ``batch`` in ``wb`` (``framed``: its frame as the leader sent it, in parts joined
        once after the head, stored as is)."""
        last = batch.base_offset + batch.last_offset_delta
        pid = batch.producer_id if batch.HasField("producer_id") else NO_PRODUCER_ID
        head = _HEAD.pack(last, batch.max_timestamp, pid, batch.producer_epoch, batch.base_sequence)
        value = frame(batch.SerializeToString(), head) if framed is None else b"".join((head, *framed))
        wb.put(self._key(batch.base_offset), value)
        self.recent_sizes.add(batch.base_offset, len(value), self.store.count_staged(len(value)))
        if pid != NO_PRODUCER_ID:
            if is_control(batch):
                self._stage_marker(wb, pid, batch.producer_epoch, batch.base_offset, batch.max_timestamp,
                                   marker_commits(batch))
                return len(value)
            if batch.base_sequence >= 0:  # a coordinator's transactional write has no sequence
                self.producers.record_batch(batch.base_offset, last, batch.max_timestamp, pid, batch.producer_epoch,
                                            batch.base_sequence)
                self._save_producers(wb, (pid,))
            if is_transactional(batch) and self.producers.begin_transaction(pid, batch.base_offset):
                wb.put(self._ongoing_key + pid.to_bytes(8, "big"), _EPOCH.pack(batch.base_offset))
        return len(value)

    def _stage_marker(self, wb: WriteBatch, producer_id: int, epoch: int, offset: int, timestamp: int,
                      commit: bool) -> None:
        """A transaction marker closes its producer's open transaction here."""
        if producer_id in self.producers.ongoing:
            wb.delete(self._ongoing_key + producer_id.to_bytes(8, "big"))
        aborted = self.producers.end_transaction(producer_id, epoch, offset, timestamp, commit)
        self._save_producers(wb, (producer_id,))
        if aborted is not None:
            wb.put(self._aborted_key + offset.to_bytes(8, "big"), aborted.encode())

    async def append_as_leader(self, batch: pb.RecordBatch, epoch: int, records: bytes | None = None) -> AppendInfo:
        """``write_as_leader``, and its records readable once the write is (durable, under
        ``log.flush.interval.messages=1``)."""
        info, pending = self.write_as_leader(batch, epoch, records)
        if pending is not None:
            await pending
        return info if info.duplicate else self.appended(info)

    def write_as_leader(self, batch: pb.RecordBatch, epoch: int, records: bytes | None = None
                        ) -> tuple[AppendInfo, asyncio.Future | None]:
        """Assign the batch its offsets and the leader's epoch and write it, in one step (no
        await: the batches of a produce request all take their offsets before another
        request's); the future, when there is one, completes once the write is durable
        (``log.flush.interval.messages=1``), and ``appended`` then makes the records readable.
        ``records``: the batch's, already read out of it, stored as they are (not serialized
        again). A batch of an idempotent producer is checked against its state first: a duplicate of one of its
        last five batches is answered with the original's offsets and not written. A batch
        with a producer id but no sequence is a coordinator's (a marker, transactional
        offsets), appended without that check; transactional offsets of an epoch older than
        the partition's last marker for their producer are a fenced producer's, and refused."""
        base = self.next_offset
        if batch.HasField("producer_id") and batch.base_sequence >= 0:  # not a coordinator's write
            last_seq = last_sequence(batch.base_sequence, batch.record_count)
            dup = self.producers.check(batch.producer_id, batch.producer_epoch, batch.base_sequence,
                                       last_seq, base)
            if dup is not None:
                return AppendInfo(dup.first_offset, dup.last_offset, 0, 0, duplicate=True), None
        elif batch.HasField("producer_id") and is_transactional(batch) and not is_control(batch):
            self.producers.check_epoch(batch.producer_id, batch.producer_epoch, base)
        batch.base_offset = base
        batch.partition_leader_epoch = epoch
        wb = WriteBatch(raw_mode=True)
        if self.epochs.assign(epoch, base):
            wb.put(self._epoch_key(epoch), _EPOCH.pack(base))
        size = self._stage(wb, batch, None if records is None else frame_parts(batch, records))
        count = batch.record_count
        self._staged(wb, size, base + count)
        return AppendInfo(base, base + count - 1, count, size), self.store.write(wb, count)

    async def append_as_follower(self, batches: Sequence[pb.RecordBatch]) -> AppendInfo | None:
        """Append batches copied from the leader (``stage_as_follower``), in a write of their own."""
        wb = WriteBatch(raw_mode=True)
        staged = self.stage_as_follower(wb, batches)
        if staged is None:
            return None
        pending = self.store.write(wb, staged.records)
        if pending is not None:
            await pending
        return self.appended(staged)

    def stage_as_follower(self, wb: WriteBatch, batches: Sequence[pb.RecordBatch],
                          framed: Sequence[Sequence[bytes | memoryview]] | None = None) -> AppendInfo | None:
        """Put batches copied from the leader, with their offsets, epochs and producer fields,
        in ``wb`` (``framed``: each batch's frame as fetched, in parts, stored without
        serializing it again: then ``batches`` need not hold the records), so that a fetch
        answer's partitions share one write; ``appended`` once it is written. Batches the log
        already has are skipped; one that starts before the log end is refused (ValueError), a
        marker that does not decode too (KafkaError), before anything changes. Gaps between batches are the leader's compaction
        (``log_cleaner``): offsets only have to increase, as in Kafka."""
        new = [i for i, b in enumerate(batches) if b.base_offset + b.last_offset_delta >= self.next_offset]
        if not new:
            return None
        expected = self.next_offset
        for i in new:
            b = batches[i]
            if b.base_offset < expected:
                raise ValueError(f"batch at offset {b.base_offset} overlaps the log end {expected}")
            if is_control(b) and b.HasField("producer_id"):
                marker_commits(b)  # its marker decodes (KafkaError if not) before anything is staged
            expected = b.base_offset + b.last_offset_delta + 1
        size = records = 0
        for i in new:
            b = batches[i]
            if self.epochs.assign(b.partition_leader_epoch, b.base_offset):
                wb.put(self._epoch_key(b.partition_leader_epoch), _EPOCH.pack(b.base_offset))
            size += self._stage(wb, b, None if framed is None else framed[i])
            records += b.record_count
        first = batches[new[0]].base_offset
        self._staged(wb, size, expected)
        return AppendInfo(first, expected - 1, records, size)

    def _staged(self, wb: WriteBatch, size: int, end: int) -> None:
        """The log's new end and size, in the write that appends up to ``end``."""
        self.next_offset = end
        self.size_bytes += size
        wb.put(self._state_key, self._state())
        self._hw_dirty = False

    def appended(self, info: AppendInfo) -> AppendInfo:
        """An append staged in a write that is now written: its records are readable."""
        if info.last_offset + 1 > self.log_end_offset:
            self.log_end_offset = info.last_offset + 1
        return info

    def assign_epoch(self, epoch: int, start_offset: int) -> None:
        """A new leader starts its epoch at its log end (Kafka does it in makeLeader)."""
        if self.epochs.assign(epoch, start_offset):
            wb = WriteBatch(raw_mode=True)
            wb.put(self._epoch_key(epoch), _EPOCH.pack(start_offset))
            self.store.write_now(wb)

    # -- reads --------------------------------------------------------------------------------

    def _seek_at_or_before(self, it: Any, offset: int) -> bool:
        """Put ``it`` on this partition's batch with the largest base offset <= ``offset``.
        False if there is none: the iterator's lower bound is not relied on, since RocksDB can
        step below it in reverse (seen once compaction had removed the log's first batch)."""
        it.seek_for_prev(self._key(offset))
        return it.valid() and it.key().startswith(self._data)

    def read(self, offset: int, max_bytes: int, max_offset: int, min_one: bool = True) -> tuple[list[memoryview], int]:
        """Frames of the batches from the one holding ``offset`` up to ``max_offset``
        (exclusive), at most ``max_bytes`` but, with ``min_one`` (Kafka's minOneMessage), always
        one batch when there is one.

        Read without RocksDB's checksums (unless the batches are most likely in RocksDB's
        memtables still, read without any), each value checked instead (``stored_batch.intact``:
        Kafka's CRC-32C in hardware and the fields it leaves out, where RocksDB's blob check
        is a software CRC32C, docs/brokers.md "librdkafka's consume per broker core"), and the
        batches checked to follow each other. Anything else (a value the check does not accept,
        a gap or an overlap between batches, a log that ends before ``max_offset``: compaction's
        gaps, or a corrupted key or block) reads the whole range again with RocksDB's checks,
        whose verdict stands, as before: a bad block or blob fails the directory."""
        if offset >= max_offset:
            return [], 0
        staged = self.recent_sizes.staged_at(offset)
        # A read of what is most likely in RocksDB's memtables still (a follower's read of what
        # was just appended) is done with RocksDB's checks: it reads the memtables without any,
        # so they cost nothing there, where ours would (bench.leader_fetch --shape news).
        fresh = staged is not None and self.store.in_memtables(staged)
        read = None if fresh else self._read(offset, max_bytes, max_offset, min_one, True)
        if read is None:
            self.rereads += not fresh
            read = self._read(offset, max_bytes, max_offset, min_one, False)
            assert read is not None
        return read

    def _read(self, offset: int, max_bytes: int, max_offset: int, min_one: bool,
              checked: bool) -> tuple[list[memoryview], int] | None:
        """``read``'s scan; ``checked``: without RocksDB's checksums, each value and the batches'
        sequence checked here (None: something was not as written or as expected)."""
        ro = ReadOptions()
        ro.set_iterate_lower_bound(self._data)
        ro.set_iterate_upper_bound(self._key(max_offset))
        if checked:
            ro.set_verify_checksums(False)
            # Nor are the table blocks it reads from the disk unchecked put in the block cache:
            # a read with checksums (the second read, retention's, compaction's) that finds a
            # block there does not check it again, so the cache holds only checked blocks.
            ro.fill_cache(False)  # type: ignore[call-arg]  # rocksdict's stub leaves out its argument
        it = self.db.iter(ro)
        epochs = self.epochs
        n = len(self._data)
        v: bytes | None = None  # the value the iterator is on, once read (each read copies it)
        expect = offset  # the base offset the next batch must have (checked reads)
        last = -1
        if not self._seek_at_or_before(it, offset):
            it.seek(self._key(offset))
        else:
            v = it.value()
            if checked:
                base = int.from_bytes(it.key()[n:], "big")
                checked_last = intact(v, base, epochs.epoch_at(base))
                if checked_last is None or base > offset:  # (a key out of order)
                    return None
                last = checked_last
                expect = base
            else:
                last = _HEAD.unpack_from(v)[0]
            if last < offset:
                v = None
                expect = last + 1
                it.next()
        out: list[memoryview] = []
        size = 0
        hs = _HEAD.size
        sizes = self.recent_sizes
        while it.valid():
            if v is None:
                v = it.value()
                if checked:
                    base = int.from_bytes(it.key()[n:], "big")
                    if base != expect:  # a gap (compaction's) or an overlap: not as appended
                        return None
                    checked_last = intact(v, base, epochs.epoch_at(base))
                    if checked_last is None:
                        return None
                    last = checked_last
                else:
                    last = _HEAD.unpack_from(v)[0]
            n_value = len(v) - hs
            if (out or not min_one) and size + n_value > max_bytes:
                break
            out.append(memoryview(v)[hs:])
            size += n_value
            if size >= max_bytes:
                break
            # Stepping the iterator reads the next value: not when it is known not to fit (or
            # is past ``max_offset``, the iterator's bound). A gap (compaction) is not known.
            after = expect = last + 1
            if after >= max_offset:
                break
            known = sizes.get(after)
            if known is not None and size + known - hs > max_bytes:
                break
            v = None
            it.next()
        else:
            self.store.check(it)  # the end of the range, or a checksum that failed
            if checked and expect < max_offset:  # the log ends before where it should
                return None
        return out, size

    def stored_batches(self, start: int | None = None) -> list[StoredBatch]:
        """Heads of the stored batches from ``start`` (for truncation, compaction, offsets)."""
        return list(self.oldest_batches(start))

    def oldest_batches(self, start: int | None = None) -> Iterator[StoredBatch]:
        """Heads of the stored batches from ``start``, oldest first, each value read (with
        RocksDB's checks) as the caller steps to it: retention, which stops at the first batch
        it keeps, reads that many values, not the whole log. A batch's last offset, newest
        timestamp and size are in its value's head only (its key holds the base offset)."""
        ro = self._range()  # must outlive the iterator: RocksDB keeps a pointer to its bounds
        it = self.db.iter(ro)
        it.seek(self._data if start is None else self._key(start))
        n = len(self._data)
        while it.valid():
            k, v = it.key(), it.value()
            last, max_ts, pid, epoch, seq = _HEAD.unpack_from(v)
            yield StoredBatch(int.from_bytes(k[n:], "big"), last, max_ts, len(v), pid, epoch, seq)
            it.next()
        self.store.check(it)  # the end of the range, or a checksum that failed

    def batch_at(self, offset: int) -> pb.RecordBatch | None:
        """The batch holding ``offset``, decoded."""
        ro = self._range()  # must outlive the iterator: RocksDB keeps a pointer to its bounds
        it = self.db.iter(ro)
        if not self._seek_at_or_before(it, offset):
            self.store.check(it)
            return None
        v = it.value()
        if _HEAD.unpack_from(v)[0] < offset:
            return None
        return pb.RecordBatchSet.FromString(v[_HEAD.size:]).batches[0]

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """The first offset whose record timestamp is >= ``timestamp`` (Kafka's
        offsetsForTimes), with that record's timestamp; None if no record is that recent."""
        for b in self.stored_batches(self.log_start_offset):
            if b.base_offset >= self.high_watermark:
                return None
            if b.max_timestamp >= timestamp:
                batch = self.batch_at(b.base_offset)
                if batch is None:
                    return None
                for r in decode_records(records_bytes(batch), batch.record_count, f"partition {self.partition}"):
                    ts = batch.base_timestamp + r.timestamp_delta
                    off = batch.base_offset + r.offset_delta
                    if ts >= timestamp and off >= self.log_start_offset:
                        return off, ts
        return None

    def max_timestamp_offset(self, end: int) -> tuple[int, int] | None:
        """The first record with the largest timestamp below ``end`` and at or after the log
        start, as ``(offset, timestamp)`` (KIP-734's ListOffsets -3); None if there is none."""
        best: StoredBatch | None = None
        for b in self.stored_batches(None):
            if b.base_offset >= end:
                break
            if b.last_offset >= self.log_start_offset and (best is None or b.max_timestamp > best.max_timestamp):
                best = b
        batch = self.batch_at(best.base_offset) if best is not None else None
        if best is None or batch is None:
            return None
        for r in decode_records(records_bytes(batch), batch.record_count, f"partition {self.partition}"):
            ts, off = batch.base_timestamp + r.timestamp_delta, batch.base_offset + r.offset_delta
            if ts == best.max_timestamp and self.log_start_offset <= off < end:
                return off, ts
        return None

    @property
    def last_stable_offset(self) -> int:
        """What read_committed consumers may read to (Kafka's LSO): the high watermark, or the
        first offset of the oldest transaction still open, if that is lower."""
        first = self.producers.first_unstable_offset()
        return self.high_watermark if first is None else min(first, self.high_watermark)

    def aborted_transactions(self, start: int, end: int) -> list[AbortedTxn]:
        return self.producers.aborted_between(start, end)

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        return self.epochs.end_offset_for(epoch, self.log_end_offset)

    # -- high watermark -------------------------------------------------------------------------

    def set_high_watermark(self, hw: int) -> None:
        hw = max(self.log_start_offset, min(hw, self.log_end_offset))
        if hw != self.high_watermark:
            self.high_watermark = hw
            self._hw_dirty = True

    def checkpoint(self) -> None:
        if self._hw_dirty:
            wb = WriteBatch(raw_mode=True)
            wb.put(self._state_key, self._state())
            self.store.write_now(wb)
            self._hw_dirty = False

    # -- truncation and deletion ----------------------------------------------------------------

    async def truncate_to(self, offset: int) -> int:
        """Remove every batch at or after ``offset`` (a batch spanning it goes whole); returns
        the new log end."""
        if offset >= self.next_offset:
            return self.log_end_offset
        if offset <= self.log_start_offset:
            await self.truncate_fully_and_start_at(max(offset, 0))
            return self.log_end_offset
        ro = self._range()  # must outlive the iterator: RocksDB keeps a pointer to its bounds
        it = self.db.iter(ro)
        cut = offset
        if self._seek_at_or_before(it, offset):
            last = _HEAD.unpack_from(it.value())[0]
            base = int.from_bytes(it.key()[len(self._data):], "big")
            if base < offset <= last:
                cut = base
        doomed = self.stored_batches(cut)
        self.truncations += 1
        self.recent_sizes.clear()
        wb = WriteBatch(raw_mode=True)
        wb.delete_range(self._key(cut), self._data + _END)
        for e in self.epochs.truncate_from_end(cut):
            wb.delete(self._epoch_key(e))
        self.size_bytes -= sum(b.size for b in doomed)
        self.next_offset = self.log_end_offset = cut
        self.high_watermark = min(self.high_watermark, cut)
        self.log_start_offset = min(self.log_start_offset, cut)
        self._set_first_dirty(wb, min(self.first_dirty_offset, cut))
        if any(b.producer_id != NO_PRODUCER_ID for b in doomed):
            # Producer state as of the new end: rebuilt from the batches that remain.
            self._rebuild_producers(wb, [b for b in self.stored_batches(None) if b.base_offset < cut])
        wb.put(self._state_key, self._state())
        pending = self.store.write(wb)
        if pending is not None:
            await pending
        return cut

    async def truncate_fully_and_start_at(self, offset: int) -> None:
        """Drop everything; the log restarts empty at ``offset`` (a follower too far behind a
        leader whose log now starts later)."""
        self.truncations += 1
        self.recent_sizes.clear()
        wb = WriteBatch(raw_mode=True)
        wb.delete_range(self._data, self._data + _END)
        for e in self.epochs.clear():
            wb.delete(self._epoch_key(e))
        self._rebuild_producers(wb, [])
        self._set_first_dirty(wb, offset)
        self.log_start_offset = self.high_watermark = self.next_offset = self.log_end_offset = offset
        self.size_bytes = 0
        wb.put(self._state_key, self._state())
        pending = self.store.write(wb)
        if pending is not None:
            await pending

    def delete_before(self, offset: int) -> int:
        """Advance the log start offset to ``offset`` (at most the high watermark), deleting the
        batches wholly before it with one range delete; returns the bytes freed."""
        offset = min(offset, self.high_watermark)
        if offset <= self.log_start_offset:
            return 0
        freed, end = 0, None  # the doomed batches are the oldest: read up to the first that stays
        for b in self.oldest_batches(None):
            if b.last_offset >= offset:
                break
            freed, end = freed + b.size, b.last_offset + 1
        return self._cut(RetentionCut(offset, end, freed))

    def apply_retention(self, cut: RetentionCut) -> int:
        """Delete what ``retention_cut`` chose, from what it read (nothing is read again: the
        caller runs no await between the two, so the log is as it was scanned); returns the
        bytes freed."""
        return self._cut(cut) if cut.start > self.log_start_offset else 0

    def _cut(self, cut: RetentionCut) -> int:
        """``delete_before``'s write: the batches before ``cut.end`` in one range delete, the
        epochs, producers and state moved to a log that starts at ``cut.start``."""
        offset, end, freed = cut.start, cut.end, cut.freed
        wb = WriteBatch(raw_mode=True)
        if end is not None:
            wb.delete_range(self._data, self._key(end))
        dropped, moved = self.epochs.truncate_from_start(offset)
        for e in dropped:
            wb.delete(self._epoch_key(e))
        if moved is not None:
            wb.put(self._epoch_key(moved[0]), _EPOCH.pack(moved[1]))
        self.size_bytes -= freed
        self.log_start_offset = offset
        self._save_producers(wb, self.producers.remove_before(offset))
        wb.put(self._state_key, self._state())
        self.store.write_now(wb)
        return freed

    # -- compaction (log_cleaner) ----------------------------------------------------------------

    def _set_first_dirty(self, wb: WriteBatch, offset: int) -> None:
        self.first_dirty_offset = offset
        wb.put(self._clean_key, _EPOCH.pack(offset))

    def replace_batches(self, replacements: dict[int, pb.RecordBatch | None], cleaned_to: int) -> int:
        """Write the cleaner's result in one atomic write: each batch at a base offset is
        replaced by a smaller one over the same offsets (None: removed), and the log is clean
        up to ``cleaned_to``. A batch no longer in the log (retention or truncation got there
        first) is left alone. Returns the bytes freed."""
        wb = WriteBatch(raw_mode=True)
        freed = 0
        for base, batch in replacements.items():
            key = self._key(base)
            old = self.store.get(key)
            if old is None or base < self.log_start_offset:
                continue
            if batch is None:
                wb.delete(key)
                freed += len(old)
                self.recent_sizes.replace(base, None)
            else:
                value = frame(batch.SerializeToString(), old[:_HEAD.size])  # the head is unchanged
                wb.put(key, value)
                freed += len(old) - len(value)
                self.recent_sizes.replace(base, len(value))
        self.size_bytes -= freed
        self._set_first_dirty(wb, max(self.first_dirty_offset, min(cleaned_to, self.next_offset)))
        wb.put(self._state_key, self._state())
        self.store.write_now(wb)
        return freed

    def reclaim_space(self) -> None:
        """Have RocksDB compact this partition's batches, so rewritten and removed ones free
        their disk space now rather than at some later compaction (blocking: run it in a thread)."""
        self.db.compact_range(self._data, self._data + _END)

    def expire_producers(self, now_ms: int, expiration_ms: int) -> list[int]:
        """Forget producers silent for ``producer.id.expiration.ms``; returns their ids."""
        gone = self.producers.expire(now_ms, expiration_ms)
        if gone:
            wb = WriteBatch(raw_mode=True)
            self._save_producers(wb, gone)
            self.store.write_now(wb)
        return gone

    def _rebuild_producers(self, wb: WriteBatch, heads: list[StoredBatch]) -> None:
        """Producer state, open transactions and the aborted index as of ``heads`` (the batches
        that remain): transactional batches and markers are read again to tell which is which."""
        wb.delete_range(self._producers_key, self._producers_key + _END)
        wb.delete_range(self._ongoing_key, self._ongoing_key + _END)
        wb.delete_range(self._aborted_key, self._aborted_key + _END)
        self.producers.rebuild(heads)
        self.producers.ongoing, self.producers.aborted = {}, []
        for h in heads:
            if h.producer_id == NO_PRODUCER_ID:
                continue
            batch = self.batch_at(h.base_offset)
            if batch is None or not is_transactional(batch):
                continue
            if is_control(batch):
                self._stage_marker(wb, h.producer_id, h.producer_epoch, h.base_offset, h.max_timestamp,
                                   marker_commits(batch))
            elif self.producers.begin_transaction(h.producer_id, h.base_offset):
                wb.put(self._ongoing_key + h.producer_id.to_bytes(8, "big"), _EPOCH.pack(h.base_offset))
        self._save_producers(wb, list(self.producers.producers))

    def retention_offset(self, now_ms: int, retention_ms: int, retention_bytes: int) -> int:
        """Where the log should start under ``retention.ms`` and ``retention.bytes`` (-1: no
        limit): ``retention_cut``'s start."""
        return self.retention_cut(now_ms, retention_ms, retention_bytes).start

    def retention_cut(self, now_ms: int, retention_ms: int, retention_bytes: int) -> RetentionCut:
        """Where the log should start under ``retention.ms`` and ``retention.bytes`` (-1: no
        limit): past the oldest batches that are all below the high watermark and either
        older than retention.ms (by their newest timestamp) or more than the size limit
        needs; with those batches' end and bytes, for ``apply_retention``."""
        start = self.log_start_offset
        remaining = self.size_bytes
        end = None
        for b in self.oldest_batches(None):  # stops at the first batch kept: nothing after it is read
            if b.last_offset >= self.high_watermark:
                break
            too_old = retention_ms >= 0 and b.max_timestamp < now_ms - retention_ms
            too_big = retention_bytes >= 0 and remaining - b.size >= retention_bytes
            if not (too_old or too_big):
                break
            start = end = b.last_offset + 1
            remaining -= b.size
        return RetentionCut(start, end, self.size_bytes - remaining)

    def delete_all(self) -> None:
        """Remove this partition's data, state and epochs (its topic was deleted, or this broker
        no longer hosts it)."""
        wb = WriteBatch(raw_mode=True)
        wb.delete_range(self._data, self._data + _END)
        wb.delete_range(self._epochs_key, self._epochs_key + _END)
        wb.delete_range(self._producers_key, self._producers_key + _END)
        wb.delete_range(self._ongoing_key, self._ongoing_key + _END)
        wb.delete_range(self._aborted_key, self._aborted_key + _END)
        wb.delete(self._clean_key)
        wb.delete(self._state_key)
        self.store.write_now(wb)
        self.recent_sizes.clear()


# -- reading a log from outside the broker (kraft dump-data) ----------------------------------------

def stored_state(db: Any, topic_id: uuid.UUID, partition: int) -> tuple[int, int, int, int] | None:
    """A partition's (log start offset, high watermark, log end offset, size in bytes) as the
    broker last wrote them, or None when ``db`` holds no log of it: for a reader of a store it
    must not change (a read-only instance), which PartitionLog, creating a missing log, is not."""
    raw = db.get(b"s" + tp_prefix(topic_id, partition))
    return None if raw is None else _STATE.unpack(raw)


def stored_partitions(db: Any, topic_id: uuid.UUID) -> list[int]:
    """The partitions of ``topic_id`` that ``db`` holds a log of."""
    prefix = b"s" + topic_id.bytes
    it = db.iter()
    it.seek(prefix)
    out = []
    while it.valid() and it.key().startswith(prefix):
        out.append(int.from_bytes(it.key()[len(prefix):], "big"))
        it.next()
    return out


def stored_frames(db: Any, topic_id: uuid.UUID, partition: int, start: int = 0) -> Iterator[tuple[StoredBatch, bytes]]:
    """Each stored batch's head and frame (a RecordBatchSet of that one batch), in offset order,
    from the batch holding ``start`` (or the first after it), without decoding the frames. A
    value too short for its head comes with last offset -1 and what follows the key's offset."""
    data = b"d" + tp_prefix(topic_id, partition)
    ro = ReadOptions()  # must outlive the iterator: RocksDB keeps a pointer to its bounds
    ro.set_iterate_lower_bound(data)
    ro.set_iterate_upper_bound(data + _END)
    it = db.iter(ro)
    it.seek_for_prev(data + start.to_bytes(8, "big"))
    if not (it.valid() and it.key().startswith(data)) or len(it.value()) < _HEAD.size \
            or _HEAD.unpack_from(it.value())[0] < start:
        it.seek(data + start.to_bytes(8, "big"))
    n = len(data)
    while it.valid():
        k, v = it.key(), it.value()
        base = int.from_bytes(k[n:], "big")
        if len(v) < _HEAD.size:
            yield StoredBatch(base, -1, -1, len(v)), b""
        else:
            last, max_ts, pid, epoch, seq = _HEAD.unpack_from(v)
            yield StoredBatch(base, last, max_ts, len(v), pid, epoch, seq), v[_HEAD.size:]
        it.next()
