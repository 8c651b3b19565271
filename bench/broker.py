"""The brokers' data path, measured: produce and consume throughput through three broker
processes (replication factor 3), end-to-end latency, and the RocksDB partition log's write
options, each next to this disk's own sequential write rate (the physical limit).

    python -m bench.broker --producers 1 --acks all --seconds 10 --value 256

JSON lines:
- ``disk``: write + fsync of 256 MiB in 1 MiB writes (dd-like), MB/s;
- ``rocksdb``: PartitionLog appends of 64- and 1000-record batches under each flush policy,
  MB/s and ratio to the disk;
- ``produce``: messages/s and MB/s acknowledged over all producer processes, and the bytes the
  three replicas wrote as a ratio to the disk;
- ``end_to_end``: p50/p99 ms from ``send`` to a tailing consumer's ``poll``;
- ``consume``: a consumer reading everything back from the beginning, messages/s and MB/s.

``--idempotence on,off`` and ``--compression none,gzip,snappy,lz4,zstd`` take lists: each
combination produces to its own topic and is read back, in the same cluster and run, so the
rows compare (the ``produce`` rows carry ``idempotence``, ``compression`` and, for a codec,
``compression_ratio``: compressed / uncompressed bytes of the payload). Values are realistic
JSON log lines (``json_line``), not random bytes, so that codecs have something to find.

The producers use the client library's sticky partitioner (no keys) with ``--batch-size``
and ``--linger-ms``; every process (3 controllers, 3 brokers, producers, consumers) shares
this machine's cores, which bounds what is measured here.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from metadata.client import ControllerClient
from protos import controller_pb2 as cpb

from .common import REPO, emit, three_brokers

MiB = 1 << 20
_TS = struct.Struct(">d")


# -- the disk and the log store -------------------------------------------------------------

def disk_rate(directory: str, total: int = 256 * MiB, chunk: int = MiB) -> float:
    """MB/s of sequential writes followed by one fsync (what `dd conv=fsync` measures)."""
    path = os.path.join(directory, "dd.tmp")
    buf = os.urandom(chunk)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        start = time.perf_counter()
        for _ in range(total // chunk):
            os.write(fd, buf)
        os.fsync(fd)
        elapsed = time.perf_counter() - start
    finally:
        os.close(fd)
        os.unlink(path)
    return total / elapsed / 1e6


async def _log_rate(directory: str, policy_name: str, seconds: float, value: int, writers: int,
                    records: int) -> dict:
    from brokerd.log_store import FlushPolicy, LogStore
    from brokerd.partition_log import PartitionLog
    from clients.records import build_batch
    policy = FlushPolicy(interval_messages=1) if policy_name == "sync" else FlushPolicy()
    path = tempfile.mkdtemp(dir=directory, prefix="rocks")
    store = LogStore(path, policy)
    logs = [PartitionLog(store, uuid.uuid4(), i) for i in range(writers)]
    template = build_batch([(None, os.urandom(value), int(time.time() * 1000), ()) for _ in range(records)])
    stop = time.perf_counter() + seconds
    written = [0]

    async def writer(plog: PartitionLog) -> None:
        while time.perf_counter() < stop:
            b = type(template)()
            b.CopyFrom(template)
            info = await plog.append_as_leader(b, 0)
            written[0] += info.bytes
            if policy_name != "sync":
                await asyncio.sleep(0)
    start = time.perf_counter()
    await asyncio.gather(*(writer(lg) for lg in logs))
    elapsed = time.perf_counter() - start
    await store.close()
    shutil.rmtree(path, ignore_errors=True)
    return {"mode": policy_name, "writers": writers, "batch_records": records,
            "MBps": round(written[0] / elapsed / 1e6, 1), "batches_per_s": round(written[0] / elapsed / template.ByteSize())}


# -- the cluster --------------------------------------------------------------------------------

_LEVELS = ("INFO", "INFO", "INFO", "DEBUG", "WARN", "ERROR")
_PATHS = ("/api/v1/orders", "/api/v1/orders/{id}", "/api/v1/items", "/healthz", "/api/v1/users/{id}/cart")


def json_line(i: int, size: int) -> bytes:
    """A log line as services write them (JSON, repetitive keys, varying numbers), padded or cut
    to ``size`` bytes; deterministic in ``i``."""
    line = json.dumps({"ts": 1_732_000_000_000 + i * 7, "level": _LEVELS[i % 6], "service": "checkout",
                       "path": _PATHS[i % 5].replace("{id}", str(i * 7919 % 100_000)), "status": 200 + (i % 50 == 0) * 300,
                       "duration_ms": i * 31 % 977, "trace_id": f"{i * 2654435761 % 2**64:016x}",
                       "msg": "request served" if i % 6 else "cache miss, loaded from the database"}).encode()
    return (line + b" " * size)[:size]


def _producer(args: argparse.Namespace) -> None:
    """Send as fast as the producer goes (``--rate 0``) or at ``--rate`` messages/s; each value
    starts with the send time, for the end-to-end latency, then a JSON log line."""
    from clients import Producer

    async def go() -> dict:
        lines = [json_line(i, max(0, args.value - _TS.size)) for i in range(1024)]
        sent = 0
        async with Producer(args.bootstrap, acks=args.acks, batch_size=args.batch_size, linger_ms=args.linger_ms,
                            buffer_memory=64 * MiB, enable_idempotence=args.idempotence == "on",
                            compression_type=args.compression) as p:
            send, topic, now = p.send, args.topic, time.time
            cpu = time.process_time()
            start = time.perf_counter()
            stop = start + args.seconds
            step = 200 if args.rate <= 0 else max(1, args.rate // 100)
            while time.perf_counter() < stop:
                for k in range(step):
                    await send(topic, _TS.pack(now()) + lines[(sent + k) & 1023])
                sent += step
                if args.rate <= 0:
                    await asyncio.sleep(0)
                else:
                    await asyncio.sleep(max(0.0, start + sent / args.rate - time.perf_counter()))
            await p.flush()
            elapsed = time.perf_counter() - start
            return {"sent": sent, "acked": p.metrics["record-send-total"], "failed": p.metrics["record-error-total"],
                    "requests": p.metrics["request-total"], "batches": p.metrics["batch-total"],
                    "elapsed": elapsed, "cpu_s": time.process_time() - cpu}
    print(json.dumps(asyncio.run(go())), flush=True)


def _tail(args: argparse.Namespace) -> None:
    """Tail the topic for ``--seconds``: the end-to-end latency of each record."""
    from clients import Consumer

    async def go() -> dict:
        latencies: list[float] = []
        async with Consumer(args.bootstrap, auto_offset_reset="latest", fetch_max_wait_ms=100) as c:
            await c.subscribe(args.topic)
            await c.poll(100)  # positions resolved: ready before the producer starts
            print("ready", flush=True)
            stop = time.time() + args.seconds
            while time.time() < stop:
                for r in await c.poll(100):
                    latencies.append(time.time() - _TS.unpack_from(r.value or b"")[0])
        return {"latencies": latencies}
    print(json.dumps(asyncio.run(go())), flush=True)


def _catch_up(args: argparse.Namespace) -> None:
    """Read the whole topic from the beginning as fast as the consumer goes: until nothing came
    for 1.5 s, or, with ``--expected``, until that many records came (timed from the poll that
    brought the first, which is announced by a line ``{"first": true}``, to the last, as
    bench.kafka_clients times librdkafka's consume)."""
    from clients import Consumer

    async def go() -> dict:
        n = size = 0
        async with Consumer(args.bootstrap, auto_offset_reset="earliest", fetch_max_wait_ms=100,
                            max_poll_records=5000, max_partition_fetch_bytes=4 * MiB) as c:
            await c.subscribe(args.topic)
            cpu = time.process_time()
            start = idle = time.perf_counter()
            first, quiet = 0.0, (10 if args.expected else 1.5)
            while time.perf_counter() - idle < quiet and not (args.expected and n >= args.expected):
                now = time.perf_counter()
                got = await c.poll(300)
                if got:
                    if not first and args.expected:
                        first, cpu = now, time.process_time()
                        print(json.dumps({"first": True}), flush=True)
                    n += len(got)
                    size += sum(len(r.value or b"") for r in got)
                    idle = time.perf_counter()
            return {"consumed": n, "bytes": size, "elapsed": idle - (first or start),
                    "cpu_s": time.process_time() - cpu}
    print(json.dumps(asyncio.run(go())), flush=True)


def _ratio(codec: str, value: int) -> float | None:
    """Compressed / uncompressed size of a batch of 1000 of the producers' values."""
    if codec == "none":
        return None
    from clients.compression import Codec, compress
    from clients.records import encode_records
    raw = encode_records([(None, _TS.pack(0.0) + json_line(i, max(0, value - _TS.size)), 0, ())
                          for i in range(1000)], 0)
    return round(len(compress(Codec.named(codec), raw)) / len(raw), 3)


def _cpu_seconds(pid: int) -> float:
    """utime + stime of a process, from /proc (Linux)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


def _pct(xs: list[float], q: float) -> float | None:
    if not xs:
        return None
    xs = sorted(xs)
    return round(xs[min(len(xs) - 1, int(len(xs) * q))] * 1000, 1)


async def _run_cluster(args: argparse.Namespace, disk: float) -> None:
    base = Path(tempfile.mkdtemp(prefix="brokerbench"))
    props = {"log.flush.interval.messages": "1"} if args.flush == "sync" else {}
    cluster = three_brokers(base, props)
    cluster.start()
    try:
        await cluster.wait_for_brokers(timeout=90)
        combos = [(i, c) for i in args.idempotence.split(",") for c in args.compression.split(",")]
        async with ControllerClient(cluster.bootstrap, timeout=30) as c:
            await c.create_topics(cpb.CreateTopicsRequest(topics=[
                cpb.CreatableTopic(name=f"{args.topic}-{i}-{codec}", num_partitions=args.partitions,
                                   replication_factor=3) for i, codec in combos]))

        def run(role: str, seconds: float, *extra: str, idempotence: str = combos[0][0],
                compression: str = combos[0][1]) -> subprocess.Popen:
            me = [sys.executable, "-m", "bench.broker", "--bootstrap", cluster.bootstrap_servers,
                  "--topic", f"{args.topic}-{idempotence}-{compression}", "--value", str(args.value),
                  "--acks", args.acks, "--batch-size", str(args.batch_size), "--linger-ms", str(args.linger_ms),
                  "--idempotence", idempotence, "--compression", compression]
            return subprocess.Popen(me + ["--role", role, "--seconds", str(seconds), *extra], cwd=REPO,
                                    stdout=subprocess.PIPE, text=True)

        def result(p: subprocess.Popen, timeout: float) -> dict:
            return json.loads(p.communicate(timeout=timeout)[0].strip().splitlines()[-1])

        for idempotence, compression in combos:
            # 1. throughput: producers flat out
            brokers_cpu = {b: _cpu_seconds(cluster.broker_procs[b].pid) for b in cluster.broker_ports}
            producers = [run("producer", args.seconds, idempotence=idempotence, compression=compression)
                         for _ in range(args.producers)]
            results = [result(p, args.seconds + 120) for p in producers]
            brokers_cpu = {b: _cpu_seconds(cluster.broker_procs[b].pid) - c for b, c in brokers_cpu.items()}
            acked = sum(r["acked"] for r in results)
            elapsed = max(r["elapsed"] for r in results)
            mbps = acked * args.value / elapsed / 1e6
            emit({"system": "brokerd", "phase": "produce", "acks": args.acks, "idempotence": idempotence,
                  "compression": compression, "compression_ratio": _ratio(compression, args.value),
                  "producers": args.producers,
                  "partitions": args.partitions, "replication_factor": 3, "value_bytes": args.value,
                  "batch_size": args.batch_size, "linger_ms": args.linger_ms, "flush": args.flush,
                  "messages": acked, "failed": sum(r["failed"] for r in results),
                  "msgs_per_s": round(acked / elapsed), "MBps": round(mbps, 2),
                  "records_per_batch": round(acked / max(1, sum(r["batches"] for r in results))),
                  "batches_per_request": round(sum(r["batches"] for r in results)
                                               / max(1, sum(r["requests"] for r in results)), 2),
                  "replica_MBps_written": round(mbps * 3, 2), "ratio_to_disk": round(mbps * 3 / disk, 4),
                  # CPU seconds per message: what bounds throughput when the cores are shared
                  "producer_cpu_us_per_msg": round(sum(r["cpu_s"] for r in results) / max(acked, 1) * 1e6, 1),
                  "brokers_cpu_us_per_msg": round(sum(brokers_cpu.values()) / max(acked, 1) * 1e6, 1),
                  "load_average": round(os.getloadavg()[0], 1)})
            # 2. a consumer reads it all back
            consumed = result(run("catch-up", 0, idempotence=idempotence, compression=compression), 300)
            emit({"system": "brokerd", "phase": "consume", "idempotence": idempotence, "compression": compression,
                  "messages": consumed["consumed"],
                  "msgs_per_s": round(consumed["consumed"] / consumed["elapsed"]) if consumed["elapsed"] else 0,
                  "MBps": round(consumed["bytes"] / consumed["elapsed"] / 1e6, 2) if consumed["elapsed"] else 0,
                  "consumer_cpu_us_per_msg": round(consumed["cpu_s"] / max(consumed["consumed"], 1) * 1e6, 1),
                  "load_average": round(os.getloadavg()[0], 1)})
        # 3. end-to-end latency at a steady rate (the first combination) a tailing consumer keeps up with
        seconds = min(args.seconds, 5.0)
        tail = run("tail", seconds + 2)
        assert tail.stdout is not None and tail.stdout.readline().strip() == "ready"
        producer = run("producer", seconds, "--rate", str(args.latency_rate))
        sent = result(producer, seconds + 60)
        lat = result(tail, seconds + 60)["latencies"]
        emit({"system": "brokerd", "phase": "end_to_end", "acks": args.acks, "rate_msgs_per_s": args.latency_rate,
              "sent": sent["acked"], "samples": len(lat), "p50_ms": _pct(lat, 0.5), "p99_ms": _pct(lat, 0.99),
              "load_average": round(os.getloadavg()[0], 1)})
    finally:
        cluster.stop()
        shutil.rmtree(base, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--producers", type=int, default=1)
    ap.add_argument("--acks", choices=["all", "1"], default="all")
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--value", type=int, default=256)
    ap.add_argument("--partitions", type=int, default=6)
    ap.add_argument("--batch-size", type=int, default=262144, help="producer batch.size")
    ap.add_argument("--linger-ms", type=int, default=5, help="producer linger.ms")
    ap.add_argument("--flush", choices=["default", "sync"], default="default",
                    help="brokers' flush policy: default (page cache) or sync (log.flush.interval.messages=1)")
    ap.add_argument("--idempotence", default="on", help="on, off, or both: on,off")
    ap.add_argument("--compression", default="none",
                    help="codec(s), comma-separated: none, gzip, snappy, lz4, zstd")
    ap.add_argument("--latency-rate", type=int, default=2000, help="messages/s while measuring end-to-end latency")
    ap.add_argument("--skip-storage", action="store_true", help="skip the disk and RocksDB measurements")
    ap.add_argument("--rate", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--role", choices=["producer", "tail", "catch-up"], help=argparse.SUPPRESS)
    ap.add_argument("--bootstrap", help=argparse.SUPPRESS)
    ap.add_argument("--topic", default="bench", help=argparse.SUPPRESS)
    ap.add_argument("--expected", type=int, default=0, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.role:
        return {"producer": _producer, "tail": _tail, "catch-up": _catch_up}[args.role](args)
    here = tempfile.mkdtemp(prefix="brokerbench-disk")  # the filesystem the brokers' logs go to
    try:
        disk = disk_rate(here)
        emit({"system": "disk", "what": "sequential write + fsync, 256 MiB in 1 MiB writes", "MBps": round(disk, 1)})
        if not args.skip_storage:
            for records in (64, 1000):
                for mode, writers in (("page-cache", 1), ("sync", 1), ("sync", 8)):
                    row = asyncio.run(_log_rate(here, mode, 2.0, args.value, writers, records))
                    row["ratio_to_disk"] = round(row["MBps"] / disk, 3)
                    emit({"system": "rocksdb", **row})
    finally:
        shutil.rmtree(here, ignore_errors=True)
    asyncio.run(_run_cluster(args, disk))


if __name__ == "__main__":
    main()
