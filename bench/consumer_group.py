"""Consumer groups, measured: three controllers and three brokers as processes.

    python -m bench.consumer_group --messages 300000 --kills 3 --offsets 100000

JSON lines:
- ``throughput``: a group of 1 and of 3 member processes reading a 6-partition topic of
  ``--messages`` 256-byte records from the start, messages/s until every record was read;
- ``failover``: a member killed with SIGKILL while all three consume a steady stream: seconds
  until its partitions are consumed again by the others (session.timeout.ms 6000, heartbeat
  every 1000 ms; target p50 <= session timeout + 1 s); one line per kill and a summary;
- ``offsets_load``: ``--offsets`` committed offsets of one group, then its coordinator's
  broker killed: seconds the new coordinator took to load them (from its first
  COORDINATOR_LOAD_IN_PROGRESS answer to the first OffsetFetch it serves; target <= 5 s).
"""
from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import grpc

from clients import Consumer, Producer
from common.errors import ErrorCode
from kraft.dev_quorum import DevQuorum, consecutive_ports
from metadata.client import ControllerClient
from protos import broker_pb2 as pb
from protos import broker_pb2_grpc
from protos import controller_pb2 as cpb

from .common import REPO, emit

SESSION_MS = 6000


def _member(bootstrap: str, group: str, topic: str) -> None:
    """A member process: prints ``{"p": partition, "t": time}`` for each record, and its
    assignments."""
    async def go() -> None:
        async with Consumer(bootstrap, group_id=group, auto_offset_reset="earliest", session_timeout_ms=SESSION_MS,
                            heartbeat_interval_ms=1000, fetch_max_wait_ms=100, max_poll_records=2000) as c:
            await c.subscribe([topic], on_assigned=lambda tps: print(json.dumps({"assigned": sorted(tps)}),
                                                                     flush=True))
            while True:
                records = await c.poll(200)
                if records:
                    now = time.time()
                    counts: dict[int, int] = {}
                    for r in records:
                        counts[r.partition] = counts.get(r.partition, 0) + 1
                    print(json.dumps({"n": counts, "t": now}), flush=True)
    asyncio.run(go())


class Member:
    def __init__(self, q: DevQuorum, group: str, topic: str) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "bench.consumer_group", "--role", "member",
                                      "--bootstrap", q.bootstrap_servers, "--group", group, "--topic", topic],
                                     cwd=REPO, stdout=subprocess.PIPE, text=True)
        self.count = 0
        self.owned: set[int] = set()
        self.seen: list[tuple[float, int]] = []  # (time, partition) of each poll's records
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            msg = json.loads(line)
            if "assigned" in msg:
                self.owned = {p for _, p in msg["assigned"]}
            else:
                for p, n in msg["n"].items():
                    self.count += n
                    self.seen.append((msg["t"], int(p)))

    def stop(self, kill: bool = False) -> None:
        self.proc.kill() if kill else self.proc.terminate()
        self.proc.wait(10)


async def _until(check, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError("the benchmark's condition was not met in time")
        await asyncio.sleep(0.05)


async def throughput(q: DevQuorum, messages: int) -> None:
    async with ControllerClient(q.bootstrap, timeout=30) as c:
        await c.create_topics(cpb.CreateTopicsRequest(topics=[
            cpb.CreatableTopic(name="groupbench", num_partitions=6, replication_factor=3)]))
    value = b"x" * 256
    async with Producer(q.bootstrap_servers, linger_ms=5, batch_size=262144) as p:
        for _ in range(messages):
            await p.send("groupbench", value)
        await p.flush()
    for size in (1, 3):
        members = [Member(q, f"readers-{size}", "groupbench") for _ in range(size)]
        try:
            await _until(lambda members=members: sum(len(m.owned) for m in members) == 6, 60)
            start = time.monotonic()
            await _until(lambda members=members: sum(m.count for m in members) >= messages, 600)
            elapsed = time.monotonic() - start
            emit({"system": "brokerd", "phase": "throughput", "members": size, "messages": messages,
                  "msgs_per_s": round(messages / elapsed)})
        finally:
            for m in members:
                m.stop()


async def failover(q: DevQuorum, kills: int) -> None:
    async with ControllerClient(q.bootstrap, timeout=30) as c:
        await c.create_topics(cpb.CreateTopicsRequest(topics=[
            cpb.CreatableTopic(name="steady", num_partitions=6, replication_factor=3)]))
    stop = asyncio.Event()

    async def produce() -> None:
        async with Producer(q.bootstrap_servers, linger_ms=5) as p:
            i = 0
            while not stop.is_set():
                for k in range(6):
                    await p.send("steady", b"%d" % i, partition=k)
                i += 1
                await asyncio.sleep(0.02)

    producer = asyncio.create_task(produce())
    results = []
    try:
        members = [Member(q, "steady-readers", "steady") for _ in range(3)]
        for k in range(kills):
            await _until(lambda members=members: sorted(p for m in members for p in m.owned) == list(range(6)), 60)
            await asyncio.sleep(2)  # steady consumption before the kill (the workload, not a wait)
            victim = members[0]
            lost = set(victim.owned)
            victim.stop(kill=True)
            killed = time.time()
            survivors = members[1:]
            await _until(lambda lost=lost, survivors=survivors, killed=killed:
                         lost <= {p for m in survivors for t, p in m.seen if t > killed}, 60)
            took = max(min(t for m in survivors for t, p in m.seen if t > killed and p == lp) for lp in lost) - killed
            results.append(took)
            emit({"system": "brokerd", "phase": "failover", "kill": k + 1, "partitions_moved": len(lost),
                  "seconds": round(took, 2), "session_timeout_ms": SESSION_MS})
            members = survivors + [Member(q, "steady-readers", "steady")]
        for m in members:
            m.stop()
    finally:
        stop.set()
        await producer
    emit({"system": "brokerd", "phase": "failover", "kills": kills, "p50_s": round(statistics.median(results), 2),
          "max_s": round(max(results), 2), "target_p50_s": SESSION_MS / 1000 + 1})


async def offsets_load(q: DevQuorum, offsets: int) -> None:
    async with Consumer(q.bootstrap_servers, group_id="many-offsets", enable_auto_commit=False) as c:
        for start in range(0, offsets, 5000):
            await c.commit({("t", p): p for p in range(start, min(offsets, start + 5000))})
        assert c.group is not None and c.group.coordinator, "a consumer that committed knows its coordinator"
        coordinator = c.group.coordinator
    victim = next(b for b, port in q.broker_ports.items() if coordinator.endswith(f":{port}"))
    q.kill(victim)
    others = [f"127.0.0.1:{port}" for b, port in q.broker_ports.items() if b != victim]
    first_loading = None
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        for address in others:
            async with grpc.aio.insecure_channel(address) as ch:
                stub = broker_pb2_grpc.BrokerStub(ch)
                try:
                    r = await stub.OffsetFetch(pb.OffsetFetchRequest(group_id="many-offsets", topics=[
                        pb.OffsetFetchTopic(name="t", partitions=[offsets - 1])]), timeout=5)
                except grpc.aio.AioRpcError:
                    continue
            if r.error_code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS and first_loading is None:
                first_loading = time.monotonic()
            if r.error_code == 0 and r.topics[0].partitions[0].offset == offsets - 1:
                loaded = time.monotonic()
                emit({"system": "brokerd", "phase": "offsets_load", "offsets": offsets,
                      "load_s": round(loaded - (first_loading or loaded), 2), "target_s": 5})
                return
        await asyncio.sleep(0.02)
    raise TimeoutError("no coordinator served the offsets")


async def run(args: argparse.Namespace) -> None:
    base = Path(tempfile.mkdtemp(prefix="groupbench"))
    q = DevQuorum(str(base), consecutive_ports(9), brokers=3, broker_extra={
        "broker.heartbeat.interval.ms": "1000", "group.initial.rebalance.delay.ms": "0",
        "offsets.topic.num.partitions": "6"})
    q.start()
    try:
        await q.wait_for_brokers(timeout=90)
        await throughput(q, args.messages)
        await failover(q, args.kills)
        await offsets_load(q, args.offsets)
    finally:
        q.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--messages", type=int, default=300_000)
    ap.add_argument("--kills", type=int, default=3)
    ap.add_argument("--offsets", type=int, default=100_000)
    ap.add_argument("--role", choices=["member"], help=argparse.SUPPRESS)
    ap.add_argument("--bootstrap", help=argparse.SUPPRESS)
    ap.add_argument("--group", help=argparse.SUPPRESS)
    ap.add_argument("--topic", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.role == "member":
        return _member(args.bootstrap, args.group, args.topic)
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
