"""A controller RPC sent as messages of one gRPC stream to one controller, answered in order
(the controller's ``FetchMetadataStream`` and ``BrokerHeartbeatStream``): what a broker's
metadata long polls and heartbeats travel on.

Why: each unary call cost an idle broker grpc.aio's per-call work on its loop and wake-ups of
the event engine's threads, about twice a message of a stream (docs/brokers.md, "The brokers'
idle CPU"); a broker long-polls the metadata twice a second and heartbeats every
``broker.heartbeat.interval.ms``. One request is on a stream at a time and its answer is the
next message, so no correlation id is needed.

A stream that fails in any way (the controller ends it, answers UNIMPLEMENTED, goes away, or
does not answer within the attempt's time) is done: its caller gets the failure as a unary
call would report it, and the next request opens a new stream. ``metadata.client`` decides
where (failover across controllers) and falls back to unary calls on UNIMPLEMENTED.
"""
from __future__ import annotations

import asyncio
from typing import Generic, TypeVar

import grpc
from google.protobuf.message import Message

from clients.produce_stream import BROKEN, call_error

Req = TypeVar("Req", bound=Message)
Resp = TypeVar("Resp", bound=Message)


class InOrderStream(Generic[Req, Resp]):
    """One open stream call; ``ask`` sends a request and reads its answer."""

    def __init__(self, call: grpc.aio.StreamStreamCall) -> None:
        self._call = call
        self._opened = False  # the controller's initial metadata came: it serves the method
        self.busy = False  # a request is on the stream
        self.ended = False

    async def ask(self, request: Req, timeout: float) -> Resp:
        """The answer to ``request``; AioRpcError as a unary call fails: the call's status
        when the controller ends it (UNIMPLEMENTED, INVALID_ARGUMENT), UNAVAILABLE when it
        broke or ended without one, DEADLINE_EXCEEDED after ``timeout``."""
        if self.ended or self.busy:
            raise call_error(grpc.StatusCode.UNAVAILABLE, "the stream is closed or has a request on it")
        self.busy = True
        try:
            async with asyncio.timeout(timeout):
                if not self._opened:
                    # The controller's first word before the first write: one without the method
                    # answers UNIMPLEMENTED there, where a write could race with the call's end
                    # and grpc.aio would report INTERNAL instead of its status.
                    await self._call.initial_metadata()
                    self._opened = True
                try:
                    await self._call.write(request)
                except asyncio.InvalidStateError:  # the call had ended: its status says why
                    raise await self._ended_with() from None
                answer = await self._call.read()
        except TimeoutError:
            self.close()
            raise call_error(grpc.StatusCode.DEADLINE_EXCEEDED, "the controller did not answer in time") from None
        except grpc.aio.AioRpcError as e:
            self.close()
            if e.code() in BROKEN:  # a connection that dropped under the call: retried, as UNAVAILABLE
                raise call_error(grpc.StatusCode.UNAVAILABLE, f"the stream broke ({e.code().name}: "
                                                              f"{e.details()})") from None
            raise
        except BaseException:  # cancelled: the answer would be read by the next request
            self.close()
            raise
        finally:
            self.busy = False
        if answer is grpc.aio.EOF:
            self.close()
            raise call_error(grpc.StatusCode.UNAVAILABLE, "the controller ended the stream")
        return answer

    async def _ended_with(self) -> grpc.aio.AioRpcError:
        """The status the call ended with, as an error (UNAVAILABLE for an OK end)."""
        code = await self._call.code()
        if code == grpc.StatusCode.OK:
            return call_error(grpc.StatusCode.UNAVAILABLE, "the controller ended the stream")
        return call_error(code, await self._call.details())

    def close(self) -> None:
        """End the call (the controller's handler is cancelled)."""
        self.ended = True
        self._call.cancel()
