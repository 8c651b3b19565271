"""Controller quorums for tests: in one process (fast, for logic), and test brokers that speak
the broker RPCs."""
from __future__ import annotations

import asyncio
from pathlib import Path

from brokerd.lifecycle import BrokerLifecycle
from brokerd.metadata_fetcher import MetadataFetcher
from metadata.client import ControllerClient
from metadata.config import from_properties
from metadata.ids import random_id
from metadata.server import ControllerServer
from protos import controller_pb2 as pb
from raft.storage import format_storage
from tests.eventually import eventually
from tests.kvcluster import free_ports


class InProcessQuorum:
    """Three ControllerServers in the test's event loop."""

    def __init__(self, base: Path, n: int = 3, **props: str) -> None:
        self.base = base
        self.ports = free_ports(n)
        self.ids = list(range(1, n + 1))
        self.voters = ",".join(f"{i}@127.0.0.1:{p}" for i, p in zip(self.ids, self.ports, strict=True))
        self.bootstrap = ",".join(f"127.0.0.1:{p}" for p in self.ports)
        self.cluster_id = random_id()
        self.props = {"controller.quorum.election.timeout.ms": "300", "broker.session.timeout.ms": "2000", **props}
        self.servers: dict[int, ControllerServer] = {}
        for nid in self.ids:
            format_storage(str(self.dir(nid)), self.cluster_id, nid)

    def dir(self, nid: int) -> Path:
        return self.base / f"controller-{nid}"

    def config(self, nid: int):
        port = self.ports[nid - 1]
        return from_properties({"node.id": str(nid), "process.roles": "controller",
                                "controller.quorum.voters": self.voters,
                                "listeners": f"CONTROLLER://127.0.0.1:{port}",
                                "metadata.log.dir": str(self.dir(nid)), **self.props})

    async def start(self, nid: int | None = None) -> None:
        for i in ([nid] if nid else self.ids):
            self.servers[i] = ControllerServer(self.config(i))
            await self.servers[i].start()

    async def stop(self, nid: int | None = None) -> None:
        for i in ([nid] if nid else list(self.servers)):
            s = self.servers.pop(i)
            await s.stop()

    async def active(self, timeout: float = 10.0) -> ControllerServer:
        return await eventually(lambda: next((s for s in self.servers.values() if s.controller.active), None),
                                timeout, interval=0.02, what="an active controller")

    def client(self, **kw) -> ControllerClient:
        return ControllerClient(self.bootstrap, **kw)


class TestBroker:
    """A broker that only speaks the broker RPCs: registers, heartbeats and fetches metadata."""

    __test__ = False  # not a pytest class

    def __init__(self, bootstrap: str, cluster_id: str, broker_id: int, rack: str = "",
                 heartbeat_s: float = 0.2) -> None:
        self.client = ControllerClient(bootstrap, timeout=20)
        self.fetcher = MetadataFetcher(self.client, broker_id, max_wait_ms=200)
        self.lifecycle = BrokerLifecycle(
            self.client, broker_id, cluster_id,
            [pb.Endpoint(name="PLAINTEXT", host="127.0.0.1", port=9000 + broker_id, security_protocol="PLAINTEXT")],
            rack=rack, heartbeat_interval_s=heartbeat_s, metadata_offset=lambda: self.fetcher.offset)

    async def start(self, wait_unfenced: bool = True) -> "TestBroker":
        self.fetcher.start()
        await self.lifecycle.start()
        if wait_unfenced:
            await asyncio.wait_for(self.lifecycle.unfenced.wait(), 20)
        return self

    async def stop(self) -> None:
        await self.lifecycle.stop()
        await self.fetcher.stop()
        await self.client.close()


async def start_brokers(q: InProcessQuorum, specs: list[tuple[int, str]]) -> list[TestBroker]:
    brokers = [TestBroker(q.bootstrap, q.cluster_id, bid, rack) for bid, rack in specs]
    await asyncio.gather(*(b.start() for b in brokers))
    return brokers
