"""The floor under ``bench.raft_service``: the same clients and requests against a grpc.aio
server in its own process whose Put does nothing (no Raft, no disk, no replication). Its
ops/s is the most any Python gRPC service answers on this machine, whatever stands behind
it; prints one JSON line in the anchors' format.

    python -m bench.grpc_floor --clients 64 --seconds 10 --value 256
"""
from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys

import grpc

from raft.examples.kv import kv_pb2 as pb
from raft.examples.kv import kv_pb2_grpc

from .common import REPO, emit, free_ports, load_parser, put_load, summary


class NoOpKV(kv_pb2_grpc.KVServicer):
    async def Put(self, request: pb.PutRequest, context: grpc.aio.ServicerContext) -> pb.PutResponse:
        return pb.PutResponse(index=1)


async def serve(port: int) -> None:
    server = grpc.aio.server()
    kv_pb2_grpc.add_KVServicer_to_server(NoOpKV(), server)
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    await server.wait_for_termination()


async def load(port: int, clients: int, seconds: float, value: int) -> dict:
    ch = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    stub = kv_pb2_grpc.KVStub(ch)
    await stub.Put(pb.PutRequest(key=b"warm", value=b"x"), timeout=10, wait_for_ready=True)
    lat, elapsed = await put_load(stub, clients, seconds, value)
    await ch.close()
    return summary("grpc-aio-noop", clients, value, lat, elapsed)


def main() -> None:
    ap = load_parser(__doc__)
    ap.add_argument("--serve", type=int, metavar="PORT", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.serve:
        asyncio.run(serve(a.serve))
        return
    port = free_ports(1)[0]
    server = subprocess.Popen([sys.executable, "-m", "bench.grpc_floor", "--serve", str(port)], cwd=REPO)
    try:
        emit(asyncio.run(load(port, a.clients, a.seconds, a.value)))
    finally:
        server.kill()
        server.wait()


if __name__ == "__main__":
    main()
