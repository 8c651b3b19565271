"""Where offsets lie in a leader's log, for both front ends: ListOffsets (Kafka's
ReplicaManager.fetchOffset: the earliest offset, the latest, that is the high watermark a
consumer can read to (the last stable offset for read_committed), the record with the largest
timestamp (KIP-734), or the first offset at or after a time) and OffsetsForLeaderEpoch
(KIP-101/279: where an epoch ends, for a follower truncating its log and for a consumer
validating its position after a leader change, KIP-320)."""
from __future__ import annotations

from common.errors import ErrorCode, KafkaError

from .replica_manager import ReplicaManager
from .requests import (EpochEndOffset, ListOffsetsPartitionResponse, ListOffsetsRequest, ListOffsetsResponse,
                       ListOffsetsTopicResponse, OffsetForLeaderTopicResult, OffsetsForLeaderEpochRequest,
                       OffsetsForLeaderEpochResponse)

EARLIEST, LATEST = -2, -1
MAX_TIMESTAMP = -3  # KIP-734 (ListOffsets v7+): the record with the largest timestamp
EARLIEST_LOCAL = -4  # KIP-405 (v8+): the first offset on local disk, which is the earliest here
READ_COMMITTED = 1  # isolation level


def list_offsets(rm: ReplicaManager, request: ListOffsetsRequest) -> ListOffsetsResponse:
    resp = ListOffsetsResponse()
    for t in request.topics:
        tr = ListOffsetsTopicResponse(name=t.name)
        resp.topics.append(tr)
        for lp in t.partitions:
            a = ListOffsetsPartitionResponse(partition=lp.partition, timestamp=-1, offset=-1, leader_epoch=-1)
            tr.partitions.append(a)
            try:
                p = rm.leader(t.name, lp.partition, lp.current_leader_epoch)
                a.leader_epoch = p.leader_epoch
                if p.log.high_watermark < p.epoch_start_offset:
                    # A new leader learns the high watermark from its followers' fetches; until
                    # it has, "latest" would be too low (Kafka's KIP-207, OFFSET_NOT_AVAILABLE).
                    raise KafkaError(ErrorCode.OFFSET_NOT_AVAILABLE,
                                      f"Failed to fetch offsets for partition {p.name} with leader epoch "
                                      f"{p.leader_epoch} as this partition's high watermark "
                                      f"({p.log.high_watermark}) is lagging behind the start offset from the "
                                      f"beginning of this epoch ({p.epoch_start_offset}).")
                readable = p.log.last_stable_offset if request.isolation_level == READ_COMMITTED \
                    else p.log.high_watermark
                if lp.timestamp in (EARLIEST, EARLIEST_LOCAL):
                    a.offset = p.log.log_start_offset
                elif lp.timestamp == LATEST:
                    a.offset = readable
                elif lp.timestamp == MAX_TIMESTAMP:
                    found = p.log.max_timestamp_offset(readable)
                    if found is not None:
                        a.offset, a.timestamp = found
                elif lp.timestamp < 0:
                    raise KafkaError(ErrorCode.INVALID_REQUEST, f"unsupported timestamp {lp.timestamp}: use -4 or -2 "
                                                                 f"(earliest), -1 (latest), -3 (max timestamp) or a "
                                                                 f"time in ms")
                else:
                    found = p.log.offset_for_timestamp(lp.timestamp)
                    if found is not None:
                        a.offset, a.timestamp = found
            except KafkaError as e:
                a.error_code, a.error_message = int(e.code), e.message
    return resp


def offsets_for_leader_epoch(rm: ReplicaManager, request: OffsetsForLeaderEpochRequest
                             ) -> OffsetsForLeaderEpochResponse:
    resp = OffsetsForLeaderEpochResponse()
    for t in request.topics:
        tr = OffsetForLeaderTopicResult(name=t.name, topic_id=t.topic_id)
        resp.topics.append(tr)
        for op in t.partitions:
            a = EpochEndOffset(partition=op.partition, leader_epoch=-1, end_offset=-1)
            tr.partitions.append(a)
            try:
                p = rm.partition(t.name, op.partition, t.topic_id)
                p.check_leader(op.current_leader_epoch)
                a.leader_epoch, a.end_offset = p.log.end_offset_for_epoch(op.leader_epoch)
            except KafkaError as e:
                a.error_code, a.error_message = int(e.code), e.message
    return resp
