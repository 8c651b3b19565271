"""Producer ids for idempotent producers (Kafka's InitProducerId without transactions): the
broker hands them out from blocks the controller allocates (AllocateProducerIds, recorded in
the metadata log as ProducerIdsRecord, so no id is ever handed out twice), and bumps the epoch
of a returning producer."""
from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from common.errors import ErrorCode, KafkaError
from metadata.client import ControllerClient
from protos import controller_pb2 as cpb

from .requests import InitProducerIdRequest, InitProducerIdResponse

log = logging.getLogger("brokerd.producer_ids")

MAX_EPOCH = 32767  # producer epochs are int16


class ProducerIdManager:
    def __init__(self, client: ControllerClient, broker_id: int, broker_epoch: Callable[[], int]) -> None:
        self.client = client
        self.broker_id = broker_id
        self.broker_epoch = broker_epoch
        self._next = 0
        self._end = 0  # the block [_next, _end) is ours
        self._lock = asyncio.Lock()

    async def next_id(self) -> int:
        async with self._lock:
            if self._next >= self._end:
                try:
                    r = await self.client.allocate_producer_ids(cpb.AllocateProducerIdsRequest(
                        broker_id=self.broker_id, broker_epoch=self.broker_epoch()))
                except KafkaError as e:
                    raise KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE,
                                      f"no producer id: the controller did not allocate a block ({e})") from None
                if r.error_code:
                    raise KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE,
                                      f"no producer id: the controller answered {ErrorCode.of(r.error_code).name}")
                self._next, self._end = r.producer_id_start, r.producer_id_start + r.producer_id_len
                log.info("producer ids %d..%d allocated to this broker", self._next, self._end - 1)
            pid = self._next
            self._next += 1
            return pid

    async def init_producer_id(self, req: InitProducerIdRequest) -> InitProducerIdResponse:
        """A new id with epoch 0, or, for a returning producer, its id with the next epoch (a
        new id once its epochs are used up)."""
        try:
            if req.producer_id is not None:
                if req.producer_id < 0 or not 0 <= req.producer_epoch <= MAX_EPOCH:
                    raise KafkaError(ErrorCode.INVALID_REQUEST,
                                      f"producer id {req.producer_id} with epoch {req.producer_epoch}")
                if req.producer_epoch < MAX_EPOCH:
                    return InitProducerIdResponse(producer_id=req.producer_id,
                                                  producer_epoch=req.producer_epoch + 1)
            return InitProducerIdResponse(producer_id=await self.next_id(), producer_epoch=0)
        except KafkaError as e:
            return InitProducerIdResponse(error_code=int(e.code), error_message=e.message,
                                          producer_id=-1, producer_epoch=-1)
