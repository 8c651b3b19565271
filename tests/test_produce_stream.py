"""The broker's ProduceStream (protos/broker.proto) and our producer's use of it
(clients/produce_stream.py): requests pipelined on one stream per broker, answered by
correlation id in any order; a request the broker cannot serve answered in-band; a malformed
or oversized message ending the stream only after the answers to the requests before it; the
serving gate; request metrics per request; the producer falling back to unary Produce on a
broker without the method; and, with real broker processes, a leader killed with SIGKILL
mid-stream losing and duplicating nothing."""
from __future__ import annotations

import asyncio
import logging
from typing import Any

import grpc
import pytest

from brokerd import service as service_module
from brokerd.log_store import StorageFailure
from brokerd.server import ServingGate
from brokerd.service import BrokerService
from clients import Producer
from clients.cluster_view import Connections
from clients.produce_stream import ProduceStream
from common.errors import ErrorCode
from common.metrics import MetricsEndpoint
from protos import broker_pb2 as pb
from protos import broker_pb2_grpc
from raft.transport import add_service
from tests.brokercluster import running_cluster
from tests.eventually import eventually

METHOD = "/kraft.broker.Broker/ProduceStream"


class Answering(BrokerService):
    """The broker's service with its domain produce replaced: request ``i`` (its client_id)
    is answered with base_offset ``100 + i``; ``hold`` holds a request's answer until another
    request has come; ``served`` lists the requests served."""

    def __init__(self) -> None:
        super().__init__(None, "PLAINTEXT", lambda: 1, pb.DescribeBrokerResponse, None, None)  # type: ignore[arg-type]
        self.served: list[str] = []
        self.arrived: dict[str, asyncio.Event] = {}
        self.hold: dict[str, str] = {}
        self.cancelled: list[str] = []

    async def _stream_answer(self, request: pb.ProduceRequest, access: Any, user: str) -> pb.ProduceResponse:
        self.served.append(request.client_id)
        self.arrived.setdefault(request.client_id, asyncio.Event()).set()
        if (after := self.hold.get(request.client_id)) is not None:
            try:
                await self.arrived.setdefault(after, asyncio.Event()).wait()
            except asyncio.CancelledError:
                self.cancelled.append(request.client_id)
                raise
        return await super()._stream_answer(request, access, user)

    async def Produce(self, request: pb.ProduceRequest, context: grpc.aio.ServicerContext) -> pb.ProduceResponse:
        self.served.append(f"unary {request.client_id}")
        return _answer(request)


def _answer(request: pb.ProduceRequest) -> pb.ProduceResponse:
    return pb.ProduceResponse(topics=[pb.ProduceTopicResponse(name="t", partitions=[pb.ProducePartitionResponse(
        partition=0, base_offset=100 + int(request.client_id or 0))])])


@pytest.fixture
def produced(monkeypatch):
    """The domain produce behind the service: answers as ``_answer``; a request with
    transactional id "storage" fails as a broken log directory does."""
    async def produce(rm, req, access):
        if req.transactional_id == "storage":
            raise StorageFailure("log directory /data failed")
        return None
    monkeypatch.setattr(service_module.authorized, "produce", produce)
    monkeypatch.setattr(BrokerService, "_produced", lambda self, request, resp, access: _answer(request))


async def _server(servicer: object, *, gate_open: bool = True, max_bytes: int | None = None,
                  without: str | None = None) -> tuple[grpc.aio.Server, str, MetricsEndpoint, ServingGate]:
    """A gRPC server set up as a broker's (brokerd.server: request metrics, the serving gate,
    the guard); ``without``: a method left out, as an older broker has it."""
    metrics = MetricsEndpoint(None)
    gate = ServingGate(101)
    if gate_open:
        gate.open()
    server = grpc.aio.server(options=[("grpc.max_receive_message_length", (max_bytes or 4 << 20) + (1 << 20))],
                             interceptors=[metrics.requests.interceptor("PLAINTEXT"), gate])
    target: Any = server
    if without is not None:
        target = _Without(server, without)
    add_service(target, broker_pb2_grpc.add_BrokerServicer_to_server, servicer, max_bytes=max_bytes)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    return server, f"127.0.0.1:{port}", metrics, gate


class _Without:
    """A server that registers every method of a service but one."""

    def __init__(self, server: grpc.aio.Server, method: str) -> None:
        self.server, self.method = server, method

    def add_generic_rpc_handlers(self, handlers: tuple) -> None:
        for h in handlers:
            name = h.service_name()
            self.server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(name, {
                m.rpartition("/")[2]: hd for m, hd in h._method_handlers.items() if not m.endswith(f"/{self.method}")}),))

    def add_registered_method_handlers(self, name: str, handlers: dict) -> None:
        self.server.add_registered_method_handlers(name, {m: h for m, h in handlers.items() if m != self.method})


def _requests(*ids: str) -> list[pb.ProduceRequest]:
    return [pb.ProduceRequest(acks=-1, client_id=i, transactional_id=i) if i == "storage" else
            pb.ProduceRequest(acks=-1, client_id=i) for i in ids]


def _observed(metrics: MetricsEndpoint, request: str) -> float:
    return metrics.registry.get_sample_value("kafka_network_requestmetrics_total_time_seconds_count",
                                             {"request": request, "listener": "PLAINTEXT"}) or 0.0


def test_answers_come_back_by_correlation_id_in_any_order(produced):
    """Request 1's answer is held until request 3 has come: 2 and 3 are answered first, and
    each caller gets its own answer; every request is counted as a Produce request."""
    async def go():
        servicer = Answering()
        servicer.hold["1"] = "3"
        server, address, metrics, _ = await _server(servicer)
        try:
            async with grpc.aio.insecure_channel(address) as ch:
                stream = ProduceStream(broker_pb2_grpc.BrokerStub(ch))
                order: list[str] = []

                async def ask(req: pb.ProduceRequest) -> int:
                    answer = await stream.request(req, 30)
                    order.append(req.client_id)
                    return answer.topics[0].partitions[0].base_offset
                offsets = await asyncio.gather(*(ask(r) for r in _requests("1", "2", "3")))
                await stream.close()
        finally:
            await server.stop(0)
        assert offsets == [101, 102, 103]
        assert order[-1] == "1" and servicer.served == ["1", "2", "3"]
        assert _observed(metrics, "Produce") == 3
    asyncio.run(go())


def test_a_request_the_broker_cannot_serve_is_answered_in_band_and_the_others_go_on(produced):
    async def go():
        server, address, _, _ = await _server(Answering())
        try:
            async with grpc.aio.insecure_channel(address) as ch:
                stream = ProduceStream(broker_pb2_grpc.BrokerStub(ch))
                answers = await asyncio.gather(*(stream.request(r, 30) for r in _requests("1", "storage", "3")))
                await stream.close()
        finally:
            await server.stop(0)
        assert [a.error_code for a in answers] == [0, ErrorCode.KAFKA_STORAGE_ERROR, 0]
        assert answers[1].error_message == "log directory /data failed"
        assert answers[2].topics[0].partitions[0].base_offset == 103
    asyncio.run(go())


@pytest.mark.parametrize("bad", ["malformed", "oversized"])
def test_a_bad_message_ends_the_stream_after_the_answers_before_it(produced, bad, caplog):
    """The message after request 1 does not decode (or is over the broker's limit): request 1
    is answered, the stream then ends with one line, and nothing after it is served."""
    async def go():
        servicer = Answering()
        servicer.hold["1"] = "never"  # answered only once the stream's input has ended
        server, address, _, _ = await _server(servicer, max_bytes=10_000)
        try:
            async with grpc.aio.insecure_channel(address) as ch:
                call = ch.stream_stream(METHOD, request_serializer=None, response_deserializer=pb.ProduceResponse.FromString)()
                await call.write(pb.ProduceRequest(acks=-1, client_id="1", correlation_id=1).SerializeToString())
                await eventually(lambda: servicer.served == ["1"], 10, what="request 1 served")
                servicer.arrived.setdefault("never", asyncio.Event()).set()
                await call.write(b"\xff\xff\xff" if bad == "malformed" else
                                 pb.ProduceRequest(acks=-1, client_id="x" * 20_000).SerializeToString())
                try:  # the broker may have ended the stream already
                    await call.write(pb.ProduceRequest(acks=-1, client_id="3", correlation_id=3).SerializeToString())
                    await call.done_writing()
                except (grpc.aio.AioRpcError, asyncio.InvalidStateError):
                    pass
                got = []
                with pytest.raises(grpc.aio.AioRpcError) as ended:
                    while (answer := await call.read()) is not grpc.aio.EOF:
                        got.append(answer.correlation_id)
        finally:
            await server.stop(0)
        return got, ended.value, servicer.served
    with caplog.at_level(logging.WARNING):
        got, ended, served = asyncio.run(go())
    assert got == [1] and served == ["1"]
    if bad == "malformed":
        assert ended.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert ended.details().startswith(f"malformed request to {METHOD}: Error parsing message")
    else:
        assert ended.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        size = len(pb.ProduceRequest(acks=-1, client_id="x" * 20_000).SerializeToString())
        assert ended.details() == f"too large a request to {METHOD}: {size} bytes, larger than the server's limit of 10000"
    assert not [r for r in caplog.records if r.exc_info or "Traceback" in r.getMessage()]


def test_the_producer_stream_fails_the_refused_request_and_retries_the_unread_ones(produced):
    """What the client makes of a stream the broker ended at a request it refused: that
    request fails with the broker's line; those written after it were never read, so they fail
    as a dropped connection does (UNAVAILABLE: the producer retries them on a new stream)."""
    async def go():
        servicer = Answering()
        servicer.hold["1"] = "never"
        server, address, _, _ = await _server(servicer, max_bytes=10_000)
        try:
            async with grpc.aio.insecure_channel(address) as ch:
                stream = ProduceStream(broker_pb2_grpc.BrokerStub(ch))
                first = asyncio.ensure_future(stream.request(_requests("1")[0], 30))
                await eventually(lambda: servicer.served == ["1"], 10, what="request 1 served")
                big = pb.ProduceRequest(acks=-1, client_id="2" * 20_000)
                rest = [asyncio.ensure_future(stream.request(r, 30)) for r in (big, *_requests("3"))]
                await eventually(lambda: stream.written == 3, 10, what="both written behind request 1")
                servicer.arrived.setdefault("never", asyncio.Event()).set()
                answered = await first
                errors = await asyncio.gather(*rest, return_exceptions=True)
                assert stream.ended
                await stream.close()
        finally:
            await server.stop(0)
        return answered, errors
    answered, errors = asyncio.run(go())
    assert answered.topics[0].partitions[0].base_offset == 101
    assert [e.code() for e in errors] == [grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.UNAVAILABLE], errors
    assert errors[1].details().startswith("not read: the broker ended the produce stream at an earlier request")


def test_what_a_client_that_went_away_sent_is_cancelled(produced):
    """As a unary call's handler is cancelled when its client goes away: the stream's requests
    still being served are cancelled with it, and nothing is left running."""
    async def go():
        servicer = Answering()
        servicer.hold["1"] = "never"
        server, address, _, _ = await _server(servicer)
        try:
            async with grpc.aio.insecure_channel(address) as ch:
                stream = ProduceStream(broker_pb2_grpc.BrokerStub(ch))
                waiting = asyncio.ensure_future(stream.request(_requests("1")[0], 30))
                await eventually(lambda: servicer.served == ["1"], 10, what="request 1 served")
                await stream.close()
                with pytest.raises(grpc.aio.AioRpcError) as ended:
                    await waiting
                await eventually(lambda: servicer.cancelled == ["1"], 10, what="request 1 cancelled at the broker")
        finally:
            await server.stop(0)
        return ended.value
    ended = asyncio.run(go())
    assert ended.code() == grpc.StatusCode.UNAVAILABLE


def test_a_request_that_times_out_ends_its_stream_as_kafka_closes_the_connection(produced):
    """Request 1 is never answered: after its timeout it fails DEADLINE_EXCEEDED, and the stream
    is cancelled, so request 2 on it fails as a dropped connection (retried on a new stream)
    and the broker stops serving both."""
    async def go():
        servicer = Answering()
        servicer.hold.update({"1": "never", "2": "never"})
        server, address, _, _ = await _server(servicer)
        try:
            async with grpc.aio.insecure_channel(address) as ch:
                stream = ProduceStream(broker_pb2_grpc.BrokerStub(ch))
                other = asyncio.ensure_future(stream.request(_requests("2")[0], 60))
                with pytest.raises(grpc.aio.AioRpcError) as timed_out:
                    await stream.request(_requests("1")[0], 0.5)
                with pytest.raises(grpc.aio.AioRpcError) as dropped:
                    await other
                assert stream.ended
                await eventually(lambda: sorted(servicer.cancelled) == ["1", "2"], 10,
                                 what="both cancelled at the broker")
                await stream.close()
        finally:
            await server.stop(0)
        return timed_out.value, dropped.value
    timed_out, dropped = asyncio.run(go())
    assert timed_out.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    assert dropped.code() == grpc.StatusCode.UNAVAILABLE


def test_the_stream_is_refused_until_the_broker_serves(produced):
    async def go():
        server, address, _, gate = await _server(Answering(), gate_open=False)
        try:
            async with grpc.aio.insecure_channel(address) as ch:
                stream = ProduceStream(broker_pb2_grpc.BrokerStub(ch))
                with pytest.raises(grpc.aio.AioRpcError) as refused:
                    await stream.request(_requests("1")[0], 30)
                gate.open()
                assert stream.ended  # a new stream is opened for the next request
                again = ProduceStream(broker_pb2_grpc.BrokerStub(ch))
                answer = await again.request(_requests("2")[0], 30)
                await again.close()
        finally:
            await server.stop(0)
        return refused.value, answer
    refused, answer = asyncio.run(go())
    assert refused.code() == grpc.StatusCode.UNAVAILABLE
    assert refused.details() == "broker 101 is starting: it serves once it has caught up with the metadata log"
    assert answer.topics[0].partitions[0].base_offset == 102


def test_the_producer_falls_back_to_unary_produce_on_a_broker_without_the_stream(produced):
    async def go():
        servicer = Answering()
        server, address, _, _ = await _server(servicer, without="ProduceStream")
        try:
            p = Producer(address)
            p.connections = Connections(None)  # what start() makes
            first = await p._request(address, _requests("1")[0])
            second = await p._request(address, _requests("2")[0])
            unary_only = set(p._unary_only)
            await p.connections.close()
        finally:
            await server.stop(0)
        return first, second, unary_only, servicer.served
    first, second, unary_only, served = asyncio.run(go())
    assert [a.topics[0].partitions[0].base_offset for a in (first, second)] == [101, 102]
    assert served == ["unary 1", "unary 2"]  # the first was sent again, unary: nothing served twice
    assert len(unary_only) == 1


# -- real broker processes ----------------------------------------------------------------------

@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with running_cluster(tmp_path_factory.mktemp("pstream"), {"replica.lag.time.max.ms": "1000",
                                                               "auto.create.topics.enable": "false"}) as c:
        yield c


def test_a_leader_killed_mid_stream_loses_and_duplicates_nothing(cluster):
    """An idempotent producer pipelines its requests on the leader's stream; the leader is
    killed with SIGKILL while requests are in flight on it: the producer retries them on a new
    stream to the new leader, and every acknowledged record is read back once, in order."""
    from tests.test_broker_processes import consume_all, leader_of

    async def go():
        await cluster.create_topic("streamed", partitions=1, rf=3, configs={"min.insync.replicas": "2"})
        acked: list[int] = []
        async with Producer(cluster.bootstrap_servers, linger_ms=2, request_timeout_ms=2000,
                            delivery_timeout_ms=90000, retry_backoff_ms=50) as p:
            stop = asyncio.Event()

            async def write() -> None:
                n, pending = 0, []
                while not stop.is_set():
                    for _ in range(20):
                        pending.append((n, await p.send("streamed", b"%d" % n)))
                        n += 1
                    await asyncio.sleep(0.002)
                await p.flush()
                for seq, f in pending:
                    try:
                        await f
                        acked.append(seq)
                    except Exception as e:  # a finding for the assertions below
                        print(f"{seq}: {e}")
            writer = asyncio.create_task(write())
            killed = None
            try:
                await eventually(lambda: p.metrics["record-send-total"] >= 500, 60, what="500 records acknowledged")
                streams = dict(p._produce_streams)
                assert streams and not p._unary_only, "the producer does not use ProduceStream"
                killed, _, _ = await leader_of(cluster, "streamed")
                cluster.kill(killed)
                target = p.metrics["record-send-total"] + 500
                await eventually(lambda: p.metrics["record-send-total"] >= target, 90,
                                 what="500 more records acknowledged after the kill")
            finally:
                stop.set()
                await writer
                if killed is not None:
                    cluster.start_broker(killed)
            assert any(s.ended for s in streams.values()), "the killed leader's stream did not end"
        await cluster.wait_unfenced(timeout=60)
        records = await consume_all(cluster.bootstrap_servers, "streamed", expected=None, idle_ms=3000)
        got = [int(r.value) for r in sorted(records, key=lambda r: r.offset)]
        assert sorted(acked) == list(range(len(acked))), "an acknowledged record failed"
        assert len(got) == len(set(got)), f"{len(got) - len(set(got))} records duplicated"
        assert set(acked) <= set(got), f"records lost: {sorted(set(acked) - set(got))[:10]}"
        assert got == sorted(got), "records out of order"
    asyncio.run(asyncio.wait_for(go(), 240))

