"""Reading the metadata of a controller's ``metadata.log.dir`` (or of a single snapshot file)
without disturbing the node that may be running on it: the shell, the log dump and Spark all
go through here.

A metadata log directory is a Raft data directory (``raft.storage``): the newest snapshot, whose
payload is a metadata snapshot (``docs/metadata-snapshot-format.md``), plus the log entries
after it, each carrying one ``RecordBatch``.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import BinaryIO, Iterator

from protos import metadata_pb2 as pb
from raft.errors import StorageError
from raft.messages import EntryType
from raft.storage import read_properties, replay
from raft.storage.snapshot_file import is_raft_snapshot, open_payload

from .delta import MetadataDelta
from .image import MetadataImage
from .records import RecordError, decode_batch
from .snapshot import SnapshotError, read_snapshot


class MetadataLogError(Exception):
    """The directory or file cannot be read; the message says which file and where."""


@dataclass(frozen=True, slots=True)
class LogBatch:
    """One Raft entry of the metadata log: its records (none for Raft's own entries)."""

    offset: int
    term: int
    append_time_ms: int
    records: tuple[pb.MetadataRecord, ...]
    kind: str  # "records", "noop" (a new leader's entry) or "membership"


def open_snapshot(path: str) -> BinaryIO:
    """A metadata snapshot as a seekable file: a plain metadata snapshot file, or the payload
    of a Raft snapshot file (``*.snap`` in ``snapshots/``)."""
    if not os.path.exists(path):
        raise MetadataLogError(f"{path}: no such file")
    if os.path.isdir(path):
        raise MetadataLogError(f"{path} is a directory; use --directory for a metadata log directory")
    try:
        if is_raft_snapshot(path):
            return open_payload(path)  # type: ignore[return-value]
        return open(path, "rb")
    except (OSError, StorageError) as e:
        raise MetadataLogError(str(e)) from None


def read_snapshot_file(path: str) -> MetadataImage:
    with open_snapshot(path) as f:
        try:
            return read_snapshot(f)
        except SnapshotError as e:
            raise MetadataLogError(f"snapshot {path}: byte {e.offset}: {e.problem}") from None


class MetadataLogDir:
    """The snapshot and log of one metadata log directory, read once at construction."""

    def __init__(self, path: str) -> None:
        if not os.path.isdir(path):
            raise MetadataLogError(f"{path} is not a directory")
        meta = os.path.join(path, "meta.properties")
        if not os.path.exists(meta) and not os.path.isdir(os.path.join(path, "wal")):
            raise MetadataLogError(f"{path} is not a metadata log directory (no meta.properties or wal/)")
        self.path = path
        self.cluster_id = read_properties(meta).get("cluster.id", "") if os.path.exists(meta) else ""
        try:
            self._log = replay(path, verify=True)
        except StorageError as e:
            raise MetadataLogError(str(e)) from None
        self.snapshot_path = self._log.snapshot_path
        self.snapshot_offset = self._log.snapshot.index if self._log.snapshot else 0
        self.snapshot_term = self._log.snapshot.term if self._log.snapshot else 0
        self.torn_tail = (f"{self._log.torn_path} from byte {self._log.torn_at}"
                          if self._log.torn_path else "")
        self._batches: list[LogBatch] | None = None

    @property
    def end_offset(self) -> int:
        """The last offset in the directory (committed or not)."""
        return self.snapshot_offset + len(self._log.entries)

    def batches(self) -> list[LogBatch]:
        """Every entry after the snapshot, decoded."""
        if self._batches is None:
            out = []
            for e in self._log.entries:
                if e.type == EntryType.NORMAL:
                    try:
                        batch = decode_batch(e.data)
                    except RecordError as err:
                        raise MetadataLogError(f"{self.path}: entry at offset {e.index}: {err}") from None
                    out.append(LogBatch(e.index, e.term, batch.append_time_ms, tuple(batch.records), "records"))
                else:
                    kind = "noop" if e.type == EntryType.NOOP else "membership"
                    out.append(LogBatch(e.index, e.term, 0, (), kind))
            self._batches = out
        return self._batches

    def snapshot_image(self) -> MetadataImage:
        if self.snapshot_path is None:
            return MetadataImage.empty(self.cluster_id)
        return read_snapshot_file(self.snapshot_path)

    def image_at(self, offset: int | None = None) -> MetadataImage:
        """The image as of ``offset`` (default: the end of the log)."""
        if offset is not None and offset < self.snapshot_offset:
            raise MetadataLogError(
                f"offset {offset} is before this directory's oldest state (its snapshot at offset "
                f"{self.snapshot_offset}); the records before it were compacted away")
        image = self.snapshot_image()
        return replay_batches(image, [b for b in self.batches() if offset is None or b.offset <= offset])

    def history(self) -> Iterator[tuple[LogBatch, MetadataImage]]:
        """Each batch with the image right after it, from the snapshot on."""
        image = self.snapshot_image()
        for b in self.batches():
            image = replay_batches(image, [b])
            yield b, image


def replay_batches(image: MetadataImage, batches: list[LogBatch]) -> MetadataImage:
    if not batches:
        return image
    delta = MetadataDelta(image)
    try:
        for b in batches:
            delta.replay_batch(b.records, b.offset, b.term)
    except RecordError as e:
        raise MetadataLogError(f"cannot replay the log: {e}") from None
    return delta.apply()
