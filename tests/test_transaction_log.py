"""A partition's side of transactions, in one process (issue 28): open transactions and the
last stable offset, the aborted-transaction index, both persisted with the log and rebuilt
after a truncation, and the transaction coordinator's record of a transaction."""
from __future__ import annotations

import asyncio
import uuid

from brokerd.log_store import LogStore
from brokerd.partition_log import PartitionLog
from brokerd.producer_state import AbortedTxn
from brokerd.transaction_state import TransactionMetadata, TxnState
from clients.records import (TRANSACTIONAL_FLAG, batches, build_batch, marker_batch, marker_commits, records_of,
                             set_producer, validate_batch)


def _txn_batch(pid: int, seq: int, n: int = 2) -> object:
    batch = build_batch([(b"k", b"v%d" % i, 1000 + i, ()) for i in range(n)])
    batch.attributes |= TRANSACTIONAL_FLAG
    set_producer(batch, pid, 0, seq)
    return batch


def test_markers_are_control_batches_consumers_skip():
    commit = marker_batch(7, 3, True, 5, 1234)
    abort = marker_batch(7, 3, False, 5, 1234)
    assert marker_commits(commit) and not marker_commits(abort)
    assert list(records_of(commit, "t", 0)) == []
    validate_batch(_txn_batch(7, 0), "t-0", 1 << 20)  # a producer may send the transactional bit


def test_last_stable_offset_and_aborted_index_survive_reopening_and_truncation(tmp_path):
    tid = uuid.uuid4()

    async def write() -> None:
        store = LogStore(str(tmp_path))
        log = PartitionLog(store, tid, 0)
        await log.append_as_leader(build_batch([(b"k", b"plain", 1, ())]), 0)  # offset 0
        await log.append_as_leader(_txn_batch(1, 0), 0)                          # 1-2: producer 1
        await log.append_as_leader(_txn_batch(2, 0), 0)                          # 3-4: producer 2
        log.set_high_watermark(log.log_end_offset)
        assert log.last_stable_offset == 1  # producer 1's transaction is open
        await log.append_as_leader(marker_batch(1, 0, False, 0, 5), 0)          # 5: producer 1 aborts
        log.set_high_watermark(log.log_end_offset)
        assert log.last_stable_offset == 3  # producer 2's is still open
        assert log.aborted_transactions(0, 6) == [AbortedTxn(1, 1, 5)]
        assert log.aborted_transactions(6, 9) == []
        await log.append_as_leader(marker_batch(2, 0, True, 0, 6), 0)           # 6: producer 2 commits
        await log.append_as_leader(_txn_batch(1, 2), 0)                          # 7-8: producer 1 again
        log.set_high_watermark(log.log_end_offset)
        log.checkpoint()
        assert log.last_stable_offset == 7
        await store.close()

    async def reopen() -> None:
        store = LogStore(str(tmp_path))
        log = PartitionLog(store, tid, 0)
        assert log.last_stable_offset == 7 and log.aborted_transactions(0, 9) == [AbortedTxn(1, 1, 5)]
        # A truncation back into the aborted and committed transactions: both are open again.
        assert await log.truncate_to(5) == 5
        assert log.producers.ongoing == {1: 1, 2: 3} and log.aborted_transactions(0, 9) == []
        await store.close()
        store = LogStore(str(tmp_path))
        log = PartitionLog(store, tid, 0)
        assert log.producers.ongoing == {1: 1, 2: 3} and log.last_stable_offset == 1
        frames, _ = log.read(0, 1 << 20, log.log_end_offset)
        assert [b.base_offset for f in frames for b in batches(bytes(f))] == [0, 1, 3]
        await store.close()

    asyncio.run(write())
    asyncio.run(reopen())


def test_transaction_metadata_round_trips_its_record():
    m = TransactionMetadata("tx", 42, 3, 60_000, TxnState.ONGOING, frozenset({("a", 0), ("a", 1), ("b", 2)}), 5, 4)
    key, value = m.encode()
    assert key == b"tx" and TransactionMetadata.decode(key, value) == m


def test_a_marker_of_a_newer_epoch_fences_the_older_producer(tmp_path):
    """The coordinator aborts a fenced producer's transaction under a bumped epoch: the
    partition then refuses that producer's old epoch, and the new epoch starts at sequence 0."""
    import pytest

    from common.errors import KafkaError, ErrorCode

    async def go() -> None:
        store = LogStore(str(tmp_path))
        log = PartitionLog(store, uuid.uuid4(), 0)
        await log.append_as_leader(_txn_batch(9, 0), 0)
        await log.append_as_leader(marker_batch(9, 1, False, 0, 5), 0)  # aborted under epoch 1
        with pytest.raises(KafkaError) as e:
            await log.append_as_leader(_txn_batch(9, 2), 0)  # the zombie, epoch 0
        assert e.value.code == ErrorCode.INVALID_PRODUCER_EPOCH
        fresh = _txn_batch(9, 0)
        set_producer(fresh, 9, 2, 0)
        await log.append_as_leader(fresh, 0)  # the new producer's first batch
        assert log.producers.producers[9].epoch == 2 and log.producers.ongoing == {9: 3}
        await store.close()

    asyncio.run(go())
