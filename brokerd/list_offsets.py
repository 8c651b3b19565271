"""ListOffsets (Kafka's ReplicaManager.fetchOffset): the earliest offset, the latest (the high
watermark: what a consumer can read) or the first offset at or after a time, from the leader."""
from __future__ import annotations

from clients.errors import BrokerError, ErrorCode
from protos import broker_pb2 as pb

from .replica_manager import ReplicaManager

EARLIEST, LATEST = -2, -1


def list_offsets(rm: ReplicaManager, request: pb.ListOffsetsRequest) -> pb.ListOffsetsResponse:
    resp = pb.ListOffsetsResponse()
    for t in request.topics:
        tr = resp.topics.add(name=t.name)
        for lp in t.partitions:
            a = tr.partitions.add(partition=lp.partition, timestamp=-1, offset=-1, leader_epoch=-1)
            try:
                epoch = lp.current_leader_epoch if lp.HasField("current_leader_epoch") else None
                p = rm.leader(t.name, lp.partition, epoch)
                a.leader_epoch = p.leader_epoch
                if lp.timestamp == EARLIEST:
                    a.offset = p.log.log_start_offset
                elif lp.timestamp == LATEST:
                    a.offset = p.log.high_watermark
                elif lp.timestamp < 0:
                    raise BrokerError(ErrorCode.INVALID_REQUEST, f"unsupported timestamp {lp.timestamp}: use -2 "
                                                                 f"(earliest), -1 (latest) or a time in ms")
                else:
                    found = p.log.offset_for_timestamp(lp.timestamp)
                    if found is not None:
                        a.offset, a.timestamp = found
            except BrokerError as e:
                a.error_code, a.error_message = int(e.code), e.message
    return resp
