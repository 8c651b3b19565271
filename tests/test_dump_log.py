"""kraft dump-log: segments and snapshots decoded frame by frame, in text and JSON Lines, with
a summary; files of a running node read without disturbing it; one line on stderr and exit
code 1 for everything that cannot be decoded, and a torn tail reported without failing."""
from __future__ import annotations

import json
import subprocess
import sys
import zlib
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import pytest
from click.testing import CliRunner, Result

from metadata import records as R
from metadata.dump_log import dump_log
from metadata.snapshot import read_info
from raft.messages import Entry, HardState, Ready
from raft.storage import wal
from raft.storage.snapshot_file import open_payload, read_meta
from raft.storage import DiskStorage
from tests import metadata_logs as L

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> SimpleNamespace:
    root = tmp_path_factory.mktemp("dump")
    log_dir = L.build_log_dir(root / "meta", snapshot_at=6, segment_bytes=400)
    return SimpleNamespace(root=root, dir=log_dir, segments=L.segment_paths(log_dir),
                           raft=L.raft_snapshot_path(log_dir),
                           plain=L.write_plain_snapshot(root / "meta.snapshot"))


def dump(*paths: Path | str, options: tuple[str, ...] = ()) -> Result:
    result = CliRunner().invoke(dump_log, ["--files", ",".join(map(str, paths)), *options])
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    assert "Traceback" not in result.output
    return result


def dump_json(*paths: Path | str, options: tuple[str, ...] = ()) -> tuple[list[dict], Result]:
    result = dump(*paths, options=("--json", *options))
    return [json.loads(line) for line in result.stdout.splitlines()], result


def test_segments_as_text(files: SimpleNamespace) -> None:
    result = dump(*files.segments)
    assert result.exit_code == 0 and result.stderr == ""
    out = result.stdout.splitlines()
    assert out[0] == f"Dumping {files.segments[0]} (write-ahead log segment)"
    assert out[1] == "Starting offset: 1"
    assert out[2] == "position: 0 size: 33 hardState: term: 0 vote: 0 commit: 0 crc: valid"
    assert "offset: 1 term: 1 position: 66 size: 65 kind: membership crc: valid" in out
    assert ("| membership: ADD_VOTER node: 1 voters: [1] learners: [] context: 127.0.0.1:9093"
            in out)
    assert "| no-op (a new leader's first entry)" in out
    entry7 = next(i for i, line in enumerate(out) if line.startswith("offset: 7 "))
    assert out[entry7].startswith("offset: 7 term: 2 position: ")
    assert out[entry7].endswith("kind: records count: 1 appendTime: 2023-11-14T22:13:27.000Z "
                                "(1700000007000) crc: valid")
    assert out[entry7 + 1] == (
        '| offset: 7 record: 0 size: 30 payload: {"type": "PartitionChangeRecord", "version": 1, '
        f'"data": {{"topicId": "{L.ORDERS_1}", "partitionId": 0, "leader": 2, "isr": [2, 3]}}}}')
    assert f"Dumping {files.segments[-1]} (write-ahead log segment)" in out
    summary = out[out.index("Summary: 4 file(s); 10 log entries at offsets 1-10 "
                            "(1 membership, 2 noop, 7 records)"):]
    assert summary[1].startswith("  hard states: ")
    assert "  log records by type (24):" in summary
    assert "    PartitionRecord        7" in summary


def test_segments_as_json_lines(files: SimpleNamespace) -> None:
    items, result = dump_json(*files.segments)
    assert result.exit_code == 0
    entries = [i for i in items if i["item"] == "entry"]
    assert [e["offset"] for e in entries] == list(range(1, 11))
    assert [e["kind"] for e in entries] == ["membership", "noop"] + ["records"] * 7 + ["noop"]
    batches = L.record_batches()
    for e in entries[2:-1]:
        assert e["term"] == (1 if e["offset"] <= 6 else 2)
        assert e["appendTimeMs"] == L.T0 + e["offset"] * 1000
        assert e["crcValid"] is True
        assert [r["payload"]["type"] for r in e["records"]] == [
            R.type_name(r) for r in batches[e["offset"]]]
        assert [r["record"] for r in e["records"]] == list(range(len(batches[e["offset"]])))
    assert entries[0]["membership"] == {"change": "ADD_VOTER", "node": 1, "voters": [1], "learners": [],
                                        "directories": {}, "context": "127.0.0.1:9093"}
    hard_states = [i for i in items if i["item"] == "hardState"]
    assert hard_states[-1] == {"item": "hardState", "file": str(files.segments[-1]),
                               "position": hard_states[-1]["position"], "size": 33, "term": 3,
                               "vote": 1, "commit": 10, "crcValid": True}
    assert [i["file"] for i in items if i["item"] == "file"] == list(map(str, files.segments))
    summary = items[-1]
    expected = Counter(R.type_name(r) for records in batches.values() for r in records)
    assert summary == {
        "item": "summary", "files": 4, "entries": 10,
        "entriesByKind": {"membership": 1, "noop": 2, "records": 7},
        "firstOffset": 1, "lastOffset": 10, "snapshots": [], "hardStates": len(hard_states),
        "baseMarkers": 0, "logRecordsByType": dict(sorted(expected.items())),
        "snapshotRecordsByType": {}, "tornTails": [], "errors": 0}


def test_skip_record_metadata(files: SimpleNamespace) -> None:
    out = dump(files.segments[0], options=("--skip-record-metadata",)).stdout.splitlines()
    records = [line for line in out if line.startswith("| ") and "payload" in line]
    assert records and all(line.startswith("| payload: {") for line in records)
    assert any(line.startswith("offset: 3 term: 1 ") for line in out)  # entries still shown
    items, _ = dump_json(files.segments[0], options=("--skip-record-metadata",))
    record = next(i for i in items if i["item"] == "entry" and i["kind"] == "records")["records"][0]
    assert record == {"payload": {"type": "FeatureLevelRecord", "version": 1,
                                  "data": {"name": "metadata.version", "featureLevel": 3}}}
    items, _ = dump_json(files.plain, options=("--skip-record-metadata",))
    assert all("record" not in i for i in items if i["item"] == "snapshotRecord")


def test_snapshots(files: SimpleNamespace) -> None:
    result = dump(files.raft, files.plain)
    assert result.exit_code == 0 and result.stderr == ""
    out = result.stdout.splitlines()
    assert out[0] == f"Dumping {files.raft} (Raft snapshot)"
    assert out[1].startswith("Raft snapshot: offset: 6 term: 1 voters: [1] learners: [] payload: ")
    assert out[1].endswith('bytes crc: valid context: {"1": "127.0.0.1:9093"}')
    assert out[2] == (f"Metadata snapshot: clusterId: {L.CLUSTER} lastOffset: 6 lastEpoch: 1 "
                      f"created: 2023-11-14T22:13:26.000Z (1700000006000) records: 18")
    assert out[3] == ('| record: 0 payload: {"type": "FeatureLevelRecord", "version": 1, "data": '
                      '{"name": "metadata.version", "featureLevel": 3}}')
    assert f"Dumping {files.plain} (metadata snapshot)" in out
    assert f"  snapshot {files.raft}: the image at offset 6" in out
    assert f"  snapshot {files.plain}: the image at offset 10" in out
    items, _ = dump_json(files.plain)
    header = items[1]
    assert header["item"] == "metadataSnapshot" and header["lastOffset"] == 10
    records = [i["payload"] for i in items if i["item"] == "snapshotRecord"]
    assert len(records) == header["recordCount"] == read_info(files.plain).record_count
    assert Counter(r["type"] for r in records) == Counter(items[-1]["snapshotRecordsByType"])
    assert {"type": "ProducerIdsRecord", "version": 1,
            "data": {"brokerId": -1, "brokerEpoch": -1, "nextProducerId": 1000}} in records


def test_module_entry_point(files: SimpleNamespace) -> None:
    proc = subprocess.run([sys.executable, "-m", "metadata.dump_log", "--json",
                           "--cluster-metadata-decoder", "--files", str(files.segments[-1])],
                          capture_output=True, text=True, cwd=REPO, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.splitlines()[-1])["lastOffset"] == 10


# -- files of a running node ---------------------------------------------------------------------

def test_files_of_a_running_node_are_read_without_disturbing_it(tmp_path: Path) -> None:
    log_dir = L.build_log_dir(tmp_path / "live", log=L.entries()[:5])
    storage = DiskStorage(str(log_dir), 1)
    storage.recover()  # the node is up: its newest segment is open for appending
    try:
        segments = L.segment_paths(log_dir)
        before = {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in segments}
        items, result = dump_json(*segments)
        assert result.exit_code == 0 and items[-1]["lastOffset"] == 5
        assert {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in segments} == before
        ready = Ready()
        ready.entries = [L.entries()[5]]
        ready.hard_state = HardState(1, 1, 5)
        ready.sync = True
        storage.save(ready)  # the node goes on writing
        items, result = dump_json(*segments)
        assert result.exit_code == 0 and items[-1]["lastOffset"] == 6
        # a write caught half way: the tail of the newest segment is torn, which is expected
        newest = segments[-1]
        end = newest.stat().st_size
        with open(newest, "ab") as f:
            f.write(b"\x00\x00\x01\x00" + b"\xde\xad\xbe\xef" + b"xy")  # 2 of 256 bytes
        result = dump(*segments)
        assert result.exit_code == 0 and result.stderr == ""
        assert (f"position: {end} torn tail: record of 256 bytes cut short at 2 (a write in "
                f"progress, or one cut short by a crash; a restarting node truncates it)"
                in result.stdout.splitlines())
        assert f"  torn tail: {newest} at byte {end}" in result.stdout
    finally:
        storage.close()


def test_base_marker(tmp_path: Path) -> None:
    """A segment in which a snapshot from the leader replaced the log (the storage deletes
    such segments right after; a crash in between leaves one)."""
    segment = tmp_path / "00000000000000000001.log"
    segment.write_bytes(wal.encode_hard_state(HardState(1, 1, 0)) + wal.encode_base(6, 1)
                        + wal.encode_entry(L.entries()[6]))
    items, result = dump_json(segment)
    assert result.exit_code == 0, result.stderr
    base = next(i for i in items if i["item"] == "base")
    assert (base["position"], base["offset"], base["term"], base["crcValid"]) == (33, 6, 1, True)
    assert [i["offset"] for i in items if i["item"] == "entry"] == [7]
    assert items[-1]["baseMarkers"] == 1
    assert ("position: 33 size: 25 base: offset: 6 term: 1 crc: valid (the log restarts after "
            "a snapshot from the leader)") in dump(segment).stdout.splitlines()


# -- bad input -----------------------------------------------------------------------------------

def expect_error(result: Result, message: str) -> None:
    assert result.exit_code == 1, result.output
    assert result.stderr.splitlines() == [message], result.stderr


def copy(source: Path, target: Path, cut: int | None = None, flip: int | None = None) -> Path:
    data = bytearray(source.read_bytes())
    if flip is not None:
        data[flip] ^= 0xFF
    target.write_bytes(bytes(data[:cut]))
    return target


def test_missing_empty_and_unrecognised_files(files: SimpleNamespace, tmp_path: Path) -> None:
    expect_error(dump(tmp_path / "nope.log"), f"dump-log: {tmp_path / 'nope.log'}: no such file")
    empty = tmp_path / "00000000000000000001.log"
    empty.write_bytes(b"")
    expect_error(dump(empty), f"dump-log: {empty}: byte 0: empty file")
    expect_error(dump(files.dir), f"dump-log: {files.dir}: is a directory; give its files "
                                  f"(wal/*.log, snapshots/*.snap)")
    text = tmp_path / "notes.txt"
    text.write_text("hello, this is not a log\n")
    result = dump(text)
    expect_error(result, result.stderr.strip())
    assert result.stderr.startswith(f"dump-log: {text}: byte 0: not a write-ahead log segment "
                                    f"or a snapshot (")
    # the files after a bad one are still dumped
    result = dump(tmp_path / "nope.log", files.segments[-1])
    assert result.exit_code == 1 and "offset: 10 term: 3 " in result.stdout


def test_torn_frame_before_the_newest_segment_is_corruption(files: SimpleNamespace,
                                                            tmp_path: Path) -> None:
    wal = tmp_path / "wal"
    wal.mkdir()
    first = copy(files.segments[0], wal / files.segments[0].name,
                 cut=files.segments[0].stat().st_size - 7)
    copy(files.segments[1], wal / files.segments[1].name)
    result = dump(first)
    expect_error(result, result.stderr.strip())
    assert result.stderr.startswith(f"dump-log: {first}: byte ")
    assert result.stderr.rstrip().endswith("(a torn tail, but not in the newest segment)")
    assert "offset: 2 term: 1 " in result.stdout  # what came before is dumped


def test_checksum_mismatch_is_reported_and_the_dump_goes_on(files: SimpleNamespace,
                                                            tmp_path: Path) -> None:
    source = files.segments[2]  # offsets 6 to 8
    entry = next(i for i in dump_json(source)[0] if i["item"] == "entry" and i["offset"] == 7)
    bad = copy(source, tmp_path / source.name, flip=entry["position"] + 20)
    items, result = dump_json(bad)
    bad_frame = next(i for i in items if i["item"] == "badFrame")
    assert bad_frame["position"] == entry["position"] and bad_frame["size"] == entry["size"]
    assert result.exit_code == 1
    assert result.stderr.splitlines() == [
        f"dump-log: {bad}: byte {entry['position']}: checksum mismatch (stored "
        f"{bad_frame['storedCrc']:#010x}, computed {bad_frame['computedCrc']:#010x}); frame "
        f"skipped"]
    assert [i["offset"] for i in items if i["item"] == "entry"] == [6, 8]
    assert items[-1]["errors"] == 1
    text = dump(bad).stdout
    assert f"position: {entry['position']} size: {entry['size']} crc: INVALID (stored " in text


def test_unknown_record_version(tmp_path: Path) -> None:
    log_dir = L.build_log_dir(tmp_path / "newer", log=L.entries()[:4] + [
        L.unknown_version_entry(5, 1),
        Entry(6, 1, R.encode_batch([R.no_op()], append_time_ms=L.T0))])
    segment = L.segment_paths(log_dir)[0]
    items, result = dump_json(segment)
    entry = next(i for i in items if i["item"] == "entry" and i["offset"] == 5)
    assert result.exit_code == 1
    assert result.stderr.splitlines() == [
        f"dump-log: {segment}: offset 5 (byte {entry['position']}): record 1: unsupported "
        f"version 9 of PartitionRecord (this reader supports version 1)"]
    assert entry["records"][0]["payload"]["type"] == "NoOpRecord"
    assert entry["records"][1] == {"offset": 5, "record": 1, "size": entry["records"][1]["size"],
                                   "problem": "record 1: unsupported version 9 of PartitionRecord"
                                              " (this reader supports version 1)"}
    assert [i["offset"] for i in items if i["item"] == "entry"][-1] == 6  # and it goes on
    assert items[-1]["logRecordsByType"]["(unreadable)"] == 1
    text = dump(segment).stdout
    assert "| offset: 5 record: 1 size: " in text and "unreadable: record 1: unsupported" in text


def test_bad_snapshots(files: SimpleNamespace, tmp_path: Path) -> None:
    truncated = copy(files.plain, tmp_path / "truncated.snapshot", cut=300)
    result = dump(truncated)
    expect_error(result, result.stderr.strip())
    assert result.stderr.startswith(f"dump-log: snapshot {truncated}: byte ")
    assert "truncated" in result.stderr
    first = read_info(files.plain).index[0]
    corrupted = copy(files.plain, tmp_path / "corrupted.snapshot", flip=first + 12)
    result = dump(corrupted)
    expect_error(result, result.stderr.strip())
    assert result.stderr.startswith(f"dump-log: snapshot {corrupted}: byte {first}: record 0: "
                                    f"CRC mismatch")
    # a Raft snapshot cut short has lost its trailer
    cut = copy(files.raft, tmp_path / files.raft.name, cut=files.raft.stat().st_size - 3)
    expect_error(dump(cut), f"dump-log: {cut}: byte {cut.stat().st_size}: no Raft snapshot "
                            f"trailer: the file is truncated or not a snapshot")
    # a Raft snapshot whose payload was damaged: its checksum says so, then the record does
    with open_payload(str(files.raft)) as payload:
        raft_first = read_info(payload).index[0]  # type: ignore[arg-type]
    damaged = copy(files.raft, tmp_path / ("x" + files.raft.name), flip=raft_first + 12)
    result = dump(damaged)
    assert result.exit_code == 1
    errors = result.stderr.splitlines()
    assert errors[0] == (f"dump-log: {damaged}: bytes 0-{read_meta(str(files.raft)).size}: the "
                         f"snapshot payload fails its checksum")
    assert errors[1].startswith(f"dump-log: snapshot {damaged}: byte {raft_first}: record 0: "
                                f"CRC mismatch")
    assert len(errors) == 2 and "crc: INVALID" in result.stdout
    # a record of a version this reader does not know
    newer = bytearray(files.plain.read_bytes())
    length = int.from_bytes(newer[first:first + 4], "big")
    newer[first + 9] = 9  # the version varint of record 0
    newer[first + 4:first + 8] = zlib.crc32(bytes(newer[first + 8:first + 8 + length])).to_bytes(
        4, "big")
    path = tmp_path / "newer.snapshot"
    path.write_bytes(bytes(newer))
    expect_error(dump(path), f"dump-log: snapshot {path}: byte {first}: record 0: unsupported "
                             f"version 9 of FeatureLevelRecord (this reader supports version 1)")
    empty = tmp_path / "empty.snapshot"
    empty.write_bytes(b"")
    expect_error(dump(empty), f"dump-log: {empty}: byte 0: empty file")


def test_real_process_bad_input_is_one_line(tmp_path: Path) -> None:
    missing = tmp_path / "missing.log"
    proc = subprocess.run([sys.executable, "-m", "metadata.dump_log", "--files", str(missing)],
                          capture_output=True, text=True, cwd=REPO, timeout=60)
    assert proc.returncode == 1
    assert proc.stderr.splitlines() == [f"dump-log: {missing}: no such file"]
    assert "Traceback" not in proc.stdout + proc.stderr
    assert proc.stdout.startswith("Summary: 0 file(s); 0 log entries")


def test_no_files_is_a_usage_error() -> None:
    result = CliRunner().invoke(dump_log, ["--files", " , "])
    assert result.exit_code == 2 and "--files names no file" in result.output
