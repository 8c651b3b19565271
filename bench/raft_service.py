"""The example KV service under load: 3 `raft-kv serve` nodes (fsync on), N concurrent asyncio
gRPC clients each doing one put at a time against the leader. The workload of
``../shared/anchors/etcd_bench.py``; prints one JSON line in the same format.

    python -m bench.raft_service --clients 64 --seconds 10 --value 256
"""
from __future__ import annotations

import argparse
import asyncio
import time

import grpc

from protos import kv_pb2 as pb
from protos import kv_pb2_grpc

from .common import KVProcesses, emit, summary


async def run(clients: int, seconds: float, value: int, args: tuple[str, ...]) -> dict:
    cluster = KVProcesses(3, args)
    try:
        leader = await cluster.leader()
        ch = grpc.aio.insecure_channel(cluster.endpoint(leader))
        stub = kv_pb2_grpc.KVStub(ch)
        await stub.Put(pb.PutRequest(key=b"warm", value=b"x"), timeout=10)
        val = b"v" * value
        lat: list[float] = []
        stop = time.perf_counter() + seconds

        async def worker(w: int) -> None:
            i = 0
            while time.perf_counter() < stop:
                t = time.perf_counter()
                await stub.Put(pb.PutRequest(key=b"k%d-%d" % (w, i % 1000), value=val))
                lat.append(time.perf_counter() - t)
                i += 1
        t0 = time.perf_counter()
        await asyncio.gather(*(worker(w) for w in range(clients)))
        elapsed = time.perf_counter() - t0
        await ch.close()
        return summary("pykraft-kv", clients, value, lat, elapsed)
    finally:
        cluster.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--clients", type=int, default=64)
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--value", type=int, default=256)
    ap.add_argument("--no-fsync", action="store_true", help="unsafe: to measure what fsync costs")
    a = ap.parse_args()
    emit(asyncio.run(run(a.clients, a.seconds, a.value, ("--no-fsync",) if a.no_fsync else ())))


if __name__ == "__main__":
    main()
