"""Reading a metadata snapshot in independent record ranges, one per Spark task.

A range starts on an entry of the snapshot's sparse index (``record_ranges``), so a task
seeks straight to it. Two facts of the format (docs/metadata-snapshot-format.md, "Record
order") make a range readable on its own:

- records come in sections: features, brokers, producer ids, topics (each TopicRecord
  followed by its PartitionRecords), configs. Brokers are found by reading only the blocks
  before the first topic, configs only from the block before the first config; both are
  located by a binary search over the first record of each index block.
- a range that starts inside a topic needs that topic's name, which only its TopicRecord
  carries: the task finds it by reading the index block(s) before its start.

A snapshot whose records are out of this order is refused with a clear error, since reading
it by ranges would silently give wrong tables.
"""
from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO

import pyarrow as pa

from metadata.log_dir import MetadataLogError
from metadata.records import MetadataRecord, type_name
from metadata.snapshot import SnapshotError, SnapshotInfo, iter_records

from . import rows as R

#: The section of each record type a snapshot holds, in the order the sections come.
SECTIONS: dict[str, int] = {"feature_level": 0, "register_broker": 1, "producer_ids": 2,
                            "topic": 3, "partition": 3, "config": 4}
_TOPICS, _CONFIGS = 3, 4


@dataclass(frozen=True, slots=True)
class Layout:
    """Where a snapshot's sections are, in records; all end-exclusive."""

    record_count: int
    brokers_end: int     # every RegisterBrokerRecord is before this record
    configs_start: int   # every ConfigRecord is at or after this record


def records(f: BinaryIO, start: int, end: int) -> Iterator[MetadataRecord]:
    """Records [start, end) of the snapshot open as ``f``, errors as MetadataLogError."""
    try:
        yield from iter_records(f, start, end)
    except SnapshotError as e:
        raise MetadataLogError(str(e)) from None


def section(record: MetadataRecord, number: int) -> int:
    which = record.WhichOneof("record")
    found = SECTIONS.get(which or "")
    if found is None:
        raise MetadataLogError(f"snapshot record {number}: a {type_name(record)} does not "
                               "belong in a metadata snapshot")
    return found


def layout(f: BinaryIO, info: SnapshotInfo) -> Layout:
    """Find the broker and config sections by binary search over the index blocks (the first
    record of each block has a non-decreasing section)."""
    n, count, blocks = info.index_interval, info.record_count, len(info.index)

    def first_section(block: int) -> int:
        return section(next(records(f, block * n, block * n + 1)), block * n)

    def first_block(at_least: int) -> int:
        lo, hi = 0, blocks
        while lo < hi:
            mid = (lo + hi) // 2
            if first_section(mid) >= at_least:
                hi = mid
            else:
                lo = mid + 1
        return lo

    topics, configs = first_block(_TOPICS), first_block(_CONFIGS)
    return Layout(count, min(topics * n, count), max(configs - 1, 0) * n if blocks else 0)


def topic_before(f: BinaryIO, info: SnapshotInfo, start: int) -> tuple[str, bytes] | None:
    """The name and raw id of the last TopicRecord before record ``start`` (which begins an
    index block), reading back one block at a time."""
    n = info.index_interval
    block = start // n
    while block > 0:
        block -= 1
        found: tuple[str, bytes] | None = None
        earlier_section = False
        for record in records(f, block * n, min((block + 1) * n, start)):
            which = record.WhichOneof("record")
            if which == "topic":
                found = (record.topic.name, record.topic.topic_id)
            elif which != "partition":
                earlier_section = True
        if found is not None:
            return found
        if earlier_section:
            return None
    return None


@dataclass(frozen=True, slots=True)
class RangeRequest:
    """What one task reads: records [start, end) of the snapshot, for one table.
    ``exclude`` holds raw ids of topics whose rows come from elsewhere (a log directory's
    replayed topics); ``racks`` the brokers' racks for the replicas table."""

    table: str
    start: int
    end: int
    offset: int
    term: int
    created_ms: int
    exclude: frozenset[bytes] = frozenset()
    racks: tuple[tuple[int, str | None], ...] = ()
    record_types: frozenset[str] | None = None


def _topic_id(raw: bytes, name: str, number: int) -> str:
    if len(raw) != 16:
        raise MetadataLogError(f"snapshot {name}: record {number}: a topic id of {len(raw)} "
                               "bytes (expected 16)")
    return str(uuid.UUID(bytes=raw))


def read_range(f: BinaryIO, info: SnapshotInfo, req: RangeRequest) -> Iterator[pa.RecordBatch]:
    """The rows of ``req.table`` in records [req.start, req.end) of the snapshot."""
    rows = R.Rows(req.table)
    table, exclude, racks = req.table, req.exclude, dict(req.racks)
    by_partition = table in ("partitions", "replicas")
    topic_name, topic_raw, topic_id = "", b"", ""
    last_section = 0
    for i, record in enumerate(records(f, req.start, req.end), req.start):
        which = record.WhichOneof("record")
        current = section(record, i)
        if current < last_section:
            raise MetadataLogError(f"snapshot {info.name}: record {i}: a {type_name(record)} "
                                   "after a later section; the records are out of order")
        last_section = current
        if which == "partition" and by_partition:
            p = record.partition
            raw = p.topic_id
            if raw in exclude:
                continue
            if raw != topic_raw:
                # Only the first topic of a range may have begun before it.
                before = topic_before(f, info, req.start) if not topic_raw else None
                if before is None or before[1] != raw:
                    raise MetadataLogError(
                        f"snapshot {info.name}: record {i}: a partition of topic "
                        f"{_topic_id(raw, info.name, i)} outside the records of that topic")
                topic_name, topic_raw, topic_id = before[0], raw, _topic_id(raw, info.name, i)
            if table == "partitions":
                R.add_partition(rows, topic_name, topic_id, p.partition_id, p.replicas[:],
                                p.isr[:], p.leader, p.leader_epoch, p.partition_epoch)
            else:
                R.add_replicas(rows, topic_name, topic_id, p.partition_id, p.replicas[:],
                               p.isr[:], p.leader, racks)
        elif which == "topic":
            t = record.topic
            topic_name, topic_raw = t.name, t.topic_id
            topic_id = _topic_id(topic_raw, info.name, i)
            if table == "topics" and topic_raw not in exclude:
                R.add_topic(rows, topic_name, topic_id)
        elif which == "register_broker" and table == "brokers":
            R.broker_from_record(rows, record.register_broker)
        elif which == "config" and table == "configs":
            R.config_from_record(rows, record.config)
        if table == "records" and (req.record_types is None
                                   or type_name(record) in req.record_types):
            R.add_record(rows, "snapshot", req.offset, req.term, req.created_ms, i, record)
        if rows.full():
            yield rows.take()
    if len(rows):
        yield rows.take()
