"""A metadata log directory as of an offset, prepared so that Spark can still read its
snapshot in parallel ranges.

The image at an offset is the snapshot plus the log replayed to that offset. Replaying needs
the earlier state of whatever the log touches, but a log usually touches few topics of a big
snapshot. So the planner loads a *partial* image: everything in the snapshot except the
partitions of topics the log does not name, and replays the log onto it. That gives the
exact final state of the brokers, configs and the touched topics (shipped to the tasks as
rows); every other topic is read unchanged from the snapshot by the range tasks, which skip
the touched ones. Topic records are all kept, since configs and new topics are checked
against topic names.

The result is cached per planning process (Spark reuses it across reads), keyed by the
directory's files, so a report reading five tables loads the snapshot once.
"""
from __future__ import annotations

import gc
import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

from metadata.delta import MetadataDelta
from metadata.image import MetadataImage
from metadata.log_dir import (LogBatch, MetadataLogDir, MetadataLogError, open_snapshot,
                              replay_batches)
from metadata.records import MetadataRecord, RecordError
from metadata.snapshot import SnapshotError, read_info

from .frames import PartitionDecoder, frames, parse

#: Record types that name a topic by id: the topics a log touches.
_TOPIC_RECORDS = ("topic", "remove_topic", "partition", "partition_change")


@dataclass(frozen=True, slots=True)
class DirectoryState:
    """A log directory as of ``offset``: its snapshot (if any), the log batches after it up
    to ``offset``, the topics those batches name, and the partial image replayed to
    ``offset`` (complete but for the partitions of untouched topics)."""

    path: str
    offset: int
    snapshot_path: str | None
    snapshot_offset: int
    batches: tuple[LogBatch, ...]
    touched: frozenset[bytes]
    image: MetadataImage

    def touched_ids(self) -> frozenset[uuid.UUID]:
        return frozenset(uuid.UUID(bytes=raw) for raw in self.touched if len(raw) == 16)


def touched_topics(batches: tuple[LogBatch, ...]) -> frozenset[bytes]:
    found: set[bytes] = set()
    for b in batches:
        for r in b.records:
            which = r.WhichOneof("record")
            if which in _TOPIC_RECORDS:
                found.add(getattr(r, which).topic_id)
    return frozenset(found)


def partial_snapshot_image(path: str, keep_topics: frozenset[bytes]) -> MetadataImage:
    """The snapshot's image without the partitions of topics not in ``keep_topics``."""
    with open_snapshot(path) as f:
        try:
            info = read_info(f)
        except SnapshotError as e:
            raise MetadataLogError(str(e)) from None

        def kept() -> Iterator[MetadataRecord]:
            decoder = PartitionDecoder()
            for i, pos, data in frames(f, info, 0, info.record_count):
                fast = decoder.decode(data)
                if fast is not None and fast[0] not in keep_topics:
                    continue
                r = parse(info, i, pos, data)
                if r.WhichOneof("record") != "partition" or r.partition.topic_id in keep_topics:
                    yield r

        # As read_snapshot does: one batch at the snapshot's offset, onto an image from
        # before the beginning; the cyclic GC would only rescan the new objects.
        delta = MetadataDelta(MetadataImage.empty(info.cluster_id).at(-1, -1))
        enabled = gc.isenabled()
        gc.disable()
        try:
            delta.replay_batch(kept(), info.last_offset, info.last_epoch)
        except RecordError as e:
            raise MetadataLogError(f"snapshot {path}: {e}") from None
        finally:
            if enabled:
                gc.enable()
        return delta.apply().at(info.last_offset, info.last_epoch)


def check_offset(log: MetadataLogDir, offset: int | None) -> int:
    """``offset`` (default: the end of the log), if the directory holds the state at it."""
    if offset is None:
        return log.end_offset
    if offset < 0:
        raise MetadataLogError(f"offset {offset} is negative")
    if offset < log.snapshot_offset:
        raise MetadataLogError(
            f"offset {offset} is before this directory's oldest state (its snapshot at offset "
            f"{log.snapshot_offset}); the records before it were compacted away")
    if offset > log.end_offset:
        raise MetadataLogError(f"offset {offset} is beyond the end of the log in {log.path} "
                               f"(its last offset is {log.end_offset})")
    return offset


def _fingerprint(path: str) -> tuple:
    """The directory's snapshot and log files, sizes and times: a changed log, a new
    snapshot or a compaction all change it."""
    out = []
    for sub in ("snapshots", "wal"):
        d = os.path.join(path, sub)
        try:
            names = sorted(os.listdir(d))
        except FileNotFoundError:
            continue
        for name in names:
            try:
                st = os.stat(os.path.join(d, name))
            except FileNotFoundError:
                continue
            out.append((sub, name, st.st_size, st.st_mtime_ns))
    return tuple(out)


_cache: dict[tuple, DirectoryState] = {}
_CACHE_ENTRIES = 2


def directory_state(path: str, offset: int | None) -> DirectoryState:
    """The directory as of ``offset`` (default: the end of its log); cached (see above)."""
    key = (os.path.realpath(path), offset, _fingerprint(path))
    state = _cache.get(key)
    if state is None:
        state = _load(path, offset)
        while len(_cache) >= _CACHE_ENTRIES:
            del _cache[next(iter(_cache))]
        _cache[key] = state
    return state


def _load(path: str, offset: int | None) -> DirectoryState:
    log = MetadataLogDir(path)
    at = check_offset(log, offset)
    batches = tuple(b for b in log.batches() if b.offset <= at)
    touched = touched_topics(batches)
    if log.snapshot_path is not None:
        base = partial_snapshot_image(log.snapshot_path, touched)
    else:
        base = MetadataImage.empty(log.cluster_id)
    image = replay_batches(base, list(batches))
    return DirectoryState(path, at, log.snapshot_path, log.snapshot_offset, batches, touched,
                          image)
