"""A broker's view of the metadata log, pulled from the active controller (KRaft: brokers
fetch metadata deltas instead of being pushed full state, KIP-500).

The fetcher long-polls FetchMetadata from its last offset (as messages of one stream to the
active controller, ``metadata.controller_stream``) and replays each batch into a local
image. When its offset is older than the controller's log (compacted), it downloads the
controller's snapshot, loads it, and continues from the snapshot's offset. Listeners see each
new image with the delta that produced it, which is what drives a broker's partitions.
"""
from __future__ import annotations

import asyncio
import io
import logging
from typing import Callable

from common.errors import ErrorCode, KafkaError
from metadata.client import ControllerClient
from metadata.delta import MetadataChanges, MetadataDelta, changes_between
from metadata.image import MetadataImage
from metadata.records import RecordError, decode_batch
from metadata.snapshot import read_snapshot
from protos import controller_pb2 as pb

log = logging.getLogger("brokerd.metadata")

REPLAY_IN_THREAD_BYTES = 64 << 10
Listener = Callable[[MetadataImage, MetadataChanges | None], None]


class MetadataFetcher:
    def __init__(self, client: ControllerClient, broker_id: int, image: MetadataImage | None = None, *,
                 max_wait_ms: int = 500, max_bytes: int = 4 << 20) -> None:
        self.client = client
        self.broker_id = broker_id
        self.image = image or MetadataImage.empty()
        self.offset = self.image.offset  # the last log offset replayed
        self.high_watermark = 0  # exclusive, from the last answer
        self.max_wait_ms = max_wait_ms
        self.max_bytes = max_bytes
        self.listeners: list[Listener] = []
        self.snapshots_loaded = 0
        self.first_fetch_offset: int | None = None
        self._task: asyncio.Task | None = None
        self._caught_up = asyncio.Event()

    @property
    def caught_up(self) -> bool:
        return self.high_watermark > 0 and self.offset + 1 >= self.high_watermark

    async def fetch_once(self) -> int:
        """One round trip; returns how many batches were applied."""
        req = pb.FetchMetadataRequest(offset=self.offset + 1, max_wait_ms=self.max_wait_ms,
                                      max_bytes=self.max_bytes, broker_id=self.broker_id)
        if self.first_fetch_offset is None:
            self.first_fetch_offset = req.offset
        # An attempt waits for the long poll plus a margin, not longer: a controller that hangs
        # is left for the next one soon (the client then asks the others who leads). The polls
        # go as messages of one stream to the active controller (FetchMetadataStream), unary
        # calls to one that does not serve it.
        resp = await self.client.fetch_metadata(req, timeout=30, attempt_timeout=self.max_wait_ms / 1000 + 2,
                                                streamed=True)
        self.high_watermark = resp.high_watermark
        if resp.error_code == ErrorCode.OFFSET_OUT_OF_RANGE:
            await self._load_snapshot(resp.snapshot_offset)
            return 0
        if not resp.batches:
            self._notice_caught_up()
            return 0
        def replay() -> tuple[MetadataImage, MetadataChanges]:
            delta = MetadataDelta(self.image)
            try:
                for b in resp.batches:
                    delta.replay_batch(decode_batch(b.data), b.offset, b.term)
            except RecordError as e:
                raise KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, f"cannot replay the metadata log: {e}") from None
            return delta.apply(), delta.changes()
        # Only this task changes the image, so a large answer (a 10,000-partition create) may be
        # replayed in a thread while the broker goes on serving.
        large = sum(len(b.data) for b in resp.batches) >= REPLAY_IN_THREAD_BYTES
        self.image, changes = await asyncio.to_thread(replay) if large else replay()
        self.offset = resp.batches[-1].offset
        for listener in self.listeners:
            listener(self.image, changes)
        self._notice_caught_up()
        return len(resp.batches)

    def _notice_caught_up(self) -> None:
        if self.caught_up:
            self._caught_up.set()

    async def _load_snapshot(self, snapshot_offset: int) -> None:
        buf = io.BytesIO()
        pos, size = 0, None
        while size is None or pos < size:
            r = await self.client.fetch_snapshot(pb.FetchSnapshotRequest(
                snapshot_offset=snapshot_offset, position=pos, max_bytes=1 << 20), timeout=30)
            if r.error_code == ErrorCode.OFFSET_OUT_OF_RANGE:
                log.info("the controller replaced snapshot %d meanwhile; starting again", snapshot_offset)
                return
            size = r.size
            buf.write(r.data)
            pos += len(r.data)
            if not r.data and pos < size:
                raise KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, "snapshot download stalled")
        buf.seek(0)
        before = self.image

        def decode() -> tuple[MetadataImage, MetadataChanges]:
            image = read_snapshot(buf)
            return image, changes_between(before, image)
        # Decoded, and compared with the image the listeners last saw, in a thread; then
        # swapped in here. Only this task changes the image, so nothing is replayed between.
        self.image, changes = await asyncio.to_thread(decode)
        self.offset = snapshot_offset
        self.snapshots_loaded += 1
        log.info("loaded the metadata snapshot at offset %d (%d bytes)", snapshot_offset, size)
        for listener in self.listeners:
            listener(self.image, changes)

    async def run(self) -> None:
        """Fetch forever; errors are logged and retried (the client already backs off)."""
        while True:
            try:
                await self.fetch_once()
            except asyncio.CancelledError:
                raise
            except KafkaError as e:
                log.warning("metadata fetch failed: %s", e)
                await asyncio.sleep(0.5)

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self.run(), name="metadata-fetcher")

    async def wait_caught_up(self, timeout: float) -> None:
        await asyncio.wait_for(self._caught_up.wait(), timeout)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
