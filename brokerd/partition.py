"""One replica of a partition on this broker, as leader or follower (Kafka's ``Partition``).

The controller decides who leads and which replicas are in sync; this object carries out its
decision. As leader it appends producers' batches under its leader epoch, tracks each
follower's log end offset (LEO) from the offsets the follower fetches at, and moves the high
watermark to the smallest LEO over the ISR (Kafka's Partition: AR = ISR + OSR, HW = min LEO over the
ISR, consumers read below the HW). While an ISR change is being proposed, the larger of the
old and new ISR counts (Kafka's "maximal ISR"), so the HW never gets ahead of a replica the
controller may still consider in sync. acks=all producers wait here for the HW to pass their
batch, and DeleteRecords for the followers' log starts to pass its offset.
"""
from __future__ import annotations

import asyncio
import heapq
import itertools
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from enum import Enum

from metadata.image import PartitionRegistration

from clients.records import batches
from protos import broker_pb2 as pb

from .config import LogConfig
from common.errors import ErrorCode, KafkaError
from .partition_log import AppendInfo, PartitionLog

NO_LEADER = -1


def now_ms() -> float:
    return time.monotonic() * 1000


class Role(Enum):
    LEADER = "leader"
    FOLLOWER = "follower"


class Change(Enum):
    """What a metadata update did to this replica."""

    NONE = 0
    BECAME_LEADER = 1
    BECAME_FOLLOWER = 2  # or followed a new leader / a new epoch: truncate, then fetch
    UPDATED = 3          # same leader and epoch: ISR or replicas changed


@dataclass(slots=True)
class FollowerState:
    """The leader's view of one follower (Kafka's Replica)."""

    log_end_offset: int = -1        # unknown until it fetches from this leader
    last_caught_up_ms: float = 0.0
    last_fetch_ms: float = 0.0
    last_fetch_leader_leo: int = -1
    log_start_offset: int = -1      # the follower's, sent with each fetch; unknown until then


class Partition:
    def __init__(self, broker_id: int, topic: str, topic_id: uuid.UUID, index: int, log: PartitionLog,
                 config: LogConfig, clock: Callable[[], float] = now_ms) -> None:
        self.broker_id = broker_id
        self.topic = topic
        self.topic_id = topic_id
        self.index = index
        self.log = log
        self.config = config
        self.clock = clock
        self.role = Role.FOLLOWER
        self.replicas: tuple[int, ...] = ()
        self.isr: tuple[int, ...] = ()
        self.adding: tuple[int, ...] = ()  # replicas a reassignment is adding (replication_quota.py)
        self.leader = NO_LEADER
        self.leader_epoch = -1
        self.partition_epoch = -1
        self.epoch_start_offset = 0       # the log end when this broker became leader
        self.pending_isr: tuple[int, ...] | None = None  # an AlterPartition in flight
        self.followers: dict[int, FollowerState] = {}
        self.stopped = False
        self._hw_waiters: list[tuple[int, int, asyncio.Future]] = []
        self._seq = itertools.count()
        self._change_waiters: list[asyncio.Future] = []
        self._start_waiters: list[asyncio.Future] = []  # DeleteRecords waiting for followers' log starts

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.index}"

    @property
    def being_added(self) -> bool:
        """This replica is joining by a reassignment, so the follower throttle applies to it."""
        return self.broker_id in self.adding

    @property
    def is_leader(self) -> bool:
        return self.role == Role.LEADER and not self.stopped

    @property
    def maximal_isr(self) -> tuple[int, ...]:
        if self.pending_isr is None:
            return self.isr
        return tuple(dict.fromkeys(self.isr + self.pending_isr))

    # -- metadata -------------------------------------------------------------------------------

    def update(self, reg: PartitionRegistration) -> Change:
        """Apply the controller's registration of this partition."""
        if reg.leader_epoch < self.leader_epoch or (reg.leader_epoch == self.leader_epoch
                                                    and reg.partition_epoch <= self.partition_epoch):
            if (reg.leader_epoch, reg.partition_epoch) == (self.leader_epoch, self.partition_epoch) and (
                    reg.replicas != self.replicas or reg.adding != self.adding):
                # Our AlterPartition's answer got here first with the ISR of this change, but the
                # change also completed a reassignment: the replicas come only from here.
                self.replicas, self.adding = reg.replicas, reg.adding
                if self.role == Role.LEADER:
                    self._track_followers()
                return Change.UPDATED
            return Change.NONE  # older than what we know (an AlterPartition answer got here first)
        new_epoch = reg.leader_epoch != self.leader_epoch
        self.replicas, self.isr, self.partition_epoch = reg.replicas, reg.isr, reg.partition_epoch
        self.adding = reg.adding
        if self.pending_isr is not None and (new_epoch or self.pending_isr == reg.isr):
            self.pending_isr = None
        if reg.leader == self.broker_id:
            if new_epoch or self.role != Role.LEADER:
                self._make_leader(reg.leader_epoch)
                return Change.BECAME_LEADER
            self._track_followers()
            return Change.UPDATED
        was = (self.role, self.leader, self.leader_epoch)
        self.role, self.leader, self.leader_epoch = Role.FOLLOWER, reg.leader, reg.leader_epoch
        if was[0] == Role.LEADER:
            self.followers.clear()
            self._fail_waiters(KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER,
                                           f"Leader not local for partition {self.name} on broker {self.broker_id}"))
            self._notify()
        return Change.BECAME_FOLLOWER if new_epoch or was[1] != reg.leader else Change.UPDATED

    def _track_followers(self) -> None:
        """Follower states for the current replicas (new ones start as caught up now)."""
        self.followers = {r: self.followers.get(r, FollowerState(last_caught_up_ms=self.clock()))
                          for r in self.replicas if r != self.broker_id}
        self.maybe_increment_hw()

    def _make_leader(self, epoch: int) -> None:
        now = self.clock()
        self.role, self.leader, self.leader_epoch = Role.LEADER, self.broker_id, epoch
        self.epoch_start_offset = self.log.log_end_offset
        self.log.assign_epoch(epoch, self.epoch_start_offset)
        # ISR members get a full lag window to show up; their LEOs are unknown until they do.
        self.followers = {r: FollowerState(last_caught_up_ms=now if r in self.isr else 0.0)
                          for r in self.replicas if r != self.broker_id}
        self.pending_isr = None
        self._fail_waiters(KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER,
                                       f"the leader epoch of {self.name} changed to {epoch}"))
        self.maybe_increment_hw()
        self._notify()

    def stop(self) -> None:
        """This broker no longer hosts the replica."""
        self.stopped = True
        self._fail_waiters(KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER,
                                       f"broker {self.broker_id} no longer hosts {self.name}"))
        self._notify()

    def apply_isr(self, leader_epoch: int, partition_epoch: int, isr: tuple[int, ...]) -> None:
        """The controller accepted (or answered) our AlterPartition."""
        self.pending_isr = None
        if leader_epoch == self.leader_epoch and partition_epoch > self.partition_epoch:
            self.isr, self.partition_epoch = isr, partition_epoch
        self.maybe_increment_hw()

    # -- checks ---------------------------------------------------------------------------------

    def check_epoch(self, current_leader_epoch: int | None) -> None:
        """Fence a request made against another leader epoch (KIP-320)."""
        if current_leader_epoch is None or current_leader_epoch == self.leader_epoch:
            return
        if current_leader_epoch < self.leader_epoch:
            raise KafkaError(ErrorCode.FENCED_LEADER_EPOCH,
                              f"The leader epoch in the request ({current_leader_epoch}) is older than the "
                              f"epoch of {self.name} on broker {self.broker_id} ({self.leader_epoch}).")
        raise KafkaError(ErrorCode.UNKNOWN_LEADER_EPOCH,
                          f"The leader epoch in the request ({current_leader_epoch}) is newer than the "
                          f"epoch of {self.name} on broker {self.broker_id} ({self.leader_epoch}).")

    def check_leader(self, current_leader_epoch: int | None = None) -> None:
        self.check_epoch(current_leader_epoch)
        if not self.is_leader:
            raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER,
                              f"Leader not local for partition {self.name} on broker {self.broker_id}")

    # -- leader: appends and acks ---------------------------------------------------------------

    async def append_as_leader(self, batch: pb.RecordBatch, acks: int) -> AppendInfo:
        """Append a batch as leader (a coordinator's; a produce request uses ``write_as_leader``)."""
        info, pending = self.write_as_leader(batch, acks)
        if pending is not None:
            await pending
        return self.appended_as_leader(info)

    def write_as_leader(self, batch: pb.RecordBatch, acks: int, records: bytes | None = None
                        ) -> tuple[AppendInfo, asyncio.Future | None]:
        """The checks of an append as leader and its write, in one step (``PartitionLog.write_as_leader``:
        a produce request writes all its batches before it awaits anything); ``appended_as_leader``
        once the future, if any, completes."""
        self.check_leader()
        min_isr = self.config.min_insync_replicas
        if acks == -1 and len(self.isr) < min_isr:
            raise KafkaError(ErrorCode.NOT_ENOUGH_REPLICAS,
                              f"The size of the current ISR Set({', '.join(map(str, self.isr))}) is "
                              f"insufficient to satisfy the min.isr requirement of {min_isr} for partition "
                              f"{self.name}")
        return self.log.write_as_leader(batch, self.leader_epoch, records)

    def appended_as_leader(self, info: AppendInfo) -> AppendInfo:
        """A leader's write is written: its records readable, long polls woken, the high
        watermark moved if the ISR is this broker alone."""
        if not info.duplicate:
            self.log.appended(info)
        self._notify()
        self.maybe_increment_hw()
        return info

    async def wait_for_replication(self, required: int, timeout_s: float) -> None:
        """acks=all: wait until the high watermark passes ``required`` (Kafka's DelayedProduce)."""
        fut = self.replication_waiter(required)
        if fut is not None:
            try:
                await asyncio.wait_for(fut, timeout_s)
            except asyncio.TimeoutError:
                raise self.not_replicated(required, timeout_s) from None
        self.check_replicated()

    def replication_waiter(self, required: int) -> asyncio.Future | None:
        """acks=all: a future completed when the high watermark passes ``required`` (failed if
        this replica stops leading; cancel it to give up), None if it has passed already. A
        produce request waits for all its partitions' at once (``produce``)."""
        if self.log.high_watermark >= required:
            return None
        # Leadership may have moved while the append was written (a thawed broker applying
        # the metadata that replaced it): as a follower nothing would end the wait but the
        # timeout, so answer at once, as DelayedProduce does.
        self.check_leader()
        fut = asyncio.get_running_loop().create_future()
        heapq.heappush(self._hw_waiters, (required, next(self._seq), fut))
        return fut

    def not_replicated(self, required: int, timeout_s: float) -> KafkaError:
        """What an acks=all wait for ``required`` answers once ``timeout_s`` has passed."""
        return KafkaError(ErrorCode.REQUEST_TIMED_OUT,
                          f"The request timed out: {self.name} did not replicate offset {required - 1} to "
                          f"the ISR Set({', '.join(map(str, self.maximal_isr))}) within {timeout_s * 1000:.0f} ms")

    def check_replicated(self) -> None:
        """After an acks=all wait: NOT_ENOUGH_REPLICAS_AFTER_APPEND if the ISR shrank below
        ``min.insync.replicas`` meanwhile."""
        if len(self.isr) < self.config.min_insync_replicas:
            raise KafkaError(ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
                              f"The size of the current ISR Set({', '.join(map(str, self.isr))}) is "
                              f"insufficient to satisfy the min.isr requirement of "
                              f"{self.config.min_insync_replicas} for partition {self.name}")

    def _fail_waiters(self, error: KafkaError) -> None:
        waiters, self._hw_waiters = self._hw_waiters, []
        for fut in [w[2] for w in waiters] + self._start_waiters:
            if not fut.done():
                fut.set_exception(error)
        self._start_waiters = []

    def low_watermark(self, alive: Callable[[int], bool]) -> int:
        """The smallest log start offset over this leader and its followers on ``alive`` brokers
        (Kafka's lowWatermarkIfLeader: -1 while such a follower has not fetched from us)."""
        low = self.log.log_start_offset
        for r, st in self.followers.items():
            if alive(r):
                low = min(low, st.log_start_offset)
        return low

    async def wait_for_low_watermark(self, required: int, alive: Callable[[int], bool], timeout_s: float) -> int:
        """DeleteRecords: wait until every live replica's log start is at least ``required``
        (Kafka's DelayedDeleteRecords; followers move theirs at their next fetch and say so in
        the one after) and answer the low watermark; REQUEST_TIMED_OUT after ``timeout_s``."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while (low := self.low_watermark(alive)) < required:
            self.check_leader()
            fut = loop.create_future()
            self._start_waiters.append(fut)
            try:
                await asyncio.wait_for(fut, max(0.0, deadline - loop.time()))
            except asyncio.TimeoutError:
                lagging = sorted(r for r, st in self.followers.items() if alive(r) and st.log_start_offset < required)
                raise KafkaError(ErrorCode.REQUEST_TIMED_OUT,
                                  f"The request timed out: the log start offset of {self.name} did not reach "
                                  f"{required} on replicas {lagging} within {timeout_s * 1000:.0f} ms") from None
            finally:
                if fut in self._start_waiters:
                    self._start_waiters.remove(fut)
        return low

    # -- leader: followers and the high watermark -------------------------------------------------

    def update_follower(self, replica: int, fetch_offset: int, log_start_offset: int = -1) -> FollowerState | None:
        """A follower fetched at ``fetch_offset`` with its log starting at ``log_start_offset``:
        its LEO is that offset (Kafka's updateFollowerFetchState); it is caught up if it asked
        for everything we had at its previous fetch. The high watermark is looked at only when
        that LEO moved, as Kafka does: nothing else it depends on changes here, and a session's
        partitions with nothing new come through on every fetch."""
        st = self.followers.get(replica)
        if st is None:
            return None
        now = self.clock()
        leo = self.log.log_end_offset
        if fetch_offset >= leo:
            st.last_caught_up_ms = now
        elif fetch_offset >= st.last_fetch_leader_leo >= 0:
            st.last_caught_up_ms = max(st.last_caught_up_ms, st.last_fetch_ms)
        moved = st.log_end_offset != fetch_offset
        st.log_end_offset = fetch_offset
        st.last_fetch_leader_leo = leo
        st.last_fetch_ms = now
        st.log_start_offset = log_start_offset
        # DeleteRecords waiters check again at every follower fetch, as Kafka's purgatory does:
        # a log start moved, or a replica's broker stopped being alive
        waiters, self._start_waiters = self._start_waiters, []
        for fut in waiters:
            if not fut.done():
                fut.set_result(None)
        if moved:
            self.maybe_increment_hw()
        return st

    def maybe_increment_hw(self) -> bool:
        """HW = min LEO over the (maximal) ISR; it only grows. True when it moved."""
        if not self.is_leader:
            return False
        hw = self.log.log_end_offset
        for r in self.maximal_isr:
            if r != self.broker_id:
                st = self.followers.get(r)
                hw = min(hw, st.log_end_offset if st is not None else -1)
        if hw <= self.log.high_watermark:
            return False
        self.log.set_high_watermark(hw)
        hw = self.log.high_watermark
        while self._hw_waiters and self._hw_waiters[0][0] <= hw:
            _, _, fut = heapq.heappop(self._hw_waiters)
            if not fut.done():
                fut.set_result(None)
        self._notify()
        return True

    def out_of_sync_replicas(self, lag_max_ms: int) -> list[int]:
        """ISR followers that have not caught up within ``replica.lag.time.max.ms`` (a follower
        whose LEO is the leader's is in sync however long ago it fetched)."""
        now = self.clock()
        leo = self.log.log_end_offset
        out = []
        for r in self.isr:
            st = self.followers.get(r)
            if r == self.broker_id or st is None:
                continue
            if st.log_end_offset != leo and now - st.last_caught_up_ms > lag_max_ms:
                out.append(r)
        return out

    def can_join_isr(self, replica: int) -> bool:
        """Kafka's isFollowerInSync: caught up to the HW and into this leader's epoch."""
        st = self.followers.get(replica)
        if st is None or replica in self.maximal_isr:
            return False
        return st.log_end_offset >= self.log.high_watermark and st.log_end_offset >= self.epoch_start_offset

    # -- long polls -------------------------------------------------------------------------------

    @property
    def delayed_produces(self) -> int:
        """acks=all produces waiting for the high watermark (Kafka's produce purgatory)."""
        return len(self._hw_waiters)

    @property
    def delayed_fetches(self) -> int:
        """Long-polling fetches waiting for data here (Kafka's fetch purgatory)."""
        return len(self._change_waiters)

    def change_waiter(self, fut: asyncio.Future) -> None:
        """Complete ``fut`` at the next append or high watermark move (a long-polling fetch)."""
        self._change_waiters.append(fut)

    def drop_waiter(self, fut: asyncio.Future) -> None:
        try:
            self._change_waiters.remove(fut)
        except ValueError:
            pass

    def _notify(self) -> None:
        waiters, self._change_waiters = self._change_waiters, []
        for fut in waiters:
            if not fut.done():
                fut.set_result(None)

    def notify(self) -> None:
        """A follower appended or moved its high watermark."""
        self._notify()


async def replay_batches(p: Partition) -> AsyncIterator[tuple[pb.RecordBatch, int]]:
    """Each batch of ``p``'s log from its start, with the offset reading is at (a first batch may
    begin before the log start), yielding to the loop between reads: how a new coordinator (of
    groups, of transactions) rebuilds its state from its partition of an internal topic."""
    offset = p.log.log_start_offset
    while offset < p.log.log_end_offset:
        frames, _ = p.log.read(offset, 1 << 20, p.log.log_end_offset)
        if not frames:
            break
        for frame in frames:
            for b in batches(bytes(frame)):
                yield b, offset
                offset = max(offset, b.base_offset + b.last_offset_delta + 1)
        await asyncio.sleep(0)
