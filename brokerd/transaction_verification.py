"""KIP-890 part 1, the partition leader's defence against a hanging transaction: before a
producer's first transactional batch in a partition (the producer has no transaction open
there) is written, the leader asks the transaction's coordinator whether the partition was
added to the producer's ongoing transaction. A batch for a partition that was not (a late
retry from a transaction already ended, or a client that skipped AddPartitionsToTxn) would
otherwise open a transaction no marker ever closes, holding the last stable offset forever.

Kafka's answers: a partition not in the transaction is INVALID_TXN_STATE; a stale epoch
INVALID_PRODUCER_EPOCH; a coordinator that cannot answer yet (moving, loading, busy) is
NOT_ENOUGH_REPLICAS, which producers retry.
"""
from __future__ import annotations

import asyncio
import logging

import grpc

from common.errors import KafkaError, ErrorCode
from clients.topics import TRANSACTION_STATE_TOPIC
from protos import broker_pb2 as pb

from .proto_codec import to_domain, to_wire
from .replica_manager import ReplicaManager
from .transaction_coordinator import TransactionCoordinator
from .transaction_requests import VerifyTxnPartitionsRequest, VerifyTxnPartitionsResponse, WritableTxnMarkerTopic
from .transaction_state import txn_partition_for

log = logging.getLogger("brokerd.transactions")

VERIFY_TIMEOUT_S = 10.0
#: What the coordinator's retriable answers become for the producer (Kafka's mapping).
_RETRIABLE = {ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.NOT_COORDINATOR,
              ErrorCode.CONCURRENT_TRANSACTIONS}


class TransactionVerifier:
    def __init__(self, rm: ReplicaManager, coordinator: TransactionCoordinator) -> None:
        self.rm = rm
        self.coordinator = coordinator
        #: The verification in flight per (topic, partition, producer id): a later one waits
        #: for it, so that a producer's batches are appended in the order they arrived.
        self._inflight: dict[tuple[str, int, int], asyncio.Future[None]] = {}

    async def not_added(self, transactional_id: str, producer_id: int, epoch: int,
                        partitions: list[tuple[str, int]]) -> tuple[set[tuple[str, int]], KafkaError | None]:
        """The partitions not in the producer's ongoing transaction, or an error for them all."""
        keys = [(t, i, producer_id) for t, i in partitions]
        earlier = [f for k in keys if (f := self._inflight.get(k)) is not None]
        mine: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        for k in keys:
            self._inflight[k] = mine
        try:
            if earlier:
                await asyncio.gather(*earlier, return_exceptions=True)
            return await self._verify(transactional_id, producer_id, epoch, partitions)
        finally:
            mine.set_result(None)
            for k in keys:
                if self._inflight.get(k) is mine:
                    del self._inflight[k]

    async def _verify(self, transactional_id: str, producer_id: int, epoch: int,
                      partitions: list[tuple[str, int]]) -> tuple[set[tuple[str, int]], KafkaError | None]:
        by_topic: dict[str, list[int]] = {}
        for topic, index in partitions:
            by_topic.setdefault(topic, []).append(index)
        req = VerifyTxnPartitionsRequest(transactional_id=transactional_id, producer_id=producer_id,
                                         producer_epoch=epoch, topics=[WritableTxnMarkerTopic(name=t, partitions=ps)
                                                                       for t, ps in by_topic.items()])
        try:
            resp = await self._ask(req)
        except KafkaError as e:
            return set(), e
        code = ErrorCode.of(resp.error_code)
        if code in _RETRIABLE:
            return set(), KafkaError(ErrorCode.NOT_ENOUGH_REPLICAS, f"the transaction coordinator of "
                                                                     f"{transactional_id} could not verify the "
                                                                     f"partitions yet: {code.name}")
        if code == ErrorCode.INVALID_PRODUCER_ID_MAPPING:
            return set(), KafkaError(ErrorCode.INVALID_TXN_STATE, resp.error_message)
        if code != ErrorCode.NONE:
            return set(), KafkaError(code, resp.error_message)
        return {(t.name, i) for t in resp.not_added for i in t.partitions}, None

    async def _ask(self, req: VerifyTxnPartitionsRequest) -> VerifyTxnPartitionsResponse:
        t = self.rm.image.topics_by_name.get(TRANSACTION_STATE_TOPIC)
        reg = t.partitions.get(txn_partition_for(req.transactional_id, len(t.partitions))) if t else None
        if reg is None:
            raise KafkaError(ErrorCode.NOT_ENOUGH_REPLICAS, f"no coordinator for {req.transactional_id}")
        if reg.leader == self.rm.broker_id:
            return self.coordinator.verify(req)
        stub = self.coordinator.markers.stub(reg.leader)
        if stub is None:
            raise KafkaError(ErrorCode.NOT_ENOUGH_REPLICAS, f"no address for coordinator broker {reg.leader}")
        try:
            wire = await stub.VerifyTxnPartitions(to_wire(pb.VerifyTxnPartitionsRequest, req), timeout=VERIFY_TIMEOUT_S)
        except grpc.aio.AioRpcError as e:
            raise KafkaError(ErrorCode.NOT_ENOUGH_REPLICAS, f"the transaction coordinator (broker {reg.leader}) "
                                                             f"did not answer: {e.details()}") from None
        return to_domain(VerifyTxnPartitionsResponse, wire)
