"""Bounded work per request (issue 11 item 2; docs/operations.md "Bounded work per request"):
a request that asks for more than MAX_RECORDS_PER_USER_OP is refused with POLICY_VIOLATION
before any work, and the largest allowed one does not stall the controllers' event loop."""
import asyncio
import time

import pytest

from metadata.client import ControllerClient, Rpc
from common.errors import ErrorCode as E, KafkaError
from kraft.dev_quorum import DevQuorum
from metadata.loop_stall import LoopStallProbe
from metadata.topics import MAX_RECORDS_PER_USER_OP
from protos import controller_pb2 as pb
from tests.controllers import InProcessQuorum, TestBroker, start_brokers
from tests.eventually import eventually
from tests.kvcluster import consecutive_ports
from tests.test_controller import create, describe, topic


async def refused(c: ControllerClient, rpc: Rpc, request) -> str:
    """The one-line POLICY_VIOLATION a request gets, answered at once."""
    started = time.monotonic()
    with pytest.raises(KafkaError) as e:
        await c.send(rpc, request, timeout=5)
    assert e.value.code == E.POLICY_VIOLATION, e.value
    assert time.monotonic() - started < 2
    return e.value.message


def test_oversized_requests_are_refused_before_any_work(tmp_path):
    async def go():
        q = InProcessQuorum(tmp_path)
        await q.start()
        brokers = await start_brokers(q, [(1, ""), (2, ""), (3, "")])
        c = q.client(timeout=10)
        try:
            await create(c, topic("small", 1, 1))
            before = (await q.active()).sm.image.offset
            too_many = MAX_RECORDS_PER_USER_OP + 1  # the requests are built before the probe starts
            requests = [
                (ControllerClient.create_topics, pb.CreateTopicsRequest(topics=[topic(f"t{i}", 5001, 1) for i in range(2)])),
                (ControllerClient.create_topics, pb.CreateTopicsRequest(topics=[topic(f"t{i}", 1, 1) for i in range(too_many)])),
                (ControllerClient.create_partitions, pb.CreatePartitionsRequest(
                    topics=[pb.CreatePartitionsRequest.Topic(name="small", count=2147483647)])),
                (ControllerClient.delete_topics, pb.DeleteTopicsRequest(names=[f"t{i}" for i in range(too_many)])),
                (ControllerClient.incremental_alter_configs, pb.IncrementalAlterConfigsRequest(resources=[pb.AlterConfigsResource(
                    resource_type=pb.TOPIC, resource_name="small",
                    configs=[pb.AlterableConfig(name="retention.ms", value="1000")] * too_many)])),
            ]
            async with LoopStallProbe() as probe:
                msg = await refused(c, ControllerClient.create_topics, pb.CreateTopicsRequest(topics=[topic("huge", 2147483647, 3)]))
                assert msg.startswith("Excessively large number of partitions per request: 2147483647")
                for rpc, request in requests:
                    await refused(c, rpc, request)
            assert probe.max_stall_ms < 100, probe.max_stall_ms
            assert (await q.active()).sm.image.offset - before < 5  # heartbeats at most: nothing was written
            assert sorted(await describe(c)) == ["small"]
        finally:
            await c.close()
            for b in brokers:
                await b.stop()
            await q.stop()
    asyncio.run(go())


def test_the_probe_reports_a_stall(caplog):
    async def go():
        async with LoopStallProbe(warn_ms=100) as probe:
            await asyncio.sleep(0.03)
            time.sleep(0.15)  # noqa: ASYNC251 -- blocking the loop on purpose: the stall the probe must see
            await asyncio.sleep(0.03)
        return probe.max_stall_ms
    assert asyncio.run(go()) >= 140
    assert "the event loop was blocked for 1" in caplog.text


def test_a_10000_partition_create_blocks_no_controller_loop(tmp_path):
    """Controllers as processes, each with its own probe that logs every stall over 100 ms
    (metadata/server.py); brokers as TestBrokers here."""
    q = DevQuorum(str(tmp_path / "q"), consecutive_ports(3))
    q.start()

    async def go():
        await q.wait_for_leader()
        brokers = [await TestBroker(q.bootstrap, q.cluster_id, i).start() for i in (1, 2, 3)]
        c = ControllerClient(q.bootstrap, timeout=60)
        try:
            await q.wait_for_leader()
            started = time.monotonic()
            [(_, code, msg)] = await create(c, topic("wide", MAX_RECORDS_PER_USER_OP, 3))
            took = time.monotonic() - started
            assert code == E.NONE, msg
            assert len((await describe(c, "wide"))["wide"].partitions) == MAX_RECORDS_PER_USER_OP
            await eventually(lambda: all("wide" in b.fetcher.image.topics_by_name for b in brokers), 30,
                             what="every broker has the new topic")
            assert not any(b.lifecycle.fenced for b in brokers)
            return took
        finally:
            await c.close()
            for b in brokers:
                await b.stop()
    try:
        took = asyncio.run(go())
    finally:
        q.stop()
    logs = {p.name: p.read_text() for p in (tmp_path / "q").glob("controller-*.log")}
    assert len(logs) == 3
    stalls = [line for text in logs.values() for line in text.splitlines() if "was blocked for" in line]
    print(f"10,000-partition create: {took:.2f}s, stalls over 100 ms: {stalls}")
    assert not stalls
