"""Reading a metadata snapshot in independent record ranges, one per Spark task.

A range starts on an entry of the snapshot's sparse index (``record_ranges``), so a task
seeks straight to it. Two facts of the format (docs/metadata-snapshot-format.md, "Record
order") make a range readable on its own:

- records come in sections: features, brokers, producer ids, topics (each TopicRecord
  followed by its PartitionRecords), configs, ACLs. Brokers are found by reading only the
  blocks before the first topic, configs and ACLs only from the block before the first
  config (or ACL); both are located by a binary search over the first record of each index
  block.
- a range that starts inside a topic needs that topic's name, which only its TopicRecord
  carries: the task finds it by reading the index block(s) before its start.

A snapshot whose records are out of this order is refused with a clear error, since reading
it by ranges would silently give wrong tables.
"""
from __future__ import annotations

import uuid
from collections.abc import Hashable, Iterator
from dataclasses import dataclass
from typing import BinaryIO

import pyarrow as pa

from metadata.log_dir import MetadataLogError
from metadata.records import MetadataRecord, type_name
from metadata.snapshot import SnapshotError, SnapshotInfo, iter_records

from . import rows as R
from .frames import PartitionDecoder, frames, is_partition, parse

#: The section of each record type a snapshot holds, in the order the sections come.
SECTIONS: dict[str, int] = {"feature_level": 0, "register_broker": 1, "producer_ids": 2,
                            "topic": 3, "partition": 3, "config": 4, "access_control_entry": 5,
                            "user_scram_credential": 6, "client_quota": 7}
_TOPICS, _CONFIGS = 3, 4


@dataclass(frozen=True, slots=True)
class Layout:
    """Where a snapshot's sections are, in records; all end-exclusive."""

    record_count: int
    brokers_end: int     # every RegisterBrokerRecord is before this record
    configs_start: int   # every ConfigRecord (and AccessControlEntryRecord) is at or after this record


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
    index block), reading back one block at a time. Moves ``f``'s position."""
    n = info.index_interval
    block = start // n
    while block > 0:
        block -= 1
        found: tuple[str, bytes] | None = None
        earlier_section = False
        for i, pos, data in frames(f, info, block * n, min((block + 1) * n, start)):
            if is_partition(data):
                continue
            record = parse(info, i, pos, data)
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
    if req.table in ("partitions", "replicas"):
        return _partition_rows(f, info, req)
    return _other_rows(f, info, req)


class _Order:
    """Checks that records come in the snapshot's sections, in order."""

    def __init__(self, name: str) -> None:
        self.name, self.last = name, 0

    def check(self, i: int, current: int, record_type: str) -> None:
        if current < self.last:
            raise MetadataLogError(f"snapshot {self.name}: record {i}: a {record_type} after "
                                   "a later section; the records are out of order")
        self.last = current


def _partition_rows(f: BinaryIO, info: SnapshotInfo, req: RangeRequest
                    ) -> Iterator[pa.RecordBatch]:
    """The partitions (or replicas) table: PartitionRecords decoded by their tails."""
    rows = R.PartitionRows(req.table, dict(req.racks))
    exclude = req.exclude
    # Looked up before the range is read: both readers would share the file's position.
    leading = topic_before(f, info, req.start) if req.start else None
    current = b""  # the raw id of the topic whose partitions come now
    order = _Order(info.name)
    decoder = PartitionDecoder()
    check = order.check
    key: Hashable  # a partition's record bytes, or its shape (rows.PartitionRows.add)
    for i, pos, data in frames(f, info, req.start, req.end):
        fast = decoder.decode(data)
        if fast is not None:
            raw, partition, key, shape = fast
        else:
            record = parse(info, i, pos, data)
            which = record.WhichOneof("record")
            check(i, section(record, i), type_name(record))
            if which == "topic":
                current = record.topic.topic_id
                rows.topic(record.topic.name, _topic_id(current, info.name, i))
                continue
            if which != "partition":
                continue
            p = record.partition
            raw, partition = p.topic_id, p.partition_id
            key = shape = (tuple(p.replicas), tuple(p.isr), p.leader, p.leader_epoch,
                           p.partition_epoch)
        if order.last != _TOPICS:
            check(i, _TOPICS, "PartitionRecord")
        if raw != current:
            # Only the first topic of a range may have begun before it.
            if current or leading is None or leading[1] != raw:
                raise MetadataLogError(
                    f"snapshot {info.name}: record {i}: a partition of topic "
                    f"{_topic_id(raw, info.name, i)} outside the records of that topic")
            current = raw
            rows.topic(leading[0], _topic_id(raw, info.name, i))
        if raw in exclude:
            continue
        rows.add(partition, key, shape)
        if rows.full():
            yield rows.take()
    if len(rows):
        yield rows.take()


def _other_rows(f: BinaryIO, info: SnapshotInfo, req: RangeRequest) -> Iterator[pa.RecordBatch]:
    """The other tables: every record parsed, but PartitionRecords, only checked for order
    (and for the records table, rows of their own)."""
    table, exclude = req.table, req.exclude
    rows = R.Rows(table)
    order = _Order(info.name)
    skip_partitions = table != "records"
    for i, pos, data in frames(f, info, req.start, req.end):
        if skip_partitions and is_partition(data):
            order.check(i, _TOPICS, "PartitionRecord")
            continue
        record = parse(info, i, pos, data)
        which = record.WhichOneof("record")
        order.check(i, section(record, i), type_name(record))
        if table == "topics" and which == "topic":
            t = record.topic
            if t.topic_id not in exclude:
                R.add_topic(rows, t.name, _topic_id(t.topic_id, info.name, i))
        elif table == "brokers" and which == "register_broker":
            R.broker_from_record(rows, record.register_broker)
        elif table == "configs" and which == "config":
            R.config_from_record(rows, record.config)
        elif table == "acls" and which == "access_control_entry":
            R.acl_from_record(rows, record.access_control_entry)
        elif table == "records" and (req.record_types is None
                                     or type_name(record) in req.record_types):
            R.add_record(rows, "snapshot", req.offset, req.term, req.created_ms, i, record)
        if rows.full():
            yield rows.take()
    if len(rows):
        yield rows.take()
