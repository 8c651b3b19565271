"""The quorum controller: it runs on every controller node and acts on the Raft leader (the
active controller).

Writes are computed against a *view*: the committed image plus every batch proposed but not
yet committed, so many writes can be in flight at once and each sees the ones before it (as
Kafka's QuorumController does with its in-memory timeline). A batch is checked by replaying
it onto the view before it is proposed, so a bad batch never reaches the log. When a proposal
fails (leadership lost), the view falls back to the committed image.

A newly elected leader serves writes only once it has applied everything committed before
its term (a read barrier over its own no-op entry): standbys have replayed the same log, so
there is no metadata to reload, which is the point of KRaft (KIP-500).
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from typing import Callable, TypeVar

from common.errors import ErrorCode, KafkaError
from raft.errors import NotLeader, ProposalDropped, RaftError
from raft.messages import Role
from raft.node import RaftNode

from .brokers import BrokerLifecycle
from .delta import MetadataDelta
from .image import METADATA_VERSION, MetadataImage
from .partitions import PREFERRED, elect_leaders, imbalanced
from .records import MetadataRecord, RecordError, encode_batch, feature_level
from .state_machine import MetadataStateMachine

log = logging.getLogger("kraft.controller")
METADATA_VERSION_LEVEL = 1  # the record format this build writes
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class ControllerConfig:
    session_timeout_ms: int = 9000  # broker.session.timeout.ms
    heartbeat_interval_ms: int = 2000  # broker.heartbeat.interval.ms (the brokers')
    default_partitions: int = 1  # num.partitions
    default_replication_factor: int = 1  # default.replication.factor
    write_timeout_s: float = 15.0
    activation_wait_s: float = 5.0  # how long a write waits for a new leader to be ready
    auto_leader_rebalance: bool = True  # auto.leader.rebalance.enable
    leader_imbalance_percentage: int = 10  # leader.imbalance.per.broker.percentage
    leader_imbalance_check_interval_s: float = 300.0  # leader.imbalance.check.interval.seconds
    bootstrap_records: tuple[MetadataRecord, ...] = ()  # a new cluster's first records (metadata.bootstrap)


class NotController(Exception):
    def __init__(self, controller_id: int, endpoint: str | None) -> None:
        self.controller_id = controller_id
        self.endpoint = endpoint
        super().__init__(f"this node is not the active controller; it is "
                         f"{f'node {controller_id} at {endpoint}' if controller_id else 'unknown'}")


class QuorumController:
    def __init__(self, node: RaftNode, sm: MetadataStateMachine, config: ControllerConfig) -> None:
        self.node = node
        self.sm = sm
        self.config = config
        self.brokers = BrokerLifecycle(config.session_timeout_ms / 1000)
        self._pending: list[tuple[int, asyncio.Future, MetadataImage]] = []
        self._building = asyncio.Lock()  # one write is built and appended at a time
        #: Writes that arrived and wait for their turn or are being built: the controller's
        #: event queue (Kafka's EventQueueSize); reads never wait in it.
        self.queued_writes = 0
        #: Called with each write's wait from its arrival to the start of its build, in seconds.
        self.queue_time_observer: Callable[[float], None] | None = None
        # One thread for work that scales with a request: more would fight the event loop for
        # the GIL, and the loop would wake late (metadata/loop_stall.py measures it).
        self._worker = ThreadPoolExecutor(1, thread_name_prefix=f"controller-{node.id}-worker")
        self._active_term = 0
        self._active = asyncio.Event()
        self._tasks: list[asyncio.Task] = []
        self._placement_start = random.randrange(1 << 16)
        self.fetchers: dict[int, tuple[int, float]] = {}  # broker id -> (offset fetched, ms time)
        node.on_role_change(self._role_changed)

    # ------------------------------------------------------------------ activation --

    @property
    def active(self) -> bool:
        return self._active.is_set() and self.node.is_leader and self.node.term == self._active_term

    def _role_changed(self, role: Role, leader: int, term: int) -> None:
        if role == Role.LEADER:
            self._tasks.append(asyncio.get_running_loop().create_task(self._activate(term)))
        else:
            self._deactivate()

    async def _activate(self, term: int) -> None:
        started = time.monotonic()
        try:
            await self.node.read_barrier(timeout=30)
        except (RaftError, asyncio.TimeoutError):
            return
        if not self.node.is_leader or self.node.term != term:
            return
        self._pending.clear()
        self.brokers.reset(self.sm.image)
        self._active_term = term
        self._active.set()
        log.info("node %d is the active controller (term %d, metadata offset %d, ready in %.0f ms)",
                 self.node.id, term, self.sm.image.offset, (time.monotonic() - started) * 1000)
        self._tasks.append(asyncio.get_running_loop().create_task(self._watch_sessions(term)))
        if self.config.auto_leader_rebalance:
            self._tasks.append(asyncio.get_running_loop().create_task(self._rebalance_leaders(term)))
        if self.sm.image.metadata_version == 0:  # a new cluster: record its metadata.version first
            try:
                first = [feature_level(METADATA_VERSION, METADATA_VERSION_LEVEL), *self.config.bootstrap_records]
                await self.write(lambda view: (first if view.metadata_version == 0 else [], None))
            except (KafkaError, NotController) as e:
                log.warning("could not record metadata.version: %s", e)

    def _deactivate(self) -> None:
        if self._active.is_set():
            log.info("node %d is no longer the active controller", self.node.id)
        self._active.clear()
        self._active_term = 0
        self._pending.clear()
        self.fetchers.clear()

    async def stop(self) -> None:
        self._deactivate()
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._worker.shutdown(wait=False)

    def not_controller(self) -> NotController:
        leader = self.node.leader_id
        return NotController(leader if leader != self.node.id else 0,
                             self.node.addresses.get(leader) if leader != self.node.id else None)

    async def ensure_active(self) -> None:
        """Wait briefly for a just-elected leader to be ready; else NOT_CONTROLLER."""
        if self.active:
            return
        if self.node.is_leader:
            try:
                await asyncio.wait_for(self._active.wait(), self.config.activation_wait_s)
            except asyncio.TimeoutError:
                pass
            if self.active:
                return
        raise self.not_controller()

    # ------------------------------------------------------------------ writes --

    @property
    def view(self) -> MetadataImage:
        return self._pending[-1][2] if self._pending else self.sm.image

    async def write(self, build: Callable[[MetadataImage], tuple[list[MetadataRecord], T]],
                    *, validate_only: bool = False, in_thread: bool = False) -> T:
        """Build records from the current view, commit them as one batch, return ``build``'s
        result once they are applied. Raises KafkaError, NotController, or KafkaError
        REQUEST_TIMED_OUT when the outcome is unknown.

        Writes are built one at a time, in order, each on the view left by the one before.
        ``in_thread`` builds, checks and encodes in a worker thread, for user operations that
        scale with their input (up to MAX_RECORDS_PER_USER_OP records): the event loop keeps
        answering heartbeats meanwhile. ``build`` then reads only the view it is given."""
        async with self._turn():
            view, term, index = self.view, self.node.term, self.node.next_index
            if in_thread:
                result, data, after = await self.in_worker(self._prepare, build, view, index, term, validate_only)
                if not self.active or self.node.next_index != index:
                    # leadership or the log moved while we worked; nothing was written
                    raise (self.not_controller() if not self.active else KafkaError(
                        ErrorCode.THROTTLING_QUOTA_EXCEEDED, "the controller's log moved meanwhile; "
                                                             "nothing was written"))
            else:
                result, data, after = self._prepare(build, view, index, term, validate_only)
            if validate_only:
                return result
            if not data:
                # The answer was read from the view, which may hold batches not yet committed
                # (a fence proposed by a controller that has just lost its leadership): answer
                # once the last of them commits, so no one acts on state that may never exist.
                rests_on = self._pending[-1][1] if self._pending else None
            else:
                try:
                    fut = self.node.propose_nowait(data)
                    assert fut.index == index, "the batch was built for another index"  # next_index, above
                except NotLeader:
                    raise self.not_controller() from None
                except ProposalDropped as e:  # not appended (a transfer, backpressure): nothing was written
                    raise KafkaError(ErrorCode.THROTTLING_QUOTA_EXCEEDED, f"the controller is busy and wrote "
                                   f"nothing: {e}") from None
                assert after is not None, "records were written, so there is a view after them"
                entry = (index, fut, after)
                self._pending.append(entry)
        if not data:
            if rests_on is not None:
                try:  # it fails as the write that made it does
                    await asyncio.wait_for(asyncio.shield(rests_on), self.config.write_timeout_s)
                except (RaftError, asyncio.TimeoutError):
                    raise self.not_controller() if not self.active else KafkaError(
                        ErrorCode.REQUEST_TIMED_OUT, "the metadata this answer rests on did not commit in time") from None
            return result
        try:
            await asyncio.wait_for(asyncio.shield(fut), self.config.write_timeout_s)
        except ProposalDropped:  # a later leader replaced the entry: nothing was written
            self._drop_from(index)
            raise self.not_controller() from None
        except RaftError as e:  # OutcomeUnknown: a snapshot superseded it, or we are stopping
            self._drop_from(index)
            raise KafkaError(ErrorCode.REQUEST_TIMED_OUT, f"the controller lost track of the write: {e}") from None
        except asyncio.TimeoutError:
            self._drop_from(index)
            raise KafkaError(ErrorCode.REQUEST_TIMED_OUT,
                           "the write did not commit in time; it may or may not have been applied") from None
        finally:
            if entry in self._pending:
                self._pending.remove(entry)
        return result

    @contextlib.asynccontextmanager
    async def _turn(self) -> AsyncIterator[None]:
        """A write's turn to be built, after the writes that arrived before it: counted in
        ``queued_writes`` from its arrival until its batch is appended (or it fails), and its
        wait until the build starts reported to ``queue_time_observer``, as Kafka's controller
        event queue reports EventQueueSize and EventQueueTimeMs."""
        arrived = time.monotonic()
        self.queued_writes += 1
        try:
            await self.ensure_active()
            async with self._building:
                if self.queue_time_observer is not None:
                    self.queue_time_observer(time.monotonic() - arrived)
                yield
        finally:
            self.queued_writes -= 1

    async def in_worker(self, fn: Callable[..., T], *args: object) -> T:
        """Run ``fn`` in the controller's worker thread; it must read only immutable state."""
        return await asyncio.get_running_loop().run_in_executor(self._worker, fn, *args)

    @staticmethod
    def _prepare(build: Callable[[MetadataImage], tuple[list[MetadataRecord], T]], view: MetadataImage,
                 index: int, term: int, validate_only: bool) -> tuple[T, bytes, MetadataImage | None]:
        """The result, the encoded batch (empty when there is nothing to write) and the view
        after it; the batch is checked by replaying it onto the view, so a bad batch never
        reaches the log."""
        records, result = build(view)
        if not records or validate_only:
            return result, b"", None
        delta = MetadataDelta(view)
        try:
            delta.replay_batch(records, index, term)
        except RecordError as e:  # our own bug: never write it
            log.error("refusing to write an invalid batch: %s", e)
            raise KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, f"internal error: {e}") from None
        return result, encode_batch(records, append_time_ms=int(time.time() * 1000)), delta.apply()

    def _drop_from(self, index: int) -> None:
        """A proposal failed: it and everything after it will not commit in this term."""
        self._pending = [p for p in self._pending if p[0] < index]

    def next_placement_start(self) -> int:
        self._placement_start += 1
        return self._placement_start

    # ------------------------------------------------------------------ sessions --

    async def _watch_sessions(self, term: int) -> None:
        period = min(1.0, self.config.session_timeout_ms / 4000)
        woke = time.monotonic()
        while self.active and self.node.term == term:
            await asyncio.sleep(period)
            if not self.active:
                return
            slept, woke = time.monotonic() - woke, time.monotonic()
            if slept > period + 1.0:
                # This controller itself was not running (SIGSTOP, a long pause): the brokers'
                # silence is no evidence, and it may not even lead any more. Fresh sessions.
                log.info("node %d did not run for %.1fs; every broker gets a fresh session", self.node.id, slept)
                self.brokers.reset(self.view)
                continue
            for b in self.brokers.expired(self.view):
                log.info("fencing broker %d: no heartbeat for %.1fs", b.id,
                         self.config.session_timeout_ms / 1000)
                def fence(view: MetadataImage, broker_id: int = b.id) -> tuple[list[MetadataRecord], None]:
                    if broker_id not in view.brokers or view.brokers[broker_id].fenced:
                        return [], None
                    return self.brokers.fence(view, view.brokers[broker_id]), None
                try:
                    await self.write(fence)
                except (KafkaError, NotController) as e:
                    log.warning("could not fence broker %d: %s", b.id, e)
                    return

    async def _rebalance_leaders(self, term: int) -> None:
        """Kafka's auto leader rebalance: every leader.imbalance.check.interval.seconds, a broker
        that leads fewer than (100 - leader.imbalance.per.broker.percentage)% of the partitions
        it is the preferred replica of gets them back, where it is alive and in their ISR."""
        while self.active and self.node.term == term:
            await asyncio.sleep(self.config.leader_imbalance_check_interval_s)
            if not self.active:
                return
            wanted = imbalanced(self.view, self.config.leader_imbalance_percentage)
            if not wanted:
                continue
            try:
                results = await self.write(partial(elect_leaders, kind=PREFERRED, wanted=wanted), in_thread=True)
            except (KafkaError, NotController) as e:
                log.warning("could not rebalance leaders: %s", e)
                continue
            moved = [f"{r.topic}-{r.partition}" for r in results if r.code == ErrorCode.NONE]
            if moved:
                log.info("leader rebalance: %d partitions led by their preferred replica again (%s)", len(moved),
                         ", ".join(moved[:10]) + (", ..." if len(moved) > 10 else ""))

    # ------------------------------------------------------------------ reads --

    async def read_image(self) -> MetadataImage:
        """The committed image, linearizably (a read barrier on the active controller)."""
        await self.ensure_active()
        try:
            await self.node.read_barrier(timeout=self.config.write_timeout_s)
        except NotLeader:
            raise self.not_controller() from None
        except (RaftError, asyncio.TimeoutError) as e:
            raise KafkaError(ErrorCode.REQUEST_TIMED_OUT, f"could not confirm leadership: {e}") from None
        return self.sm.image
