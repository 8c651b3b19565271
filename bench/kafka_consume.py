"""librdkafka reading a topic back through the Kafka listener, and what it costs the brokers:
their CPU per message consumed, split into user and kernel time.

    python -m bench.kafka_consume --messages 600000 --reads 3
    python -m bench.kafka_consume --base main --rounds 3      # main's tree and this one in turn
    python -m bench.kafka_consume --profile /tmp/consume       # perf, then py-spy --native, on the brokers

Why: librdkafka's consume rate is its prefetch policy's (docs/brokers.md, "Consuming with
librdkafka"), so what issue 31's per-core target measures is the brokers' CPU per message
consumed; ``bench.kafka_clients`` gets one read of it per run, after a produce phase whose
compactions and flushes may still run. Here one cluster (3 brokers, RF 3, ``--partitions``)
gets one topic of ``--messages`` records of ``--value`` bytes from librdkafka's producer
(``bench.kafka_clients``' settings), then ``--reads`` librdkafka consumers with its default
settings, each a new group, read it all from the beginning, one after another; the brokers'
CPU is counted from each consumer's first record to its last (its group join is not counted).

JSON lines, one per read: ``brokers_cpu_us_per_msg`` with its ``brokers_user_us_per_msg`` and
``brokers_sys_us_per_msg`` (from /proc), ``brokers_cpu_s_per_MB``, msgs/s, and librdkafka's Fetch
requests in the read (``consumer_fetches``: the brokers' request metrics, less the followers'
long polls at the idle phase's rate; ``msgs_per_fetch``); with ``--base``,
every row tagged ``tree`` and ``round`` and a ``summary`` of medians and paired ratios (this /
base) of each read's figures. ``--profile DIR`` records the first read with ``perf`` (DIR/perf.data)
and the second with py-spy's raw samples (``--native``: C frames such as RocksDB's) per broker.
"""
from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any


from .common import emit, request_counts, three_brokers
from .kafka_clients import alternate, base_tree, confluent_consume, confluent_produce, create_topics, stop_cluster

_TICK = os.sysconf("SC_CLK_TCK")


def user_system(pid: int) -> tuple[float, float]:
    """A process's user and system CPU seconds (/proc); zeros once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0, 0.0
    return int(fields[11]) / _TICK, int(fields[12]) / _TICK


class BrokersCpu:
    """The brokers' user and system CPU since ``restart``."""

    def __init__(self, pids: list[int]) -> None:
        self.pids = pids
        self.restart()

    def _now(self) -> tuple[float, float]:
        us = [user_system(p) for p in self.pids]
        return sum(u for u, _ in us), sum(s for _, s in us)

    def restart(self) -> None:
        self.start = self._now()

    def since(self) -> tuple[float, float]:
        u, s = self._now()
        return u - self.start[0], s - self.start[1]


def _profile(read: int, pids: list[int], out: Path, seconds: float,
             perf_data: str = "perf.data") -> list[subprocess.Popen[bytes]]:
    """The first read under ``perf`` (every thread's CPU, native and kernel frames; -1: the
    idle phase, under perf and py-spy's Python frames), the second under py-spy (Python and
    native frames; it stops the process per sample, so that read's CPU is not comparable),
    for ``seconds``."""
    out.mkdir(parents=True, exist_ok=True)
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    if read < 0:  # idle: py-spy without native frames does not stop the process
        return [*(subprocess.Popen([spy, "record", "--pid", str(pid), "--rate", "250", "--nonblocking", "--format",
                                    "raw", "--duration", str(round(seconds)), "-o", str(out / f"idle-{pid}.txt")],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for pid in pids),
                *_profile(0, pids, out, seconds, "idle.perf.data")]
    if read == 0:
        return [subprocess.Popen(["perf", "record", "-e", "cpu-clock", "-F", "999", "-g", "-o",
                                  str(out / perf_data),
                                  "-p", ",".join(map(str, pids)), "--", "sleep", str(seconds)],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]
    return [subprocess.Popen([spy, "record", "--pid", str(pid), "--native", "--rate", "250", "--format", "raw",
                              "--duration", str(round(seconds)), "-o", str(out / f"broker-{pid}.txt")],
                             stdout=subprocess.DEVNULL, stderr=(out / f"py-spy-{pid}.log").open("wb"))
            for pid in pids]


def run(args: argparse.Namespace) -> None:
    base = Path(tempfile.mkdtemp(prefix="kafkaconsume"))
    cluster = three_brokers(base, metrics=True)
    cluster.start()
    try:
        asyncio.run(cluster.wait_for_brokers(timeout=90))
        kafka = cluster.kafka_bootstrap_servers
        create_topics(kafka, ["consume"], args.partitions)
        produced = confluent_produce(kafka, "consume", argparse.Namespace(
            messages=args.messages, seconds=0, value=args.value, partitions=args.partitions))
        emit({"phase": "produce", "messages": produced["messages"], "failed": produced["failed"]})
        expected = produced["messages"]
        cpu = BrokersCpu([p.pid for p in cluster.broker_procs.values()])
        fetches = request_counts(cluster, "Fetch")  # before the CPU is counted: the brokers render their metrics
        cpu.restart()
        idle_spies = _profile(-1, cpu.pids, Path(args.profile), args.idle) if args.profile else []
        time.sleep(args.idle)  # what the brokers cost with no client: followers' long polls, heartbeats
        user, system = cpu.since()
        idle_fetches = (request_counts(cluster, "Fetch") - fetches) / args.idle
        for s in idle_spies:
            s.wait(timeout=30)
        emit({"phase": "idle", "seconds": args.idle, "brokers_cores": round((user + system) / args.idle, 3),
              "brokers_user_cores": round(user / args.idle, 3), "fetches_per_s": round(idle_fetches, 1)})
        for i in range(args.reads):
            spies: list[subprocess.Popen[bytes]] = []
            counted: list[float] = []  # the brokers' Fetch count and the time at the first record

            def first(read: int = i, spies: list[subprocess.Popen[bytes]] = spies, counted: list[float] = counted) -> None:
                counted += (request_counts(cluster, "Fetch"), time.perf_counter())
                cpu.restart()
                if args.profile and read < 2:
                    spies.extend(_profile(read, cpu.pids, Path(args.profile), args.profile_seconds))
            row = confluent_consume(kafka, "consume", expected, args.value, config={"group.id": f"reader-{i}"},
                                    on_first=first)
            user, system = cpu.since()
            # librdkafka's Fetch requests: all the brokers answered, less the followers' (their
            # idle rate; while a consumer reads, followers long-poll as when idle)
            if counted:
                counted[0] = (request_counts(cluster, "Fetch") - counted[0]
                              - idle_fetches * (time.perf_counter() - counted[1]))
            for s in spies:
                s.wait(timeout=args.profile_seconds + 30)
            n = max(row["messages"], 1)
            emit({"phase": "consume", "read": i, "messages": row["messages"], "complete": row["complete"],
                  "msgs_per_s": row["msgs_per_s"], "brokers_cpu_us_per_msg": round((user + system) / n * 1e6, 3),
                  "brokers_user_us_per_msg": round(user / n * 1e6, 3),
                  "brokers_sys_us_per_msg": round(system / n * 1e6, 3),
                  "brokers_cpu_s_per_MB": round((user + system) / (n * args.value / 1e6), 4),
                  "brokers_cores": round((user + system) * row["msgs_per_s"] / n, 2),
                  **({"consumer_fetches": round(counted[0]), "msgs_per_fetch": round(n / max(counted[0], 1))}
                     if counted else {}),
                  **({"profiled": True} if spies else {})})
    finally:
        stop_cluster(cluster, base, keep=False)


COMPARED = ("brokers_cpu_us_per_msg", "brokers_user_us_per_msg", "brokers_sys_us_per_msg", "msgs_per_s")


def compare(args: argparse.Namespace) -> None:
    """This harness on ``--base``'s tree and on this one in turn, ``--rounds`` times each
    (base, this, this, base, ...), then per figure the medians and the paired ratios of the
    reads side by side (same round, same read number)."""
    base = base_tree(args.base)
    passed = ["--messages", str(args.messages), "--value", str(args.value), "--partitions", str(args.partitions),
              "--reads", str(args.reads)]
    try:
        rows = alternate("bench.kafka_consume", base, passed, args.rounds)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    by = {(row["tree"], row["round"], row["read"]): row for row in rows if row.get("phase") == "consume"}
    summary: dict[str, Any] = {"summary": f"this / base, {args.rounds} rounds x {args.reads} reads"}
    for name in COMPARED:
        pairs = [(b[name], t[name]) for (tree, r, i), b in by.items() if tree == "base"
                 if (t := by.get(("this", r, i))) and b.get(name) and t.get(name)]
        if pairs:
            ratios = sorted(t / b for b, t in pairs)
            summary[name] = {"base": statistics.median(b for b, _ in pairs),
                             "this": statistics.median(t for _, t in pairs),
                             "paired_ratio": round(statistics.median(ratios), 3),
                             "range": [round(ratios[0], 3), round(ratios[-1], 3)], "pairs": len(pairs)}
    emit(summary)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--messages", type=int, default=600_000)
    ap.add_argument("--value", type=int, default=256, help="value bytes")
    ap.add_argument("--partitions", type=int, default=6)
    ap.add_argument("--reads", type=int, default=3, help="consumers reading the topic back, one after another")
    ap.add_argument("--idle", type=float, default=5, help="seconds of the brokers' idle CPU measured before the reads")
    ap.add_argument("--profile", metavar="DIR", help="perf on the brokers during the first read, py-spy --native during the second")
    ap.add_argument("--profile-seconds", type=float, default=4)
    ap.add_argument("--base", help="a commit: its tree and this one run in turn (see compare)")
    ap.add_argument("--rounds", type=int, default=3, help="with --base: runs of each tree")
    args = ap.parse_args()
    if args.base:
        compare(args)
    else:
        run(args)


if __name__ == "__main__":
    main()
