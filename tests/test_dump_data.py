"""``kraft dump-data`` (brokerd/dump_data.py) against a real broker process: records produced
by confluent-kafka (idempotent, keyed, with headers, zstd and uncompressed) come back from the
broker's RocksDB with their offsets, producer ids, sequences, keys, values, headers and
timestamps, while the broker runs and takes more writes, and once it has stopped (its files
then unchanged byte for byte); bad input and corrupted batches are one line each on stderr
and exit code 1. The broker writes no control batches today, so none is checked."""
from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import os
import shutil
import subprocess
import sys
import threading
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from brokerd.log_store import tp_prefix
from metadata.ids import format_uuid, parse_uuid
from tests.brokercluster import REPO, BrokerCluster, running_cluster

TOPIC = "orders"
BROKER = 101
TS0 = 1_600_000_000_000  # explicit CreateTime timestamps
FIRST = 40               # records of the first producer, at offsets 0..39 of partition 0

#: offset -> (key, value, headers, timestamp) as confluent-kafka's delivery reports gave them
Produced = dict[int, tuple[bytes | None, bytes | None, list[tuple[str, bytes]], int]]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Any:
    with running_cluster(tmp_path_factory.mktemp("dump-data"), {}, brokers=1) as c:
        asyncio.run(c.create_topic(TOPIC, partitions=2, rf=1))
        yield c


def producer(c: BrokerCluster, **extra: object) -> Producer:
    return Producer({"bootstrap.servers": c.kafka_bootstrap_servers, "acks": "all", "enable.idempotence": True,
                     "linger.ms": 20, **extra})


def produce(p: Producer, records: list[tuple[bytes | None, bytes, list[tuple[str, bytes]], int]],
            into: Produced) -> None:
    """Send ``records`` to partition 0 and wait until each is acknowledged, noting its offset."""
    errors: list[Any] = []

    def delivered(err: Any, msg: Any, headers: list[tuple[str, bytes]]) -> None:
        if err is not None:
            errors.append(err)
        else:  # a delivery report has no headers: those sent
            into[msg.offset()] = (msg.key(), msg.value(), headers, msg.timestamp()[1])

    for key, value, headers, ts in records:
        p.produce(TOPIC, value, key, partition=0, headers=headers, timestamp=ts,
                  on_delivery=lambda err, msg, h=headers: delivered(err, msg, h))
    assert p.flush(30) == 0 and not errors, errors


def first_records() -> list[tuple[bytes | None, bytes, list[tuple[str, bytes]], int]]:
    """Keyed (one in seven not), text and binary values, headers with text and binary values."""
    return [(None if i % 7 == 3 else b"key-%d" % i, b"value %d" % i if i % 2 else b"\x00\xff bin %d" % i,
             [("i", b"%d" % i), ("raw", b"\x80\x01")], TS0 + i) for i in range(FIRST)]


def dump(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kraft.cli", "dump-data", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=60, check=False, env={**os.environ, "PYTHONPATH": str(REPO)})


def dump_json(log_dir: Path, *args: str) -> tuple[dict, list[dict], dict]:
    r = dump("--log-dir", str(log_dir), "--json", *args)
    assert r.returncode == 0 and not r.stderr, r.stderr
    lines = [json.loads(line) for line in r.stdout.splitlines()]
    assert lines[0]["item"] == "partition" and lines[-1]["item"] == "summary"
    return lines[0], lines[1:-1], lines[-1]


def decoded(text: str | None, encoding: str) -> bytes | None:
    return None if text is None else base64.b64decode(text) if encoding == "base64" else text.encode()


def check_against(batches: list[dict], produced: Produced) -> dict[int, dict]:
    """The dump's records are what was produced; returns its batches by base offset."""
    records = {r["offset"]: (b, r) for b in batches for r in b["records"]}
    for offset, (key, value, headers, ts) in produced.items():
        b, r = records[offset]
        assert decoded(r["key"], r["keyEncoding"]) == key and decoded(r["value"], r["valueEncoding"]) == value
        assert [(h["key"], decoded(h["value"], h["valueEncoding"])) for h in r["headers"]] == headers
        assert r["timestamp"] == ts and r["keySize"] == (-1 if key is None else len(key))
        assert b["timestampType"] == "CreateTime" and b["isValid"] and not b["isControl"]
    return {b["baseOffset"]: b for b in batches}


def check_producer(batches: list[dict], offsets: range, codec: str) -> int:
    """The batches at ``offsets`` are one idempotent producer's, its sequences counting from 0
    without a gap; returns its producer id."""
    mine = [b for b in batches if b["baseOffset"] in offsets]
    assert sum(b["count"] for b in mine) == len(offsets) and len(mine) < len(offsets), "no batching"
    pid = mine[0]["producerId"]
    assert pid >= 0 and {(b["producerId"], b["producerEpoch"]) for b in mine} == {(pid, 0)}
    for b in mine:
        seq = b["baseOffset"] - offsets.start
        assert (b["baseSequence"], b["lastSequence"]) == (seq, seq + b["count"] - 1)
        assert [r["sequence"] for r in b["records"]] == list(range(seq, seq + b["count"]))
        assert b["compressCodec"] == codec and b["lastOffset"] == b["baseOffset"] + b["count"] - 1
        assert b["maxTimestamp"] == max(r["timestamp"] for r in b["records"])
    return pid


class Background:
    """An uncompressed idempotent producer writing to partition 0 until stopped."""

    def __init__(self, c: BrokerCluster) -> None:
        self.p = producer(c, **{"compression.type": "none"})
        self.produced: Produced = {}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        n = 0
        while not self.stop.is_set():
            produce(self.p, [(b"bg-%d" % (n + i), b"background %d" % (n + i), [], TS0 + 10_000 + n + i)
                             for i in range(20)], self.produced)
            n += 20

    def wait_some(self, n: int) -> None:
        async def some() -> bool:
            return len(self.produced) >= n or not self.thread.is_alive()
        from tests.eventually import eventually
        asyncio.run(eventually(some, 30, what=f"{n} background records acknowledged"))
        assert self.thread.is_alive()

    def close(self) -> Produced:
        self.stop.set()
        self.thread.join(60)
        assert not self.thread.is_alive()
        del self.p  # librdkafka's client goes (it would retry its connections until collected)
        return dict(self.produced)


def test_dump_of_a_running_broker_while_it_takes_writes(cluster: BrokerCluster) -> None:
    produced: Produced = {}
    produce(producer(cluster, **{"compression.type": "zstd"}), first_records(), produced)
    assert sorted(produced) == list(range(FIRST))
    log_dir = cluster.log_dir(BROKER)
    config = log_dir / "partitions" / "rocksdict-config.json"
    config_stat = config.stat()
    bg = Background(cluster)
    try:
        bg.wait_some(20)
        head, batches, summary = dump_json(log_dir, "--topic", TOPIC, "--partition", "0", "--print-data-log")
        during = len(bg.produced)
        # the broker keeps taking writes through and after the dump: its store was not locked
        bg.wait_some(during + 40)
    finally:
        background = bg.close()
    assert head["topic"] == TOPIC and head["logEndOffset"] >= summary["lastOffset"] + 1 >= FIRST + 20
    offsets = [r["offset"] for b in batches for r in b["records"]]
    assert offsets == list(range(summary["lastOffset"] + 1)) and summary["records"] == len(offsets)
    assert summary["errors"] == 0 and summary["corruptBatches"] == 0
    by_base = check_against(batches, produced)
    first_pid = check_producer(batches, range(FIRST), "zstd")
    dumped_bg = {o: v for o, v in background.items() if o <= summary["lastOffset"]}
    check_against(batches, dumped_bg)
    bg_pid = check_producer(batches, range(FIRST, max(dumped_bg) + 1), "none")
    assert bg_pid != first_pid and by_base[0]["partitionLeaderEpoch"] >= 0
    assert config.stat().st_mtime_ns == config_stat.st_mtime_ns, "the dump rewrote rocksdict's config"

    # --topic-id, --offset inside a batch, --max-records; text output with --print-data-log
    tid = format_uuid(uuid.UUID(bytes=asyncio.run(cluster.describe_topic(TOPIC)).topic_id))
    _, some, summary = dump_json(log_dir, "--topic-id", tid, "--partition", "0", "--offset", "17",
                                 "--max-records", "10", "--deep-iteration")
    assert some[0]["baseOffset"] <= 17 <= some[0]["lastOffset"] and summary["records"] >= 10
    assert summary["records"] - some[-1]["count"] < 10 and "key" not in some[0]["records"][0]
    r = dump("--log-dir", str(log_dir), "--topic", TOPIC, "--partition", "0", "--max-records", "1",
             "--print-data-log", "--bootstrap-controller", cluster.quorum.bootstrap)  # the name looked up there
    assert r.returncode == 0 and not r.stderr, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith(f"Dumping {TOPIC}-0 (topic id {tid}): logStartOffset: 0")
    assert lines[1].startswith(f"baseOffset: 0 lastOffset: {by_base[0]['lastOffset']} count: ")
    assert f"producerId: {first_pid} producerEpoch: 0" in lines[1] and "compressCodec: zstd" in lines[1]
    assert "isValid: true" in lines[1] and f"CreateTime: {by_base[0]['maxTimestamp']} (" in lines[1]
    value0 = b"\x00\xff bin 0"
    b64 = base64.b64encode(value0).decode()
    assert lines[2] == (f"| offset: 0 CreateTime: {TS0} keySize: 5 valueSize: {len(value0)} sequence: 0 headerKeys: "
                        f"['i', 'raw'] key: key-0 payload(base64): {b64} headers: [i: 0, raw(base64): gAE=]")
    assert lines[3] == (f"| offset: 1 CreateTime: {TS0 + 1} keySize: 5 valueSize: 7 sequence: 1 headerKeys: "
                        f"['i', 'raw'] key: key-1 payload: value 1 headers: [i: 1, raw(base64): gAE=]")


def one_line_error(r: subprocess.CompletedProcess, *parts: str, code: int = 1) -> None:
    assert r.returncode == code, r.stdout
    assert len(r.stderr.splitlines()) == 1 and "Traceback" not in r.stderr, r.stderr
    for part in parts:
        assert part in r.stderr, r.stderr


def test_bad_input_is_one_line(cluster: BrokerCluster, tmp_path: Path) -> None:
    log_dir = str(cluster.log_dir(BROKER))
    one_line_error(dump("--log-dir", str(tmp_path / "nope"), "--topic", TOPIC, "--partition", "0"),
                   "nope: no such directory")
    assert not (tmp_path / "nope").exists()
    one_line_error(dump("--log-dir", str(tmp_path), "--topic", TOPIC, "--partition", "0"),
                   "not a broker's log directory")
    assert list(tmp_path.iterdir()) == []
    one_line_error(dump("--log-dir", log_dir, "--topic", "missing", "--partition", "0"),
                   "topic 'missing' is not in the broker's metadata checkpoint", "--bootstrap-controller")
    one_line_error(dump("--log-dir", log_dir, "--topic", "missing", "--partition", "0",
                        "--bootstrap-controller", cluster.quorum.bootstrap), "UNKNOWN_TOPIC_OR_PARTITION")
    one_line_error(dump("--log-dir", log_dir, "--topic", TOPIC, "--partition", "7"),
                   f"holds no log of partition 7 of topic {TOPIC} (id ", "; it holds partitions 0, 1")
    one_line_error(dump("--log-dir", log_dir, "--topic-id", "not-an-id", "--partition", "0"), "is not a topic id")
    one_line_error(dump("--log-dir", log_dir, "--partition", "0"), "exactly one of --topic and --topic-id",
                   code=2)  # a usage mistake, as every kraft command says one


def files(directory: Path) -> dict[str, tuple[int, int, str]]:
    return {str(p.relative_to(directory)): (p.stat().st_size, p.stat().st_mtime_ns,
                                            hashlib.sha256(p.read_bytes()).hexdigest())
            for p in sorted(directory.rglob("*")) if p.is_file()}


def test_stopped_broker_is_left_unchanged_and_corrupted_batches_are_reported(cluster: BrokerCluster,
                                                                             tmp_path: Path) -> None:
    assert cluster.stop_broker(BROKER) == 0
    log_dir = cluster.log_dir(BROKER)
    before = files(log_dir)
    head, batches, summary = dump_json(log_dir, "--topic", TOPIC, "--partition", "0", "--print-data-log")
    assert files(log_dir) == before, "the dump changed the broker's files"
    assert summary["records"] == head["logEndOffset"] == summary["lastOffset"] + 1 > FIRST
    check_against(batches, dict(enumerate(first_records())))

    # a copy with one batch's record bytes flipped (its CRC fails) and one batch's frame cut short
    copy = tmp_path / "copy"
    shutil.copytree(log_dir, copy)
    from rocksdict import Options, Rdict
    db = Rdict(str(copy / "partitions"), Options(raw_mode=True))
    plain = [b for b in batches if b["compressCodec"] == "none"]
    flipped, cut = plain[1]["baseOffset"], plain[3]["baseOffset"]
    key_of = {o: b"d" + tp_prefix(parse_uuid(head["topicId"]), 0)
              + o.to_bytes(8, "big") for o in (flipped, cut)}  # brokerd/log_store.py's key layout
    stored = bytearray(db[key_of[flipped]])
    at = bytes(stored).index(b"background")
    stored[at] ^= ord("b") ^ ord("c")
    db[key_of[flipped]] = bytes(stored)
    db[key_of[cut]] = db[key_of[cut]][:-10]
    db.close()
    r = dump("--log-dir", str(copy), "--topic", TOPIC, "--partition", "0", "--json", "--print-data-log")
    assert r.returncode == 1 and "Traceback" not in r.stderr
    crc, frame = r.stderr.splitlines()
    assert crc.startswith(f"dump-data: {TOPIC}-0 offset {flipped}: corrupt batch: stored crc {plain[1]['crc']}, "
                          f"computed crc "), r.stderr
    assert frame.startswith(f"dump-data: {TOPIC}-0 offset {cut}: the stored batch cannot be decoded ("), r.stderr
    out = [json.loads(line) for line in r.stdout.splitlines()][1:]
    assert [b["baseOffset"] for b in out[:-1]] == [b["baseOffset"] for b in batches], "the dump did not go on"
    bad = {b["baseOffset"]: b for b in out[:-1]}
    assert not bad[flipped]["isValid"] and bad[flipped]["records"][0]["value"].startswith("cackground")
    assert "records" not in bad[cut] and len(bad[cut]["problems"]) == 1 and bad[cut]["storedSize"] > 0
    assert out[-1]["corruptBatches"] == 2 and out[-1]["errors"] == 2


def test_a_corrupted_store_file_stops_the_dump_with_one_line(tmp_path: Path) -> None:
    """RocksDB's own checksums: a table file with bytes flipped stops the dump, naming the file."""
    from brokerd.log_store import LogStore
    from brokerd.partition_log import PartitionLog
    from clients.records import build_batch

    topic_id = uuid.uuid4()

    async def write() -> None:
        store = LogStore(str(tmp_path))
        log = PartitionLog(store, topic_id, 0)
        for i in range(5):
            await log.append_as_leader(build_batch([(b"k%d" % i, b"v" * 100, TS0 + i, ())]), 0)
        store.db.flush(True)  # into a table file
        await store.close()

    asyncio.run(write())
    args = ("--log-dir", str(tmp_path), "--topic-id", str(topic_id), "--partition", "0", "--json")
    r = dump(*args)
    assert r.returncode == 0 and [json.loads(line)["producerId"] for line in r.stdout.splitlines()[1:-1]] == [-1] * 5
    table, = (tmp_path / "partitions").glob("*.sst")
    data = bytearray(table.read_bytes())
    for i in range(100, 400):
        data[i] ^= 0x55
    table.write_bytes(bytes(data))
    one_line_error(dump(*args), f"{tmp_path}: cannot read the partition store: Corruption: ", f"in {table} ")
