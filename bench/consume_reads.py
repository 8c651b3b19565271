"""Our consumer's read over gRPC, a commit's brokers against this tree's, read after read:
the brokers' CPU per message of the same read repeated, paired in one session.

    python -m bench.consume_reads --base main --reads 6 --messages 2000000

Why: ``bench.kafka_clients`` reads each produced topic once per round, a phase of a few
seconds, so a change to the read alone takes many of its seven-minute runs to show. Here two
clusters (``bench.common.three_brokers``), one of ``--base``'s tree (``kafka_clients.base_tree``)
and one of this tree, each get ``--messages`` records of 256 bytes from our producer (as
``bench.kafka_clients`` produces them, 6 partitions), then ``bench.kafka_clients``'s catch-up
consumer reads the whole topic from each in turn (base, this, this, base, ...), ``--reads``
times each; each read's brokers' CPU is counted from its first record to its last
(``PhaseCpu``, the brokers' idle CPU over that time included, as in ``bench.kafka_clients``).
The idle CPU, about 0.03 of a core for the three brokers, is a fifth to a half of a read's
figure and grows with the read's length, which the consumer's own share of the cores sets:
so each read also reports ``brokers_idle_cores`` (the three brokers' CPU over the
``--idle`` seconds before it, nothing reading) and ``brokers_read_us_per_msg``, its figure
less that idle rate over the read's time: what the reading itself cost the brokers.

JSON lines: each read (``tree``, ``read``, ``brokers_cpu_us_per_msg``, ``brokers_read_us_per_msg``,
``msgs_per_s``, ...), then for both figures the medians of either tree and the median and range
of the paired ratios (this / base).
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
import tempfile
import time
from pathlib import Path
from typing import Any

from .common import REPO, cpu_seconds, emit, three_brokers

TOPIC, VALUE, PARTITIONS = "reads", 256, 6


def serve(messages: int, idle: float) -> None:
    """A cluster of this process's tree with ``messages`` produced: one read per line ``read``
    on stdin, its row on stdout, until another line or the end."""
    from . import kafka_clients as kc
    base = Path(tempfile.mkdtemp(prefix="consumereads"))
    cluster = three_brokers(base)
    cluster.start()
    try:
        asyncio.run(cluster.wait_for_brokers(timeout=90))
        kc.create_topics(cluster.kafka_bootstrap_servers, [TOPIC], PARTITIONS)
        args = argparse.Namespace(seconds=0, messages=messages, value=VALUE, partitions=PARTITIONS, requests=False)
        produced = asyncio.run(kc.pykraft_produce(cluster.bootstrap_servers, TOPIC, args))["messages"]
        print(json.dumps({"produced": produced}), flush=True)
        cpu = kc.PhaseCpu(cluster)
        pids = [p.pid for p in cluster.broker_procs.values()]
        for line in sys.stdin:
            if line.strip() != "read":
                break
            before = sum(map(cpu_seconds, pids))
            time.sleep(idle)  # nothing reads: the brokers' idle rate just before the read
            idle_cores = (sum(map(cpu_seconds, pids)) - before) / idle
            row = cpu.of(lambda: kc.pykraft_consume(cluster.bootstrap_servers, TOPIC, produced, VALUE,
                                                     on_first=cpu.restart), VALUE)
            reading = row["brokers_cpu_s"] - idle_cores * row["messages"] / row["msgs_per_s"]
            print(json.dumps({**row, "brokers_idle_cores": round(idle_cores, 4),
                              "brokers_read_us_per_msg": round(reading / row["messages"] * 1e6, 3)}), flush=True)
    finally:
        cluster.stop()
        shutil.rmtree(base, ignore_errors=True)


def compare(commit: str, reads: int, messages: int, idle: float) -> None:
    from .kafka_clients import base_tree
    base = base_tree(commit)
    trees = {"base": base, "this": REPO}
    procs: dict[str, subprocess.Popen] = {}
    try:
        for label, tree in trees.items():
            procs[label] = subprocess.Popen(
                [sys.executable, "-m", "bench.consume_reads", "--serve", "--messages", str(messages), "--idle", str(idle)],
                cwd=tree,
                env={**os.environ, "PYTHONPATH": str(tree)}, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        for label, p in procs.items():
            assert p.stdout is not None
            emit({"tree": label, **json.loads(p.stdout.readline())})
        rows: dict[str, list[dict[str, Any]]] = {"base": [], "this": []}
        for r in range(reads):
            for label in ("base", "this") if r % 2 == 0 else ("this", "base"):
                p = procs[label]
                assert p.stdin is not None and p.stdout is not None
                p.stdin.write("read\n")
                p.stdin.flush()
                row = {"tree": label, "read": r, **json.loads(p.stdout.readline())}
                emit(row)
                rows[label].append(row)
        summary: dict[str, Any] = {"summary": f"this / base, {reads} reads"}
        for name in ("brokers_cpu_us_per_msg", "brokers_read_us_per_msg"):
            before = [row[name] for row in rows["base"]]
            after = [row[name] for row in rows["this"]]
            ratios = sorted(t / b for b, t in zip(before, after, strict=True))
            summary[name] = {"base": statistics.median(before), "this": statistics.median(after),
                             "paired_ratio": round(statistics.median(ratios), 2),
                             "range": [round(ratios[0], 2), round(ratios[-1], 2)]}
        emit(summary)
    finally:
        for p in procs.values():
            if p.stdin is not None:
                p.stdin.close()
        for p in procs.values():
            p.wait(timeout=120)
        shutil.rmtree(base, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base", default="main", help="the commit whose brokers and clients are compared")
    ap.add_argument("--reads", type=int, default=6, help="reads of each cluster")
    ap.add_argument("--messages", type=int, default=2_000_000)
    ap.add_argument("--idle", type=float, default=3.0, help="seconds of the brokers' idle CPU counted before each read")
    ap.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serve:
        serve(args.messages, args.idle)
    else:
        compare(args.base, args.reads, args.messages, args.idle)


if __name__ == "__main__":
    main()
