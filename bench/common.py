"""Shared pieces of the benchmarks: latency summaries in the anchors' JSON format, and local
clusters of `raft-kv serve` processes."""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kraft.dev_quorum import DevQuorum

REPO = Path(__file__).resolve().parent.parent


def three_brokers(base: Path, broker_props: dict[str, str] | None = None, metrics: bool = False) -> DevQuorum:
    """The benchmarks' cluster in ``base`` (not started): three controllers and three brokers
    on free loopback ports, heartbeats every second, ``broker_props`` on every broker;
    ``metrics``: every node serves its Prometheus metrics (``request_counts``). Imported
    here, not at the top: most benchmarks (Raft's, the codecs') start no dev cluster."""
    from kraft.dev_quorum import DevQuorum, consecutive_ports
    extra = {"broker.heartbeat.interval.ms": "1000", **(broker_props or {})}
    if metrics:  # not passed otherwise: a base tree's DevQuorum (bench.kafka_clients --base) may predate it
        return DevQuorum(str(base), consecutive_ports(15), brokers=3, session_timeout_ms=9000, broker_extra=extra,
                         metrics=True)
    return DevQuorum(str(base), consecutive_ports(9), brokers=3, session_timeout_ms=9000, broker_extra=extra)


def request_counts(cluster: DevQuorum, request: str) -> int:
    """How many ``request``s (Kafka's name: Fetch, Produce) the brokers' Kafka listeners and
    gRPC services have answered, from their request metrics (``three_brokers(metrics=True)``)."""
    import urllib.request
    total = 0
    for nid in cluster.broker_ports:
        with urllib.request.urlopen(f"http://127.0.0.1:{cluster.metrics_ports[nid]}/metrics", timeout=10) as r:
            for line in r.read().decode().splitlines():
                if (line.startswith("kafka_network_requestmetrics_total_time_seconds_count{")
                        and f'request="{request}"' in line):
                    total += int(float(line.rsplit(" ", 1)[1]))
    return total


def summary(system: str, clients: int, value: int, lat: list[float], elapsed: float, **extra) -> dict:
    lat = sorted(lat)
    n = len(lat)
    out = {"system": system, "clients": clients, "value_bytes": value, "ops": n,
           "ops_per_s": round(n / elapsed) if elapsed else 0,
           "p50_ms": round(lat[n // 2] * 1e3, 2) if n else None,
           "p99_ms": round(lat[min(n - 1, int(n * 0.99))] * 1e3, 2) if n else None}
    out.update(extra)
    return out


async def put_load(stub, clients: int, seconds: float, value: int) -> tuple[list[float], float]:
    """``clients`` concurrent callers each doing one KV Put at a time on ``stub`` for
    ``seconds`` (the etcd anchor's workload); returns (latencies, elapsed seconds)."""
    from raft.examples.kv import kv_pb2 as pb

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
    return lat, time.perf_counter() - t0


def load_parser(doc: str | None) -> argparse.ArgumentParser:
    """The options every load benchmark takes, as the anchors name them."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--clients", type=int, default=64)
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--value", type=int, default=256)
    return ap


def emit(row: dict) -> None:
    print(json.dumps(row), flush=True)


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def thread_group(comm: str) -> str:
    """A thread's name without its number (``rocksdb:low3`` -> ``rocksdb:low``, ``log-flush_0``
    -> ``log-flush``), so that a pool's threads add up under one name."""
    return comm.rstrip("0123456789").rstrip("_-") or comm


def thread_cpu(pid: int) -> dict[str, tuple[float, float]]:
    """User and system CPU seconds of a process's live threads, added up per ``thread_group``
    of their names (/proc/PID/task/*/stat; a thread that ended meanwhile is not counted: its
    CPU shows in the process's total, ``cpu_seconds``, under no thread). The main thread (a
    broker's event loop) is ``main``; Python 3.11 does not name its other threads for the OS
    (executors' threads are ``python``), RocksDB's and gRPC's name theirs."""
    tick = os.sysconf("SC_CLK_TCK")
    out: dict[str, tuple[float, float]] = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            stat = (task / "stat").read_text()
        except (FileNotFoundError, ProcessLookupError):
            continue
        name = "main" if task.name == str(pid) else thread_group(stat[stat.index("(") + 1:stat.rindex(")")])
        fields = stat.rsplit(")", 1)[1].split()
        user, system = out.get(name, (0.0, 0.0))
        out[name] = (user + int(fields[11]) / tick, system + int(fields[12]) / tick)
    return out


def thread_cpu_delta(before: dict[str, tuple[float, float]],
                     after: dict[str, tuple[float, float]]) -> dict[str, tuple[float, float]]:
    """What each thread group spent between two ``thread_cpu`` readings (user, system)."""
    out = {}
    for name, (user, system) in after.items():
        u0, s0 = before.get(name, (0.0, 0.0))
        out[name] = (user - u0, system - s0)
    return out


def free_ports(n: int) -> list[int]:
    import socket
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


class KVProcesses:
    """Three `raft-kv serve` nodes on loopback in a temporary directory."""

    def __init__(self, n: int = 3, args: tuple[str, ...] = ()) -> None:
        self.base = Path(tempfile.mkdtemp(prefix="raftbench"))
        self.ports = free_ports(n)
        self.ids = list(range(1, n + 1))
        self.voters = ",".join(f"{i}@127.0.0.1:{p}" for i, p in zip(self.ids, self.ports, strict=True))
        self.args = list(args)
        self.procs: dict[int, subprocess.Popen] = {}
        for nid in self.ids:
            subprocess.run([sys.executable, "-m", "raft.examples.kv.cli", "format", "--id", str(nid),
                            "--data-dir", str(self.base / f"n{nid}"), "--cluster-id", "bench"],
                           cwd=REPO, check=True, capture_output=True)
            self.start(nid)

    def endpoint(self, nid: int) -> str:
        return f"127.0.0.1:{self.ports[nid - 1]}"

    def start(self, nid: int) -> None:
        log = open(self.base / f"n{nid}.log", "a")
        self.procs[nid] = subprocess.Popen(
            [sys.executable, "-m", "raft.examples.kv.cli", "serve", "--id", str(nid), "--voters", self.voters,
             "--data-dir", str(self.base / f"n{nid}"), "--log-level", "WARNING", *self.args],
            cwd=REPO, stdout=log, stderr=subprocess.STDOUT)

    def kill(self, nid: int) -> None:
        self.procs[nid].send_signal(signal.SIGKILL)
        self.procs[nid].wait()

    async def leader(self, timeout: float = 20.0, among: list[int] | None = None) -> int:
        from raft.examples.kv.client import KVClient
        c = KVClient([self.endpoint(i) for i in self.ids], attempt_timeout=0.5)
        deadline = time.monotonic() + timeout
        try:
            while time.monotonic() < deadline:
                for nid in among or self.ids:
                    if self.procs[nid].poll() is not None:
                        continue
                    try:
                        s = await c.status(self.endpoint(nid))
                    except Exception:
                        continue
                    if s.role == "LEADER":
                        return nid
                await asyncio.sleep(0.02)
        finally:
            await c.close()
        raise RuntimeError("no leader elected")

    def close(self) -> None:
        for p in self.procs.values():
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self.procs.values():
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
        shutil.rmtree(self.base, ignore_errors=True)


def cpu_count() -> int:
    return os.cpu_count() or 1
