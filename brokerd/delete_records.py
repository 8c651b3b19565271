"""DeleteRecords (Kafka's ReplicaManager.deleteRecords): move a partition's log start offset
forward on its leader, deleting the batches wholly below it, for both front ends.

The new start is persisted with the log's state, so it survives a restart; followers learn it
from the ``log_start_offset`` of the leader's fetch responses, delete below it too
(``replica_fetcher``) and send their own with their next fetch. As Kafka's
DelayedDeleteRecords, the answer waits until every replica on a live broker starts at the
offset, and its low watermark is the smallest of their log starts; a follower that does not
get there within the request's ``timeout_ms`` makes it REQUEST_TIMED_OUT (the records stay
deleted on the leader). Consumers positioned below the start are answered
OFFSET_OUT_OF_RANGE and reset per ``auto.offset.reset``."""
from __future__ import annotations

import asyncio

from clients.topics import INTERNAL_TOPICS
from common.errors import ErrorCode, KafkaError

from .partition import Partition
from .replica_manager import ReplicaManager
from .requests import (DeleteRecordsPartitionResponse, DeleteRecordsRequest, DeleteRecordsResponse,
                       DeleteRecordsTopicResponse)

HIGH_WATERMARK = -1  # the offset that means "everything below the high watermark"


async def delete_records(rm: ReplicaManager, request: DeleteRecordsRequest) -> DeleteRecordsResponse:
    resp = DeleteRecordsResponse()
    waits = []
    for t in request.topics:
        tr = DeleteRecordsTopicResponse(name=t.name)
        resp.topics.append(tr)
        for dp in t.partitions:
            a = DeleteRecordsPartitionResponse(partition=dp.partition, low_watermark=-1)
            tr.partitions.append(a)
            try:
                p, required = _delete_before(rm, t.name, dp.partition, dp.offset)
            except KafkaError as e:
                a.error_code, a.error_message = int(e.code), e.message
                continue
            waits.append(_await_followers(rm, p, required, request.timeout_ms, a))
    await asyncio.gather(*waits)
    return resp


async def _await_followers(rm: ReplicaManager, p: Partition, required: int, timeout_ms: int,
                           a: DeleteRecordsPartitionResponse) -> None:
    """Answer ``a`` once the live replicas of ``p`` start at ``required`` or later; on a timeout,
    REQUEST_TIMED_OUT with the low watermark the deletion found, as Kafka answers."""
    a.low_watermark = p.low_watermark(rm.alive)
    try:
        a.low_watermark = await p.wait_for_low_watermark(required, rm.alive, timeout_ms / 1000)
    except KafkaError as e:
        a.error_code, a.error_message = int(e.code), e.message
        if e.code != ErrorCode.REQUEST_TIMED_OUT:
            a.low_watermark = -1


def _delete_before(rm: ReplicaManager, topic: str, index: int, offset: int) -> tuple[Partition, int]:
    """Kafka's Partition.deleteRecordsOnLeader: the leader and the offset its replicas must start at."""
    if topic in INTERNAL_TOPICS:
        raise KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION, f"Cannot delete records of internal topic {topic}")
    p = rm.leader(topic, index)
    if not p.config.delete:
        raise KafkaError(ErrorCode.POLICY_VIOLATION,
                         f"Records of partition {p.name} can not be deleted due to the configured policy")
    plog = p.log
    wanted = plog.high_watermark if offset == HIGH_WATERMARK else offset
    if wanted < 0:
        raise KafkaError(ErrorCode.OFFSET_OUT_OF_RANGE, f"The offset {wanted} for partition {p.name} is not valid")
    if wanted > plog.high_watermark:
        raise KafkaError(ErrorCode.OFFSET_OUT_OF_RANGE,
                         f"Cannot increment the log start offset to {wanted} of partition {p.name} since it is "
                         f"larger than the high watermark {plog.high_watermark}")
    if wanted > plog.log_start_offset:
        plog.delete_before(wanted)
        p.notify()  # followers waiting in a fetch hear the new log start now
    return p, wanted
