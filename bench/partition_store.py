"""Where a partition log's batches are kept in RocksDB, in one process: blob files (the
brokers' setting, ``brokerd.log_store``: every blob read is checked with RocksDB's CRC32C, in
software in rocksdict's build) against values in the SST files' blocks checked with XXH3.

    python -m bench.partition_store --batches 4000 --rounds 2

Why: reading blobs back (pread, CRC32C, a copy into a Python bytes) was the largest single
cost of the brokers while librdkafka consumed (docs/brokers.md, "librdkafka's consume per
broker core"); XXH3 runs several times faster than a software CRC32C, but values in SST files
are rewritten by every compaction, which blob files were adopted to avoid ("RocksDB
settings"). Each round writes ``--batches`` values of ``--value`` bytes (one WriteBatch each,
as a follower's append; flushes and compactions run as they come), waits for the background
work, then scans them all back three times with an iterator (as ``PartitionLog.read``).

JSON lines per layout and round: the process's CPU (every thread: RocksDB's flushes and
compactions too, from /proc) per MB written and per MB scanned (median of the three scans),
the p99 and longest write, and the SST files per level at the end.
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from typing import Any

from rocksdict import (BlockBasedOptions, ChecksumType, DBCompressionType, Options, Rdict, ReadOptions, WriteBatch,
                       WriteOptions)

from .common import cpu_seconds, emit


def options(layout: str) -> Options:
    """``brokerd.log_store``'s options, with blob files (``blob``) or without, their blocks
    checked with XXH3 (``sst``)."""
    o = Options(raw_mode=True)
    o.create_if_missing(True)
    o.set_compression_type(DBCompressionType.none())
    o.set_max_background_jobs(2)
    o.set_write_buffer_size(64 << 20)
    o.set_max_write_buffer_number(4)
    if layout == "blob":
        o.set_enable_blob_files(True)
        o.set_min_blob_size(4096)
        o.set_blob_file_size(256 << 20)
        o.set_enable_blob_gc(True)
    else:
        table = BlockBasedOptions()
        table.set_checksum_type(ChecksumType.xxh3())
        o.set_block_based_table_factory(table)
    return o


def one(layout: str, batches: int, value: bytes, settle: float) -> dict[str, Any]:
    path = tempfile.mkdtemp(prefix=f"partition-store-{layout}-")
    db = Rdict(path, options(layout))
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batches", type=int, default=4000)
    ap.add_argument("--value", type=int, default=256 << 10, help="bytes per batch (librdkafka's batch.size here)")
    ap.add_argument("--rounds", type=int, default=2, help="each layout this many times, alternating")
    ap.add_argument("--settle", type=float, default=3.0, help="seconds for compactions after the writes")
    args = ap.parse_args()
    value = os.urandom(args.value)
    for r in range(args.rounds):
        for layout in ("blob", "sst") if r % 2 == 0 else ("sst", "blob"):
            emit({"round": r, **one(layout, args.batches, value, args.settle)})


if __name__ == "__main__":
    main()
