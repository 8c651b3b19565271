"""The controller's FetchMetadataStream and BrokerHeartbeatStream (protos/controller.proto)
and the brokers' use of them (metadata/controller_stream.py, metadata/client.py,
brokerd/metadata_fetcher.py, brokerd/lifecycle.py): long polls (and heartbeats) as messages
of one stream, each answered as the unary RPC answers it, in order; NOT_CONTROLLER
from a standby in-band; a malformed message ending the stream with one line; a poll that times
out ending its stream and the next attempt opening another; the client falling back to unary
FetchMetadata on a controller without the method; a broker keeping one stream of each per
active controller and opening one at the new active controller after a failover."""
from __future__ import annotations

import asyncio
import logging
from typing import Any, AsyncIterator

import grpc
import pytest

from common.errors import ErrorCode, KafkaError
from common.metrics import MetricsEndpoint
from metadata.client import ControllerClient
from metadata.service import ControllerService
from protos import controller_pb2 as pb
from protos import broker_pb2_grpc, controller_pb2_grpc
from raft.transport import add_service
from tests.controllers import InProcessQuorum, TestBroker
from tests.eventually import eventually

METHOD = "/kraft.controller.Controller/FetchMetadataStream"


def _address(q: InProcessQuorum, nid: int) -> str:
    return f"127.0.0.1:{q.ports[nid - 1]}"


async def _create(c: ControllerClient, name: str) -> None:
    r = await c.create_topics(pb.CreateTopicsRequest(topics=[pb.CreatableTopic(
        name=name, num_partitions=1, replication_factor=1)]))
    assert r.topics[0].error_code == ErrorCode.NONE, r.topics[0]


async def _commit(c: ControllerClient, value: int) -> None:
    """A record committed without any broker: the cluster's default of a config."""
    r = await c.incremental_alter_configs(pb.IncrementalAlterConfigsRequest(resources=[pb.AlterConfigsResource(
        resource_type=pb.BROKER, resource_name="", configs=[pb.AlterableConfig(name="log.retention.ms",
                                                                              value=str(value))])]))
    assert r.resources[0].error_code == ErrorCode.NONE, r.resources[0]


def test_polls_on_the_stream_are_answered_in_order_as_fetch_metadata_answers_them(tmp_path):
    """Polls written one after another without waiting are answered in order, each as the
    unary call answers it (batches, high watermark, log start; an offset below 1 and a
    max_bytes of 1 as FetchMetadata takes them); a long poll is answered when a record
    commits; a standby answers NOT_CONTROLLER in-band, naming the active controller."""
    async def go() -> None:
        q = InProcessQuorum(tmp_path)
        await q.start()
        c = q.client()
        try:
            for value in (1000, 2000, 3000):
                await _commit(c, value)
            active = (await q.active()).cfg.node_id
            polls = [pb.FetchMetadataRequest(offset=1, broker_id=-1),
                     pb.FetchMetadataRequest(offset=2, max_bytes=1, broker_id=-1),
                     pb.FetchMetadataRequest(offset=-5, broker_id=-1)]
            async with grpc.aio.insecure_channel(_address(q, active)) as ch:
                stub = controller_pb2_grpc.ControllerStub(ch)
                call = stub.FetchMetadataStream()
                for poll in polls:
                    await call.write(poll)
                streamed = [await call.read() for _ in polls]
                unary = [await stub.FetchMetadata(poll) for poll in polls]
                assert [len(a.batches) for a in streamed] == [len(a.batches) for a in unary]
                assert streamed == unary
                assert streamed[0].batches[0].offset == 1 and len(streamed[1].batches) == 1
                assert streamed[1].batches[0].offset == 2
                # a long poll from the end waits until something commits, then answers it
                end = streamed[0].high_watermark
                await call.write(pb.FetchMetadataRequest(offset=end, max_wait_ms=20_000, broker_id=-1))
                answer = asyncio.ensure_future(call.read())
                await asyncio.sleep(0)
                assert not answer.done()
                await _commit(c, 4000)
                got = await asyncio.wait_for(answer, 15)
                assert got.status.error_code == ErrorCode.NONE and got.batches[0].offset == end
                await call.done_writing()
                assert await call.read() is grpc.aio.EOF
                assert await call.code() == grpc.StatusCode.OK
                # a heartbeat of a broker that did not register: answered as BrokerHeartbeat answers it
                beats = stub.BrokerHeartbeatStream()
                beat = pb.BrokerHeartbeatRequest(broker_id=9, broker_epoch=5)
                await beats.write(beat)
                refused_beat = await beats.read()
                assert refused_beat == await stub.BrokerHeartbeat(beat)
                assert refused_beat.error_code == ErrorCode.BROKER_ID_NOT_REGISTERED, refused_beat
                beats.cancel()
            standby = next(i for i in q.ids if i != active)
            async with grpc.aio.insecure_channel(_address(q, standby)) as ch:
                stub = controller_pb2_grpc.ControllerStub(ch)
                call = stub.FetchMetadataStream()
                await call.write(polls[0])
                refused = await call.read()
                assert refused == await stub.FetchMetadata(polls[0])
                assert refused.status.error_code == ErrorCode.NOT_CONTROLLER
                assert (refused.status.controller_id, refused.status.controller_endpoint) == (
                    active, _address(q, active))
                call.cancel()
        finally:
            await c.close()
            await q.stop()
    asyncio.run(go())


def test_a_malformed_message_ends_the_stream_with_one_line(tmp_path, caplog):
    """The poll before it is answered; the stream then ends INVALID_ARGUMENT with one line,
    and the controller logs one warning, no traceback."""
    async def go() -> tuple[list[pb.FetchMetadataResponse], grpc.aio.AioRpcError]:
        q = InProcessQuorum(tmp_path, n=1)
        await q.start()
        try:
            await q.active()
            async with grpc.aio.insecure_channel(_address(q, 1)) as ch:
                call = ch.stream_stream(METHOD, request_serializer=None,
                                        response_deserializer=pb.FetchMetadataResponse.FromString)()
                await call.write(pb.FetchMetadataRequest(offset=1, broker_id=-1).SerializeToString())
                got = [await call.read()]
                await call.write(b"\xff\xff\xff")
                with pytest.raises(grpc.aio.AioRpcError) as ended:
                    while (answer := await call.read()) is not grpc.aio.EOF:
                        got.append(answer)
            return got, ended.value
        finally:
            await q.stop()
    with caplog.at_level(logging.WARNING):
        got, ended = asyncio.run(go())
    assert len(got) == 1 and got[0].status.error_code == ErrorCode.NONE and got[0].batches
    assert ended.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert ended.details().startswith(f"malformed request to {METHOD}: Error parsing message")
    assert "\n" not in ended.details()
    assert [r.getMessage() for r in caplog.records if "refused a malformed request" in r.getMessage()]
    assert not [r for r in caplog.records if r.exc_info or "Traceback" in r.getMessage()]


class Fake(controller_pb2_grpc.ControllerServicer):
    """A controller answering every poll with high_watermark = its offset + 1; ``hang``: the
    first stream's first poll is never answered (a controller that stopped mid-stream)."""

    def __init__(self, hang: bool = False) -> None:
        self.hang = hang
        self.unary = 0
        self.streams: list[list[int]] = []  # the offsets polled, per stream opened
        self.ended = 0  # streams whose handler ended

    async def FetchMetadata(self, request: pb.FetchMetadataRequest, context: Any) -> pb.FetchMetadataResponse:
        self.unary += 1
        return pb.FetchMetadataResponse(high_watermark=request.offset + 1)

    async def FetchMetadataStream(self, requests: AsyncIterator[pb.FetchMetadataRequest],
                                  context: Any) -> AsyncIterator[pb.FetchMetadataResponse]:
        await context.send_initial_metadata(())
        polled: list[int] = []
        self.streams.append(polled)
        try:
            async for request in requests:
                polled.append(request.offset)
                if self.hang and len(self.streams) == 1:
                    await asyncio.sleep(60)
                yield pb.FetchMetadataResponse(high_watermark=request.offset + 1)
        finally:
            self.ended += 1


async def _serve(servicer: Fake, *, only_unary: bool = False) -> tuple[grpc.aio.Server, str, MetricsEndpoint]:
    """A gRPC server set up as a controller's (request metrics, the guard); ``only_unary``:
    without FetchMetadataStream, as an older controller serves."""
    metrics = MetricsEndpoint(None)
    server = grpc.aio.server(interceptors=[metrics.requests.interceptor("CONTROLLER")])
    if only_unary:
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("kraft.controller.Controller", {
            "FetchMetadata": grpc.unary_unary_rpc_method_handler(
                servicer.FetchMetadata, request_deserializer=pb.FetchMetadataRequest.FromString,
                response_serializer=pb.FetchMetadataResponse.SerializeToString)}),))
    else:
        add_service(server, controller_pb2_grpc.add_ControllerServicer_to_server, servicer)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    return server, f"127.0.0.1:{port}", metrics


def _timed(metrics: MetricsEndpoint) -> float:
    return metrics.registry.get_sample_value("kafka_network_requestmetrics_total_time_seconds_count",
                                             {"request": "FetchMetadata", "listener": "CONTROLLER"}) or 0.0


def test_polls_share_one_stream_and_are_timed_as_fetch_metadata_requests():
    async def go() -> None:
        fake = Fake()
        server, address, metrics = await _serve(fake)
        try:
            async with ControllerClient([address], timeout=10, attempt_timeout=2) as c:
                for offset in (1, 2, 3):
                    r = await c.fetch_metadata(pb.FetchMetadataRequest(offset=offset), streamed=True)
                    assert r.high_watermark == offset + 1
                assert fake.streams == [[1, 2, 3]] and fake.unary == 0
                assert _timed(metrics) == 3
                # without streamed=True (the tools, the metadata shell): a unary call
                await c.fetch_metadata(pb.FetchMetadataRequest(offset=4))
                assert fake.unary == 1 and _timed(metrics) == 4
            await eventually(lambda: fake.ended == 1, 10, what="the stream ended when the client closed")
        finally:
            await server.stop(0)
    asyncio.run(go())


def test_a_poll_that_is_not_answered_in_time_ends_its_stream_and_the_retry_opens_another():
    """As a unary attempt past its deadline: the stream is cancelled (the controller's handler
    with it), and the client's next attempt polls on a new stream."""
    async def go() -> None:
        fake = Fake(hang=True)
        server, address, metrics = await _serve(fake)
        try:
            async with ControllerClient([address], timeout=10, attempt_timeout=0.5) as c:
                r = await c.fetch_metadata(pb.FetchMetadataRequest(offset=7), streamed=True)
                assert r.high_watermark == 8
                assert fake.streams == [[7], [7]]
                await eventually(lambda: fake.ended == 1, 10, what="the first stream cancelled")
                await c.fetch_metadata(pb.FetchMetadataRequest(offset=8), streamed=True)
                assert fake.streams == [[7], [7, 8]]
                assert _timed(metrics) == 2  # the answered polls
        finally:
            await server.stop(0)
    asyncio.run(go())


def test_a_controller_without_the_stream_gets_unary_calls(caplog):
    """An older controller (a rolling upgrade) answers the stream UNIMPLEMENTED: the same poll
    goes as a FetchMetadata call, and so do the next ones, with one log line."""
    async def go() -> None:
        fake = Fake()
        server, address, _ = await _serve(fake, only_unary=True)
        try:
            async with ControllerClient([address], timeout=10, attempt_timeout=2) as c:
                for offset in (1, 2, 3):
                    r = await c.fetch_metadata(pb.FetchMetadataRequest(offset=offset), streamed=True)
                    assert r.high_watermark == offset + 1
            assert fake.unary == 3
        finally:
            await server.stop(0)
    with caplog.at_level(logging.INFO, logger="metadata.client"):
        asyncio.run(go())
    said = [r.getMessage() for r in caplog.records if "does not serve FetchMetadataStream" in r.getMessage()]
    assert len(said) == 1 and "sending it FetchMetadata calls" in said[0]


def test_a_server_that_is_not_a_controller_is_not_called_an_older_version(caplog):
    """A controller address that names another gRPC server (here one serving only the Broker
    service, as a broker's port does) answers the stream UNIMPLEMENTED as an older controller
    does: the one log line says what is known (the server does not serve the stream: an older
    controller, or not a controller), and the unary call then fails with the one line that
    names the address as not a controller listener."""
    async def go() -> KafkaError:
        server = grpc.aio.server()
        add_service(server, broker_pb2_grpc.add_BrokerServicer_to_server, broker_pb2_grpc.BrokerServicer())
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        try:
            async with ControllerClient([f"127.0.0.1:{port}"], timeout=10, attempt_timeout=2) as c:
                with pytest.raises(KafkaError) as refused:
                    await c.fetch_metadata(pb.FetchMetadataRequest(offset=1), streamed=True)
            return refused.value
        finally:
            await server.stop(0)
    with caplog.at_level(logging.INFO, logger="metadata.client"):
        refused = asyncio.run(go())
    assert refused.code == ErrorCode.INVALID_REQUEST and "is not a controller listener" in str(refused)
    said = [r.getMessage() for r in caplog.records if "does not serve FetchMetadataStream" in r.getMessage()]
    assert len(said) == 1 and "\n" not in said[0], said
    assert "an older controller, or not a controller" in said[0] and "older version" not in said[0], said


@pytest.mark.parametrize("method", ["FetchMetadataStream", "BrokerHeartbeatStream"])
def test_a_broker_keeps_one_stream_per_active_controller_across_a_failover(tmp_path, monkeypatch, method):
    """A broker's metadata polls (and its heartbeats) go on one stream to the active
    controller, not one per request; when that controller stops, it opens one at the new
    active controller and follows the log from there."""
    streams: list[tuple[Any, list[object]]] = []  # (the controller, the requests it read on the stream)
    serve = getattr(ControllerService, method)

    async def recorded(self: ControllerService, requests: AsyncIterator[Any], context: Any) -> AsyncIterator[Any]:
        read: list[object] = []
        streams.append((self.ops.c, read))

        async def reading() -> AsyncIterator[Any]:
            async for request in requests:
                read.append(request)
                yield request
        async for answer in serve(self, reading(), context):
            yield answer
    monkeypatch.setattr(ControllerService, method, recorded)

    async def five_on_one_stream(controller: Any) -> None:
        """The latest stream at ``controller`` carries five more requests, and no other opens."""
        def latest() -> list[object] | None:
            at = [read for ctl, read in streams if ctl is controller]
            return at[-1] if at else None
        read = await eventually(latest, 15, what="a stream at the active controller")
        opened, before = len(streams), len(read)
        await eventually(lambda: len(read) >= before + 5, 15, what="five requests on it")
        assert len(streams) == opened and latest() is read

    async def go() -> None:
        q = InProcessQuorum(tmp_path)
        await q.start()
        c = q.client()
        broker = TestBroker(q.bootstrap, q.cluster_id, 1)
        try:
            await broker.start()
            first = await q.active()
            await _create(c, "before")
            await eventually(lambda: "before" in broker.fetcher.image.topics_by_name, 15)
            await five_on_one_stream(first.controller)
            await q.stop(first.cfg.node_id)
            second = await q.active()
            await _create(c, "after")
            await eventually(lambda: "after" in broker.fetcher.image.topics_by_name, 20)
            await five_on_one_stream(second.controller)
            assert not broker.lifecycle.fenced
        finally:
            await broker.stop()
            await c.close()
            await q.stop()
    asyncio.run(go())
