"""A fetch's own check of a stored batch (brokerd/stored_batch.py), read without RocksDB's
checksums: every byte of a value is covered (Kafka's CRC-32C, or a check of the fields it
leaves out against the key, the leader epoch cache and the value's size), the values every
writer stores pass, and a log's fetches are read once, not again with RocksDB's checksums,
unless the batches do not follow each other (compaction's gaps)."""
from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

from brokerd.kafka.batches import stored_to_wire, wire_to_frames
from brokerd.leader_epochs import LeaderEpochCache
from brokerd.log_store import LogStore
from brokerd.partition_log import PartitionLog
from brokerd.stored_batch import HEAD, intact
from clients.records import build_batch, frame, frame_parts, set_producer
from protos import broker_pb2 as pb

TS0 = 1_700_000_000_000
TOPIC = uuid.UUID(int=47)


def _stored(base: int, epoch: int, producer: bool = True, records: int = 3) -> bytes:
    """A value as the leader stores it (``PartitionLog._stage``: head, then ``frame_parts``)."""
    b = build_batch([(b"k%d" % i, b"v" * 40, TS0 + i, (("h", b"1"),)) for i in range(records)])
    if producer:
        set_producer(b, 4321, 2, 17)
    b.base_offset, b.partition_leader_epoch = base, epoch
    pid = b.producer_id if b.HasField("producer_id") else -1
    head = HEAD.pack(base + b.last_offset_delta, b.max_timestamp, pid, b.producer_epoch, b.base_sequence)
    return b"".join((head, *frame_parts(b, b.records)))


def test_every_byte_of_a_stored_value_is_checked() -> None:
    """Any byte changed, whatever the change, and the value is not accepted; the key's offset
    and the epoch cache's epoch must be the value's."""
    for value, base, epoch in ((_stored(300, 5), 300, 5), (_stored(0, 0, producer=False, records=1), 0, 0),
                               (_stored(1 << 40, 70000), 1 << 40, 70000)):
        last = base + 2 if len(value) > 200 else base
        assert intact(value, base, epoch) == last
        for i in range(len(value)):
            for flip in (0x01, 0x10, 0x80, 0xFF):
                changed = bytearray(value)
                changed[i] ^= flip
                assert intact(bytes(changed), base, epoch) is None, f"byte {i} ^ {flip:#x} of {len(value)}"
        assert intact(value, base + 1, epoch) is None and intact(value, base, epoch + 1) is None
        assert intact(value, base, None) is None
        assert intact(value[:-1], base, epoch) is None and intact(value + b"\0", base, epoch) is None


def test_what_every_writer_stores_is_accepted() -> None:
    """The leader's value (``frame_parts``), compaction's (``frame`` of the serialized batch),
    and a follower's (``wire_to_frames`` of the leader's answer over Kafka's protocol) are the
    same bytes, all accepted."""
    value = _stored(1234, 9)
    head, frame_bytes = value[:HEAD.size], value[HEAD.size:]
    batch = pb.RecordBatchSet.FromString(frame_bytes).batches[0]
    assert frame(batch.SerializeToString(), head) == value
    [(_, parts)] = wire_to_frames(stored_to_wire(frame_bytes), "t-0")
    assert head + b"".join(bytes(p) for p in parts) == value
    assert intact(value, 1234, 9) == 1236


def test_epoch_at() -> None:
    cache = LeaderEpochCache([(2, 10), (5, 40)])
    assert [cache.epoch_at(o) for o in (10, 39, 40, 1000)] == [2, 2, 5, 5]
    cache.truncate_from_start(12)  # retention: the log starts inside the batch at 10
    assert cache.epoch_at(10) == 2 and LeaderEpochCache().epoch_at(0) is None


def test_a_logs_fetches_are_read_once_and_compactions_gaps_again(tmp_path: Path) -> None:
    """Leader epochs that change, retention that moves the log start into a batch, a restart:
    every read of flushed batches accepted as read (``rereads`` 0). A gap compaction left is not something the
    read can tell from a lost batch, so that read is done again with RocksDB's checksums, and
    answers the same."""
    def batch(n: int) -> pb.RecordBatch:
        return build_batch([(b"k%d" % i, b"v" * 5000, TS0 + i, ()) for i in range(n)])

    async def go() -> None:
        store = LogStore(str(tmp_path))
        plog = PartitionLog(store, TOPIC, 0)
        for i in range(12):
            await plog.append_as_leader(batch(3), 1 + i // 4)  # epochs 1, 2, 3
        plog.set_high_watermark(plog.log_end_offset)
        assert store.in_memtables(store.staged_bytes - 15000)
        store.db.flush(True)
        assert not store.in_memtables(store.staged_bytes - 15000)  # so: read without RocksDB's checks
        for start in (0, 4, 17, 35):
            frames, _ = plog.read(start, 1 << 30, plog.log_end_offset)
            assert len(frames) == 12 - start // 3
        plog.delete_before(7)  # the log starts inside the batch at 6
        assert len(plog.read(7, 1 << 30, plog.log_end_offset)[0]) == 10
        assert len(plog.read(7, 1, plog.high_watermark)[0]) == 1
        assert plog.rereads == 0
        await store.close()
        store = LogStore(str(tmp_path))
        plog = PartitionLog(store, TOPIC, 0)
        whole, _ = plog.read(7, 1 << 30, plog.log_end_offset)
        assert len(whole) == 10 and plog.rereads == 0
        whole_bytes = [bytes(f) for f in whole]

        plog.replace_batches({15: None}, 18)  # compaction removed the batch at 15-17
        frames, _ = plog.read(7, 1 << 30, plog.log_end_offset)
        assert [bytes(f) for f in frames] == whole_bytes[:3] + whole_bytes[4:] and plog.rereads == 1
        frames, _ = plog.read(18, 1 << 30, plog.log_end_offset)  # after the gap: read once
        assert [bytes(f) for f in frames] == whole_bytes[4:] and plog.rereads == 1
        await store.close()
    asyncio.run(go())
