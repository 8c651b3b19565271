"""A broker's side of the lifecycle (Kafka's BrokerLifecycleManager): register with a new
incarnation id, heartbeat every ``broker.heartbeat.interval.ms`` with the metadata offset
replayed so far, learn whether the controller has fenced or unfenced us, and on shutdown ask
for a controlled shutdown so leadership moves away before the process stops."""
from __future__ import annotations

import asyncio
import logging
import uuid
from typing import Callable

from common.errors import ErrorCode, KafkaError
from metadata.client import ControllerClient
from protos import controller_pb2 as pb

log = logging.getLogger("brokerd.lifecycle")


class BrokerLifecycle:
    def __init__(self, client: ControllerClient, broker_id: int, cluster_id: str,
                 listeners: list[pb.Endpoint], *, rack: str = "", heartbeat_interval_s: float = 2.0,
                 metadata_offset: Callable[[], int] = lambda: 0, ready_to_unfence: bool = True) -> None:
        """``ready_to_unfence`` False: heartbeats ask to stay fenced (Kafka's wantFence) until
        ``ready_to_unfence`` is set, once the broker serves clients (BrokerServer's start)."""
        self.client = client
        self.broker_id = broker_id
        self.cluster_id = cluster_id
        self.listeners = listeners
        self.rack = rack
        self.heartbeat_interval_s = heartbeat_interval_s
        self.metadata_offset = metadata_offset
        self.ready_to_unfence = ready_to_unfence
        self.incarnation = uuid.uuid4()
        self.epoch = -1
        self.fenced = True
        self.caught_up = False
        self.unfenced = asyncio.Event()
        self._task: asyncio.Task | None = None

    async def register(self, timeout: float = 60.0) -> int:
        """Register (retrying while an earlier incarnation's session is still alive)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        req = pb.BrokerRegistrationRequest(broker_id=self.broker_id, cluster_id=self.cluster_id,
                                           incarnation_id=self.incarnation.bytes,
                                           listeners=self.listeners, rack=self.rack)
        while True:
            r = await self.client.broker_registration(req)
            if r.error_code == ErrorCode.NONE:
                self.epoch = r.broker_epoch
                log.info("broker %d registered with epoch %d", self.broker_id, self.epoch)
                return self.epoch
            if r.error_code != ErrorCode.DUPLICATE_BROKER_REGISTRATION or loop.time() > deadline:
                raise KafkaError(ErrorCode(r.error_code), r.error_message)
            await asyncio.sleep(1.0)

    async def heartbeat(self, *, want_shut_down: bool = False, timeout: float | None = None) -> pb.BrokerHeartbeatResponse:
        """One heartbeat. Each attempt waits at most one heartbeat interval, so a controller
        that hangs (SIGSTOP) costs an interval before the next controller is asked who leads,
        well inside the session timeout; ``timeout`` bounds all attempts. Sent as a message of
        one stream to the active controller (BrokerHeartbeatStream, ``metadata.controller_stream``)."""
        budget = timeout or max(2 * self.heartbeat_interval_s, 4.0)
        r = await self.client.broker_heartbeat(pb.BrokerHeartbeatRequest(
            broker_id=self.broker_id, broker_epoch=self.epoch,
            current_metadata_offset=self.metadata_offset(), want_fence=not self.ready_to_unfence,
            want_shut_down=want_shut_down),
            timeout=budget, attempt_timeout=min(budget, max(0.5, self.heartbeat_interval_s)), streamed=True)
        if r.error_code != ErrorCode.NONE:
            raise KafkaError(ErrorCode(r.error_code), r.error_message)
        if self.fenced != r.is_fenced:
            log.info("broker %d is now %s", self.broker_id, "fenced" if r.is_fenced else "unfenced")
        self.fenced, self.caught_up = r.is_fenced, r.is_caught_up
        if not r.is_fenced:
            self.unfenced.set()
        else:
            self.unfenced.clear()
        return r

    async def _beat(self) -> None:
        while True:
            try:
                await self.heartbeat()
            except asyncio.CancelledError:
                raise
            except KafkaError as e:
                if e.code == ErrorCode.STALE_BROKER_EPOCH:
                    log.warning("broker %d: our registration was replaced (%s); registering again", self.broker_id, e)
                    self.incarnation = uuid.uuid4()
                    await self.register()
                    continue
                log.warning("broker %d heartbeat failed: %s", self.broker_id, e)
            await asyncio.sleep(self.heartbeat_interval_s)

    async def start(self) -> None:
        await self.register()
        self._task = asyncio.get_running_loop().create_task(self._beat(), name=f"heartbeat-{self.broker_id}")

    def go_silent(self) -> None:
        """Stop heartbeating without telling anyone (as a hung or partitioned broker would);
        ``stop()`` still awaits the cancelled task."""
        if self._task is not None:
            self._task.cancel()

    async def controlled_shutdown(self, timeout: float = 5.0) -> bool:
        """Ask the controller to move our leaderships away; True once it says we may stop,
        False after ``timeout`` seconds without that answer (no controller reachable: the
        broker stops anyway and the controller fences it when its session expires)."""
        self.go_silent()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while (left := deadline - loop.time()) > 0.05:
            try:
                r = await self.heartbeat(want_shut_down=True, timeout=left)
                if r.should_shut_down:
                    log.info("broker %d: controlled shutdown complete", self.broker_id)
                    return True
            except KafkaError as e:
                log.warning("broker %d controlled shutdown: %s", self.broker_id, e)
            await asyncio.sleep(min(0.5, self.heartbeat_interval_s, max(0.0, deadline - loop.time())))
        return False

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
