"""Broker pieces in one process: Kafka's partitioner, record batches, the RocksDB partition log
(range reads, persistence, truncation, retention), leader epochs, and the high watermark with
Kafka's definition (the smallest log end offset among the in-sync replicas, docs/brokers.md)."""
from __future__ import annotations

import asyncio
import time
import uuid

import pytest

from brokerd.config import BrokerConfig, LogConfig
from common.errors import ErrorCode, KafkaError
from common.config_def import ConfigError
from brokerd.fetch import fetch
from brokerd.requests import FetchPartition, FetchRequest, FetchTopic
from brokerd.leader_epochs import UNDEFINED_EPOCH, LeaderEpochCache
from brokerd.log_store import FlushPolicy, LogStore
from brokerd.partition import Change, Partition
from brokerd.partition_log import PartitionLog
from brokerd.topic_stats import BrokerTopicStats
from clients.partitioner import StickyPartitioner, murmur2, partition_for_key, to_positive
from clients.records import ConsumerRecord, batches, build_batch, records_of, validate_batch
from metadata.image import PartitionRegistration
from brokerd.replication_quota import ReplicationQuota
from protos import broker_pb2 as pb
from tests.eventually import eventually


def run(coro):
    return asyncio.run(coro)


# -- the partitioner ----------------------------------------------------------------------------

def test_murmur2_matches_kafka():
    # org.apache.kafka.common.utils.UtilsTest.testMurmur2
    cases = {b"21": -973932308, b"foobar": -790332482, b"a-little-bit-long-string": -985981536,
             b"a-little-bit-longer-string": -1486304829,
             b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971, b"abc": 479470107}
    for key, expected in cases.items():
        assert murmur2(key) == expected
    # partitions of 1000 as Kafka's default partitioner picks them (kafka-python's Java check)
    for key, p in [(b"", 681), (b"a", 524), (b"ab", 434), (b"abc", 107), (b"123456789", 566), (b"\x00 ", 742)]:
        assert partition_for_key(key, 1000) == p
    assert to_positive(-2147483648) == 0 and to_positive(-1) == 2147483647


def test_sticky_partitioner_moves_to_another_partition_on_a_new_batch():
    s = StickyPartitioner()
    first = s.partition("t", 4, [0, 1, 2, 3])
    assert s.partition("t", 4, [0, 1, 2, 3]) == first  # sticks
    second = s.next_partition("t", 4, [0, 1, 2, 3], first)
    assert second != first and s.partition("t", 4, [0, 1, 2, 3]) == second
    assert s.next_partition("t", 4, [0, 1, 2, 3], first) == second  # someone already moved it on
    assert s.next_partition("t", 4, [3], second) == 3  # one available partition
    assert 0 <= s.next_partition("u", 4, [], -1) < 4  # none available: any


# -- record batches ---------------------------------------------------------------------------

def _batch(n=3, size=10, ts=None):
    ts = ts if ts is not None else int(time.time() * 1000)
    return build_batch([(b"k%d" % i, b"x" * size, ts + i, (("h", b"1"),)) for i in range(n)])


def test_batch_round_trip_and_validation():
    b = _batch(3)
    assert validate_batch(b, "t-0", 1048588) == b.ByteSize()
    b.base_offset = 7
    recs = list(records_of(b, "t", 0))
    assert [r.offset for r in recs] == [7, 8, 9] and recs[1].key == b"k1" and recs[2].headers == (("h", b"1"),)
    assert [r.offset for r in records_of(b, "t", 0, from_offset=9)] == [9]
    null = build_batch([(None, None, 5, ())])
    r = next(records_of(null, "t", 0))
    assert r.key is None and r.value is None

    with pytest.raises(KafkaError) as e:
        validate_batch(_batch(1, 5000), "t-0", 1000)
    assert e.value.code == ErrorCode.RECORD_TOO_LARGE
    assert e.value.message.startswith("The record batch size in the append to t-0 is ") and \
        e.value.message.endswith("bytes which exceeds the maximum configured value of 1000.")

    bad = _batch(2)
    bad.crc ^= 1
    with pytest.raises(KafkaError) as e:
        validate_batch(bad, "t-0", 1048588)
    assert e.value.code == ErrorCode.CORRUPT_MESSAGE and "Record is corrupt (stored crc = " in e.value.message

    lying = _batch(2)
    lying.record_count, lying.last_offset_delta = 3, 2
    with pytest.raises(KafkaError) as e:
        validate_batch(lying, "t-0", 1048588)
    assert e.value.code in (ErrorCode.INVALID_RECORD, ErrorCode.CORRUPT_MESSAGE)

    garbage = _batch(1)
    garbage.records = b"\xff\xff\xff"
    from clients.records import batch_crc
    garbage.crc = batch_crc(garbage)
    with pytest.raises(KafkaError) as e:
        validate_batch(garbage, "t-0", 1048588)
    assert e.value.code == ErrorCode.CORRUPT_MESSAGE


# -- the partition log ------------------------------------------------------------------------

def test_partition_log_reads_ranges_and_survives_reopening(tmp_path):
    tid = uuid.uuid4()

    async def write():
        store = LogStore(str(tmp_path))
        log = PartitionLog(store, tid, 0)
        for epoch in (0, 0, 1, 1):
            await log.append_as_leader(_batch(3), epoch)
        log.set_high_watermark(9)
        log.checkpoint()
        frames, size = log.read(4, 1 << 20, log.high_watermark)  # inside the second batch
        got = [r.offset for f in frames for b in batches(bytes(f)) for r in records_of(b, "t", 0, 4)]
        assert got == [4, 5, 6, 7, 8]
        one, _ = log.read(0, 1, log.log_end_offset)  # max bytes below one batch: still one batch
        assert len(one) == 1
        assert log.end_offset_for_epoch(0) == (0, 6) and log.end_offset_for_epoch(1) == (1, 12)
        await store.close()

    async def reopen():
        store = LogStore(str(tmp_path))
        assert store.local_partitions() == [(tid, 0)]
        log = PartitionLog(store, tid, 0)
        state = (log.log_start_offset, log.high_watermark, log.log_end_offset)
        assert state == (0, 9, 12) and log.size_bytes > 0
        assert log.epochs.entries == [(0, 0), (1, 6)]
        assert await log.truncate_to(7) == 6  # a batch spanning the cut goes whole
        assert (log.log_end_offset, log.high_watermark, log.epochs.entries) == (6, 6, [(0, 0)])
        await log.append_as_leader(_batch(2), 2)
        assert log.end_offset_for_epoch(1) == (0, 6)  # we never had epoch 1 now
        log.delete_all()
        await store.close()
        store = LogStore(str(tmp_path))
        assert store.local_partitions() == []
        await store.close()

    run(write())
    run(reopen())


def test_retention_by_size_and_time_uses_range_deletes(tmp_path):
    async def go():
        store = LogStore(str(tmp_path))
        log = PartitionLog(store, uuid.uuid4(), 3)
        old = int(time.time() * 1000) - 3_600_000
        for i in range(5):
            await log.append_as_leader(_batch(2, 100, ts=old if i < 2 else None), 0)
        log.set_high_watermark(log.log_end_offset)
        now = int(time.time() * 1000)
        # time: the two old batches go; the HW bounds what may go
        assert log.retention_offset(now, 60_000, -1) == 4
        log.delete_before(4)
        assert log.log_start_offset == 4 and log.stored_batches()[0].base_offset == 4
        # size: keep the newest batches whose total stays within the limit
        sizes = [b.size for b in log.stored_batches()]
        assert log.retention_offset(now, -1, sizes[1] + sizes[2]) == 6
        freed = log.delete_before(6)
        assert freed == sizes[0] and log.size_bytes == sizes[1] + sizes[2]
        frames, _ = log.read(0, 1 << 20, log.high_watermark)
        assert [b.base_offset for f in frames for b in batches(bytes(f))] == [6, 8]
        # defaults: 168 hours, unlimited size
        assert LogConfig().retention_ms == 168 * 3_600_000 and LogConfig().retention_bytes == -1
        await store.close()
    run(go())


class _CountedReads:
    """A RocksDB handle whose iterators count the values read through them (``it.value()``)."""

    def __init__(self, db) -> None:
        self.db, self.values = db, 0

    def __getattr__(self, name):
        return getattr(self.db, name)

    def iter(self, *args):
        counted, it = self, self.db.iter(*args)

        class Counted:
            def __getattr__(self, name):
                return getattr(it, name)

            def value(self):
                counted.values += 1
                return it.value()
        return Counted()


def test_retention_reads_the_values_of_the_batches_it_deletes_and_one_more(tmp_path):
    """Retention's scan (every log.retention.check.interval.ms) stops at the first batch it
    keeps: a scan that deletes nothing reads one value, one that deletes k batches reads k + 1
    to choose them and as many to delete them, whatever the log holds after them. It read
    every value of the partition, twice when it deleted (Kafka's retention reads no data:
    each segment's largest timestamp and size are kept beside it)."""
    async def go():
        store = LogStore(str(tmp_path))
        log = PartitionLog(store, uuid.uuid4(), 0)
        old = int(time.time() * 1000) - 3_600_000
        for i in range(40):
            await log.append_as_leader(_batch(2, 100, ts=old if i < 3 else None), 0)
        log.set_high_watermark(log.log_end_offset)
        now = int(time.time() * 1000)
        sizes = [b.size for b in log.stored_batches()]
        log.db = reads = _CountedReads(log.db)
        assert log.retention_offset(now, 7 * 24 * 3_600_000, -1) == 0  # nothing old enough
        assert reads.values == 1
        reads.values = 0
        assert log.retention_offset(now, 60_000, -1) == 6  # three old batches of two records
        assert reads.values == 4
        reads.values = 0
        assert log.delete_before(6) == sum(sizes[:3]) and log.log_start_offset == 6
        assert reads.values == 4
        reads.values = 0
        assert log.retention_offset(now, -1, sum(sizes[5:])) == 10  # by size: two more go
        assert reads.values == 3
        await store.close()
    run(go())



def test_a_retention_check_that_deletes_reads_each_value_once(tmp_path):
    """ReplicaManager's retention check deletes from what its scan read: k doomed batches cost
    k + 1 values read, not k + 1 to choose them and k + 1 again to delete them (each a blob
    file's pread and CRC32C; under sustained appends retention deletes as much as is
    produced, docs/brokers.md "Long produce runs"). What is deleted and the log's start and
    size are as ``delete_before`` leaves them."""
    from brokerd.replica_manager import ReplicaManager

    async def go():
        store = LogStore(str(tmp_path))
        tid = uuid.uuid4()
        log = PartitionLog(store, tid, 0)
        old = int(time.time() * 1000) - 3_600_000
        for i in range(20):
            await log.append_as_leader(_batch(2, 100, ts=old if i < 3 else None), 0)
        log.set_high_watermark(log.log_end_offset)
        sizes = [b.size for b in log.stored_batches()]
        size = log.size_bytes
        p = Partition(7, "t", tid, 0, log, LogConfig(retention_ms=60_000))
        rm = ReplicaManager(_broker_config(), None, None, fenced=lambda: False)
        rm.partitions[(tid, 0)] = p
        log.db = reads = _CountedReads(log.db)
        rm.enforce_retention()
        assert reads.values == 4  # three old batches of two records, and the first kept
        assert log.log_start_offset == 6 and log.size_bytes == size - sum(sizes[:3])
        assert [b.base_offset for b in log.stored_batches()][:2] == [6, 8]
        reads.values = 0
        rm.enforce_retention()  # nothing more is old enough
        assert reads.values == 1 and log.log_start_offset == 6
        await store.close()
    run(go())

def test_synced_writes_group_commit(tmp_path):
    async def go():
        store = LogStore(str(tmp_path), FlushPolicy(interval_messages=1))
        logs = [PartitionLog(store, uuid.uuid4(), i) for i in range(4)]
        infos = await asyncio.gather(*(lg.append_as_leader(_batch(2), 0) for lg in logs for _ in range(5)))
        assert sorted(i.first_offset for i in infos) == sorted([0, 2, 4, 6, 8] * 4)
        assert all(lg.log_end_offset == 10 for lg in logs)
        await store.close()
    run(go())


# -- leader epochs -------------------------------------------------------------------------------

def test_leader_epoch_end_offsets():
    c = LeaderEpochCache([(1, 0), (3, 50), (4, 80)])
    assert c.end_offset_for(4, 100) == (4, 100)       # the latest: the log end
    assert c.end_offset_for(3, 100) == (3, 80)
    assert c.end_offset_for(2, 100) == (1, 50)        # never had 2: the one before, until 3 began
    assert c.end_offset_for(0, 100) == (0, 0)         # older than anything
    assert c.end_offset_for(9, 100) == (UNDEFINED_EPOCH, -1)
    assert not c.assign(2, 90) and c.assign(5, 90)
    assert c.truncate_from_end(80) == [5, 4] and c.latest_epoch == 3
    assert c.truncate_from_start(60) == ([1], (3, 60))


# -- the high watermark: the smallest log end offset of the ISR (docs/brokers.md) ------------------

class _OneReplica:
    """What fetch() uses of a ReplicaManager: two calls, the topic counters and the throttle."""

    def __init__(self, p: Partition, quota: ReplicationQuota | None = None) -> None:
        self.p = p
        self.leader_quota = quota or ReplicationQuota()
        self.topic_stats = BrokerTopicStats()

    def partition(self, topic, index, topic_id=b""):
        if (topic or self.p.topic, index) != (self.p.topic, self.p.index):
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        return self.p

    def follower_fetched(self, p, replica, offset, log_start_offset=-1):
        p.update_follower(replica, offset, log_start_offset)


def _fetch(rm, replica, offset, epoch=None, wait=0):
    fp = FetchPartition(partition=0, fetch_offset=offset, current_leader_epoch=epoch)
    return fetch(rm, FetchRequest(replica_id=replica, max_wait_ms=wait,
                                  topics=[FetchTopic(name="first", partitions=[fp])]))


def test_high_watermark_is_the_smallest_log_end_in_the_isr(tmp_path):
    """Seed 004: ISR = leader + 2 followers; follower1 has everything, follower2 has synced up to
    message 3, so HW = 4 and consumers may read offsets 0-3 only."""
    async def go():
        store = LogStore(str(tmp_path))
        p = Partition(1, "first", uuid.uuid4(), 0, PartitionLog(store, uuid.uuid4(), 0), LogConfig())
        assert p.update(PartitionRegistration((1, 2, 3), (1, 2, 3), 1, 0, 0)) == Change.BECAME_LEADER
        for _ in range(9):  # offsets 0..8: LEO 9
            await p.append_as_leader(_batch(1), 1)
        rm = _OneReplica(p)
        assert p.log.high_watermark == 0
        await _fetch(rm, 2, 9)   # follower1: caught up (its LEO = 9)
        await _fetch(rm, 3, 4)   # follower2: has messages 0..3 (its LEO = 4)
        assert p.log.log_end_offset == 9 and p.log.high_watermark == 4
        resp = await _fetch(rm, -1, 0)
        a = resp.topics[0].partitions[0]
        offsets = [r.offset for b in batches(a.records) for r in records_of(b, "first", 0)]
        assert offsets == [0, 1, 2, 3] and a.high_watermark == 4
        # a follower reads up to the log end; a fetch with an old epoch is fenced
        follower = (await _fetch(rm, 3, 4)).topics[0].partitions[0]
        assert [b.base_offset for b in batches(follower.records)] == [4, 5, 6, 7, 8]
        current = (await _fetch(rm, -1, 0, epoch=0)).topics[0].partitions[0]
        assert current.error_code == 0
        p.update(PartitionRegistration((1, 2, 3), (1, 2, 3), 1, 1, 1))  # a new leader epoch
        fenced = (await _fetch(rm, -1, 0, epoch=0)).topics[0].partitions[0]
        assert fenced.error_code == ErrorCode.FENCED_LEADER_EPOCH
        future = (await _fetch(rm, -1, 0, epoch=7)).topics[0].partitions[0]
        assert future.error_code == ErrorCode.UNKNOWN_LEADER_EPOCH
        out = (await _fetch(rm, -1, 99)).topics[0].partitions[0]
        assert out.error_code == ErrorCode.OFFSET_OUT_OF_RANGE and "range 0 to 9" in out.error_message
        await store.close()
    run(go())


def test_a_followers_fetch_reads_and_looks_at_the_high_watermark_only_for_what_moved(tmp_path, monkeypatch):
    """A follower's session fetch comes through every partition of the session each time, most
    of them with nothing new: a partition it fetches at the log end is not read, and the high
    watermark is looked at only when the follower's log end moved (Kafka's
    updateFollowerFetchState); its fetch time still counts for the ISR at every fetch."""
    reads, hw_checks = [], []
    read, check = PartitionLog.read, Partition.maybe_increment_hw
    monkeypatch.setattr(PartitionLog, "read", lambda self, *a, **kw: reads.append(a[0]) or read(self, *a, **kw))
    monkeypatch.setattr(Partition, "maybe_increment_hw", lambda self: hw_checks.append(1) or check(self))

    async def go():
        store = LogStore(str(tmp_path))
        now = [1000.0]
        p = Partition(1, "first", uuid.uuid4(), 0, PartitionLog(store, uuid.uuid4(), 0), LogConfig(),
                      clock=lambda: now[0])
        p.update(PartitionRegistration((1, 2, 3), (1, 2, 3), 1, 0, 0))
        await p.append_as_leader(_batch(3), 1)  # LEO 3
        rm = _OneReplica(p)
        reads.clear(), hw_checks.clear()
        got = (await _fetch(rm, 2, 0)).topics[0].partitions[0]  # follower 2 reads the batch
        assert len(got.records) and reads == [0] and len(hw_checks) == 1 and p.log.high_watermark == 0
        await _fetch(rm, 2, 3)   # its log end moved to 3: still held back by follower 3
        assert reads == [0] and len(hw_checks) == 2 and p.log.high_watermark == 0
        now[0] += 500
        again = (await _fetch(rm, 2, 3)).topics[0].partitions[0]  # nothing new: no read, no HW
        assert again.records == b"" and again.high_watermark == 0 and reads == [0] and len(hw_checks) == 2
        assert p.followers[2].last_fetch_ms == p.followers[2].last_caught_up_ms == 1500.0
        await _fetch(rm, 3, 3)   # follower 3 caught up: the HW moves
        assert p.log.high_watermark == 3 and len(hw_checks) == 3 and reads == [0]
        await store.close()
    run(go())


def test_a_long_poll_that_expires_wakes_the_loop_once_and_leaves_nothing_behind(tmp_path):
    """An idle follower's fetch waits replica.fetch.wait.max.ms and expires (every fetch of an
    idle cluster): its timer completes the waiter itself, so the loop turns once for the
    timer and once for the fetch to answer, where wait_for's cancel-and-wait took four
    (docs/brokers.md, "The brokers' idle CPU"). It still waits its max_wait_ms, answers the
    partition's state, and a cancelled or expired poll leaves no waiter nor live timer."""
    async def go():
        store = LogStore(str(tmp_path))
        p = Partition(1, "first", uuid.uuid4(), 0, PartitionLog(store, uuid.uuid4(), 0), LogConfig())
        p.update(PartitionRegistration((1, 2), (1, 2), 1, 0, 0))
        await p.append_as_leader(_batch(3), 1)
        rm = _OneReplica(p)
        await _fetch(rm, 2, 3)  # caught up: the high watermark is 3, nothing more to read
        loop = asyncio.get_running_loop()
        turns = [0]
        run_once = loop._run_once  # type: ignore[attr-defined]

        def counted():
            turns[0] += 1
            run_once()
        loop._run_once = counted  # type: ignore[attr-defined]
        try:
            start = loop.time()
            task = asyncio.ensure_future(_fetch(rm, 2, 3, wait=200))
            await asyncio.sleep(0)  # the task's first step runs the fetch to its wait
            assert p.delayed_fetches == 1
            turns[0] = 0
            got = (await task).topics[0].partitions[0]
            waited, after_wait = loop.time() - start, turns[0]
        finally:
            del loop._run_once  # type: ignore[attr-defined]
        assert waited >= 0.2 and got.error_code == 0 and got.high_watermark == 3 and not got.frames
        # the timer's turn and the fetch's own (the awaiting test's is the third)
        assert after_wait <= 3, after_wait
        assert p.delayed_fetches == 0 and not [h for h in loop._scheduled if not h.cancelled()]  # type: ignore[attr-defined]
        # a long poll cancelled while it waits (the listener stopping) drops its waiter and timer
        task = asyncio.ensure_future(_fetch(rm, 2, 3, wait=30_000))
        await asyncio.sleep(0)
        assert p.delayed_fetches == 1
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert p.delayed_fetches == 0 and not [h for h in loop._scheduled if not h.cancelled()]  # type: ignore[attr-defined]
        # and one woken by an append answers it at once
        task = asyncio.ensure_future(_fetch(rm, 2, 3, wait=30_000))
        await asyncio.sleep(0)
        assert p.delayed_fetches == 1
        await p.append_as_leader(_batch(2), 1)
        p.notify()
        woken = (await asyncio.wait_for(task, 10)).topics[0].partitions[0]
        assert [b.base_offset for b in batches(woken.records)] == [3]
        await store.close()
    run(go())


class _Replicas(_OneReplica):
    """fetch()'s view of a ReplicaManager leading several partitions of one topic."""

    def __init__(self, *ps: Partition) -> None:
        super().__init__(ps[0])
        self.ps = {p.index: p for p in ps}

    def partition(self, topic, index, topic_id=b""):
        return self.ps[index]


class _SteppedDb:
    """A partition log's RocksDB, counting the entries its iterators land on: RocksDB reads an
    entry's value (with blob files a pread, its CRC32C and a copy) when an iterator steps onto it."""

    def __init__(self, db) -> None:
        self._db = db
        self.landed = 0

    def iter(self, *args):
        return _SteppedIter(self._db.iter(*args), self)

    def __getattr__(self, name):
        return getattr(self._db, name)


class _SteppedIter:
    def __init__(self, it, db: _SteppedDb) -> None:
        self._it, self._db = it, db

    def _moved(self) -> None:
        if self._it.valid():
            self._db.landed += 1

    def seek(self, key) -> None:
        self._it.seek(key)
        self._moved()

    def seek_for_prev(self, key) -> None:
        self._it.seek_for_prev(key)
        self._moved()

    def next(self) -> None:
        self._it.next()
        self._moved()

    def __getattr__(self, name):
        return getattr(self._it, name)


def test_a_read_does_not_step_onto_the_batch_it_knows_will_not_fit(tmp_path):
    """With librdkafka's ~256 KiB batches four fill a partition's 1 MiB, and reading the fifth
    only to drop it cost a value read; the log knows the sizes of the batches it appended, so it
    stops before it. What it answers is unchanged, also where it does not know them (reopened)
    and after a truncation or compaction changed them."""
    tid = uuid.uuid4()

    async def go():
        store = LogStore(str(tmp_path))
        log = PartitionLog(store, tid, 0)
        for _ in range(6):
            await log.append_as_leader(_batch(10, 100, ts=1_700_000_000_000), 0)
        log.set_high_watermark(log.log_end_offset)
        sizes = [len(f) for f in log.read(0, 1 << 20, 60)[0]]  # a byte apart at most (the CRC's varint)
        size = max(sizes)
        stepped = log.db = _SteppedDb(log.db)
        frames, got = log.read(0, sum(sizes[:4]) + size // 2, 60)
        assert len(frames) == 4 and got == sum(sizes[:4]) and stepped.landed == 4
        stepped.landed = 0  # the log's end: no step past the last batch either
        assert len(log.read(30, 1 << 20, 60)[0]) == 3 and stepped.landed == 3
        stepped.landed = 0  # a batch that fits exactly is read, and the one after it not
        assert len(log.read(10, sum(sizes[1:3]), 60)[0]) == 2 and stepped.landed == 2
        # a truncation and new batches of another size: the old sizes are not used
        await log.truncate_to(20)
        for _ in range(3):
            await log.append_as_leader(_batch(10, 10, ts=1_700_000_000_000), 0)
        log.set_high_watermark(log.log_end_offset)
        smalls = [len(f) for f in log.read(20, 1 << 20, 50)[0]]
        assert len(smalls) == 3 and max(smalls) < min(sizes)
        assert [len(f) for f in log.read(0, sum(sizes[:2]) + sum(smalls), 50)[0]] == sizes[:2] + smalls
        # compaction rewrote a batch smaller: it is read, not skipped on its old size
        assert log.replace_batches({0: _batch(10, 10, ts=1_700_000_000_000)}, 10) > 0
        first = len(log.read(0, 1, 50)[0][0])
        assert first < sizes[0]
        assert [len(f) for f in log.read(0, first + sizes[1], 50)[0]] == [first, sizes[1]]
        await store.close()
        store = LogStore(str(tmp_path))  # reopened: no sizes known, the same answers
        log = PartitionLog(store, tid, 0)
        assert [len(f) for f in log.read(0, first + sizes[1] + 1, 50)[0]] == [first, sizes[1]]
        assert [len(f) for f in log.read(10, sizes[1] + sum(smalls), 50)[0]] == [sizes[1], *smalls]
        await store.close()
    run(go())


def test_fetch_max_bytes_bounds_the_answer_past_its_first_partition_with_data(tmp_path):
    """Kafka's readFromLocalLog: only the first partition with data returns a batch larger than
    what the limits leave (fetch.max.bytes, max.partition.fetch.bytes); a later partition whose
    next batch does not fit what fetch.max.bytes leaves returns no records (Kafka sends the cut
    start of that batch, which clients drop), so an answer stays within fetch.max.bytes."""
    async def go():
        store = LogStore(str(tmp_path))
        tid = uuid.uuid4()
        ps = []
        for i in range(3):
            p = Partition(1, "t", tid, i, PartitionLog(store, uuid.uuid4(), i), LogConfig())
            p.update(PartitionRegistration((1,), (1,), 1, 0, 0))
            # one timestamp for all: the same bytes in every partition (a stored frame's CRC is a
            # varint, so batches with other timestamps may differ by a byte in size)
            await p.append_as_leader(_batch(10, 100, ts=1_700_000_000_000), 0)  # ~1.2 kB
            await p.append_as_leader(_batch(1, 10, ts=1_700_000_000_000), 0)    # ~80 B
            ps.append(p)
        one, two = (len(f) for f in ps[0].log.read(0, 1 << 20, 99)[0])  # the two batches' sizes as read

        def ask(max_bytes: int, partition_max_bytes: int):
            return fetch(_Replicas(*ps), FetchRequest(replica_id=-1, max_bytes=max_bytes, topics=[FetchTopic(
                name="t", partitions=[FetchPartition(partition=i, fetch_offset=0,
                                                     partition_max_bytes=partition_max_bytes) for i in range(3)])]))

        async def counts(max_bytes: int, partition_max_bytes: int) -> list[int]:
            resp = await ask(max_bytes, partition_max_bytes)
            return [sum(b.record_count for b in batches(a.records)) for a in resp.topics[0].partitions]
        # the first partition's first batch goes over both limits; the others get nothing
        assert await counts(100, 100) == [10, 0, 0]
        # fetch.max.bytes: what the first partition leaves is one byte short of the second's batch
        assert await counts(one + two + one - 1, 1 << 20) == [11, 0, 0]
        assert await counts(one + two + one, 1 << 20) == [11, 10, 0]
        # max.partition.fetch.bytes: over it only in the first partition with data
        assert await counts(1 << 20, one - 1) == [10, 0, 0]
        assert await counts(1 << 20, one + two) == [11, 11, 11]
        await store.close()
    run(go())


def test_delete_records_waits_for_the_log_starts_of_the_live_followers(tmp_path):
    """Kafka's DelayedDeleteRecords: the low watermark is the smallest log start over the leader
    and its followers on live brokers, reported with each fetch; waiting for it times out."""
    async def go():
        store = LogStore(str(tmp_path))
        p = Partition(1, "t", uuid.uuid4(), 0, PartitionLog(store, uuid.uuid4(), 0), LogConfig())
        p.update(PartitionRegistration((1, 2, 3), (1, 2, 3), 1, 0, 0))
        for _ in range(6):
            await p.append_as_leader(_batch(1), 1)
        for follower in (2, 3):
            p.update_follower(follower, 6, 0)
        p.log.delete_before(4)
        everyone = lambda b: True  # noqa: E731
        assert p.low_watermark(everyone) == 0
        waiter = asyncio.ensure_future(p.wait_for_low_watermark(4, everyone, 5))
        p.update_follower(2, 6, 4)
        await asyncio.sleep(0.01)
        assert not waiter.done()  # follower 3 still starts at 0
        p.update_follower(3, 6, 4)
        assert await asyncio.wait_for(waiter, 1) == 4
        assert await p.wait_for_low_watermark(2, everyone, 0) == 4  # already there: no wait
        p.log.delete_before(5)
        p.update_follower(2, 6, 5)
        assert await p.wait_for_low_watermark(5, lambda b: b != 3, 1) == 5  # 3 is fenced: not waited for
        with pytest.raises(KafkaError) as e:
            await p.wait_for_low_watermark(5, everyone, 0.05)
        assert e.value.code == ErrorCode.REQUEST_TIMED_OUT and "on replicas [3]" in e.value.message
        await store.close()
    run(go())


def test_acks_all_waits_for_the_isr_and_min_isr_is_checked_first(tmp_path):
    async def go():
        store = LogStore(str(tmp_path))
        p = Partition(1, "t", uuid.uuid4(), 0, PartitionLog(store, uuid.uuid4(), 0), LogConfig(min_insync_replicas=2))
        p.update(PartitionRegistration((1, 2), (1, 2), 1, 0, 0))
        info = await p.append_as_leader(_batch(2), -1)
        waiter = asyncio.ensure_future(p.wait_for_replication(info.last_offset + 1, 5))
        await asyncio.sleep(0.01)
        assert not waiter.done()
        p.update_follower(2, info.last_offset + 1)  # the follower fetched past the batch
        await asyncio.wait_for(waiter, 1)
        with pytest.raises(KafkaError) as e:
            await p.wait_for_replication(p.log.log_end_offset + 5, 0.05)
        assert e.value.code == ErrorCode.REQUEST_TIMED_OUT
        p.update(PartitionRegistration((1, 2), (1,), 1, 0, 1))  # the controller shrank the ISR
        with pytest.raises(KafkaError) as e:
            await p.append_as_leader(_batch(1), -1)
        assert e.value.code == ErrorCode.NOT_ENOUGH_REPLICAS
        assert e.value.message == ("The size of the current ISR Set(1) is insufficient to satisfy the min.isr "
                                   "requirement of 2 for partition t-0")
        await p.append_as_leader(_batch(1), 1)  # acks=1 does not care
        p.update(PartitionRegistration((1, 2), (2,), 2, 1, 2))  # leadership moved away
        with pytest.raises(KafkaError) as e:
            await p.append_as_leader(_batch(1), 1)
        assert e.value.code == ErrorCode.NOT_LEADER_OR_FOLLOWER
        assert e.value.message == "Leader not local for partition t-0 on broker 1"
        await store.close()
    run(go())


class _Leaders:
    """What ``brokerd.produce.produce`` asks of the replica manager, over local partitions."""

    txn_verifier = None

    def __init__(self, *ps: Partition) -> None:
        self.by_name = {(p.topic, p.index): p for p in ps}
        self.topic_stats = BrokerTopicStats()

    def leader(self, topic, index):
        p = self.by_name[(topic, index)]
        p.check_leader()
        return p


def test_a_produce_request_writes_and_waits_for_its_partitions_together_without_a_task_each(tmp_path):
    """Issue 31: a Produce request writes all its batches in one step and waits for all its
    partitions' high watermarks with one waiter and one timer (a task per partition for the
    appends and another for the waits were most of the event loop's work per request), with
    each partition answered as before: acks=all once the ISR has the batch, REQUEST_TIMED_OUT
    where it has not, NOT_ENOUGH_REPLICAS_AFTER_APPEND where the ISR shrank below
    min.insync.replicas meanwhile; a request cancelled while it waits leaves no waiter behind."""
    from brokerd.produce import produce
    from brokerd.requests import ProducePartitionData, ProduceRequest, ProduceTopicData

    async def go():
        store = LogStore(str(tmp_path))
        tid = uuid.uuid4()
        ps = [Partition(1, "t", tid, i, PartitionLog(store, tid, i), LogConfig(min_insync_replicas=2))
              for i in range(4)]
        for p in ps:
            p.update(PartitionRegistration((1, 2), (1, 2), 1, 0, 0))
        rm = _Leaders(*ps)
        tasks = 0
        loop = asyncio.get_running_loop()

        def counting(loop, coro):
            nonlocal tasks
            tasks += 1
            return asyncio.Task(coro, loop=loop)
        loop.set_task_factory(counting)
        request = ProduceRequest(acks=-1, timeout_ms=300, topics=[ProduceTopicData("t", [
            ProducePartitionData(i, _batch(3)) for i in range(4)])])
        waiting = asyncio.ensure_future(produce(rm, request))
        tasks = 0
        await eventually(lambda: all(p.delayed_produces for p in ps), 5, interval=0.001)
        ps[0].update_follower(2, 3)
        ps[1].update_follower(2, 3)
        ps[3].update(PartitionRegistration((1, 2), (1,), 1, 0, 1))  # the ISR shrank: the HW moves to 3
        resp = await asyncio.wait_for(waiting, 5)
        assert tasks == 0
        answers = resp.topics[0].partitions
        assert [(a.error_code, a.base_offset) for a in answers[:2]] == [(0, 0), (0, 0)]
        assert answers[2].error_code == ErrorCode.REQUEST_TIMED_OUT and answers[2].error_message == (
            "The request timed out: t-2 did not replicate offset 2 to the ISR Set(1, 2) within 300 ms")
        assert answers[3].error_code == ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
        assert all(fut.done() for p in ps for *_, fut in p._hw_waiters)

        cancelled = asyncio.ensure_future(produce(rm, ProduceRequest(acks=-1, timeout_ms=30_000, topics=[
            ProduceTopicData("t", [ProducePartitionData(2, _batch(3))])])))
        await eventually(lambda: any(not fut.done() for *_, fut in ps[2]._hw_waiters), 5, interval=0.001)
        cancelled.cancel()
        await asyncio.wait([cancelled])
        assert all(fut.done() for *_, fut in ps[2]._hw_waiters)
        loop.set_task_factory(None)
        await store.close()
    run(go())


def test_a_corrupted_log_answers_kafka_storage_error_for_its_partition(tmp_path):
    """A read that fails RocksDB's checksum fails the log directory (LogStore.check): a fetch
    answers KAFKA_STORAGE_ERROR for that partition and a produce to it too, as Kafka answers a
    KafkaStorageException, and the other partitions of the request are answered as usual.
    Before, the StorageFailure escaped the request: the Kafka listener closed the connection
    and gRPC failed the whole call."""
    from pathlib import Path

    from brokerd.produce import produce
    from brokerd.requests import ProducePartitionData, ProduceRequest, ProduceTopicData

    tid = uuid.uuid4()

    async def write():
        store = LogStore(str(tmp_path))
        plog = PartitionLog(store, tid, 0)
        for _ in range(8):  # 8 KB batches: over min_blob_size, so in a blob file
            await plog.append_as_leader(_batch(4, 2000), 0)
        plog.set_high_watermark(plog.log_end_offset)
        plog.checkpoint()
        store.db.flush(True)
        await store.close()
        return store.path
    blob = max(Path(run(write())).glob("*.blob"), key=lambda f: f.stat().st_size)
    data = bytearray(blob.read_bytes())
    # a byte of a record's value halfway through the blob file, where a fetch's read meets it
    # (it reads values without RocksDB's checksums, and not a blob record's own header or key)
    data[data.find(b"x" * 64, len(data) // 2) + 32] ^= 0x55
    blob.write_bytes(bytes(data))

    async def go():
        store = LogStore(str(tmp_path))
        ps = [Partition(1, "t", tid, i, PartitionLog(store, tid, i), LogConfig()) for i in range(2)]
        for p in ps:
            p.update(PartitionRegistration((1,), (1,), 1, 0, 0))
        resp = await fetch(_Replicas(*ps), FetchRequest(replica_id=-1, topics=[FetchTopic(
            name="t", partitions=[FetchPartition(partition=i, fetch_offset=0) for i in range(2)])]))
        bad, empty = resp.topics[0].partitions
        assert bad.error_code == ErrorCode.KAFKA_STORAGE_ERROR and "Corruption" in bad.error_message
        assert not bad.frames and bad.high_watermark == -1
        assert empty.error_code == 0 and empty.high_watermark == 0
        # the directory has failed: writes to any of its partitions are refused, per partition
        resp = await produce(_Leaders(*ps), ProduceRequest(acks=1, timeout_ms=1000, topics=[ProduceTopicData(
            "t", [ProducePartitionData(i, _batch(1)) for i in range(2)])]))
        assert [a.error_code for a in resp.topics[0].partitions] == [ErrorCode.KAFKA_STORAGE_ERROR] * 2
        await store.close()
    run(go())


def test_records_round_trip_in_kafkas_encoding():
    """What the producer encodes, a reader decodes, and the bytes are Kafka's DefaultRecord
    encoding (checked against kafka-python's own reader of Kafka's batches)."""
    from hypothesis import given, settings, strategies as st
    from kafka.record.default_records import DefaultRecordBatch

    from clients.records import build_batch, decode_records, encode_records
    from brokerd.kafka.batches import to_wire
    blob = st.one_of(st.none(), st.binary(max_size=300))
    entry = st.tuples(blob, blob, st.integers(-(1 << 40), 1 << 40),
                      st.lists(st.tuples(st.text(max_size=5), blob), max_size=2))

    @settings(max_examples=200, deadline=None)
    @given(st.lists(entry, min_size=1, max_size=40))
    def check(entries):
        base = entries[0][2]
        decoded = decode_records(encode_records(entries, base), len(entries), "t-0")
        assert [(r.key, r.value, base + r.timestamp_delta, list(r.headers)) for r in decoded] == \
            [(k, v, ts, [(hk, hv) for hk, hv in hs]) for k, v, ts, hs in entries]
        batch = build_batch(entries)
        batch.base_offset = 7
        assert [(r.offset, r.key, r.value, r.timestamp, list(r.headers)) for r in records_of(batch, "t", 0)] == \
            [(7 + i, k, v, ts, [(hk, hv) for hk, hv in hs]) for i, (k, v, ts, hs) in enumerate(entries)]
        theirs = DefaultRecordBatch(to_wire(batch))
        assert theirs.validate_crc()
        assert [(r.offset, r.key, r.value, r.timestamp, [(hk, hv) for hk, hv in r.headers]) for r in theirs] == \
            [(7 + i, k, v, ts, [(hk, hv) for hk, hv in hs]) for i, (k, v, ts, hs) in enumerate(entries)]
    check()


def test_garbled_records_are_corrupt_not_a_crash():
    from clients.records import decode_records, encode_records
    good = encode_records([(b"k", b"v" * 100, 5, [("h", b"x")]), (None, None, 6, [])], 5)
    for bad in (good[:-1], good + b"\x00", good[:10], b"\xff" * 12, b"\x02\x00\x00\x00\x7f"):
        with pytest.raises(KafkaError) as e:
            decode_records(bad, 2, "t-0")
        assert e.value.code == ErrorCode.CORRUPT_MESSAGE
    with pytest.raises(KafkaError):
        decode_records(good, 3, "t-0")
    batch = build_batch([(b"k", b"v" * 100, 5, [("h", b"x")]), (None, None, 6, [])])
    for bad, count in [(b, 2) for b in (good[:-1], good + b"\x00", good[:10], b"\xff" * 12, b"\x02\x00\x00\x00\x7f")] + \
            [(good, 3)]:
        batch.records, batch.record_count = bad, count
        with pytest.raises(KafkaError) as e:
            list(records_of(batch, "t", 0))
        assert e.value.code == ErrorCode.CORRUPT_MESSAGE and "t-0 at offset 0" in str(e.value)


def test_the_producer_encodes_each_record_as_it_is_appended():
    """Issue 31 (our client's produce): a batch keeps no object per record; each record is
    encoded into the batch's buffer when appended (Kafka's MemoryRecordsBuilder), the same
    bytes as Kafka's DefaultRecord, and closing the batch is one copy and one CRC, with an
    idempotent producer's fields stamped in."""
    from clients.accumulator import RecordAccumulator
    from clients.records import encode_record, set_producer

    async def go():
        acc = RecordAccumulator(1 << 20, 5, 1 << 20, 100)
        sent = [(b"k", b"v" * 300, 1_000, (("h", b"1"), ("n", None))), (None, None, 990, ()), (None, b"", 70_000, ())]
        futures = [acc.append("t", 0, k, v, ts, hs, 50, False)[0] for k, v, ts, hs in sent]
        batch = futures[0].batch
        assert all(f.batch is batch for f in futures) and [f.index for f in futures] == [0, 1, 2]
        assert bytes(batch.records.buf) == b"".join(encode_record(i, ts - 1_000, k, v, hs)
                                                     for i, (k, v, ts, hs) in enumerate(sent))
        assert [f.timestamp for f in futures] == [1_000, 990, 70_000]
        batch.set_producer(7, 2, 40, transactional=True)
        expected = build_batch(sent)
        set_producer(expected, 7, 2, 40, transactional=True)
        assert batch.encoded() == expected and batch.closed and batch.record_count == 3
        assert acc.append("t", 0, b"late", b"x", 1_000, (), 50, True) == (None, False)  # closed: a new batch
        with pytest.raises(AttributeError):  # a header key that is not a str: the batch is left as it was
            acc.append("u", 0, None, b"x", 1_000, ((1, b"x"),), 50, False)
        assert not acc.batches.get(("u", 0)) and acc.incomplete == {batch} and acc.used == 150
    asyncio.run(go())


def test_the_consumer_decodes_a_batch_in_one_pass(monkeypatch):
    """Issue 31 (our client's consume): a fetched batch is decoded straight into
    ConsumerRecords, one pass with its varints inline, no intermediate Record per record;
    from the fetch offset on and below the high watermark."""
    import clients.records as records_mod

    def per_record(*args):
        raise AssertionError("a Record per record")
    monkeypatch.setattr(records_mod, "decode_records", per_record)
    sent = [(b"k%d" % i if i % 3 else None, None if i == 4 else b"v" * (i * 50), 5_000 + i * 10_000,
             (("h", b"%d" % i),) if i % 2 else ()) for i in range(10)]
    b = build_batch(sent)
    b.base_offset, b.partition_leader_epoch = 100, 3
    got = list(records_of(b, "t", 2, from_offset=102, stop=107))
    assert got == [ConsumerRecord("t", 2, 100 + i, ts, k, v, tuple(hs), 3)
                   for i, (k, v, ts, hs) in enumerate(sent) if 102 <= 100 + i < 107]
    assert [r.offset for r in records_of(b, "t", 2)] == list(range(100, 110))
    assert list(records_of(b, "t", 2, stop=-1)) == [] and len(list(records_of(b, "t", 2, stop=110))) == 10



def test_the_leader_steps_over_records_by_length_decoding_two(monkeypatch):
    """Issue 31: a produced batch is checked from its header, its CRC and a walk over the
    records' lengths (Kafka's declared-size check); only the first and the last record are
    decoded (their offset deltas), unless a compacted topic needs every key."""
    import clients.records as records_mod
    from clients.records import batch_crc, encode_record
    decoded: list[int] = []
    real = records_mod.decode_records

    def counting(data, count, where):
        decoded.append(count)
        return real(data, count, where)
    monkeypatch.setattr(records_mod, "decode_records", counting)
    b = build_batch([(None, b"v" * (i % 300), 7, ()) for i in range(1000)])
    assert validate_batch(b, "t-0", 1 << 22) == b.ByteSize()
    assert sum(decoded) <= 2
    big = build_batch([(b"k", b"x" * 70000, 7, ()), (b"k", b"y", 7, ())])  # a three-byte length
    assert validate_batch(big, "t-0", 1 << 22) == big.ByteSize()

    def with_records(records: bytes, count: int) -> pb.RecordBatch:
        out = build_batch([(b"k", b"v", 7, ())] * count)
        out.records = records
        out.crc = batch_crc(out)  # a broken producer computes a CRC over what it got wrong
        return out
    good = b"".join(encode_record(i, 0, b"k", b"v" * 10) for i in range(3))
    zero_length = b"\x00" + good
    for records, count in ((good + b"\x00", 3), (good[:-1], 3), (good, 4), (good, 2), (zero_length, 4),
                           (b"\x01" + good, 4)):
        with pytest.raises(KafkaError) as e:
            validate_batch(with_records(records, count), "t-0", 1 << 22)
        assert e.value.code == ErrorCode.CORRUPT_MESSAGE, (records, count)
    skipping = b"".join(encode_record(d, 0, b"k", b"v") for d in (0, 1, 5))
    with pytest.raises(KafkaError) as e:
        validate_batch(with_records(skipping, 3), "t-0", 1 << 22)
    assert e.value.code == ErrorCode.INVALID_RECORD and "offset deltas 0..5" in e.value.message


def test_the_leader_reads_a_batchs_records_once_and_stores_them_as_protobuf_would(tmp_path):
    """Issue 31: the leader reads a produced batch's records out of its protobuf once (each
    read copies them) and checks and stores them from there: its size is protobuf's without
    encoding the batch (``batch_size``), its stored frame the serialized batch's byte for
    byte (``frame_parts``), for fields of every sign and width, and with no producer id, 0
    or another."""
    import random
    from clients.records import batch_size, frame, frame_parts
    rng = random.Random(890)
    for _ in range(300):
        b = pb.RecordBatch(records=bytes(rng.choice((0, 1, 127, 128, 16384, 70000))))
        for name, bits in (("base_offset", 64), ("partition_leader_epoch", 32), ("last_offset_delta", 32),
                           ("base_timestamp", 64), ("max_timestamp", 64), ("record_count", 32),
                           ("attributes", 32), ("producer_epoch", 32), ("base_sequence", 32)):
            setattr(b, name, rng.choice((0, 1, -1, 127, 128, 300, (1 << (bits - 1)) - 1, -(1 << (bits - 1)))))
        b.crc = rng.choice((0, 1, 128, 0xFFFFFFFF))
        if rng.random() < 0.7:
            b.producer_id = rng.choice((0, 1, 4242, -1, (1 << 63) - 1))
        records = b.records
        assert batch_size(b, len(records)) == b.ByteSize()
        assert b"".join(frame_parts(b, records)) == frame(b.SerializeToString())

    async def go():
        store = LogStore(str(tmp_path))
        plog = PartitionLog(store, uuid.uuid4(), 0)
        produced = build_batch([(b"k", b"v" * 300, 7, ())] * 100)
        produced.producer_id, produced.producer_epoch, produced.base_sequence = 9, 0, 0
        await plog.append_as_leader(produced, 3, produced.records)
        stored = plog.batch_at(0)
        assert stored == produced and stored.base_offset == 0 and stored.partition_leader_epoch == 3
        frames, _ = plog.read(0, 1 << 20, plog.log_end_offset)
        assert bytes(frames[0]) == frame(produced.SerializeToString())
        await store.close()
    run(go())


def _walk_lines(data: bytes, count: int) -> int:
    """Python lines the leader's walk over record lengths runs for ``data``."""
    import sys
    from clients import records as records_mod
    lines = 0

    def trace(frame, event, arg):
        nonlocal lines
        if frame.f_code.co_filename != records_mod.__file__:
            return None
        if event == "line":
            lines += 1
        return trace
    sys.settrace(trace)
    try:
        records_mod._record_starts(data, count, "t-0")
    finally:
        sys.settrace(None)
    return lines


def test_the_walk_over_record_lengths_steps_over_runs_of_one_size():
    """Issue 31: records of one size (one value size, offset and timestamp deltas of one
    varint width) are stepped over a run at a time, by slices compared in C, not one Python
    step per record (it was about 40 % of a 2 x 770-record Produce request in one process)."""
    from clients.records import encode_records
    small, large = ([(None, b"v" * 256, 7, ())] * n for n in (100, 2000))
    assert _walk_lines(encode_records(large, 7), 2000) < 2 * _walk_lines(encode_records(small, 7), 100) < 400


def test_the_walk_over_record_lengths_judges_as_one_step_per_record():
    """The run-at-a-time walk answers what stepping record by record answers (where the last
    record starts, or CORRUPT_MESSAGE), for runs of every length and width, garbled bytes,
    cut or padded record sets and wrong counts."""
    import random
    from clients.records import _read_zz, _record_starts, encode_record

    def one_by_one(data: bytes, count: int) -> int | None:
        pos = start = 0
        try:
            for _ in range(count):
                start = pos
                length, pos = _read_zz(data, pos)
                pos += length
                if length < 1 or pos > len(data):
                    return None
        except (ValueError, IndexError):
            return None
        return start if pos == len(data) else None

    rng = random.Random(31)
    for _ in range(600):
        count = rng.randint(1, 200)
        sizes: list[int] = []
        while len(sizes) < count:
            sizes += [rng.choice((0, 1, 50, 59, 60, 61, 120, 256, 8180, 8200))] * rng.randint(1, 80)
        data = bytearray(b"".join(encode_record(i, rng.randint(0, 90), None, b"v" * s)
                                  for i, s in enumerate(sizes[:count])))
        garble = rng.random()
        if garble < 0.2:
            for _ in range(rng.randint(1, 3)):
                data[rng.randrange(len(data))] = rng.randrange(256)
        elif garble < 0.3:
            del data[rng.randrange(len(data)):]
        elif garble < 0.4:
            data += bytes(rng.randint(1, 3))
        if rng.random() < 0.1:
            count = max(1, count + rng.choice((-1, 1)))
        expected = one_by_one(bytes(data), count)
        if expected is None:
            with pytest.raises(KafkaError) as e:
                _record_starts(bytes(data), count, "t-0")
            assert e.value.code == ErrorCode.CORRUPT_MESSAGE
        else:
            assert _record_starts(bytes(data), count, "t-0") == expected



def test_log_append_time_stamps_the_batch_and_every_record_reads_it():
    """Issue 27 item 7: the leader's stamp (Kafka's setMaxTimestamp(LOG_APPEND_TIME, now)) sets
    the max timestamp and attribute bit 3 under a new CRC; readers give every record that time."""
    from brokerd.kafka.batches import to_wire
    from clients.records import LOG_APPEND_TIME_FLAG, check_crc, set_log_append_time
    from kafka.record.default_records import DefaultRecordBatch
    b = _batch(3, ts=1000)
    set_log_append_time(b, 5000)
    check_crc(b)
    assert b.attributes & LOG_APPEND_TIME_FLAG and b.max_timestamp == 5000 and b.base_timestamp == 1000
    assert [r.timestamp for r in records_of(b, "t", 0)] == [5000] * 3
    theirs = DefaultRecordBatch(to_wire(b))  # kafka-python's reader of Kafka's batches agrees
    assert theirs.validate_crc() and theirs.timestamp_type == 1 and [r.timestamp for r in theirs] == [5000] * 3


def test_a_follower_truncates_the_suffix_the_new_leader_never_had(tmp_path):
    """KIP-101: the old leader wrote offsets 5-8 in epoch 1 that nobody else got; the new
    leader (epoch 2) has offsets 0-4 of epoch 0 only. Asked where epoch 1 ends, it answers
    (0, 5): the old leader truncates to 5, then copies the new leader's batches."""
    from brokerd.replica_fetcher import FetchState, ReplicaFetcher

    async def go():
        store = LogStore(str(tmp_path))
        tid = uuid.uuid4()
        new_leader = PartitionLog(store, tid, 0)
        old_leader = PartitionLog(store, tid, 1)
        for log in (new_leader, old_leader):
            for _ in range(5):
                await log.append_as_leader(_batch(1), 0)
        for _ in range(4):
            await old_leader.append_as_leader(_batch(1), 1)
        new_leader.assign_epoch(2, new_leader.log_end_offset)
        answer = new_leader.end_offset_for_epoch(old_leader.epochs.latest_epoch)
        assert answer == (0, 5)

        cfg = _broker_config()
        p = Partition(7, "t", tid, 1, old_leader, LogConfig())
        p.update(PartitionRegistration((7, 8), (8,), 8, 2, 3))
        fetcher = ReplicaFetcher(cfg, 8, "127.0.0.1:1", lambda: 1, lambda _: None)
        state = FetchState(p, p.leader_epoch)
        await fetcher._truncate_one(state, *answer)
        assert not state.truncating and old_leader.log_end_offset == 5 and old_leader.epochs.entries == [(0, 0)]
        # then it copies the new leader's log; a batch overlapping its log end is refused without
        # changing anything (a gap is not: compaction leaves gaps between batches)
        await new_leader.append_as_leader(_batch(2), 2)
        frames, _ = new_leader.read(5, 1 << 20, new_leader.log_end_offset)
        copied = [b for f in frames for b in batches(bytes(f))]
        overlap = pb.RecordBatch()
        overlap.CopyFrom(copied[0])
        overlap.base_offset = 4
        with pytest.raises(ValueError):
            await old_leader.append_as_follower([overlap])
        assert old_leader.log_end_offset == 5
        await old_leader.append_as_follower(copied)
        assert old_leader.log_end_offset == 7 and old_leader.epochs.entries == [(0, 0), (2, 5)]
        await fetcher.stop()
        await store.close()
    run(go())


def _broker_config() -> BrokerConfig:
    return BrokerConfig(7, "", "PLAINTEXT", (), {}, None, 2000, 30000, 500, 1, 1 << 20, 10 << 20, 100, 300000, 5000,
                        3600000, 1 << 20, 86_400_000, 600_000, True, 15_000, 50, 3, 6000, 1_800_000, 3000, 4096,
                        FlushPolicy(), LogConfig())


def test_consumer_hands_out_buffered_records_from_its_position_fairly():
    from collections import deque

    from clients import Consumer
    from clients.records import ConsumerRecord
    c = Consumer("127.0.0.1:1", max_poll_records=7)
    a, b = ("t", 0), ("t", 1)
    c.positions = {a: 3, b: 0}  # a fetch of partition 0 started inside a batch
    c._buffer = {a: deque(ConsumerRecord("t", 0, o, 0, None, b"") for o in range(20)),
                 b: deque(ConsumerRecord("t", 1, o, 0, None, b"") for o in range(4))}
    polls = [c._drain() for _ in range(6)]
    assert all(len(p) <= 7 for p in polls)
    assert any(r.partition == 1 for r in polls[0] + polls[1])  # partition 1 is not starved
    got = [(r.partition, r.offset) for p in polls for r in p]
    assert [o for p, o in got if p == 0] == list(range(3, 20))
    assert [o for p, o in got if p == 1] == list(range(4))
    assert c.positions == {a: 20, b: 4}


def test_a_retried_batch_takes_no_more_records_so_every_acknowledged_record_is_written(monkeypatch):
    """A batch that failed goes back to its queue already encoded; a record sent while it backs
    off must go into a new batch, not into the retried one (whose bytes no longer change), or it is
    acknowledged without ever being written (the demo lost 16 records of a killed leader's partition)."""
    from clients import producer as client
    from tests.fakes import fake_broker

    written: list[bytes] = []
    calls = 0

    class FakeBroker:
        async def InitProducerId(self, req: pb.InitProducerIdRequest, timeout: float) -> pb.InitProducerIdResponse:
            return pb.InitProducerIdResponse(producer_id=1, producer_epoch=0)

        async def Produce(self, req: pb.ProduceRequest, timeout: float) -> pb.ProduceResponse:
            nonlocal calls
            calls += 1
            resp = pb.ProduceResponse()
            for t in req.topics:
                rt = resp.topics.add(name=t.name)
                for p in t.partitions:
                    if calls == 1:  # the leader is gone: retriable
                        rt.partitions.add(partition=p.partition, error_code=ErrorCode.NOT_LEADER_OR_FOLLOWER.value)
                    else:
                        rt.partitions.add(partition=p.partition, base_offset=len(written))
                        written.extend(r.value for r in records_of(p.batch, t.name, p.partition))
            return resp

    fake_broker(monkeypatch, FakeBroker())

    async def go() -> None:
        p = await client.Producer("fake:1", acks="all", retry_backoff_ms=300).start()
        futures = [await p.send("t", b"first", key=b"k")]
        await eventually(lambda: calls == 1 and p.acc.has_queued(), 5, interval=0.01,
                         what="the first attempt failed and the batch is backing off")
        futures += [await p.send("t", f"later-{i}".encode(), key=b"k") for i in range(3)]
        mds = [await f for f in futures]
        await p.close()
        for md, value in zip(mds, [b"first", b"later-0", b"later-1", b"later-2"], strict=True):
            assert written[md.offset] == value  # acknowledged at an offset that holds it
        assert written == [b"first", b"later-0", b"later-1", b"later-2"]
    run(go())


def test_a_leader_learns_a_completed_reassignment_its_own_alter_partition_answered_first(tmp_path):
    """The AlterPartition that brings the last target into the ISR also completes the move; its
    answer (ISR and partition epoch only) may reach the leader before the metadata does, and the
    registration of the same epoch must still bring the new replicas (or the leader keeps the
    removed follower and throttles a replica that is in sync)."""
    async def go():
        store = LogStore(str(tmp_path))
        p = Partition(2, "t", uuid.uuid4(), 0, PartitionLog(store, uuid.uuid4(), 0), LogConfig())
        p.update(PartitionRegistration((2, 3, 4, 1), (2, 3, 1), 2, 0, 5, adding=(4,), removing=(1,)))
        assert p.is_leader and set(p.followers) == {1, 3, 4} and p.adding == (4,)
        p.apply_isr(0, 6, (2, 3, 4))  # the answer first
        p.update(PartitionRegistration((2, 3, 4), (2, 3, 4), 2, 0, 6))  # then the metadata
        assert p.replicas == (2, 3, 4) and p.adding == () and set(p.followers) == {3, 4}
        await store.close()
    run(go())


async def _moving_partition(tmp_path) -> tuple[LogStore, Partition]:
    """Partition first-0 led here (broker 1), replica 3 being added by a reassignment, 4 batches."""
    store = LogStore(str(tmp_path))
    p = Partition(1, "first", uuid.uuid4(), 0, PartitionLog(store, uuid.uuid4(), 0), LogConfig())
    p.update(PartitionRegistration((1, 2, 3), (1, 2), 1, 0, 0, adding=(3,)))
    for _ in range(4):
        await p.append_as_leader(_batch(5, size=500), 0)
    return store, p


def test_the_leader_throttles_only_replicas_being_added(tmp_path):
    """leader.replication.throttled.rate: a replica a reassignment is adding gets nothing while
    the leader is over its rate; an in-sync follower is served all along."""
    async def go():
        store, p = await _moving_partition(tmp_path)
        now = [0.0]
        quota = ReplicationQuota(clock=lambda: now[0])
        quota.set_rate(1000)  # bytes/s: a second's worth is in the bucket to start with
        rm = _OneReplica(p, quota)
        first = (await _fetch(rm, 3, 0)).topics[0].partitions[0].records
        assert len(first) > 1000  # at least one batch, then the bucket is in debt
        assert (await _fetch(rm, 3, 0)).topics[0].partitions[0].records == b""
        assert len((await _fetch(rm, 2, 0)).topics[0].partitions[0].records) == len(first)
        now[0] += len(first) / 1000  # the debt is paid off
        assert (await _fetch(rm, 3, 0)).topics[0].partitions[0].records == first
        await store.close()
    run(go())


def test_a_throttled_long_poll_is_answered_once_the_bucket_refills(tmp_path):
    """A replica being added long-polls a partition no one writes to: once the leader's bucket
    has refilled (about 1 s here) the fetch is answered with data, not empty at the end of its
    5 s wait (which made a 1 GiB move at 10 MiB/s take 2.5 times as long as the throttle allows,
    bench.reassign)."""
    async def go():
        store, p = await _moving_partition(tmp_path)
        quota = ReplicationQuota()
        quota.set_rate(5000)
        rm = _OneReplica(p, quota)
        first = (await _fetch(rm, 3, 0)).topics[0].partitions[0].records
        assert len(first) > 5000 and quota.wait_seconds() > 0  # in debt: the next read waits
        again = (await _fetch(rm, 3, 0, wait=5000)).topics[0].partitions[0].records
        assert again == first
        await store.close()
    run(go())


def test_a_raised_follower_throttle_applies_at_the_next_fetch(tmp_path):
    """follower.replication.throttled.rate raised mid-move: the replica being added, held back
    for what the old rate allowed (262 s after a 256 KiB fetch at 1,000 B/s), is fetched again at
    once, as Kafka applies a new throttle at the next fetch (tests/test_reassignment's move once
    stalled so). The leader here is a closed port: the fetcher's warning shows that it tried."""
    from brokerd.replica_fetcher import ReplicaFetcherManager

    async def go():
        store = LogStore(str(tmp_path))
        p = Partition(3, "first", uuid.uuid4(), 0, PartitionLog(store, uuid.uuid4(), 0), LogConfig())
        p.update(PartitionRegistration((1, 2, 3), (1, 2), 1, 0, 0, adding=(3,)))
        assert p.being_added
        manager = ReplicaFetcherManager(_broker_config(), lambda: 1, lambda _: None)
        manager.set_rate(1000)
        manager.quota.record(262_144 + 1000)
        manager.follow(p, 1, "127.0.0.1:1")
        fetcher = manager.fetchers[(1, "127.0.0.1:1")]
        state = fetcher.states[p]
        state.truncating = False  # (before the fetcher first runs) it would ask the closed port first
        await eventually(lambda: state.delayed_until > time.monotonic() + 200)
        manager.set_rate(200_000)
        await eventually(lambda: fetcher._warned_at is not None, timeout=5)
        await manager.stop()
        await store.close()
    run(go())


# -- task hygiene: what a component starts, it ends on stop (issue 26) -------------------------------

def _others() -> list[asyncio.Task]:
    return [t for t in asyncio.all_tasks() if t is not asyncio.current_task() and not t.done()]


def test_the_group_coordinator_ends_its_background_writes_on_stop():
    """The last member leaving persists the empty group in the background; stop() ends that
    write instead of leaving it behind."""
    from brokerd.group_coordinator import Group, GroupCoordinator
    from clients.topics import OFFSETS_TOPIC

    async def go() -> None:
        writing = asyncio.Event()

        class Stuck:
            async def append_as_leader(self, batch, acks):
                writing.set()
                await asyncio.Event().wait()  # a write that never completes

        class Replicas:
            by_name = {(OFFSETS_TOPIC, 0): Stuck()}

        coordinator = GroupCoordinator(Replicas(), None, None)  # type: ignore[arg-type]
        coordinator._emptied(Group("g", 0))
        await asyncio.wait_for(writing.wait(), 5)
        await coordinator.stop()
        assert _others() == []
    run(go())


def test_the_group_coordinator_sleeps_while_no_group_has_members():
    """With no member anywhere there is no session to expire nor rebalance to end: the sweep
    waits with no timer (an idle broker woke ten times a second for it, docs/brokers.md "The
    brokers' idle CPU"). A member's arrival (a JoinGroup, or a load that brings members) starts
    it again, and it still removes a member whose session passed; a partition that moved away
    is dropped when the metadata says so, sweep or not."""
    from brokerd.group_coordinator import Group, GroupCoordinator, Member
    from clients.topics import OFFSETS_TOPIC

    async def go() -> None:
        loop = asyncio.get_running_loop()

        class Led:
            is_leader, leader_epoch = True, 5

            async def append_as_leader(self, batch, acks):
                raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER)  # the emptied group's write: not needed here

        class Replicas:
            by_name = {(OFFSETS_TOPIC, 0): Led()}

        coordinator = GroupCoordinator(Replicas(), None, None)  # type: ignore[arg-type]
        coordinator.start()
        for _ in range(3):
            await asyncio.sleep(0)
        # asyncio's pending timers (a private list; the test's loop runs nothing else)
        assert [h for h in loop._scheduled if not h.cancelled()] == []  # type: ignore[attr-defined]
        g = Group("g", 0)
        g.members["m"] = Member("m", None, "c", 6000, 6000, [("range", b"")], last_heartbeat=time.monotonic() - 7)
        coordinator.groups["g"] = g
        coordinator._partitions.loaded[0] = 5
        coordinator._members_arrived.set()  # what join_group and a load do
        await eventually(lambda: not g.members, timeout=5)  # its session (6 s) had passed
        assert "g" in coordinator.groups
        Led.is_leader = False  # the partition moved away: the metadata drops its groups
        coordinator.leaderships_changed()
        assert coordinator.groups == {} and coordinator._partitions.loaded == {}
        await coordinator.stop()
    run(go())


def test_a_stopping_kafka_listener_ends_every_request_in_flight():
    """Pipelined requests a stopping listener will never answer are cancelled, not left
    running: the one being answered and those queued behind it."""
    import socket

    from brokerd.kafka.codec import build, frame_request, request_schema
    from brokerd.kafka.listener import KafkaListener

    async def go() -> None:
        started, cancelled = [], []

        class Apis:
            def session(self, writer):
                return None

            async def handle(self, header, request, session):
                started.append(header.correlation_id)
                try:
                    await asyncio.Event().wait()
                except asyncio.CancelledError:
                    cancelled.append(header.correlation_id)
                    raise

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        listener = KafkaListener("KAFKA", "127.0.0.1", port, Apis(), 1 << 20)  # type: ignore[arg-type]
        await listener.bind()
        await listener.start()
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        for correlation in (1, 2, 3):
            writer.write(frame_request(18, 0, correlation, "t", build(request_schema(18, 0), {})))
        await writer.drain()
        await eventually(lambda: len(started) == 3, 5, what="three requests in flight")
        await listener.stop()
        assert sorted(cancelled) == [1, 2, 3] and _others() == []
        writer.close()
    run(go())


class _GatedApis:
    """A stub KafkaApis whose answer to each request (ApiVersions v0, by correlation id) waits
    for the test to open its gate; a gate given an exception raises it instead."""

    def __init__(self) -> None:
        self.gates: dict[int, asyncio.Future] = {}

    def session(self, writer):
        return None

    async def handle(self, header, request, session):
        import datetime

        from brokerd.kafka.data_path_codec import EncodedResponse
        gate = self.gates[header.correlation_id] = asyncio.get_running_loop().create_future()
        await gate
        return EncodedResponse([b"answer"], datetime.timedelta(0))


async def _gated_listener(apis: _GatedApis, security=None):
    """A listener over ``apis`` (``security``: a ListenerSecurity, None: PLAINTEXT) and a raw
    non-blocking client socket connected to it."""
    import socket

    from brokerd.kafka.listener import KafkaListener
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    listener = KafkaListener("KAFKA", "127.0.0.1", port, apis, 1 << 20, security=security)  # type: ignore[arg-type]
    await listener.bind()
    await listener.start()
    client = socket.create_connection(("127.0.0.1", port))
    client.setblocking(False)
    return listener, client


async def _send_requests(client, *correlations: int) -> None:
    from brokerd.kafka.codec import build, frame_request, request_schema
    data = b"".join(frame_request(18, 0, c, "t", build(request_schema(18, 0), {})) for c in correlations)
    await asyncio.get_running_loop().sock_sendall(client, data)


async def _answers(client, count: int) -> list[int]:
    """The correlation ids of the next ``count`` answers on ``client``."""
    return [correlation for correlation, _ in await _answer_frames(client, count)]


async def _answer_frames(client, count: int) -> list[tuple[int, bytes]]:
    """The next ``count`` answers on ``client``: (correlation id, the frame without its size)."""
    loop, got = asyncio.get_running_loop(), b""
    seen: list[tuple[int, bytes]] = []
    while len(seen) < count:
        chunk = await asyncio.wait_for(loop.sock_recv(client, 1 << 16), 5)
        assert chunk, f"the listener closed the connection after {[c for c, _ in seen]}"
        got += chunk
        while len(got) >= 4 and len(got) >= 4 + (size := int.from_bytes(got[:4], "big")):
            seen.append((int.from_bytes(got[4:8], "big"), got[4:4 + size]))
            got = got[4 + size:]
    assert got == b""
    return seen


def _api_versions_error(frame: bytes) -> int:
    """The error code of an ApiVersions v0 answer (``_GatedApis`` answers b"answer" instead)."""
    from brokerd.kafka.codec import read_response
    assert frame[4:] != b"answer", "a handler's answer, not an error answer"
    return int(read_response(frame, 18, 0)[1].error_code)


def _nothing_to_read(client) -> bool:
    """Whether nothing has arrived on ``client`` (an answer written on loopback has arrived)."""
    import socket
    try:
        client.recv(1, socket.MSG_PEEK)
    except BlockingIOError:
        return True
    return False


def test_a_kafka_listener_answers_in_order_what_its_handlers_finish_out_of_order(caplog):
    """Kafka answers a connection's requests in the order they came: an answer ready early
    waits for those before it, then goes out with them (in the same loop turn); a handler that
    crashes is answered UNKNOWN_SERVER_ERROR in its turn, with one line, and the connection
    goes on: the answers behind it are sent (Kafka's KafkaApis.handleError). Before the error
    answers (error_answers) the connection was closed after 4 and 6 never sent: this failed."""
    import logging

    from brokerd.kafka.framing import FrameConnection

    async def go() -> None:
        apis = _GatedApis()
        listener, client = await _gated_listener(apis)
        loop = asyncio.get_running_loop()
        turns, written = [0], []
        run_once, write_parts = loop._run_once, FrameConnection.write_parts  # type: ignore[attr-defined]

        def counted():
            turns[0] += 1
            run_once()

        def recorded(self, parts):
            written.append((turns[0], int.from_bytes(bytes(parts[0])[4:8], "big")))
            write_parts(self, parts)
        loop._run_once = counted  # type: ignore[attr-defined]
        FrameConnection.write_parts = recorded  # type: ignore[method-assign]
        try:
            await _send_requests(client, 1, 2, 3)
            await eventually(lambda: len(apis.gates) == 3, 5, what="three requests in flight")
            apis.gates[3].set_result(None)
            apis.gates[2].set_result(None)
            for _ in range(5):
                await asyncio.sleep(0)
            assert _nothing_to_read(client) and written == []  # 3 and 2 wait for 1
            apis.gates[1].set_result(None)
            assert await _answers(client, 3) == [1, 2, 3]
            assert [c for _, c in written] == [1, 2, 3] and len({t for t, _ in written}) == 1  # one turn
            with caplog.at_level(logging.INFO, logger="brokerd.kafka"):
                await _send_requests(client, 4, 5, 6)
                await eventually(lambda: len(apis.gates) == 6, 5, what="three more in flight")
                apis.gates[6].set_result(None)
                apis.gates[5].set_exception(RuntimeError("boom"))
                for _ in range(5):
                    await asyncio.sleep(0)
                assert _nothing_to_read(client)
                apis.gates[4].set_result(None)
                frames = await _answer_frames(client, 3)
                assert [c for c, _ in frames] == [4, 5, 6]
                assert _api_versions_error(frames[1][1]) == ErrorCode.UNKNOWN_SERVER_ERROR
                await _send_requests(client, 7)  # the same connection serves the next request
                await eventually(lambda: 7 in apis.gates, 5, what="the next request in flight")
                apis.gates[7].set_result(None)
                assert await _answers(client, 1) == [7]
            lines = [r.getMessage() for r in caplog.records if r.name == "brokerd.kafka"]
            assert len(lines) == 1 and "\n" not in lines[0], lines
            assert lines[0].startswith("answered UNKNOWN_SERVER_ERROR to api key 18 v0 from 127.0.0.1:"), lines
            assert lines[0].endswith("its handler failed: RuntimeError: boom"), lines
        finally:
            del loop._run_once  # type: ignore[attr-defined]
            FrameConnection.write_parts = write_parts  # type: ignore[method-assign]
            client.close()
            await listener.stop()
        assert _others() == []
    run(go())


def test_a_handler_cancelled_from_inside_is_answered_unknown_server_error_with_one_line(caplog):
    """A handler that raises CancelledError while its connection is not being cancelled (it
    awaited a future that someone else cancelled) fails as a handler that raises any error
    does: it is answered UNKNOWN_SERVER_ERROR after the answers before it, with one line that
    says so, no traceback, and its connection serves the next request; the requests of other
    connections are answered, and the listener keeps accepting connections and serving them.
    (Before error_answers its connection was closed after 1: this failed.)"""
    import logging
    import socket

    async def go() -> None:
        apis = _GatedApis()
        listener, first = await _gated_listener(apis)
        second = socket.create_connection(("127.0.0.1", listener.port))
        second.setblocking(False)
        try:
            await _send_requests(first, 1, 2)
            await eventually(lambda: len(apis.gates) == 2, 5, what="two requests in flight")
            await _send_requests(second, 3)
            await eventually(lambda: 3 in apis.gates, 5, what="the other connection's request in flight")
            apis.gates[2].cancel()  # its handler's await raises CancelledError; no one cancelled its task
            apis.gates[1].set_result(None)
            frames = await _answer_frames(first, 2)
            assert [c for c, _ in frames] == [1, 2]
            assert _api_versions_error(frames[1][1]) == ErrorCode.UNKNOWN_SERVER_ERROR
            await _send_requests(first, 5)
            await eventually(lambda: 5 in apis.gates, 5, what="the next request on the same connection")
            apis.gates[5].set_result(None)
            assert await _answers(first, 1) == [5]
            assert len(listener._connections) == 2  # neither connection was closed
            apis.gates[3].set_result(None)
            assert await _answers(second, 1) == [3]
            third = socket.create_connection(("127.0.0.1", listener.port))
            third.setblocking(False)
            try:
                await _send_requests(third, 4)
                await eventually(lambda: 4 in apis.gates, 5, what="a new connection's request in flight")
                apis.gates[4].set_result(None)
                assert await _answers(third, 1) == [4]
            finally:
                third.close()
        finally:
            first.close()
            second.close()
            await listener.stop()
        assert _others() == []
    with caplog.at_level(logging.INFO):
        run(go())
    lines = [r.getMessage() for r in caplog.records if r.name == "brokerd.kafka"]
    assert len(lines) == 1 and "\n" not in lines[0], lines
    assert lines[0].startswith("answered UNKNOWN_SERVER_ERROR to api key 18 v0 from 127.0.0.1:"), lines
    assert lines[0].endswith("its handler failed: CancelledError (cancelled inside its handler)"), lines
    assert not [r for r in caplog.records if r.exc_info or "Traceback" in r.getMessage()]
    assert not [r for r in caplog.records if r.name == "asyncio"], caplog.records


def test_a_handler_failing_with_a_kafka_error_is_answered_its_code_and_acks_0_still_closes(caplog):
    """A handler that raises a KafkaError is answered with that error's code (Kafka's
    Errors.forException of an ApiException), and the connection goes on; a Produce with
    acks=0 has no response to carry an error, so its failure closes the connection, as Kafka's
    ProduceRequest.getErrorResponse (null) has it closed. (Before error_answers the first
    connection was closed instead of answered: this failed.)"""
    import logging

    from brokerd.kafka.codec import build, frame_request, request_schema

    async def go() -> None:
        apis = _GatedApis()
        listener, client = await _gated_listener(apis)
        loop = asyncio.get_running_loop()
        try:
            await _send_requests(client, 1, 2)
            await eventually(lambda: len(apis.gates) == 2, 5, what="two requests in flight")
            apis.gates[1].set_exception(KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE, "no coordinator yet"))
            apis.gates[2].set_result(None)
            frames = await _answer_frames(client, 2)
            assert [c for c, _ in frames] == [1, 2]
            assert _api_versions_error(frames[0][1]) == ErrorCode.COORDINATOR_NOT_AVAILABLE
            produce = build(request_schema(0, 3), {"acks": 0, "timeout": 1000, "topic_data": [
                {"name": "t", "partition_data": [{"index": 0, "records": b""}]}]})
            await loop.sock_sendall(client, frame_request(0, 3, 3, "t", produce))
            await eventually(lambda: 3 in apis.gates, 5, what="the acks=0 produce in flight")
            apis.gates[3].set_exception(RuntimeError("boom"))
            assert await asyncio.wait_for(loop.sock_recv(client, 1 << 16), 5) == b""  # closed, nothing answered
        finally:
            client.close()
            await listener.stop()
        assert _others() == []
    with caplog.at_level(logging.INFO):
        run(go())
    lines = [r.getMessage() for r in caplog.records if r.name == "brokerd.kafka"]
    assert len(lines) == 2, lines
    assert lines[0].startswith("answered COORDINATOR_NOT_AVAILABLE to api key 18 v0"), lines
    assert "after an acks=0 produce failed: RuntimeError: boom" in lines[1], lines


def test_a_handler_failing_before_sasl_authentication_closes_the_connection(caplog):
    """Before a SASL client has authenticated Kafka's authenticator, not KafkaApis, answers its
    ApiVersions, and a failure there fails the authentication: the connection is closed with
    one line rather than answered."""
    import logging

    from clients.security import ListenerSecurity, SaslSettings

    async def go() -> None:
        apis = _GatedApis()
        listener, client = await _gated_listener(
            apis, ListenerSecurity("SASL_PLAINTEXT", sasl=SaslSettings(("PLAIN",), {})))
        loop = asyncio.get_running_loop()
        try:
            await _send_requests(client, 1)
            await eventually(lambda: 1 in apis.gates, 5, what="ApiVersions before authentication in flight")
            apis.gates[1].set_exception(RuntimeError("boom"))
            assert await asyncio.wait_for(loop.sock_recv(client, 1 << 16), 5) == b""  # closed, not answered
        finally:
            client.close()
            await listener.stop()
    with caplog.at_level(logging.INFO, logger="brokerd.kafka"):
        run(go())
    lines = [r.getMessage() for r in caplog.records if r.name == "brokerd.kafka"]
    assert len(lines) == 1 and lines[0].startswith("closing the Kafka connection from 127.0.0.1:"), lines
    assert lines[0].endswith("api key 18 v0 failed: RuntimeError: boom"), lines


def test_a_sasl_step_failing_unexpectedly_closes_its_connection_with_one_line(caplog, monkeypatch):
    """The listener's reading task answers SaslHandshake and SaslAuthenticate itself (Kafka's
    SaslServerAuthenticator): an unexpected failure there closes that connection with one
    line, as a failed authentication does, and the listener serves the next connection. (It
    escaped the reading task before: no line of ours, only asyncio's about a task.)"""
    import logging
    import socket

    from brokerd.kafka.codec import build, frame_request, request_schema
    from brokerd.kafka.sasl import SaslAuthenticator
    from clients.security import ListenerSecurity, SaslSettings

    def broken(self, token: bytes):
        raise RuntimeError("boom")

    monkeypatch.setattr(SaslAuthenticator, "authenticate", broken)

    async def go() -> None:
        listener, client = await _gated_listener(
            _GatedApis(), ListenerSecurity("SASL_PLAINTEXT", sasl=SaslSettings(("PLAIN",), {})))
        loop = asyncio.get_running_loop()
        try:
            for connection in range(2):  # the second connection: the listener goes on
                if connection:
                    client = socket.create_connection(("127.0.0.1", listener.port))
                    client.setblocking(False)
                try:
                    await loop.sock_sendall(client, frame_request(17, 1, 1, "t", build(request_schema(17, 1),
                                                                                       {"mechanism": "PLAIN"})))
                    assert await _answers(client, 1) == [1]
                    await loop.sock_sendall(client, frame_request(36, 1, 2, "t", build(request_schema(36, 1),
                                                                                       {"auth_bytes": b"\0u\0p"})))
                    assert await asyncio.wait_for(loop.sock_recv(client, 1 << 16), 5) == b""  # closed
                finally:
                    client.close()
            await eventually(lambda: not listener._connections, 5, what="both connections' tasks ended")
        finally:
            await listener.stop()
    with caplog.at_level(logging.INFO):
        run(go())
    lines = [r.getMessage() for r in caplog.records if r.name == "brokerd.kafka"]
    assert len(lines) == 2, lines
    for line in lines:
        assert line.startswith("closing the Kafka connection from 127.0.0.1:"), line
        assert line.endswith("api key 36 v1 failed: RuntimeError: boom"), line
    assert not [r for r in caplog.records if r.exc_info or "Traceback" in r.getMessage()]
    assert not [r for r in caplog.records if r.name == "asyncio"], caplog.records


def test_a_kafka_listener_writes_an_answer_in_its_handlers_last_turn():
    """A request's answer is written by its own task as its handler returns: the loop turn that
    resumes a handler (a long poll's timer, replication's acknowledgement) writes the answer,
    and leaves nothing of that request to run after it. A writing task per connection woken
    by each answer took one turn more for the write and another for the done callbacks, per
    request (docs/brokers.md, "The brokers' network I/O")."""
    from brokerd.kafka.framing import FrameConnection

    async def go() -> None:
        apis = _GatedApis()
        listener, client = await _gated_listener(apis)
        loop = asyncio.get_running_loop()
        turns, written, after = [0], [], []
        run_once, write_parts = loop._run_once, FrameConnection.write_parts  # type: ignore[attr-defined]

        def counted():
            if written and not after:
                after.append([h for h in loop._ready])  # type: ignore[attr-defined]
            turns[0] += 1
            run_once()

        def recorded(self, parts):
            written.append(turns[0])
            write_parts(self, parts)
        FrameConnection.write_parts = recorded  # type: ignore[method-assign]
        try:
            for correlation in range(1, 4):
                written.clear()
                after.clear()
                await _send_requests(client, correlation)
                await eventually(lambda c=correlation: c in apis.gates, 5, what="the request in flight")
                for _ in range(3):  # the handler's task waits at its gate
                    await asyncio.sleep(0)
                loop._run_once = counted  # type: ignore[attr-defined]
                turns[0] = 0
                apis.gates[correlation].set_result(None)  # in this turn (0)
                answer = await loop.sock_recv(client, 1 << 16)  # no wait_for: its task's callbacks would count
                assert int.from_bytes(answer[4:8], "big") == correlation
                del loop._run_once  # type: ignore[attr-defined]
                assert written == [1], written  # written in the handler's turn, the next one
                assert after == [[]], after  # and nothing left to run for it
        finally:
            loop.__dict__.pop("_run_once", None)
            FrameConnection.write_parts = write_parts  # type: ignore[method-assign]
            client.close()
            await listener.stop()
    run(go())


# -- the gRPC codec: domain requests and broker.proto have the same shape (issue 26) ------------------

def test_every_domain_request_has_the_shape_of_its_protobuf_message():
    """Field for field by name, so that ``proto_codec`` translates each both ways; the one
    protobuf field the broker has no use for is the client id our producer sends; a fetch
    session's fields (KIP-227) are the codec's, served around the domain fetch as the Kafka
    listener serves them; a fetch answer's stored ``frames`` are its protobuf ``records``, which
    the gRPC service joins (the codec leaves out fields marked ``wire: False``); ProduceStream's
    correlation id and request-level error are the service's, around the domain produce."""
    import dataclasses

    from brokerd import group_requests, requests
    unused = {"ProduceRequest": {"client_id", "correlation_id"},
              "ProduceResponse": {"correlation_id", "error_code", "error_message"},
              "FetchRequest": {"session_id", "session_epoch", "forgotten_topics"},
              "FetchResponse": {"session_id", "error_code"}, "FetchPartitionResponse": {"records"}}
    domain_only = {"FetchPartitionResponse": {"frames"}}
    assert [f.name for f in dataclasses.fields(requests.FetchPartitionResponse)
            if f.metadata.get("wire") is False] == ["frames"]
    classes = [c for m in (requests, group_requests) for c in vars(m).values()
               if isinstance(c, type) and dataclasses.is_dataclass(c) and c.__module__ == m.__name__]
    assert len(classes) > 40
    for cls in classes:
        proto = getattr(pb, cls.__name__)  # one message per dataclass, of the same name
        assert {f.name for f in proto.DESCRIPTOR.fields} - unused.get(cls.__name__, set()) == \
            {f.name for f in dataclasses.fields(cls)} - domain_only.get(cls.__name__, set()), cls.__name__


def test_the_grpc_codec_round_trips_a_request_and_an_answer():
    from brokerd import group_requests as g
    from brokerd import requests as r
    from brokerd.proto_codec import to_domain, to_wire
    batch = build_batch([(b"k", b"v", 1, ())])
    produce = pb.ProduceRequest(acks=-1, timeout_ms=5, topics=[pb.ProduceTopicData(name="t", partitions=[
        pb.ProducePartitionData(partition=1, batch=batch), pb.ProducePartitionData(partition=2)])])
    domain = to_domain(r.ProduceRequest, produce)
    assert [p.batch for p in domain.topics[0].partitions] == [batch, None]  # an absent batch is None
    assert to_wire(pb.ProduceRequest, domain) == produce
    fetch = pb.FetchRequest(replica_id=3, topics=[pb.FetchTopic(topic_id=b"x" * 16, partitions=[
        pb.FetchPartition(partition=0, fetch_offset=7), pb.FetchPartition(partition=1, current_leader_epoch=0)])])
    assert [p.current_leader_epoch for p in to_domain(r.FetchRequest, fetch).topics[0].partitions] == [None, 0]
    assert to_wire(pb.FetchRequest, to_domain(r.FetchRequest, fetch)) == fetch
    joined = g.JoinGroupResponse(member_id="m", members=[g.JoinGroupMember(member_id="m", group_instance_id=None),
                                                         g.JoinGroupMember(member_id="n", group_instance_id="i")])
    wire = to_wire(pb.JoinGroupResponse, joined)
    assert [m.HasField("group_instance_id") for m in wire.members] == [False, True]
    assert to_domain(g.JoinGroupResponse, wire) == joined


def _stored_to_wire_by_protobuf(stored: bytes) -> bytes:
    """The reference: the stored frames parsed by protobuf, each batch's header packed."""
    from brokerd.kafka.batches import to_wire
    return b"".join(to_wire(b) for b in pb.RecordBatchSet.FromString(stored).batches)


def test_stored_frames_become_kafka_batches_as_protobuf_reads_them():
    """A fetch turns stored frames into Kafka's batches without parsing them with protobuf
    (brokerd/kafka/batches.py): the same bytes as protobuf's reading, for random header values
    (negative epochs and sequences, producer ids present, -1 or absent, CRCs above 2^31),
    fields in any order or repeated (the last wins), and fields it does not know; a cut frame
    is a DecodeError, as protobuf's."""
    import random

    from google.protobuf.message import DecodeError

    from brokerd.kafka.batches import stored_to_wire
    from clients.records import frame

    rng = random.Random(31)
    signed = {"base_offset": 63, "base_timestamp": 63, "max_timestamp": 63, "partition_leader_epoch": 31,
              "last_offset_delta": 31, "record_count": 31, "attributes": 15, "producer_epoch": 15,
              "base_sequence": 31}
    for case in range(300):
        one = pb.RecordBatch(crc=rng.getrandbits(32), records=rng.randbytes(rng.choice((0, 1, 200, 5000))),
                             **{k: rng.randint(-(1 << bits), (1 << bits) - 1) for k, bits in signed.items()
                                if rng.random() < 0.8})
        if rng.random() < 0.7:
            one.producer_id = rng.choice((-1, 0, rng.getrandbits(62)))
        fields = [pb.RecordBatch(**{f.name: v}).SerializeToString() for f, v in one.ListFields()]
        if rng.random() < 0.3:  # a field given twice: protobuf keeps the last
            fields.insert(0, pb.RecordBatch(base_offset=rng.getrandbits(40), records=b"old").SerializeToString())
        if rng.random() < 0.3:  # fields of a later schema (a varint, 64-bit, bytes, 32-bit)
            fields.append(bytes((13 << 3,)) + b"\x96\x01" + bytes((14 << 3 | 1,)) + b"8bytes!!"
                          + bytes((15 << 3 | 2, 3)) + b"abc" + b"\x85\x01" + b"4byt")  # b"\x85\x01": 16 << 3 | 5
        rng.shuffle(fields)
        stored = b"".join(frame(b"".join(fields)) for _ in range(rng.randint(1, 3)))
        assert stored_to_wire(stored) == _stored_to_wire_by_protobuf(stored), case
    stored = frame(build_batch([(None, b"x" * 100, 0, ())] * 3).SerializeToString())
    assert stored_to_wire(b"") == b""
    for cut in (1, 2, 10, len(stored) - 1):
        with pytest.raises(DecodeError):
            _stored_to_wire_by_protobuf(stored[:cut])
        with pytest.raises(DecodeError):
            stored_to_wire(stored[:cut])


def test_stored_frames_become_kafka_batches_without_copying_their_records():
    """A Fetch answer's batches are their packed headers and views of the stored records, so
    the records are copied once, when the response is framed (brokerd/kafka/batches.py)."""
    from brokerd.kafka.batches import stored_to_wire, stored_to_wire_parts
    from clients.records import frame

    one, two = (build_batch([(None, b"x" * n, 0, ())] * 3) for n in (100, 7))
    stored = frame(one.SerializeToString()) + frame(two.SerializeToString())
    parts = stored_to_wire_parts(stored)
    assert b"".join(parts) == stored_to_wire(stored) and len(parts) == 4
    assert [bytes(v) for v in parts[1::2]] == [one.records, two.records]
    assert all(isinstance(v, memoryview) and v.obj is stored for v in parts[1::2])
    assert stored_to_wire_parts(b"") == []


def test_a_kafka_fetch_answer_becomes_the_leaders_stored_frames_byte_for_byte():
    """A follower fetching over Kafka's protocol stores what the leader stored: Kafka's wire
    batches turn back into the same frames (offsets, epochs, producer fields); a batch cut
    short at the end of an answer is dropped, a batch of another magic is corrupt."""
    from brokerd.kafka.batches import stored_to_wire, wire_to_stored
    from clients.records import frame, set_producer

    first = build_batch([(None, b"x" * 10, 0, ())] * 3)
    first.base_offset, first.partition_leader_epoch = 5, 2
    set_producer(first, 7, 1, 0)
    second = build_batch([(b"k", b"y", 0, ())])
    second.base_offset, second.partition_leader_epoch = 8, 3
    stored = frame(first.SerializeToString()) + frame(second.SerializeToString())
    wire = stored_to_wire(stored)
    assert wire_to_stored(wire, "t-0") == stored
    assert wire_to_stored(wire[:-3], "t-0") == frame(first.SerializeToString())
    assert wire_to_stored(b"", "t-0") == b""
    bad = bytearray(wire)
    bad[16] = 1  # the first batch's magic
    with pytest.raises(KafkaError) as e:
        wire_to_stored(bytes(bad), "t-0")
    assert e.value.code == ErrorCode.CORRUPT_MESSAGE


def test_a_fetched_batchs_frame_is_made_from_the_wire_as_protobuf_serializes_it():
    """Issue 31 (the follower's copies): a follower makes each fetched batch's stored frame
    from Kafka's wire bytes in parts (the records a view, not a copy), byte for byte the
    RecordBatchSet element protobuf serializes, whatever the header holds (zeros left out,
    negative numbers, no producer, a control batch, no records), and checks the CRC there."""
    import random

    from brokerd.kafka.batches import to_wire, wire_to_frames
    from clients.records import CONTROL_FLAG, TRANSACTIONAL_FLAG, frame, marker_batch

    rnd = random.Random(31)
    expected, wire = [], b""
    for i in range(300):
        b = build_batch([(None, rnd.randbytes(rnd.randrange(0, 300)), rnd.choice([0, 1 << 40]), ())
                         for _ in range(rnd.randrange(1, 4))])
        if i % 7 == 0:
            b = marker_batch(rnd.randrange(1 << 50), rnd.randrange(1 << 15), bool(i % 2), 3, 1_700_000_000_000)
        if i % 11 == 0:
            b.records, b.record_count, b.last_offset_delta = b"", 0, -1
        b.base_offset = rnd.choice([0, 1, 127, 128, 1 << 35])
        b.partition_leader_epoch = rnd.choice([-1, 0, 5, 1 << 30])
        b.base_timestamp, b.max_timestamp = rnd.choice([(0, 0), (-1, -1), (1_700_000_000_000, 1_700_000_000_999)])
        if i % 3 == 1:
            b.producer_id, b.producer_epoch, b.base_sequence = rnd.choice([0, 1 << 60]), rnd.choice([0, 7]), -1
            b.attributes |= rnd.choice([0, TRANSACTIONAL_FLAG])
        elif i % 3 == 2:
            b.producer_epoch, b.base_sequence = -1, -1  # a producer without an id, as Kafka's clients send it
        from clients.records import batch_crc
        b.crc = batch_crc(b)
        expected.append(frame(b.SerializeToString()))
        wire += to_wire(b)
    got = wire_to_frames(wire, "t-0")
    assert [b"".join(parts) for _, parts in got] == expected
    assert all(isinstance(parts[1], memoryview) for _, parts in got)  # the records are not copied
    for (batch, _), want in zip(got, batches(b"".join(expected)), strict=True):
        head = pb.RecordBatch()
        head.CopyFrom(want)
        if not want.attributes & CONTROL_FLAG:
            head.ClearField("records")  # staging reads a control batch's records only (its marker)
        assert batch == head

    bad = bytearray(wire)
    bad[70] ^= 1  # in the first batch's records
    with pytest.raises(KafkaError) as e:
        wire_to_frames(bytes(bad), "t-0")
    assert e.value.code == ErrorCode.CORRUPT_MESSAGE and "Record is corrupt (stored crc = " in e.value.message


def _following_two_partitions(store, tid, leader):
    """A replica fetcher of broker 8 following partitions 0 and 1 of topic ``t`` from broker 7
    (epoch 2) through ``leader`` (a stand-in for the gRPC stub); the fetcher and its states."""
    from brokerd.replica_fetcher import FetchState, ReplicaFetcher
    fetcher = ReplicaFetcher(_broker_config(), 8, "127.0.0.1:1", lambda: 1, lambda _: None)
    fetcher.stub = leader
    states = []
    for i in range(2):
        p = Partition(7, "t", tid, i, PartitionLog(store, tid, i), LogConfig())
        p.update(PartitionRegistration((7, 8), (8,), 8, 2, 3))
        states.append(FetchState(p, p.leader_epoch, truncating=False))
        fetcher.states[p] = states[-1]
    return fetcher, states


def test_a_fetch_answer_a_partition_of_which_cannot_be_read_changes_no_partition(tmp_path):
    """A fetch answer is read and checked whole before any of its partitions is staged: one
    whose batches cannot be read (a RecordBatchSet protobuf parses but whose frames are not
    all batches) fails the fetch and leaves the others as they were, so the next fetch appends
    them all (staging one first moved its log end in memory past what was written, and its
    batches were then skipped as already there)."""
    from clients.records import frame

    class Leader:
        def __init__(self) -> None:
            self.answers: list[pb.FetchResponse] = []

        async def Fetch(self, req, timeout):  # noqa: N802 (the gRPC stub's)
            return self.answers.pop(0)

    async def go():
        store = LogStore(str(tmp_path))
        tid = uuid.uuid4()
        fetcher, states = _following_two_partitions(store, tid, leader := Leader())
        batch = _batch(2)
        batch.partition_leader_epoch = 2
        good = frame(batch.SerializeToString())

        def answer(second: bytes) -> pb.FetchResponse:
            return pb.FetchResponse(session_id=0, topics=[pb.FetchTopicResponse(name="t", topic_id=tid.bytes, partitions=[
                pb.FetchPartitionResponse(partition=0, high_watermark=2, records=good),
                pb.FetchPartitionResponse(partition=1, high_watermark=2, records=second)])])

        leader.answers = [answer(good + b"\x12\x00"), answer(good)]  # then an unknown field 2, empty
        with pytest.raises(KafkaError) as e:
            await fetcher._fetch(states)
        assert e.value.code == ErrorCode.CORRUPT_MESSAGE
        assert [(s.partition.log.next_offset, s.partition.log.log_end_offset) for s in states] == [(0, 0), (0, 0)]
        await fetcher._fetch(states)
        assert [s.partition.log.log_end_offset for s in states] == [2, 2]
        assert [len(s.partition.log.read(0, 1 << 20, 2)[0]) for s in states] == [1, 1]
        await fetcher.stop()
        await store.close()
    run(go())


def test_a_leaders_failed_kafka_fetch_delays_the_follower_by_its_backoff(tmp_path):
    """A leader whose Fetch handler fails answers UNKNOWN_SERVER_ERROR (error_answers) where it
    used to close the connection, which made the follower wait (replica_fetcher's _run): the
    partitions fetched wait replica.fetch.backoff.ms before the next fetch, instead of being
    fetched again at once, while a fetch session error alone starts a new session at once.
    (Before the follower handled the top-level error as a session's: this failed.)"""
    from brokerd.kafka.replica_client import KafkaLeaderClient

    class Leader(KafkaLeaderClient):
        def __init__(self) -> None:
            super().__init__("127.0.0.1:1", None, 8)
            self.errors = [int(ErrorCode.FETCH_SESSION_ID_NOT_FOUND), int(ErrorCode.UNKNOWN_SERVER_ERROR)]

        async def fetch_partitions(self, req, timeout):
            return self.errors.pop(0), 0, []

    async def go():
        store = LogStore(str(tmp_path))
        fetcher, states = _following_two_partitions(store, uuid.uuid4(), leader := Leader())
        await fetcher._fetch(states)  # the session's error: fetched again at once
        assert [s.delayed_until for s in states] == [0.0, 0.0]
        await fetcher._fetch(states)
        assert all(s.delayed_until > time.monotonic() for s in states), [s.delayed_until for s in states]
        await fetcher.stop()
        await leader.close()
        await store.close()
    run(go())


def test_the_followers_kafka_fetch_is_the_grpc_request_it_replaced(tmp_path):
    """The follower makes its Kafka Fetch straight from its fetch states (no ``pb.FetchRequest``
    converted): on the wire it is byte for byte what converting the gRPC path's request made,
    over full and incremental fetches of a session, partitions sent, left out and forgotten."""
    import random

    from brokerd.kafka.codec import frame_request
    from brokerd.kafka.replica_client import FETCH, FETCH_VERSION, KafkaLeaderClient
    from brokerd.replica_fetcher import FetchState

    client = KafkaLeaderClient("127.0.0.1:1", None, 8)
    by_kafka: list[bytes] = []
    by_grpc: list[bytes] = []

    class Leader:
        session_id = 5

        async def Fetch(self, req, timeout):  # noqa: N802 (the gRPC stub's)
            by_grpc.append(frame_request(FETCH, FETCH_VERSION, 1, client.client_id, client.fetch_request(req)))
            return pb.FetchResponse(session_id=self.session_id, error_code=0 if self.session_id else
                                    ErrorCode.FETCH_SESSION_ID_NOT_FOUND.value)

    async def go():
        store = LogStore(str(tmp_path))
        fetcher, states = _following_two_partitions(store, uuid.uuid4(), leader := Leader())
        other = uuid.uuid4()
        for i in range(3):
            p = Partition(7, "other", other, i, PartitionLog(store, other, i), LogConfig())
            p.update(PartitionRegistration((7, 8), (8,), 8, 2, 3))
            states.append(FetchState(p, p.leader_epoch, truncating=False))
            fetcher.states[p] = states[-1]
        grpc_fetch = fetcher._grpc_fetch

        async def both(send, forget, sent):
            by_kafka.append(frame_request(FETCH, FETCH_VERSION, 1, client.client_id,
                                          fetcher._kafka_request(client, send, forget, sent)))
            return await grpc_fetch(send, forget, sent)
        fetcher._grpc_fetch = both
        rng = random.Random(11)
        for _ in range(60):
            for s in rng.sample(states, rng.randint(0, 2)):
                s.partition.log.log_end_offset = rng.choice([0, 7, 2**40])
                s.partition.log.log_start_offset = rng.choice([0, 3])
                s.leader_epoch = rng.choice([2, 3])
            leader.session_id = 0 if rng.random() < 0.1 else 5
            await fetcher._fetch(rng.sample(states, rng.randint(1, len(states))))
        await fetcher.stop()
        await store.close()
    run(go())
    assert len(by_kafka) == len(by_grpc) == 60 and by_kafka == by_grpc
    assert any(b"other" not in w for w in by_kafka[1:])  # incremental fetches left partitions out


def test_a_fetched_marker_that_does_not_decode_stages_nothing_of_its_partition(tmp_path):
    """Staging a partition is all or nothing: a transaction marker whose CRC holds but whose
    record does not decode is refused before anything of its partition is staged, and the
    answer's other partitions are appended (it raised after one of them was staged in memory
    and not written, whose batches the next fetch then skipped)."""
    from clients.records import batch_crc, frame, marker_batch

    class Leader:
        answer = pb.FetchResponse()

        async def Fetch(self, req, timeout):  # noqa: N802 (the gRPC stub's)
            return self.answer

    async def go():
        store = LogStore(str(tmp_path))
        tid = uuid.uuid4()
        fetcher, states = _following_two_partitions(store, tid, leader := Leader())
        good = _batch(2)
        good.partition_leader_epoch = 2
        marker = marker_batch(5, 0, True, 1, int(time.time() * 1000))
        marker.partition_leader_epoch, marker.records = 2, b"\xff\xff\xff"
        marker.crc = batch_crc(marker)
        leader.answer = pb.FetchResponse(topics=[pb.FetchTopicResponse(name="t", topic_id=tid.bytes, partitions=[
            pb.FetchPartitionResponse(partition=0, high_watermark=2, records=frame(good.SerializeToString())),
            pb.FetchPartitionResponse(partition=1, high_watermark=1, records=frame(marker.SerializeToString()))])])
        await fetcher._fetch(states)
        a, b = (s.partition.log for s in states)
        assert (a.next_offset, a.log_end_offset, len(a.read(0, 1 << 20, 2)[0])) == (2, 2, 1)
        assert (b.next_offset, b.log_end_offset, b.epochs.entries) == (0, 0, [])
        assert states[1].delayed_until > time.monotonic()
        await fetcher.stop()
        await store.close()
    run(go())


def test_followers_use_a_kafka_listener_only_as_safe_as_the_inter_broker_one():
    from brokerd.config import replica_kafka_listener
    from clients.security import ListenerSecurity, SaslSettings
    from common.tls import TLSConfig

    tls = TLSConfig("cert.pem", "key.pem", "ca.pem")
    plain, sasl = ListenerSecurity(), ListenerSecurity("SASL_PLAINTEXT", sasl=SaslSettings(("PLAIN",), {}))
    mtls, one_way = ListenerSecurity("SSL", tls, "required"), ListenerSecurity("SSL", tls, "none")
    pick = replica_kafka_listener
    assert pick({"PLAINTEXT": plain, "KAFKA": plain}, "PLAINTEXT", ("KAFKA",)) == "KAFKA"
    assert pick({"PLAINTEXT": plain, "K1": sasl, "K2": plain}, "PLAINTEXT", ("K1", "K2")) == "K2"
    assert pick({"PLAINTEXT": plain, "KAFKA": sasl}, "PLAINTEXT", ("KAFKA",)) is None
    assert pick({"SSL": mtls, "KAFKA": one_way}, "SSL", ("KAFKA",)) is None  # no certificate: no principal
    assert pick({"SSL": mtls, "KAFKA": mtls}, "SSL", ("KAFKA",)) == "KAFKA"
    assert pick({"SSL": mtls, "KAFKA": plain}, "SSL", ("KAFKA",)) is None  # plaintext beside TLS
    assert pick({"PLAINTEXT": plain}, "PLAINTEXT", ()) is None


def test_replica_fetch_listener_name_must_name_an_eligible_kafka_listener():
    """replica.fetch.listener.name: the Kafka listener followers fetch over; an unknown or gRPC
    listener, a SASL one, or one less safe than the inter-broker listener is one ConfigError
    at start, also under replica.fetch.protocol=grpc (the mistake shows before it matters)."""
    from brokerd.config import BrokerConfig
    from metadata.config import from_properties
    props = {"node.id": "1", "process.roles": "broker", "controller.quorum.voters": "9@127.0.0.1:9093",
             "log.dirs": "/tmp/x", "replica.fetch.protocol": "kafka",
             "listeners": "PLAINTEXT://127.0.0.1:9092,KAFKA://127.0.0.1:9094,REPLICATION://127.0.0.1:9095,"
                          "SECRET://127.0.0.1:9096",
             "kafka.listener.names": "KAFKA,REPLICATION,SECRET",
             "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,KAFKA:PLAINTEXT,REPLICATION:PLAINTEXT,"
                                               "SECRET:SASL_PLAINTEXT",
             "listener.name.secret.plain.sasl.jaas.config":
                 'org.apache.kafka.common.security.plain.PlainLoginModule required user_alice="pw";',
             "sasl.enabled.mechanisms": "PLAIN"}

    def replica_listener(**extra: str) -> str | None:
        return BrokerConfig.from_server(from_properties({**props, **extra})).replica_listener

    assert replica_listener() == "KAFKA"  # unset: the first eligible
    assert replica_listener(**{"replica.fetch.listener.name": "replication"}) == "REPLICATION"
    assert replica_listener(**{"replica.fetch.listener.name": "REPLICATION", "replica.fetch.protocol": "grpc"}) is None
    for name, why in [("NOPE", r"replica.fetch.listener.name=NOPE is not one of the broker's Kafka listeners "
                               r"\(kafka.listener.names: KAFKA, REPLICATION, SECRET\)"),
                      ("PLAINTEXT", r"PLAINTEXT is not one of the broker's Kafka listeners"),
                      ("SECRET", r"replica.fetch.listener.name=SECRET: followers cannot fetch over it: it is a "
                                 r"SASL_PLAINTEXT listener and a broker has no SASL credentials of its own")]:
        for protocol in ("kafka", "grpc"):
            with pytest.raises(ConfigError, match=why) as e:
                replica_listener(**{"replica.fetch.listener.name": name, "replica.fetch.protocol": protocol})
            assert "\n" not in str(e.value)
    with pytest.raises(ConfigError, match=r"inter.broker.listener.name=REPLICATION speaks Kafka's protocol .*"
                                          r"name the Kafka listener followers fetch over with replica.fetch.listener.name"):
        replica_listener(**{"inter.broker.listener.name": "REPLICATION"})


def test_a_replica_listener_less_safe_than_the_inter_broker_one_is_refused():
    from brokerd.config import replica_kafka_listener
    from clients.security import ListenerSecurity
    from common.tls import TLSConfig

    tls = TLSConfig("cert.pem", "key.pem", "ca.pem")
    plain = ListenerSecurity()
    mtls, one_way = ListenerSecurity("SSL", tls, "required"), ListenerSecurity("SSL", tls, "none")
    pick = replica_kafka_listener
    with pytest.raises(ConfigError, match=r"REPL: followers cannot fetch over it: it speaks PLAINTEXT and the "
                                          r"inter-broker listener SSL SSL"):
        pick({"SSL": mtls, "REPL": plain}, "SSL", ("REPL",), "REPL")
    with pytest.raises(ConfigError, match=r"REPL: followers cannot fetch over it: it does not require client "
                                          r"certificates as the inter-broker listener SSL does"):
        pick({"SSL": mtls, "KAFKA": mtls, "REPL": one_way}, "SSL", ("KAFKA", "REPL"), "REPL")
    assert pick({"SSL": mtls, "KAFKA": one_way, "REPL": mtls}, "SSL", ("KAFKA", "REPL"), "REPL") == "REPL"
    assert pick({"SSL": one_way, "REPL": mtls}, "SSL", ("REPL",), "REPL") == "REPL"  # safer is fine


def test_an_unreachable_leader_is_one_line_naming_the_address_and_the_key(tmp_path, caplog):
    """A follower that cannot reach its leader's advertised replica listener logs one line naming
    the address, the listener and the key to set, not one per retry (every replica.fetch.backoff.ms)
    nor one per flap of a connection that comes and goes."""
    import dataclasses
    import logging

    from brokerd.kafka.replica_client import LeaderUnreachable
    from brokerd.replica_fetcher import ReplicaFetcher

    class Flapping:
        """Refused, answered (with nothing), refused again, ..."""
        calls = 0

        async def OffsetsForLeaderEpoch(self, req, timeout):  # noqa: N802 (the stub's name)
            self.calls += 1
            if self.calls % 2:
                raise LeaderUnreachable("Connection refused")
            return pb.OffsetsForLeaderEpochResponse()

        async def close(self) -> None:
            pass

    async def go(stub: Flapping | None) -> None:
        store = LogStore(str(tmp_path / str(stub is None)))
        p = Partition(7, "t", uuid.uuid4(), 0, PartitionLog(store, uuid.uuid4(), 0), LogConfig())
        p.update(PartitionRegistration((7, 8), (7, 8), 8, 1, 1))
        cfg = dataclasses.replace(_broker_config(), replica_listener="REPLICATION", replica_fetch_backoff_ms=10)
        fetcher = ReplicaFetcher(cfg, 8, "127.0.0.1:1", lambda: 1, lambda _: None, kafka=True)
        real = fetcher.stub
        fetcher.stub = stub or real
        calls = 0
        if stub is None:  # the real client dialling a closed port: count its attempts
            dial = real.OffsetsForLeaderEpoch

            async def counting(req, timeout):
                nonlocal calls
                calls += 1
                return await dial(req, timeout)
            real.OffsetsForLeaderEpoch = counting
        fetcher.add(p)
        fetcher.start()
        await eventually(lambda: (stub.calls if stub else calls) >= 8, what="retries")
        await fetcher.stop()
        await real.close()
        await store.close()

    with caplog.at_level(logging.WARNING, logger="brokerd.replica"):
        for stub in (None, Flapping()):
            caplog.clear()
            run(go(stub))
            lines = [r.getMessage() for r in caplog.records if "cannot fetch" in r.getMessage()]
            assert len(lines) == 1, lines
            assert lines[0].startswith("cannot fetch from broker 8 at 127.0.0.1:1, its REPLICATION listener as "
                                       "advertised: ") and "replica.fetch.listener.name" in lines[0], lines[0]
            assert "\n" not in lines[0]


def test_a_leader_closing_a_connection_that_served_is_not_an_unreachable_address(tmp_path, caplog):
    """A leader that stops (the end of its controlled shutdown) closes its followers' connections
    while their metadata may still name it: the follower says so at INFO and fetches again; the
    warning about an advertised address it cannot reach is kept for connections that never
    served (seen at the end of bench.kafka_clients: "cannot fetch from broker 101 ... the
    leader closed the connection" as broker 101 stopped)."""
    import dataclasses
    import logging

    from brokerd.kafka.codec import RequestHeader, build, correlation_id, frame_response, response_schema
    from brokerd.kafka.replica_client import OFFSET_FOR_LEADER_EPOCH, OFFSETS_VERSION, KafkaLeaderClient, LeaderUnreachable
    from brokerd.replica_fetcher import ReplicaFetcher

    async def leader(answers: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Answers ``answers`` requests (with no topics), then closes the connection."""
        for _ in range(answers):
            body = await reader.readexactly(int.from_bytes(await reader.readexactly(4), "big"))
            header = RequestHeader(OFFSET_FOR_LEADER_EPOCH, OFFSETS_VERSION, correlation_id(body), None, True)
            writer.write(frame_response(header, build(response_schema(OFFSET_FOR_LEADER_EPOCH, OFFSETS_VERSION),
                                                      {"topics": []})))
        await reader.read(1 << 16)  # the next request, unanswered
        writer.close()

    async def outcomes(answers: int) -> list[bool]:
        server = await asyncio.start_server(lambda r, w: leader(answers, r, w), "127.0.0.1", 0)
        client = KafkaLeaderClient(f"127.0.0.1:{server.sockets[0].getsockname()[1]}", None, 7)
        dropped = []
        for _ in range(answers + 1):
            try:
                await client.OffsetsForLeaderEpoch(pb.OffsetsForLeaderEpochRequest(), timeout=5)
            except LeaderUnreachable as e:
                dropped.append(e.dropped)
        await client.close()
        server.close()
        return dropped

    assert run(outcomes(0)) == [False]  # closed before it ever answered: maybe not our leader at all
    assert run(outcomes(1)) == [True]   # answered, then closed: the leader went away

    class Stopping:
        calls = 0

        async def OffsetsForLeaderEpoch(self, req, timeout):  # noqa: N802 (the stub's name)
            self.calls += 1
            raise LeaderUnreachable("the leader closed the connection", dropped=True)

        async def close(self) -> None:
            pass

    async def go(stub: Stopping) -> None:
        store = LogStore(str(tmp_path / "s"))
        p = Partition(7, "t", uuid.uuid4(), 0, PartitionLog(store, uuid.uuid4(), 0), LogConfig())
        p.update(PartitionRegistration((7, 8), (7, 8), 8, 1, 1))
        cfg = dataclasses.replace(_broker_config(), replica_listener="REPLICATION", replica_fetch_backoff_ms=10)
        fetcher = ReplicaFetcher(cfg, 8, "127.0.0.1:1", lambda: 1, lambda _: None, kafka=True)
        real, fetcher.stub = fetcher.stub, stub
        fetcher.add(p)
        fetcher.start()
        await eventually(lambda: stub.calls >= 2, what="retries")
        await fetcher.stop()
        await real.close()
        await store.close()

    with caplog.at_level(logging.INFO, logger="brokerd.replica"):
        run(go(Stopping()))
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text
    assert "broker 8 at 127.0.0.1:1 closed the replication connection; fetching again" in caplog.text
