"""What a broker's requests to the active controller cost the broker and the controller: the
metadata long polls (FetchMetadata) and heartbeats as unary calls against the same requests
as messages of one stream (FetchMetadataStream, BrokerHeartbeatStream), alternated.

    python -m bench.controller_calls --rounds 4 --calls 200 --wait-ms 100

The client is this process's ``ControllerClient``, as a broker's fetcher and heartbeats use
it; the controller a stand-in in its own process, set up as a controller's gRPC listener is
(request metrics, the malformed-request guard), which answers each request after
``--wait-ms`` (a long poll's wait; 0: at once). One request at a time, as a broker sends
them. Each row: the client's and the stand-in's CPU per request (user + system, every thread,
/proc) for one path; then the medians and the paired ratio (stream / unary, round by round).

Why: the brokers' idle CPU (docs/brokers.md, "The brokers' idle CPU"), where these calls were
about a third, is too noisy a measure for a part of it on a shared machine.
"""
from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
from typing import Any, AsyncIterator

import grpc

from common.metrics import MetricsEndpoint
from metadata.client import ControllerClient
from protos import controller_pb2 as pb
from protos import controller_pb2_grpc
from raft.transport import add_service

from .common import REPO, cpu_seconds, emit, free_ports

PATHS = ("unary", "stream")


class StandIn(controller_pb2_grpc.ControllerServicer):
    """Answers every poll and heartbeat after ``wait_s``, unary or on a stream."""

    def __init__(self, wait_s: float) -> None:
        self.wait_s = wait_s

    async def FetchMetadata(self, request: pb.FetchMetadataRequest, context: Any) -> pb.FetchMetadataResponse:
        if self.wait_s:
            await asyncio.sleep(self.wait_s)
        return pb.FetchMetadataResponse(high_watermark=request.offset)

    async def BrokerHeartbeat(self, request: pb.BrokerHeartbeatRequest, context: Any) -> pb.BrokerHeartbeatResponse:
        return pb.BrokerHeartbeatResponse(is_caught_up=True)

    async def FetchMetadataStream(self, requests: AsyncIterator[pb.FetchMetadataRequest],
                                  context: Any) -> AsyncIterator[pb.FetchMetadataResponse]:
        await context.send_initial_metadata(())
        async for request in requests:
            yield await self.FetchMetadata(request, context)

    async def BrokerHeartbeatStream(self, requests: AsyncIterator[pb.BrokerHeartbeatRequest],
                                    context: Any) -> AsyncIterator[pb.BrokerHeartbeatResponse]:
        await context.send_initial_metadata(())
        async for request in requests:
            yield await self.BrokerHeartbeat(request, context)


async def serve(port: int, wait_s: float) -> None:
    metrics = MetricsEndpoint(None)
    server = grpc.aio.server(interceptors=[metrics.requests.interceptor("CONTROLLER")])
    add_service(server, controller_pb2_grpc.add_ControllerServicer_to_server, StandIn(wait_s))
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    await server.wait_for_termination()


async def measure(address: str, server_pid: int, path: str, calls: int, heartbeat_every: int) -> dict[str, Any]:
    """``calls`` polls (and a heartbeat after every ``heartbeat_every``-th) on ``path``."""
    streamed = path == "stream"
    async with ControllerClient([address], timeout=30, attempt_timeout=10) as client:
        poll = pb.FetchMetadataRequest(offset=1, max_wait_ms=500, broker_id=1)
        beat = pb.BrokerHeartbeatRequest(broker_id=1, broker_epoch=1)
        await client.fetch_metadata(poll, streamed=streamed)  # the channel (and the streams) open
        await client.broker_heartbeat(beat, streamed=streamed)
        ours, theirs = cpu_seconds(os.getpid()), cpu_seconds(server_pid)
        requests = 0
        for i in range(calls):
            await client.fetch_metadata(poll, streamed=streamed)
            requests += 1
            if heartbeat_every and i % heartbeat_every == 0:
                await client.broker_heartbeat(beat, streamed=streamed)
                requests += 1
        ours, theirs = cpu_seconds(os.getpid()) - ours, cpu_seconds(server_pid) - theirs
    return {"path": path, "requests": requests, "client_us_per_request": round(ours / requests * 1e6, 1),
            "controller_us_per_request": round(theirs / requests * 1e6, 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--calls", type=int, default=200, help="polls per path and round")
    ap.add_argument("--wait-ms", type=float, default=100, help="the stand-in's wait before each poll's answer")
    ap.add_argument("--heartbeat-every", type=int, default=2, help="a heartbeat after every Nth poll (0: none)")
    ap.add_argument("--serve", type=int, metavar="PORT", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.serve:
        asyncio.run(serve(a.serve, a.wait_ms / 1000))
        return
    port = free_ports(1)[0]
    server = subprocess.Popen([sys.executable, "-m", "bench.controller_calls", "--serve", str(port),
                               "--wait-ms", str(a.wait_ms)], cwd=REPO)
    rows: dict[str, list[dict[str, Any]]] = {p: [] for p in PATHS}
    try:
        for r in range(a.rounds):
            for path in PATHS if r % 2 == 0 else PATHS[::-1]:
                row = {**asyncio.run(measure(f"127.0.0.1:{port}", server.pid, path, a.calls, a.heartbeat_every)),
                       "round": r, "wait_ms": a.wait_ms}
                emit(row)
                rows[path].append(row)
    finally:
        server.kill()
        server.wait()
    for side in ("client_us_per_request", "controller_us_per_request"):
        ratios = [s[side] / u[side] for u, s in zip(rows["unary"], rows["stream"], strict=True) if u[side]]
        emit({"summary": side, **{p: statistics.median(r[side] for r in rows[p]) for p in PATHS},
              "paired_ratio": round(statistics.median(ratios), 3) if ratios else None,
              "range": [round(min(ratios), 3), round(max(ratios), 3)] if ratios else None})


if __name__ == "__main__":
    main()
