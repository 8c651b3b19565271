"""The broker's metadata position on disk, so that a restart resumes fetching the metadata log
where it stopped instead of from offset 1 (Kafka's brokers keep their own copy of
``__cluster_metadata`` for the same reason).

The position is a metadata snapshot (``metadata.snapshot`` format, which records the offset
and epoch it was taken at) in ``<first log dir>/__cluster_metadata/``, written after the
broker first catches up, every ``metadata.log.max.snapshot.interval.ms`` while the metadata
changes, and at shutdown. Each write is atomic (temporary file, fsync, rename); the two
newest are kept, and an unreadable newest file falls back to the older one.
"""
from __future__ import annotations

import asyncio
import logging
import os
import re
import time

from metadata.delta import MetadataChanges
from metadata.image import MetadataImage
from metadata.snapshot import SnapshotError, read_snapshot, write_snapshot

log = logging.getLogger("brokerd.metadata")

DIR_NAME = "__cluster_metadata"
_NAME = re.compile(r"^(\d{20})\.snap$")
KEEP = 2


class MetadataCheckpoint:
    def __init__(self, log_dir: str, cluster_id: str, interval_ms: int) -> None:
        self.dir = os.path.join(log_dir, DIR_NAME)
        self.cluster_id = cluster_id
        self.interval_s = interval_ms / 1000
        self.image: MetadataImage | None = None
        self.saved_offset = 0
        self._task: asyncio.Task | None = None

    def _files(self) -> list[str]:
        try:
            return sorted((n for n in os.listdir(self.dir) if _NAME.match(n)), reverse=True)
        except FileNotFoundError:
            return []

    def load(self) -> MetadataImage | None:
        """The newest readable snapshot of this cluster's metadata, or None."""
        for name in self._files():
            path = os.path.join(self.dir, name)
            try:
                image = read_snapshot(path)
            except (SnapshotError, OSError) as e:
                log.warning("ignoring the local metadata snapshot %s: %s", path, e)
                continue
            if image.cluster_id != self.cluster_id:
                log.warning("ignoring the local metadata snapshot %s: it is of cluster %s, not %s",
                            path, image.cluster_id, self.cluster_id)
                continue
            self.saved_offset = image.offset
            return image
        return None

    def listener(self, image: MetadataImage, changes: MetadataChanges | None) -> None:
        """A MetadataFetcher listener: remember the newest image."""
        self.image = image

    def save(self, image: MetadataImage | None = None) -> None:
        image = image or self.image
        if image is None or image.offset <= self.saved_offset:
            return
        os.makedirs(self.dir, exist_ok=True)
        write_snapshot(image, os.path.join(self.dir, f"{image.offset:020d}.snap"), created_ms=int(time.time() * 1000))
        self.saved_offset = image.offset
        for old in self._files()[KEEP:]:
            try:
                os.unlink(os.path.join(self.dir, old))
            except OSError:
                pass

    async def save_async(self) -> None:
        try:
            await asyncio.get_running_loop().run_in_executor(None, self.save, self.image)
        except OSError as e:
            log.error("cannot write the local metadata snapshot in %s: %s", self.dir, e)

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="metadata-checkpoint")

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            await self.save_async()

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        await self.save_async()
