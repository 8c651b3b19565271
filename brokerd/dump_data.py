"""``kraft dump-data``: print a partition's record batches and records from a broker's log
directory, like Kafka's ``kafka-dump-log.sh --files SEGMENT [--deep-iteration]
[--print-data-log]`` (``kraft dump-log`` is the metadata log's side).

    kraft dump-data --log-dir DIR --topic T --partition P [--offset N] [--max-records M]
                    [--deep-iteration | --print-data-log] [--json]

A broker keeps every partition of a log directory in one RocksDB (brokerd/log_store.py). It
is read here through a read-only RocksDB instance opened on a scratch directory of symbolic
links to the store's files: RocksDB's read-only mode takes no lock and writes nothing, and the
links keep rocksdict from rewriting its ``rocksdict-config.json`` in the broker's directory
(it does on every open, read-only or not). So a running broker is dumped as it was when the
dump opened the store, and it keeps writing meanwhile; a stopped one is left byte for byte.

Each batch shows Kafka's batch header fields, whether its CRC (CRC-32C, clients/records.py)
holds, its codec and its size on the wire; ``--deep-iteration`` adds a line per record, and
``--print-data-log`` its key, value and headers. Bytes are shown as text when they are
printable UTF-8 and as base64 otherwise, and each says which (``key:``/``key(base64):``;
``"keyEncoding"`` in JSON).

Every problem is one line on stderr (``dump-data: ...``) and makes the exit code 1: a
directory that is not a broker's log directory, a topic or partition it holds no log of, stop
the dump at once; a corrupted batch (its CRC fails, its frame or its records cannot be
decoded) is reported with its offset and the dump goes on with the next batch.
"""
from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import sys
import tempfile
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import click
from google.protobuf.message import DecodeError

from clients.compression import Codec
from clients.records import Record, batch_crc, codec_of, decode_records, records_bytes
from common.errors import KafkaError
from metadata.ids import format_uuid, parse_uuid
from metadata.record_json import JsonValue, format_time
from protos import broker_pb2 as pb
from raft.errors import StorageError
from raft.storage.disk import META_FILE, read_properties

from .kafka.batches import HEADER_BYTES
from .log_store import PARTITIONS_DIR
from .metadata_checkpoint import DIR_NAME as METADATA_DIR
from .metadata_checkpoint import MetadataCheckpoint
from .partition_log import StoredBatch, stored_frames, stored_partitions, stored_state

# Kafka's RecordBatch attribute bits beside the codec (DefaultRecordBatch).
TIMESTAMP_TYPE_BIT = 0x08  # LogAppendTime
TRANSACTIONAL_BIT = 0x10
CONTROL_BIT = 0x20

#: Files of the store that a reader must not share: RocksDB's lock and info log, rocksdict's config.
_NOT_LINKED = ("LOCK", "LOG", "rocksdict-config.json")


class DumpError(Exception):
    """The dump cannot start or go on; the message is the one line the user sees."""


# -- opening the store ---------------------------------------------------------------------------

@contextlib.contextmanager
def open_store(log_dir: str) -> Iterator[object]:
    """A read-only instance of ``log_dir``'s partition store (see the module's docstring)."""
    from rocksdict import AccessType, Options, Rdict

    if not os.path.isdir(log_dir):
        raise DumpError(f"{log_dir}: no such directory")
    path = os.path.join(log_dir, PARTITIONS_DIR)
    if not os.path.isfile(os.path.join(path, "CURRENT")):
        raise DumpError(f"{log_dir}: not a broker's log directory (it has no {PARTITIONS_DIR}/ store); give "
                        f"a directory of the broker's log.dirs")
    options = Options(raw_mode=True)
    options.set_max_open_files(-1)  # every table file opened at once: a compaction cannot remove one mid-dump
    with tempfile.TemporaryDirectory(prefix="kraft-dump-data-") as scratch:
        for attempt in range(5):
            view = os.path.join(scratch, str(attempt))
            os.mkdir(view)
            for name in os.listdir(path):
                if not name.startswith(_NOT_LINKED):
                    os.symlink(os.path.join(os.path.abspath(path), name), os.path.join(view, name))
            try:
                db = Rdict(view, options, access_type=AccessType.read_only())
                break
            except Exception as e:  # rocksdict raises plain exceptions
                if "No such file" in str(e) and attempt < 4:
                    continue  # the broker replaced a file between the listing and the open
                raise _store_error(log_dir, e, view, path) from None
        try:
            yield db
        except Exception as e:
            if type(e) is not Exception:  # ours, or a bug: not the store's
                raise
            raise _store_error(log_dir, e, view, path) from None
        finally:
            db.close()


def _store_error(log_dir: str, e: Exception, view: str, path: str) -> DumpError:
    """What RocksDB said (a corrupted block, a file gone), naming the store's files, not the links."""
    return DumpError(f"{log_dir}: cannot read the partition store: {str(e).replace(view, path)}")


# -- which partition ---------------------------------------------------------------------------

def topic_id_of(log_dir: str, topic: str, bootstrap: str | None, timeout: float) -> uuid.UUID:
    """``topic``'s id: from the controllers when named (the current id, should the topic have
    been recreated), else from the broker's metadata checkpoint in ``log_dir`` (written at
    shutdown and every metadata.log.max.snapshot.interval.ms), which needs no running cluster."""
    if bootstrap:
        return asyncio.run(_topic_id_from_controllers(bootstrap, topic, timeout))
    meta = os.path.join(log_dir, META_FILE)
    if os.path.isfile(meta):
        try:
            cluster_id = read_properties(meta).get("cluster.id", "")
        except StorageError:
            cluster_id = ""
        image = MetadataCheckpoint(log_dir, cluster_id, 0).load() if cluster_id else None
        t = image.topic(topic) if image is not None else None
        if t is not None:
            return t.id
    raise DumpError(f"topic '{topic}' is not in the broker's metadata checkpoint ({log_dir}/{METADATA_DIR}, "
                    f"written at shutdown and every metadata.log.max.snapshot.interval.ms): name the "
                    f"controllers with --bootstrap-controller, or give the topic's id with --topic-id")


async def _topic_id_from_controllers(bootstrap: str, topic: str, timeout: float) -> uuid.UUID:
    from common.errors import ErrorCode, KafkaError
    from metadata.client import ControllerClient
    from protos import controller_pb2 as cpb
    try:
        async with ControllerClient(bootstrap, timeout=timeout, give_up_unconnectable=True) as client:
            resp = await client.describe_topics(cpb.DescribeTopicsRequest(names=[topic]))
    except KafkaError as e:
        raise DumpError(f"cannot look topic '{topic}' up at {bootstrap}: {e}") from None
    for t in resp.topics:
        code = ErrorCode.of(t.error_code)
        if code != ErrorCode.NONE:
            raise DumpError(f"{code.name}: {t.error_message or f'topic {topic}'}")
        return uuid.UUID(bytes=t.topic_id)
    raise DumpError(f"UNKNOWN_TOPIC_OR_PARTITION: topic '{topic}' does not exist")


# -- what a dump is made of -------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class PartitionHead:
    topic: str
    topic_id: uuid.UUID
    partition: int
    log_start_offset: int
    high_watermark: int
    log_end_offset: int
    size: int


@dataclass(slots=True)
class BatchDump:
    """One stored batch; ``batch`` None when its frame cannot be decoded (``problems`` says why)."""

    head: StoredBatch
    batch: pb.RecordBatch | None = None
    crc_valid: bool = False
    computed_crc: int = 0
    records: list[Record] | None = None  # decoded when asked for (deep iteration) and possible
    problems: list[str] = field(default_factory=list)


def read_batches(db: object, topic_id: uuid.UUID, partition: int, where: str, start: int,
                 deep: bool) -> Iterator[BatchDump]:
    """The partition's batches from the one holding ``start``, each checked: a corrupted one is
    yielded with its problems and the next one follows."""
    for head, frame in stored_frames(db, topic_id, partition, start):
        d = BatchDump(head)
        at = f"{where} offset {head.base_offset}"
        if head.last_offset < 0:
            d.problems.append(f"{at}: the stored batch is {head.size} bytes, too short to hold a batch")
            yield d
            continue
        try:
            batches = pb.RecordBatchSet.FromString(frame).batches
        except DecodeError as e:
            batches = []
            d.problems.append(f"{at}: the stored batch cannot be decoded ({e or 'malformed'})")
        else:
            if len(batches) != 1:
                d.problems.append(f"{at}: the stored frame holds {len(batches)} batches, not one")
        if len(batches) == 1:
            d.batch = batch = batches[0]
            d.computed_crc = batch_crc(batch)
            d.crc_valid = d.computed_crc == batch.crc
            if not d.crc_valid:
                d.problems.append(f"{at}: corrupt batch: stored crc {batch.crc}, computed crc {d.computed_crc}")
            if deep:
                try:
                    d.records = decode_records(records_bytes(batch), batch.record_count, at)
                except KafkaError as e:
                    d.problems.append(f"{at}: corrupt records: {e.message}")
        yield d


@dataclass
class Summary:
    batches: int = 0
    records: int = 0
    first_offset: int | None = None
    last_offset: int | None = None
    corrupt: int = 0
    errors: int = 0

    def add(self, d: BatchDump) -> None:
        self.batches += 1
        if d.problems:
            self.corrupt += 1
        if d.batch is not None:
            self.records += d.batch.record_count
        if self.first_offset is None:
            self.first_offset = d.head.base_offset
        if d.head.last_offset >= 0:
            self.last_offset = d.head.last_offset


# -- rendering --------------------------------------------------------------------------------------

def shown(data: bytes | None) -> tuple[str | None, str]:
    """Bytes as text when they are printable UTF-8 (one line, as is), else base64."""
    if data is None:
        return None, "null"
    try:
        text = data.decode("utf-8")
        if text.isprintable():
            return text, "utf8"
    except UnicodeDecodeError:
        pass
    return base64.b64encode(data).decode(), "base64"


def _labelled(label: str, data: bytes | None) -> str:
    text, encoding = shown(data)
    return f"{label}: null" if text is None else (f"{label}: {text}" if encoding == "utf8"
                                                  else f"{label}({encoding}): {text}")


def _codec_name(batch: pb.RecordBatch) -> str:
    c = codec_of(batch)
    return Codec(c).name.lower() if c in Codec.__members__.values() else f"unknown({c})"


def _batch_fields(d: BatchDump) -> dict[str, JsonValue]:
    b, h = d.batch, d.head
    if b is None:
        return {"baseOffset": h.base_offset, "lastOffset": h.last_offset, "storedSize": h.size}
    pid = b.producer_id if b.HasField("producer_id") else -1
    seq = b.base_sequence if pid >= 0 else -1
    return {
        "baseOffset": b.base_offset, "lastOffset": b.base_offset + b.last_offset_delta, "count": b.record_count,
        "baseSequence": seq, "lastSequence": seq + b.last_offset_delta if seq >= 0 else -1,
        "producerId": pid, "producerEpoch": b.producer_epoch if pid >= 0 else -1,
        "partitionLeaderEpoch": b.partition_leader_epoch,
        "isTransactional": bool(b.attributes & TRANSACTIONAL_BIT), "isControl": bool(b.attributes & CONTROL_BIT),
        "timestampType": "LogAppendTime" if b.attributes & TIMESTAMP_TYPE_BIT else "CreateTime",
        "maxTimestamp": b.max_timestamp, "baseTimestamp": b.base_timestamp,
        "size": HEADER_BYTES + len(b.records), "compressCodec": _codec_name(b),
        "crc": b.crc, "isValid": d.crc_valid}


def _record_fields(d: BatchDump, r: Record, data: bool) -> dict[str, JsonValue]:
    b = d.batch
    assert b is not None
    seq = b.base_sequence + r.offset_delta if b.HasField("producer_id") else -1
    # LogAppendTime: every record has the time the leader appended the batch (Kafka's rule)
    ts = b.max_timestamp if b.attributes & TIMESTAMP_TYPE_BIT else b.base_timestamp + r.timestamp_delta
    out: dict[str, JsonValue] = {"offset": b.base_offset + r.offset_delta, "timestamp": ts,
                                 "keySize": -1 if r.key is None else len(r.key),
                                 "valueSize": -1 if r.value is None else len(r.value),
                                 "sequence": seq, "headerKeys": [k for k, _ in r.headers]}
    if data:
        out["key"], out["keyEncoding"] = shown(r.key)
        out["value"], out["valueEncoding"] = shown(r.value)
        out["headers"] = [dict(zip(("key", "value", "valueEncoding"), (k, *shown(v)), strict=True))
                          for k, v in r.headers]
    return out


def text_lines(d: BatchDump, data: bool) -> Iterator[str]:
    f = _batch_fields(d)
    if d.batch is None:
        yield (f"baseOffset: {f['baseOffset']} lastOffset: {f['lastOffset']} storedSize: {f['storedSize']} "
               f"isValid: false (unreadable: see stderr)")
        return
    ts_type, max_ts = f.pop("timestampType"), f.pop("maxTimestamp")
    del f["baseTimestamp"]
    fields = " ".join(f"{k}: {str(v).lower() if isinstance(v, bool) else v}" for k, v in f.items())
    yield f"{fields} {ts_type}: {max_ts} ({format_time(int(max_ts))})"
    for r in d.records or ():
        rf = _record_fields(d, r, False)
        line = (f"| offset: {rf['offset']} {ts_type}: {rf['timestamp']} keySize: {rf['keySize']} "
                f"valueSize: {rf['valueSize']} sequence: {rf['sequence']} headerKeys: {rf['headerKeys']}")
        if data:
            headers = ", ".join(_labelled(k, v) for k, v in r.headers)
            line += f" {_labelled('key', r.key)} {_labelled('payload', r.value)} headers: [{headers}]"
        yield line


def json_object(d: BatchDump, data: bool) -> dict[str, JsonValue]:
    out: dict[str, JsonValue] = {"item": "batch", **_batch_fields(d)}
    if d.records is not None:
        out["records"] = [_record_fields(d, r, data) for r in d.records]
    if d.problems:
        out["problems"] = list(d.problems)
    return out


# -- the command ------------------------------------------------------------------------------------

@click.command("dump-data", context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--log-dir", required=True, metavar="DIR", help="A directory of the broker's log.dirs.")
@click.option("--topic", help="The topic's name (asked of --bootstrap-controller if given, else found in the "
                              "broker's metadata checkpoint).")
@click.option("--topic-id", help="The topic's id instead of its name (kraft topics describe prints it).")
@click.option("--partition", type=click.IntRange(min=0), required=True)
@click.option("--offset", type=click.IntRange(min=0), default=0, show_default=True,
              help="Start at the batch holding this offset.")
@click.option("--max-records", type=click.IntRange(min=1), help="Stop after the batch that reaches this many records.")
@click.option("--deep-iteration", is_flag=True, help="A line per record too (offset, timestamp, sizes, sequence).")
@click.option("--print-data-log", is_flag=True,
              help="A line per record with its key, value and headers (implies --deep-iteration).")
@click.option("--json", "as_json", is_flag=True,
              help="One JSON object per line (JSON Lines): the partition, each batch, then the summary.")
@click.option("--bootstrap-controller", "bootstrap", envvar="KRAFT_BOOTSTRAP_CONTROLLER",
              help="HOST:PORT[,...] of controllers, to look --topic up (needed when the broker's metadata "
                   "checkpoint does not have it yet).")
@click.option("--command-timeout", "timeout", type=float, default=30.0, show_default=True,
              help="Seconds to wait for the controllers (with --bootstrap-controller).")
@click.pass_context
def dump_data(ctx: click.Context, log_dir: str, topic: str | None, topic_id: str | None, partition: int,
              offset: int, max_records: int | None, deep_iteration: bool, print_data_log: bool, as_json: bool,
              bootstrap: str | None, timeout: float) -> None:
    """Print a partition's record batches (and records) from a broker's log directory, read-only
    and safe on a running broker (like kafka-dump-log.sh --files on a data segment). Exit code 1
    if anything could not be read."""
    if (topic is None) == (topic_id is None):
        raise click.UsageError("give exactly one of --topic and --topic-id")
    summary = Summary()

    def error(message: str) -> None:
        summary.errors += 1
        click.echo(f"dump-data: {message}", err=True)

    try:
        _dump(log_dir, topic, topic_id, partition, offset, max_records, deep_iteration or print_data_log,
              print_data_log, as_json, bootstrap, timeout, summary, error)
    except DumpError as e:
        error(str(e))
    except BrokenPipeError:  # `kraft dump-data ... | head`: the reader has gone
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        ctx.exit(1)
    ctx.exit(1 if summary.errors else 0)


def _dump(log_dir: str, topic: str | None, topic_id_text: str | None, partition: int, offset: int,
          max_records: int | None, deep: bool, data: bool, as_json: bool, bootstrap: str | None, timeout: float,
          summary: Summary, error: Callable[[str], None]) -> None:
    if topic_id_text is not None:
        try:
            tid = parse_uuid(topic_id_text)
        except ValueError:
            raise DumpError(f"--topic-id {topic_id_text!r} is not a topic id (22 characters of base64, as "
                            f"kraft topics describe prints, or a hyphenated UUID)") from None
    with open_store(log_dir) as db:
        if topic_id_text is None:
            assert topic is not None
            tid = topic_id_of(log_dir, topic, bootstrap, timeout)
        name = topic if topic is not None else format_uuid(tid)
        state = stored_state(db, tid, partition)
        if state is None:
            held = stored_partitions(db, tid)
            raise DumpError(f"{log_dir} holds no log of partition {partition} of topic {name} (id "
                            f"{format_uuid(tid)}); " + (f"it holds partitions {', '.join(map(str, held))}" if held
                                                        else "it holds none of the topic's partitions"))
        head = PartitionHead(name, tid, partition, *state)
        _echo_head(head, as_json)
        try:
            for d in read_batches(db, tid, partition, f"{name}-{partition}", offset, deep):
                summary.add(d)
                if as_json:
                    click.echo(json.dumps(json_object(d, data)))
                else:
                    for line in text_lines(d, data):
                        click.echo(line)
                for problem in d.problems:
                    error(problem)
                if max_records is not None and summary.records >= max_records:
                    break
        finally:
            _echo_summary(summary, as_json)
    sys.stdout.flush()


def _echo_head(h: PartitionHead, as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps({"item": "partition", "topic": h.topic, "topicId": format_uuid(h.topic_id),
                               "partition": h.partition, "logStartOffset": h.log_start_offset,
                               "highWatermark": h.high_watermark, "logEndOffset": h.log_end_offset,
                               "storedBytes": h.size}))
    else:
        click.echo(f"Dumping {h.topic}-{h.partition} (topic id {format_uuid(h.topic_id)}): logStartOffset: "
                   f"{h.log_start_offset} highWatermark: {h.high_watermark} logEndOffset: {h.log_end_offset} "
                   f"storedBytes: {h.size}")


def _echo_summary(s: Summary, as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps({"item": "summary", "batches": s.batches, "records": s.records,
                               "firstOffset": s.first_offset, "lastOffset": s.last_offset,
                               "corruptBatches": s.corrupt, "errors": s.errors}))
    else:
        span = f" at offsets {s.first_offset}-{s.last_offset}" if s.batches else ""
        click.echo(f"Summary: {s.batches} batches, {s.records} records{span}; corrupt batches: {s.corrupt}")


if __name__ == "__main__":
    dump_data()
