"""Planning a read of the ``kraft`` data source: its options, and the input partitions (one
Spark task each) that together give the table.

A snapshot file is cut into record ranges on its sparse index (``record_ranges``), so the
tasks read it in parallel, each seeking straight to its range. A log directory adds what its
log changed after the snapshot: the planner replays it (``log_view``) and ships the changed
rows with the tasks, while the range tasks skip the topics the log touched.

Planning runs in a Python worker that Spark starts; whatever it computes reaches the tasks
only through the pickled input partitions.
"""
from __future__ import annotations

import math
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.datasource import InputPartition

from metadata.log_dir import LogBatch, MetadataLogError, open_snapshot
from metadata.records import decode_record, type_name
from metadata.snapshot import SnapshotError, SnapshotInfo, read_info, record_ranges
from common.config_def import bounded_int

from . import rows as R
from .errors import AnalyticsError
from .log_view import DirectoryState, directory_state
from .schemas import TABLES
from .snapshot_ranges import RangeRequest, layout, read_range, records

#: Default records per input partition: large enough that a task's fixed cost is small
#: against its reading, small enough to keep every core busy on a big snapshot.
RECORDS_PER_PARTITION = 100_000
SOURCES = ("all", "snapshot", "log")


@dataclass(frozen=True, slots=True)
class ReadOptions:
    """The data source's options (docs/analytics.md), checked."""

    path: str
    table: str
    offset: int | None = None
    num_partitions: int | None = None
    records_per_partition: int = RECORDS_PER_PARTITION
    source: str = "all"
    record_types: frozenset[str] | None = None

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> ReadOptions:
        path = options.get("path")
        if not path:
            raise AnalyticsError("option 'path' is required: a metadata snapshot file or a "
                                 "metadata log directory")
        table = (options.get("table") or "").lower()
        if table not in TABLES:
            raise AnalyticsError(f"option 'table' must be one of {', '.join(TABLES)}; "
                                 f"got {options.get('table')!r}")
        source = (options.get("source") or "all").lower()
        if source not in SOURCES:
            raise AnalyticsError(f"option 'source' must be one of {', '.join(SOURCES)}; "
                                 f"got {source!r}")
        types = options.get("recordTypes")
        return cls(path, table, _int(options, "offset", 0), _int(options, "numPartitions", 1),
                   _int(options, "recordsPerPartition", 1) or RECORDS_PER_PARTITION, source,
                   frozenset(t.strip() for t in types.split(",") if t.strip()) if types else None)


def _int(options: Mapping[str, str], name: str, least: int) -> int | None:
    value = options.get(name)
    if value is None or value == "":
        return None
    try:
        return bounded_int(value, least)
    except ValueError as e:
        raise AnalyticsError(f"option {name!r}: {e}") from None


# -- input partitions ------------------------------------------------------------------------

class SnapshotRange(InputPartition):
    """Records [start, end) of the snapshot at ``path``."""

    def __init__(self, path: str, request: RangeRequest) -> None:
        super().__init__((path, request.start, request.end))
        self.path = path
        self.request = request


class PlannedRows(InputPartition):
    """Rows the planner computed (a log directory's replayed state), shipped as they are."""

    def __init__(self, batches: list[pa.RecordBatch]) -> None:
        super().__init__(sum(b.num_rows for b in batches))
        self.batches = batches


class LogRecords(InputPartition):
    """Log entries of a directory, for the records table: (offset, term, append time,
    encoded records) each."""

    def __init__(self, entries: list[tuple[int, int, int, list[bytes]]],
                 record_types: frozenset[str] | None) -> None:
        super().__init__((entries[0][0], entries[-1][0]) if entries else None)
        self.entries = entries
        self.record_types = record_types


def read(partition: InputPartition) -> Iterator[pa.RecordBatch]:
    """The rows of one input partition (runs in a Spark task)."""
    if isinstance(partition, SnapshotRange):
        with open_snapshot(partition.path) as f:
            try:
                info = read_info(f)
            except SnapshotError as e:
                raise MetadataLogError(str(e)) from None
            yield from read_range(f, info, partition.request)
    elif isinstance(partition, PlannedRows):
        yield from partition.batches
    elif isinstance(partition, LogRecords):
        yield from _log_record_rows(partition)
    # else: Spark's placeholder for a plan without partitions; no rows


def _log_record_rows(part: LogRecords) -> Iterator[pa.RecordBatch]:
    rows = R.Rows("records")
    for offset, term, time_ms, encoded in part.entries:
        for index, data in enumerate(encoded):
            record = decode_record(data)
            if part.record_types is None or type_name(record) in part.record_types:
                R.add_record(rows, "log", offset, term, time_ms, index, record)
        if rows.full():
            yield rows.take()
    if len(rows):
        yield rows.take()


# -- planning ----------------------------------------------------------------------------------

def plan(opts: ReadOptions) -> list[InputPartition]:
    if not os.path.exists(opts.path):
        raise MetadataLogError(f"{opts.path}: no such file or directory")
    if os.path.isdir(opts.path):
        return _plan_directory(opts)
    return _plan_snapshot(opts)


def _range_count(opts: ReadOptions, info: SnapshotInfo) -> int:
    if opts.num_partitions is not None:
        return opts.num_partitions
    return max(1, math.ceil(info.record_count / opts.records_per_partition))


def _snapshot_info(f, path: str) -> SnapshotInfo:
    try:
        return read_info(f)
    except SnapshotError as e:
        raise MetadataLogError(str(e)) from None


def _plan_snapshot(opts: ReadOptions) -> list[InputPartition]:
    with open_snapshot(opts.path) as f:
        info = _snapshot_info(f, opts.path)
        if opts.offset is not None and opts.offset != info.last_offset:
            raise MetadataLogError(
                f"{opts.path} is a snapshot at offset {info.last_offset}; it holds no other "
                f"offset (asked for {opts.offset}); give a metadata log directory for history")
        table = opts.table
        racks: tuple[tuple[int, str | None], ...] = ()
        if table in ("brokers", "configs", "acls", "replicas"):
            where = layout(f, info)
            if table == "brokers":
                ranges = [(0, where.brokers_end)] if where.brokers_end else []
            elif table in ("configs", "acls"):
                ranges = ([(where.configs_start, info.record_count)]
                          if info.record_count > where.configs_start else [])
            else:
                racks = tuple(sorted(R.racks_of_records(
                    records(f, 0, where.brokers_end)).items()))
        if table not in ("brokers", "configs", "acls"):
            ranges = record_ranges(info, _range_count(opts, info))
        if table == "records" and opts.source == "log":
            ranges = []
    return [SnapshotRange(opts.path, RangeRequest(
        table, start, end, info.last_offset, info.last_epoch, info.created_ms, racks=racks,
        record_types=opts.record_types)) for start, end in ranges]


def _plan_directory(opts: ReadOptions) -> list[InputPartition]:
    state = directory_state(opts.path, opts.offset)
    table = opts.table
    out: list[InputPartition] = []
    if state.snapshot_path is not None and table in ("topics", "partitions", "replicas",
                                                     "records"):
        if table != "records" or opts.source in ("all", "snapshot"):
            out.extend(_directory_snapshot_ranges(opts, state))
    if table in ("brokers", "configs", "acls"):
        out.append(PlannedRows(list(R.image_rows(table, state.image))))
    elif table in ("topics", "partitions", "replicas"):
        batches = list(R.image_rows(table, state.image, state.touched_ids()))
        out.extend(PlannedRows(batches[i:i + 4]) for i in range(0, len(batches), 4))
    elif opts.source in ("all", "log"):
        out.extend(_log_partitions(state.batches, opts))
    return out


def _directory_snapshot_ranges(opts: ReadOptions, state: DirectoryState) -> list[InputPartition]:
    assert state.snapshot_path is not None
    with open_snapshot(state.snapshot_path) as f:
        info = _snapshot_info(f, state.snapshot_path)
    racks = tuple(sorted((b.id, b.rack) for b in state.image.brokers.values()))
    exclude = state.touched if opts.table != "records" else frozenset()
    return [SnapshotRange(state.snapshot_path, RangeRequest(
        opts.table, start, end, info.last_offset, info.last_epoch, info.created_ms,
        exclude=exclude, racks=racks, record_types=opts.record_types))
        for start, end in record_ranges(info, _range_count(opts, info))]


def _log_partitions(batches: tuple[LogBatch, ...], opts: ReadOptions) -> list[InputPartition]:
    chunks: list[InputPartition] = []
    entries: list[tuple[int, int, int, list[bytes]]] = []
    size = 0
    for b in batches:
        if not b.records:
            continue
        entries.append((b.offset, b.term, b.append_time_ms,
                        [r.SerializeToString(deterministic=True) for r in b.records]))
        size += len(b.records)
        if size >= opts.records_per_partition:
            chunks.append(LogRecords(entries, opts.record_types))
            entries, size = [], 0
    if entries:
        chunks.append(LogRecords(entries, opts.record_types))
    return chunks
