"""The store's gRPC service, served on the node's own port beside the Raft peer service."""
from __future__ import annotations

import asyncio

import grpc

from raft.examples.kv import kv_pb2 as pb
from raft.examples.kv import kv_pb2_grpc
from raft.admin import abort_with
from raft.errors import RaftError
from raft.node import RaftNode
from raft.transport import add_service

from .state_machine import KVStateMachine

MAX_KEY = 4096
MAX_VALUE = 1 << 20


class KVService(kv_pb2_grpc.KVServicer):
    def __init__(self, node: RaftNode, sm: KVStateMachine, timeout: float = 10.0) -> None:
        self.node, self.sm, self.timeout = node, sm, timeout

    async def _check(self, context, key: bytes, value: bytes = b"") -> None:
        if not key or len(key) > MAX_KEY:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"keys must be 1-{MAX_KEY} bytes")
        if len(value) > MAX_VALUE:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"values must be at most {MAX_VALUE} bytes")

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


def build(node_id: int, voters: str, data_dir: str, **node_kwargs) -> tuple[RaftNode, KVStateMachine]:
    """A node of the store, its KV service registered; ``await node.start()`` to serve."""
    sm = KVStateMachine()
    node = RaftNode(node_id, voters, sm, data_dir=data_dir, **node_kwargs)
    add_service(node.server, kv_pb2_grpc.add_KVServicer_to_server, KVService(node, sm))
    return node, sm
