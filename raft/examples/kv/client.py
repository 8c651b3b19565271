"""A client of the store that finds the leader itself.

Any endpoint will do: a follower answers with the leader's address and the client goes
there. Retries (with capped exponential backoff) happen only when the answer proves the write
was not applied (NotLeader, a dropped proposal, a connection that never opened) or for reads;
when the outcome of a write is unknown (the connection broke, the deadline passed, a snapshot
superseded it) the client says so instead of retrying a non-idempotent compare-and-set behind
the caller's back. The rules live in ``raft.client``.

By default requests go over one ``Session`` stream per endpoint (``_Stream``): concurrent
callers share it, their requests travel together in frames and are answered as they commit, at
most ``max_in_flight`` at a time (the others wait for a slot, having sent nothing). Each request
keeps the unary call's outcome rules: the server answers a failed one with the status the unary
call would have ended with, and a stream that breaks leaves each of its sent writes unknown
(unless the error proves nothing reached the server) while the requests not yet sent are
retried. ``stream=False`` makes one unary call per request instead.
"""
from __future__ import annotations

import asyncio
import itertools

import grpc

from raft.examples.kv import kv_pb2 as pb
from raft.examples.kv import kv_pb2_grpc
from raft.proto import raft_pb2 as rpb
from raft.proto import raft_pb2_grpc
from raft.client import LeaderClient, Retry
from common.tls import TLSConfig

from .frames import FrameQueue

#: Requests a stream keeps unanswered before callers wait (the server has its own bound,
#: ``server.MAX_IN_FLIGHT``, the same by default).
MAX_IN_FLIGHT = 1024
_CODES = {c.value[0]: c for c in grpc.StatusCode}
#: Stream statuses the outcome rules read right for every request sent: the transient ones
#: (unknown for a write), and those a server ends a stream with before reading a request, or
#: only after answering every request it read (Session's INVALID_ARGUMENT).
_READ_BY_THE_RULES = {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.CANCELLED,
                      grpc.StatusCode.UNIMPLEMENTED, grpc.StatusCode.PERMISSION_DENIED,
                      grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.INVALID_ARGUMENT}


class KVError(Exception):
    """The request failed; the message says why, in one line."""


class OutcomeUnknown(KVError):
    """The write may or may not have been applied (the connection or deadline failed)."""


class _Stream:
    """One ``Session`` stream to one endpoint: requests queued by callers go out together in the
    next frame (whatever queued while the previous write was under way); answers come back by
    request id, in any order."""

    def __init__(self, address: str, channel: grpc.aio.Channel, max_in_flight: int) -> None:
        self.address = address
        self.call = kv_pb2_grpc.KVStreamStub(channel).Session()
        self.slots = asyncio.Semaphore(max_in_flight)
        self.answers: dict[int, asyncio.Future] = {}  # queued or sent, not answered yet
        self.queued = FrameQueue(pb.RequestFrame, "requests")  # not sent yet
        self.broken: str | None = None
        self._ids = itertools.count(1)
        self._wake = asyncio.Event()
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._send()), loop.create_task(self._receive())]

    @property
    def in_flight(self) -> int:
        return len(self.answers)

    async def ask(self, op: str, request, timeout: float) -> tuple[pb.Response | None, bool]:
        """(the answer, or None if none came within ``timeout``, and whether it was sent)."""
        if self.slots.locked():  # backpressure: wait for an answer to free a slot
            try:
                await asyncio.wait_for(self.slots.acquire(), timeout)
            except TimeoutError:
                raise Retry(f"{self.address}: no free slot on the stream (all in flight) within {timeout:g}s; "
                            "nothing was sent") from None
        else:
            await self.slots.acquire()
        try:
            if self.broken is not None:
                raise Retry(f"{self.broken}; nothing was sent")
            rid = next(self._ids)
            self.queued.push(pb.Request(id=rid, **{op: request}))
            fut = self.answers[rid] = asyncio.get_running_loop().create_future()
            self._wake.set()
            try:
                return await asyncio.wait_for(fut, timeout), True
            except TimeoutError:
                return None, not self.queued.remove(rid)
            finally:
                self.answers.pop(rid, None)
        finally:
            self.slots.release()

    async def _send(self) -> None:
        try:
            while self.broken is None:
                await self._wake.wait()
                self._wake.clear()
                while self.queued:
                    await self.call.write(self.queued.pop())
        except asyncio.CancelledError:
            raise
        except Exception:  # the call ended: _receive has its status
            pass

    async def _receive(self) -> None:
        try:
            async for frame in self.call:
                for r in frame.responses:
                    fut = self.answers.get(r.id)
                    if fut is not None and not fut.done():
                        fut.set_result(r)
            error = grpc.aio.AioRpcError(grpc.StatusCode.UNAVAILABLE, details="the stream ended before answering")
        except grpc.aio.AioRpcError as e:
            error = e
        self._break(error)

    def _break(self, error: grpc.aio.AioRpcError) -> None:
        """Every request sent fails with the stream's error, which the outcome rules read (a
        status that does not say whether a request was applied is made UNAVAILABLE, so that a
        write is unknown); the ones still queued were certainly not applied."""
        self.broken = f"{self.address}: the stream broke ({error.details() or error.code().name})"
        if error.code() not in _READ_BY_THE_RULES:
            error = grpc.aio.AioRpcError(grpc.StatusCode.UNAVAILABLE,
                                         details=f"the stream failed ({error.code().name}: {error.details()})")
        queued = {r.id for r in self.queued}
        for rid, fut in self.answers.items():
            if not fut.done():
                fut.set_exception(Retry(f"{self.broken} before the request was sent") if rid in queued else error)
        self._wake.set()

    async def close(self) -> None:
        self.call.cancel()
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)


class KVClient(LeaderClient):
    def __init__(self, endpoints: list[str], *, timeout: float = 10.0, attempt_timeout: float = 3.0,
                 tls: TLSConfig | None = None, stream: bool = True, max_in_flight: int = MAX_IN_FLIGHT) -> None:
        """``stream``: requests over one Session stream per endpoint (the default), at most
        ``max_in_flight`` unanswered on each; False: one unary call per request."""
        if not endpoints:
            raise KVError("no endpoints given")
        super().__init__(endpoints, timeout=timeout, attempt_timeout=attempt_timeout, tls=tls,
                         max_message_bytes=4 << 20, backoff_s=(0.02, 0.1))
        self.stream, self.max_in_flight = stream, max_in_flight
        self._streams: dict[grpc.aio.Channel, _Stream] = {}

    def unreachable(self, message: str) -> Exception:
        return KVError(message)

    def outcome_unknown(self, message: str) -> Exception:
        return OutcomeUnknown(message)

    def failed(self, address: str, error: grpc.aio.AioRpcError) -> Exception:
        return KVError(f"{address}: {error.details() or error.code().name}")

    async def _kv(self, method: str, request, *, write: bool):
        if not self.stream:
            return await self.call(lambda ch, t: getattr(kv_pb2_grpc.KVStub(ch), method)(request, timeout=t),
                                   idempotent=not write)
        op = method.lower()
        return await self.call(lambda ch, t: self._over_stream(ch, op, request, t, write), idempotent=not write)

    def _stream_on(self, channel: grpc.aio.Channel) -> _Stream:
        s = self._streams.get(channel)
        if s is None or s.broken is not None:
            address = next(a for a, ch in self._channels.items() if ch is channel)
            s = self._streams[channel] = _Stream(address, channel, self.max_in_flight)
        return s

    async def _over_stream(self, channel: grpc.aio.Channel, op: str, request, timeout: float, write: bool):
        """One attempt over the stream, failing as the unary call would: an in-band error is
        raised as the gRPC error it stands for, so ``LeaderClient.call`` applies the same rules."""
        s = self._stream_on(channel)
        response, sent = await s.ask(op, request, timeout)
        if response is None:
            if write and sent:
                self.leader = None
                raise self.outcome_unknown(f"{s.address}: no answer within {timeout:g}s; the write may or may "
                                           "not have been applied")
            raise Retry(f"{s.address}: no answer within {timeout:g}s" + ("" if sent else "; nothing was sent"))
        result = response.WhichOneof("result")
        if result == "error":
            e = response.error
            raise grpc.aio.AioRpcError(_CODES.get(e.code, grpc.StatusCode.UNKNOWN), grpc.aio.Metadata(),
                                       grpc.aio.Metadata(*e.metadata.items()), details=e.details)
        return getattr(response, result)

    def in_flight(self) -> int:
        """Requests sent or queued on this client's streams and not answered yet."""
        return sum(s.in_flight for s in self._streams.values())

    async def put(self, key: bytes, value: bytes) -> int:
        return (await self._kv("Put", pb.PutRequest(key=key, value=value), write=True)).index

    async def get(self, key: bytes) -> bytes | None:
        r = await self._kv("Get", pb.GetRequest(key=key), write=False)
        return r.value if r.found else None

    async def delete(self, key: bytes) -> bool:
        return (await self._kv("Delete", pb.DeleteRequest(key=key), write=True)).deleted

    async def cas(self, key: bytes, expected: bytes | None, value: bytes) -> tuple[bool, bytes | None]:
        """Set ``key`` to ``value`` if it holds ``expected`` (None: if it is absent).
        Returns (succeeded, the value before)."""
        req = pb.CasRequest(key=key, expected=expected or b"", expect_absent=expected is None, value=value)
        r = await self._kv("Cas", req, write=True)
        return r.succeeded, (r.current if r.found else None)

    async def status(self, endpoint: str | None = None) -> rpb.StatusResponse:
        if endpoint:
            return await raft_pb2_grpc.RaftAdminStub(self.channel(endpoint)).Status(
                rpb.StatusRequest(), timeout=self.attempt_timeout)
        return await self.call(lambda ch, t: raft_pb2_grpc.RaftAdminStub(ch).Status(rpb.StatusRequest(), timeout=t),
                               idempotent=True)

    async def admin(self, method: str, request) -> rpb.AdminResponse:
        return await self.call(lambda ch, t: getattr(raft_pb2_grpc.RaftAdminStub(ch), method)(request, timeout=t),
                               idempotent=False)

    async def close(self) -> None:
        streams, self._streams = list(self._streams.values()), {}
        await asyncio.gather(*(s.close() for s in streams), return_exceptions=True)
        await super().close()
