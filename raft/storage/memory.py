"""Storage that keeps nothing across restarts: for tests, and for embedders whose state is
rebuilt from elsewhere (a :class:`~raft.storage.base.Storage`)."""
from __future__ import annotations

import io
import zlib
from typing import BinaryIO, Callable

from ..messages import BytesReceiver, BytesSnapshotSource, Membership, Ready, SnapshotMeta
from .base import RecoveredState


class MemoryStorage:
    cluster_id: str | None = None
    directory_id = ""

    def recover(self) -> RecoveredState:
        return RecoveredState()

    def save(self, rd: Ready) -> None:
        pass

    def receive_snapshot(self, meta: SnapshotMeta) -> BytesReceiver:
        return BytesReceiver(meta)

    def write_snapshot(self, index: int, term: int, membership: Membership, context: bytes,
                       write_payload: Callable[[BinaryIO], None]) -> BytesSnapshotSource:
        buf = io.BytesIO()
        write_payload(buf)
        data = buf.getvalue()
        return BytesSnapshotSource(SnapshotMeta(index, term, membership, len(data), zlib.crc32(data), context), data)

    def compact(self, meta: SnapshotMeta) -> None:
        pass

    def close(self) -> None:
        pass
