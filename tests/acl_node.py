"""A combined node (controller and broker in one process, as ``kraft server-start`` runs a
``broker,controller`` node) with the authorizer on, running in a thread of its own so that
tests can drive it from synchronous code: the CLI, console tools and kafka-python clients."""
from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

from brokerd.server import BrokerServer
from metadata.authorizer import STANDARD_AUTHORIZER
from metadata.client import ControllerClient, Req, Resp, Rpc
from metadata.config import from_properties
from metadata.ids import random_id
from metadata.server import ControllerServer
from raft.storage import format_storage
from tests.kvcluster import consecutive_ports

T = TypeVar("T")


class CombinedNode:
    def __init__(self, base: Path, extra_listeners: tuple[str, ...] = (), **props: str) -> None:
        """``extra_listeners``: names of more listeners, each on the next port (``ports``)."""
        port = consecutive_ports(3 + len(extra_listeners))
        self.controller_port, self.broker_port, self.kafka_port = port, port + 1, port + 2
        self.ports = {name: port + 3 + i for i, name in enumerate(extra_listeners)}
        data = base / "node1"
        self.cfg = from_properties({
            "node.id": "1", "process.roles": "broker,controller", "controller.quorum.voters": f"1@127.0.0.1:{port}",
            "listeners": f"CONTROLLER://127.0.0.1:{port},PLAINTEXT://127.0.0.1:{port + 1},"
                         f"KAFKA://127.0.0.1:{port + 2}" + "".join(f",{n}://127.0.0.1:{p}"
                                                                   for n, p in self.ports.items()),
            "log.dirs": str(data), "controller.quorum.election.timeout.ms": "300",
            "broker.heartbeat.interval.ms": "200", "broker.session.timeout.ms": "3000",
            "offsets.topic.num.partitions": "3", "authorizer.class.name": STANDARD_AUTHORIZER, **props})
        format_storage(str(data), random_id(), 1)
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="combined-node", daemon=True)
        self.thread.start()
        self.controller: ControllerServer | None = None
        self.broker: BrokerServer | None = None
        try:
            self.run(self._start())
        except BaseException:
            self.close()
            raise

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.controller_port}"

    @property
    def bootstrap_server(self) -> str:
        return f"127.0.0.1:{self.broker_port}"

    @property
    def kafka_bootstrap(self) -> str:
        return f"127.0.0.1:{self.kafka_port}"

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = 60) -> T:
        """Run ``coro`` on the node's loop and wait for its result."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    async def _start(self) -> None:
        self.controller = ControllerServer(self.cfg)
        await self.controller.start()
        self.broker = BrokerServer(self.cfg)
        await self.broker.start()
        await asyncio.wait_for(self.broker.lifecycle.unfenced.wait(), 30)

    async def call(self, rpc: Rpc[Req, Resp], request: Req) -> Resp:
        """A controller request (``ControllerClient.create_topics``, ...) as the plaintext client
        this node's own principal is."""
        async with ControllerClient(self.bootstrap, timeout=20) as c:
            return await c.send(rpc, request)

    async def _stop(self) -> None:
        if self.broker is not None:
            await self.broker.stop()
        if self.controller is not None:
            await self.controller.stop()

    def close(self) -> None:
        try:
            self.run(self._stop())
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(10)
