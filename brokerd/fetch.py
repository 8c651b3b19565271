"""Fetch, for consumers and for followers (Kafka's ReplicaManager.fetchMessages).

A consumer (replica id -1) reads from the leader below the high watermark; a follower (its
broker id) reads up to the log end, and the offset it asks for *is* its log end offset, which
is how the leader learns how far each follower got, moves the high watermark and decides ISR
membership. When fewer than ``min_bytes`` are there the fetch waits up to ``max_wait_ms`` for
an append or a high watermark move (a long poll, Kafka's DelayedFetch). A read_committed
consumer reads below the last stable offset instead, and is told the aborted transactions
in what it read, whose records it drops (KIP-98). A consumer that names its rack (Fetch v11+)
may read from a follower, and the leader may send it to one (KIP-392, ``replica_selector``).
"""
from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from common.errors import ErrorCode, KafkaError
from .log_store import StorageFailure
from .partition import Partition
from .replica_manager import ReplicaManager
from .replica_selector import check_follower_read, preferred_read_replica
from .replication_quota import ReplicationQuota
from .offsets import READ_COMMITTED
from .requests import AbortedTransaction, FetchPartitionResponse, FetchRequest, FetchResponse, FetchTopicResponse

DEFAULT_MAX_BYTES = 52428800        # fetch.max.bytes
DEFAULT_PARTITION_MAX_BYTES = 1048576  # max.partition.fetch.bytes
MAX_WAIT_MS = 30_000


@dataclass(slots=True)
class _Read:
    answer: FetchPartitionResponse
    partition: Partition
    offset: int
    max_bytes: int


def _fail(answer: FetchPartitionResponse, e: KafkaError, p: Partition | None = None) -> None:
    answer.error_code = int(e.code)
    answer.error_message = e.message
    answer.high_watermark = answer.log_start_offset = -1
    if p is not None:
        answer.leader_id, answer.leader_epoch = p.leader, p.leader_epoch


async def fetch(rm: ReplicaManager, req: FetchRequest) -> FetchResponse:
    """Each partition's stored batches are answered as the log read them (``frames``)."""
    replica = req.replica_id
    follower = replica >= 0
    any_replica = not follower and req.rack_id is not None  # KIP-392: a follower may serve it
    resp = FetchResponse()
    reads: list[_Read] = []
    for t in req.topics:
        tr = FetchTopicResponse(name=t.name, topic_id=t.topic_id)
        resp.topics.append(tr)
        partition = _lookup(rm, t.name, t.topic_id)
        for fp in t.partitions:
            answer = FetchPartitionResponse(partition=fp.partition)
            tr.partitions.append(answer)
            epoch = fp.current_leader_epoch
            p = None
            try:
                p = partition(fp.partition)
                if not tr.name:
                    tr.name = p.topic
                if any_replica:
                    check_follower_read(p, epoch)
                else:
                    p.check_leader(epoch)
                if follower:
                    if replica not in p.followers:
                        raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER,
                                          f"Broker {replica} is not a follower of {p.name}")
                    rm.follower_fetched(p, replica, fp.fetch_offset, fp.log_start_offset)
                plog = p.log
                if fp.fetch_offset < plog.log_start_offset or fp.fetch_offset > plog.log_end_offset:
                    raise KafkaError(ErrorCode.OFFSET_OUT_OF_RANGE,
                                      f"Received request for offset {fp.fetch_offset} for partition {p.name}, but "
                                      f"we only have log segments in the range {plog.log_start_offset} to "
                                      f"{plog.log_end_offset}.")
                if any_replica and rm.config.rack_aware_reads and p.is_leader:
                    answer.preferred_read_replica = preferred_read_replica(p, rm.image, req.rack_id or "",
                                                                           fp.fetch_offset)
            except KafkaError as e:
                _fail(answer, e, p)
                if e.code == ErrorCode.OFFSET_OUT_OF_RANGE and p is not None:
                    answer.log_start_offset = p.log.log_start_offset
                    answer.high_watermark = p.log.high_watermark
                continue
            if answer.preferred_read_replica >= 0:  # as Kafka: no records, the consumer goes there
                answer.high_watermark, answer.log_start_offset = plog.high_watermark, plog.log_start_offset
                answer.last_stable_offset = plog.last_stable_offset
                continue
            reads.append(_Read(answer, p, fp.fetch_offset, fp.partition_max_bytes or DEFAULT_PARTITION_MAX_BYTES))
    max_bytes = req.max_bytes or DEFAULT_MAX_BYTES
    committed = not follower and req.isolation_level == READ_COMMITTED
    got = _read_all(reads, max_bytes, replica, rm.leader_quota, committed, any_replica)
    wait_ms = min(req.max_wait_ms, MAX_WAIT_MS)
    need = max(req.min_bytes, 1)
    if got < need and wait_ms > 0 and reads and len(reads) == _count(resp):
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait_ms / 1000
        moving = follower and any(replica in r.partition.adding for r in reads)
        while got < need:
            left = deadline - loop.time()
            if left <= 0:
                break
            # A replica being added that the throttle holds back is read again once the bucket
            # has refilled, not only when new data arrives: else a move of a quiet partition
            # crawls at one batch per replica.fetch.wait.max.ms.
            refill = rm.leader_quota.wait_seconds() if moving else 0.0
            fut = loop.create_future()
            for r in reads:
                r.partition.change_waiter(fut)
            # one timer that completes the waiter itself: a long poll that expires (every idle
            # follower fetch) wakes the loop once, where wait_for's cancel-and-wait took three
            timer = loop.call_at(loop.time() + (min(left, refill) if refill > 0 else left), _expire, fut)
            try:
                woken = await fut
            finally:
                timer.cancel()
                for r in reads:
                    r.partition.drop_waiter(fut)
            if woken is _EXPIRED and not 0 < refill < left:
                break
            got = _read_all(reads, max_bytes, replica, rm.leader_quota, committed, any_replica)
            if any(r.answer.error_code for r in reads):
                break
    for r in reads:
        n = r.answer.records_size
        rm.topic_stats.fetched(r.partition.topic, n, follower)
        if follower and replica in r.partition.adding:
            rm.leader_quota.record(n)
    return resp


_EXPIRED = object()  # a long poll's waiter completed by its timer, not by a change


def _expire(fut: asyncio.Future[object]) -> None:
    if not fut.done():
        fut.set_result(_EXPIRED)


def _lookup(rm: ReplicaManager, name: str, topic_id: bytes) -> Callable[[int], Partition]:
    """``rm.partition`` for the partitions of one topic of a fetch, its id made a UUID once:
    a follower names up to thousands of partitions of a topic in each fetch."""
    if len(topic_id) == 16:
        tid, partitions = uuid.UUID(bytes=topic_id), rm.partitions

        def by_id(index: int) -> Partition:
            p = partitions.get((tid, index))
            return p if p is not None else rm.partition(name, index, topic_id)
        return by_id
    return lambda index: rm.partition(name, index, topic_id)


def _count(resp: FetchResponse) -> int:
    return sum(len(t.partitions) for t in resp.topics)


def _read_all(reads: list[_Read], max_bytes: int, replica: int, quota: ReplicationQuota,
              committed: bool = False, any_replica: bool = False) -> int:
    """Fill each answer; returns the bytes read. The first partition with data returns at
    least one batch whatever the limits, so a fetch always makes progress, and only it: a later
    partition's next batch that does not fit what the limits leave is not sent (as Kafka's
    readFromLocalLog, whose cut batch clients drop); a replica being
    added gets nothing while the leader's replication throttle is exceeded. ``any_replica``:
    a follower serves it too, up to the high watermark it learned from the leader."""
    follower = replica >= 0
    throttled = follower and quota.wait_seconds() > 0
    total = 0
    for r in reads:
        p, a = r.partition, r.answer
        if p.stopped or not (p.is_leader or any_replica):
            _fail(a, KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER,
                                 f"Leader not local for partition {p.name} on broker {p.broker_id}"), p)
            continue
        plog = p.log
        budget = min(r.max_bytes, max_bytes - total)
        size = 0
        lso = plog.last_stable_offset
        end = plog.log_end_offset if follower else lso if committed else plog.high_watermark
        try:
            # nothing past the offset (a session's quiet partitions, every fetch): no read
            if r.offset < end and (budget > 0 or total == 0) and not (throttled and replica in p.adding):
                # a batch over the limits only for the first partition with data: for a later
                # one Kafka sends the cut start of it, which clients drop
                a.frames, size = plog.read(r.offset, max(budget, 1), end, min_one=total == 0)
            else:
                a.frames = []
            if committed and plog.producers.aborted:
                a.aborted_transactions = [AbortedTransaction(producer_id=x.producer_id, first_offset=x.first_offset)
                                          for x in plog.aborted_transactions(r.offset, lso)]
        except StorageFailure as e:  # a read failed its checksum: this partition's answer, as Kafka's
            a.frames = []
            _fail(a, KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, str(e)), p)
            continue
        a.last_stable_offset = lso
        a.high_watermark = plog.high_watermark
        a.log_start_offset = plog.log_start_offset
        total += size
    return total
