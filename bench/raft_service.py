"""The example KV service under load: 3 `raft-kv serve` nodes (fsync on), N concurrent asyncio
gRPC clients each doing one put at a time against the leader. The workload of
``../shared/anchors/etcd_bench.py``; prints one JSON line in the same format.

    python -m bench.raft_service --clients 64 --seconds 10 --value 256
"""
from __future__ import annotations

import asyncio

import grpc

from raft.examples.kv import kv_pb2 as pb
from raft.examples.kv import kv_pb2_grpc

from .common import KVProcesses, emit, load_parser, put_load, summary


async def run(clients: int, seconds: float, value: int, args: tuple[str, ...]) -> dict:
    cluster = KVProcesses(3, args)
    try:
        leader = await cluster.leader()
        ch = grpc.aio.insecure_channel(cluster.endpoint(leader))
        stub = kv_pb2_grpc.KVStub(ch)
        await stub.Put(pb.PutRequest(key=b"warm", value=b"x"), timeout=10)
        lat, elapsed = await put_load(stub, clients, seconds, value)
        await ch.close()
        return summary("pykraft-kv", clients, value, lat, elapsed)
    finally:
        cluster.close()


def main() -> None:
    ap = load_parser(__doc__)
    ap.add_argument("--no-fsync", action="store_true", help="unsafe: to measure what fsync costs")
    a = ap.parse_args()
    emit(asyncio.run(run(a.clients, a.seconds, a.value, ("--no-fsync",) if a.no_fsync else ())))


if __name__ == "__main__":
    main()
