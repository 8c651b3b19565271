"""A combined node (process.roles=broker,controller) in one event loop: a ControllerServer and a
BrokerServer from the same properties, as `kraft server-start` runs them, serving a topic
end to end; then a restart resumes the broker's metadata from its local snapshot."""
from __future__ import annotations

import asyncio

from clients import Consumer, Producer
from brokerd.server import BrokerServer
from metadata.client import ControllerClient
from metadata.config import from_properties
from metadata.ids import random_id
from metadata.server import ControllerServer
from protos import controller_pb2 as cpb
from raft.storage import format_storage
from tests.kvcluster import consecutive_ports


def test_combined_node_serves_a_topic_and_resumes_metadata(tmp_path):
    base = consecutive_ports(2)
    data = tmp_path / "node1"
    props = {"node.id": "1", "process.roles": "broker,controller", "controller.quorum.voters": f"1@127.0.0.1:{base}",
             "listeners": f"CONTROLLER://127.0.0.1:{base},PLAINTEXT://127.0.0.1:{base + 1}",
             "log.dirs": str(data), "controller.quorum.election.timeout.ms": "300",
             "broker.heartbeat.interval.ms": "200", "broker.session.timeout.ms": "3000"}
    cfg = from_properties(props)
    format_storage(str(data), random_id(), 1)

    async def start() -> tuple[ControllerServer, BrokerServer]:
        controller = ControllerServer(cfg)
        await controller.start()
        broker = BrokerServer(cfg)
        await broker.start()
        await asyncio.wait_for(broker.lifecycle.unfenced.wait(), 20)
        return controller, broker

    async def stop(controller: ControllerServer, broker: BrokerServer) -> None:
        await broker.stop()
        assert await broker.wait_stopped() is None
        await controller.stop()

    async def first() -> int:
        controller, broker = await start()
        async with ControllerClient(f"127.0.0.1:{base}") as c:
            r = await c.create_topics(cpb.CreateTopicsRequest(topics=[cpb.CreatableTopic(
                name="solo", num_partitions=2, replication_factor=1)]))
            assert r.topics[0].error_code == 0
        async with Producer(f"127.0.0.1:{base + 1}", acks="all") as p:
            for i in range(50):
                await p.send("solo", b"%d" % i, key=b"%d" % i)
            await p.flush()
        async with Consumer(f"127.0.0.1:{base + 1}", auto_offset_reset="earliest") as c:
            await c.subscribe("solo")
            got = []
            for _ in range(50):
                got += await c.poll(500)
                if len(got) >= 50:
                    break
        assert sorted(int(r.value) for r in got) == list(range(50))
        offset = broker.published_offset
        await stop(controller, broker)
        return offset

    async def second(before: int) -> None:
        controller, broker = await start()
        assert broker.resumed_from_offset >= before > 1
        assert broker.fetcher.first_fetch_offset == broker.resumed_from_offset + 1
        await stop(controller, broker)

    offset = asyncio.run(asyncio.wait_for(first(), 60))
    asyncio.run(asyncio.wait_for(second(offset), 60))
