"""Durable storage: format checks, recovery, torn tails, corruption, snapshots, compaction."""
import os
import zlib

import pytest

from raft.errors import StorageError
from raft.messages import Entry, HardState, Membership, Ready, Snapshot, SnapshotMeta
from raft.storage import DiskStorage, format_storage
from raft.storage import wal
from raft.storage.snapshot_file import read_meta

M = Membership(frozenset({1, 2, 3}))


def _ready(entries=(), hs=None, snapshot=None):
    rd = Ready()
    rd.entries = list(entries)
    rd.hard_state = hs
    rd.snapshot = snapshot
    rd.sync = True
    return rd


def _es(lo, hi, term=1, tag=b""):
    return [Entry(i, term, b"d%d" % i + tag) for i in range(lo, hi + 1)]


@pytest.fixture
def data_dir(tmp_path):
    d = str(tmp_path / "node1")
    format_storage(d, "test-cluster", 1)
    return d


def _open(d, **kw):
    s = DiskStorage(d, 1, "test-cluster", **kw)
    return s, s.recover()


def test_a_directory_must_be_formatted_for_this_cluster_and_node(tmp_path, data_dir):
    with pytest.raises(StorageError, match="not formatted"):
        DiskStorage(str(tmp_path / "empty"), 1, "test-cluster")
    with pytest.raises(StorageError, match="belongs to cluster test-cluster, not other"):
        DiskStorage(data_dir, 1, "other")
    with pytest.raises(StorageError, match="belongs to node 1, not node 2"):
        DiskStorage(data_dir, 2, "test-cluster")
    with pytest.raises(StorageError, match="already formatted"):
        format_storage(data_dir, "test-cluster", 1)
    assert format_storage(data_dir, "test-cluster", 1, ignore_formatted=True) is False
    with pytest.raises(StorageError, match="invalid cluster id"):
        format_storage(str(tmp_path / "x"), "bad id!", 1)


def test_a_format_without_voters_over_a_format_cut_short_leaves_no_voter_set(tmp_path):
    """A format with initial voters writes bootstrap-voters.properties before meta.properties;
    cut short between the two, the directory is still unformatted. Formatted again without
    voters (--no-initial-controllers), the old voter set must not survive: the node would
    start as a voter of a set it was never meant to join."""
    from raft.config import Voter
    from raft.storage.disk import BOOTSTRAP_FILE, META_FILE, bootstrap_voters
    d = tmp_path / "node2"
    d.mkdir()
    (d / BOOTSTRAP_FILE).write_text("voters=1@h1:9093:MvDxzVmcRsaTz33bUuRU6A\n")  # the format that was cut short
    (d / f"{META_FILE}.tmp").write_text("cluster.id=half-written\n")
    assert format_storage(str(d), "test-cluster", 2)
    assert sorted(os.listdir(d)) == [META_FILE]
    assert bootstrap_voters(str(d)) is None
    assert DiskStorage(str(d), 2, "test-cluster").recover().bootstrap == ()
    voters = [Voter(2, "h2:9093", "MvDxzVmcRsaTz33bUuRU6B")]
    again = tmp_path / "node2-again"
    again.mkdir()
    (again / BOOTSTRAP_FILE).write_text("voters=1@h1:9093:MvDxzVmcRsaTz33bUuRU6A\n")
    format_storage(str(again), "test-cluster", 2, directory_id="MvDxzVmcRsaTz33bUuRU6B", initial_voters=voters)
    assert bootstrap_voters(str(again)) == voters  # with voters, the new set replaces the old


def test_entries_and_hard_state_survive_a_restart(data_dir):
    s, st = _open(data_dir)
    assert st.entries == [] and st.hard_state == HardState()
    s.save(_ready(_es(1, 5), HardState(2, 1, 3)))
    s.save(_ready(_es(6, 7)))
    s.close()
    s, st = _open(data_dir)
    assert st.entries == _es(1, 7) and st.hard_state == HardState(2, 1, 3)


def test_an_appended_entry_replaces_the_conflicting_suffix(data_dir):
    s, _ = _open(data_dir)
    s.save(_ready(_es(1, 10)))
    s.save(_ready(_es(6, 8, term=2, tag=b"new")))
    s.close()
    _, st = _open(data_dir)
    assert st.entries == _es(1, 5) + _es(6, 8, term=2, tag=b"new")


def _segment(d):
    return wal.list_segments(os.path.join(d, "wal"))[-1]


def test_a_torn_tail_is_cut_off_and_writing_resumes_after_it(data_dir):
    s, _ = _open(data_dir)
    s.save(_ready(_es(1, 5)))
    s.close()
    path = _segment(data_dir)
    size = os.path.getsize(path)
    with open(path, "r+b") as f:
        f.truncate(size - 3)  # the last record was only partly written
    s, st = _open(data_dir)
    assert st.entries == _es(1, 4)
    assert "cut short" in st.truncated_tail and path in st.truncated_tail
    s.save(_ready(_es(5, 6, term=2)))
    s.close()
    _, st = _open(data_dir)
    assert st.entries == _es(1, 4) + _es(5, 6, term=2)


def test_a_zero_filled_or_garbled_last_record_is_a_torn_tail(data_dir):
    s, _ = _open(data_dir)
    s.save(_ready(_es(1, 3)))
    s.close()
    path = _segment(data_dir)
    with open(path, "ab") as f:
        f.write(b"\0" * 4096)  # pre-allocated space never written
    _, st = _open(data_dir)
    assert st.entries == _es(1, 3)
    size = os.path.getsize(path)
    with open(path, "r+b") as f:  # the last record's bytes garbled by a torn sector
        f.seek(size - 2)
        f.write(b"\xff\xff")
    _, st = _open(data_dir)
    assert st.entries == _es(1, 2)


def test_corruption_before_the_tail_refuses_to_start_naming_file_and_offset(data_dir):
    s, _ = _open(data_dir)
    s.save(_ready(_es(1, 5)))
    s.close()
    path = _segment(data_dir)
    data = bytearray(open(path, "rb").read())
    records = list(wal.decode_frames(bytes(data)))
    victim = [r for r in records if r.entry and r.entry.index == 2][0]
    data[victim.offset + 12] ^= 0xFF  # flip a byte inside entry 2's body
    open(path, "wb").write(bytes(data))
    with pytest.raises(StorageError) as e:
        _open(data_dir)
    msg = str(e.value)
    assert path in msg and f"byte {victim.offset}" in msg and "checksum" in msg
    assert "\n" not in msg


def test_segments_roll_over_and_replay_in_order(data_dir):
    s, _ = _open(data_dir, segment_bytes=300)
    for k in range(10):
        s.save(_ready(_es(k * 5 + 1, k * 5 + 5)))
    s.close()
    assert len(wal.list_segments(os.path.join(data_dir, "wal"))) > 5
    _, st = _open(data_dir)
    assert st.entries == _es(1, 50)


def test_a_snapshot_compacts_the_log_and_recovery_starts_from_it(data_dir):
    s, _ = _open(data_dir, segment_bytes=300)
    for k in range(10):
        s.save(_ready(_es(k * 5 + 1, k * 5 + 5), HardState(1, 1, k * 5 + 5)))
    src = s.write_snapshot(30, 1, M, b"ctx", lambda f: f.write(b"state@30"))
    s.compact(src.meta)
    remaining = wal.list_segments(os.path.join(data_dir, "wal"))
    assert all(os.path.basename(p) >= wal.segment_name(25) for p in remaining[1:])
    s.close()
    s, st = _open(data_dir)
    assert st.snapshot.index == 30 and st.snapshot.membership == M and st.snapshot.context == b"ctx"
    assert st.snapshot_source.open_payload().read() == b"state@30"
    assert st.entries == _es(31, 50)
    assert st.hard_state.commit == 50


def test_only_the_newest_two_snapshots_are_kept(data_dir):
    s, _ = _open(data_dir)
    s.save(_ready(_es(1, 40)))
    for idx in (10, 20, 30, 40):
        s.compact(s.write_snapshot(idx, 1, M, b"", lambda f: f.write(b"x")).meta)
    names = sorted(os.listdir(os.path.join(data_dir, "snapshots")))
    assert [int(n.split("-")[0]) for n in names] == [30, 40]


def test_a_snapshot_from_the_leader_replaces_the_whole_log(data_dir):
    s, _ = _open(data_dir)
    s.save(_ready(_es(1, 10)))  # diverged from the leader after index 4
    meta = SnapshotMeta(20, 3, M, 5, zlib.crc32(b"lead!"))
    receiver = s.receive_snapshot(meta)  # chunks go to a file as they arrive
    for chunk in (b"le", b"ad", b"!"):
        receiver.write(chunk)
    source = receiver.finish()
    s.save(_ready(snapshot=Snapshot(meta, source)))
    with source.open_payload() as f:
        assert f.read() == b"lead!"
    s.save(_ready(_es(21, 22, term=3)))
    s.close()
    _, st = _open(data_dir)
    assert st.snapshot.index == 20 and st.entries == _es(21, 22, term=3)
    with st.snapshot_source.open_payload() as f:
        assert f.read() == b"lead!"
    assert len(wal.list_segments(os.path.join(data_dir, "wal"))) == 1  # the old log is gone
    assert not [n for n in os.listdir(os.path.join(data_dir, "snapshots")) if n.endswith(".tmp")]


def test_an_abandoned_transfer_leaves_no_file(data_dir):
    s, _ = _open(data_dir)
    receiver = s.receive_snapshot(SnapshotMeta(20, 3, M, 5, 0))
    receiver.write(b"lea")
    assert os.listdir(os.path.join(data_dir, "snapshots"))  # written as it arrives
    receiver.abort()
    assert os.listdir(os.path.join(data_dir, "snapshots")) == []


def test_divergent_entries_after_an_installed_snapshot_are_dropped_after_a_crash(data_dir):
    s, _ = _open(data_dir)
    s.save(_ready(_es(1, 10, term=1)))
    s.close()
    # crash right after the snapshot file was written, before the log recorded it
    from raft.storage.snapshot_file import write_snapshot
    write_snapshot(os.path.join(data_dir, "snapshots"), 6, 2, M, b"", lambda f: f.write(b"s"))
    _, st = _open(data_dir)
    assert st.snapshot.index == 6 and st.entries == []  # 7..10 of term 1 do not follow (6, 2)


def test_a_corrupted_snapshot_refuses_to_start(data_dir):
    s, _ = _open(data_dir)
    s.save(_ready(_es(1, 5)))
    src = s.write_snapshot(5, 1, M, b"", lambda f: f.write(b"precious state"))
    s.close()
    with open(src.path, "r+b") as f:
        f.seek(3)
        f.write(b"X")
    with pytest.raises(StorageError, match="payload .* fails its checksum"):
        _open(data_dir)
    with open(src.path, "r+b") as f:
        f.truncate(10)
    with pytest.raises(StorageError, match="truncated|bad magic"):
        read_meta(src.path)


def test_commit_only_hard_states_are_written_without_fsync(data_dir, monkeypatch):
    s, _ = _open(data_dir)
    syncs = []
    monkeypatch.setattr(os, "fdatasync", lambda fd: syncs.append(fd))
    rd = Ready()
    rd.hard_state = HardState(1, 1, 7)
    s.save(rd)  # rd.sync is False: commit index alone
    assert syncs == []
    s.save(_ready(_es(1, 1)))
    assert len(syncs) == 1


def test_the_frame_reader_tells_a_short_buffer_from_damage():
    from raft.storage.frames import FrameError, encode_frame, read_frame
    data = encode_frame(b"hello") + encode_frame(b"")
    assert read_frame(data, 0, 100) == (b"hello", 13)
    assert read_frame(data, 13, 100) == (b"", 21)
    for cut, short in ((4, True), (10, True)):
        with pytest.raises(FrameError) as e:
            read_frame(data[:cut], 0, 100)
        assert e.value.short is short
    with pytest.raises(FrameError, match="length 5 exceeds 4") as e:
        read_frame(data, 0, 4)
    assert not e.value.short
    damaged = data[:8] + b"J" + data[9:]
    with pytest.raises(FrameError, match="CRC mismatch") as e:
        read_frame(damaged, 0, 100)
    assert not e.value.short and e.value.computed is not None
