"""Produce (Kafka's ReplicaManager.appendRecords).

- acks must be 0, 1 or -1; anything else answers INVALID_REQUIRED_ACKS for every partition
  and appends nothing.
- Each partition is checked and appended on its own, so one can fail while others succeed:
  unknown partition, not the leader, batch over ``max.message.bytes``, bad CRC or records.
- With acks=-1 the ISR must have at least ``min.insync.replicas`` members *before* the append
  (NOT_ENOUGH_REPLICAS), and the answer waits until the high watermark passes the batch, that
  is, until every ISR member has it (or ``timeout_ms``: REQUEST_TIMED_OUT).
- A client may not write an internal topic (``__consumer_offsets``, ``__transaction_state``):
  INVALID_TOPIC_EXCEPTION, as Kafka answers; the group coordinator appends to its partitions
  itself, without a produce request.
- acks=1 answers after the leader's append, acks=0 not at all (the ProduceNoAck stream).
- A batch of an idempotent producer is checked against the partition's producer state
  (``producer_state``): a retry of a batch already in the log is answered with its original
  offsets and not written again (with acks=-1 it still waits for the ISR to have the
  original); a gap in sequence numbers is OUT_OF_ORDER_SEQUENCE_NUMBER, an older producer
  epoch INVALID_PRODUCER_EPOCH, an unknown producer UNKNOWN_PRODUCER_ID.
- A transactional producer's first batch in a partition (its transaction is not open there
  yet) is written only once its transaction's coordinator confirms the partition was added
  (KIP-890 part 1, ``transaction_verification``); else INVALID_TXN_STATE.
- A topic whose ``compression.type`` names a codec gets its batches in that codec (the leader
  recompresses, as Kafka's does); ``producer`` keeps what the producer sent.
- A topic with ``message.timestamp.type=LogAppendTime`` gets the leader's clock as each
  batch's max timestamp (the timestamp-type bit set, the CRC recomputed), and the answer says
  which (``log_append_time``; -1 for CreateTime).
"""
from __future__ import annotations

import asyncio
import logging
import time

from common.errors import ErrorCode, KafkaError
from .log_store import StorageFailure
from .partition import Partition
from .partition_log import AppendInfo
from clients.compression import Codec
from clients.records import is_transactional, recompress, set_log_append_time, validate_batch
from protos.broker_pb2 import RecordBatch
from clients.topics import INTERNAL_TOPICS
from .replica_manager import ReplicaManager
from .requests import (ProducePartitionResponse, ProduceRequest, ProduceResponse, ProduceTopicResponse,
                       RecordError)

log = logging.getLogger("brokerd.produce")

DEFAULT_TIMEOUT_MS = 30_000
VALID_ACKS = (-1, 0, 1)

#: A partition's answer, the partition, its checked batch and that batch's records.
Checked = tuple[ProducePartitionResponse, Partition, RecordBatch, bytes]


def _error(answer: ProducePartitionResponse, e: KafkaError) -> None:
    answer.error_code = int(e.code)
    answer.error_message = e.message
    answer.record_errors.extend(RecordError(batch_index=i, message=m) for i, m in e.record_errors)
    answer.base_offset = -1
    answer.log_append_time = -1


async def produce(rm: ReplicaManager, req: ProduceRequest) -> ProduceResponse:
    resp = ProduceResponse()
    if req.acks not in VALID_ACKS:
        e = KafkaError(ErrorCode.INVALID_REQUIRED_ACKS,
                        f"Produce request specified an invalid value for required acks: {req.acks}.")
        for t in req.topics:
            tr = ProduceTopicResponse(name=t.name)
            resp.topics.append(tr)
            for pd in t.partitions:
                a = ProducePartitionResponse(partition=pd.partition, log_start_offset=-1)
                tr.partitions.append(a)
                _error(a, e)
        return resp
    # Every partition's batch is checked first, then all are appended at once: each append
    # takes its offsets (and its producer's sequence) in its first step, before any await, so
    # the batches of one request are ordered before those of the next request to arrive. A
    # batch's records are read out of it once (each read of a protobuf's bytes copies them),
    # checked and stored from there.
    checked: list[Checked] = []
    for t in req.topics:
        tr = ProduceTopicResponse(name=t.name)
        resp.topics.append(tr)
        for pd in t.partitions:
            a = ProducePartitionResponse(partition=pd.partition, log_append_time=-1, log_start_offset=-1)
            tr.partitions.append(a)
            try:
                if t.name in INTERNAL_TOPICS:
                    raise KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION, f"Cannot append to internal topic {t.name}")
                p = rm.leader(t.name, pd.partition)
                batch = pd.batch
                if batch is None:
                    raise KafkaError(ErrorCode.INVALID_REQUEST, f"no record batch for {p.name}")
                records = batch.records
                validate_batch(batch, p.name, p.config.max_message_bytes, require_keys=p.config.compact,
                               records=records)
                if p.config.compression_type != "producer":
                    recompressed = recompress(batch, Codec.named(p.config.compression_type))
                    if recompressed is not batch:
                        batch, records = recompressed, recompressed.records
                if p.config.log_append_time:
                    a.log_append_time = int(time.time() * 1000)
                    set_log_append_time(batch, a.log_append_time)
            except KafkaError as e:
                _error(a, e)
                continue
            checked.append((a, p, batch, records))
    if req.transactional_id is not None and rm.txn_verifier is not None:
        checked = await _verified(rm, req.transactional_id, checked)
    # All the batches are written in this one step, each partition's outcome kept in turn;
    # only writes that are durable once their fsync ends (log.flush.interval.messages=1) are
    # awaited, together: no task per partition.
    written: list[tuple[AppendInfo, asyncio.Future | None] | Exception] = []
    for _, p, batch, records in checked:
        try:
            written.append(p.write_as_leader(batch, req.acks, records))
        except Exception as e:
            written.append(e)
    durable = [w[1] for w in written if isinstance(w, tuple) and w[1] is not None]
    if durable:
        await _all_done(durable)
    waits: list[tuple[ProducePartitionResponse, Partition, int]] = []
    for (a, p, _, _), w in zip(checked, written, strict=True):
        outcome: AppendInfo | BaseException
        if isinstance(w, tuple):
            info, fut = w
            failed = fut.exception() if fut is not None else None
            outcome = failed if failed is not None else p.appended_as_leader(info)
        else:
            outcome = w
        if isinstance(outcome, StorageFailure):  # Kafka's KafkaStorageException, per partition
            outcome = KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, str(outcome))
        if isinstance(outcome, KafkaError):
            _error(a, outcome)
            continue
        if isinstance(outcome, BaseException):
            raise outcome
        info = outcome
        a.base_offset = info.first_offset
        a.log_start_offset = p.log.log_start_offset
        if not info.duplicate:
            rm.topic_stats.produced(p.topic, info.bytes, info.records)
        if req.acks == -1:
            waits.append((a, p, info.last_offset + 1))
    if waits:
        await _replicated(waits, (req.timeout_ms if req.timeout_ms > 0 else DEFAULT_TIMEOUT_MS) / 1000)
    return resp


async def _verified(rm: ReplicaManager, transactional_id: str, checked: list[Checked]) -> list[Checked]:
    """KIP-890 part 1: the transactional batches that would open their producer's transaction
    in a partition go ahead only if the coordinator says the partition was added."""
    first = [(a, p, b) for a, p, b, _ in checked
             if is_transactional(b) and b.producer_id not in p.log.producers.ongoing]
    if not first:
        return checked
    pid, epoch = first[0][2].producer_id, first[0][2].producer_epoch
    assert rm.txn_verifier is not None
    missing, error = await rm.txn_verifier.not_added(transactional_id, pid, epoch, [(p.topic, p.index)
                                                                                   for _, p, _ in first])
    refused = {id(a) for a, p, _ in first if error is not None or (p.topic, p.index) in missing}
    for a, p, _ in first:
        if id(a) in refused:
            _error(a, error or KafkaError(ErrorCode.INVALID_TXN_STATE,
                                           f"partition {p.name} is not in the ongoing transaction of "
                                           f"{transactional_id}: add it first (AddPartitionsToTxn)"))
    return [c for c in checked if id(c[0]) not in refused]


async def _replicated(waits: list[tuple[ProducePartitionResponse, Partition, int]], timeout: float) -> None:
    """acks=all: each partition's answer once the high watermark passes its batch (Kafka's
    DelayedProduce, ``Partition.wait_for_replication``), REQUEST_TIMED_OUT for those it has not
    passed within ``timeout`` seconds; the partitions waited for together (one timer, no task
    per partition)."""
    waiting: list[tuple[ProducePartitionResponse, Partition, int, asyncio.Future | None]] = []
    for a, p, required in waits:
        try:
            waiting.append((a, p, required, p.replication_waiter(required)))
        except KafkaError as e:
            _error(a, e)
    futures = [fut for *_, fut in waiting if fut is not None]
    if futures:
        await _all_done(futures, timeout)
    for a, p, required, fut in waiting:
        try:
            if fut is not None:
                if fut.cancelled():
                    raise p.not_replicated(required, timeout)
                fut.result()  # the KafkaError it failed with, if any (this replica stopped leading)
            p.check_replicated()
        except KafkaError as e:
            _error(a, e)


async def _all_done(futures: list[asyncio.Future], timeout: float | None = None) -> None:
    """Wait for ``futures`` (one waiter for them all); those not done when the wait ends (the
    timeout passed, or this request was cancelled) are cancelled, as ``wait_for`` does: nobody
    else awaits them, and one failed later would be logged as never retrieved."""
    try:
        await asyncio.wait(futures, timeout=timeout)
    finally:
        for fut in futures:
            if not fut.done():
                fut.cancel()


def first_error(resp: ProduceResponse) -> KafkaError | None:
    """For acks=0 streams: the first partition that failed."""
    for t in resp.topics:
        for a in t.partitions:
            if a.error_code:
                return KafkaError(ErrorCode.of(a.error_code), f"{t.name}-{a.partition}: {a.error_message}")
    return None
