"""A client of the store that finds the leader itself.

Any endpoint will do: a follower answers with the leader's address and the client goes
there. Retries (with capped exponential backoff) happen only when the answer proves the write
was not applied (NotLeader, a dropped proposal, a connection that never opened) or for reads;
when the outcome of a write is unknown (the connection broke, the deadline passed, a snapshot
superseded it) the client says so instead of retrying a non-idempotent compare-and-set behind
the caller's back. The rules live in ``raft.client``.
"""
from __future__ import annotations

import grpc

from raft.examples.kv import kv_pb2 as pb
from raft.examples.kv import kv_pb2_grpc
from raft.proto import raft_pb2 as rpb
from raft.proto import raft_pb2_grpc
from raft.client import LeaderClient
from raft.config import TLSConfig


class KVError(Exception):
    """The request failed; the message says why, in one line."""


class OutcomeUnknown(KVError):
    """The write may or may not have been applied (the connection or deadline failed)."""


class KVClient(LeaderClient):
    def __init__(self, endpoints: list[str], *, timeout: float = 10.0, attempt_timeout: float = 3.0,
                 tls: TLSConfig | None = None) -> None:
        if not endpoints:
            raise KVError("no endpoints given")
        super().__init__(endpoints, timeout=timeout, attempt_timeout=attempt_timeout, tls=tls,
                         max_message_bytes=4 << 20, backoff_s=(0.02, 0.1))

    def unreachable(self, message: str) -> Exception:
        return KVError(message)

    def outcome_unknown(self, message: str) -> Exception:
        return OutcomeUnknown(message)

    def failed(self, address: str, error: grpc.aio.AioRpcError) -> Exception:
        return KVError(f"{address}: {error.details() or error.code().name}")

    async def _kv(self, method: str, request, *, write: bool):
        return await self.call(lambda ch, t: getattr(kv_pb2_grpc.KVStub(ch), method)(request, timeout=t),
                               idempotent=not write)

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
