"""A client of the controller quorum that finds the active controller from any bootstrap
address and retries what is retriable (NOT_CONTROLLER, REQUEST_TIMED_OUT, a node that is down)
with exponential backoff; used by the CLI, the tools and the brokers."""
from __future__ import annotations

import asyncio
from typing import Any

import grpc
from tenacity import AsyncRetrying, retry_if_exception_type, stop_after_delay, wait_exponential

from protos import controller_pb2_grpc

from .errors import ErrorCode

RETRIABLE = {ErrorCode.NOT_CONTROLLER, ErrorCode.REQUEST_TIMED_OUT}


class ControllerError(Exception):
    """A request failed: ``code`` is Kafka's error code, the message one line."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        self.code = code
        self.message = message
        super().__init__(f"{code.name}: {message}" if message else code.name)


def error_code(value: int) -> ErrorCode:
    try:
        return ErrorCode(value)
    except ValueError:
        return ErrorCode.UNKNOWN_SERVER_ERROR


class QuorumUnreachable(ControllerError):
    def __init__(self, message: str) -> None:
        super().__init__(ErrorCode.REQUEST_TIMED_OUT, message)


class _Retry(Exception):
    pass


def parse_bootstrap(text: str) -> list[str]:
    out = [p.strip() for p in text.split(",") if p.strip()]
    for p in out:
        host, _, port = p.rpartition(":")
        if not host or not port.isdigit():
            raise ControllerError(ErrorCode.INVALID_REQUEST, f"bad bootstrap address {p!r}: expected HOST:PORT")
    if not out:
        raise ControllerError(ErrorCode.INVALID_REQUEST, "no bootstrap controller given: expected HOST:PORT[,HOST:PORT]")
    return out


class ControllerClient:
    def __init__(self, bootstrap: list[str] | str, *, timeout: float = 15.0, attempt_timeout: float = 5.0) -> None:
        self.bootstrap = parse_bootstrap(bootstrap) if isinstance(bootstrap, str) else list(bootstrap)
        self.timeout = timeout
        self.attempt_timeout = attempt_timeout
        self._channels: dict[str, grpc.aio.Channel] = {}
        self._active: str | None = None
        self._next = 0
        self.last_controller_id = -1

    def _stub(self, address: str) -> controller_pb2_grpc.ControllerStub:
        ch = self._channels.get(address)
        if ch is None:
            ch = self._channels[address] = grpc.aio.insecure_channel(
                address, options=[("grpc.max_receive_message_length", 64 << 20)])
        return controller_pb2_grpc.ControllerStub(ch)

    def _target(self) -> str:
        if self._active:
            return self._active
        addr = self.bootstrap[self._next % len(self.bootstrap)]
        self._next += 1
        return addr

    async def call(self, method: str, request: Any, *, timeout: float | None = None) -> Any:
        """Send ``request`` to the active controller; returns the response once its status is
        NONE. Raises ControllerError for a non-retriable status, QuorumUnreachable when no
        controller answered in time."""
        last = ["no controller answered"]
        try:
            async for attempt in AsyncRetrying(stop=stop_after_delay(timeout or self.timeout),
                                               wait=wait_exponential(multiplier=0.02, max=0.25),
                                               retry=retry_if_exception_type(_Retry), reraise=True):
                with attempt:
                    addr = self._target()
                    try:
                        resp = await getattr(self._stub(addr), method)(request, timeout=self.attempt_timeout)
                    except grpc.aio.AioRpcError as e:
                        if e.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
                            last[0] = f"{addr}: {e.details() or e.code().name}"
                            self._active = None
                            raise _Retry() from None
                        raise ControllerError(ErrorCode.INVALID_REQUEST, f"{addr}: {e.details()}") from None
                    code = error_code(resp.status.error_code)
                    if code == ErrorCode.NONE:
                        self._active = addr
                        self.last_controller_id = resp.status.controller_id
                        return resp
                    if code in RETRIABLE:
                        last[0] = f"{addr}: {code.name}: {resp.status.error_message}"
                        self._active = resp.status.controller_endpoint or None
                        if self._active == addr:
                            self._active = None
                        raise _Retry()
                    raise ControllerError(code, resp.status.error_message)
        except _Retry:
            raise QuorumUnreachable(f"the controller quorum at {','.join(self.bootstrap)} did not answer "
                                    f"within {timeout or self.timeout:.0f}s (last: {last[0]})") from None
        raise AssertionError("unreachable")

    async def close(self) -> None:
        await asyncio.gather(*(ch.close() for ch in self._channels.values()), return_exceptions=True)
        self._channels.clear()

    async def __aenter__(self) -> "ControllerClient":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
