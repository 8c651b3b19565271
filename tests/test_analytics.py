"""Spark analytics over metadata: the ``kraft`` data source's tables against the image they
come from (snapshot files, Raft ``.snap`` files, log directories at any offset), the health
report's figures on a cluster built to have known problems, and clear one-line errors.

One SparkSession serves the module (starting Spark is most of the cost)."""
from __future__ import annotations

import io
import json
import re
import struct
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("pyspark")

from click.testing import CliRunner  # noqa: E402

from metadata import records as R  # noqa: E402
from metadata.acls import (AclOperation, AclPermissionType, AclResourceType, PatternType,  # noqa: E402
                           StandardAcl)
from metadata.analytics import figures as F  # noqa: E402
from metadata.analytics import plain  # noqa: E402
from metadata.analytics.cli import analytics  # noqa: E402
from metadata.analytics.errors import AnalyticsError  # noqa: E402
from metadata.analytics.report import ReportOptions, run  # noqa: E402
from metadata.delta import MetadataDelta  # noqa: E402
from metadata.image import MetadataImage, ResourceType  # noqa: E402
from metadata.log_dir import MetadataLogError, open_snapshot  # noqa: E402
from metadata.reassignments import read_plan  # noqa: E402
from metadata.records import NO_LEADER  # noqa: E402
from metadata.snapshot import (iter_records, read_info, read_snapshot, record_ranges,  # noqa: E402
                               write_snapshot)
from protos import metadata_pb2 as pb  # noqa: E402
from raft.messages import Entry, EntryType, Membership, Ready  # noqa: E402
from raft.storage import DiskStorage, format_storage  # noqa: E402

T0 = 1_700_000_000_000
ALPHA, SKEWED, BROKEN = (uuid.UUID(int=0xA0 + i) for i in range(3))
ACL_IDS = [uuid.UUID(int=0xAC0 + i) for i in range(3)]
ACLS = [StandardAcl(AclResourceType.TOPIC, "alpha", PatternType.LITERAL, "User:alice", "*", AclOperation.READ,
                    AclPermissionType.ALLOW),
        StandardAcl(AclResourceType.GROUP, "bill", PatternType.PREFIXED, "User:*", "10.0.0.1", AclOperation.ALL,
                    AclPermissionType.DENY),
        StandardAcl(AclResourceType.CLUSTER, "kafka-cluster", PatternType.LITERAL, "User:broker", "*",
                    AclOperation.CLUSTER_ACTION, AclPermissionType.ALLOW)]


# -- data ------------------------------------------------------------------------------------

def replay(batches: dict[int, list[pb.MetadataRecord]], upto: int | None = None,
           cluster: str = "analytics-test") -> MetadataImage:
    """The image after ``batches`` (offset -> records) up to ``upto``, replayed directly."""
    delta = MetadataDelta(MetadataImage.empty(cluster))
    for offset in sorted(batches):
        if upto is None or offset <= upto:
            delta.replay_batch(batches[offset], offset, 1)
    image = delta.apply()
    return image if upto is None else image.at(upto, 1)


def crafted_batches() -> dict[int, list[pb.MetadataRecord]]:
    """Six brokers, two per rack (a, b, c), broker 6 fenced; twelve partitions with known
    skew and problems (worked out in test_report_figures)."""
    brokers = [R.register_broker(b, uuid.UUID(int=b), 10 + b,
                                 [R.endpoint("PLAINTEXT", f"b{b}", 9092)],
                                 rack="abc"[(b - 1) // 2], fenced=(b == 6)) for b in range(1, 7)]
    alpha = [([1, 3, 5], 1), ([2, 4, 6], 2), ([3, 5, 1], 3), ([4, 6, 2], 4), ([5, 1, 3], 1),
             ([6, 2, 4], 2)]
    skewed = [([1, 3], [1, 3]), ([1, 4], [1]), ([1, 5], [1, 5]), ([1, 2], [1, 2])]
    return {
        1: [R.feature_level("metadata.version", 3)] + brokers,
        2: [R.topic("alpha", ALPHA)]
           + [R.partition(ALPHA, p, reps, leader=leader) for p, (reps, leader) in enumerate(alpha)]
           + [R.topic("skewed", SKEWED)]
           + [R.partition(SKEWED, p, reps, isr=isr, leader=1)
              for p, (reps, isr) in enumerate(skewed)]
           + [R.topic("broken", BROKEN),
              R.partition(BROKEN, 0, [3, 4], isr=[], leader=NO_LEADER),
              R.partition(BROKEN, 1, [5, 6], isr=[5], leader=5)],
        3: [R.config(ResourceType.TOPIC, "skewed", "min.insync.replicas", "2"),
            R.config(ResourceType.TOPIC, "alpha", "retention.ms", "3600000"),
            R.config(ResourceType.BROKER, "", "min.insync.replicas", "1")]
           + [R.access_control_entry(i, a) for i, a in zip(ACL_IDS, ACLS, strict=True)],
    }


T1, T2, T3, T4 = (uuid.UUID(int=0xD0 + i) for i in range(4))
SNAPSHOT_AT = 4
NOOPS = {1, 7}
LAST = 10


def history_batches() -> dict[int, list[pb.MetadataRecord]]:
    """A log directory's record batches by offset; offsets 1 and 7 are Raft no-ops and the
    directory's snapshot is at offset 4."""
    return {
        2: [R.feature_level("metadata.version", 3)]
           + [R.register_broker(b, uuid.UUID(int=b), b, rack=f"r{b}", fenced=False)
              for b in (1, 2, 3)],
        3: [R.topic("t1", T1)]
           + [R.partition(T1, p, [1 + p % 3, 1 + (p + 1) % 3]) for p in range(3)]
           + [R.topic("t2", T2)] + [R.partition(T2, p, [2, 3]) for p in range(2)],
        4: [R.config(ResourceType.TOPIC, "t1", "retention.ms", "1000"),
            R.topic("t3", T3), R.partition(T3, 0, [3, 1])]
           + [R.access_control_entry(i, a) for i, a in zip(ACL_IDS[:2], ACLS[:2], strict=True)],
        5: [R.partition_change(T1, 0, isr=[1])],
        6: [R.remove_topic(T2)],
        8: [R.topic("t4", T4)] + [R.partition(T4, p, [p % 3 + 1]) for p in range(4)]
           + [R.partition_change(T1, 1, leader=NO_LEADER, isr=[])],
        9: [R.partition(T3, 1, [1, 2]),
            R.config(ResourceType.TOPIC, "t3", "min.insync.replicas", "3"),
            R.access_control_entry(ACL_IDS[2], ACLS[2])],
        10: [R.fence_broker(3, 3), R.remove_access_control_entry(ACL_IDS[0])],
    }


def history_image(upto: int) -> MetadataImage:
    return replay(history_batches(), upto, "history-cluster")


def make_log_dir(path: Path) -> Path:
    """A controller's metadata log directory: entries 1-4, a snapshot at 4, entries 5-10."""
    format_storage(str(path), "history-cluster", 1)
    storage = DiskStorage(str(path), 1)
    storage.recover()
    batches = history_batches()

    def save(offsets: range) -> None:
        ready = Ready()
        ready.entries = [Entry(o, 1, b"", EntryType.NOOP) if o in NOOPS else
                         Entry(o, 1, R.encode_batch(batches[o], append_time_ms=T0 + o))
                         for o in offsets]
        ready.sync = True
        storage.save(ready)

    save(range(1, SNAPSHOT_AT + 1))
    image = history_image(SNAPSHOT_AT)
    storage.write_snapshot(SNAPSHOT_AT, 1, Membership(frozenset({1})), b"",
                           lambda f: write_snapshot(image, f, created_ms=T0, index_interval=2))
    save(range(SNAPSHOT_AT + 1, LAST + 1))
    storage.close()
    return path


# -- rows expected from an image, written independently of the data source -------------------

def partition_rows(image: MetadataImage) -> set[tuple]:
    return {(t.name, str(t.id), pid, tuple(p.replicas), tuple(p.isr), p.leader, p.leader_epoch,
             p.partition_epoch) for t, pid, p in image.partitions()}


def replica_rows(image: MetadataImage) -> set[tuple]:
    return {(t.name, str(t.id), pid, b, pos, b == p.leader, b in p.isr,
             image.brokers[b].rack if b in image.brokers else None)
            for t, pid, p in image.partitions() for pos, b in enumerate(p.replicas)}


def broker_rows(image: MetadataImage) -> set[tuple]:
    return {(b.id, str(b.incarnation_id), b.epoch, b.rack, b.fenced, b.in_controlled_shutdown,
             tuple((e.name, e.host, e.port, e.security_protocol.name) for e in b.endpoints))
            for b in image.brokers.values()}


def expected(table: str, image: MetadataImage) -> set[tuple]:
    if table == "partitions":
        return partition_rows(image)
    if table == "replicas":
        return replica_rows(image)
    if table == "brokers":
        return broker_rows(image)
    if table == "topics":
        return {(t.name, str(t.id)) for t in image.topics_by_id.values()}
    if table == "acls":
        return {(a.resource_type.name, a.resource_name, a.pattern_type.name, a.principal, a.host, a.operation.name,
                 a.permission_type.name, str(i)) for i, a in image.acls.by_id.items()}
    assert table == "configs"
    return {(r.type.name, r.name, k, v) for r, values in image.configs.items()
            for k, v in values.items()}


def frozen(value: object) -> object:
    """A Spark value made hashable: lists (and rows in them) as tuples."""
    if isinstance(value, list):
        return tuple(frozen(v) for v in value)
    if hasattr(value, "asDict"):
        return tuple(frozen(v) for v in value)
    return value


def table(spark, path: Path | str, name: str, **options: object) -> list[tuple]:
    reader = spark.read.format("kraft").option("table", name)
    for key, value in options.items():
        reader = reader.option(key, str(value))
    return [tuple(frozen(v) for v in row) for row in reader.load(str(path)).collect()]


# -- fixtures --------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def spark() -> Iterator:
    from metadata.analytics.session import start

    session = start("local[2]")
    yield session
    session.stop()


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("analytics")


@pytest.fixture(scope="module")
def crafted(data: Path) -> tuple[Path, MetadataImage]:
    image = replay(crafted_batches())
    path = data / "crafted.snapshot"
    write_snapshot(image, path, created_ms=T0, index_interval=4)
    return path, image


@pytest.fixture(scope="module")
def log_dir(data: Path) -> Path:
    return make_log_dir(data / "metadata-log")


# -- the data source -------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["brokers", "topics", "partitions", "replicas", "configs", "acls"])
def test_snapshot_tables_match_the_image(spark, crafted, name: str) -> None:
    path, image = crafted
    rows = table(spark, path, name)
    assert len(rows) == len(set(rows))  # each row once, however the ranges fall
    assert set(rows) == expected(name, image)


def test_records_table_of_a_snapshot(spark, crafted) -> None:
    path, image = crafted
    rows = (spark.read.format("kraft").option("table", "records").load(str(path))
            .orderBy("position").collect())
    info = read_info(path)
    assert len(rows) == info.record_count == 1 + 6 + 3 + 12 + 3 + 3
    assert {r.source for r in rows} == {"snapshot"}
    assert {(r.offset, r.term) for r in rows} == {(image.offset, image.epoch)}
    assert [r.position for r in rows] == list(range(info.record_count))
    assert rows[0].record_type == "FeatureLevelRecord"
    p = next(r for r in rows if r.record_type == "PartitionRecord" and r.topic_id == str(BROKEN)
             and r.partition == 0)
    assert json.loads(p.fields)["leader"] == NO_LEADER and json.loads(p.fields)["isr"] == []
    assert rows[1].broker == 1 and rows[1].timestamp is not None


def test_raft_snap_files_read_like_plain_snapshots(spark, log_dir: Path) -> None:
    """A .snap file's metadata payload is followed by Raft's footer; the snapshot readers
    must see only the payload."""
    snap = next((log_dir / "snapshots").glob("*.snap"))
    with open_snapshot(str(snap)) as f:
        info = read_info(f)
        assert info.last_offset == SNAPSHOT_AT and info.index_interval == 2
        records = list(iter_records(f))
        assert len(records) == info.record_count
        assert len(record_ranges(info, 3)) == 3
        assert [r.WhichOneof("record") for r in iter_records(f, 4, 6)] == [
            r.WhichOneof("record") for r in records[4:6]]
    with open_snapshot(str(snap)) as f:
        assert read_snapshot(f) == history_image(SNAPSHOT_AT)
    rows = table(spark, snap, "partitions", numPartitions=3)
    assert set(rows) == partition_rows(history_image(SNAPSHOT_AT))


@pytest.mark.parametrize("name", ["brokers", "topics", "partitions", "replicas", "configs", "acls"])
def test_log_directory_tables_match_the_replayed_image(spark, log_dir: Path, name: str) -> None:
    rows = table(spark, log_dir, name, numPartitions=3)
    assert len(rows) == len(set(rows))
    assert set(rows) == expected(name, history_image(LAST))


@pytest.mark.parametrize("offset", [SNAPSHOT_AT, 6, 8, 9])
def test_offset_reproduces_earlier_states(spark, log_dir: Path, offset: int) -> None:
    image = history_image(offset)
    assert set(table(spark, log_dir, "partitions", offset=offset)) == partition_rows(image)
    if offset in (SNAPSHOT_AT, 9):
        assert set(table(spark, log_dir, "brokers", offset=offset)) == broker_rows(image)
        assert set(table(spark, log_dir, "configs", offset=offset)) == expected("configs", image)
        assert set(table(spark, log_dir, "acls", offset=offset)) == expected("acls", image)


def test_records_table_of_a_log_directory(spark, log_dir: Path) -> None:
    df = spark.read.format("kraft").option("table", "records").option("offset", "9").load(
        str(log_dir))
    rows = df.collect()
    with open_snapshot(str(next((log_dir / "snapshots").glob("*.snap")))) as f:
        in_snapshot = read_info(f).record_count
    logged = {o: b for o, b in history_batches().items() if SNAPSHOT_AT < o <= 9}
    assert sum(r.source == "snapshot" for r in rows) == in_snapshot
    log_rows = sorted((r.offset, r.position, r.record_type, r.timestamp is not None)
                      for r in rows if r.source == "log")
    assert log_rows == sorted((o, i, R.type_name(rec), True)
                              for o, b in logged.items() for i, rec in enumerate(b))
    only_log = (spark.read.format("kraft").option("table", "records").option("source", "log")
                .option("recordTypes", "PartitionChangeRecord").load(str(log_dir)).collect())
    assert sorted((r.offset, r.topic_id, r.partition) for r in only_log) == [
        (5, str(T1), 0), (8, str(T1), 1)]


def test_large_snapshot_is_read_in_parallel_ranges(spark, data: Path) -> None:
    """50,000 partitions with an index entry every 1,000 records: the ranges start inside
    topics, whose names the tasks find before their start."""
    brokers = [R.register_broker(b, uuid.UUID(int=b), 1, rack=f"r{b % 4}", fenced=False)
               for b in range(12)]
    batches: dict[int, list[pb.MetadataRecord]] = {1: [R.feature_level("metadata.version", 3)]
                                                   + brokers}
    for t in range(500):
        tid = uuid.UUID(int=(t + 1) << 64)
        batches[t + 2] = [R.topic(f"topic-{t:03d}", tid)] + [
            R.partition(tid, p, [(t + p + k) % 12 for k in range(3)]) for p in range(100)]
    image = replay(batches)
    path = data / "large.snapshot"
    write_snapshot(image, path, created_ms=T0, index_interval=1_000)
    info = read_info(path)
    assert info.record_count == 1 + 12 + 500 * 101

    names = {str(t.id): t.name for t in image.topics_by_id.values()}
    # Six ranges; then two, each longer than the reader's 1 MiB buffer.
    for options, parts in (({"recordsPerPartition": "10000"}, 6), ({"numPartitions": "2"}, 2)):
        df = spark.read.format("kraft").option("table", "partitions").options(**options).load(
            str(path))
        assert df.rdd.getNumPartitions() == len(record_ranges(info, parts)) == parts
        rows = df.select("topic", "topic_id", "partition").collect()
        assert len(rows) == 50_000
        assert all(names[r.topic_id] == r.topic for r in rows)
        assert len({(r.topic, r.partition) for r in rows}) == 50_000

    replicas = spark.read.format("kraft").option("table", "replicas").option(
        "numPartitions", "8").load(str(path))
    assert replicas.rdd.getNumPartitions() == 8
    assert replicas.count() == 150_000
    default = spark.read.format("kraft").option("table", "topics").load(str(path))
    assert default.rdd.getNumPartitions() == 1 and default.count() == 500


# -- the report ------------------------------------------------------------------------------

def test_report_figures(spark, crafted, tmp_path: Path) -> None:
    path, _ = crafted
    out = io.StringIO()
    figures = run(ReportOptions(snapshot=str(path), output=str(tmp_path), format="json"),
                  spark=spark, out=out)
    assert (figures.topics, figures.partitions, figures.replicas) == (3, 12, 30)
    assert (figures.brokers, figures.fenced_brokers, figures.racks) == (6, 1, 3)
    # replicas per broker: 7 4 5 5 5 4; leaders: 6 2 1 1 1 0; per rack a b c: 11 10 9, 8 2 1
    assert figures.replicas_per_broker == F.Spread(6, 30, 5.0, 7, "1", 1.0)
    assert figures.replicas_per_broker.skew == 1.4
    assert figures.leaders_per_broker == F.Spread(6, 11, 1.8333, 6, "1", 1.9508)
    assert figures.leaders_per_broker.skew == pytest.approx(3.2727, abs=1e-3)
    assert figures.replicas_per_rack == F.Spread(3, 30, 10.0, 11, "a", 0.8165)
    assert figures.leaders_per_rack == F.Spread(3, 11, 3.6667, 8, "a", 3.0912)
    assert figures.offline == F.Problem(1, ("broken-0: no leader; replicas [3, 4], isr []",))
    assert figures.under_min_isr == F.Problem(2, (
        "broken-0: isr [] < min.insync.replicas 1",
        "skewed-1: isr [1] < min.insync.replicas 2"))
    assert figures.under_replicated.count == 3
    assert [e.split(":")[0] for e in figures.under_replicated.examples] == [
        "broken-0", "broken-1", "skewed-1"]
    assert figures.placement == F.Problem(3, (
        "broken-0: replicas [3, 4] on racks ['b', 'b']",
        "broken-1: replicas [5, 6] on racks ['c', 'c']",
        "skewed-3: replicas [1, 2] on racks ['a', 'a']"))
    assert figures.history == (F.HistoryPoint(3, 3, 12),)
    assert F.differences(figures, plain.figures_of_snapshot(str(path))) == []

    text = out.getvalue()
    assert "3 topics, 12 partitions, 30 replicas; 6 brokers (1 fenced) on 3 racks" in text
    assert "worst skew: leaders per broker, 3.27" in text
    assert len(text.splitlines()) < 40
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["placement"]["count"] == 3 and summary["leaders_per_broker"]["skew"]
    for name in ("brokers_load", "racks_load", "history", *F.PROBLEMS.values()):
        assert list((tmp_path / name).glob("part-*.json")), name
    violations = [json.loads(line) for f in (tmp_path / "placement_violations").glob("part-*")
                  for line in f.read_text().splitlines()]
    assert [(v["topic"], v["partition"]) for v in violations] == [
        ("broken", 0), ("broken", 1), ("skewed", 3)]

    # Report, then fix: the plan moves replicas off fenced broker 6 and evens out brokers 1-5.
    plan = read_plan(str(tmp_path / "reassignment.json"))
    assert f"rebalancing plan: {len(plan)} partition(s) to move: kraft reassign-partitions" in text
    _, image = crafted
    after = {(t.name, pid): p.replicas for t in image.topics_by_id.values() for pid, p in t.partitions.items()}
    assert all(len(plan[k]) == len(after[k]) for k in plan)
    after.update(plan)
    load = [sum(b in r for r in after.values()) for b in range(1, 7)]
    leads = [sum(r[0] == b for r in after.values()) for b in range(1, 7)]
    assert load[5] == 0 and max(load[:5]) - min(load[:5]) <= 1, load
    assert leads[5] == 0 and max(leads[:5]) - min(leads[:5]) <= 1, leads


def test_a_broker_holding_two_replicas_is_a_violation(spark) -> None:
    """The delta refuses such a partition (duplicate broker ids), so no log or snapshot can
    hold one; the report's rule is checked on a hand-made table instead."""
    from metadata.analytics.health import Placement
    from metadata.analytics.schemas import PARTITIONS

    parts = spark.createDataFrame([("t", "id", 0, [1, 1, 2], [1, 2], 1, 0, 0),
                                   ("t", "id", 1, [1, 3], [1, 3], 1, 0, 0),
                                   ("t", "id", 2, [2, 4, 3, 1], [1], 1, 0, 0)], PARTITIONS)
    without_racks = Placement({1: None, 2: None, 3: None}, 0, 4)
    with_racks = Placement({1: "a", 2: "a", 3: "b", 4: None}, 2, 4)
    rows = parts.select("partition", without_racks.violated().alias("plain"),
                        with_racks.violated().alias("racked"),
                        with_racks.replica_racks().alias("racks")).collect()
    assert [(r.partition, r.plain, r.racked, r.racks) for r in rows] == [
        (0, True, True, ["a", "a", "a"]), (1, False, False, ["a", "b"]),
        (2, False, False, ["a", None, "b", "a"])]
    tally = plain.Tally({1: (None, False), 2: (None, False)}, {}, 1)
    tally.add("t", 0, [1, 1, 2], [1, 2], 1)
    assert tally.counts["placement"] == 1
    assert tally.examples["placement"][0][2] == "t-0: a broker holds two replicas: [1, 1, 2]"


def test_report_over_a_log_directory(spark, log_dir: Path, tmp_path: Path) -> None:
    out = io.StringIO()
    figures = run(ReportOptions(directory=str(log_dir), output=str(tmp_path), format="csv",
                                plots=True), spark=spark, out=out)
    assert figures.offset == LAST
    assert figures.history == (
        F.HistoryPoint(4, 3, 6), F.HistoryPoint(5, 3, 6), F.HistoryPoint(6, 2, 4),
        F.HistoryPoint(8, 3, 8), F.HistoryPoint(9, 3, 9), F.HistoryPoint(10, 3, 9))
    assert figures.offline.count == 1 and figures.fenced_brokers == 1
    assert figures.under_min_isr.examples == (
        "t1-1: isr [] < min.insync.replicas 1", "t3-0: isr [3, 1] < min.insync.replicas 3",
        "t3-1: isr [1, 2] < min.insync.replicas 3")
    assert F.differences(figures, plain.figures_of_directory(str(log_dir))) == []
    assert (tmp_path / "leaders_per_broker.png").stat().st_size > 1000
    assert (tmp_path / "partitions_over_time.png").stat().st_size > 1000
    header = next((tmp_path / "offline_partitions").glob("part-*.csv")).read_text().splitlines()
    assert header[0].startswith("topic,topic_id,partition,replicas") and '"[2,3]"' in header[1]

    earlier = run(ReportOptions(directory=str(log_dir), offset=6), spark=spark,
                  out=io.StringIO())
    assert earlier.history[-1] == F.HistoryPoint(6, 2, 4) and earlier.offline.count == 0
    assert F.differences(earlier, plain.figures_of_directory(str(log_dir), 6)) == []


def test_a_growing_directory_is_reported_at_the_offset_it_had(spark, tmp_path: Path) -> None:
    """A live controller appends while the report runs: every table is read at the offset
    resolved when it started, so the figures and the offset printed agree."""
    from metadata.analytics.health import compute
    from metadata.analytics.report import resolve_target

    path = make_log_dir(tmp_path / "growing")
    target = resolve_target(ReportOptions(directory=str(path)))
    storage = DiskStorage(str(path), 1)
    storage.recover()
    ready = Ready()
    ready.entries = [Entry(LAST + 1, 1, R.encode_batch([R.remove_topic(T4)],
                                                       append_time_ms=T0 + LAST + 1))]
    ready.sync = True
    storage.save(ready)
    storage.close()
    health = compute(spark, target)
    health.release()
    assert health.figures.offset == LAST and health.figures.topics == 3
    assert health.figures.history[-1] == F.HistoryPoint(LAST, 3, 9)


# -- errors ----------------------------------------------------------------------------------

def frame_starts(path: Path) -> list[int]:
    """The byte offset of every record frame ([u32 length][u32 crc][record])."""
    data, info = path.read_bytes(), read_info(path)
    starts, at = [], info.index[0]
    while at < info.records_end:
        starts.append(at)
        at += 8 + struct.unpack_from(">I", data, at)[0]
    return starts


def test_corruption_found_by_a_task_is_one_clear_line(spark, crafted, tmp_path: Path) -> None:
    path, _ = crafted
    start = frame_starts(path)[10]  # a partition record, not the first of its index block
    data = bytearray(path.read_bytes())
    data[start + 8 + 3] ^= 0xFF
    bad = tmp_path / "bad.snapshot"
    bad.write_bytes(bytes(data))
    with pytest.raises(AnalyticsError) as e:
        run(ReportOptions(snapshot=str(bad)), spark=spark, out=io.StringIO())
    assert re.fullmatch(rf"snapshot {re.escape(str(bad))}: byte {start}: record 10: CRC "
                        r"mismatch \(stored 0x[0-9a-f]{8}, computed 0x[0-9a-f]{8}\)",
                        str(e.value)), str(e.value)
    with pytest.raises(Exception, match="record 10: CRC mismatch"):
        table(spark, bad, "partitions")


def cli(*args: str, **env: str) -> tuple[int, str]:
    result = CliRunner().invoke(analytics, ["report", *args], env=env)
    return result.exit_code, result.output


def test_cli_errors_are_one_line(crafted, log_dir: Path, tmp_path: Path) -> None:
    path, _ = crafted
    empty = tmp_path / "empty.snapshot"
    empty.write_bytes(b"")
    truncated = tmp_path / "truncated.snapshot"
    truncated.write_bytes(path.read_bytes()[:-5])
    cases = {
        ("--snapshot", str(tmp_path / "missing")): "no such file",
        ("--snapshot", str(empty)): "empty file",
        ("--snapshot", str(truncated)): "bad trailer magic",
        ("--snapshot", str(log_dir)): "is a directory",
        ("--directory", str(path)): "is not a directory",
        ("--directory", str(log_dir), "--offset", "2"): "before this directory's oldest state",
        ("--directory", str(log_dir), "--offset", "99"): "beyond the end of the log",
        ("--snapshot", str(path), "--offset", "7"): "needs a log directory",
        ("--snapshot", str(path), "--plots"): "--plots needs --output",
        (): "exactly one of --snapshot",
    }
    for args, fragment in cases.items():
        code, output = cli(*args)
        assert code == 1, (args, output)
        assert output.startswith("error: ") and fragment in output, (args, output)
        assert output.count("\n") == 1, (args, output)


def test_without_java_the_cli_says_so(crafted, tmp_path: Path) -> None:
    path, _ = crafted
    code, output = cli("--snapshot", str(path), JAVA_HOME=str(tmp_path / "no-jdk"))
    assert code == 1 and output.count("\n") == 1
    assert output.startswith("error: JAVA_HOME is") and "Java 17" in output
    code, output = cli("--snapshot", str(path), JAVA_HOME="", PATH=str(tmp_path))
    assert code == 1 and output == ("error: Java was not found (Spark needs Java 17 or newer): "
                                    "install it or set JAVA_HOME\n")


def test_the_foreground_daemons_say_in_one_line_that_java_is_missing(tmp_path: Path) -> None:
    """``standalone master`` and ``worker`` (a compose service each) run the command lines
    ``standalone start`` runs; without Java they stop with one line, as the report does."""
    from metadata.analytics.standalone import master_command, worker_command
    assert master_command("spark-master", 7077, 8080)[1:] == [
        "org.apache.spark.deploy.master.Master", "--host", "spark-master", "--port", "7077", "--webui-port", "8080"]
    assert worker_command("spark://spark-master:7077", "w1", 1, "512m", tmp_path, 8081)[1:] == [
        "org.apache.spark.deploy.worker.Worker", "--host", "w1", "--cores", "1", "--memory", "512m",
        "--webui-port", "8081", "--work-dir", str(tmp_path), "spark://spark-master:7077"]
    for args in (["master", "--host", "spark-master", "--local-dir", str(tmp_path / "m")],
                 ["worker", "spark://spark-master:7077", "--work-dir", str(tmp_path / "w")]):
        result = CliRunner().invoke(analytics, ["standalone", *args], env={"JAVA_HOME": str(tmp_path / "no-jdk")})
        assert result.exit_code == 1 and result.output.count("\n") == 1, (args, result.output)
        assert result.output.startswith("error: JAVA_HOME is") and "Java 17" in result.output


def test_a_worker_traceback_is_reduced_to_its_error() -> None:
    from metadata.analytics.report import explain

    spark_error = Exception(
        "[PYTHON_DATA_SOURCE_ERROR] Failed to create Python data source instance: Traceback "
        "(most recent call last):\n  File \"/x/worker.py\", line 3, in main\n    import "
        "pyarrow\nModuleNotFoundError: No module named 'pyarrow'\n\tat org.apache.spark...")
    assert explain(spark_error) == "Spark failed: ModuleNotFoundError: No module named 'pyarrow'"
    assert explain(Exception("[X] it broke\nmore")) == "Spark failed: [X] it broke"


def test_without_pyspark_the_cli_says_how_to_install_it(crafted, monkeypatch) -> None:
    import sys

    path, _ = crafted
    monkeypatch.delitem(sys.modules, "metadata.analytics.health", raising=False)
    monkeypatch.setitem(sys.modules, "pyspark", None)
    monkeypatch.setitem(sys.modules, "pyspark.sql", None)
    code, output = cli("--snapshot", str(path))
    assert code == 1 and output.count("\n") == 1
    assert output.startswith("error: PySpark is not installed") and "[analytics]" in output


def test_only_local_masters_run_tasks_in_the_driver() -> None:
    from metadata.analytics.session import local_master

    assert [local_master(m) for m in ("local", "local[2]", "local[*]", "local-cluster[2,1,1024]",
                                      "spark://h:7077", "yarn", None)] == [
        True, True, True, False, False, False, False]


def test_bad_options_are_clear(spark, crafted) -> None:
    path, _ = crafted
    for options, fragment in (({"table": "nope"}, "option 'table' must be one of"),
                              ({"table": "topics", "numPartitions": "x"}, "is not an integer"),
                              ({"table": "records", "source": "neither"}, "option 'source'")):
        reader = spark.read.format("kraft")
        for k, v in options.items():
            reader = reader.option(k, v)
        with pytest.raises(Exception, match=fragment):
            reader.load(str(path)).collect()
    with pytest.raises(Exception, match="no such file"):
        table(spark, "/nonexistent/snapshot", "topics")
    with pytest.raises(AnalyticsError, match="needs a log directory"):
        run(ReportOptions(snapshot=str(path), offset=1), spark=spark)
    with pytest.raises(MetadataLogError, match="is not a metadata log directory"):
        run(ReportOptions(directory=str(path.parent)), spark=spark)
