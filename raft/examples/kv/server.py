"""The store's gRPC service, served on the node's own port beside the Raft peer service.

Two front ends over one state machine. The unary calls (Put, Get, Delete, Cas) answer one
request each, for any gRPC client. ``Session`` is the fast path (docs/raft.md, "Serving a
state machine over gRPC at high rates"): one long-lived bidirectional stream per client
connection carries many requests, each with the client's id, answered out of order as they
commit. The writes that reach the leader in one event-loop turn, from every stream, become one
proposal (one Raft entry holding a Batch), and the reads of that turn share one ReadIndex
round: a unary call costs more than a replicated write, a stream frame carries hundreds.
"""
from __future__ import annotations

import asyncio
import functools
import logging
from typing import Any, Callable

import grpc
from google.protobuf.message import DecodeError

from raft.examples.kv import kv_pb2 as pb
from raft.examples.kv import kv_pb2_grpc
from raft.admin import abort_with
from raft.errors import RaftError
from raft.node import Proposal, RaftNode
from raft.transport import add_service

from .frames import FrameQueue
from .state_machine import KVStateMachine

log = logging.getLogger("raft.examples.kv")

MAX_KEY = 4096
MAX_VALUE = 1 << 20
#: Requests one stream may have unanswered; beyond it the server stops reading that stream until
#: answers go out, so HTTP/2 flow control makes the client wait (backpressure).
MAX_IN_FLIGHT = 1024
#: A batch is proposed early once its keys and values reach this size (one entry stays small).
MAX_BATCH_BYTES = 1 << 20

Reply = Callable[[object], None]  # a response (or Error) message, or the exception that failed the request
_RESULT_FIELD = {pb.PutResponse: "put", pb.GetResponse: "get", pb.DeleteResponse: "delete",
                 pb.CasResponse: "cas", pb.Error: "error"}


def invalid(key: bytes, value: bytes = b"") -> str | None:
    """Why a request's key or value is refused, or None."""
    if not key or len(key) > MAX_KEY:
        return f"keys must be 1-{MAX_KEY} bytes"
    if len(value) > MAX_VALUE:
        return f"values must be at most {MAX_VALUE} bytes"
    return None


class _Status(Exception):
    def __init__(self, code: grpc.StatusCode, details: str, metadata: tuple) -> None:
        super().__init__(details)
        self.code, self.details, self.metadata = code, details, metadata


class _Recorder:
    """Stands in for a ServicerContext so that ``abort_with``, the one mapping of the library's
    errors onto gRPC statuses, also answers one request of a stream."""

    metadata: tuple = ()

    def set_trailing_metadata(self, metadata: tuple) -> None:
        self.metadata = metadata

    async def abort(self, code: grpc.StatusCode, details: str) -> None:
        raise _Status(code, details, self.metadata)


def error_of(exc: BaseException) -> pb.Error:
    """The status a unary call failing with ``exc`` would have ended with, as one answer."""
    coro = abort_with(_Recorder(), exc)
    try:
        coro.send(None)  # abort_with never waits: it raises at once
    except _Status as s:
        return pb.Error(code=s.code.value[0], details=s.details, metadata=dict(s.metadata))
    except BaseException as e:  # not one of the library's errors
        return pb.Error(code=grpc.StatusCode.INTERNAL.value[0], details=str(e) or type(e).__name__)
    finally:
        coro.close()
    return pb.Error(code=grpc.StatusCode.INTERNAL.value[0], details=str(exc))


class Batcher:
    """The writes and reads that arrive in one event-loop turn, from every stream: the writes go
    to Raft as one proposal and the reads share one ReadIndex round (``read_barrier``). Each
    request is answered only once its entry is applied (writes) or the barrier passed (reads)."""

    def __init__(self, node: RaftNode, sm: KVStateMachine, timeout: float) -> None:
        self.node, self.sm, self.timeout = node, sm, timeout
        self._batch, self._bytes = pb.Batch(), 0
        self._writers: list[Reply] = []
        self._reads: list[tuple[bytes, Reply]] = []
        self._scheduled = False
        # The reads' barriers under way, kept until they end (the loop holds only weak
        # references to tasks); each ends by the node's answer, its failure or the timeout.
        self._barriers: set[asyncio.Task] = set()

    def write(self, op: str, request, reply: Reply) -> None:
        getattr(self._batch.commands.add(), op).CopyFrom(request)
        self._writers.append(reply)
        self._bytes += len(request.key) + len(getattr(request, "value", b"")) + len(getattr(request, "expected", b""))
        if self._bytes >= MAX_BATCH_BYTES:
            self._propose()
        self._schedule()

    def read(self, key: bytes, reply: Reply) -> None:
        self._reads.append((key, reply))
        self._schedule()

    def _schedule(self) -> None:
        if not self._scheduled:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        self._scheduled = False
        if self._writers:
            self._propose()
        if self._reads:
            reads, self._reads = self._reads, []
            task = asyncio.get_running_loop().create_task(self._read(reads))
            self._barriers.add(task)
            task.add_done_callback(self._barriers.discard)

    def _propose(self) -> None:
        batch, replies = self._batch, self._writers
        self._batch, self._writers, self._bytes = pb.Batch(), [], 0
        try:
            proposal = self.node.propose_nowait(pb.Command(batch=batch).SerializeToString())
        except RaftError as e:  # NotLeader, ProposalDropped, NodeStopped: nothing was appended
            _fail(replies, e)
            return
        def expire() -> None:
            if not proposal.done():
                _fail(replies, asyncio.TimeoutError())

        timer = asyncio.get_running_loop().call_later(self.timeout, expire)
        proposal.add_done_callback(functools.partial(_settle, replies, timer))

    async def _read(self, reads: list[tuple[bytes, Reply]]) -> None:
        try:
            index = await self.node.read_barrier(timeout=self.timeout)
        except (RaftError, asyncio.TimeoutError) as e:
            _fail([reply for _, reply in reads], e)
            return
        data = self.sm.data
        for key, reply in reads:
            value = data.get(key)
            reply(pb.GetResponse(found=value is not None, value=value or b"", index=index))


def _fail(replies: list[Reply], exc: BaseException) -> None:
    for reply in replies:
        reply(exc)
    replies.clear()  # answered: a late timer or result finds nothing left to answer


def _settle(replies: list[Reply], timer: asyncio.TimerHandle, proposal: Proposal) -> None:
    timer.cancel()
    if not replies:
        return  # timed out before
    if proposal.cancelled():
        _fail(replies, asyncio.TimeoutError())
    elif (exc := proposal.exception()) is not None:
        _fail(replies, exc)
    else:
        for reply, result in zip(replies, proposal.result(), strict=True):
            reply(result)
        replies.clear()


class _Session:
    """One client's stream: how many of its requests are in the server's hands (read and not
    yet answered on the wire, their answers included), and the answers waiting for the next
    write (all of them go in one frame)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.in_flight = 0
        self.outbox = FrameQueue(pb.ResponseFrame, "responses")
        self.ready = asyncio.Event()  # answers to send, or the client stopped sending
        self.room = asyncio.Event()  # fewer than `limit` requests in flight
        self.room.set()
        self.reading = True
        self.malformed = ""  # why a frame did not decode

    def reply(self, request_id: int, result: object) -> None:
        if isinstance(result, BaseException):
            result = error_of(result)
        answer: dict[str, Any] = {_RESULT_FIELD[type(result)]: result}
        self.outbox.push(pb.Response(id=request_id, **answer))
        self.ready.set()

    def sent(self, n: int) -> None:
        self.in_flight -= n
        if self.in_flight < self.limit:
            self.room.set()


class KVService(kv_pb2_grpc.KVServicer):
    """The unary calls: one request, one proposal (or ReadIndex round), one answer."""

    def __init__(self, node: RaftNode, sm: KVStateMachine, timeout: float = 10.0) -> None:
        self.node, self.sm, self.timeout = node, sm, timeout

    async def _check(self, context, key: bytes, value: bytes = b"") -> None:
        if why := invalid(key, value):
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, why)

    async def _write(self, cmd: pb.Command, context):
        try:
            return await self.node.propose(cmd.SerializeToString(), timeout=self.timeout)
        except (RaftError, asyncio.TimeoutError) as e:
            await abort_with(context, e)

    async def Put(self, request: pb.PutRequest, context) -> pb.PutResponse:
        await self._check(context, request.key, request.value)
        return await self._write(pb.Command(put=request), context)

    async def Delete(self, request: pb.DeleteRequest, context) -> pb.DeleteResponse:
        await self._check(context, request.key)
        return await self._write(pb.Command(delete=request), context)

    async def Cas(self, request: pb.CasRequest, context) -> pb.CasResponse:
        await self._check(context, request.key, request.value)
        return await self._write(pb.Command(cas=request), context)

    async def Get(self, request: pb.GetRequest, context) -> pb.GetResponse:
        await self._check(context, request.key)
        try:
            index = await self.node.read_barrier(timeout=self.timeout)
        except (RaftError, asyncio.TimeoutError) as e:
            await abort_with(context, e)
        value = self.sm.data.get(request.key)
        return pb.GetResponse(found=value is not None, value=value or b"", index=index)

class KVStreamService(kv_pb2_grpc.KVStreamServicer):
    """Session: the stream front end, its requests batched with every other stream's."""

    METHOD = "/kraft.kv.KVStream/Session"

    def __init__(self, node: RaftNode, sm: KVStateMachine, timeout: float = 10.0,
                 max_in_flight: int = MAX_IN_FLIGHT) -> None:
        self.max_in_flight = max_in_flight
        self.batcher = Batcher(node, sm, timeout)
        self.sessions: set[_Session] = set()  # the open streams
        self.most_in_flight = 0  # the most requests one stream had in the server's hands at once

    async def Session(self, request_iterator, context) -> None:
        """Read requests while fewer than ``max_in_flight`` are unanswered; write answers as
        they come, everything queued in frames of about ``MAX_FRAME_BYTES``. Ends once the client has stopped sending
        and every request is answered; answers that come after the client went are dropped.
        A frame that does not decode ends the stream with INVALID_ARGUMENT and one log line,
        once the requests read before it are answered (``raft.transport.add_service`` guards
        unary and client-streaming methods only, so this one guards itself)."""
        session = _Session(self.max_in_flight)
        self.sessions.add(session)
        reader = asyncio.get_running_loop().create_task(self._read(session, request_iterator))
        try:
            while session.reading or session.in_flight or session.outbox:
                await session.ready.wait()
                session.ready.clear()
                while session.outbox:
                    frame = session.outbox.pop()
                    await context.write(frame)
                    session.sent(len(frame.responses))
        finally:
            reader.cancel()
            self.sessions.discard(session)
        if session.malformed:
            log.warning("refused a malformed request to %s from %s: %s", self.METHOD, context.peer(),
                        session.malformed)
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                                f"malformed request to {self.METHOD}: {session.malformed}")

    async def _read(self, session: _Session, request_iterator) -> None:
        try:
            async for frame in request_iterator:
                session.in_flight += len(frame.requests)
                self.most_in_flight = max(self.most_in_flight, session.in_flight)
                for request in frame.requests:
                    self._dispatch(request, functools.partial(session.reply, request.id))
                while session.in_flight >= session.limit:
                    session.room.clear()
                    await session.room.wait()
        except DecodeError as e:
            session.malformed = str(e) or "undecodable frame"
        except grpc.aio.AioRpcError:
            pass  # the client went; the handler ends with the stream
        finally:
            session.reading = False
            session.ready.set()

    def _dispatch(self, request: pb.Request, reply: Reply) -> None:
        op = request.WhichOneof("op")
        why: str | None
        if op is None:
            why = "a request names no operation"
        else:
            r = getattr(request, op)
            why = invalid(r.key, getattr(r, "value", b""))
        if why:
            reply(pb.Error(code=grpc.StatusCode.INVALID_ARGUMENT.value[0], details=why))
            return
        if op == "get":
            self.batcher.read(r.key, reply)
        else:
            self.batcher.write(op, r, reply)


def build(node_id: int, voters: str, data_dir: str, *, max_in_flight: int = MAX_IN_FLIGHT,
          **node_kwargs) -> tuple[RaftNode, KVStateMachine]:
    """A node of the store, its KV service registered; ``await node.start()`` to serve."""
    sm = KVStateMachine()
    node = RaftNode(node_id, voters, sm, data_dir=data_dir, **node_kwargs)
    add_service(node.server, kv_pb2_grpc.add_KVServicer_to_server, KVService(node, sm))
    add_service(node.server, kv_pb2_grpc.add_KVStreamServicer_to_server,
                KVStreamService(node, sm, max_in_flight=max_in_flight))
    return node, sm
