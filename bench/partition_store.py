"""Where a partition log's batches are kept in RocksDB, in one process: blob files (the
brokers' setting until issue 31, ``brokerd.log_store``: every blob read is checked with
RocksDB's CRC32C, in software in rocksdict's build) against values in the SST files' blocks
checked with XXH3.

    python -m bench.partition_store --batches 4000 --rounds 2
    python -m bench.partition_store --sustained --partitions 6,50,500 --write-gb 30 --retain-gb 5

Why: reading blobs back (pread, CRC32C, a copy into a Python bytes) was the largest single
cost of the brokers while librdkafka consumed (docs/brokers.md, "librdkafka's consume per
broker core"); XXH3 runs several times faster than a software CRC32C, but values in SST files
are rewritten by every compaction, which blob files were adopted to avoid ("RocksDB
settings").

The short mode writes ``--batches`` values of ``--value`` bytes under one key range (one
WriteBatch each, as a follower's append; flushes and compactions run as they come), waits for
the background work, then scans them all back three times with an iterator (as
``PartitionLog.read``).

``--sustained`` is shaped like a broker: ``brokerd.log_store``'s keys (b"d" + topic id +
partition + base offset, and each append's b"s" state entry in the same WriteBatch), many
partitions appended round-robin with values of 16 KiB to 1 MiB (librdkafka's batches go up to
1 MiB), and retention's range delete of each partition's oldest batches every
``--check-mb`` written, as ``PartitionLog.delete_before`` does, so that the store keeps about
``--retain-gb`` while ``--write-gb`` go through it. The layouts alternate.

``--layouts`` also takes tweaks of the brokers' blob layout (``BLOB_TWEAKS``: blob garbage
collection always on, as before issue 31's storage pass, or never; write buffers, O_DIRECT, syncs)
and ``--slow-every-mb`` adds a partition retained whole (its batches keep blob files from
emptying: what blob garbage collection is still for).

JSON lines per layout and round: the process's CPU (every thread: RocksDB's flushes and
compactions too, from /proc) per MB written, split by thread (the writing thread, RocksDB's
flushes and its compactions), and per MB scanned, the blob bytes garbage collection rewrote, write throughput, the p99 and
longest write, the bytes the process wrote to the disk (WAL, flushes, compactions) and
RocksDB's compaction bytes beyond its flushes against the bytes put (write amplification), RocksDB's stall time, the directory's size
against the live bytes (space amplification), and the SST files per level at the end.
"""
from __future__ import annotations

import argparse
import collections
import os
import random
import re
import shutil
import statistics
import tempfile
import time
import uuid
from typing import Any

from rocksdict import (BlockBasedOptions, ChecksumType, Options, Rdict, ReadOptions, WriteBatch,
                       WriteOptions)

from brokerd.log_store import BlobGarbageCollection, store_options

from .common import cpu_seconds, emit, thread_cpu, thread_cpu_delta

# Tweaks of the SST layout tried under --sustained (name -> what it sets on top of "sst").
SST_TWEAKS = ("sst", "sst-l0", "sst-big")
# "hybrid": blob files from level 1 down (``blob_file_starting_level``, set once open: rocksdict's
# Options has no setter for it): level 0's files, the newest data, keep values in XXH3-checked
# blocks; the first compaction out of level 0 moves them to blob files.
HYBRID_LEVEL = 1


# Tweaks of the blob layout tried under --sustained (issue 31, the brokers' storage CPU per MB):
# name -> what it sets on top of "blob", brokerd.log_store's options and its switching of blob
# garbage collection (``BlobGarbageCollection``, called every 64 MiB put as LogStore does).
BLOB_TWEAKS = {
    "blob-gc": "blob garbage collection always on (the brokers' setting before)",
    "blob-nogc": "no blob garbage collection: a blob file goes when every blob in it is garbage",
    "blob-gc05": "garbage collection always on, of the oldest 5 % of blob files instead of 25 %",
    "blob-wb": "two memtables merged per flush (min_write_buffer_number_to_merge 2)",
    "blob-direct": "flushes and compactions write with O_DIRECT, bypassing the page cache",
    "blob-sync": "flushes, compactions (bytes_per_sync) and the WAL (wal_bytes_per_sync) synced in 1 MiB steps",
}
# The layouts whose blob garbage collection is set once, not switched by BlobGarbageCollection.
FIXED_GC = ("blob-gc", "blob-nogc", "blob-gc05")


def xxh3_table() -> BlockBasedOptions:
    table = BlockBasedOptions()
    table.set_checksum_type(ChecksumType.xxh3())
    return table


def open_store(path: str, layout: str) -> Rdict:
    o = options(layout)
    db = Rdict(path, o, column_families={"default": o})
    if layout == "hybrid":
        db.set_options({"blob_file_starting_level": str(HYBRID_LEVEL)})
    return db


def options(layout: str) -> Options:
    """``brokerd.log_store``'s options (``blob``) and its tweaks (``BLOB_TWEAKS``), its blocks
    checked with XXH3 (``hybrid``), or without blob files, their blocks checked with XXH3
    (``sst`` and its tweaks)."""
    o = store_options()
    if layout == "blob":
        return o
    if layout in BLOB_TWEAKS:
        if layout == "blob-gc":
            o.set_enable_blob_gc(True)
            o.set_blob_gc_force_threshold(1.0)  # RocksDB's default, as before
        elif layout == "blob-nogc":
            o.set_enable_blob_gc(False)
        elif layout == "blob-gc05":
            o.set_enable_blob_gc(True)
            o.set_blob_gc_age_cutoff(0.05)
            o.set_blob_gc_force_threshold(1.0)
        elif layout == "blob-wb":
            o.set_min_write_buffer_number_to_merge(2)
        elif layout == "blob-direct":
            o.set_use_direct_io_for_flush_and_compaction(True)
        elif layout == "blob-sync":
            o.set_bytes_per_sync(1 << 20)
            o.set_wal_bytes_per_sync(1 << 20)
        return o
    o.set_block_based_table_factory(xxh3_table())
    if layout == "hybrid":
        return o
    o.set_enable_blob_files(False)
    if layout == "sst-l0":  # more L0 files per L0->L1 compaction: fewer rewrites of L1
        o.set_level_zero_file_num_compaction_trigger(8)
        o.set_level_zero_slowdown_writes_trigger(40)
        o.set_level_zero_stop_writes_trigger(60)
    elif layout == "sst-big":  # bigger files and base level: fewer levels for the same bytes
        o.set_target_file_size_base(256 << 20)
        o.set_max_bytes_for_level_base(1 << 30)
    return o


def one(layout: str, batches: int, value: bytes, settle: float) -> dict[str, Any]:
    path = tempfile.mkdtemp(prefix=f"partition-store-{layout}-")
    db = open_store(path, layout)
    try:
        plain, pid = WriteOptions(), os.getpid()
        start, lat = cpu_seconds(pid), []
        for i in range(batches):
            wb = WriteBatch(raw_mode=True)
            wb.put(b"d" + i.to_bytes(8, "big"), value)
            t = time.perf_counter()
            db.write(wb, plain)
            lat.append(time.perf_counter() - t)
        db.flush(True)
        time.sleep(settle)  # compactions the flushes started
        written = cpu_seconds(pid) - start
        scans = []
        for _ in range(3):
            start = cpu_seconds(pid)
            it = db.iter(ReadOptions())
            it.seek_to_first()
            while it.valid():
                it.value()
                it.next()
            scans.append(cpu_seconds(pid) - start)
        levels = [db.property_int_value(f"rocksdb.num-files-at-level{n}") for n in range(7)]
    finally:
        db.close()
        shutil.rmtree(path, ignore_errors=True)
    lat.sort()
    mb = batches * len(value) / 1e6
    return {"layout": layout, "MB": round(mb), "write_cpu_ms_per_MB": round(written / mb * 1e3, 2),
            "scan_cpu_ms_per_MB": round(statistics.median(scans) / mb * 1e3, 3),
            "write_p99_ms": round(lat[int(len(lat) * 0.99)] * 1e3, 1), "write_max_ms": round(lat[-1] * 1e3, 1),
            "sst_files_per_level": levels}


# -- sustained appends with retention ------------------------------------------------------------

def disk_bytes_written(pid: int) -> int:
    """Bytes the process caused to be written to storage (every thread; /proc/PID/io)."""
    with open(f"/proc/{pid}/io") as f:
        for line in f:
            if line.startswith("write_bytes:"):
                return int(line.split()[1])
    return 0


def dir_bytes(path: str) -> int:
    """The store's files' bytes (a file a compaction deletes meanwhile counts nothing)."""
    total = 0
    for e in os.scandir(path):
        try:
            total += e.stat().st_size
        except FileNotFoundError:
            pass
    return total


def rocksdb_stats(db: Rdict) -> dict[str, float]:
    """Flush and compaction GB written and the write stall time, from ``rocksdb.stats``."""
    text = db.property_value("rocksdb.stats") or ""
    out = {}
    m = re.search(r"Flush\(GB\): cumulative ([\d.]+)", text)
    out["flush_GB"] = float(m.group(1)) if m else -1.0
    m = re.search(r"Cumulative compaction: ([\d.]+) GB write", text)
    out["compaction_GB"] = float(m.group(1)) if m else -1.0
    m = re.search(r"Cumulative stall: (\d+):(\d+):([\d.]+) H:M:S", text)
    out["stall_s"] = int(m.group(1)) * 3600 + int(m.group(2)) * 60 + float(m.group(3)) if m else -1.0
    return out


def blob_gc_gb(db: Rdict) -> float:
    """GB that blob garbage collection wrote (blobs relocated by compactions), from
    ``rocksdb.stats``'s per-level table: its last column, ``Wblob(GB)``, added up over the
    levels below 0 (level 0's are the flushes')."""
    text = db.property_value("rocksdb.stats") or ""
    if "Wblob(GB)" not in text:
        return -1.0
    total = 0.0
    for line in text.split("** Compaction Stats")[1].splitlines():
        cells = line.split()
        if cells and re.fullmatch(r"L[1-9]", cells[0]):
            total += float(cells[-1])
    return round(total, 3)


def settle(db: Rdict, limit: float) -> float:
    """Wait (up to ``limit`` s) until no flush or compaction runs or is pending; returns the wait."""
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < limit:
        busy = (db.property_int_value("rocksdb.num-running-compactions") or 0) + \
            (db.property_int_value("rocksdb.num-running-flushes") or 0) + \
            (db.property_int_value("rocksdb.compaction-pending") or 0) + \
            (db.property_int_value("rocksdb.mem-table-flush-pending") or 0)
        if not busy:
            break
        time.sleep(0.2)
    return time.perf_counter() - t0


def sustained(layout: str, base: str, partitions: int, write_bytes: int, retain_bytes: int, check_bytes: int,
              values: list[bytes], seed: int, tail_bytes: int = 256 << 20, slow_every: int = 0) -> dict[str, Any]:
    """Append ``write_bytes`` round-robin over ``partitions`` with retention keeping about
    ``retain_bytes``; then scan what is retained. ``slow_every``: one more partition gets a
    16 KiB batch every that many bytes put and keeps all it gets (a topic retained far longer
    than the others: each of its batches keeps a blob file from emptying)."""
    path = tempfile.mkdtemp(prefix=f"partition-store-{layout}-", dir=base)
    rng = random.Random(seed)  # the same value sizes for every layout
    db = open_store(path, layout)
    pid = os.getpid()
    topic = uuid.UUID(int=seed).bytes
    prefixes = [topic + p.to_bytes(4, "big") for p in range(partitions)]
    gc = None if layout in FIXED_GC or not layout.startswith(("blob", "hybrid")) else BlobGarbageCollection()
    gc_on_checks = gc_checks = 0
    slow_prefix, slow_offset, since_slow = topic + partitions.to_bytes(4, "big"), 0, 0
    kept: list[collections.deque[tuple[int, int]]] = [collections.deque() for _ in range(partitions)]
    kept_bytes, next_offset = [0] * partitions, [0] * partitions
    per_partition = retain_bytes // partitions
    plain = WriteOptions()
    lat: list[float] = []
    put = live = max_space = 0
    space_samples: list[float] = []
    try:
        disk0, cpu0, wall0 = disk_bytes_written(pid), cpu_seconds(pid), time.perf_counter()
        threads0 = thread_cpu(pid)
        since_check, p = 0, 0
        while put < write_bytes:
            value = values[rng.randrange(len(values))]
            prefix, base_offset = prefixes[p], next_offset[p]
            wb = WriteBatch(raw_mode=True)
            wb.put(b"d" + prefix + base_offset.to_bytes(8, "big"), value)
            next_offset[p] = base_offset + len(value) // 256  # records of 256 bytes
            wb.put(b"s" + prefix, next_offset[p].to_bytes(8, "big") * 4)  # the partition's state entry
            t = time.perf_counter()
            db.write(wb, plain)
            lat.append(time.perf_counter() - t)
            kept[p].append((base_offset, len(value)))
            kept_bytes[p] += len(value)
            put += len(value)
            live += len(value)
            since_check += len(value)
            p = (p + 1) % partitions
            if gc is not None and put >= gc.next_check:
                gc.next_check = put + gc.EVERY
                gc_checks += 1
                gc_on_checks += gc.check(db)
            since_slow += len(value)
            if slow_every and since_slow >= slow_every:
                since_slow = 0
                wb = WriteBatch(raw_mode=True)
                wb.put(b"d" + slow_prefix + slow_offset.to_bytes(8, "big"), values[0])
                slow_offset += len(values[0]) // 256
                wb.put(b"s" + slow_prefix, slow_offset.to_bytes(8, "big") * 4)
                db.write(wb, plain)
                put += len(values[0])
                live += len(values[0])
            if since_check >= check_bytes:  # retention: one range delete per partition over its share
                since_check = 0
                for q in range(partitions):
                    first = None
                    while kept_bytes[q] - kept[q][0][1] >= per_partition:
                        _, size = kept[q].popleft()
                        kept_bytes[q] -= size
                        live -= size
                        first = kept[q][0][0]
                    if first is not None:
                        wb = WriteBatch(raw_mode=True)
                        wb.delete_range(b"d" + prefixes[q], b"d" + prefixes[q] + first.to_bytes(8, "big"))
                        wb.put(b"s" + prefixes[q], first.to_bytes(8, "big") * 4)
                        db.write(wb, plain)
                on_disk = dir_bytes(path)
                max_space = max(max_space, on_disk)
                space_samples.append(on_disk / live)
        wall = time.perf_counter() - wall0
        db.flush(True)
        waited = settle(db, 600)
        cpu = cpu_seconds(pid) - cpu0
        threads = thread_cpu_delta(threads0, thread_cpu(pid))
        disk = disk_bytes_written(pid) - disk0
        stats = rocksdb_stats(db)
        gc_gb = blob_gc_gb(db)
        end_space = dir_bytes(path)
        levels = [db.property_int_value(f"rocksdb.num-files-at-level{n}") for n in range(7)]
        blob_files = db.property_int_value("rocksdb.num-blob-files") or 0
        tail_scanned = 0  # each partition's newest batches, tail_bytes in all (consumers that keep up)
        start = cpu_seconds(pid)
        for q in range(partitions):
            newest, first = 0, kept[q][-1][0]
            for base_offset, size in reversed(kept[q]):
                if newest + size > tail_bytes // partitions:
                    break
                newest, first = newest + size, base_offset
            it = db.iter(ReadOptions())
            it.seek(b"d" + prefixes[q] + first.to_bytes(8, "big"))
            while it.valid() and it.key().startswith(b"d" + prefixes[q]):
                tail_scanned += len(it.value())
                it.next()
        tail_cpu = cpu_seconds(pid) - start
        scanned = 0
        start = cpu_seconds(pid)
        it = db.iter(ReadOptions())
        it.seek(b"d")
        while it.valid():
            k = it.key()
            if not k.startswith(b"d"):
                break
            scanned += len(it.value())
            it.next()
        scan_cpu = cpu_seconds(pid) - start
        del it
    finally:
        db.close()
        shutil.rmtree(path, ignore_errors=True)
    lat.sort()
    gb = put / 1e9
    return {"layout": layout, "partitions": partitions, "GB_put": round(gb, 2), "GB_retained": round(live / 1e9, 2),
            "write_MB_per_s": round(put / 1e6 / wall, 1), "settle_s": round(waited, 1),
            "write_cpu_ms_per_MB": round(cpu / (put / 1e6) * 1e3, 3),
            # per thread, user + system: main (the writes: WAL, memtable; and this loop),
            # rocksdb:high (flushes), rocksdb:low (compactions, blob garbage collection)
            "thread_cpu_ms_per_MB": {name: [round(u / (put / 1e6) * 1e3, 3), round(s / (put / 1e6) * 1e3, 3)]
                                     for name, (u, s) in sorted(threads.items()) if u + s > 0},
            "blob_gc_GB": gc_gb,
            # BlobGarbageCollection's checks, and how many found it on (None: set once)
            "gc_on_checks": f"{gc_on_checks}/{gc_checks}" if gc is not None else None,
            "write_p99_ms": round(lat[int(len(lat) * 0.99)] * 1e3, 1), "write_max_ms": round(lat[-1] * 1e3, 1),
            "disk_write_amp": round(disk / put, 2),
            # RocksDB's cumulative compaction bytes count its flushes' too (as level 0's)
            "compaction_amp": round((stats["compaction_GB"] - stats["flush_GB"]) * (1 << 30) / put, 2),
            "flush_GB": stats["flush_GB"], "stall_s": stats["stall_s"],
            "space_amp_median": round(statistics.median(space_samples), 2) if space_samples else None,
            "space_amp_max": round(max(space_samples), 2) if space_samples else None,
            "max_GB_on_disk": round(max_space / 1e9, 2), "end_space_amp": round(end_space / live, 2),
            "scan_cpu_ms_per_MB": round(scan_cpu / (scanned / 1e6) * 1e3, 3) if scanned else None,
            "tail_MB": round(tail_scanned / 1e6),
            "tail_scan_cpu_ms_per_MB": round(tail_cpu / (tail_scanned / 1e6) * 1e3, 3) if tail_scanned else None,
            "sst_files_per_level": levels, "blob_files": blob_files}


def value_set() -> list[bytes]:
    """Batches of 16 KiB to 1 MiB, each size as likely (librdkafka's up to batch.size 1 MiB)."""
    return [os.urandom(16 << 10 << i) for i in range(7)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batches", type=int, default=4000)
    ap.add_argument("--value", type=int, default=256 << 10, help="bytes per batch (librdkafka's batch.size here)")
    ap.add_argument("--rounds", type=int, default=2, help="each layout this many times, alternating")
    ap.add_argument("--settle", type=float, default=3.0, help="seconds for compactions after the writes")
    ap.add_argument("--sustained", action="store_true", help="many partitions, retention, tens of GB")
    ap.add_argument("--partitions", default="6,50,500", help="--sustained: partition counts, comma-separated")
    ap.add_argument("--write-gb", type=float, default=30)
    ap.add_argument("--retain-gb", type=float, default=5)
    ap.add_argument("--check-mb", type=float, default=256, help="--sustained: retention runs every this many MB")
    ap.add_argument("--layouts", default="blob,sst",
                    help=f"--sustained: from blob,hybrid,{','.join(SST_TWEAKS)},{','.join(BLOB_TWEAKS)}")
    ap.add_argument("--slow-every-mb", type=float, default=0,
                    help="--sustained: one more partition, retained whole, gets a 16 KiB batch every this many MB")
    ap.add_argument("--dir", default=None, help="--sustained: where the stores go (default: the temp dir)")
    args = ap.parse_args()
    if args.sustained:
        values = value_set()
        layouts = args.layouts.split(",")
        for r in range(args.rounds):
            for n in (int(x) for x in args.partitions.split(",")):
                for layout in layouts if r % 2 == 0 else layouts[::-1]:
                    emit({"round": r, **sustained(layout, args.dir or tempfile.gettempdir(), n,
                                                  int(args.write_gb * 1e9), int(args.retain_gb * 1e9),
                                                  int(args.check_mb * 1e6), values, seed=r * 1000 + n,
                                                  slow_every=int(args.slow_every_mb * 1e6))})
        return
    value = os.urandom(args.value)
    for r in range(args.rounds):
        for layout in ("blob", "sst") if r % 2 == 0 else ("sst", "blob"):
            emit({"round": r, **one(layout, args.batches, value, args.settle)})


if __name__ == "__main__":
    main()
