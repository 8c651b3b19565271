"""The typed controller client (metadata/client.py): one method per RPC of the Controller
service, and the retry policy that follows from each method's idempotency declaration. A
fake controller answers every attempt REQUEST_TIMED_OUT (the outcome is unknown), or hangs
past the attempt's deadline, and counts the attempts."""
from __future__ import annotations

import asyncio
import re
from pathlib import Path

import grpc
import pytest

from common.errors import ErrorCode, KafkaError
from metadata.client import RPCS, SAFE_TO_REPEAT, ControllerClient, Rpc
from protos import controller_pb2 as pb
from protos import controller_pb2_grpc
from tests.kvcluster import free_ports

DOCS = Path(__file__).resolve().parent.parent / "docs" / "operations.md"


def test_every_controller_rpc_has_one_typed_method():
    service = pb.DESCRIPTOR.services_by_name["Controller"]
    assert set(RPCS) == {m.name for m in service.methods if not m.client_streaming}
    # a stream carries one RPC's requests and answers (metadata.controller_stream)
    streams = {m.name: m for m in service.methods if m.client_streaming}
    assert {r.stream: r.name for r in RPCS.values() if r.stream} == {"FetchMetadataStream": "FetchMetadata",
                                                                      "BrokerHeartbeatStream": "BrokerHeartbeat"}
    for name, rpc in [(r.stream, r) for r in RPCS.values() if r.stream]:
        method, unary = streams[name], service.methods_by_name[rpc.name]
        assert method.server_streaming and (method.input_type, method.output_type) == (unary.input_type,
                                                                                       unary.output_type)
    for attr, rpc in vars(ControllerClient).items():
        if isinstance(rpc, Rpc):  # the method is the RPC's name in snake case
            assert attr == re.sub(r"(?<!^)(?=[A-Z])", "_", rpc.name).lower(), (attr, rpc.name)
    # the reads, the brokers' own requests and CreateAcls are safe to repeat; the other writes are not
    assert SAFE_TO_REPEAT == {"DescribeTopics", "DescribeCluster", "DescribeConfigs", "DescribeQuorum", "FetchMetadata",
                              "FetchSnapshot", "BrokerHeartbeat", "BrokerRegistration", "AlterPartition",
                              "AllocateProducerIds", "CreateAcls", "DescribeAcls", "DescribeUserScramCredentials",
                              "DescribeClientQuotas"}



def test_the_docs_table_is_the_clients_declaration():
    """docs/operations.md lists each RPC with its method and whether it is repeated."""
    documented: dict[str, bool] = {}
    for line in DOCS.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[1].startswith("`") and cells[2].split(":")[0].split(" ")[0] in ("yes", "no"):
            for name, method in zip(cells[0].split(", "), re.findall(r"`(\w+)`", cells[1]), strict=True):
                rpc = getattr(ControllerClient, method)
                assert rpc.name == name, (name, method)
                documented[name] = cells[2].startswith("yes")
    assert documented == {name: rpc.idempotent for name, rpc in RPCS.items()}


class Unsure(controller_pb2_grpc.ControllerServicer):
    """Every CreateTopics and DescribeTopics attempt: the outcome is unknown."""

    def __init__(self, hang: bool) -> None:
        self.hang = hang
        self.attempts: dict[str, int] = {}

    async def _unknown(self, name: str, response: type) -> object:
        self.attempts[name] = self.attempts.get(name, 0) + 1
        if self.hang:
            await asyncio.sleep(30)  # past the client's attempt deadline: it cannot know what happened
        return response(status=pb.Status(error_code=ErrorCode.REQUEST_TIMED_OUT, error_message="did not commit in time"))

    async def CreateTopics(self, request, context):
        return await self._unknown("CreateTopics", pb.CreateTopicsResponse)

    async def DescribeTopics(self, request, context):
        return await self._unknown("DescribeTopics", pb.DescribeTopicsResponse)


@pytest.mark.parametrize("hang", [False, True], ids=["answered-unknown", "deadline"])
def test_a_write_whose_outcome_is_unknown_is_sent_once_and_a_read_is_retried(hang):
    async def go() -> None:
        fake = Unsure(hang)
        server = grpc.aio.server()
        controller_pb2_grpc.add_ControllerServicer_to_server(fake, server)
        port = free_ports(1)[0]
        server.add_insecure_port(f"127.0.0.1:{port}")
        await server.start()
        try:
            async with ControllerClient(f"127.0.0.1:{port}", timeout=2.0, attempt_timeout=0.3) as c:
                with pytest.raises(KafkaError) as e:
                    await c.create_topics(pb.CreateTopicsRequest(topics=[pb.CreatableTopic(name="mine")]))
                assert e.value.code == ErrorCode.REQUEST_TIMED_OUT
                assert fake.attempts["CreateTopics"] == 1  # not idempotent: never sent twice
                with pytest.raises(KafkaError) as e:
                    await c.describe_topics(pb.DescribeTopicsRequest(names=["mine"]))
                assert e.value.code == ErrorCode.REQUEST_TIMED_OUT
                assert fake.attempts["DescribeTopics"] > 1  # idempotent: retried until the client's timeout
        finally:
            await server.stop(None)
    asyncio.run(go())


class Heartbeats(controller_pb2_grpc.ControllerServicer):
    async def BrokerHeartbeat(self, request, context):
        return pb.BrokerHeartbeatResponse(status=pb.Status(error_code=ErrorCode.NONE))


def test_the_service_stub_is_made_once_per_channel_not_per_call(monkeypatch):
    """A stub makes a multi-callable per method of the service (27): a broker heartbeats and
    long-polls metadata every second or so, and made one per call (docs/brokers.md, "The
    brokers' idle CPU")."""
    made: list[object] = []

    class Counted(controller_pb2_grpc.ControllerStub):
        def __init__(self, channel):
            made.append(channel)
            super().__init__(channel)
    monkeypatch.setattr(controller_pb2_grpc, "ControllerStub", Counted)

    async def go() -> None:
        server = grpc.aio.server()
        controller_pb2_grpc.add_ControllerServicer_to_server(Heartbeats(), server)
        port = free_ports(1)[0]
        server.add_insecure_port(f"127.0.0.1:{port}")
        await server.start()
        try:
            async with ControllerClient(f"127.0.0.1:{port}", timeout=5.0) as c:
                for _ in range(3):
                    await c.broker_heartbeat(pb.BrokerHeartbeatRequest(broker_id=1))
                assert len(made) == 1
                await c.close()  # its channels closed: the next call opens a channel and a stub anew
                await c.broker_heartbeat(pb.BrokerHeartbeatRequest(broker_id=1))
                assert len(made) == 2 and made[0] is not made[1]
        finally:
            await server.stop(None)
    asyncio.run(go())
