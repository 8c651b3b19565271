"""The example KV service under load: 3 `raft-kv serve` nodes (fsync on), N concurrent asyncio
callers each doing one put at a time against the leader. The workload of
``../shared/anchors/etcd_bench.py``; prints one JSON line in the same format.

By default the callers share one ``KVClient``, so their puts travel over one Session stream (as
etcd's clients share one channel); ``--unary`` makes one unary gRPC call per put instead.

    python -m bench.raft_service --clients 64 --seconds 10 --value 256
    python -m bench.raft_service --clients 64 --unary
"""
from __future__ import annotations

import asyncio

import grpc

from raft.examples.kv import kv_pb2 as pb
from raft.examples.kv import kv_pb2_grpc
from raft.examples.kv.client import KVClient

from .common import KVProcesses, emit, load_parser, put_load, summary


class _OverStream:
    """``put_load``'s stub, its puts made by the KV client over its stream."""

    def __init__(self, kv: KVClient) -> None:
        self.kv = kv

    async def Put(self, request: pb.PutRequest, timeout: float | None = None) -> int:
        return await self.kv.put(request.key, request.value)


async def run(clients: int, seconds: float, value: int, args: tuple[str, ...], unary: bool) -> dict:
    cluster = KVProcesses(3, args)
    try:
        leader = await cluster.leader()
        stub: kv_pb2_grpc.KVStub | _OverStream
        if unary:
            ch = grpc.aio.insecure_channel(cluster.endpoint(leader))
            stub, close = kv_pb2_grpc.KVStub(ch), ch.close
        else:
            kv = KVClient([cluster.endpoint(leader)])
            stub, close = _OverStream(kv), kv.close
        await stub.Put(pb.PutRequest(key=b"warm", value=b"x"), timeout=10)
        lat, elapsed = await put_load(stub, clients, seconds, value)
        await close()
        return summary("pykraft-kv-unary" if unary else "pykraft-kv", clients, value, lat, elapsed)
    finally:
        cluster.close()


def main() -> None:
    ap = load_parser(__doc__)
    ap.add_argument("--no-fsync", action="store_true", help="unsafe: to measure what fsync costs")
    ap.add_argument("--unary", action="store_true", help="one unary call per put instead of the stream")
    a = ap.parse_args()
    emit(asyncio.run(run(a.clients, a.seconds, a.value, ("--no-fsync",) if a.no_fsync else (), a.unary)))


if __name__ == "__main__":
    main()
