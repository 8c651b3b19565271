"""Our client's own CPU per record, in one process and without a cluster: the producer and the
consumer against a broker stand-in that answers at once, so that what is measured is the
client's per-record work alone (send, batching, encoding, CRC, the request's protobuf; a fetch
answer's parsing, CRC checks, decoding into ConsumerRecords), not the brokers' or the
machine's load.

    python -m bench.client_cpu --records 300000
    python -m bench.client_cpu --base main --rounds 5

What ``bench.broker`` and ``bench.kafka_clients`` run, on the same workload: an idempotent
acks=all producer, linger 5 ms, 256 KiB batches, ``--value``-byte JSON log lines
(``bench.broker.json_line``) without keys to a 6-partition topic; then everything read back
by a consumer assigned every partition (``max_poll_records`` 5000, 4 MiB per partition and
fetch), from answers encoded as a broker stores and serves them. The stand-in serializes each
Produce request and parses each Fetch answer as gRPC does.

JSON lines: ``produce`` and ``consume`` rows, ``us_per_record`` (process CPU, user + system,
per record). ``--base COMMIT --rounds N`` runs it from ``COMMIT``'s tree and this one in turn
(base, this, this, base, ...), N times each, and ends with a ``summary`` row per phase: medians
and the median and range of the paired ratios (this / base).
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from typing import Any

from .broker import json_line
from .common import REPO, emit

TOPIC, PARTITIONS = "bench", 6


def _metadata() -> Any:
    from protos import broker_pb2 as pb
    r = pb.MetadataResponse(cluster_id="bench")
    r.brokers.add(node_id=1, host="127.0.0.1", port=1)
    t = r.topics.add(name=TOPIC)
    for p in range(PARTITIONS):
        t.partitions.add(partition=p, leader=1, leader_epoch=1, replicas=[1], isr=[1])
    return r


class StandIn:
    """The broker's answers, at once: Metadata, InitProducerId, ListOffsets, Produce (the
    request serialized and parsed, as gRPC does) and Fetch (stored batches served from
    ``answers``, keyed by partition and fetch offset; an empty answer waits as a long poll)."""

    def __init__(self, answers: dict[tuple[int, int], bytes], high_watermark: int) -> None:
        self.answers = answers
        self.high_watermark = high_watermark
        self.next_offset: dict[int, int] = {}

    def stub(self, address: str) -> "StandIn":
        return self

    async def Metadata(self, req: Any, timeout: float | None = None) -> Any:
        return _metadata()

    async def InitProducerId(self, req: Any, timeout: float | None = None) -> Any:
        from protos import broker_pb2 as pb
        return pb.InitProducerIdResponse(producer_id=7, producer_epoch=0)

    async def ListOffsets(self, req: Any, timeout: float | None = None) -> Any:
        from protos import broker_pb2 as pb
        r = pb.ListOffsetsResponse()
        for t in req.topics:
            rt = r.topics.add(name=t.name)
            for p in t.partitions:
                rt.partitions.add(partition=p.partition, offset=0)
        return r

    def ProduceStream(self) -> "StandInStream":
        return StandInStream(self)

    async def Produce(self, req: Any, timeout: float | None = None) -> Any:
        from protos import broker_pb2 as pb
        req = pb.ProduceRequest.FromString(req.SerializeToString())
        await asyncio.sleep(0)
        return self.answer(req)

    def answer(self, req: Any) -> Any:
        from protos import broker_pb2 as pb
        r = pb.ProduceResponse(correlation_id=req.correlation_id)
        for t in req.topics:
            rt = r.topics.add(name=t.name)
            for p in t.partitions:
                offset = self.next_offset.get(p.partition, 0)
                self.next_offset[p.partition] = offset + p.batch.record_count
                rt.partitions.add(partition=p.partition, base_offset=offset)
        return r

    async def Fetch(self, req: Any, timeout: float | None = None) -> Any:
        from protos import broker_pb2 as pb
        r = pb.FetchResponse()
        for t in req.topics:
            rt = r.topics.add(name=t.name)
            for p in t.partitions:
                rt.partitions.add(partition=p.partition, high_watermark=self.high_watermark,
                                  last_stable_offset=self.high_watermark,
                                  records=self.answers.get((p.partition, p.fetch_offset), b""))
        data = r.SerializeToString()
        await asyncio.sleep(0 if r.ByteSize() > 1000 else 0.1)
        return pb.FetchResponse.FromString(data)


class StandInStream:
    """The broker's ProduceStream (``clients.produce_stream``), answering each request at once:
    written requests serialized and parsed, answers serialized and parsed, as gRPC does."""

    def __init__(self, stand_in: StandIn) -> None:
        self.stand_in = stand_in
        self.answers: asyncio.Queue[bytes | None] = asyncio.Queue()

    async def initial_metadata(self) -> tuple[()]:
        return ()

    def done(self) -> bool:
        return False

    async def write(self, req: Any) -> None:
        from protos import broker_pb2 as pb
        self.answers.put_nowait(self.stand_in.answer(pb.ProduceRequest.FromString(req.SerializeToString()))
                                .SerializeToString())

    async def read(self) -> Any:
        import grpc
        from protos import broker_pb2 as pb
        data = await self.answers.get()
        return grpc.aio.EOF if data is None else pb.ProduceResponse.FromString(data)

    def cancel(self) -> None:
        self.answers.put_nowait(None)


def _stored(values: list[bytes], per_partition: int, answer_bytes: int) -> dict[tuple[int, int], bytes]:
    """Fetch answers as a broker serves them: stored frames of 800-record batches, about
    ``answer_bytes`` per answer, keyed by (partition, first offset)."""
    from clients.records import build_batch, frame
    ts = int(time.time() * 1000)
    answers = {}
    for partition in range(PARTITIONS):
        offset = 0
        while offset < per_partition:
            start, frames, size = offset, [], 0
            while offset < per_partition and size < answer_bytes:
                n = min(800, per_partition - offset)
                b = build_batch([(None, values[(offset + k) & 1023], ts + k // 100, ()) for k in range(n)])
                b.base_offset = offset
                frames.append(frame(b.SerializeToString()))
                size += len(frames[-1])
                offset += n
            answers[(partition, start)] = b"".join(frames)
    return answers


async def _produce(records: int, values: list[bytes]) -> float:
    from clients import Producer
    async with Producer("127.0.0.1:1", acks="all", batch_size=262144, linger_ms=5, buffer_memory=64 << 20,
                        enable_idempotence=True) as p:
        await p.send_and_wait(TOPIC, b"warm-up")
        send = p.send
        cpu = time.process_time()
        for i in range(records):
            await send(TOPIC, values[i & 1023])
        await p.flush()
        cpu = time.process_time() - cpu
        if p.metrics["record-send-total"] != records + 1:
            raise RuntimeError(f"acknowledged {p.metrics['record-send-total']} of {records + 1}")
    return cpu


async def _consume(total: int) -> float:
    from clients import Consumer
    async with Consumer("127.0.0.1:1", auto_offset_reset="earliest", fetch_max_wait_ms=100, max_poll_records=5000,
                        max_partition_fetch_bytes=4 << 20) as c:
        await c.subscribe(TOPIC)
        cpu = time.process_time()
        n = 0
        while n < total:
            n += len(await c.poll(300))
        cpu = time.process_time() - cpu
        if n != total:
            raise RuntimeError(f"consumed {n} of {total}")
    return cpu


def run(args: argparse.Namespace) -> None:
    from clients import cluster_view
    values = [json_line(i, args.value) for i in range(1024)]
    per_partition = args.records // PARTITIONS
    stand_in: Any = StandIn(_stored(values, per_partition, 4 << 20), per_partition)  # a BrokerStub's stand-in
    cluster_view.Connections.stub = lambda self, address: stand_in  # type: ignore[method-assign]  # every dial
    for phase, n, cpu in (("produce", args.records, asyncio.run(_produce(args.records, values))),
                          ("consume", per_partition * PARTITIONS, asyncio.run(_consume(per_partition * PARTITIONS)))):
        emit({"system": "pykraft-client", "phase": phase, "records": n, "value_bytes": args.value,
              "us_per_record": round(cpu / n * 1e6, 3), "load_average": round(os.getloadavg()[0], 1)})


def compare(args: argparse.Namespace) -> None:
    """This tree's and ``--base``'s clients in turn (this script run over each tree's code)."""
    from .kafka_clients import base_tree
    base = base_tree(args.base)
    rows: dict[tuple[str, str], list[float]] = {}
    try:
        for r in range(args.rounds):
            order = [("base", base), ("this", REPO)]
            for label, tree in order if r % 2 == 0 else order[::-1]:
                out = subprocess.run([sys.executable, "-m", "bench.client_cpu", "--records", str(args.records),
                                      "--value", str(args.value)], cwd=tree, env={**os.environ, "PYTHONPATH": str(tree)},
                                     capture_output=True, text=True, check=True)
                for line in out.stdout.splitlines():
                    row = {**json.loads(line), "tree": label, "round": r}
                    emit(row)
                    rows.setdefault((label, row["phase"]), []).append(row["us_per_record"])
    finally:
        shutil.rmtree(base, ignore_errors=True)
    for phase in ("produce", "consume"):
        ratios = sorted(t / b for b, t in zip(rows[("base", phase)], rows[("this", phase)], strict=True))
        emit({"system": "pykraft-client", "phase": phase, "summary": f"this / base, {args.rounds} rounds",
              "us_per_record": {"base": round(statistics.median(rows[("base", phase)]), 3),
                                "this": round(statistics.median(rows[("this", phase)]), 3),
                                "paired_ratio": round(statistics.median(ratios), 2),
                                "range": [round(ratios[0], 2), round(ratios[-1], 2)]}})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=300_000)
    ap.add_argument("--value", type=int, default=256, help="value bytes")
    ap.add_argument("--base", help="a commit to compare with: its client and this one in turn")
    ap.add_argument("--rounds", type=int, default=3, help="with --base: runs of each tree")
    args = ap.parse_args()
    if args.base:
        compare(args)
    else:
        run(args)


if __name__ == "__main__":
    main()
