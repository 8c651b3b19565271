"""What a partition knows of each idempotent producer (Kafka's ProducerStateManager): its
epoch and the metadata of its last five batches, enough to answer a retried batch with its
original offsets instead of writing it twice, and to refuse a batch that skips ahead.

The leader checks every batch that carries a producer id before it is appended (``check``),
under the same synchronous step that assigns its offsets, so two batches of one producer in
flight at once are judged in order. Leader and followers record every appended batch
(``record``); followers store the same producer fields, so a new leader already has the
state. Entries persist in RocksDB with the batches (``partition_log``), are rebuilt from the
log's batch heads after a truncation, dropped when retention removes a producer's last batch
(its state is then unknown, as in Kafka), and expire after ``producer.id.expiration.ms``
without a write.

Transactions (KIP-98): a transactional producer's first batch in a partition opens its
transaction there (``ongoing``: producer id -> first offset); the coordinator's marker closes
it, and an abort is remembered in the aborted-transaction index so that read_committed
consumers can drop its records. The last stable offset is the first offset of the oldest
transaction still open.
"""
from __future__ import annotations

import struct
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Protocol

from common.errors import ErrorCode, KafkaError

from .requests import ProducerStateView

#: Batches remembered per producer (Kafka's ProducerStateEntry.NUM_BATCHES_TO_RETAIN): the
#: producer has at most five requests in flight per partition, so a retry is one of them.
RETAINED_BATCHES = 5
INT32_MAX = (1 << 31) - 1

_ENTRY = struct.Struct(">hqB")       # epoch, last timestamp, batch count
_BATCH = struct.Struct(">iiqq")      # first sequence, last sequence, first offset, last offset


def next_sequence(seq: int) -> int:
    """Sequences wrap to 0 after Int32.MAX, as Kafka's do."""
    return 0 if seq == INT32_MAX else seq + 1


def last_sequence(base_sequence: int, record_count: int) -> int:
    return (base_sequence + record_count - 1) % (INT32_MAX + 1)


@dataclass(frozen=True, slots=True)
class BatchMetadata:
    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int


@dataclass(slots=True)
class ProducerEntry:
    producer_id: int
    epoch: int
    last_timestamp: int  # the newest batch's max timestamp (expiry is measured from it)
    batches: deque[BatchMetadata] = field(default_factory=lambda: deque(maxlen=RETAINED_BATCHES))

    @property
    def last_seq(self) -> int:
        """-1 before the first batch of its epoch (after a marker bumped the epoch)."""
        return self.batches[-1].last_seq if self.batches else -1

    def encode(self) -> bytes:
        return _ENTRY.pack(self.epoch, self.last_timestamp, len(self.batches)) + b"".join(
            _BATCH.pack(b.first_seq, b.last_seq, b.first_offset, b.last_offset) for b in self.batches)

    @classmethod
    def decode(cls, producer_id: int, data: bytes) -> "ProducerEntry":
        epoch, ts, n = _ENTRY.unpack_from(data)
        if len(data) != _ENTRY.size + n * _BATCH.size or not 0 <= n <= RETAINED_BATCHES:
            raise ValueError(f"producer {producer_id}: a state record of {len(data)} bytes for {n} batches")
        entry = cls(producer_id, epoch, ts)
        for k in range(n):
            entry.batches.append(BatchMetadata(*_BATCH.unpack_from(data, _ENTRY.size + k * _BATCH.size)))
        return entry


class BatchHead(Protocol):
    """What the log keeps beside each stored batch (``partition_log.StoredBatch``), read-only
    (properties here, so that a frozen dataclass has them)."""

    @property
    def base_offset(self) -> int: ...
    @property
    def last_offset(self) -> int: ...
    @property
    def max_timestamp(self) -> int: ...
    @property
    def producer_id(self) -> int: ...  # -1: none
    @property
    def producer_epoch(self) -> int: ...
    @property
    def base_sequence(self) -> int: ...


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    """An aborted transaction of a partition (Kafka's AbortedTxn): its records lie in
    [first_offset, last_offset], the abort marker being at last_offset."""

    producer_id: int
    first_offset: int
    last_offset: int

    _CODEC = struct.Struct(">qq")  # producer id, first offset (last offset is in the key)

    def encode(self) -> bytes:
        return self._CODEC.pack(self.producer_id, self.first_offset)

    @classmethod
    def decode(cls, last_offset: int, data: bytes) -> "AbortedTxn":
        pid, first = cls._CODEC.unpack(data)
        return cls(pid, first, last_offset)


class ProducerStateManager:
    def __init__(self, name: str, entries: Iterable[ProducerEntry] = (), ongoing: dict[int, int] | None = None,
                 aborted: Iterable[AbortedTxn] = ()) -> None:
        self.name = name  # the partition, for messages
        self.producers: dict[int, ProducerEntry] = {e.producer_id: e for e in entries}
        #: Open transactions: producer id -> the offset of its first batch in this partition.
        self.ongoing: dict[int, int] = dict(ongoing or {})
        #: Aborted transactions, by marker offset (the aborted-transaction index).
        self.aborted: list[AbortedTxn] = sorted(aborted, key=lambda a: a.last_offset)

    def begin_transaction(self, producer_id: int, offset: int) -> bool:
        """A transactional batch at ``offset``: True if it opens its producer's transaction here."""
        if producer_id in self.ongoing:
            return False
        self.ongoing[producer_id] = offset
        return True

    def end_transaction(self, producer_id: int, epoch: int, marker_offset: int, marker_ts: int, commit: bool
                        ) -> AbortedTxn | None:
        """A marker at ``marker_offset`` closes its producer's transaction; an abort of one that
        wrote here is returned, to go into the index. A marker of a newer epoch (the
        coordinator bumped it, fencing the producer) starts that epoch here, so the fenced
        producer's later batches are refused (INVALID_PRODUCER_EPOCH)."""
        e = self.producers.get(producer_id)
        if e is None or epoch > e.epoch:
            self.producers[producer_id] = ProducerEntry(producer_id, epoch, marker_ts)
        first = self.ongoing.pop(producer_id, None)
        if first is None or commit:
            return None
        a = AbortedTxn(producer_id, first, marker_offset)
        self.aborted.append(a)
        return a

    def first_unstable_offset(self) -> int | None:
        return min(self.ongoing.values(), default=None)

    def aborted_between(self, start: int, end: int) -> list[AbortedTxn]:
        """Aborted transactions with records in [start, end) (what a read_committed fetch of
        that range must be told)."""
        return [a for a in self.aborted if a.last_offset >= start and a.first_offset < end]

    def check_epoch(self, producer_id: int, epoch: int, offset: int) -> None:
        """INVALID_PRODUCER_EPOCH for a batch of an epoch the partition has seen superseded."""
        e = self.producers.get(producer_id)
        if e is not None and epoch < e.epoch:
            raise KafkaError(ErrorCode.INVALID_PRODUCER_EPOCH,
                              f"Epoch of producer {producer_id} at offset {offset} in {self.name} is {epoch}, "
                              f"which is smaller than the last seen epoch {e.epoch}")

    def check(self, producer_id: int, epoch: int, first_seq: int, last_seq: int, offset: int
              ) -> BatchMetadata | None:
        """Judge a batch before the leader appends it: None to append it, the original's
        metadata for a duplicate of one of the last five, or KafkaError with Kafka's code."""
        e = self.producers.get(producer_id)
        if e is None:
            if first_seq != 0:
                raise KafkaError(ErrorCode.UNKNOWN_PRODUCER_ID,
                                  f"Found no record of producerId={producer_id} on the broker at offset "
                                  f"{offset} in partition {self.name}. It is possible that the last message "
                                  f"with the producerId={producer_id} has been removed due to hitting the "
                                  f"retention limit.")
            return None
        self.check_epoch(producer_id, epoch, offset)
        if epoch > e.epoch:
            if first_seq != 0:
                raise KafkaError(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                                  f"Invalid sequence number for new epoch of producer {producer_id} at offset "
                                  f"{offset} in partition {self.name}: {epoch} (request epoch), {first_seq} "
                                  f"(seq. number), {e.epoch} (current producer epoch)")
            return None
        for b in e.batches:
            if b.first_seq == first_seq and b.last_seq == last_seq:
                return b
        if not e.batches:  # the epoch's first batch (a marker started it)
            if first_seq != 0:
                raise KafkaError(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                                  f"Invalid sequence number for producer {producer_id} at offset {offset} in "
                                  f"partition {self.name}: {first_seq} (incoming seq. number), expected 0 in its "
                                  f"epoch {epoch}")
            return None
        if first_seq != next_sequence(e.last_seq):
            raise KafkaError(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                              f"Out of order sequence number for producer {producer_id} at offset {offset} in "
                              f"partition {self.name}: {first_seq} (incoming seq. number), {e.last_seq} "
                              f"(current end sequence number)")
        return None

    def record_batch(self, base_offset: int, last_offset: int, max_timestamp: int, producer_id: int,
                     epoch: int, base_sequence: int) -> ProducerEntry:
        """An appended batch of a producer (leader or follower): it becomes the newest of its
        entry; a new epoch starts the entry over."""
        e = self.producers.get(producer_id)
        if e is None or epoch != e.epoch:
            e = self.producers[producer_id] = ProducerEntry(producer_id, epoch, max_timestamp)
        e.batches.append(BatchMetadata(base_sequence, last_sequence(base_sequence, last_offset - base_offset + 1),
                                       base_offset, last_offset))
        e.last_timestamp = max(e.last_timestamp, max_timestamp)
        return e

    def rebuild(self, heads: Iterable[BatchHead]) -> None:
        """Start over from the batches the log holds, oldest first (after a truncation)."""
        self.producers = {}
        for h in heads:
            if h.producer_id >= 0 and h.base_sequence >= 0:  # a marker has no sequence
                self.record_batch(h.base_offset, h.last_offset, h.max_timestamp, h.producer_id,
                                  h.producer_epoch, h.base_sequence)

    def remove_before(self, log_start_offset: int) -> list[int]:
        """Producers whose every remembered batch is now before the log start: forget them
        (a later batch with a sequence past 0 gets UNKNOWN_PRODUCER_ID)."""
        gone = [pid for pid, e in self.producers.items() if e.batches and e.batches[-1].last_offset < log_start_offset]
        for pid in gone:
            del self.producers[pid]
        return gone

    def describe(self) -> list[ProducerStateView]:
        """Kafka's DescribeProducers for this partition: each producer, and where its open
        transaction (if any) began."""
        out = {pid: ProducerStateView(producer_id=pid, producer_epoch=e.epoch, last_sequence=e.last_seq,
                                             last_timestamp=e.last_timestamp,
                                             current_txn_start_offset=self.ongoing.get(pid, -1))
               for pid, e in self.producers.items()}
        for pid, first in self.ongoing.items():  # an open transaction whose entry expired
            out.setdefault(pid, ProducerStateView(producer_id=pid, producer_epoch=-1,
                                                         current_txn_start_offset=first))
        return sorted(out.values(), key=lambda d: d.producer_id)

    def expire(self, now_ms: int, expiration_ms: int) -> list[int]:
        """Producers silent for ``producer.id.expiration.ms``."""
        gone = [pid for pid, e in self.producers.items() if now_ms - e.last_timestamp >= expiration_ms]
        for pid in gone:
            del self.producers[pid]
        return gone
