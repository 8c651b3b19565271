"""The CPU of one retention check (``ReplicaManager.enforce_retention``'s work on each
partition: ``PartitionLog.retention_offset``, then ``delete_before`` when something goes) over
a store of about ``--gb`` of batches, with this tree's code and, with ``--base COMMIT``,
COMMIT's, in turn.

    python -m bench.retention_scan --base HEAD~1 --gb 1 --rounds 6

Why: the check runs every ``log.retention.check.interval.ms`` (5 minutes) on every partition
with a time or size limit (every topic by default: 168 hours), and each value it reads from a
blob file is checked with RocksDB's CRC32C, in software in rocksdict's build
(docs/brokers.md, "Retention").

The store is written once (``--partitions`` logs, ``--batch-kb`` batches of 16 KiB records,
the oldest ``--old-pct`` of each log's batches timestamped two hours back, the rest now; then
flushed, so the values are in blob files as a broker's are after its first minute), with this
tree's code; both trees read the same format. Each round runs two checks per tree, each in a
process of its own: ``keep`` with retention.ms at 168 hours (nothing old enough: what the check
does almost every time) on the store itself, and ``delete`` with retention.ms at one hour (the
old batches go) on a copy of it (table and blob files hard-linked: RocksDB never changes them in
place). JSON lines per check: the thread's CPU over the check (``time.thread_time``: the reads
run on the calling thread), the process's from /proc (10 ms ticks) and the batches deleted;
then, per check, the medians and the range of the paired ratios (this / base).
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

from .common import REPO, cpu_seconds, emit

HOUR_MS = 3_600_000
MODES = {"keep": 168 * HOUR_MS, "delete": HOUR_MS}


def build(directory: Path, gb: float, partitions: int, batch_kb: int, old_pct: float) -> int:
    """Write the store; returns the batches written."""
    import uuid

    from brokerd.log_store import LogStore
    from brokerd.partition_log import PartitionLog
    from clients.records import build_batch

    per_log = max(1, int(gb * (1 << 30) / (batch_kb << 10) / partitions))
    old = int(time.time() * 1000) - 2 * HOUR_MS
    record = os.urandom(16 << 10)

    async def go() -> None:
        store = LogStore(str(directory))
        logs = [PartitionLog(store, uuid.UUID(int=77), p) for p in range(partitions)]
        for i in range(per_log):
            ts = old if i < per_log * old_pct / 100 else int(time.time() * 1000)
            for plog in logs:
                await plog.append_as_leader(build_batch(
                    [(b"k%d" % r, record, ts, ()) for r in range(max(1, batch_kb // 16))]), 0)
        for plog in logs:
            plog.set_high_watermark(plog.log_end_offset)
            plog.checkpoint()
        store.db.flush(True)
        await store.close()
    asyncio.run(go())
    return per_log * partitions


def check(directory: Path, retention_ms: int) -> dict[str, float]:
    """One retention check over every partition of the store, as the tree's enforce_retention
    does it (``retention_cut`` and ``apply_retention``; before them, ``retention_offset`` and
    ``delete_before``)."""
    from brokerd.log_store import LogStore
    from brokerd.partition_log import PartitionLog

    async def go() -> dict[str, float]:
        store = LogStore(str(directory))
        logs = [PartitionLog(store, tid, p) for tid, p in store.local_partitions()]
        now = int(time.time() * 1000)
        count = bool(os.environ.get("COUNT"))  # the batches before and after (reads of their own)
        before = sum(len(plog.stored_batches()) for plog in logs) if count else 0
        thread, process = time.thread_time(), cpu_seconds(os.getpid())
        deleted = 0
        for plog in logs:
            if hasattr(plog, "retention_cut"):  # a tree whose check deletes from what its scan read
                deleted += plog.apply_retention(plog.retention_cut(now, retention_ms, -1)) > 0
                continue
            start = plog.retention_offset(now, retention_ms, -1)
            if start > plog.log_start_offset:
                deleted += plog.delete_before(start) > 0
        thread, process = time.thread_time() - thread, cpu_seconds(os.getpid()) - process
        after = sum(len(plog.stored_batches()) for plog in logs) if count else 0
        await store.close()
        got = {"thread_ms": round(thread * 1000, 2), "process_ms": round(process * 1000, 1),
               "partitions_trimmed": deleted}
        return {**got, "batches_deleted": before - after} if count else got
    return asyncio.run(go())


def linked_copy(source: Path, target: Path) -> None:
    """A copy of a store whose table and blob files are hard links (RocksDB writes new files
    and never changes these), the rest (MANIFEST, WAL, OPTIONS, CURRENT) copied."""
    for path in source.rglob("*"):
        dest = target / path.relative_to(source)
        if path.is_dir():
            dest.mkdir(parents=True, exist_ok=True)
        elif path.suffix in (".sst", ".blob"):
            dest.parent.mkdir(parents=True, exist_ok=True)
            os.link(path, dest)
        else:
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, dest)


def measure(tree: Path, store: Path, mode: str, scratch: Path, count: bool) -> dict[str, float]:
    """One check with ``tree``'s code, in a process of its own."""
    target = store
    if mode == "delete":
        target = scratch / "copy"
        shutil.rmtree(target, ignore_errors=True)
        linked_copy(store, target)
    env = {**os.environ, "PYTHONPATH": str(tree), "COUNT": "1" if count else ""}
    out = subprocess.run([sys.executable, "-m", "bench.retention_scan", "--check", str(target),
                          "--retention-ms", str(MODES[mode])], cwd=tree, env=env, capture_output=True,
                         text=True, check=True)
    return json.loads(out.stdout)


def run(args: argparse.Namespace) -> None:
    scratch = Path(tempfile.mkdtemp(prefix="retention-scan-"))
    store = scratch / "store"
    trees: list[tuple[str, Path]] = [("this", REPO)]
    base = None
    try:
        started = time.perf_counter()
        batches = build(store, args.gb, args.partitions, args.batch_kb, args.old_pct)
        size = sum(p.stat().st_size for p in store.rglob("*") if p.is_file())
        emit({"bench": "retention_scan", "store_mb": round(size / (1 << 20)), "batches": batches,
              "blob_files": len(list(store.rglob("*.blob"))), "build_s": round(time.perf_counter() - started, 1)})
        if args.base:
            from .kafka_clients import base_tree
            base = base_tree(args.base)
            trees = [("base", base), ("this", REPO)]
        figures: dict[tuple[str, str], list[float]] = {}
        for r in range(args.rounds):
            for label, tree in trees if r % 2 == 0 else trees[::-1]:
                for mode in MODES:
                    got = measure(tree, store, mode, scratch, count=r == 0)
                    figures.setdefault((label, mode), []).append(got["thread_ms"])
                    emit({"bench": "retention_scan", "tree": label, "round": r, "check": mode, **got})
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        if base is not None:
            shutil.rmtree(base, ignore_errors=True)
    if base is None:
        return
    for mode in MODES:
        b, t = figures[("base", mode)], figures[("this", mode)]
        ratios = sorted(x / y for x, y in zip(t, b, strict=True))
        emit({"bench": "retention_scan", "summary": f"this / base, {args.rounds} rounds", "check": mode,
              "base_thread_ms": round(statistics.median(b), 2), "this_thread_ms": round(statistics.median(t), 2),
              "base_range": [min(b), max(b)], "this_range": [min(t), max(t)],
              "paired_ratio": round(statistics.median(ratios), 4), "range": [round(ratios[0], 4),
                                                                             round(ratios[-1], 4)]})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gb", type=float, default=1.0, help="the store's size")
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--batch-kb", type=int, default=256)
    ap.add_argument("--old-pct", type=float, default=1.0, help="the share of each log's batches past retention")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--base", help="a commit to compare with, run in turn with this tree")
    ap.add_argument("--check", help=argparse.SUPPRESS)  # a check's process: the store to check
    ap.add_argument("--retention-ms", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.check:
        print(json.dumps(check(Path(args.check), args.retention_ms)))
    else:
        run(args)


if __name__ == "__main__":
    main()
