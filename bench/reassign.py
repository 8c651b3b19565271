"""Partition reassignment, measured: how fast a filled partition moves to another broker, with
and without a replication throttle, and what the move costs a producer writing meanwhile.

    python -m bench.reassign --size-mib 1024 --throttle-mib 10

Three controllers and four brokers (101-104) run as processes (``kraft.dev_quorum``). Two
identical partitions of topic ``moving`` (replicas 101,102,103, leader 101, min.insync.replicas
2) are filled with ``--size-mib`` each of ``--record-kib`` records of random bytes (acks=all, our
client over gRPC, or ``--fill-client confluent``: librdkafka against the Kafka listener). A
steady producer (its own process, our client, acks=all, ``--steady-value``-byte records, flat
out) writes to topic ``steady`` (replicas 101,102,103: its leader is the moves' source, the
worst case) for the rest of the run, reporting its acknowledged count every 0.2 s, so its
throughput is known over any interval; its topic keeps 256 MiB (retention.bytes).

Then, each time after ``--baseline-s`` seconds of the steady producer alone:
1. ``unthrottled``: ``kraft reassign-partitions --execute`` moves moving-0 to 102,103,104
   (broker 104 copies it from the leader, 101), no throttle;
2. ``throttled``: once 101 has deleted its copy of moving-0, moving-1 makes the same move
   with ``--throttle`` ``--throttle-mib`` MiB/s.
A move's clock starts when the CLI is launched (``execute_cli_s`` is the CLI's own run) and
stops when ListPartitionReassignments (the controller) no longer lists it and the replicas are
the target; ``kraft reassign-partitions --verify`` then confirms it and clears the throttles.

JSON lines (``bench`` = ``reassign``):
- ``limit-disk``: sequential write + fsync of ``--size-mib`` in 1 MiB writes (dd-like) on the
  brokers' filesystem, and ``limit-rocksdb``: the same bytes appended in-process to a
  PartitionLog in the fill's batches (what the copying replica writes, without network, fetch
  or replication): the physical limits of a move, measured in the same run;
- ``fill``: both partitions' filling (acks=all, replication factor 3);
- ``unthrottled`` / ``throttled``: ``bytes`` (the partition's size on its leader),
  ``seconds``, ``mib_per_s``, the steady producer's MiB/s and msgs/s in the ``--baseline-s``
  before the move and during it, ``relative`` (during / before); the throttled row also has
  ``expected_seconds`` (bytes / throttle, less the token bucket's first second of bytes) and
  ``vs_expected`` (seconds / expected_seconds), about 1 when the throttle bounds the move;
- ``steady-producer``: its acknowledged and failed records over the whole run.

The default throttle (10 MiB/s) is below what an unthrottled move reaches on the small
machine this was written on; a throttle above that rate measures nothing. Everything (7
servers, 2 producers, this process) shares this machine's cores; on a machine also used by
others the figures are noisy (``load_average`` is in every row).
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

from kraft import reassign as r
from kraft.dev_quorum import DevQuorum, consecutive_ports
from metadata.client import ControllerClient
from protos import controller_pb2 as cpb

from .broker import MiB, disk_rate
from .common import REPO, emit

MOVING, STEADY = "moving", "steady"
SOURCE, TARGET = (101, 102, 103), (102, 103, 104)
PARTITIONS = 2  # identical: one moves without a throttle, the other with one
STEADY_KEEP = 256 * 1024 * 1024  # retention.bytes of the steady topic: flat out for minutes, it would fill the disk


def _row(phase: str, **fields: object) -> dict:
    return {"bench": "reassign", "phase": phase, **fields, "load_average": round(os.getloadavg()[0], 1)}


# -- the physical limits ------------------------------------------------------------------------

async def rocksdb_rate(directory: str, total: int, record: int) -> tuple[int, float]:
    """(bytes, seconds) to append ``total`` bytes to a fresh PartitionLog in batches of about
    1 MiB of ``record``-byte records, then close (flush) the store."""
    from brokerd.log_store import FlushPolicy, LogStore
    from brokerd.partition_log import PartitionLog
    from clients.records import build_batch
    per_batch = max(1, MiB // record)
    template = build_batch([(None, os.urandom(record), int(time.time() * 1000), ()) for _ in range(per_batch)])
    path = tempfile.mkdtemp(dir=directory, prefix="rocks")
    store = LogStore(path, FlushPolicy())
    plog = PartitionLog(store, uuid.uuid4(), 0)
    written = 0
    start = time.perf_counter()
    try:
        while written < total:
            b = type(template)()
            b.CopyFrom(template)
            written += (await plog.append_as_leader(b, 0)).bytes
        await store.close()
        return written, time.perf_counter() - start
    finally:
        shutil.rmtree(path, ignore_errors=True)


# -- the steady producer (its own process) ------------------------------------------------------

def _steady(args: argparse.Namespace) -> None:
    """Flat out, acks=all, until stdin closes; a JSON line ``[monotonic, acked]`` every 0.2 s."""
    from clients import Producer

    async def go() -> None:
        values = [os.urandom(args.steady_value) for _ in range(16)]
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        threading.Thread(target=lambda: (sys.stdin.read(), loop.call_soon_threadsafe(stop.set)), daemon=True).start()
        async with Producer(args.bootstrap, acks="all", linger_ms=5, batch_size=MiB, max_request_size=2 * MiB,
                            buffer_memory=16 * MiB) as p:
            async def report() -> None:
                while not stop.is_set():
                    print(json.dumps([time.monotonic(), p.metrics["record-send-total"],
                                      p.metrics["record-error-total"]]), flush=True)
                    await asyncio.sleep(0.2)
            reporter = asyncio.create_task(report())
            i = 0
            while not stop.is_set():
                for _ in range(16):
                    await p.send(STEADY, values[i & 15])
                    i += 1
                await asyncio.sleep(0)
            await reporter
    asyncio.run(go())


class Steady:
    """The steady producer's process and its reports: acknowledged records over an interval."""

    def __init__(self, bootstrap: str, value: int) -> None:
        self.value = value
        self.proc = subprocess.Popen([sys.executable, "-m", "bench.reassign", "--role", "steady", "--bootstrap",
                                      bootstrap, "--steady-value", str(value)], cwd=REPO, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)
        self.samples: list[tuple[float, int, int]] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            t, acked, failed = json.loads(line)
            self.samples.append((t, acked, failed))

    def acked_at(self, t: float) -> tuple[float, int]:
        """The last sample at or before ``t``: (its time, acknowledged records)."""
        best = self.samples[0]
        for s in self.samples:
            if s[0] > t:
                break
            best = s
        return best[0], best[1]

    def rate(self, start: float, end: float) -> tuple[float, float]:
        """(MiB/s, msgs/s) acknowledged between ``start`` and ``end`` (monotonic)."""
        t0, n0 = self.acked_at(start)
        t1, n1 = self.acked_at(end)
        if t1 <= t0:
            return 0.0, 0.0
        return (n1 - n0) * self.value / (t1 - t0) / MiB, (n1 - n0) / (t1 - t0)

    async def wait_started(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while not (self.samples and self.samples[-1][1] > 0):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the steady producer did not get any acknowledgement")
            await asyncio.sleep(0.1)

    def failed(self) -> int:
        return self.samples[-1][2] if self.samples else 0

    def stop(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._reader.join(5)


# -- filling ------------------------------------------------------------------------------------

def fill_confluent(bootstrap: str, total: int, record: int) -> int:
    from confluent_kafka import Producer
    values = [os.urandom(record) for _ in range(16)]
    failed = [0]

    def delivered(err: object, msg: object) -> None:
        if err is not None:
            failed[0] += 1
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True, "linger.ms": 5,
                  "batch.size": 1000000, "message.max.bytes": 1000000, "queue.buffering.max.kbytes": 65536,
                  "compression.type": "none"})
    n = 0
    while n * record < total * PARTITIONS:
        try:
            p.produce(MOVING, values[n & 15], partition=n % PARTITIONS, on_delivery=delivered)
            n += 1
        except BufferError:
            p.poll(0.05)
        p.poll(0)
    left = p.flush(300)
    if left or failed[0]:
        raise RuntimeError(f"fill: {failed[0]} records failed, {left} not delivered")
    return n


async def fill_pykraft(bootstrap: str, total: int, record: int) -> int:
    from clients import Producer
    values = [os.urandom(record) for _ in range(16)]
    n = 0
    async with Producer(bootstrap, acks="all", linger_ms=5, batch_size=MiB, max_request_size=2 * MiB,
                        buffer_memory=64 * MiB) as p:
        while n * record < total * PARTITIONS:
            await p.send(MOVING, values[n & 15], partition=n % PARTITIONS)
            n += 1
        await p.flush()
        if p.metrics["record-error-total"]:
            raise RuntimeError(f"fill: {p.metrics['record-error-total']} records failed")
    return n


# -- moving -------------------------------------------------------------------------------------

def kraft(q: DevQuorum, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kraft.cli", "reassign-partitions", "--bootstrap-controller",
                           q.bootstrap, *args], cwd=REPO, capture_output=True, text=True, timeout=120)


async def replica_sizes(q: DevQuorum, partition: int) -> dict[int, int]:
    """Each broker's own size of ``moving``-``partition`` (brokers without a replica left out)."""
    from clients.admin import Admin
    async with Admin(q.bootstrap_servers) as admin:
        describes = await admin.describe_brokers()
    return {b: s.size_bytes for b, d in describes.items() for s in d.replicas
            if s.topic == MOVING and s.partition == partition}


async def move(q: DevQuorum, client: ControllerClient, steady: Steady, base: Path, phase: str, partition: int,
               throttle: int | None, baseline_s: float) -> dict:
    await asyncio.sleep(baseline_s)  # the steady producer alone, just before
    before_end = time.monotonic()
    before = steady.rate(before_end - baseline_s, before_end)
    size = max((await replica_sizes(q, partition)).values())
    key = (MOVING, partition)
    current = await r.current_assignment(client, [MOVING])
    plan = base / f"{phase}.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": MOVING, "partition": partition, "replicas": list(TARGET)}]}))
    start = time.monotonic()
    p = await asyncio.to_thread(kraft, q, "--execute", "--reassignment-json-file", str(plan),
                                *(["--throttle", str(throttle)] if throttle else []))
    cli_s = time.monotonic() - start
    if p.returncode != 0 or "Successfully started partition reassignments" not in p.stdout:
        raise RuntimeError(f"--execute failed: {p.stdout} {p.stderr}")
    while True:
        moving = await r.ongoing(client, [key])
        if key not in moving and (await r.current_assignment(client, [MOVING]))[key] == TARGET:
            break
        await asyncio.sleep(0.1)
    end = time.monotonic()
    during = steady.rate(start, end)
    v = await asyncio.to_thread(kraft, q, "--verify", "--reassignment-json-file", str(plan))
    if v.returncode != 0 or "is completed" not in v.stdout:
        raise RuntimeError(f"--verify after the move: {v.stdout} {v.stderr}")
    seconds = end - start
    row = _row(phase, partition=f"{MOVING}-{partition}", replicas_from=list(current[key]),
               replicas_to=list(TARGET), bytes=size,
               seconds=round(seconds, 2), mib_per_s=round(size / seconds / MiB, 1), execute_cli_s=round(cli_s, 2),
               throttle_mib_per_s=round(throttle / MiB, 1) if throttle else None,
               produce_mib_per_s_before=round(before[0], 2), produce_msgs_per_s_before=round(before[1]),
               produce_mib_per_s_during=round(during[0], 2), produce_msgs_per_s_during=round(during[1]),
               relative=round(during[0] / before[0], 3) if before[0] else None)
    if throttle:
        expected = max(0.0, size - throttle) / throttle
        row.update(expected_seconds=round(expected, 1), vs_expected=round(seconds / expected, 2) if expected else None)
    return row


async def wait_deleted(q: DevQuorum, broker: int, partition: int, timeout: float = 120) -> float:
    """Until ``broker`` no longer has a replica of ``moving``-``partition``; returns the seconds waited."""
    start = time.monotonic()
    while broker in await replica_sizes(q, partition):
        if time.monotonic() - start > timeout:
            raise RuntimeError(f"broker {broker} kept its replica of {MOVING}-{partition} for {timeout:.0f}s")
        await asyncio.sleep(0.2)
    return time.monotonic() - start


async def run(args: argparse.Namespace, base: Path) -> None:
    total = args.size_mib * MiB
    record = args.record_kib * 1024
    q = DevQuorum(str(base / "cluster"), consecutive_ports(11), brokers=4, session_timeout_ms=9000,
                  broker_extra={"broker.heartbeat.interval.ms": "1000", "replica.lag.time.max.ms": "10000",
                                "log.retention.check.interval.ms": "5000"})
    q.start()
    steady: Steady | None = None
    try:
        await q.wait_for_brokers(timeout=90)
        async with ControllerClient(q.bootstrap, timeout=60, attempt_timeout=5) as client:
            topics = [cpb.CreatableTopic(name=MOVING, num_partitions=-1, replication_factor=-1,
                                         configs={"min.insync.replicas": "2"}),
                      cpb.CreatableTopic(name=STEADY, num_partitions=-1, replication_factor=-1,  # bounded on disk
                                         configs={"min.insync.replicas": "2", "retention.bytes": str(STEADY_KEEP)})]
            for i in range(PARTITIONS):
                topics[0].assignments.add(partition=i, replicas=SOURCE)
            topics[1].assignments.add(partition=0, replicas=SOURCE)
            res = await client.create_topics(cpb.CreateTopicsRequest(topics=topics))
            for t in res.topics:
                if t.error_code:
                    raise RuntimeError(f"CreateTopics {t.name}: {t.error_message}")
            await asyncio.sleep(1)  # the brokers learn the topics from the metadata log

            start = time.monotonic()
            if args.fill_client == "confluent":
                n = await asyncio.to_thread(fill_confluent, q.kafka_bootstrap_servers, total, record)
            else:
                n = await fill_pykraft(q.bootstrap_servers, total, record)
            took = time.monotonic() - start
            emit(_row("fill", client=args.fill_client, partitions=PARTITIONS, records=n, record_bytes=record,
                      bytes=n * record, seconds=round(took, 2), mib_per_s=round(n * record / took / MiB, 1),
                      msgs_per_s=round(n / took),
                      replica_sizes={f"{MOVING}-{i}": {str(b): s for b, s in sorted((await replica_sizes(q, i)).items())}
                                     for i in range(PARTITIONS)}))

            steady = Steady(q.bootstrap_servers, args.steady_value)
            await steady.wait_started()
            emit(await move(q, client, steady, base, "unthrottled", 0, None, args.baseline_s))
            waited = await wait_deleted(q, 101, 0)
            throttle = int(args.throttle_mib * MiB)
            row = await move(q, client, steady, base, "throttled", 1, throttle, args.baseline_s)
            row["waited_for_101_to_delete_moving_0_s"] = round(waited, 1)
            emit(row)
            steady.stop()
            emit(_row("steady-producer", value_bytes=args.steady_value, acknowledged=steady.samples[-1][1],
                      failed=steady.failed()))
    finally:
        if steady is not None:
            steady.stop()
        q.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size-mib", type=int, default=1024, help="bytes to fill the moving partition with")
    ap.add_argument("--record-kib", type=int, default=256, help="value size of the fill's records")
    ap.add_argument("--throttle-mib", type=float, default=10,
                    help="--throttle of the second move, MiB/s (below what an unthrottled move reaches here)")
    ap.add_argument("--baseline-s", type=float, default=10, help="steady producer alone before each move")
    ap.add_argument("--steady-value", type=int, default=16384, help="value size of the steady producer's records")
    ap.add_argument("--fill-client", choices=["confluent", "pykraft"], default="pykraft")
    ap.add_argument("--skip-limits", action="store_true", help="skip the disk and RocksDB measurements")
    ap.add_argument("--role", choices=["steady"], help=argparse.SUPPRESS)
    ap.add_argument("--bootstrap", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.role == "steady":
        return _steady(args)
    base = Path(tempfile.mkdtemp(prefix="reassignbench"))  # the filesystem the brokers' logs go to
    try:
        if not args.skip_limits:
            total = args.size_mib * MiB
            mbps = disk_rate(str(base), total=total)
            emit(_row("limit-disk", what="sequential write + fsync in 1 MiB writes", bytes=total,
                      seconds=round(total / mbps / 1e6, 2), mib_per_s=round(mbps * 1e6 / MiB, 1)))
            written, seconds = asyncio.run(rocksdb_rate(str(base), total, args.record_kib * 1024))
            emit(_row("limit-rocksdb", what="PartitionLog appends of ~1 MiB batches, in-process", bytes=written,
                      seconds=round(seconds, 2), mib_per_s=round(written / seconds / MiB, 1)))
        asyncio.run(run(args, base))
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
