"""ISR maintenance on the partition leader (Kafka's Partition.maybeShrinkIsr: the leader tracks its followers' lag,
drops a follower that falls too far behind, and takes it back once it has caught up).

A follower leaves the ISR when it has not caught up with the leader's log end for
``replica.lag.time.max.ms`` (Kafka's default 30 s); it comes back once its log end has reached
the high watermark and the leader's current epoch. The leader does not change the ISR itself:
it asks the controller with AlterPartition (one request per partition in flight), and the
change takes effect when the controller commits it; until then the HW is computed over the
larger of the two sets (see ``partition``).

A refused or failed AlterPartition is not proposed again at once: followers fetch many times
a second, and a follower the controller will not take back yet (fenced, INELIGIBLE_REPLICA)
would be asked for as often. The partition backs off as Kafka's clients do (KIP-580:
``retry.backoff.ms`` 100 ms doubling up to ``retry.backoff.max.ms`` 1 s, with 20% jitter), and,
as Kafka's leaders do (KIP-841), no follower the metadata shows fenced or shutting down is
proposed at all."""
from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable, Iterable

from common.errors import ErrorCode as ControllerCode
from common.errors import KafkaError
from metadata.client import ControllerClient
from protos import controller_pb2 as cpb

from .partition import Partition

log = logging.getLogger("brokerd.isr")

#: Kafka's retry.backoff.ms and retry.backoff.max.ms (KIP-580), in seconds.
RETRY_BACKOFF_S, RETRY_BACKOFF_MAX_S = 0.1, 1.0


class IsrManager:
    def __init__(self, client: ControllerClient, broker_id: int, broker_epoch: Callable[[], int],
                 lag_max_ms: int, leaders: Callable[[], Iterable[Partition]],
                 eligible: Callable[[int], bool] = lambda replica: True) -> None:
        """``eligible``: whether a replica may join an ISR, as this broker's metadata has it
        (registered, unfenced, not shutting down)."""
        self.client = client
        self.broker_id = broker_id
        self.broker_epoch = broker_epoch
        self.lag_max_ms = lag_max_ms
        self.leaders = leaders
        self.eligible = eligible
        self._inflight: dict[Partition, asyncio.Task] = {}
        self._retry: dict[Partition, tuple[float, float]] = {}  # not before, the backoff that set it
        self._task: asyncio.Task | None = None
        self.shrinks = 0
        self.expands = 0

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._check_lag(), name="isr-shrink")

    async def stop(self) -> None:
        tasks = [t for t in [self._task, *self._inflight.values()] if t is not None]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._task = None
        self._inflight.clear()
        self._retry.clear()

    async def _check_lag(self) -> None:
        """Kafka checks every replica.lag.time.max.ms / 2."""
        period = max(0.05, self.lag_max_ms / 2000)
        while True:
            await asyncio.sleep(period)
            for p in [p for p in self._retry if not p.is_leader]:
                del self._retry[p]
            for p in list(self.leaders()):
                self.maybe_shrink(p)

    def _backing_off(self, p: Partition) -> bool:
        retry = self._retry.get(p)
        return retry is not None and time.monotonic() < retry[0]

    def _back_off(self, p: Partition) -> None:
        last = self._retry.get(p, (0.0, 0.0))[1]
        delay = min(RETRY_BACKOFF_MAX_S, 2 * last if last else RETRY_BACKOFF_S)
        self._retry[p] = (time.monotonic() + delay * random.uniform(0.8, 1.2), delay)

    def maybe_shrink(self, p: Partition) -> None:
        if not p.is_leader or p.pending_isr is not None or p in self._inflight or self._backing_off(p):
            return
        lagging = p.out_of_sync_replicas(self.lag_max_ms)
        if lagging:
            new_isr = tuple(r for r in p.isr if r not in lagging)
            log.info("shrinking the ISR of %s from %s to %s: replicas %s are more than %d ms behind",
                     p.name, list(p.isr), list(new_isr), lagging, self.lag_max_ms)
            self.shrinks += 1
            self._propose(p, new_isr)

    def maybe_expand(self, p: Partition, replica: int) -> None:
        if (not p.is_leader or p.pending_isr is not None or p in self._inflight or self._backing_off(p)
                or not p.can_join_isr(replica) or not self.eligible(replica)):
            return
        new_isr = tuple(r for r in p.replicas if r in p.isr or r == replica)
        log.info("expanding the ISR of %s from %s to %s: replica %d caught up to offset %d",
                 p.name, list(p.isr), list(new_isr), replica, p.followers[replica].log_end_offset)
        self.expands += 1
        self._propose(p, new_isr)

    def _propose(self, p: Partition, new_isr: tuple[int, ...]) -> None:
        p.pending_isr = new_isr
        self._inflight[p] = asyncio.get_running_loop().create_task(self._alter(p, new_isr))

    async def _alter(self, p: Partition, new_isr: tuple[int, ...]) -> None:
        epoch = p.leader_epoch
        try:
            r = await self.client.alter_partition(cpb.AlterPartitionRequest(
                broker_id=self.broker_id, broker_epoch=self.broker_epoch(), topic_id=p.topic_id.bytes,
                partition=p.index, leader_epoch=epoch, partition_epoch=p.partition_epoch, new_isr=new_isr))
            if r.error_code != ControllerCode.NONE:
                # FENCED_LEADER_EPOCH, INVALID_UPDATE_VERSION, NOT_LEADER_OR_FOLLOWER: our view is stale
                # and the metadata log will bring the newer state; INELIGIBLE_REPLICA: the follower
                # is fenced or shutting down. Either way, the next check proposes again if needed.
                log.info("AlterPartition for %s refused: %s: %s", p.name,
                         ControllerCode(r.error_code).name, r.error_message)
                if p.leader_epoch == epoch:
                    p.pending_isr = None
                self._back_off(p)
                return
            self._retry.pop(p, None)
            p.apply_isr(r.leader_epoch, r.partition_epoch, tuple(r.isr))
        except KafkaError as e:
            log.warning("AlterPartition for %s failed: %s", p.name, e)
            if p.leader_epoch == epoch:
                p.pending_isr = None
            self._back_off(p)
        finally:
            self._inflight.pop(p, None)
