"""Metadata log directories and snapshot files with a known history, for the tests of the
metadata shell and the log dump.

The history (offset: what the entry does; term 1 up to offset 6, then term 2, then 3)::

    1  membership change: node 1 becomes the only voter
    2  no-op (the new leader's first entry)
    3  metadata.version 3; brokers 1, 2, 3 register (fenced)
    4  brokers 1, 2, 3 unfenced
    5  topics orders-1 (3 partitions), orders-2 (2), payments (1); orders-1 retention.ms
    6  topic old-topic (1 partition); broker default and broker 2 configs
    7  orders-1 partition 0: leader 2, ISR [2, 3]                         (term 2)
    8  old-topic removed                                                   (term 2)
    9  producer ids: the next block starts at 1000                         (term 2)
    10 no-op                                                               (term 3)

Entry ``n`` was appended at ``T0 + n`` seconds.
"""
from __future__ import annotations

import uuid
from pathlib import Path

from metadata import records as R
from metadata.delta import MetadataDelta
from metadata.image import MetadataImage, ResourceType
from metadata.snapshot import write_snapshot
from protos import metadata_pb2 as pb
from raft.messages import (ConfChange, ConfChangeType, Entry, EntryType, HardState, Membership,
                           Ready)
from raft.storage import DiskStorage, format_storage

CLUSTER = "shell-test-cluster"
T0 = 1_700_000_000_000
ORDERS_1 = uuid.UUID("11111111-1111-4111-8111-111111111111")
ORDERS_2 = uuid.UUID("22222222-2222-4222-8222-222222222222")
PAYMENTS = uuid.UUID("33333333-3333-4333-8333-333333333333")
OLD = uuid.UUID("44444444-4444-4444-8444-444444444444")
LAST_OFFSET = 10


def _time(offset: int) -> int:
    return T0 + offset * 1000


def record_batches() -> dict[int, list[pb.MetadataRecord]]:
    """The records of each entry that carries records, by offset."""
    eps = lambda b: [R.endpoint("PLAINTEXT", f"broker{b}", 9092),  # noqa: E731
                     R.endpoint("INTERNAL", f"broker{b}", 9093, pb.Endpoint.SSL)]
    return {
        3: [R.feature_level("metadata.version", 3)]
           + [R.register_broker(b, uuid.UUID(int=b), 100 + b, eps(b), rack=f"rack-{b % 2}")
              for b in (1, 2, 3)],
        4: [R.unfence_broker(b, 100 + b) for b in (1, 2, 3)],
        5: [R.topic("orders-1", ORDERS_1)]
           + [R.partition(ORDERS_1, p, [1 + (p + k) % 3 for k in range(3)]) for p in range(3)]
           + [R.topic("orders-2", ORDERS_2)]
           + [R.partition(ORDERS_2, p, [1 + (p + k) % 3 for k in range(2)]) for p in range(2)]
           + [R.topic("payments", PAYMENTS), R.partition(PAYMENTS, 0, [3, 1, 2]),
              R.config(ResourceType.TOPIC, "orders-1", "retention.ms", "604800000")],
        6: [R.topic("old-topic", OLD), R.partition(OLD, 0, [1, 2]),
            R.config(ResourceType.BROKER, "", "log.retention.hours", "48"),
            R.config(ResourceType.BROKER, "2", "log.cleaner.threads", "2")],
        7: [R.partition_change(ORDERS_1, 0, leader=2, isr=[2, 3])],
        8: [R.remove_topic(OLD)],
        9: [R.producer_ids(1, 101, 1000)],
    }


def _term(offset: int) -> int:
    return 1 if offset <= 6 else 2 if offset <= 9 else 3


def entries() -> list[Entry]:
    batches = record_batches()
    out = [Entry(1, 1, ConfChange(ConfChangeType.ADD_VOTER, 1, Membership(frozenset({1})),
                                  b"127.0.0.1:9093").encode(), EntryType.CONF_CHANGE),
           Entry(2, 1, b"", EntryType.NOOP)]
    for offset in range(3, LAST_OFFSET):
        out.append(Entry(offset, _term(offset),
                         R.encode_batch(batches[offset], append_time_ms=_time(offset))))
    out.append(Entry(LAST_OFFSET, _term(LAST_OFFSET), b"", EntryType.NOOP))
    return out


def image_at(offset: int) -> MetadataImage:
    """The image after the entries up to ``offset``, built without the log directory code."""
    delta = MetadataDelta(MetadataImage.empty(CLUSTER))
    for e in entries():
        if e.index > offset:
            break
        records = R.decode_batch(e.data).records if e.type == EntryType.NORMAL else []
        delta.replay_batch(records, e.index, e.term)
    return delta.apply()


def _save(storage: DiskStorage, items: list[Entry], hard_state: HardState | None = None) -> None:
    ready = Ready()
    ready.entries = items
    ready.hard_state = hard_state
    ready.sync = True
    storage.save(ready)


def build_log_dir(path: Path, *, snapshot_at: int | None = None,
                  segment_bytes: int = 64 << 20, log: list[Entry] | None = None) -> Path:
    """A formatted metadata log directory of node 1 holding the whole history (or ``log``),
    one entry per write (so small ``segment_bytes`` give several segments), with a Raft
    snapshot of the image at ``snapshot_at`` if given. The hard state ends with the last
    entry's term, vote 1, and that entry committed."""
    format_storage(str(path), CLUSTER, 1)
    storage = DiskStorage(str(path), 1, segment_bytes=segment_bytes)
    storage.recover()
    log = entries() if log is None else log
    try:
        for e in log:
            hs = HardState(e.term, 1, e.index - 1 if e.index > 1 else 0)
            _save(storage, [e], hs)
        _save(storage, [], HardState(log[-1].term, 1, log[-1].index))
        if snapshot_at is not None:
            image = image_at(snapshot_at)
            created = _time(snapshot_at)
            storage.write_snapshot(snapshot_at, _term(snapshot_at), Membership(frozenset({1})),
                                   b'{"1": "127.0.0.1:9093"}',
                                   lambda f: write_snapshot(image, f, created_ms=created))
    finally:
        storage.close()
    return path


def unknown_version_entry(index: int, term: int) -> Entry:
    """An entry whose batch holds a valid NoOpRecord, then a PartitionRecord of version 9,
    as a newer controller might write it."""
    batch = pb.RecordBatch(append_time_ms=_time(index))
    batch.records.append(R.no_op())
    batch.records.append(pb.MetadataRecord(version=9, partition=pb.PartitionRecord(
        topic_id=ORDERS_1.bytes, partition_id=7, replicas=[1], isr=[1], leader=1)))
    return Entry(index, term, batch.SerializeToString())


def write_plain_snapshot(path: Path, offset: int = LAST_OFFSET) -> Path:
    """A plain metadata snapshot file of the image at ``offset``."""
    write_snapshot(image_at(offset), path, created_ms=_time(offset))
    return path


def raft_snapshot_path(log_dir: Path) -> Path:
    return next((log_dir / "snapshots").glob("*.snap"))


def segment_paths(log_dir: Path) -> list[Path]:
    return sorted((log_dir / "wal").glob("*.log"))
