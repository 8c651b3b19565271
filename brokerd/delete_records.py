"""DeleteRecords (Kafka's ReplicaManager.deleteRecords): move a partition's log start offset
forward on its leader, deleting the batches wholly below it, for both front ends.

The new start is persisted with the log's state, so it survives a restart; followers learn it
from the ``log_start_offset`` of the leader's fetch responses and delete below it too
(``replica_fetcher``), and consumers positioned below it are answered OFFSET_OUT_OF_RANGE and
reset per ``auto.offset.reset``. The answer's low watermark is the leader's new log start: it
does not wait for the followers (Kafka's DelayedDeleteRecords does)."""
from __future__ import annotations

from clients.topics import INTERNAL_TOPICS
from common.errors import ErrorCode, KafkaError

from .replica_manager import ReplicaManager
from .requests import (DeleteRecordsPartitionResponse, DeleteRecordsRequest, DeleteRecordsResponse,
                       DeleteRecordsTopicResponse)

HIGH_WATERMARK = -1  # the offset that means "everything below the high watermark"


def delete_records(rm: ReplicaManager, request: DeleteRecordsRequest) -> DeleteRecordsResponse:
    resp = DeleteRecordsResponse()
    for t in request.topics:
        tr = DeleteRecordsTopicResponse(name=t.name)
        resp.topics.append(tr)
        for dp in t.partitions:
            a = DeleteRecordsPartitionResponse(partition=dp.partition, low_watermark=-1)
            tr.partitions.append(a)
            try:
                a.low_watermark = _delete_before(rm, t.name, dp.partition, dp.offset)
            except KafkaError as e:
                a.error_code, a.error_message = int(e.code), e.message
    return resp


def _delete_before(rm: ReplicaManager, topic: str, index: int, offset: int) -> int:
    """Kafka's Partition.deleteRecordsOnLeader: the new log start offset."""
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
    return plog.log_start_offset
