"""A client of the store that finds the leader itself.

Any endpoint will do: a follower answers with the leader's address and the client goes
there. Retries (with exponential backoff, through tenacity) happen only when the answer
proves the write was not applied (NotLeader, a dropped proposal) or for reads; when the
outcome of a write is unknown (the connection broke, the deadline passed) the client says so
instead of retrying a non-idempotent compare-and-set behind the caller's back.
"""
from __future__ import annotations

import grpc
from tenacity import AsyncRetrying, retry_if_exception_type, stop_after_delay, wait_exponential

from protos import kv_pb2 as pb
from protos import kv_pb2_grpc
from protos import raft_pb2 as rpb
from protos import raft_pb2_grpc
from raft.admin import NOT_APPLIED, leader_hint
from raft.config import TLSConfig
from raft.transport import open_channel


class KVError(Exception):
    """The request failed; the message says why, in one line."""


class OutcomeUnknown(KVError):
    """The write may or may not have been applied (the connection or deadline failed)."""


class _Retry(Exception):
    pass


class KVClient:
    def __init__(self, endpoints: list[str], *, timeout: float = 10.0, attempt_timeout: float = 3.0,
                 tls: TLSConfig | None = None) -> None:
        if not endpoints:
            raise KVError("no endpoints given")
        self.endpoints = list(endpoints)
        self.timeout = timeout
        self.attempt_timeout = attempt_timeout
        self.tls = tls
        self._channels: dict[str, grpc.aio.Channel] = {}
        self._leader: str | None = None
        self._next = 0

    def _channel(self, address: str) -> grpc.aio.Channel:
        ch = self._channels.get(address)
        if ch is None:
            ch = self._channels[address] = open_channel(address, self.tls, 4 << 20)
        return ch

    def _target(self) -> str:
        if self._leader:
            return self._leader
        addr = self.endpoints[self._next % len(self.endpoints)]
        self._next += 1
        return addr

    async def _call(self, service: str, method: str, request, *, write: bool):
        last: list[str] = []
        try:
            async for attempt in AsyncRetrying(stop=stop_after_delay(self.timeout),
                                               wait=wait_exponential(multiplier=0.02, max=0.1),
                                               retry=retry_if_exception_type(_Retry), reraise=True):
                with attempt:
                    addr = self._target()
                    ch = self._channel(addr)
                    stub = kv_pb2_grpc.KVStub(ch) if service == "kv" else raft_pb2_grpc.RaftAdminStub(ch)
                    try:
                        return await getattr(stub, method)(request, timeout=self.attempt_timeout)
                    except grpc.aio.AioRpcError as e:
                        last[:] = [f"{addr}: {e.details() or e.code().name}"]
                        self._handle(e, addr, write)
        except _Retry:
            raise KVError(f"no leader answered within {self.timeout:.0f}s (last: {last[0] if last else 'none'})") from None

    def _handle(self, e: grpc.aio.AioRpcError, addr: str, write: bool) -> None:
        code = e.code()
        not_applied = dict(e.trailing_metadata() or ()).get(NOT_APPLIED) == "1"
        if code == grpc.StatusCode.FAILED_PRECONDITION and not_applied:
            _, leader = leader_hint(e)
            self._leader = leader if leader and leader != addr else None
            raise _Retry()
        if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED,
                    grpc.StatusCode.CANCELLED):
            self._leader = None
            if not write or not_applied or (code == grpc.StatusCode.UNAVAILABLE and not _sent(e)):
                raise _Retry()
            raise OutcomeUnknown(f"{addr}: {e.details() or code.name}; the write may or may not "
                                 f"have been applied")
        raise KVError(f"{addr}: {e.details() or code.name}")

    async def put(self, key: bytes, value: bytes) -> int:
        return (await self._call("kv", "Put", pb.PutRequest(key=key, value=value), write=True)).index

    async def get(self, key: bytes) -> bytes | None:
        r = await self._call("kv", "Get", pb.GetRequest(key=key), write=False)
        return r.value if r.found else None

    async def delete(self, key: bytes) -> bool:
        return (await self._call("kv", "Delete", pb.DeleteRequest(key=key), write=True)).deleted

    async def cas(self, key: bytes, expected: bytes | None, value: bytes) -> tuple[bool, bytes | None]:
        """Set ``key`` to ``value`` if it holds ``expected`` (None: if it is absent).
        Returns (succeeded, the value before)."""
        req = pb.CasRequest(key=key, expected=expected or b"", expect_absent=expected is None, value=value)
        r = await self._call("kv", "Cas", req, write=True)
        return r.succeeded, (r.current if r.found else None)

    async def status(self, endpoint: str | None = None) -> rpb.StatusResponse:
        if endpoint:
            return await raft_pb2_grpc.RaftAdminStub(self._channel(endpoint)).Status(
                rpb.StatusRequest(), timeout=self.attempt_timeout)
        return await self._call("admin", "Status", rpb.StatusRequest(), write=False)

    async def admin(self, method: str, request) -> rpb.AdminResponse:
        return await self._call("admin", method, request, write=True)

    async def close(self) -> None:
        for ch in self._channels.values():
            await ch.close()
        self._channels.clear()


def _sent(e: grpc.aio.AioRpcError) -> bool:
    """Whether an UNAVAILABLE failure happened after the request may have reached a server
    (a reset mid-call) rather than while connecting (nothing was sent)."""
    details = (e.details() or "").lower()
    return not any(s in details for s in ("failed to connect", "connection refused",
                                          "no connection", "connect failed", "dns resolution"))
