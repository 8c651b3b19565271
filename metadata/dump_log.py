"""``kraft dump-log``: decode metadata log segments and snapshots, like Kafka's
``kafka-dump-log.sh --cluster-metadata-decoder``.

    kraft dump-log --files DIR/wal/00000000000000000001.log,DIR/snapshots/...snap [--json]
    python -m metadata.dump_log --files ...

For a write-ahead log segment (``*.log``): every frame with its byte position and checksum
status. Raft's own frames (hard state, base marker) and entries (no-op, membership change)
are shown for what they are; an entry carrying records shows its offset, term, append time
and each record's type and fields. For a snapshot (a Raft ``*.snap`` or a plain metadata
snapshot): its header (and the Raft footer) and every record. Then a summary: records per
type, the offsets covered.

Files are opened read-only and read once, so the files of a running node can be dumped: a
frame being written at the end of the newest segment shows as a torn tail, which is reported
and is not an error. Everything else that is wrong (missing, empty, truncated or corrupted
files, records of an unknown version) is one line on stderr naming the file and the offset
or byte, and makes the exit code 1; the dump goes on wherever the framing allows.
"""
from __future__ import annotations

import json
import os
import struct
import sys
import zlib
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import BinaryIO

import click
from google.protobuf.message import DecodeError

from protos import metadata_pb2 as pb
from raft.errors import StorageError
from raft.messages import ConfChange, Entry, EntryType, Membership
from raft.storage import wal
from raft.storage.frames import FRAME
from raft.storage.snapshot_file import is_raft_snapshot, open_payload, read_meta, verify_payload

from .record_json import JsonValue, format_time, record_to_dict
from .records import MetadataRecord, RecordError, check, type_name
from .snapshot import MAGIC as SNAPSHOT_MAGIC
from .snapshot import SnapshotError, iter_records, read_info


class DumpError(Exception):
    """A file, or part of one, cannot be decoded; the message names the file and where."""


# -- what a dump is made of --------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class FileStart:
    path: str
    kind: str  # "segment", "raftSnapshot" or "metadataSnapshot"
    starting_offset: int | None = None  # a segment's first offset, from its name


@dataclass(frozen=True, slots=True)
class HardStateFrame:
    path: str
    position: int
    size: int
    term: int
    vote: int
    commit: int


@dataclass(frozen=True, slots=True)
class BaseFrame:
    """The log restarts after (offset, term): a snapshot from the leader replaced it."""

    path: str
    position: int
    size: int
    offset: int
    term: int


@dataclass(frozen=True, slots=True)
class RecordLine:
    """One record of an entry; ``record`` is None when it cannot be read (``problem``)."""

    index: int
    size: int
    record: MetadataRecord | None
    problem: str | None = None


@dataclass(frozen=True, slots=True)
class EntryFrame:
    """One Raft entry: a batch of records, a no-op or a membership change."""

    path: str
    position: int
    size: int
    offset: int
    term: int
    kind: str  # "records", "noop" or "membership"
    append_time_ms: int = 0
    records: tuple[RecordLine, ...] = ()
    membership: ConfChange | None = None
    problem: str | None = None  # the entry's data cannot be decoded


@dataclass(frozen=True, slots=True)
class BadFrame:
    """A frame whose checksum fails, in the middle of a segment: skipped, not decoded."""

    path: str
    position: int
    size: int
    stored_crc: int
    computed_crc: int


@dataclass(frozen=True, slots=True)
class TornTail:
    path: str
    position: int
    reason: str


@dataclass(frozen=True, slots=True)
class RaftSnapshotFooter:
    path: str
    offset: int
    term: int
    voters: tuple[int, ...]
    learners: tuple[int, ...]
    payload_size: int
    crc_valid: bool
    context: bytes


@dataclass(frozen=True, slots=True)
class MetadataSnapshotHeader:
    path: str
    cluster_id: str
    last_offset: int
    last_epoch: int
    created_ms: int
    record_count: int


@dataclass(frozen=True, slots=True)
class SnapshotRecord:
    path: str
    index: int
    record: MetadataRecord


Item = (FileStart | HardStateFrame | BaseFrame | EntryFrame | BadFrame | TornTail
        | RaftSnapshotFooter | MetadataSnapshotHeader | SnapshotRecord)


@dataclass
class Summary:
    """Totals over every file dumped."""

    files: int = 0
    entries: Counter[str] = field(default_factory=Counter)  # by kind
    first_offset: int | None = None
    last_offset: int | None = None
    snapshots: list[tuple[str, int]] = field(default_factory=list)
    hard_states: int = 0
    base_markers: int = 0
    log_records: Counter[str] = field(default_factory=Counter)  # by type
    snapshot_records: Counter[str] = field(default_factory=Counter)  # by type
    torn_tails: list[str] = field(default_factory=list)
    errors: int = 0

    def add(self, item: Item) -> None:
        if isinstance(item, FileStart):
            self.files += 1
        elif isinstance(item, EntryFrame):
            self.entries[item.kind] += 1
            if self.first_offset is None or item.offset < self.first_offset:
                self.first_offset = item.offset
            if self.last_offset is None or item.offset > self.last_offset:
                self.last_offset = item.offset
            self.log_records.update(type_of(r) for r in item.records)
        elif isinstance(item, HardStateFrame):
            self.hard_states += 1
        elif isinstance(item, BaseFrame):
            self.base_markers += 1
        elif isinstance(item, MetadataSnapshotHeader):
            self.snapshots.append((item.path, item.last_offset))
        elif isinstance(item, SnapshotRecord):
            self.snapshot_records[type_name(item.record)] += 1
        elif isinstance(item, TornTail):
            self.torn_tails.append(f"{item.path} at byte {item.position}")


def type_of(line: RecordLine) -> str:
    return type_name(line.record) if line.record is not None else "(unreadable)"


# -- reading -----------------------------------------------------------------------------------

def dump_file(path: str) -> Iterator[Item]:
    """The items of one file, in order. DumpError ends the file; problems within an entry
    (an unknown record version) are carried on the item and the dump goes on."""
    if not os.path.exists(path):
        raise DumpError(f"{path}: no such file")
    if os.path.isdir(path):
        raise DumpError(f"{path}: is a directory; give its files (wal/*.log, snapshots/*.snap)")
    try:
        size = os.path.getsize(path)
        if size == 0:
            raise DumpError(f"{path}: byte 0: empty file")
        with open(path, "rb") as f:
            head = f.read(len(SNAPSHOT_MAGIC))
            f.seek(max(0, size - len(SNAPSHOT_MAGIC)))
            tail = f.read()
        # By content, not by name: a broker keeps plain metadata snapshots named *.snap too. A
        # plain one starts and ends with its magic; a Raft one starts with its payload (a plain
        # one) and ends with its own trailer, which a *.snap file cut short has lost.
        if is_raft_snapshot(path):
            yield from _raft_snapshot(path)
        elif head == SNAPSHOT_MAGIC and (tail == SNAPSHOT_MAGIC or not path.endswith(".snap")):
            yield FileStart(path, "metadataSnapshot")
            yield from _metadata_snapshot(path, path)
        elif path.endswith(".snap"):  # named as one, but its Raft trailer is gone
            raise DumpError(f"{path}: byte {size}: no Raft snapshot trailer: the file is "
                            f"truncated or not a snapshot")
        else:
            with open(path, "rb") as f:
                data = f.read()  # one read: a running node may append meanwhile
            yield from _segment(path, data, _is_newest_segment(path))
    except OSError as e:
        raise DumpError(f"{path}: {e.strerror}") from None


def _is_newest_segment(path: str) -> bool:
    """A torn tail is only expected where the node writes: its newest segment."""
    name = os.path.basename(path)
    later = [p for p in wal.list_segments(os.path.dirname(path) or ".")
             if os.path.basename(p) > name]
    return not later


def _segment(path: str, data: bytes, newest: bool) -> Iterator[Item]:
    stem = os.path.basename(path)[:-4] if path.endswith(".log") else ""
    yield FileStart(path, "segment", int(stem) if stem.isdigit() else None)
    start, seen = 0, 0
    while start < len(data):
        try:
            for rec in wal.decode_frames(data[start:]):
                seen += 1
                yield _frame(path, rec, start)
            return
        except wal.Torn as t:
            at = start + t.offset
            if t.at_tail and newest and seen:
                yield TornTail(path, at, t.reason)
                return
            if t.reason == "checksum mismatch" and not t.at_tail:
                length, stored = FRAME.unpack_from(data, at)
                body = data[at + FRAME.size:at + FRAME.size + length]
                seen += 1
                yield BadFrame(path, at, FRAME.size + length, stored, zlib.crc32(body))
                start = at + FRAME.size + length
                continue
            if not seen:
                raise DumpError(f"{path}: byte {at}: not a write-ahead log segment or a snapshot "
                                f"({t.reason})") from None
            where = "" if not t.at_tail else " (a torn tail, but not in the newest segment)"
            raise DumpError(f"{path}: byte {at}: corrupted frame: {t.reason}{where}") from None


def _frame(path: str, rec: wal.WalRecord, start: int) -> Item:
    position = start + rec.offset
    if rec.hard_state is not None:
        hs = rec.hard_state
        return HardStateFrame(path, position, rec.size, hs.term, hs.vote, hs.commit)
    if rec.base is not None:
        return BaseFrame(path, position, rec.size, rec.base[0], rec.base[1])
    assert rec.entry is not None
    return _entry(path, position, rec.size, rec.entry)


def _entry(path: str, position: int, size: int, e: Entry) -> EntryFrame:
    if e.type == EntryType.NOOP:
        return EntryFrame(path, position, size, e.index, e.term, "noop")
    if e.type == EntryType.CONF_CHANGE:
        try:
            change = ConfChange.decode(e.data)
        except (struct.error, ValueError) as err:
            return EntryFrame(path, position, size, e.index, e.term, "membership",
                              problem=f"membership change cannot be decoded: {err}")
        return EntryFrame(path, position, size, e.index, e.term, "membership", membership=change)
    try:
        batch = pb.RecordBatch.FromString(e.data)
    except DecodeError as err:
        return EntryFrame(path, position, size, e.index, e.term, "records",
                          problem=f"malformed record batch ({len(e.data)} bytes): {err}")
    lines = []
    for i, record in enumerate(batch.records):
        try:
            check(record)
            lines.append(RecordLine(i, record.ByteSize(), record))
        except RecordError as err:
            lines.append(RecordLine(i, record.ByteSize(), None, f"record {i}: {err}"))
    return EntryFrame(path, position, size, e.index, e.term, "records", batch.append_time_ms,
                      tuple(lines))


def _raft_snapshot(path: str) -> Iterator[Item]:
    yield FileStart(path, "raftSnapshot")
    try:
        meta = read_meta(path)
    except StorageError as e:
        raise DumpError(str(e)) from None
    try:
        verify_payload(path, meta)
        crc_valid = True
    except StorageError:
        crc_valid = False
    m = meta.membership
    yield RaftSnapshotFooter(path, meta.index, meta.term, tuple(sorted(m.voters)),
                             tuple(sorted(m.learners)), meta.size, crc_valid, meta.context)
    with open_payload(path) as payload:
        yield from _metadata_snapshot(payload, path)  # type: ignore[arg-type]


def _metadata_snapshot(source: str | BinaryIO, path: str) -> Iterator[Item]:
    try:
        info = read_info(source)
        yield MetadataSnapshotHeader(path, info.cluster_id, info.last_offset, info.last_epoch,
                                     info.created_ms, info.record_count)
        for i, record in enumerate(iter_records(source)):
            yield SnapshotRecord(path, i, record)
    except SnapshotError as e:
        raise DumpError(str(e)) from None


def problems(item: Item) -> Iterator[str]:
    """The error lines an item carries (a decodable frame with undecodable content)."""
    if isinstance(item, RaftSnapshotFooter) and not item.crc_valid:
        yield (f"{item.path}: bytes 0-{item.payload_size}: the snapshot payload fails its "
               f"checksum")
    elif isinstance(item, BadFrame):
        yield (f"{item.path}: byte {item.position}: checksum mismatch (stored "
               f"{item.stored_crc:#010x}, computed {item.computed_crc:#010x}); frame skipped")
    elif isinstance(item, EntryFrame):
        where = f"{item.path}: offset {item.offset} (byte {item.position})"
        if item.problem:
            yield f"{where}: {item.problem}"
        for line in item.records:
            if line.problem:
                yield f"{where}: {line.problem}"


# -- rendering ---------------------------------------------------------------------------------

def text_lines(item: Item, skip_record_metadata: bool) -> Iterator[str]:
    if isinstance(item, FileStart):
        kind = {"segment": "write-ahead log segment", "raftSnapshot": "Raft snapshot",
                "metadataSnapshot": "metadata snapshot"}[item.kind]
        yield f"Dumping {item.path} ({kind})"
        if item.starting_offset is not None:
            yield f"Starting offset: {item.starting_offset}"
    elif isinstance(item, HardStateFrame):
        yield (f"position: {item.position} size: {item.size} hardState: term: {item.term} "
               f"vote: {item.vote} commit: {item.commit} crc: valid")
    elif isinstance(item, BaseFrame):
        yield (f"position: {item.position} size: {item.size} base: offset: {item.offset} "
               f"term: {item.term} crc: valid (the log restarts after a snapshot from the leader)")
    elif isinstance(item, EntryFrame):
        head = (f"offset: {item.offset} term: {item.term} position: {item.position} "
                f"size: {item.size} kind: {item.kind}")
        if item.kind == "records":
            head += (f" count: {len(item.records)} appendTime: "
                     f"{format_time(item.append_time_ms)} ({item.append_time_ms})")
        yield head + " crc: valid"
        yield from _entry_body(item, skip_record_metadata)
    elif isinstance(item, BadFrame):
        yield (f"position: {item.position} size: {item.size} crc: INVALID (stored "
               f"{item.stored_crc:#010x}, computed {item.computed_crc:#010x})")
    elif isinstance(item, TornTail):
        yield (f"position: {item.position} torn tail: {item.reason} (a write in progress, or "
               f"one cut short by a crash; a restarting node truncates it)")
    elif isinstance(item, RaftSnapshotFooter):
        yield (f"Raft snapshot: offset: {item.offset} term: {item.term} voters: "
               f"{list(item.voters)} learners: {list(item.learners)} payload: "
               f"{item.payload_size} bytes crc: {'valid' if item.crc_valid else 'INVALID'} "
               f"context: {item.context.decode('utf-8', 'replace')}")
    elif isinstance(item, MetadataSnapshotHeader):
        yield (f"Metadata snapshot: clusterId: {item.cluster_id} lastOffset: {item.last_offset} "
               f"lastEpoch: {item.last_epoch} created: {format_time(item.created_ms)} "
               f"({item.created_ms}) records: {item.record_count}")
    elif isinstance(item, SnapshotRecord):
        meta = "" if skip_record_metadata else f" record: {item.index}"
        yield f"|{meta} payload: {json.dumps(record_to_dict(item.record))}"


def _entry_body(item: EntryFrame, skip_record_metadata: bool) -> Iterator[str]:
    if item.problem:
        yield f"| unreadable: {item.problem}"
    elif item.kind == "noop":
        yield "| no-op (a new leader's first entry)"
    elif item.membership is not None:
        m = item.membership
        directories = f"directories: {json.dumps(_directories(m.result))} " if m.result.directories else ""
        yield (f"| membership: {m.type.name} node: {m.node_id} voters: "
               f"{sorted(m.result.voters)} learners: {sorted(m.result.learners)} {directories}"
               f"context: {m.context.decode('utf-8', 'replace')}")
    for line in item.records:
        meta = "" if skip_record_metadata else (f" offset: {item.offset} record: {line.index} "
                                                f"size: {line.size}")
        if line.record is None:
            yield f"|{meta} unreadable: {line.problem}"
        else:
            yield f"|{meta} payload: {json.dumps(record_to_dict(line.record))}"


def _directories(membership: Membership) -> dict[str, JsonValue]:
    """The members' data directory ids (KIP-853), where the membership records them."""
    return {str(n): d for n, d in membership.directories}


def json_object(item: Item, skip_record_metadata: bool) -> dict[str, JsonValue]:
    base: dict[str, JsonValue] = {"file": item.path}
    if isinstance(item, FileStart):
        return {"item": "file", **base, "kind": item.kind, "startingOffset": item.starting_offset}
    if isinstance(item, HardStateFrame):
        return {"item": "hardState", **base, "position": item.position, "size": item.size,
                "term": item.term, "vote": item.vote, "commit": item.commit, "crcValid": True}
    if isinstance(item, BaseFrame):
        return {"item": "base", **base, "position": item.position, "size": item.size,
                "offset": item.offset, "term": item.term, "crcValid": True}
    if isinstance(item, EntryFrame):
        out: dict[str, JsonValue] = {
            "item": "entry", **base, "offset": item.offset, "term": item.term,
            "position": item.position, "size": item.size, "kind": item.kind, "crcValid": True}
        if item.kind == "records":
            out["appendTimeMs"] = item.append_time_ms
            out["records"] = [_record_json(item, line, skip_record_metadata)
                              for line in item.records]
        if item.membership is not None:
            m = item.membership
            out["membership"] = {"change": m.type.name, "node": m.node_id,
                                 "voters": sorted(m.result.voters),
                                 "learners": sorted(m.result.learners),
                                 "directories": _directories(m.result),
                                 "context": m.context.decode("utf-8", "replace")}
        if item.problem:
            out["problem"] = item.problem
        return out
    if isinstance(item, BadFrame):
        return {"item": "badFrame", **base, "position": item.position, "size": item.size,
                "crcValid": False, "storedCrc": item.stored_crc, "computedCrc": item.computed_crc}
    if isinstance(item, TornTail):
        return {"item": "tornTail", **base, "position": item.position, "reason": item.reason}
    if isinstance(item, RaftSnapshotFooter):
        return {"item": "raftSnapshot", **base, "offset": item.offset, "term": item.term,
                "voters": list(item.voters), "learners": list(item.learners),
                "payloadSize": item.payload_size, "crcValid": item.crc_valid,
                "context": item.context.decode("utf-8", "replace")}
    if isinstance(item, MetadataSnapshotHeader):
        return {"item": "metadataSnapshot", **base, "clusterId": item.cluster_id,
                "lastOffset": item.last_offset, "lastEpoch": item.last_epoch,
                "createdMs": item.created_ms, "recordCount": item.record_count}
    assert isinstance(item, SnapshotRecord)
    out = {"item": "snapshotRecord", **base}
    if not skip_record_metadata:
        out["record"] = item.index
    out["payload"] = record_to_dict(item.record)
    return out


def _record_json(entry: EntryFrame, line: RecordLine, skip: bool) -> dict[str, JsonValue]:
    out: dict[str, JsonValue] = {} if skip else {"offset": entry.offset, "record": line.index,
                                                 "size": line.size}
    if line.record is None:
        out["problem"] = line.problem
    else:
        out["payload"] = record_to_dict(line.record)
    return out


def summary_lines(s: Summary) -> Iterator[str]:
    total = sum(s.entries.values())
    kinds = ", ".join(f"{n} {kind}" for kind, n in sorted(s.entries.items()))
    span = f" at offsets {s.first_offset}-{s.last_offset} ({kinds})" if total else ""
    yield f"Summary: {s.files} file(s); {total} log entries{span}"
    for path, offset in s.snapshots:
        yield f"  snapshot {path}: the image at offset {offset}"
    yield f"  hard states: {s.hard_states}; base markers: {s.base_markers}"
    for torn in s.torn_tails:
        yield f"  torn tail: {torn}"
    for what, counts in (("log", s.log_records), ("snapshot", s.snapshot_records)):
        if not counts:
            continue
        yield f"  {what} records by type ({sum(counts.values())}):"
        width = max(len(t) for t in counts)
        for name, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
            yield f"    {name:<{width}}  {n}"
    if s.errors:
        yield f"  errors: {s.errors} (see stderr)"


def summary_json(s: Summary) -> dict[str, JsonValue]:
    return {"item": "summary", "files": s.files, "entries": sum(s.entries.values()),
            "entriesByKind": dict(sorted(s.entries.items())),
            "firstOffset": s.first_offset, "lastOffset": s.last_offset,
            "snapshots": [{"file": p, "offset": o} for p, o in s.snapshots],
            "hardStates": s.hard_states, "baseMarkers": s.base_markers,
            "logRecordsByType": dict(sorted(s.log_records.items())),
            "snapshotRecordsByType": dict(sorted(s.snapshot_records.items())),
            "tornTails": s.torn_tails,
            "errors": s.errors}


# -- the command -------------------------------------------------------------------------------

@click.command("dump-log", context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--files", required=True, metavar="F[,F...]",
              help="Comma-separated write-ahead log segments (wal/*.log) and snapshots "
                   "(snapshots/*.snap, or plain metadata snapshot files).")
@click.option("--skip-record-metadata", is_flag=True,
              help="Print only each record's payload, not its offset, index and size.")
@click.option("--json", "as_json", is_flag=True,
              help="One JSON object per line (JSON Lines); the last one is the summary.")
@click.option("--cluster-metadata-decoder", is_flag=True, hidden=True,
              help="Accepted for kafka-dump-log.sh habits; always on.")
@click.pass_context
def dump_log(ctx: click.Context, files: str, skip_record_metadata: bool, as_json: bool,
             cluster_metadata_decoder: bool) -> None:
    """Decode metadata log segments and snapshots (like kafka-dump-log.sh
    --cluster-metadata-decoder). Exit code 1 if anything could not be decoded."""
    paths = [p.strip() for p in files.split(",") if p.strip()]
    if not paths:
        raise click.UsageError("--files names no file")
    summary = Summary()

    def error(message: str) -> None:
        summary.errors += 1
        click.echo(f"dump-log: {message}", err=True)

    try:
        _dump(paths, summary, error, skip_record_metadata, as_json)
    except BrokenPipeError:  # `kraft dump-log ... | head`: the reader has gone
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        ctx.exit(1)
    ctx.exit(1 if summary.errors else 0)


def _dump(paths: list[str], summary: Summary, error: Callable[[str], None],
          skip_record_metadata: bool, as_json: bool) -> None:
    for path in paths:
        try:
            for item in dump_file(path):
                summary.add(item)
                if as_json:
                    click.echo(json.dumps(json_object(item, skip_record_metadata)))
                else:
                    for line in text_lines(item, skip_record_metadata):
                        click.echo(line)
                for problem in problems(item):
                    error(problem)
        except DumpError as e:
            error(str(e))
    if as_json:
        click.echo(json.dumps(summary_json(summary)))
    else:
        for line in summary_lines(summary):
            click.echo(line)
    sys.stdout.flush()


if __name__ == "__main__":
    dump_log()
