"""The storage engine decision, measured: durable appends of Raft entries with (a) our segment
files (one write and one fdatasync per batch) and (b) RocksDB through rocksdict with synced
write batches. Batches of 1, 16 and 256 entries of 256 bytes.

    python -m bench.storage [--seconds 3]
"""
from __future__ import annotations

import argparse
import shutil
import struct
import tempfile
import time

from rocksdict import Options, Rdict, WriteBatch, WriteOptions

from raft.messages import Entry, HardState, Ready
from raft.storage import DiskStorage, format_storage

from .common import emit, summary


def wal_engine(path: str):
    format_storage(path, "bench", 1)
    s = DiskStorage(path, 1, "bench")
    s.recover()

    def append(entries: list[Entry]) -> None:
        rd = Ready()
        rd.entries = entries
        rd.hard_state = HardState(1, 1, entries[-1].index)
        rd.sync = True
        s.save(rd)
    return append, s.close


def rocks_engine(path: str):
    opts = Options()
    opts.create_if_missing(True)
    db = Rdict(path, opts)
    wo = WriteOptions()
    wo.sync = True
    db.set_write_options(wo)

    def append(entries: list[Entry]) -> None:
        wb = WriteBatch()
        for e in entries:
            wb.put(struct.pack(">Q", e.index), struct.pack(">QB", e.term, e.type) + e.data)
        wb.put(b"hardstate", struct.pack(">QQQ", 1, 1, entries[-1].index))
        db.write(wb)
    return append, db.close


def measure(name: str, engine, batch: int, seconds: float) -> dict:
    d = tempfile.mkdtemp(prefix="storagebench")
    try:
        append, close = engine(d + "/db")
        data = b"v" * 256
        idx, lat = 0, []
        stop = time.perf_counter() + seconds
        t0 = time.perf_counter()
        while time.perf_counter() < stop:
            es = [Entry(idx + k + 1, 1, data) for k in range(batch)]
            idx += batch
            t = time.perf_counter()
            append(es)
            lat.append(time.perf_counter() - t)
        elapsed = time.perf_counter() - t0
        close()
        row = summary(name, 1, 256, lat, elapsed, bench="storage", entries_per_batch=batch)
        row["entries_per_s"] = round(idx / elapsed)
        return row
    finally:
        shutil.rmtree(d, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=3)
    a = ap.parse_args()
    for batch in (1, 16, 256):
        emit(measure("segment-files", wal_engine, batch, a.seconds))
        emit(measure("rocksdb-sync", rocks_engine, batch, a.seconds))


if __name__ == "__main__":
    main()
