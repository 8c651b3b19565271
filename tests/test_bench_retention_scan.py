"""bench.retention_scan's checks measure what they say: over the store it writes, the ``keep``
check (retention.ms 168 hours) deletes nothing and the ``delete`` check (one hour) deletes the
old batches of every partition, on a linked copy that leaves the store as it was (a check that
deleted nothing, or the wrong batches, would make the figure a measure of something else)."""
from __future__ import annotations

import os

from bench import retention_scan


def _files(directory) -> dict[str, int]:
    return {str(p.relative_to(directory)): p.stat().st_size for p in directory.rglob("*") if p.is_file()}


def test_the_checks_delete_nothing_and_the_old_batches(tmp_path, monkeypatch):
    store = tmp_path / "store"
    assert retention_scan.build(store, 0.004, 2, 64, 25) == 64  # 2 partitions of 32 batches, 8 old each
    monkeypatch.setenv("COUNT", "1")
    kept = retention_scan.check(store, retention_scan.MODES["keep"])
    assert (kept["partitions_trimmed"], kept["batches_deleted"]) == (0, 0)
    copy = tmp_path / "copy"
    retention_scan.linked_copy(store, copy)
    linked = {f for f in _files(copy) if f.endswith((".sst", ".blob"))}
    assert linked and all(os.path.samefile(copy / f, store / f) for f in linked)
    trimmed = retention_scan.check(copy, retention_scan.MODES["delete"])
    assert (trimmed["partitions_trimmed"], trimmed["batches_deleted"]) == (2, 16)
    again = tmp_path / "again"  # the store as it was: a second copy has the same batches to delete
    retention_scan.linked_copy(store, again)
    assert retention_scan.check(again, retention_scan.MODES["delete"])["batches_deleted"] == 16
