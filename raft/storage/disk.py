"""Durable storage: a formatted data directory holding the write-ahead log and snapshots.

    DATA_DIR/meta.properties     cluster.id, node.id, directory.id, version (``format_storage``)
    DATA_DIR/bootstrap-voters.properties   the initial voter set, when formatted with one (KIP-853)
    DATA_DIR/wal/*.log           write-ahead log segments (see ``wal``)
    DATA_DIR/snapshots/*.snap    snapshots (see ``snapshot_file``); the newest two are kept

Why segment files and not RocksDB: the log is written strictly in order and read back only at
start-up, so a file append plus one ``fdatasync`` per batch is the least work a durable write
can be; ``bench/storage.py`` measures both engines and docs/raft.md ("Storage") records the figures.
"""
from __future__ import annotations

import os
import re
import threading
from dataclasses import dataclass, field
from typing import BinaryIO, Callable

from common import properties
from common.config_def import ConfigError

from .. import config
from ..errors import StorageError
from ..messages import Entry, HardState, Membership, Ready, Snapshot, SnapshotMeta, SnapshotSource
from . import wal
from .base import RecoveredState
from .snapshot_file import (FileSnapshotSource, SnapshotFileReceiver, read_meta, verify_payload,
                            write_snapshot)

META_FILE = "meta.properties"
#: Kafka writes its bootstrap voter set into a checkpoint at offset 0; ours is a small
#: properties file beside meta.properties, read while the log records no voter set of its own.
BOOTSTRAP_FILE = "bootstrap-voters.properties"
META_VERSION = "1"
_SNAP_RE = re.compile(r"^(\d{20})-(\d{20})\.snap$")


# ------------------------------------------------------------------------------- format


def read_properties(path: str) -> dict[str, str]:
    """``meta.properties``; one that does not parse is a storage problem, said as one."""
    try:
        return properties.read_properties(path)
    except ConfigError as e:
        raise StorageError(str(e)) from None


def format_storage(data_dir: str, cluster_id: str, node_id: int, *, ignore_formatted: bool = False,
                   directory_id: str | None = None, initial_voters: list[config.Voter] | None = None) -> bool:
    """Write ``meta.properties`` into an empty data directory (``kafka-storage.sh format``),
    with ``directory_id`` or a new one, and the ``initial_voters`` when given (``--standalone``
    or ``--initial-controllers``: the voter set the cluster starts from, KIP-853).
    Returns False when it was already formatted identically and ``ignore_formatted``."""
    if not cluster_id or not re.fullmatch(r"[A-Za-z0-9_-]{1,64}", cluster_id):
        raise StorageError(f"invalid cluster id {cluster_id!r}: use letters, digits, '-' and '_' "
                           f"(e.g. from `kraft storage random-uuid`)")
    meta = os.path.join(data_dir, META_FILE)
    if os.path.exists(meta):
        props = read_properties(meta)
        same = props.get("cluster.id") == cluster_id and props.get("node.id") == str(node_id)
        if same and ignore_formatted:
            return False
        raise StorageError(f"log directory {data_dir} is already formatted (cluster.id="
                           f"{props.get('cluster.id')}, node.id={props.get('node.id')}); use "
                           f"--ignore-formatted to keep it, or remove it to start over")
    leftovers = {BOOTSTRAP_FILE, BOOTSTRAP_FILE + ".tmp", META_FILE + ".tmp"}  # of a format cut short
    if os.path.isdir(data_dir) and [n for n in os.listdir(data_dir) if not n.startswith(".") and n not in leftovers]:
        raise StorageError(f"log directory {data_dir} is not empty and not formatted; refusing to format over it")
    directory_id = config.check_directory_id(directory_id) if directory_id else config.new_directory_id()
    os.makedirs(data_dir, exist_ok=True)
    # A format cut short leaves what it wrote before meta.properties. A voter set left from it
    # would be read as this node's bootstrap voters even when formatting without any.
    for name in leftovers:
        if os.path.exists(os.path.join(data_dir, name)):
            os.remove(os.path.join(data_dir, name))
    if initial_voters is not None:  # first: meta.properties is what makes the directory formatted
        _write_durably(os.path.join(data_dir, BOOTSTRAP_FILE),
                       "# the initial voter set, written by the format step; the log's voter set replaces it\n"
                       f"voters={','.join(map(str, initial_voters))}\n")
    # Whatever was removed or renamed above is durable before meta.properties says "formatted".
    wal.fsync_dir(data_dir)
    _write_durably(meta, f"#\n# written by the format step; do not edit\ncluster.id={cluster_id}\n"
                         f"node.id={node_id}\ndirectory.id={directory_id}\nversion={META_VERSION}\n")
    wal.fsync_dir(data_dir)
    return True


def _write_durably(path: str, text: str) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def bootstrap_voters(data_dir: str) -> list[config.Voter] | None:
    """The voter set the directory was formatted with, None when it was formatted without one."""
    path = os.path.join(data_dir, BOOTSTRAP_FILE)
    if not os.path.exists(path):
        return None
    try:
        return config.parse_voter_set(read_properties(path).get("voters", ""))
    except ConfigError as e:
        raise StorageError(f"{path}: {e}") from None


def check_formatted(data_dir: str, cluster_id: str | None, node_id: int) -> dict[str, str]:
    """The directory's meta.properties, after checking it is ours."""
    meta = os.path.join(data_dir, META_FILE)
    if not os.path.exists(meta):
        raise StorageError(f"log directory {data_dir} is not formatted: run `kraft storage format "
                           f"--cluster-id ID --config FILE` (or `raft-kv format`) first")
    props = read_properties(meta)
    found = props.get("cluster.id", "")
    if props.get("version") != META_VERSION:
        raise StorageError(f"{meta} has version {props.get('version')}; this build reads {META_VERSION}")
    if cluster_id is not None and found != cluster_id:
        raise StorageError(f"log directory {data_dir} belongs to cluster {found}, not {cluster_id}")
    if props.get("node.id") != str(node_id):
        raise StorageError(f"log directory {data_dir} belongs to node {props.get('node.id')}, not node {node_id}")
    return props


# ------------------------------------------------------------------------------- replay


@dataclass
class ReplayedLog:
    """A data directory read back: the newest snapshot and the entries after it."""

    snapshot: SnapshotMeta | None = None
    snapshot_path: str | None = None
    entries: list[Entry] = field(default_factory=list)
    hard_state: HardState = HardState()
    segments: list[tuple[str, int]] = field(default_factory=list)  # (path, highest entry index)
    torn_path: str | None = None  # where a torn tail begins, if any
    torn_at: int | None = None
    torn_reason: str = ""


def snapshot_files(snap_dir: str) -> list[str]:
    try:
        names = sorted(n for n in os.listdir(snap_dir) if _SNAP_RE.match(n))
    except FileNotFoundError:
        return []
    return [os.path.join(snap_dir, n) for n in names]


def replay(data_dir: str, *, verify: bool = True) -> ReplayedLog:
    """Read a data directory without changing it: the newest snapshot's metadata and the log
    entries after it, with the same rules a starting node applies. A torn tail in the last
    segment ends the log (and is reported); damage anywhere else raises StorageError. Safe on
    the directory of a running node."""
    out = ReplayedLog()
    snaps = snapshot_files(os.path.join(data_dir, "snapshots"))
    if snaps:
        out.snapshot_path = snaps[-1]
        out.snapshot = read_meta(snaps[-1])
        if verify:
            verify_payload(snaps[-1], out.snapshot)
    base_index = out.snapshot.index if out.snapshot else 0
    base_term = out.snapshot.term if out.snapshot else 0
    entries: list[Entry] = []
    term_at_base = base_term
    segments = wal.list_segments(os.path.join(data_dir, "wal"))
    for k, path in enumerate(segments):
        last_in_segment = 0
        try:
            for rec in wal.read_segment(path):
                if rec.entry is not None:
                    e = rec.entry
                    last_in_segment = max(last_in_segment, e.index)
                    if e.index <= base_index:
                        entries = []  # any write at or below the base supersedes the rest
                        if e.index == base_index:
                            term_at_base = e.term
                        continue
                    expected = base_index + len(entries) + 1
                    if e.index > expected:
                        raise StorageError(f"write-ahead log {path} at byte {rec.offset}: entry "
                                           f"{e.index} follows {expected - 1}; entries are missing")
                    del entries[e.index - base_index - 1:]
                    entries.append(e)
                elif rec.hard_state is not None:
                    out.hard_state = rec.hard_state
                elif rec.base is not None and rec.base[0] >= base_index:
                    if rec.base[0] > base_index:
                        raise StorageError(f"write-ahead log {path} at byte {rec.offset} refers to "
                                           f"snapshot {rec.base[0]}, which is missing")
                    entries = []  # a snapshot from the leader replaced the log
                    term_at_base = base_term
        except wal.Torn as t:
            if k != len(segments) - 1 or not t.at_tail:
                raise wal.corruption(path, t) from None
            out.torn_path, out.torn_at, out.torn_reason = path, t.offset, t.reason
        except FileNotFoundError:
            continue  # compacted away by the running node while we read
        out.segments.append((path, last_in_segment))
    # A snapshot installed from the leader replaces a log that diverged at its index; if the
    # node crashed before the log said so, the entries that do not follow it are dropped.
    out.entries = entries if term_at_base == base_term else []
    return out


# ------------------------------------------------------------------------------ storage


def _copy_payload(source: SnapshotSource, f: BinaryIO) -> None:
    offset = 0
    while offset < source.meta.size:
        chunk = source.read(offset, 1 << 20)
        if not chunk:
            raise StorageError(f"snapshot {source.meta.index} ended at byte {offset} of "
                               f"{source.meta.size}")
        f.write(chunk)
        offset += len(chunk)


class DiskStorage:
    """The write-ahead log and snapshots of one node. ``save`` is called from one thread at a
    time (the runtime's storage thread); snapshots are written from another."""

    def __init__(self, data_dir: str, node_id: int, cluster_id: str | None = None, *,
                 segment_bytes: int = 64 << 20, fsync: bool = True) -> None:
        self.data_dir = data_dir
        props = check_formatted(data_dir, cluster_id, node_id)
        self.cluster_id = props["cluster.id"]
        self.directory_id = props.get("directory.id", "")
        self.bootstrap = bootstrap_voters(data_dir)
        self.node_id = node_id
        self.wal_dir = os.path.join(data_dir, "wal")
        self.snap_dir = os.path.join(data_dir, "snapshots")
        os.makedirs(self.wal_dir, exist_ok=True)
        os.makedirs(self.snap_dir, exist_ok=True)
        self.segment_bytes = segment_bytes
        self.fsync = fsync
        self._lock = threading.Lock()  # guards segment list changes against compaction
        self._writer: wal.SegmentWriter | None = None
        self._segments: list[tuple[str, int]] = []  # (path, highest entry index written in it)
        self._hard_state = HardState()
        self._snapshot = SnapshotMeta()
        self._last_index = 0

    # -- start-up ------------------------------------------------------------------------

    def recover(self) -> RecoveredState:
        """Load the newest snapshot and replay the log after it. A torn tail is cut off; any
        other damage raises StorageError naming the file and byte offset."""
        for leftover in os.listdir(self.snap_dir):
            if leftover.endswith(".tmp"):
                os.unlink(os.path.join(self.snap_dir, leftover))  # an unfinished snapshot
        log = replay(self.data_dir, verify=True)
        if log.snapshot is not None:
            self._snapshot = log.snapshot
        self._segments = list(log.segments)
        self._hard_state = log.hard_state
        self._last_index = self._snapshot.index + len(log.entries)
        if self._segments:
            self._writer = wal.SegmentWriter(self._segments[-1][0], log.torn_at)
        else:
            self._open_segment()
        return RecoveredState(
            log.hard_state, log.snapshot,
            FileSnapshotSource(log.snapshot_path, log.snapshot) if log.snapshot_path and log.snapshot else None,
            log.entries, f"{log.torn_path} from byte {log.torn_at} ({log.torn_reason})" if log.torn_path else "",
            tuple(self.bootstrap or ()))

    def _snapshot_files(self) -> list[str]:
        return snapshot_files(self.snap_dir)

    def _open_segment(self) -> None:
        if self._writer is not None:
            self._writer.close()
        path = os.path.join(self.wal_dir, wal.segment_name(self._last_index + 1))
        self._writer = wal.SegmentWriter(path)
        self._writer.write(wal.encode_hard_state(self._hard_state), sync=self.fsync)
        wal.fsync_dir(self.wal_dir)
        with self._lock:
            self._segments.append((path, self._last_index))

    # -- the write path ------------------------------------------------------------------

    def save(self, rd: Ready) -> None:
        """Persist a Ready: a received snapshot, the hard state and new entries, in one write
        and (when ``rd.must_sync()``) one fdatasync."""
        if rd.snapshot is not None:
            self._install(rd.snapshot)
        parts: list[bytes] = []
        if rd.hard_state is not None:
            parts.append(wal.encode_hard_state(rd.hard_state))
            self._hard_state = rd.hard_state
        if rd.entries:
            enc = wal.encode_entry
            parts.extend([enc(e) for e in rd.entries])
            self._last_index = rd.entries[-1].index
        if not parts:
            return
        assert self._writer is not None
        self._writer.write(b"".join(parts), sync=self.fsync and rd.must_sync())
        if rd.entries:
            with self._lock:
                path, hi = self._segments[-1]
                self._segments[-1] = (path, max(hi, self._last_index))
        if self._writer.size >= self.segment_bytes:
            self._open_segment()

    def receive_snapshot(self, meta: SnapshotMeta) -> SnapshotFileReceiver:
        """Where a snapshot from the leader is written as its chunks arrive (on the loop)."""
        return SnapshotFileReceiver(self.snap_dir, meta)

    def _install(self, snap: Snapshot) -> None:
        """A snapshot received from the leader replaces the whole log."""
        meta, source = snap.meta, snap.source
        if isinstance(source, FileSnapshotSource) and source.receiver is not None:
            source.receiver.publish(source, fsync=self.fsync)
            source.receiver = None
        else:  # from another receiver: copy it in
            write_snapshot(self.snap_dir, meta.index, meta.term, meta.membership, meta.context,
                           lambda f: _copy_payload(source, f))
        self._snapshot = meta
        self._last_index = meta.index
        assert self._writer is not None
        self._writer.write(wal.encode_base(meta.index, meta.term), sync=self.fsync)
        with self._lock:  # everything logged so far is superseded
            self._segments = [(path, 0) for path, _ in self._segments]
        self._open_segment()
        self._delete_covered()

    # -- snapshots taken by the application ------------------------------------------------

    def write_snapshot(self, index: int, term: int, membership: Membership, context: bytes,
                       write_payload: Callable[[BinaryIO], None]) -> FileSnapshotSource:
        """Write the application's snapshot (from any thread); the log is compacted by
        ``compact`` once the caller has handed the snapshot to the core."""
        path, meta = write_snapshot(self.snap_dir, index, term, membership, context, write_payload)
        return FileSnapshotSource(path, meta)

    def compact(self, meta: SnapshotMeta) -> None:
        """Delete log segments and old snapshots that ``meta`` makes unnecessary."""
        if meta.index > self._snapshot.index:
            self._snapshot = meta
        self._delete_covered()

    def _delete_covered(self) -> None:
        with self._lock:
            keep = []
            for k, (path, hi) in enumerate(self._segments):
                if k < len(self._segments) - 1 and hi <= self._snapshot.index:
                    os.unlink(path)
                else:
                    keep.append((path, hi))
            self._segments = keep
        snaps = self._snapshot_files()
        for path in snaps[:-2]:
            os.unlink(path)

    # -- misc --------------------------------------------------------------------------------

    def segment_paths(self) -> list[str]:
        with self._lock:
            return [p for p, _ in self._segments]

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None
