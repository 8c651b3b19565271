"""The producer's record accumulator (Kafka's RecordAccumulator): a deque of
batches per partition that ``send`` appends to and the sender drains.

A batch is ready when it is full (``batch.size``), has waited ``linger.ms``, or a flush or
close is in progress; a retried batch waits ``retry.backoff.ms``. Draining takes the first
batch of each of a node's partitions in turn, starting where the last drain stopped, so no
partition starves, until ``max.request.size``. ``buffer.memory`` bounds what is buffered and
in flight: ``send`` blocks while it is used up, for at most ``max.block.ms``.
"""
from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from typing import Any

from protos import broker_pb2 as pb

from .cluster_view import KafkaTimeoutError
from .compression import Codec
from .records import Header, RecordsBuilder, set_producer

RECORD_OVERHEAD = 24  # offset and timestamp deltas, lengths, attributes: an upper bound per record


@dataclass(frozen=True, slots=True)
class RecordMetadata:
    """Where a record was written (Kafka's RecordMetadata); offset -1 with acks=0."""

    topic: str
    partition: int
    offset: int
    timestamp: int


class ProducerBatch:
    """A partition's batch being filled (Kafka's ProducerBatch): its records are encoded as they
    are appended (``RecordsBuilder``), so no object is kept per record."""

    __slots__ = ("topic", "partition", "records", "size", "created", "attempts", "last_attempt", "future",
                 "capacity", "_encoded", "closed", "codec", "producer_epoch", "base_sequence")

    def __init__(self, topic: str, partition: int, capacity: int, codec: Codec = Codec.NONE) -> None:
        self.topic = topic
        self.partition = partition
        self.records = RecordsBuilder()
        self.size = 0
        self.capacity = capacity
        self.created = time.monotonic()
        self.attempts = 0
        self.last_attempt = 0.0
        self.future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._encoded: pb.RecordBatch | None = None
        #: Set once the batch is encoded (first sent): a retry resends those bytes, so a record
        #: appended afterwards would be acknowledged without ever being written (Kafka closes a
        #: drained batch for appends the same way).
        self.closed = False
        self.codec = codec
        #: An idempotent producer's epoch and sequence for the batch, set when first drained and
        #: kept by retries (the broker recognises a retry by them); None until then.
        self.producer_epoch = -1
        self.base_sequence: int | None = None

    @property
    def full(self) -> bool:
        return self.closed or self.size >= self.capacity

    @property
    def record_count(self) -> int:
        return self.records.count

    def try_append(self, key: bytes | None, value: bytes | None, ts: int, headers: Sequence[Header], size: int) -> int:
        """The record's index in the batch, or -1 when it does not fit (a first record always does)
        or the batch is closed (already sent: it goes out again as it was)."""
        if self.closed or (self.records.count and self.size + size > self.capacity):
            return -1
        i = self.records.append(key, value, ts, headers)
        self.size += size
        return i

    def encoded(self) -> pb.RecordBatch:
        """The wire batch, built (and compressed) once so a retry sends the same bytes and CRC."""
        if self._encoded is None:
            self.closed = True
            self._encoded = self.records.build(self.codec)
        return self._encoded

    def set_producer(self, producer_id: int, epoch: int, base_sequence: int, transactional: bool = False) -> None:
        self.producer_epoch, self.base_sequence = epoch, base_sequence
        if self._encoded is None:  # first sent: built with the producer's fields, one CRC
            self.closed = True
            self._encoded = self.records.build(self.codec, producer_id, epoch, base_sequence, transactional)
        else:  # numbered again under a new epoch (KIP-360)
            set_producer(self._encoded, producer_id, epoch, base_sequence, transactional)

    def done(self, base_offset: int) -> None:
        if not self.future.done():
            self.future.set_result(base_offset)

    def fail(self, error: BaseException) -> None:
        if not self.future.done():
            self.future.set_exception(error)
            self.future.exception()  # retrieved: callers may never await every record


class RecordFuture:
    """What ``send`` returns: await it for the record's RecordMetadata (Kafka's
    FutureRecordMetadata: the batch's answer plus the record's place in it and timestamp)."""

    __slots__ = ("batch", "index", "timestamp")

    def __init__(self, batch: ProducerBatch, index: int, timestamp: int) -> None:
        self.batch = batch
        self.index = index
        self.timestamp = timestamp

    def __await__(self) -> Generator[Any, None, RecordMetadata]:
        base = yield from asyncio.shield(self.batch.future).__await__()
        return self._metadata(base)

    def _metadata(self, base: int) -> RecordMetadata:
        return RecordMetadata(self.batch.topic, self.batch.partition, base + self.index if base >= 0 else -1,
                              self.timestamp)

    def done(self) -> bool:
        return self.batch.future.done()

    def exception(self) -> BaseException | None:
        return self.batch.future.exception()

    def result(self) -> RecordMetadata:
        return self._metadata(self.batch.future.result())

    def add_done_callback(self, fn: Callable[["RecordFuture"], None]) -> None:
        self.batch.future.add_done_callback(lambda _: fn(self))


class RecordAccumulator:
    def __init__(self, batch_size: int, linger_ms: int, buffer_memory: int, retry_backoff_ms: int,
                 codec: Codec = Codec.NONE) -> None:
        self.batch_size = batch_size
        self.codec = codec
        #: Whether a partition's first batch may go now (an idempotent producer holds a retried
        #: batch until every earlier one of its partition is answered).
        self.may_send: Callable[[ProducerBatch], bool] = lambda batch: True
        self.linger_s = linger_ms / 1000
        self.buffer_memory = buffer_memory
        self.retry_backoff_s = retry_backoff_ms / 1000
        self.batches: dict[tuple[str, int], deque[ProducerBatch]] = {}
        self.incomplete: set[ProducerBatch] = set()
        self.used = 0
        self.flushing = 0
        self.closing = False
        self._freed = asyncio.Event()
        self._drain_index: dict[int, int] = {}

    # -- appending --------------------------------------------------------------------------------

    async def reserve(self, size: int, deadline: float, max_block_ms: int) -> None:
        """Wait for ``buffer.memory`` to have room for ``size`` bytes."""
        while self.used + size > self.buffer_memory and self.used > 0:
            left = deadline - time.monotonic()
            if left <= 0:
                raise KafkaTimeoutError(f"Failed to allocate memory within the configured max blocking time "
                                        f"{max_block_ms} ms.")
            self._freed.clear()
            try:
                await asyncio.wait_for(self._freed.wait(), left)
            except asyncio.TimeoutError:
                pass

    def append(self, topic: str, partition: int, key: bytes | None, value: bytes | None, ts: int,
               headers: Sequence[Header], size: int, abort_on_new_batch: bool) -> tuple[RecordFuture | None, bool]:
        """Append to the partition's last batch; ``(None, False)`` when a new batch is needed and
        ``abort_on_new_batch`` (the sticky partitioner then moves on). The flag says whether the
        sender should be woken: a batch just filled up or a new one began."""
        dq = self.batches.get((topic, partition))
        if dq is None:
            dq = self.batches[(topic, partition)] = deque()
        if dq:
            last = dq[-1]
            i = last.try_append(key, value, ts, headers, size)
            if i >= 0:  # so it was not full before (try_append refuses a full batch): did it fill up?
                self.used += size
                return RecordFuture(last, i, ts), last.size >= last.capacity
        if abort_on_new_batch:
            return None, False
        batch = ProducerBatch(topic, partition, self.batch_size, self.codec)
        i = batch.try_append(key, value, ts, headers, size)
        dq.append(batch)
        self.incomplete.add(batch)
        self.used += size
        return RecordFuture(batch, i, ts), True

    def deallocate(self, batch: ProducerBatch) -> None:
        self.incomplete.discard(batch)
        self.used -= batch.size
        self._freed.set()

    def reenqueue(self, batch: ProducerBatch) -> None:
        """A batch to retry goes back to the front of its partition's queue, among the other
        retries in sequence order (Kafka's insertInSequenceOrder). It is closed (it was encoded
        when first sent), so ``append`` starts a new batch behind it."""
        dq = self.batches.setdefault((batch.topic, batch.partition), deque())
        i = 0
        if (sequence := batch.base_sequence) is not None:
            while i < len(dq) and (ahead := dq[i].base_sequence) is not None and ahead < sequence:
                i += 1
        dq.insert(i, batch)

    # -- the sender's side ------------------------------------------------------------------------

    def ready(self, leader_of: Callable[[str, int], int | None], now: float) -> tuple[set[int], float, set[str]]:
        """Nodes with a sendable batch, the time until the next may become sendable, and topics
        whose leader is unknown (Kafka's ready())."""
        nodes: set[int] = set()
        next_check = float("inf")
        unknown: set[str] = set()
        exhausted = self.used >= self.buffer_memory
        for (topic, partition), dq in self.batches.items():
            if not dq:
                continue
            leader = leader_of(topic, partition)
            if leader is None:
                unknown.add(topic)
                continue
            if leader in nodes:
                continue
            first = dq[0]
            if not self.may_send(first):
                continue  # the sender wakes when the batch it waits for is answered
            backing_off = first.attempts > 0 and now - first.last_attempt < self.retry_backoff_s
            wait = self.retry_backoff_s if backing_off else self.linger_s
            waited = now - (first.last_attempt if backing_off else first.created)
            full = len(dq) > 1 or first.full
            sendable = full or waited >= wait or exhausted or self.closing or self.flushing > 0
            if sendable and not backing_off:
                nodes.add(leader)
            else:
                next_check = min(next_check, max(wait - waited, 0.0))
        return nodes, next_check, unknown

    def drain(self, partitions: list[tuple[str, int]], node: int, max_size: int, now: float) -> list[ProducerBatch]:
        """One batch per partition in turn, from where the last drain stopped, up to
        ``max_size`` bytes (the first batch always goes)."""
        if not partitions:
            return []
        start = self._drain_index.get(node, 0) % len(partitions)
        out: list[ProducerBatch] = []
        size = 0
        i = start
        while True:
            dq = self.batches.get(partitions[i])
            if dq:
                first = dq[0]
                backing_off = first.attempts > 0 and now - first.last_attempt < self.retry_backoff_s
                if not backing_off and self.may_send(first):
                    if out and size + first.size > max_size:
                        break
                    out.append(dq.popleft())
                    size += first.size
            i = (i + 1) % len(partitions)
            if i == start:
                break
        self._drain_index[node] = i
        return out

    def expired(self, now: float, delivery_timeout_s: float) -> list[ProducerBatch]:
        """Queued batches older than ``delivery.timeout.ms``, removed from their queues."""
        out = []
        for dq in self.batches.values():
            while dq and now - dq[0].created > delivery_timeout_s:
                out.append(dq.popleft())
        return out

    def has_queued(self) -> bool:
        return any(self.batches.values())
