"""Log compaction in one process (brokerd/log_cleaner.py): the latest record of every key
survives at its original offset, tombstones go after delete.retention.ms, removed batches leave
gaps that readers and followers step over, and the space is freed."""
from __future__ import annotations

import asyncio
import time
import uuid

import pytest

from brokerd.config import LogConfig
from brokerd.log_cleaner import clean
from brokerd.log_store import LogStore
from brokerd.partition_log import PartitionLog
from clients.compression import Codec
from clients.records import batches, build_batch, records_of, validate_batch
from common.errors import ErrorCode, KafkaError

COMPACT = LogConfig(cleanup_policy="compact", delete_retention_ms=60_000, min_cleanable_dirty_ratio=0.5)


def run(coro):
    return asyncio.run(coro)


def _batch(pairs: list[tuple[bytes | None, bytes | None]], ts: int, codec: Codec = Codec.NONE):
    return build_batch([(k, v, ts, ()) for k, v in pairs], codec)


def _read(plog: PartitionLog) -> list[tuple[int, bytes | None, bytes | None]]:
    frames, _ = plog.read(plog.log_start_offset, 1 << 30, plog.log_end_offset)
    return [(r.offset, r.key, r.value) for f in frames for b in batches(bytes(f))
            for r in records_of(b, "t", 0)]


async def _fill(plog: PartitionLog, codec: Codec, ts: int) -> dict[bytes, tuple[int, bytes | None]]:
    """Ten keys, each written five times over 25 batches, k3 deleted at the end; returns each
    key's latest (offset, value)."""
    latest: dict[bytes, tuple[int, bytes | None]] = {}
    for round_ in range(5):
        for half in (0, 1):
            pairs = [(b"k%d" % k, b"v%d-%d" % (k, round_)) for k in range(half * 5, half * 5 + 5)]
            info = await plog.append_as_leader(_batch(pairs, ts, codec), 0)
            for i, (k, v) in enumerate(pairs):
                latest[k] = (info.first_offset + i, v)
    info = await plog.append_as_leader(_batch([(b"k3", None)], ts, codec), 0)  # a tombstone
    latest[b"k3"] = (info.first_offset, None)
    plog.set_high_watermark(plog.log_end_offset)
    return latest


@pytest.mark.parametrize("codec", [Codec.NONE, Codec.ZSTD])
def test_the_latest_record_of_every_key_survives_at_its_offset(tmp_path, codec):
    async def go():
        store = LogStore(str(tmp_path))
        plog = PartitionLog(store, uuid.uuid4(), 0)
        now = int(time.time() * 1000)
        latest = await _fill(plog, codec, now)
        end, size = plog.log_end_offset, plog.size_bytes
        result = await clean(plog, COMPACT, now)
        assert result is not None and result.records_removed == 41 and result.bytes_freed > 0
        got = _read(plog)
        assert sorted((o, k, v) for k, (o, v) in latest.items()) == got  # the tombstone is still there
        assert plog.log_end_offset == end and plog.size_bytes == size - result.bytes_freed
        assert await clean(plog, COMPACT, now) is None  # nothing new to clean
        # past delete.retention.ms the tombstone goes too
        result = await clean(plog, LogConfig(cleanup_policy="compact", delete_retention_ms=60_000,
                                             min_cleanable_dirty_ratio=0.0), now + 61_000)
        assert result is not None and result.records_removed == 1
        assert [k for _, k, _ in _read(plog)] == sorted(k for k in latest if k != b"k3")
        await store.close()
        # and all of it survives a restart
        store = LogStore(str(tmp_path))
        plog = PartitionLog(store, plog.topic_id, 0)
        assert len(_read(plog)) == 9 and plog.log_end_offset == end
        await store.close()
    run(go())


def test_only_data_below_the_high_watermark_is_cleaned(tmp_path):
    async def go():
        store = LogStore(str(tmp_path))
        plog = PartitionLog(store, uuid.uuid4(), 0)
        now = int(time.time() * 1000)
        for i in range(4):
            await plog.append_as_leader(_batch([(b"k", b"%d" % i)], now), 0)
        plog.set_high_watermark(2)
        await clean(plog, COMPACT, now)
        assert [o for o, _, _ in _read(plog)] == [1, 2, 3]  # offset 2 and 3 are above the HW
        assert plog.first_dirty_offset == 2
        await store.close()
    run(go())


def test_a_follower_copies_a_compacted_log_with_its_gaps(tmp_path):
    async def go():
        store = LogStore(str(tmp_path))
        leader = PartitionLog(store, uuid.uuid4(), 0)
        follower = PartitionLog(store, uuid.uuid4(), 0)
        now = int(time.time() * 1000)
        await _fill(leader, Codec.LZ4, now)
        await clean(leader, COMPACT, now)
        frames, _ = leader.read(0, 1 << 30, leader.log_end_offset)
        copied = [b for f in frames for b in batches(bytes(f))]
        assert copied[0].base_offset > 0  # the first batches were removed: a gap at the start
        await follower.truncate_fully_and_start_at(0)
        await follower.append_as_follower(copied)
        assert _read(follower) == _read(leader) and follower.log_end_offset == leader.log_end_offset
        await store.close()
    run(go())


def test_a_compacted_topic_refuses_records_without_a_key():
    validate_batch(_batch([(b"k", b"v")], 1), "t-0", 1 << 20, require_keys=True)
    with pytest.raises(KafkaError) as e:
        validate_batch(_batch([(b"k", b"v"), (None, b"v")], 1), "t-0", 1 << 20, require_keys=True)
    assert e.value.code == ErrorCode.INVALID_RECORD
    # Kafka's per-record errors (KIP-467): the second record, with its reason, and a summary
    reason = "Compacted topic cannot accept message without key in topic partition t-0."
    assert e.value.record_errors == ((1, reason),)
    assert e.value.message == ("One or more records have been rejected due to 1 record errors in total, and only "
                               f"showing the first three errors at most: [RecordError(batchIndex=1, message='{reason}')]")


def test_a_truncation_during_a_pass_voids_it(tmp_path, monkeypatch):
    async def go():
        store = LogStore(str(tmp_path))
        plog = PartitionLog(store, uuid.uuid4(), 0)
        now = int(time.time() * 1000)
        await _fill(plog, Codec.NONE, now)
        import brokerd.log_cleaner as cleaner
        monkeypatch.setattr(cleaner, "STEP", 1)  # yield after every batch
        task = asyncio.ensure_future(clean(plog, COMPACT, now))
        await asyncio.sleep(0)
        await plog.truncate_to(plog.log_end_offset - 1)  # a follower cutting its last batch
        truncated = _read(plog)
        assert await task is None
        assert _read(plog) == truncated and len(truncated) == 50  # nothing compacted
        await store.close()
    run(go())


def _txn(pairs: list[tuple[bytes, bytes]], pid: int, seq: int, ts: int):
    from clients.records import set_producer
    batch = _batch(pairs, ts)
    set_producer(batch, pid, 0, seq, transactional=True)
    return batch


def test_compaction_follows_kafkas_rules_for_transactions(tmp_path):
    """Aborted transactions' records go whatever their keys, committed ones are compacted like
    any records, a marker stays while its transaction has records and delete.retention.ms
    after, and nothing from the last stable offset on (an open transaction) is touched."""
    from clients.records import is_control, marker_batch

    async def go():
        store = LogStore(str(tmp_path))
        plog = PartitionLog(store, uuid.uuid4(), 0)
        now = int(time.time() * 1000)
        await plog.append_as_leader(_batch([(b"k1", b"plain-1")], now), 0)                  # 0
        await plog.append_as_leader(_txn([(b"k1", b"aborted"), (b"k2", b"aborted")], 1, 0, now), 0)  # 1-2
        await plog.append_as_leader(_txn([(b"k1", b"committed"), (b"k3", b"committed")], 2, 0, now), 0)  # 3-4
        await plog.append_as_leader(marker_batch(1, 0, False, 0, now), 0)                   # 5: abort
        await plog.append_as_leader(marker_batch(2, 0, True, 0, now), 0)                    # 6: commit
        await plog.append_as_leader(_batch([(b"k3", b"plain-3")], now), 0)                  # 7: k3 again
        await plog.append_as_leader(_txn([(b"k4", b"open")], 3, 0, now), 0)                 # 8: still open
        await plog.append_as_leader(_batch([(b"k5", b"old")], now), 0)                      # 9
        await plog.append_as_leader(_batch([(b"k5", b"new")], now), 0)                      # 10
        plog.set_high_watermark(plog.log_end_offset)
        assert plog.last_stable_offset == 8
        # Producers forgotten (producer.id.expiration.ms), so that none of their batches is kept
        # as their last (test_compaction_keeps_each_producers_last_batch); open transactions stay.
        plog.expire_producers(now, 0)
        cfg = LogConfig(cleanup_policy="compact", delete_retention_ms=60_000, min_cleanable_dirty_ratio=0.01)
        assert await clean(plog, cfg, now) is not None
        data = [(o, k, v) for o, k, v in _read(plog)]
        assert data == [(3, b"k1", b"committed"), (7, b"k3", b"plain-3"), (8, b"k4", b"open"),
                        (9, b"k5", b"old"), (10, b"k5", b"new")]  # nothing at or past the LSO went

        def markers() -> list[int]:
            return [h.base_offset for h in plog.stored_batches(plog.log_start_offset)
                    if (b := plog.batch_at(h.base_offset)) is not None and is_control(b)]
        assert markers() == [5, 6]  # the abort's records are gone, but not delete.retention.ms ago
        await clean(plog, cfg, now + 30_000)
        assert markers() == [5, 6]  # delete.retention.ms runs from the pass that found it empty
        await clean(plog, cfg, now + 61_000)
        assert markers() == [6]  # the commit's marker stays with its transaction's k1
        assert [o for o, _, _ in _read(plog)] == [3, 7, 8, 9, 10]
        await store.close()
    run(go())


def test_compaction_keeps_each_producers_last_batch(tmp_path):
    """Kafka's cleaner keeps the last batch of every producer the partition remembers, emptied
    of the records that go, so that producer state survives compaction: a follower that copies
    the compacted log, the log rebuilt after a truncation, and the log after a restart all
    accept the producer's next sequence (not UNKNOWN_PRODUCER_ID), and readers see no record
    of it."""
    from clients.records import set_producer

    def idempotent(pairs: list[tuple[bytes, bytes]], pid: int, seq: int, ts: int):
        batch = _batch(pairs, ts, Codec.LZ4)
        set_producer(batch, pid, 0, seq)
        return batch

    async def go():
        store = LogStore(str(tmp_path))
        leader = PartitionLog(store, uuid.uuid4(), 0)
        follower = PartitionLog(store, uuid.uuid4(), 0)
        now = int(time.time() * 1000)
        await leader.append_as_leader(idempotent([(b"k1", b"a"), (b"k2", b"a")], 7, 0, now), 0)  # 0-1
        await leader.append_as_leader(idempotent([(b"k1", b"b"), (b"k2", b"b")], 7, 2, now), 0)  # 2-3
        await leader.append_as_leader(_batch([(b"k1", b"c"), (b"k2", b"c")], now), 0)          # 4-5
        leader.set_high_watermark(leader.log_end_offset)
        cfg = LogConfig(cleanup_policy="compact", delete_retention_ms=60_000, min_cleanable_dirty_ratio=0.01)
        assert (await clean(leader, cfg, now)).records_removed == 4
        assert _read(leader) == [(4, b"k1", b"c"), (5, b"k2", b"c")]  # 0-3 emptied; 2-3 stays, empty

        def next_batch(seq: int):
            return idempotent([(b"k3", b"d")], 7, seq, now)
        frames, _ = leader.read(0, 1 << 30, leader.log_end_offset)
        await follower.append_as_follower([b for f in frames for b in batches(bytes(f))])
        assert _read(follower) == _read(leader)
        assert (await follower.append_as_leader(next_batch(4), 0)).first_offset == 6  # a follower that leads
        await leader.append_as_leader(next_batch(4), 0)  # 6
        await leader.append_as_leader(idempotent([(b"k4", b"e")], 8, 0, now), 0)  # 7, of another producer
        await leader.truncate_to(6)  # producer state rebuilt from the batches that remain
        assert (await leader.append_as_leader(next_batch(4), 0)).first_offset == 6
        await store.close()
        store = LogStore(str(tmp_path))  # and after a restart
        leader = PartitionLog(store, leader.topic_id, 0)
        assert (await leader.append_as_leader(next_batch(5), 0)).first_offset == 7
        await store.close()
    run(go())
