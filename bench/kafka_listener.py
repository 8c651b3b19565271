"""The brokers' network I/O per request, in one process each: the Kafka listener serving a stub
``KafkaApis`` (its own reading, dispatching and writing) and a follower's ``KafkaLeaderClient``
(its request written and answer read), the CPU each takes per request.

    python -m bench.kafka_listener --rounds 5 --requests 3000
    python -m bench.kafka_listener --base main --rounds 12 --shapes listener-small,listener-waiting

Why: a request's I/O is per request, not per record, and the whole brokers' profile mixes it
with everything else (docs/brokers.md, "Data path performance"); here it is alone, so that a
change to the framing or the event loop shows in a few percent of noise rather than in the
15 % a three-broker run moves by.

JSON lines, one per (tree, round, shape): ``us_per_request``, the CPU per request of the
process or thread measured. Shapes:
- ``listener-produce``: a blocking client keeps 5 Produce requests of 200 KB in flight (as
  librdkafka does under load) against a listener process; that process's CPU (/proc, kernel
  time included) per request answered;
- ``listener-fetch``: one small Fetch at a time, each answered with 190 KB, the listener's side
  of a follower's fetch;
- ``listener-small``: one small request at a time (ApiVersions v0, 14 bytes) answered at once
  with a few bytes: the listener's own cost per request, reading, dispatching and writing;
- ``listener-waiting``: the same, the stub's answer waiting for a timer first (as a long poll
  that expires or an acks=all produce waiting for its replicas do), so that the answer is
  written from a later loop turn than the request was read in;
- ``follower-read``: ``KafkaLeaderClient`` fetching, one request at a time, a 330 KB Fetch
  answer (3 partitions of 2 batches) from a blocking server thread; its event-loop thread's
  CPU per request, its answer's decoding included.

``--base COMMIT`` runs every round in COMMIT's tree (``bench.kafka_clients.base_tree``) and in
this one in turn, and ends with one ``summary`` row per shape: medians and the median and
range of the paired ratios (this / base).
"""
from __future__ import annotations

import argparse
import asyncio
import datetime
import os
import shutil
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from .common import REPO, cpu_seconds, emit
from .kafka_codec import fetch_answer, fetch_request, produce_answer, produce_request

SHAPES = ("listener-produce", "listener-fetch", "listener-small", "listener-waiting", "follower-read")


def serve_listener(port: int) -> None:
    """A KafkaListener on ``port`` whose APIs answer at once: a Produce with its answer, a
    Fetch with 190 KB (parts, as the data path's codec hands them over), an ApiVersions with a
    few bytes (after a timer's turn for the client id ``waiting``)."""
    from brokerd.kafka.codec import encode_response
    from brokerd.kafka.data_path_codec import EncodedResponse
    from brokerd.kafka.listener import KafkaListener

    records = memoryview(bytes(190_000))

    class Apis:
        def session(self, writer: Any) -> None:
            return None

        async def handle(self, header: Any, request: Any, session: Any) -> Any:
            if header.api_key == 18:
                if header.client_id == "waiting":
                    loop = asyncio.get_running_loop()
                    timer = loop.create_future()
                    loop.call_at(loop.time(), timer.set_result, None)
                    await timer
                return EncodedResponse([bytes(6)], datetime.timedelta(0))
            if header.api_key == 0:
                return encode_response(header, produce_answer())
            return EncodedResponse([bytes(30), records], datetime.timedelta(0))

    async def go() -> None:
        listener = KafkaListener("KAFKA", "127.0.0.1", port, Apis(), 100 << 20)  # type: ignore[arg-type]
        await listener.bind()
        await listener.start()
        print("ready", flush=True)
        await asyncio.Event().wait()
    asyncio.run(go())


def _read_exactly(s: socket.socket, n: int) -> None:
    buf = memoryview(bytearray(n))
    while n:
        got = s.recv_into(buf[-n:])
        if not got:
            raise EOFError("the listener closed the connection")
        n -= got


def listener_cpu(tree: Path, shape: str, requests: int) -> float:
    """A listener process from ``tree``; its CPU per request over ``requests`` requests."""
    from brokerd.kafka.codec import build, frame_request, request_schema
    if shape == "listener-produce":
        request = produce_request()
        request["topic_data"][0]["partition_data"][0]["records"] = bytes(200_000)
        frame, depth = frame_request(0, 9, 1, "bench", build(request_schema(0, 9), request)), 5
    elif shape == "listener-fetch":
        frame, depth = frame_request(1, 12, 1, "bench", build(request_schema(1, 12), fetch_request(3, True))), 1
    else:
        client = "waiting" if shape == "listener-waiting" else "bench"
        frame, depth = frame_request(18, 0, 1, client, build(request_schema(18, 0), {})), 1
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen([sys.executable, "-m", "bench.kafka_listener", "--serve", str(port)], cwd=tree,
                              env={**os.environ, "PYTHONPATH": str(tree)}, stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None and server.stdout.readline().strip() == "ready"
        with socket.create_connection(("127.0.0.1", port)) as s:
            for _ in range(depth):
                s.sendall(frame)

            def one() -> None:
                size = int.from_bytes(s.recv(4, socket.MSG_WAITALL), "big")
                _read_exactly(s, size)
                s.sendall(frame)
            for _ in range(200):  # warm: kio's schemas loaded, buffers grown
                one()
            start = cpu_seconds(server.pid)
            for _ in range(requests):
                one()
            return (cpu_seconds(server.pid) - start) / requests * 1e6
    finally:
        server.terminate()
        server.wait()


def follower_cpu(requests: int) -> float:
    """This process's KafkaLeaderClient: its event-loop thread's CPU per Fetch answered."""
    from brokerd.kafka.codec import RequestHeader, build, encode_response, frame_response, request_schema
    from brokerd.kafka.replica_client import KafkaLeaderClient
    header = RequestHeader(1, 12, 1, "bench", True)
    answer = frame_response(header, encode_response(header, fetch_answer(3, 2)))

    def serve(sock: socket.socket) -> None:
        conn, _ = sock.accept()
        with conn:
            try:
                while True:
                    size = int.from_bytes(conn.recv(4, socket.MSG_WAITALL), "big")
                    request = conn.recv(size, socket.MSG_WAITALL)
                    conn.sendall(answer[:4] + request[4:8] + answer[8:])  # the request's correlation id
            except (OSError, ValueError):
                pass

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(1)
    threading.Thread(target=serve, args=(sock,), daemon=True).start()
    client = KafkaLeaderClient(f"127.0.0.1:{sock.getsockname()[1]}", None, 102)
    request = build(request_schema(1, 12), fetch_request(3, True))

    async def go() -> float:
        for _ in range(200):
            await client._call(1, 12, request, 10)
        start = time.thread_time()
        for _ in range(requests):
            await client._call(1, 12, request, 10)
        used = time.thread_time() - start
        await client.close()
        return used / requests * 1e6
    try:
        return asyncio.run(go())
    finally:
        sock.close()


def measure(tree: Path, shape: str, requests: int) -> float:
    """``shape``'s CPU per request with ``tree``'s code (a process of its own for each)."""
    if shape == "follower-read":
        out = subprocess.run([sys.executable, "-m", "bench.kafka_listener", "--follower", str(requests)], cwd=tree,
                             env={**os.environ, "PYTHONPATH": str(tree)}, capture_output=True, text=True, check=True)
        return float(out.stdout)
    return listener_cpu(tree, shape, requests)


def run(args: argparse.Namespace) -> None:
    trees: list[tuple[str, Path]] = [("this", REPO)]
    base = None
    if args.base:
        from .kafka_clients import base_tree
        base = base_tree(args.base)
        trees = [("base", base), ("this", REPO)]
    figures: dict[tuple[str, str], list[float]] = {}
    try:
        for r in range(args.rounds):
            for label, tree in trees if r % 2 == 0 else trees[::-1]:
                for shape in args.shapes:
                    us = measure(tree, shape, args.requests)
                    figures.setdefault((label, shape), []).append(us)
                    emit({"bench": "kafka_listener", "tree": label, "round": r, "shape": shape,
                          "us_per_request": round(us, 1)})
    finally:
        if base is not None:
            shutil.rmtree(base, ignore_errors=True)
    if base is None:
        return
    for shape in args.shapes:
        b, t = figures[("base", shape)], figures[("this", shape)]
        ratios = sorted(x / y for x, y in zip(t, b, strict=True))
        emit({"bench": "kafka_listener", "summary": f"this / base, {args.rounds} rounds", "shape": shape,
              "base_us": round(statistics.median(b), 1), "this_us": round(statistics.median(t), 1),
              "paired_ratio": round(statistics.median(ratios), 2), "range": [round(ratios[0], 2),
                                                                             round(ratios[-1], 2)]})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--requests", type=int, default=3000, help="requests measured per shape and round")
    ap.add_argument("--base", help="a commit to compare with, run in turn with this tree")
    ap.add_argument("--shapes", type=lambda v: v.split(","), default=list(SHAPES),
                    help=f"the shapes measured, comma-separated (default: all of {','.join(SHAPES)})")
    ap.add_argument("--serve", type=int, help=argparse.SUPPRESS)  # the listener process
    ap.add_argument("--follower", type=int, help=argparse.SUPPRESS)  # the follower's process
    args = ap.parse_args()
    if unknown := set(args.shapes) - set(SHAPES):
        ap.error(f"no shape {', '.join(sorted(unknown))}: the shapes are {', '.join(SHAPES)}")
    if args.serve:
        serve_listener(args.serve)
    elif args.follower:
        print(follower_cpu(args.follower))
    else:
        run(args)


if __name__ == "__main__":
    main()
