"""Transaction markers (KIP-98): the partition leader's side, appending a commit or abort
control batch to each partition named (Kafka's WriteTxnMarkers handling), and the
coordinator's side, sending them to the leader of every partition of a transaction until
each has its marker (Kafka's TransactionMarkerChannelManager).

A marker is appended like data, with acks=all: the coordinator completes the transaction
only once every in-sync replica has it, so a leader change cannot lose it. A leader that
moved, or is briefly short of in-sync replicas, is retried; a partition whose topic was
deleted needs no marker.
"""
from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

import grpc

from common.errors import KafkaError, ErrorCode
from clients.records import marker_batch
from common.channels import dial
from protos import broker_pb2 as pb
from protos import broker_pb2_grpc

from .proto_codec import to_domain, to_wire
from .replica_manager import ReplicaManager
from .transaction_requests import (WritableTxnMarker, WritableTxnMarkerPartitionResult, WritableTxnMarkerResult,
                                   WritableTxnMarkerTopic, WritableTxnMarkerTopicResult, WriteTxnMarkersRequest,
                                   WriteTxnMarkersResponse)

log = logging.getLogger("brokerd.transactions")

MARKER_TIMEOUT_S = 30.0
RETRY_BACKOFF_S = 0.1
_GRPC_OPTIONS = [("grpc.max_receive_message_length", 16 << 20)]
#: Told of each marker written here (topic, partition, producer id, commit): the group
#: coordinator's pending transactional offsets become committed or are dropped.
MarkerListener = Callable[[str, int, int, bool], None]


async def write_txn_markers(rm: ReplicaManager, req: WriteTxnMarkersRequest,
                            written: MarkerListener | None = None) -> WriteTxnMarkersResponse:
    """Append each marker to each named partition this broker leads, acks=all."""
    resp = WriteTxnMarkersResponse()
    now = int(time.time() * 1000)
    for m in req.markers:
        result = WritableTxnMarkerResult(producer_id=m.producer_id)
        resp.markers.append(result)
        for t in m.topics:
            tr = WritableTxnMarkerTopicResult(name=t.name)
            result.topics.append(tr)
            outcomes = await asyncio.gather(*(_append_marker(rm, m, t.name, i, now, written) for i in t.partitions))
            tr.partitions.extend(outcomes)
    return resp


async def _append_marker(rm: ReplicaManager, m: WritableTxnMarker, topic: str, index: int, now: int,
                         written: MarkerListener | None) -> WritableTxnMarkerPartitionResult:
    answer = WritableTxnMarkerPartitionResult(partition=index)
    try:
        p = rm.leader(topic, index)
        batch = marker_batch(m.producer_id, m.producer_epoch, m.transaction_result, m.coordinator_epoch, now)
        info = await p.append_as_leader(batch, -1)
        await p.wait_for_replication(info.last_offset + 1, MARKER_TIMEOUT_S)
        if written is not None:
            written(topic, index, m.producer_id, m.transaction_result)
    except KafkaError as e:
        answer.error_code, answer.error_message = int(e.code), e.message
    return answer


class MarkerSender:
    """Sends a transaction's markers to its partitions' leaders, this broker included."""

    def __init__(self, rm: ReplicaManager, written: MarkerListener | None = None) -> None:
        self.rm = rm
        self.written = written
        self._channels: dict[str, tuple[grpc.aio.Channel, broker_pb2_grpc.BrokerStub]] = {}

    async def close(self) -> None:
        channels, self._channels = self._channels, {}
        for channel, _ in channels.values():
            await channel.close()

    async def complete(self, producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int,
                       partitions: frozenset[tuple[str, int]]) -> None:
        """Returns once every partition that still exists has the marker (retrying as leaders
        move); cancelled when this broker stops being the coordinator."""
        left = set(partitions)
        while left:
            by_leader: dict[int, list[tuple[str, int]]] = {}
            for topic, index in sorted(left):
                t = self.rm.image.topics_by_name.get(topic)
                reg = t.partitions.get(index) if t is not None else None
                if reg is None:
                    left.discard((topic, index))  # deleted: nothing to mark
                    continue
                by_leader.setdefault(reg.leader, []).append((topic, index))
            sends = [self._send(leader, WritableTxnMarker(
                producer_id=producer_id, producer_epoch=producer_epoch, transaction_result=commit,
                coordinator_epoch=coordinator_epoch, topics=_topics(tps))) for leader, tps in by_leader.items()]
            for done in await asyncio.gather(*sends):
                left -= done
            if left:
                await asyncio.sleep(RETRY_BACKOFF_S)

    async def _send(self, leader: int, marker: WritableTxnMarker) -> set[tuple[str, int]]:
        """The partitions that got their marker from ``leader``."""
        req = WriteTxnMarkersRequest(markers=[marker])
        try:
            if leader == self.rm.broker_id:
                resp = await write_txn_markers(self.rm, req, self.written)
            else:
                stub = self.stub(leader)
                if stub is None:
                    return set()
                wire = await stub.WriteTxnMarkers(to_wire(pb.WriteTxnMarkersRequest, req), timeout=MARKER_TIMEOUT_S)
                resp = to_domain(WriteTxnMarkersResponse, wire)
        except grpc.aio.AioRpcError as e:
            log.debug("markers to broker %d: %s", leader, e.details())
            return set()
        done = set()
        for r in resp.markers:
            for t in r.topics:
                for p in t.partitions:
                    if p.error_code == ErrorCode.NONE:
                        done.add((t.name, p.partition))
                    else:
                        log.debug("marker for %s-%d on broker %d: %s %s", t.name, p.partition, leader,
                                  ErrorCode.of(p.error_code).name, p.error_message)
        return done

    def stub(self, broker_id: int) -> broker_pb2_grpc.BrokerStub | None:
        address = self.rm.address_of(broker_id)
        if address is None:
            return None
        if address not in self._channels:
            channel = dial(address, self.rm.config.inter_broker_tls, _GRPC_OPTIONS)
            self._channels[address] = (channel, broker_pb2_grpc.BrokerStub(channel))
        return self._channels[address][1]


def _topics(partitions: list[tuple[str, int]]) -> list[WritableTxnMarkerTopic]:
    by_topic: dict[str, list[int]] = {}
    for topic, index in partitions:
        by_topic.setdefault(topic, []).append(index)
    return [WritableTxnMarkerTopic(name=t, partitions=ps) for t, ps in by_topic.items()]
