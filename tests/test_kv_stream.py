"""The KV example's stream front end (KVStream.Session) and its client: requests multiplexed
on one stream and answered out of order, each with the unary call's outcome rules (docs/raft.md,
"Write outcomes"); a broken stream; backpressure with 10,000 requests queued; a frame that does
not decode. The linearizability tests (tests/test_raft_linearizability.py) run through the
stream client too: it is KVClient's default."""
from __future__ import annotations

import asyncio
import contextlib
import logging
from pathlib import Path

import grpc
import pytest

from raft.admin import LEADER_ADDRESS, NOT_APPLIED
from raft.config import NodeOptions
from raft.examples.kv import kv_pb2 as pb
from raft.examples.kv import kv_pb2_grpc
from raft.examples.kv.client import KVClient, KVError, OutcomeUnknown
from raft.examples.kv.server import MAX_VALUE, KVService, KVStreamService
from raft.examples.kv.state_machine import KVStateMachine
from raft.node import RaftNode
from raft.storage import format_storage
from raft.transport import add_service
from tests.eventually import eventually
from tests.kvcluster import free_ports

UNAVAILABLE, FAILED_PRECONDITION = grpc.StatusCode.UNAVAILABLE.value[0], grpc.StatusCode.FAILED_PRECONDITION.value[0]


def run(coro):
    return asyncio.run(coro)


# ------------------------------------------------------------------ the client, against a scripted server


class Scripted(kv_pb2_grpc.KVStreamServicer):
    """A Session server that answers as ``answer(stream number, request)`` says: a Response
    field dict, "break" to end that stream with UNAVAILABLE once the frame is read, or a status
    code to end it with. Every request read is recorded as (stream number, op)."""

    def __init__(self, answer) -> None:
        self.answer = answer
        self.seen: list[tuple[int, str]] = []
        self.streams = 0

    async def Session(self, requests, context) -> None:
        n = self.streams
        self.streams += 1
        async for frame in requests:
            out = []
            for r in frame.requests:
                self.seen.append((n, r.WhichOneof("op")))
                a = self.answer(n, r)
                if a == "break":
                    await context.abort(grpc.StatusCode.UNAVAILABLE, "the node went away")
                if isinstance(a, grpc.StatusCode):
                    await context.abort(a, "the stream failed")
                out.append(pb.Response(id=r.id, **a))
            await context.write(pb.ResponseFrame(responses=out[::-1]))  # out of order


@contextlib.asynccontextmanager
async def scripted(answer):
    server = grpc.aio.server()
    servicer = Scripted(answer)
    add_service(server, kv_pb2_grpc.add_KVStreamServicer_to_server, servicer)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    kv = KVClient([f"127.0.0.1:{port}"], timeout=3.0, attempt_timeout=1.0)
    try:
        yield kv, servicer
    finally:
        await kv.close()
        await server.stop(0)


def test_concurrent_requests_share_one_stream_and_each_gets_its_own_answer():
    def answer(n, r):
        op = r.WhichOneof("op")
        if op == "put":
            return {"put": pb.PutResponse(index=int(r.put.value))}
        return {"get": pb.GetResponse(found=True, value=r.get.key + b"!")}

    async def go():
        async with scripted(answer) as (kv, server):
            puts = [kv.put(b"k", b"%d" % i) for i in range(1, 201)]
            gets = [kv.get(b"g%d" % i) for i in range(50)]
            results = await asyncio.gather(*puts, *gets)
            assert results[:200] == list(range(1, 201))
            assert results[200:] == [b"g%d!" % i for i in range(50)]
            assert server.streams == 1 and len(server.seen) == 250
    run(go())


def test_a_stream_that_breaks_after_the_server_read_a_write_leaves_it_unknown_and_never_resends_it():
    async def go():
        async with scripted(lambda n, r: "break") as (kv, server):
            with pytest.raises(OutcomeUnknown, match="may or may not have been applied"):
                await kv.put(b"k", b"v")
            with pytest.raises(OutcomeUnknown):
                await kv.cas(b"k", None, b"v")
            assert server.seen == [(0, "put"), (1, "cas")]  # each sent once, on its own stream
    run(go())


@pytest.mark.parametrize("code", [grpc.StatusCode.INTERNAL, grpc.StatusCode.RESOURCE_EXHAUSTED])
def test_a_stream_ending_with_a_status_that_says_nothing_of_the_requests_leaves_a_sent_write_unknown(code):
    async def go():
        async with scripted(lambda n, r: code) as (kv, server):
            with pytest.raises(OutcomeUnknown, match=code.name):
                await kv.put(b"k", b"v")
            assert server.seen == [(0, "put")]
    run(go())


def test_a_read_on_a_broken_stream_is_retried_on_a_new_one():
    def answer(n, r):
        return "break" if n == 0 else {"get": pb.GetResponse(found=True, value=b"v")}

    async def go():
        async with scripted(answer) as (kv, server):
            assert await kv.get(b"k") == b"v"
            assert server.seen == [(0, "get"), (1, "get")]
    run(go())


def test_an_answer_that_proves_a_write_was_not_applied_is_retried_and_an_unknown_one_is_not():
    refused = []

    def answer(n, r):
        if r.put.key == b"not-applied" and not refused:
            refused.append(r.id)
            return {"error": pb.Error(code=FAILED_PRECONDITION, details="not the leader",
                                      metadata={NOT_APPLIED: "1", LEADER_ADDRESS: ""})}
        if r.put.key == b"unknown":
            return {"error": pb.Error(code=UNAVAILABLE, details="timed out waiting for the quorum")}
        return {"put": pb.PutResponse(index=7)}

    async def go():
        async with scripted(answer) as (kv, server):
            assert await kv.put(b"not-applied", b"v") == 7
            assert [op for _, op in server.seen] == ["put", "put"]
            with pytest.raises(OutcomeUnknown, match="timed out waiting for the quorum"):
                await kv.put(b"unknown", b"v")
            assert len(server.seen) == 3
    run(go())


def test_a_write_to_an_endpoint_that_refuses_connections_is_not_applied_not_unknown():
    async def go():
        kv = KVClient([f"127.0.0.1:{free_ports(1)[0]}"], timeout=1.0, attempt_timeout=0.3)
        try:
            with pytest.raises(KVError) as e:
                await kv.put(b"k", b"v")
            assert not isinstance(e.value, OutcomeUnknown), e.value
        finally:
            await kv.close()
    run(go())


# ------------------------------------------------------------------ real nodes in this process


@contextlib.asynccontextmanager
async def kv_nodes(base: Path, n: int, options: dict | None = None, **service):
    """``n`` KV nodes in this event loop (fsync off, fast timers), each serving KV and KVStream; yields
    (nodes, their stream services), once a leader has committed in its term."""
    ports = free_ports(n)
    voters = ",".join(f"{i}@127.0.0.1:{p}" for i, p in enumerate(ports, 1))
    opts = NodeOptions(**{"tick_ms": 10, "heartbeat_interval_ms": 30, "election_timeout_ms": 200, "fsync": False,
                          **(options or {})})
    nodes, services = {}, {}
    for i in range(1, n + 1):
        format_storage(str(base / f"n{i}"), "test", i)
        sm = KVStateMachine()
        nodes[i] = RaftNode(i, voters, sm, data_dir=str(base / f"n{i}"), options=opts, seed=i)
        services[i] = KVStreamService(nodes[i], sm, **service)
        add_service(nodes[i].server, kv_pb2_grpc.add_KVStreamServicer_to_server, services[i])
        add_service(nodes[i].server, kv_pb2_grpc.add_KVServicer_to_server, KVService(nodes[i], sm))
    for node in nodes.values():
        await node.start()
    try:
        async def leader():
            for node in nodes.values():
                if node.is_leader:
                    with contextlib.suppress(Exception):
                        await node.read_barrier(timeout=0.5)
                        return node
        await eventually(leader, 10, what="a leader")
        yield nodes, services
    finally:
        for node in nodes.values():
            await node.stop(transfer=False)


def test_a_client_without_the_stream_makes_unary_calls(tmp_path):
    async def go():
        async with kv_nodes(tmp_path, 1) as (nodes, services):
            kv = KVClient([nodes[1].address], stream=False)
            try:
                assert await kv.put(b"k", b"v") > 0
                assert await kv.cas(b"k", b"v", b"w") == (True, b"v")
                assert await kv.get(b"k") == b"w" and await kv.delete(b"k") and await kv.get(b"k") is None
            finally:
                await kv.close()
            assert services[1].most_in_flight == 0  # no stream was opened
    run(go())


def test_a_client_with_10000_requests_queued_keeps_at_most_its_limit_in_flight(tmp_path):
    async def go():
        async with kv_nodes(tmp_path, 1) as (nodes, services):
            kv = KVClient([nodes[1].address], max_in_flight=100)
            most = 0

            async def sample():
                nonlocal most
                while True:
                    most = max(most, kv.in_flight())
                    await asyncio.sleep(0)
            sampler = asyncio.create_task(sample())
            try:
                indexes = await asyncio.gather(*(kv.put(b"k%d" % i, b"v" * 100) for i in range(10_000)))
            finally:
                sampler.cancel()
                await kv.close()
            assert len(set(indexes)) < 10_000  # batched: many writes share an entry
            assert 0 < most <= 100
            assert services[1].most_in_flight <= 100
            await eventually(lambda: not services[1].sessions, 5, what="the stream's end on the server")
    run(go())


def test_the_server_stops_reading_a_stream_past_its_limit_while_nothing_commits(tmp_path):
    """A client that ignores the limit sends 10,000 requests (40 MB) in frames of 100 while the
    leader cannot commit (its followers are stopped; without check-quorum it stays leader): the
    server reads at most its limit plus one frame, HTTP/2 flow control holds the rest back, and
    each request is answered once, as "unknown" when the server's deadline for it passes."""
    async def go():
        async with kv_nodes(tmp_path, 3, {"check_quorum": False}, max_in_flight=500, timeout=0.2) as (nodes, services):
            leader = next(n for n in nodes.values() if n.is_leader)
            for node in nodes.values():
                if node is not leader:
                    await node.stop(transfer=False)
            ch = grpc.aio.insecure_channel(leader.address)
            call = kv_pb2_grpc.KVStreamStub(ch).Session()

            async def send():
                for f in range(100):
                    await call.write(pb.RequestFrame(requests=[
                        pb.Request(id=f * 100 + i, put=pb.PutRequest(key=b"k", value=b"v" * 4096))
                        for i in range(100)]))
                await call.done_writing()
            sender = asyncio.create_task(send())
            answered: dict[int, str] = {}
            async for frame in call:
                for r in frame.responses:
                    assert r.id not in answered
                    answered[r.id] = r.error.details
            await sender
            await ch.close()
            assert services[leader.id].most_in_flight <= 500 + 100, services[leader.id].most_in_flight
            assert sorted(answered) == list(range(10_000))
            assert all("may or may not" in why for why in answered.values()), set(answered.values())
            assert leader.is_leader and not services[leader.id].sessions
    run(go())


def test_requests_and_answers_with_the_largest_values_go_in_frames_below_the_message_limit(tmp_path):
    """24 values of 1 MiB at once, each way: one frame of them would pass the client's message
    limit (16 MiB) and break the stream."""
    async def go():
        async with kv_nodes(tmp_path, 1) as (nodes, _):
            kv = KVClient([nodes[1].address])
            try:
                values = [bytes([i]) * MAX_VALUE for i in range(24)]
                await asyncio.gather(*(kv.put(b"k%d" % i, v) for i, v in enumerate(values)))
                assert await asyncio.gather(*(kv.get(b"k%d" % i) for i in range(24))) == values
            finally:
                await kv.close()
    run(go())


def test_a_frame_that_does_not_decode_is_refused_in_one_line(tmp_path, caplog):
    async def go():
        async with kv_nodes(tmp_path, 1) as (nodes, _):
            async with grpc.aio.insecure_channel(nodes[1].address) as ch:
                with pytest.raises(grpc.aio.AioRpcError) as e:
                    async for _ in ch.stream_stream("/kraft.kv.KVStream/Session")(iter([b"\xff\xff\xff"]), timeout=5):
                        pass
            return e.value
    with caplog.at_level(logging.WARNING):
        error = run(go())
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error.details().startswith("malformed request to /kraft.kv.KVStream/Session: Error parsing message")
    assert len([r for r in caplog.records if "refused a malformed request" in r.getMessage()]) == 1
    assert not [r for r in caplog.records if r.exc_info or "Traceback" in r.getMessage()]


# ------------------------------------------------------------------ real processes


def test_kill_9_of_the_leader_with_writes_in_flight_leaves_them_unknown_and_retries_the_read(kv_cluster):
    c = kv_cluster(3)
    c.start_all()

    async def go():
        lid, _ = await c.wait_leader()
        # the leader first, so that the client talks to it directly, not through the proxy a
        # follower's NotLeader hint names (the isolation cuts that)
        kv = c.client([lid, *(n for n in c.ids if n != lid)], timeout=15.0, attempt_timeout=3.0)
        await kv.put(b"warm", b"up")  # the stream to the leader is open
        before = (await c.statuses([lid]))[lid].last_index
        c.isolate(lid)  # what it appends cannot commit
        writes = [asyncio.create_task(kv.put(b"k%d" % i, b"v")) for i in range(20)]

        async def appended() -> bool:
            st = (await c.statuses([lid])).get(lid)
            return st is not None and st.last_index > before
        await eventually(appended, 10, what="the writes appended on the isolated leader")
        read = asyncio.create_task(kv.get(b"warm"))
        await eventually(lambda: kv.in_flight() == 21, 5, what="the read sent with the writes")
        c.kill(lid)
        results = await asyncio.gather(*writes, return_exceptions=True)
        assert all(isinstance(r, OutcomeUnknown) for r in results), results
        assert await read == b"up"  # retried on the new leader
        await kv.put(b"after", b"x")
        assert await kv.get(b"after") == b"x"
        await kv.close()
    run(go())
