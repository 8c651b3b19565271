"""What a broker tells clients about the cluster (Kafka's Metadata API), and about itself
(DescribeBroker), from its local metadata image: topics, partitions with leader, epoch,
replicas and ISR, and the unfenced brokers' endpoints on the listener the client uses."""
from __future__ import annotations

from common.errors import ErrorCode, KafkaError, capped
from metadata.image import MetadataImage
from metadata.topics import validate_name
from protos import broker_pb2 as pb

from .partition import Partition, now_ms
from .requests import BrokerEndpoint, MetadataRequest, MetadataResponse, PartitionMetadata, TopicMetadata

NO_LEADER = -1


def metadata_answer(image: MetadataImage, req: MetadataRequest, listener: str, controller_id: int) -> MetadataResponse:
    resp = MetadataResponse(cluster_id=image.cluster_id, controller_id=controller_id, metadata_offset=image.offset,
                               brokers=live_brokers(image, listener))
    live = {b.id for b in image.brokers.values() if not b.fenced}
    names = list(req.topics) or sorted(image.topics_by_name)
    for name in names:
        t = image.topics_by_name.get(name)
        if t is None:
            try:  # Kafka's getTopicMetadata: an illegal name is INVALID_TOPIC_EXCEPTION, not unknown
                validate_name(name)
            except KafkaError as e:
                resp.topics.append(TopicMetadata(name=name, error_code=int(ErrorCode.INVALID_TOPIC_EXCEPTION),
                                                 error_message=e.message))
                continue
            resp.topics.append(TopicMetadata(name=name, error_code=int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
                                             error_message=capped(f"Topic {name} does not exist.")))
            continue
        tm = TopicMetadata(name=name, topic_id=t.id.bytes)
        resp.topics.append(tm)
        for pid in sorted(t.partitions):
            p = t.partitions[pid]
            tm.partitions.append(PartitionMetadata(
                error_code=int(ErrorCode.NONE if p.leader != NO_LEADER else ErrorCode.LEADER_NOT_AVAILABLE),
                partition=pid, leader=p.leader, leader_epoch=p.leader_epoch, replicas=list(p.replicas),
                isr=list(p.isr), offline_replicas=[r for r in p.replicas if r not in live]))
    return resp


def live_brokers(image: MetadataImage, listener: str) -> list[BrokerEndpoint]:
    """The unfenced brokers, by id, with their endpoint on ``listener``."""
    out = []
    for b in sorted(image.brokers.values(), key=lambda b: b.id):
        e = next((e for e in b.endpoints if e.name == listener), None)
        if not b.fenced and e is not None:
            out.append(BrokerEndpoint(node_id=b.id, host=e.host, port=e.port, rack=b.rack or ""))
    return out


def replica_status(p: Partition) -> pb.ReplicaStatus:
    plog = p.log
    s = pb.ReplicaStatus(topic=p.topic, topic_id=p.topic_id.bytes, partition=p.index, role=p.role.value,
                         leader=p.leader, leader_epoch=p.leader_epoch, partition_epoch=p.partition_epoch,
                         replicas=p.replicas, isr=p.isr, log_start_offset=plog.log_start_offset,
                         log_end_offset=plog.log_end_offset, high_watermark=plog.high_watermark,
                         size_bytes=plog.size_bytes)
    if p.is_leader:
        now = now_ms()
        for r, st in sorted(p.followers.items()):
            s.followers.add(replica_id=r, log_end_offset=st.log_end_offset,
                            last_caught_up_ms_ago=int(now - st.last_caught_up_ms) if st.last_caught_up_ms else -1)
    return s
