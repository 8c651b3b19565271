"""The metadata log as a Raft state machine: every committed RecordBatch is replayed into an
immutable MetadataImage, and snapshots are metadata snapshot files."""
from __future__ import annotations

from typing import BinaryIO, Callable

from raft.messages import Entry

from .delta import MetadataDelta
from .image import MetadataImage
from .records import decode_batch
from .snapshot import read_info, read_snapshot, write_snapshot


class MetadataStateMachine:
    def __init__(self, cluster_id: str) -> None:
        self.image = MetadataImage.empty(cluster_id)
        self.last_append_ms = 0  # of the last batch: snapshots are stamped with it, not the clock
        self.listeners: list[Callable[[MetadataImage], None]] = []

    def apply(self, entry: Entry) -> MetadataImage:
        """Replay one batch; the proposer receives the image right after it."""
        batch = decode_batch(entry.data)
        delta = MetadataDelta(self.image)
        delta.replay_batch(batch, entry.index, entry.term)
        self.image = delta.apply()
        self.last_append_ms = batch.append_time_ms or self.last_append_ms
        for listener in self.listeners:
            listener(self.image)
        return self.image

    def snapshot(self) -> Callable[[BinaryIO], None]:
        image, created = self.image, self.last_append_ms
        return lambda f: write_snapshot(image, f, created_ms=created)

    def restore(self, source: BinaryIO) -> None:
        self.last_append_ms = read_info(source).created_ms
        source.seek(0)
        self.image = read_snapshot(source)
        for listener in self.listeners:
            listener(self.image)
