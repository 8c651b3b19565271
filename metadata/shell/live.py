"""The live source: a read-only view of a running controller quorum (``--bootstrap-controller``).

It reads what a broker reads. Opening fetches the committed log with FetchMetadata from offset
1 to the high watermark; when the controller has compacted that far back it answers
OFFSET_OUT_OF_RANGE, and the source downloads the controller's snapshot (FetchSnapshot) and
continues after it, as ``brokerd.metadata_fetcher.MetadataFetcher`` does. Unlike that
fetcher, it keeps every batch it saw, so ``--at-offset`` and ``changes`` reach back over the
part of the log it fetched. ``quorum()`` is the leader's DescribeQuorum answer.

``refresh()`` (interactive mode, before each command line) repeats the fetch from the last
offset without waiting (``max_wait_ms=0``), and DescribeQuorum, so the view follows the cluster;
one-shot and scripted runs read once, and all their commands see one state.

The shell is synchronous and the controller client is asyncio gRPC, so the source runs its
own event loop in a daemon thread. Each round trip returns what it fetched and the shell's
thread applies it, so a round trip abandoned with Ctrl-C leaves the view as it was.
"""
from __future__ import annotations

import asyncio
import io
import threading
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from protos import controller_pb2 as pb
from common.tls import TLSConfig

from ..client import ControllerClient, Req, Resp, Rpc, parse_bootstrap
from common.errors import ErrorCode, KafkaError
from ..image import MetadataImage
from ..log_dir import LogBatch, MetadataLogError, replay_batches
from ..records import RecordError, decode_batch
from ..snapshot import SnapshotError, read_snapshot
from .source import MetadataSource, QuorumState, RecordHistory, ReplicaState, SourceError

DEFAULT_TIMEOUT = 10.0
FETCH_BYTES = 4 << 20       # per FetchMetadata answer, as a broker asks
SNAPSHOT_CHUNK = 1 << 20    # per FetchSnapshot answer
SNAPSHOT_RETRIES = 5        # a snapshot replaced while being downloaded: start again

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class _Fetched:
    """One catch-up's result, applied by the shell's thread: a snapshot to restart from (when
    the log no longer reached back far enough), the batches after it, the quorum now."""

    snapshot: MetadataImage | None
    batches: list[LogBatch]
    quorum: QuorumState
    cluster_id: str


class LiveSource(MetadataSource):
    """The committed metadata of a controller quorum, fetched over the network."""

    def __init__(self, bootstrap: str, *, timeout: float = DEFAULT_TIMEOUT, tls: TLSConfig | None = None) -> None:
        try:
            addresses = parse_bootstrap(bootstrap)
        except KafkaError as e:
            raise SourceError(e.message) from None
        self.description = f"controller quorum at {','.join(addresses)}"
        self._client = ControllerClient(addresses, timeout=timeout, attempt_timeout=min(timeout, 5.0), tls=tls,
                                        give_up_unconnectable=True)  # a wrong address: say so at once
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True,
                                        name="metadata-shell-live")
        self._thread.start()
        self._base = self._image = MetadataImage.empty()
        self._batches: list[LogBatch] = []
        self._history: RecordHistory | None = None
        self._quorum = QuorumState()
        try:
            fetched = self._run(self._catch_up(0, 0))
            if fetched.snapshot is None:  # the log reaches back to offset 1
                self._base = self._image = MetadataImage.empty(fetched.cluster_id)
            self._apply(fetched)
        except BaseException:
            self.close()
            raise

    # -- MetadataSource ----------------------------------------------------------------------

    def image(self) -> MetadataImage:
        return self._image

    def quorum(self) -> QuorumState:
        return self._quorum

    def history(self) -> RecordHistory:
        if self._history is None:
            self._history = RecordHistory(self._base, tuple(self._batches))
        return self._history

    def refresh(self) -> Sequence[str]:
        before = self._image.offset
        fetched = self._run(self._catch_up(before, self._image.epoch))
        self._apply(fetched)
        if fetched.snapshot is None:
            return ()
        return (f"the controller compacted its log past offset {before}: history now starts "
                f"at its snapshot at offset {fetched.snapshot.offset}",)

    def check_offset(self, offset: int, history: RecordHistory) -> None:
        first, last = history.first_offset, history.last_offset
        if offset < first:
            raise SourceError(f"offset {offset} is before the history fetched from the "
                              f"{self.description}: the controller had compacted its log into "
                              f"a snapshot at offset {first}, so the history starts there")
        if offset > last:
            raise SourceError(f"offset {offset} is after the end of the {self.description} "
                              f"(its last committed offset is {last})")

    def no_records_message(self, history: RecordHistory) -> str:
        return (f"the {self.description} has no log records after its snapshot at offset "
                f"{history.first_offset} yet, so nothing to compare")

    def close(self) -> None:
        if self._loop.is_closed():
            return
        if self._thread.is_alive():
            try:
                asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop).result(5)
            except Exception:  # best effort: the process is about to end anyway
                pass
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(5)
        if not self._loop.is_running():
            self._loop.close()

    # -- fetching ----------------------------------------------------------------------------

    def _apply(self, fetched: _Fetched) -> None:
        """Replay what was fetched; the view changes only if all of it applies."""
        base = fetched.snapshot if fetched.snapshot is not None else self._base
        image = fetched.snapshot if fetched.snapshot is not None else self._image
        try:
            image = replay_batches(image, fetched.batches)
        except MetadataLogError as e:
            raise SourceError(f"{self.description}: {e}") from None
        if fetched.snapshot is not None:
            self._batches = []
        self._base, self._image = base, image
        self._batches.extend(fetched.batches)
        self._history = None
        self._quorum = fetched.quorum

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the source's loop and wait; Ctrl-C abandons it."""
        future = asyncio.run_coroutine_threadsafe(coro, self._loop)
        try:
            return future.result()
        except BaseException:
            future.cancel()
            raise

    async def _call(self, rpc: Rpc[Req, Resp], request: Req) -> Resp:
        method = rpc.name
        try:
            return await self._client.send(rpc, request)
        except KafkaError as e:
            message = " ".join(e.message.split()) or e.code.name  # one line
            if e.code in (ErrorCode.REQUEST_TIMED_OUT, ErrorCode.NETWORK_EXCEPTION):  # these name the addresses
                raise SourceError(message) from None
            raise SourceError(f"{self.description}: {method}: {e.code.name}: {message}") from None

    async def _catch_up(self, offset: int, term: int) -> _Fetched:
        """Fetch the committed batches after ``offset`` (whose entry has ``term``) up to the
        high watermark of the first answer, falling back to the snapshot if the log was
        compacted past ``offset``; then ask for the quorum's state."""
        snapshot: MetadataImage | None = None
        batches: list[LogBatch] = []
        target: int | None = None
        restarts = 0
        while True:
            resp = await self._call(ControllerClient.fetch_metadata, pb.FetchMetadataRequest(
                offset=offset + 1, max_wait_ms=0, max_bytes=FETCH_BYTES, broker_id=-1))
            if target is None:
                target = resp.high_watermark
            if resp.error_code == ErrorCode.OFFSET_OUT_OF_RANGE:
                snapshot = await self._download(resp.snapshot_offset)
                if snapshot is None:
                    restarts += 1
                    if restarts > SNAPSHOT_RETRIES:
                        raise SourceError(f"{self.description}: its snapshot kept being "
                                          f"replaced while it was downloaded; try again")
                    continue
                batches, offset, term = [], snapshot.offset, snapshot.epoch
                target = max(target, offset + 1)
                continue
            if resp.error_code != ErrorCode.NONE:
                raise SourceError(f"{self.description}: FetchMetadata from offset {offset + 1}: "
                                  f"error {resp.error_code}")
            for b in resp.batches:
                batches.append(self._log_batch(b, term))
                offset, term = b.offset, b.term
            if not resp.batches or offset + 1 >= target:
                break
        describe = await self._call(ControllerClient.describe_quorum, pb.DescribeQuorumRequest())
        return _Fetched(snapshot, batches, _quorum_state(describe), describe.cluster_id)

    async def _download(self, snapshot_offset: int) -> MetadataImage | None:
        """The controller's snapshot at ``snapshot_offset``, or None if it was replaced by a
        newer one meanwhile (the caller asks again)."""
        buf = io.BytesIO()
        position, size = 0, None
        while size is None or position < size:
            r = await self._call(ControllerClient.fetch_snapshot, pb.FetchSnapshotRequest(
                snapshot_offset=snapshot_offset, position=position, max_bytes=SNAPSHOT_CHUNK))
            if r.error_code == ErrorCode.OFFSET_OUT_OF_RANGE:
                return None
            if r.error_code != ErrorCode.NONE:
                raise SourceError(f"{self.description}: FetchSnapshot at offset "
                                  f"{snapshot_offset}: error {r.error_code}")
            size = r.size
            buf.write(r.data)
            position += len(r.data)
            if not r.data and position < size:
                raise SourceError(f"{self.description}: the download of its snapshot at offset "
                                  f"{snapshot_offset} stalled at byte {position} of {size}")
        buf.seek(0)
        try:
            return read_snapshot(buf)
        except SnapshotError as e:
            raise SourceError(f"{self.description}: its snapshot at offset {snapshot_offset}: "
                              f"byte {e.offset}: {e.problem}") from None

    def _log_batch(self, b: pb.MetadataBatch, previous_term: int) -> LogBatch:
        """A fetched entry as the shell's history holds it. FetchMetadata sends Raft's own
        entries without data and without saying which kind; every new leader's first entry
        is its no-op (Raft §8), so an empty entry that starts a term is the no-op and one
        within a term a membership change."""
        if not b.data:
            return LogBatch(b.offset, b.term, 0, (),
                            "noop" if b.term != previous_term else "membership")
        try:
            batch = decode_batch(b.data)
        except RecordError as e:
            raise SourceError(f"{self.description}: entry at offset {b.offset}: {e}") from None
        return LogBatch(b.offset, b.term, batch.append_time_ms, tuple(batch.records), "records")

    async def _shutdown(self) -> None:
        """Close the channels on the loop that opened them (gRPC asyncio insists)."""
        await self._client.close()


def _quorum_state(r: pb.DescribeQuorumResponse) -> QuorumState:
    voters = tuple(sorted((_replica(s) for s in r.voters), key=lambda s: s.id))
    observers = tuple(sorted((_replica(s) for s in r.observers), key=lambda s: s.id))
    static = not any(s.directory_id for s in r.voters)  # static voters have no directory ids
    # The active controller's view: a leader voted for itself in its epoch; a static quorum
    # has no learners (DescribeQuorum does not list a dynamic quorum's).
    return QuorumState(leader=r.leader_id, epoch=r.leader_epoch,
                       voters=tuple(s.id for s in voters),
                       learners=() if static else None,
                       observers=tuple(s.id for s in observers),
                       high_watermark=r.high_watermark, voted_for=r.leader_id if r.leader_id > 0 else None,
                       voter_states=voters, observer_states=observers, static=static)


def _replica(s: pb.ReplicaState) -> ReplicaState:
    return ReplicaState(id=s.replica_id, log_end_offset=s.log_end_offset, lag=s.lag,
                        last_fetch_ms=_known(s.last_fetch_timestamp),
                        last_caught_up_ms=_known(s.last_caught_up_timestamp))


def _known(timestamp_ms: int) -> int | None:
    """DescribeQuorum's -1 (never heard from) as the tree's null."""
    return timestamp_ms if timestamp_ms >= 0 else None
