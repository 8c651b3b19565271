"""Produce requests pipelined on one gRPC stream per broker (the broker's ``ProduceStream``),
as Kafka's protocol pipelines a producer's requests on its connection: each request carries a
``correlation_id`` and its answer comes back with it, in any order.

Why: a unary gRPC call costs the broker about twice one message of a stream (grpc.aio's
per-call tasks, futures and HTTP/2 stream set-up; docs/brokers.md, "Our client's produce per
Produce request (gRPC)"). The producer still keeps at most ``max.in.flight.requests.per.
connection`` requests in flight per broker; the stream only carries them. Writes go out in the
order the producer makes its requests, so a partition's batches reach the leader in sequence
order, as on a Kafka connection.

When the stream breaks (the broker goes away, restarts, ends it, or a request on it times out,
after which it is cancelled as Kafka's client closes the connection), every request waiting on
it fails with the call's status, as requests in flight fail when a Kafka connection drops: the
producer retries them on a new stream (its idempotence keeps a retried batch from being
written twice). A broker without the method answers UNIMPLEMENTED before it serves anything;
the producer then sends that broker unary ``Produce`` calls.
"""
from __future__ import annotations

import asyncio

import grpc

from protos import broker_pb2 as pb
from protos import broker_pb2_grpc


#: How the broker ends the stream at a request it refuses (``raft.transport``'s guard): one that
#: does not decode, or larger than its ``socket.request.max.bytes``.
REFUSED = frozenset({grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.RESOURCE_EXHAUSTED})


#: How a stream that broke under its requests ends.
BROKEN = frozenset({grpc.StatusCode.CANCELLED, grpc.StatusCode.INTERNAL})


def call_error(code: grpc.StatusCode, details: str) -> grpc.aio.AioRpcError:
    """An error as a failed call reports it, for what ends a request on the stream."""
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(), details=details)


class ProduceStream:
    """One broker's stream; ``request`` sends one Produce request and waits for its answer."""

    def __init__(self, stub: broker_pb2_grpc.BrokerStub) -> None:
        self._call = stub.ProduceStream()
        self._next_id = 0
        self.written = 0  # requests written
        self._opened = False  # the broker's initial metadata came
        self._waiting: dict[int, asyncio.Future[pb.ProduceResponse]] = {}
        self._writing = asyncio.Lock()  # one write at a time, in the order requests came (FIFO)
        self._ended: grpc.aio.AioRpcError | None = None
        self._reader = asyncio.get_running_loop().create_task(self._read(), name="produce-stream-reader")

    @property
    def ended(self) -> bool:
        return self._ended is not None or self._reader.done()

    async def request(self, req: pb.ProduceRequest, timeout_s: float) -> pb.ProduceResponse:
        """The answer to ``req``; AioRpcError as a unary call fails: the stream's status when
        it ends first, DEADLINE_EXCEEDED after ``timeout_s``."""
        if self._ended is not None:
            raise self._ended
        self._next_id += 1
        req.correlation_id = key = self._next_id
        answer = self._waiting[key] = asyncio.get_running_loop().create_future()
        try:
            async with self._writing:
                if not self._opened:
                    # The broker's first word before the first write: a broker without the method
                    # (UNIMPLEMENTED) or not serving yet ends the call here, where a write could
                    # race with its end and grpc.aio would report INTERNAL instead of its status.
                    await self._call.initial_metadata()
                    self._opened = True
                    if self._call.done():
                        await asyncio.wait([self._reader])
                if self._ended is not None:
                    raise self._ended
                try:
                    await self._call.write(req)
                    self.written += 1
                except (grpc.aio.AioRpcError, asyncio.InvalidStateError):
                    await asyncio.wait([self._reader])  # the call's own status says why
                    raise self._ended or call_error(grpc.StatusCode.UNAVAILABLE, "the produce stream ended") from None
            try:
                async with asyncio.timeout(timeout_s):
                    return await answer
            except TimeoutError:
                # As Kafka's client closes a connection whose request timed out: the requests
                # on it are retried on a new stream, and the broker cancels what it still serves.
                self._call.cancel()
                raise call_error(grpc.StatusCode.DEADLINE_EXCEEDED, "the broker did not answer in time") from None
        finally:
            self._waiting.pop(key, None)
            if answer.done() and not answer.cancelled():
                answer.exception()  # the stream's end, raised above from the write: retrieved

    async def _read(self) -> None:
        ended = call_error(grpc.StatusCode.UNAVAILABLE, "the producer closed the produce stream")
        try:
            while (answer := await self._call.read()) is not grpc.aio.EOF:
                waiting = self._waiting.get(answer.correlation_id)
                if waiting is not None and not waiting.done():
                    waiting.set_result(answer)
            ended = call_error(grpc.StatusCode.UNAVAILABLE, "the broker ended the produce stream")
        except grpc.aio.AioRpcError as e:
            # A stream cancelled under it (a broker stopping), or whose write failed as the
            # connection dropped (grpc.aio then ends the call INTERNAL, "Internal error from
            # Core", whatever the broker's status was) is a dropped connection, which the
            # producer retries, not an error of the requests.
            ended = call_error(grpc.StatusCode.UNAVAILABLE, f"the produce stream broke ({e.code().name}: "
                                                            f"{e.details()})") if e.code() in BROKEN else e
        finally:
            self._end(ended)

    def _end(self, error: grpc.aio.AioRpcError) -> None:
        self._ended = error
        # The broker answers every request before the one it refuses and reads none after it:
        # the earliest unanswered request is that one; the rest were not read.
        unread = call_error(grpc.StatusCode.UNAVAILABLE, f"not read: the broker ended the produce stream at an "
                                                         f"earlier request ({error.code().name}: {error.details()})")
        refused, first = error.code() in REFUSED, True
        for key in sorted(self._waiting):
            waiting = self._waiting[key]
            if not waiting.done():
                waiting.set_exception(error if first or not refused else unread)
                first = False

    async def close(self) -> None:
        """End the stream; what still waits on it fails UNAVAILABLE."""
        self._call.cancel()
        self._reader.cancel()
        await asyncio.gather(self._reader, return_exceptions=True)
