"""The gRPC Fetch answer written onto protobuf's wire once (brokerd/grpc_fetch_answer.py): the
bytes are those protobuf writes for the same ``FetchResponse`` (every field, negative values,
empty answers, errors, sessions, aborted transactions, throttles), the broker's Fetch method
passes them to gRPC without another copy of the records, and a client's stub reads them back
through a server registered as the broker registers it."""
from __future__ import annotations

import asyncio
import os
import random
import subprocess
import sys
from typing import Any

import grpc

from bench.common import REPO
from brokerd import requests as r
from brokerd import service as service_module
from brokerd.grpc_fetch_answer import FetchAnswer, add_broker_servicer, encode, serialized
from brokerd.proto_codec import to_wire
from brokerd.service import BrokerService
from common.errors import ErrorCode
from protos import broker_pb2 as pb
from protos import broker_pb2_grpc
from raft.transport import add_service


def _as_message(resp: r.FetchResponse | None, session_id: int = 0, error_code: int = 0,
                throttle_time_ms: int = 0) -> pb.FetchResponse:
    """The reference: the answer built as a protobuf message, each partition's frames joined
    into its ``records`` (how the service answered before it wrote the bytes itself)."""
    answer = to_wire(pb.FetchResponse, resp) if resp is not None else pb.FetchResponse()
    for t, wire in zip(resp.topics if resp is not None else (), answer.topics, strict=True):
        for a, out in zip(t.partitions, wire.partitions, strict=True):
            out.records = b"".join(a.frames)
    answer.session_id, answer.error_code = session_id, error_code
    if throttle_time_ms:
        answer.throttle_time_ms = throttle_time_ms
    return answer


def _number(rng: random.Random, bits: int) -> int:
    """Zero, small, large or negative, within a signed ``bits``-bit field."""
    return rng.choice([0, 0, 1, 127, 128, rng.randrange(1 << (bits - 1)), -1, -rng.randrange(1, 1 << (bits - 1))])


def _answer(rng: random.Random) -> r.FetchResponse:
    topics = []
    for _ in range(rng.randrange(4)):
        partitions = []
        for _ in range(rng.randrange(4)):
            frames = [memoryview(rng.randbytes(rng.choice([0, 1, 127, 128, 300, 20000])))
                      for _ in range(rng.randrange(3))]
            partitions.append(r.FetchPartitionResponse(
                partition=_number(rng, 32), error_code=rng.choice([0, int(ErrorCode.NOT_LEADER_OR_FOLLOWER), -1]),
                error_message=rng.choice(["", "not the leader", "Zoë's topic ü" * 20]),
                high_watermark=_number(rng, 64), log_start_offset=_number(rng, 64), frames=frames,
                leader_id=_number(rng, 32), leader_epoch=_number(rng, 32), last_stable_offset=_number(rng, 64),
                aborted_transactions=[r.AbortedTransaction(_number(rng, 64), _number(rng, 64))
                                      for _ in range(rng.randrange(3))],
                preferred_read_replica=rng.choice([-1, 0, 2, _number(rng, 32)])))
        topics.append(r.FetchTopicResponse(name=rng.choice(["", "t", "ü" * 100]),
                                           topic_id=rng.choice([b"", bytes(16), rng.randbytes(16)]),
                                           partitions=partitions))
    return r.FetchResponse(topics=topics, throttle_time_ms=rng.choice([0, 0, 5, _number(rng, 32)]))


def test_the_answer_is_what_protobuf_writes_for_the_same_message() -> None:
    rng = random.Random(31)
    for _ in range(1500):
        resp = _answer(rng)
        session_id = rng.choice([0, 1, 2**31 - 1, _number(rng, 32)])
        want = _as_message(resp, session_id)
        got = encode(resp, session_id=session_id)
        assert got == want.SerializeToString()
        assert pb.FetchResponse.FromString(got) == want


def test_answers_without_partitions_are_protobufs_too() -> None:
    assert encode() == b"" == pb.FetchResponse().SerializeToString()
    assert encode(r.FetchResponse()) == b""
    for kwargs in ({"error_code": int(ErrorCode.FETCH_SESSION_ID_NOT_FOUND)},
                   {"error_code": int(ErrorCode.INVALID_FETCH_SESSION_EPOCH)},
                   {"session_id": 9, "throttle_time_ms": 1500}, {"session_id": -3, "throttle_time_ms": -1}):
        assert pb.FetchResponse.FromString(encode(**kwargs)) == _as_message(None, **kwargs)
        assert encode(**kwargs) == _as_message(None, **kwargs).SerializeToString()
    topic = r.FetchTopicResponse(name="t", partitions=[r.FetchPartitionResponse(partition=0, frames=[])])
    assert encode(r.FetchResponse(topics=[topic])) == _as_message(r.FetchResponse(topics=[topic])).SerializeToString()


def test_a_fetch_over_a_request_time_quota_is_answered_empty_with_the_longer_throttle() -> None:
    """What the request-time quota's interceptor answers instead (brokerd/grpc_throttling.py):
    no records, no session, the longer of its throttle and the answer's own."""
    frames = [memoryview(b"x" * 300), memoryview(b"y" * 20)]
    resp = r.FetchResponse(topics=[r.FetchTopicResponse(name="t", partitions=[
        r.FetchPartitionResponse(partition=1, frames=frames)])], throttle_time_ms=40)
    answer = FetchAnswer(resp, session_id=5)
    assert answer.records_size == 320 and answer.throttle == 40
    assert pb.FetchResponse.FromString(serialized(answer)) == _as_message(resp, 5)
    assert serialized(answer.emptied(25)) == pb.FetchResponse(throttle_time_ms=40).SerializeToString()
    assert serialized(answer.emptied(900)) == pb.FetchResponse(throttle_time_ms=900).SerializeToString()
    assert FetchAnswer(error_code=int(ErrorCode.FETCH_SESSION_ID_NOT_FOUND)).records_size == 0
    message = pb.FetchResponse(session_id=3)  # a message passes as the generated serializer writes it
    assert serialized(message) == message.SerializeToString()


def _served(monkeypatch, resp: r.FetchResponse) -> BrokerService:
    """A broker's service whose domain fetch answers ``resp``."""
    async def fetch(rm: Any, req: r.FetchRequest, access: Any) -> r.FetchResponse:
        return resp
    monkeypatch.setattr(service_module.authorized, "fetch", fetch)
    return BrokerService(None, "PLAINTEXT", lambda: 1, lambda: pb.DescribeBrokerResponse(broker_id=101),  # type: ignore[arg-type]
                         None, None)


def _request() -> pb.FetchRequest:
    return pb.FetchRequest(replica_id=-1, topics=[pb.FetchTopic(name="t", partitions=[pb.FetchPartition(partition=0)])])


#: A broker's Fetch (the service's method and the serializer it is registered with) answering
#: 4 MiB of records in 16 stored frames, over and over, in a process where every buffer over
#: 64 KiB is mmapped afresh (``MALLOC_MMAP_THRESHOLD_``): the pages it faults in per answer
#: count the buffers the records were copied into.
COPIES = """
import asyncio, random, resource
from bench.common import REPO
from brokerd import requests as r
from brokerd import service as service_module
from brokerd.grpc_fetch_answer import add_broker_servicer
from brokerd.service import BrokerService
from protos import broker_pb2 as pb
frames = [memoryview(random.Random(i).randbytes(256 << 10)) for i in range(16)]
resp = r.FetchResponse(topics=[r.FetchTopicResponse(name="t", partitions=[
    r.FetchPartitionResponse(partition=0, high_watermark=10, frames=frames)])])
async def fetch(rm, req, access):
    return resp
service_module.authorized.fetch = fetch
handlers = {}
class Server:
    def add_generic_rpc_handlers(self, generic):
        pass
    def add_registered_method_handlers(self, name, methods):
        handlers.update(methods)
add_broker_servicer(BrokerService(None, "PLAINTEXT", lambda: 1, pb.DescribeBrokerResponse, None, None), Server())
fetch_method = handlers["Fetch"]
class Context:
    def auth_context(self):
        return {}
    def peer(self):
        return "ipv4:127.0.0.1:5555"
req = pb.FetchRequest(replica_id=-1, topics=[pb.FetchTopic(name="t", partitions=[pb.FetchPartition(partition=0)])])
async def answer():
    return fetch_method.response_serializer(await fetch_method.unary_unary(req, Context()))
async def main():
    assert pb.FetchResponse.FromString(await answer()).topics[0].partitions[0].records == b"".join(frames)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(20):
        await answer()
    print((resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 20 / 1024)
asyncio.run(main())
"""


def test_a_fetch_answer_copies_its_records_once() -> None:
    """One buffer of the records per answer: the one gRPC sends. Built as a protobuf message,
    the frames were joined, copied into protobuf's arena and serialized: 4.0 buffers of them."""
    out = subprocess.run([sys.executable, "-c", COPIES], cwd=REPO, capture_output=True, text=True, check=True,
                         timeout=120, env={**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536"})
    assert 0.9 < float(out.stdout) < 1.25


def test_a_stub_reads_the_answer_from_a_server_registered_as_the_brokers(monkeypatch) -> None:
    """Through gRPC: the same answer, records and all, as the message it stands for; the
    broker's other methods are registered with their generated serializers as before."""
    resp = _answer(random.Random(7))
    while not any(p.frames for t in resp.topics for p in t.partitions):
        resp = _answer(random.Random(len(resp.topics) + 100))
    service = _served(monkeypatch, resp)

    async def go() -> tuple[pb.FetchResponse, pb.DescribeBrokerResponse]:
        server = grpc.aio.server()
        add_service(server, add_broker_servicer, service)
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                stub = broker_pb2_grpc.BrokerStub(channel)
                return await stub.Fetch(_request(), timeout=10), await stub.DescribeBroker(
                    pb.DescribeBrokerRequest(), timeout=10)
        finally:
            await server.stop(None)
    fetched, described = asyncio.run(go())
    assert fetched == _as_message(resp)
    assert described.broker_id == 101


def test_the_encoder_writes_every_field_the_messages_have() -> None:
    """``grpc_fetch_answer`` writes these fields by number; a field added to protos/broker.proto
    must be added there too, or the answer would leave it out while still parsing."""
    written = {
        "FetchResponse": [(1, "topics"), (2, "throttle_time_ms"), (3, "session_id"), (4, "error_code")],
        "FetchTopicResponse": [(1, "name"), (2, "topic_id"), (3, "partitions")],
        "FetchPartitionResponse": [(1, "partition"), (2, "error_code"), (3, "error_message"),
                                   (4, "high_watermark"), (5, "log_start_offset"), (6, "records"),
                                   (7, "leader_id"), (8, "leader_epoch"), (9, "last_stable_offset"),
                                   (10, "aborted_transactions"), (11, "preferred_read_replica")],
        "AbortedTransaction": [(1, "producer_id"), (2, "first_offset")],
    }
    for message, fields in written.items():
        d = pb.DESCRIPTOR.message_types_by_name[message]
        assert [(f.number, f.name) for f in d.fields] == fields, message
