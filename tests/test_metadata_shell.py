"""metadata-shell: one-shot, scripted and interactive use over snapshot files and metadata log
directories with a known history (tests/metadata_logs.py), and one clear line for every kind
of bad input."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import zlib
from pathlib import Path
from types import SimpleNamespace

import pytest
from click.testing import CliRunner, Result

from metadata.shell.main import main
from metadata.snapshot import read_info
from tests import metadata_logs as L
from tests.terminal import Terminal

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> SimpleNamespace:
    root = tmp_path_factory.mktemp("shell")
    full = L.build_log_dir(root / "full")                               # no snapshot
    snapped = L.build_log_dir(root / "snapped", snapshot_at=6, segment_bytes=400)
    return SimpleNamespace(root=root, full=full, snapped=snapped,
                           plain=L.write_plain_snapshot(root / "meta.snapshot"),
                           raft=L.raft_snapshot_path(snapped))


def shell(*args: object, input: str | None = None) -> Result:
    """Run metadata-shell in-process; a Python exception escaping it fails the test."""
    result = CliRunner().invoke(main, [str(a) for a in args], input=input)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    assert "Traceback" not in result.output
    return result


def ok(*args: object, input: str | None = None) -> str:
    result = shell(*args, input=input)
    assert result.exit_code == 0, result.output
    return result.stdout


def lines(*args: object, input: str | None = None) -> list[str]:
    return ok(*args, input=input).splitlines()


# -- the tree over each kind of source -----------------------------------------------------------

def test_plain_snapshot_shows_the_whole_image(files: SimpleNamespace) -> None:
    s = ["-s", files.plain, "-c"]
    assert lines(*s, "ls /") == ["acls", "brokers", "clientQuotas", "cluster", "configs", "coordinators", "features",
                                 "producerIds", "quorum", "scram", "topicIds", "topics"]
    assert lines(*s, "ls /topics") == ["orders-1", "orders-2", "payments"]  # old-topic deleted
    assert lines(*s, "ls /brokers") == ["1", "2", "3"]
    assert lines(*s, "ls /brokers/2") == ["endpoints", "epoch", "fenced", "inControlledShutdown",
                                          "incarnationId", "rack", "registration"]
    assert lines(*s, "cat /brokers/2/endpoints") == [
        '["PLAINTEXT://broker2:9092", "INTERNAL://broker2:9093"]']
    assert lines(*s, "cat /brokers/2/fenced; cat /brokers/2/rack; cat /brokers/2/epoch") == [
        "false", "rack-0", "102"]
    assert json.loads(ok(*s, "cat /brokers/3/registration"))["endpoints"][1] == {
        "name": "INTERNAL", "host": "broker3", "port": 9093, "securityProtocol": "SSL"}
    assert lines(*s, "ls /topics/orders-1") == ["configs", "id", "name", "partitions"]
    assert lines(*s, "ls /topics/orders-1/partitions") == ["0", "1", "2"]
    # the partition change at offset 7
    assert lines(*s, "tree /topics/orders-1/partitions/0") == [
        "/topics/orders-1/partitions/0/", "  isr: [2, 3]", "  leader: 2", "  leaderEpoch: 1",
        "  partitionEpoch: 1", "  replicas: [1, 2, 3]"]
    assert lines(*s, f"ls /topicIds/{L.ORDERS_2}; cat /topicIds/{L.ORDERS_2}/name") == [
        "configs", "id", "name", "partitions", "orders-2"]
    assert lines(*s, "cat /topics/orders-1/configs/retention.ms") == ["604800000"]
    assert lines(*s, "find /configs -type f") == [
        "/configs/brokers/2/log.cleaner.threads", "/configs/brokers/<default>/log.retention.hours",
        "/configs/topics/orders-1/retention.ms"]
    assert lines(*s, "cat /features/metadata.version") == ["3"]
    assert lines(*s, "cat /producerIds/nextProducerId") == ["1000"]
    assert lines(*s, "tree /cluster") == ["/cluster/", f"  id: {L.CLUSTER}",
                                          "  metadataEpoch: 3", "  metadataOffset: 10"]
    assert lines(*s, "ls /quorum") == []  # a plain snapshot knows nothing of the quorum


def test_raft_snapshot_knows_its_offset_and_membership(files: SimpleNamespace) -> None:
    s = ["-s", files.raft, "-c"]
    assert lines(*s, "cat /cluster/metadataOffset") == ["6"]
    assert lines(*s, "ls /topics") == ["old-topic", "orders-1", "orders-2", "payments"]
    assert lines(*s, "tree /quorum") == ["/quorum/", "  learners: []", "  voters: [1]"]


@pytest.mark.parametrize("which", ["full", "snapped"])
def test_log_directory_is_replayed_to_its_end(files: SimpleNamespace, which: str) -> None:
    s = ["-d", getattr(files, which), "-c"]
    assert lines(*s, "cat /cluster/metadataOffset; cat /cluster/metadataEpoch") == ["10", "3"]
    assert lines(*s, "ls /topics") == ["orders-1", "orders-2", "payments"]
    assert lines(*s, "cat /topics/orders-1/partitions/0/isr") == ["[2, 3]"]
    assert lines(*s, "tree /quorum") == ["/quorum/", "  epoch: 3", "  highWatermark: 11",
                                         "  learners: []", "  votedFor: 1", "  voters: [1]"]
    replayed, snapshot = (json.loads(ok(*s, "tree --json /")),
                          json.loads(ok("-s", files.plain, "-c", "tree --json /")))
    assert replayed.pop("quorum") != snapshot.pop("quorum") == {}
    assert replayed == snapshot


def test_trailing_arguments_are_one_command(files: SimpleNamespace) -> None:
    assert lines("-d", files.full, "ls", "-l", "/cluster") == [
        "-  id              shell-test-cluster", "-  metadataEpoch   3", "-  metadataOffset  10"]
    assert lines("-d", files.full, "cat", "/topics/payments/partitions/0/replicas") == ["[3, 1, 2]"]
    assert lines("-d", files.full, "ls", "-l", "/topics/orders-1") == [
        "d  configs/     1 entry", "-  id           11111111-1111-4111-8111-111111111111",
        "-  name         orders-1", "d  partitions/  3 entries"]


# -- navigation, globs, find ---------------------------------------------------------------------

def test_cd_pwd_and_relative_paths(files: SimpleNamespace) -> None:
    assert lines("-d", files.full, "-c", "pwd; cd /topics/orders-1; pwd; ls partitions; cd ..; "
                 "cat orders-2/name ./payments/../orders-1/id; cd; pwd") == [
        "/", "/topics/orders-1", "0", "1", "2", "/topics/orders-2/name: orders-2",
        f"/topics/orders-1/id: {L.ORDERS_1}", "/"]


def test_globs(files: SimpleNamespace) -> None:
    s = ["-d", files.full, "-c"]
    assert lines(*s, "ls /topics/orders-*") == [
        "/topics/orders-1:", "configs", "id", "name", "partitions", "",
        "/topics/orders-2:", "configs", "id", "name", "partitions"]
    assert lines(*s, "cat /topics/*/partitions/0/leader") == [
        "/topics/orders-1/partitions/0/leader: 2", "/topics/orders-2/partitions/0/leader: 1",
        "/topics/payments/partitions/0/leader: 3"]
    assert lines(*s, "cat /brokers/[13]/rack /topics/orders-?/id") == [
        "/brokers/1/rack: rack-1", "/brokers/3/rack: rack-1",
        f"/topics/orders-1/id: {L.ORDERS_1}", f"/topics/orders-2/id: {L.ORDERS_2}"]
    assert lines(*s, "cd /topics; ls pay*") == ["configs", "id", "name", "partitions"]
    assert json.loads(ok(*s, "cat --json /topics/orders-*/partitions/1/replicas")) == {
        "/topics/orders-1/partitions/1/replicas": [2, 3, 1],
        "/topics/orders-2/partitions/1/replicas": [2, 3]}


def test_find(files: SimpleNamespace) -> None:
    s = ["-d", files.full, "-c"]
    assert lines(*s, "find /topics -name 'orders-*'") == ["/topics/orders-1", "/topics/orders-2"]
    assert lines(*s, "find /cluster") == ["/cluster", "/cluster/id", "/cluster/metadataEpoch",
                                          "/cluster/metadataOffset"]
    assert lines(*s, "cd /topics/payments; find -name leader*") == [
        "/topics/payments/partitions/0/leader", "/topics/payments/partitions/0/leaderEpoch"]
    assert lines(*s, "find /topics/*/partitions -type d -name 1") == [
        "/topics/orders-1/partitions/1", "/topics/orders-2/partitions/1"]
    assert json.loads(ok(*s, "find --json /brokers -name fenced")) == [
        "/brokers/1/fenced", "/brokers/2/fenced", "/brokers/3/fenced"]


def test_json_outputs_parse(files: SimpleNamespace) -> None:
    s = ["-d", files.full, "-c"]
    assert json.loads(ok(*s, "ls --json /topics")) == ["orders-1", "orders-2", "payments"]
    assert json.loads(ok(*s, "ls --json -l /topics/payments")) == [
        {"name": "configs", "type": "directory", "entries": 0},
        {"name": "id", "type": "file", "value": str(L.PAYMENTS)},
        {"name": "name", "type": "file", "value": "payments"},
        {"name": "partitions", "type": "directory", "entries": 1}]
    assert json.loads(ok(*s, "ls --json /cluster /producerIds")) == {
        "/cluster": ["id", "metadataEpoch", "metadataOffset"], "/producerIds": ["nextProducerId"]}
    assert json.loads(ok(*s, "cat --json /cluster/metadataOffset")) == 10
    assert json.loads(ok(*s, "cat --json /brokers/1/rack")) == "rack-1"
    tree = json.loads(ok(*s, "tree --json /"))
    assert tree["topics"]["orders-1"]["partitions"]["0"] == {
        "isr": [2, 3], "leader": 2, "leaderEpoch": 1, "partitionEpoch": 1, "replicas": [1, 2, 3]}
    assert tree["configs"]["brokers"]["<default>"] == {"log.retention.hours": "48"}
    assert tree["topicIds"][str(L.PAYMENTS)] == tree["topics"]["payments"]
    assert tree["quorum"]["voters"] == [1]
    # --json before the source applies to every command
    assert json.loads(ok("--json", "-d", files.full, "cat", "/topics/orders-1/name")) == "orders-1"


# -- going back in time --------------------------------------------------------------------------

@pytest.mark.parametrize("offset,topics", [
    (2, []), (3, []), (4, []), (5, ["orders-1", "orders-2", "payments"]),
    (6, ["old-topic", "orders-1", "orders-2", "payments"]),
    (8, ["orders-1", "orders-2", "payments"])])
def test_at_offset_shows_the_image_of_that_offset(files: SimpleNamespace, offset: int,
                                                   topics: list[str]) -> None:
    assert lines("-d", files.full, "--at-offset", offset, "ls", "/topics") == topics
    assert lines("-d", files.full, "--at-offset", offset, "cat", "/cluster/metadataOffset") == [
        str(offset)]


def test_at_offset_follows_each_record(files: SimpleNamespace) -> None:
    d = ["-d", files.full, "--at-offset"]
    assert lines(*d, 3, "cat", "/brokers/1/fenced") == ["true"]
    assert lines(*d, 4, "cat", "/brokers/1/fenced") == ["false"]
    assert lines(*d, 6, "cat", "/topics/orders-1/partitions/0/leader") == ["1"]
    assert lines(*d, 7, "cat", "/topics/orders-1/partitions/0/leader") == ["2"]
    assert lines(*d, 8, "cat", "/producerIds/nextProducerId") == ["0"]
    assert lines(*d, 9, "cat", "/producerIds/nextProducerId") == ["1000"]
    # a directory with a snapshot at 6 reaches back to it, and no further
    assert lines("-d", files.snapped, "--at-offset", 6, "ls", "/topics") == [
        "old-topic", "orders-1", "orders-2", "payments"]
    assert lines("-s", files.plain, "--at-offset", 10, "cat", "/cluster/metadataOffset") == ["10"]


# -- changes -------------------------------------------------------------------------------------

def test_changes_names_the_record_offset_term_and_time(files: SimpleNamespace) -> None:
    out = lines("-d", files.full, "changes", "/topics/orders-1/partitions/0/isr")
    assert out[0].startswith("offset 5  term 1  2023-11-14T22:13:25.000Z  PartitionRecord {")
    assert out[1] == "    /topics/orders-1/partitions/0/isr: (absent) -> [1, 2, 3]"
    assert out[2].startswith("offset 7  term 2  2023-11-14T22:13:27.000Z  PartitionChangeRecord ")
    assert '"isr": [2, 3]' in out[2] and '"leader": 2' in out[2]
    assert out[3] == "    /topics/orders-1/partitions/0/isr: [1, 2, 3] -> [2, 3]"
    assert out[4] == ("2 entries changed /topics/orders-1/partitions/0/isr after offset 0 up to "
                      "offset 10")


def test_changes_of_a_deleted_topic_and_offset_ranges(files: SimpleNamespace) -> None:
    d = ["-d", files.full, "-c"]
    out = lines(*d, "changes /topics/old-topic")
    heads = [line for line in out if line.startswith("offset ")]
    assert [h.split("  ")[0] for h in heads] == ["offset 6", "offset 6", "offset 8"]
    assert "TopicRecord" in heads[0] and "PartitionRecord" in heads[1]
    assert "RemoveTopicRecord" in heads[2]
    assert "    /topics/old-topic/name: \"old-topic\" -> (absent)" in out
    assert lines(*d, "changes /topics/old-topic 6 10")[0].startswith("offset 8 ")
    assert lines(*d, "changes /topics/old-topic 0 5") == [
        "no changes to /topics/old-topic after offset 0 up to offset 5"]
    # relative paths; the default end is the offset being browsed
    assert lines("-d", files.full, "--at-offset", 7, "-c", "cd /topics/old-topic; changes .")[-1] \
        == "1 entry changed /topics/old-topic after offset 0 up to offset 7"
    # a directory's history starts at its snapshot
    out = lines("-d", files.snapped, "changes", "/topics/old-topic")
    assert out[-1] == "1 entry changed /topics/old-topic after offset 6 up to offset 10"


def test_changes_as_json(files: SimpleNamespace) -> None:
    report = json.loads(ok("-d", files.full, "changes", "--json", "/cluster/metadataEpoch"))
    assert report["path"] == "/cluster/metadataEpoch" and report["from"] == 0
    assert report["to"] == 10
    # the epoch moves with the entries of a new term, not because of any record
    assert [(c["offset"], c["term"], c["entry"], c["record"]) for c in report["changes"]] == [
        (1, 1, "membership", None), (7, 2, "records", None), (10, 3, "noop", None)]
    assert report["changes"][1]["files"] == [
        {"path": "/cluster/metadataEpoch", "before": 1, "after": 2}]
    report = json.loads(ok("-d", files.full, "changes", "--json", "/brokers/2/fenced"))
    assert [(c["offset"], c["record"]["type"], c["appendTimeMs"], c["files"])
            for c in report["changes"]] == [
        (3, "RegisterBrokerRecord", L.T0 + 3000, [{"path": "/brokers/2/fenced", "after": True}]),
        (4, "UnfenceBrokerRecord", L.T0 + 4000,
         [{"path": "/brokers/2/fenced", "before": True, "after": False}])]
    assert report["changes"][1]["record"]["data"] == {"id": 2, "epoch": 102}


# -- history, help, scripts ----------------------------------------------------------------------

def test_history_help_exit_and_scripts(files: SimpleNamespace) -> None:
    assert lines("-d", files.full, "-c", "pwd; history") == ["/", "    1  pwd; history"]
    assert "changes" in ok("-d", files.full, "help")
    assert ok("-d", files.full, "man", "find").startswith("usage: find")
    assert lines("-d", files.full, "-c", "pwd; exit; ls") == ["/"]
    script = "# a comment\ncat /cluster/metadataOffset\n\ncd /topics\nls\nhistory 2\n"
    assert lines("-d", files.full, input=script) == [
        "10", "orders-1", "orders-2", "payments", "    3  ls", "    4  history 2"]


def test_quoted_arguments_and_semicolons(files: SimpleNamespace) -> None:
    assert lines("-d", files.full, "-c", "cat '/topics/orders-1/name';cat \"/cluster/id\"") == [
        "orders-1", L.CLUSTER]


# -- bad input: one line, non-zero exit code, no traceback ---------------------------------------

def expect_error(result: Result, message: str, code: int = 1) -> None:
    assert result.exit_code == code, (result.stdout, result.stderr)
    assert result.stderr.splitlines() == [message], result.stderr


def test_a_real_process_fails_with_one_line(files: SimpleNamespace, tmp_path: Path) -> None:
    """The same as the in-process tests below, through the interpreter as a user runs it."""
    for args, message in [
            (["-s", tmp_path / "missing"], f"metadata-shell: {tmp_path / 'missing'}: no such file"),
            (["-d", files.full, "cat", "/topics/nope"],
             "cat: /topics/nope: no such file or directory")]:
        proc = subprocess.run([sys.executable, "-m", "metadata.shell.main", *map(str, args)],
                              capture_output=True, text=True, cwd=REPO, timeout=60)
        assert proc.returncode == 1
        assert proc.stderr.splitlines() == [message]
        assert "Traceback" not in proc.stdout + proc.stderr


def _corrupt(path: Path, at: int) -> None:
    data = bytearray(path.read_bytes())
    data[at] ^= 0xFF
    path.write_bytes(bytes(data))


def _unknown_version_snapshot(source: Path, target: Path) -> int:
    """A copy of ``source`` whose first record claims version 9 (frame CRC kept valid):
    returns the byte offset of that frame."""
    data = bytearray(source.read_bytes())
    at = read_info(source).index[0]
    length = int.from_bytes(data[at:at + 4], "big")
    body = at + 8
    assert data[body:body + 2] == b"\x08\x01"  # field 1 (version), varint 1
    data[body + 1] = 9
    data[at + 4:at + 8] = zlib.crc32(bytes(data[body:body + length])).to_bytes(4, "big")
    target.write_bytes(bytes(data))
    return at


def test_bad_snapshot_files(files: SimpleNamespace, tmp_path: Path) -> None:
    missing = tmp_path / "missing.snapshot"
    expect_error(shell("-s", missing, "ls"), f"metadata-shell: {missing}: no such file")
    empty = tmp_path / "empty.snapshot"
    empty.write_bytes(b"")
    expect_error(shell("-s", empty, "ls"), f"metadata-shell: snapshot {empty}: byte 0: empty file")
    data = files.plain.read_bytes()
    truncated = tmp_path / "truncated.snapshot"
    truncated.write_bytes(data[:300])
    result = shell("-s", truncated, "ls")
    expect_error(result, result.stderr.strip())
    assert result.stderr.startswith(f"metadata-shell: snapshot {truncated}: byte ")
    assert "truncated" in result.stderr
    corrupted = tmp_path / "corrupted.snapshot"
    corrupted.write_bytes(data)
    info = read_info(corrupted)
    _corrupt(corrupted, info.index[0] + 12)
    result = shell("-s", corrupted, "ls")
    expect_error(result, result.stderr.strip())
    assert result.stderr.startswith(
        f"metadata-shell: snapshot {corrupted}: byte {info.index[0]}: record 0: CRC mismatch")
    newer = tmp_path / "newer.snapshot"
    at = _unknown_version_snapshot(files.plain, newer)
    expect_error(shell("-s", newer, "ls"),
                 f"metadata-shell: snapshot {newer}: byte {at}: record 0: at offset 10: "
                 f"unsupported version 9 of FeatureLevelRecord (this reader supports version 1)")
    expect_error(shell("-s", files.full, "ls"),
                 f"metadata-shell: {files.full} is a directory; use --directory for a metadata "
                 f"log directory")


def test_bad_log_directories(files: SimpleNamespace, tmp_path: Path) -> None:
    expect_error(shell("-d", tmp_path / "nope", "ls"),
                 f"metadata-shell: {tmp_path / 'nope'}: no such directory")
    expect_error(shell("-d", tmp_path, "ls"), f"metadata-shell: {tmp_path} is not a metadata log "
                 f"directory (no meta.properties or wal/)")
    newer = L.build_log_dir(tmp_path / "newer", log=L.entries()[:4] + [
        L.unknown_version_entry(5, 1)])
    expect_error(shell("-d", newer, "ls"),
                 f"metadata-shell: {newer}: entry at offset 5: record 1 of batch: unsupported "
                 f"version 9 of PartitionRecord (this reader supports version 1)")
    broken = L.build_log_dir(tmp_path / "broken", segment_bytes=400)
    first = L.segment_paths(broken)[0]
    _corrupt(first, 100)
    result = shell("-d", broken, "ls")
    expect_error(result, result.stderr.strip())
    assert result.stderr.startswith(f"metadata-shell: corrupted write-ahead log {first} at byte ")


def test_torn_tail_is_a_warning(files: SimpleNamespace, tmp_path: Path) -> None:
    torn = L.build_log_dir(tmp_path / "torn", segment_bytes=400)
    last = L.segment_paths(torn)[-1]
    os.truncate(last, last.stat().st_size - 5)
    result = shell("-d", torn, "cat", "/cluster/metadataOffset")
    assert result.exit_code == 0 and result.stdout == "10\n"
    assert result.stderr.startswith(f"warning: {last} from byte ")
    assert "torn tail ignored" in result.stderr and len(result.stderr.splitlines()) == 1


@pytest.mark.parametrize("command,message", [
    ("cat /topics/nope/id", "cat: /topics/nope/id: no such file or directory"),
    ("ls /nope", "ls: /nope: no such file or directory"),
    ("ls /topics/zz*", "ls: /topics/zz*: no match"),
    ("cd /cluster/id", "cd: /cluster/id: not a directory"),
    ("cat /cluster/id/x", "cat: /cluster/id: not a directory"),
    ("cat /topics", "cat: /topics: is a directory (tree shows everything under it)"),
    ("frobnicate /", "frobnicate: unknown command (try: help)"),
    ("ls -z", "ls: unrecognized arguments: -z (see: help ls)"),
    ("changes /topics 7 3", "changes: FROM (7) is after TO (3)"),
    ("changes /topics x", "changes: argument FROM: not an offset: 'x' (see: help changes)"),
    ("changes /topics/* 1", "changes: /topics/*: name one path, without glob characters (it "
                            "may be a path that no longer exists)"),
])
def test_bad_commands(files: SimpleNamespace, command: str, message: str) -> None:
    result = shell("-d", files.full, "-c", f"pwd; {command}; pwd")
    expect_error(result, message)
    assert result.stdout == "/\n"  # the commands after the failing one do not run


def test_syntax_error_runs_nothing(files: SimpleNamespace) -> None:
    result = shell("-d", files.full, "-c", "pwd; cat 'unterminated; pwd")
    assert result.exit_code == 1 and result.stdout == ""
    assert result.stderr.splitlines() == ["syntax error: No closing quotation"]


def test_bad_offsets(files: SimpleNamespace) -> None:
    expect_error(shell("-s", files.plain, "--at-offset", 3, "ls"),
                 f"metadata-shell: snapshot {files.plain} holds only the image at offset 10, not "
                 f"offset 3; a metadata log directory (--directory) keeps the records between "
                 f"snapshots")
    expect_error(shell("-d", files.snapped, "--at-offset", 3, "ls"),
                 f"metadata-shell: offset 3 is before the oldest state in metadata log directory "
                 f"{files.snapped}: its snapshot at offset 6 (the records before it were compacted"
                 f" away)")
    expect_error(shell("-d", files.full, "--at-offset", 11, "ls"),
                 f"metadata-shell: offset 11 is after the end of metadata log directory "
                 f"{files.full} (its last offset is 10)")
    result = shell("-s", files.plain, "changes", "/topics")
    assert result.exit_code == 1 and result.stderr.splitlines() == [
        f"changes: snapshot {files.plain} holds no log records after its image at offset 10, so "
        f"nothing to compare; a metadata log directory (--directory) keeps them"]
    result = shell("-d", files.snapped, "changes", "/topics", "2")
    assert result.exit_code == 1 and result.stderr.startswith(
        "changes: offset 2 is before the oldest state in metadata log directory")
    assert shell("ls").exit_code == 2  # no source, or two: a usage error
    assert shell("-s", files.plain, "-d", files.full, "ls").exit_code == 2


# -- interactive ---------------------------------------------------------------------------------

def spawn(source: Path, history: Path) -> Terminal:
    env = dict(os.environ, KRAFT_METADATA_SHELL_HISTORY=str(history), TERM="xterm",
               PROMPT_TOOLKIT_NO_CPR="1")
    term = Terminal([sys.executable, "-m", "metadata.shell.main", "-d", str(source)], env)
    term.expect_exact("Type 'help' for the commands.")
    term.expect_exact("metadata:/>")
    return term


def finish(term: Terminal) -> None:
    code, rest = term.finish()
    assert code == 0, rest
    assert "Traceback" not in rest


def test_interactive_completion_and_persistent_history(files: SimpleNamespace,
                                                       tmp_path: Path) -> None:
    history = tmp_path / "history"
    child = spawn(files.full, history)
    child.send("tr\t")                 # a command...
    child.expect_exact("tree")
    child.send("/clu\t")               # ...and a path
    child.expect_exact("/cluster/")
    child.send("\r")
    child.expect_exact("metadataOffset: 10")
    child.expect_exact("metadata:/>")
    child.send("cd /topics\r")
    child.expect_exact("metadata:/topics>")
    child.send("ls orders\t")          # the common part, then both choices on a second Tab
    child.expect_exact("orders-")
    child.send("\t")
    child.expect_exact("orders-1/")
    child.expect_exact("orders-2/")
    child.send("2/part\t")
    child.expect_exact("partitions/")
    child.send("\r")
    child.expect_exact("1\r\n")
    child.send("cat nope\r")
    child.expect_exact("cat: /topics/nope: no such file or directory")
    child.expect_exact("metadata:/topics>")
    child.send("exit\r")
    finish(child)

    child = spawn(files.full, history)  # a second session sees the first one's commands
    child.send("history\r")
    child.expect_exact("1  tree /cluster/")
    child.expect_exact("2  cd /topics")
    child.expect_exact("3  ls orders-2/partitions/")
    child.expect_exact("6  history")
    child.expect_exact("metadata:/>")
    child.send("\x1b[A\x1b[A\x1b[A\x1b[A")  # Up four times: back to "ls orders-2/partitions/"
    child.expect_exact("ls orders-2/partitions/")
    child.send("\x15cat /cluster/id\r")  # Ctrl-U clears the recalled line
    child.expect_exact(L.CLUSTER)
    child.expect_exact("metadata:/>")  # keys sent before the prompt is back may be dropped
    child.send("\x04")                  # Ctrl-D leaves
    finish(child)
    assert "+cat /cluster/id" in history.read_text()


def test_coordinators_are_the_leaders_of_the_internal_topics(tmp_path: Path) -> None:
    """/coordinators/groups/<n> and /coordinators/transactions/<n>: the leader of partition n
    of __consumer_offsets and __transaction_state, which coordinates the groups and
    transactional ids placed there; empty before a client had the topic created."""
    import uuid

    from metadata import records as R
    from metadata.delta import MetadataDelta
    from metadata.image import MetadataImage
    from metadata.snapshot import write_snapshot

    empty = tmp_path / "empty.snapshot"
    write_snapshot(MetadataImage.empty("c"), empty, created_ms=1)
    assert lines("--snapshot", empty, "-c", "ls /coordinators") == ["groups", "transactions"]
    assert lines("--snapshot", empty, "-c", "ls /coordinators/transactions") == []
    offsets, txns = uuid.UUID(int=1), uuid.UUID(int=2)
    delta = MetadataDelta(MetadataImage.empty("c"))
    delta.replay_batch([R.topic("__consumer_offsets", offsets), R.partition(offsets, 0, [2, 1]),
                        R.topic("__transaction_state", txns)]
                       + [R.partition(txns, n, [1 + (n + k) % 3 for k in range(3)]) for n in range(3)]
                       + [R.partition_change(txns, 2, leader=R.NO_LEADER, isr=[3])], 1, 1)
    snapshot = tmp_path / "meta.snapshot"
    write_snapshot(delta.apply(), snapshot, created_ms=1)
    assert lines("--snapshot", snapshot, "-c", "tree /coordinators") == [
        "/coordinators/", "  groups/", "    0: 2", "  transactions/", "    0: 1", "    1: 2", "    2: -1"]
