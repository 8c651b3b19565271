"""The group coordinator (Kafka's GroupCoordinator): consumer group membership, rebalances and
committed offsets, on the broker that leads the group's partition of ``__consumer_offsets``.

A group lives on partition ``abs(javaHash(group_id)) % offsets.topic.num.partitions`` of the
internal, compacted topic ``__consumer_offsets``, which the first FindCoordinator has the
controller create. Its leader is the group's coordinator. Offsets and group metadata
(generation, protocol, leader, members and their assignments) are records in that partition,
written with acks=all before they are acknowledged, so when leadership moves the new leader
loads the partition (answering COORDINATOR_LOAD_IN_PROGRESS meanwhile) and goes on: committed
offsets intact, members given a full session to find it.

Membership follows Kafka's state machine. A JoinGroup moves the group to PreparingRebalance;
the rebalance completes once every member has rejoined (or the rebalance timeout removes those
that did not; a new group first waits ``group.initial.rebalance.delay.ms`` for more members),
with a new generation and the leader chosen; the group is then CompletingRebalance until the
leader's SyncGroup brings the assignment, which is persisted, and the group is Stable.
Heartbeats keep a member alive for its session timeout; one that stops heartbeating, leaves, or
misses a rebalance is removed and the others rebalance. Static members (``group.instance.id``,
KIP-345) keep their place across restarts within the session timeout: back with the same
subscription while the group is Stable, one gets a new member id and its old assignment in the
current generation, without a rebalance, and its old member id is fenced. Errors are Kafka's:
see docs/brokers.md, "Consumer groups".
"""
from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from common.errors import KafkaError, ErrorCode, capped
from clients.records import (CONTROL_FLAG, TRANSACTIONAL_FLAG, build_batch, marker_commits, records_of,
                             set_producer)
from clients.group_protocol import decode_subscription
from clients.topics import OFFSETS_TOPIC
from protos import broker_pb2 as pb

from .config import BrokerConfig
from .coordinator_partitions import CoordinatorPartitions
from .group_requests import (DeletedGroup, DeleteGroupsRequest, DeleteGroupsResponse, DescribedGroup,
                             DescribedGroupMember, DescribeGroupsRequest, DescribeGroupsResponse,
                             FindCoordinatorRequest, FindCoordinatorResponse, HeartbeatRequest, HeartbeatResponse,
                             JoinGroupMember, JoinGroupRequest, JoinGroupResponse, LeaveGroupMemberResponse,
                             LeaveGroupRequest, LeaveGroupResponse, ListedGroup, ListGroupsResponse,
                             OffsetCommitPartitionResponse, OffsetCommitRequest, OffsetCommitResponse,
                             OffsetCommitTopicResponse, OffsetDeletePartitionResponse, OffsetDeleteRequest,
                             OffsetDeleteResponse, OffsetDeleteTopicResponse, OffsetFetchPartitionResponse,
                             OffsetFetchRequest, OffsetFetchResponse, OffsetFetchTopicResponse, SyncGroupRequest,
                             SyncGroupResponse)
from .partition import Partition, replay_batches
from .replica_manager import ReplicaManager
from .transaction_requests import TxnOffsetCommitRequest

log = logging.getLogger("brokerd.groups")

OFFSET_RECORD, GROUP_RECORD = 1, 2  # the key's first byte
CONSUMER_PROTOCOL_TYPE = "consumer"  # Kafka's ConsumerProtocol.PROTOCOL_TYPE
WRITE_TIMEOUT_S = 30.0


def java_hash(text: str) -> int:
    """Java's String.hashCode, which Kafka uses to place a group: over UTF-16 code units."""
    h = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def partition_for(group_id: str, partitions: int) -> int:
    """Kafka's ``Utils.abs(groupId.hashCode()) % groupMetadataTopicPartitionCount``."""
    h = java_hash(group_id)
    return (0 if h == -(1 << 31) else abs(h)) % partitions


class GroupState(Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass
class Member:
    member_id: str
    instance_id: str | None
    client_id: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    last_heartbeat: float = field(default_factory=time.monotonic)
    join: asyncio.Future | None = None  # a JoinGroup waiting for the rebalance to complete
    sync: asyncio.Future | None = None  # a SyncGroup waiting for the leader's assignment
    client_host: str = ""  # "/" and its address, as Kafka's DescribeGroups shows it

    def metadata(self, protocol: str) -> bytes:
        return next((m for name, m in self.protocols if name == protocol), b"")


@dataclass
class Group:
    group_id: str
    partition: int  # of __consumer_offsets
    state: GroupState = GroupState.EMPTY
    protocol_type: str = ""
    protocol: str = ""
    generation: int = 0
    leader: str = ""
    members: dict[str, Member] = field(default_factory=dict)
    offsets: dict[tuple[str, int], pb.OffsetValue] = field(default_factory=dict)
    rebalance_deadline: float = 0.0  # when PreparingRebalance gives up on members not rejoined
    initial_delay_until: float = 0.0  # a new group waits this long for more members

    def by_instance(self, instance_id: str) -> Member | None:
        return next((m for m in self.members.values() if m.instance_id == instance_id), None)


def _fail(fut: asyncio.Future | None, code: ErrorCode, message: str = "") -> None:
    if fut is not None and not fut.done():
        fut.set_exception(KafkaError(code, message or None))


class GroupCoordinator:
    def __init__(self, rm: ReplicaManager, config: BrokerConfig,
                 create_offsets_topic: Callable[[int, int], Coroutine[Any, Any, None]]) -> None:
        self.rm = rm
        self.config = config
        self.create_offsets_topic = create_offsets_topic
        self.groups: dict[str, Group] = {}
        self._partitions = CoordinatorPartitions(rm, OFFSETS_TOPIC, self._load)
        self._creating: asyncio.Task | None = None
        self._task: asyncio.Task | None = None
        self._writes: set[asyncio.Task] = set()  # group metadata persisted in the background
        #: Transactional offset commits waiting for their transaction's marker: offsets
        #: partition -> producer id -> the records, applied on commit, dropped on abort.
        self._txn_offsets: dict[int, dict[int, list[tuple[bytes, bytes | None]]]] = {}
        #: Set when a group may have gained members: the sweep sleeps on it while none has any.
        self._members_arrived = asyncio.Event()

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._tick_forever(), name="group-coordinator")

    async def stop(self) -> None:
        tasks = [t for t in [self._task, self._creating, *self._partitions.loading.values(), *self._writes] if t is not None]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for g in self.groups.values():
            for m in g.members.values():
                _fail(m.join, ErrorCode.NOT_COORDINATOR, "the coordinator is shutting down")
                _fail(m.sync, ErrorCode.NOT_COORDINATOR, "the coordinator is shutting down")

    # -- finding the coordinator -----------------------------------------------------------------

    def _offsets_partitions(self) -> int:
        t = self.rm.image.topics_by_name.get(OFFSETS_TOPIC)
        return len(t.partitions) if t is not None else 0

    async def find_coordinator(self, req: FindCoordinatorRequest, listener: str) -> FindCoordinatorResponse:
        if not req.key:
            return _find_error(ErrorCode.INVALID_GROUP_ID)
        n = self._offsets_partitions()
        if not n:
            if self._creating is None or self._creating.done():
                live = sum(1 for b in self.rm.image.brokers.values() if not b.fenced)
                rf = max(1, min(self.config.offsets_topic_replication_factor, live))
                self._creating = asyncio.get_running_loop().create_task(
                    self.create_offsets_topic(self.config.offsets_topic_num_partitions, rf))
            return _find_error(ErrorCode.COORDINATOR_NOT_AVAILABLE,
                               f"the internal topic {OFFSETS_TOPIC} is being created")
        reg = self.rm.image.topics_by_name[OFFSETS_TOPIC].partitions.get(partition_for(req.key, n))
        broker = self.rm.image.brokers.get(reg.leader) if reg is not None else None
        endpoint = next((e for e in broker.endpoints if e.name == listener), None) if broker else None
        if endpoint is None or broker is None or broker.fenced:
            return _find_error(ErrorCode.COORDINATOR_NOT_AVAILABLE,
                               f"partition {partition_for(req.key, n)} of {OFFSETS_TOPIC} has no leader")
        return FindCoordinatorResponse(node_id=broker.id, host=endpoint.host, port=endpoint.port)

    def _coordinator(self, group_id: str) -> Partition:
        """The partition of ``__consumer_offsets`` holding the group, which this broker must
        lead and have loaded; KafkaError otherwise."""
        if not group_id:
            raise KafkaError(ErrorCode.INVALID_GROUP_ID)
        n = self._offsets_partitions()
        if not n:
            raise KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE)
        return self._partitions.require(partition_for(group_id, n),
                                        f"broker {self.rm.broker_id} is not the coordinator of group {group_id}")

    # -- loading and writing the partition ---------------------------------------------------------

    async def _load(self, p: Partition, epoch: int) -> None:
        """Rebuild the groups of one partition from its log (a new leader does this first)."""
        try:
            self._unload(p.index, "its partition is being loaded again")
            groups: dict[str, Group] = {}
            pending: dict[int, list[tuple[bytes, bytes | None]]] = {}
            start, records = time.monotonic(), 0
            async for b, offset in replay_batches(p):
                if b.attributes & CONTROL_FLAG:  # a transaction's marker: its offsets count or go
                    done = pending.pop(b.producer_id, [])
                    if marker_commits(b):
                        for key, value in done:
                            _replay(groups, p.index, key, value)
                elif b.attributes & TRANSACTIONAL_FLAG:
                    pending.setdefault(b.producer_id, []).extend(
                        (r.key, r.value) for r in records_of(b, OFFSETS_TOPIC, p.index, offset) if r.key)
                else:
                    for r in records_of(b, OFFSETS_TOPIC, p.index, offset):
                        _replay(groups, p.index, r.key, r.value)
                        records += 1
            if not p.is_leader or p.leader_epoch != epoch:
                return
            now = time.monotonic()
            for g in groups.values():
                for m in g.members.values():
                    m.last_heartbeat = now  # a full session to find the new coordinator
                self.groups[g.group_id] = g
            self._txn_offsets[p.index] = pending
            self._partitions.loaded[p.index] = epoch
            self._members_arrived.set()
            log.info("%s-%d: loaded %d groups from %d records in %.2fs", OFFSETS_TOPIC, p.index, len(groups),
                     records, time.monotonic() - start)
        finally:
            self._partitions.loading.pop(p.index, None)

    def _unload(self, index: int, why: str) -> None:
        self._partitions.loaded.pop(index, None)
        self._txn_offsets.pop(index, None)
        for gid in [gid for gid, g in self.groups.items() if g.partition == index]:
            g = self.groups.pop(gid)
            for m in g.members.values():
                _fail(m.join, ErrorCode.NOT_COORDINATOR, why)
                _fail(m.sync, ErrorCode.NOT_COORDINATOR, why)

    async def _write(self, p: Partition, records: list[tuple[bytes, bytes | None]],
                     producer: tuple[int, int] | None = None) -> None:
        """Append records with acks=all semantics; Kafka's coordinator error mapping.
        ``producer``: a transaction's (producer id, epoch), whose marker decides them."""
        now = int(time.time() * 1000)
        batch = build_batch([(k, v, now, ()) for k, v in records])
        if producer is not None:
            batch.attributes |= TRANSACTIONAL_FLAG
            set_producer(batch, producer[0], producer[1], -1)
        try:
            info = await p.append_as_leader(batch, -1)
            await p.wait_for_replication(info.last_offset + 1, WRITE_TIMEOUT_S)
        except KafkaError as e:
            if e.code == ErrorCode.NOT_LEADER_OR_FOLLOWER:
                raise KafkaError(ErrorCode.NOT_COORDINATOR, e.message or None) from None
            if e.code == ErrorCode.RECORD_TOO_LARGE:
                raise KafkaError(ErrorCode.INVALID_COMMIT_OFFSET_SIZE, e.message or None) from None
            if e.code == ErrorCode.INVALID_PRODUCER_EPOCH:  # transactional offsets of a fenced producer
                raise KafkaError(ErrorCode.PRODUCER_FENCED, e.message or None) from None
            raise KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE, e.message or None) from None

    async def _persist_group(self, p: Partition, g: Group) -> None:
        value = pb.GroupValue(protocol_type=g.protocol_type, generation_id=g.generation, protocol=g.protocol,
                              leader=g.leader, members=[pb.GroupMemberValue(
                                  member_id=m.member_id, group_instance_id=m.instance_id, client_id=m.client_id,
                                  client_host=m.client_host, session_timeout_ms=m.session_timeout_ms, rebalance_timeout_ms=m.rebalance_timeout_ms,
                                  subscription=m.metadata(g.protocol), assignment=m.assignment)
                                  for m in g.members.values()])
        await self._write(p, [(_group_key(g.group_id), value.SerializeToString())])

    # -- membership ---------------------------------------------------------------------------------

    async def join_group(self, req: JoinGroupRequest) -> JoinGroupResponse:
        try:
            p = self._coordinator(req.group_id)
            cfg = self.config
            if not cfg.group_min_session_timeout_ms <= req.session_timeout_ms <= cfg.group_max_session_timeout_ms:
                raise KafkaError(ErrorCode.INVALID_SESSION_TIMEOUT)
            if not req.protocol_type or not req.protocols:
                raise KafkaError(ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
            g = self.groups.get(req.group_id)
            if g is None:
                g = self.groups[req.group_id] = Group(req.group_id, p.index)
            protocols = [(x.name, x.metadata) for x in req.protocols]
            if g.members and (req.protocol_type != g.protocol_type or not self._common(g, protocols, req.member_id)):
                raise KafkaError(ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
            restarted = g.by_instance(req.group_instance_id) \
                if req.group_instance_id is not None and not req.member_id else None
            leader, subscribed = g.leader, restarted.metadata(g.protocol) if restarted is not None else b""
            member = self._admit(g, req, protocols, req.group_instance_id)
            self._members_arrived.set()
        except KafkaError as e:
            return JoinGroupResponse(error_code=int(e.code), error_message=e.message, generation_id=-1,
                                     member_id=req.member_id)
        g.protocol_type = req.protocol_type
        if restarted is not None and g.state == GroupState.STABLE and self._select_protocol(g) == g.protocol \
                and _same_subscription(g.protocol_type, subscribed, member.metadata(g.protocol)):
            back = await self._static_member_back(p, g, member, leader, req)
            if back is not None:
                return back
        joined = member.join = asyncio.get_running_loop().create_future()
        if g.state != GroupState.PREPARING_REBALANCE:
            self._prepare_rebalance(g, f"member {member.member_id} joined{_reason(req.reason)}")
        self._maybe_complete_join(g)  # may answer at once: keep our own reference to the future
        try:
            return await joined
        except KafkaError as e:
            return JoinGroupResponse(error_code=int(e.code), error_message=e.message, generation_id=-1,
                                     member_id=member.member_id)

    def _admit(self, g: Group, req: JoinGroupRequest, protocols: list[tuple[str, bytes]],
               instance: str | None) -> Member:
        """The member joining: new, known, or a static member back with a new member id."""
        if instance is not None:
            known = g.by_instance(instance)
            if known is not None:
                if req.member_id and req.member_id != known.member_id:
                    raise KafkaError(ErrorCode.FENCED_INSTANCE_ID)
                if not req.member_id:  # a restarted static member: takes its old place
                    del g.members[known.member_id]
                    _fail(known.join, ErrorCode.FENCED_INSTANCE_ID)
                    _fail(known.sync, ErrorCode.FENCED_INSTANCE_ID)
                    known.member_id = f"{req.client_id or 'consumer'}-{uuid.uuid4()}"
                    if g.leader and g.leader not in g.members:
                        g.leader = known.member_id
                    g.members[known.member_id] = known
                known.protocols, known.session_timeout_ms = protocols, req.session_timeout_ms
                known.client_id, known.client_host = req.client_id, req.client_host
                known.rebalance_timeout_ms = req.rebalance_timeout_ms or req.session_timeout_ms
                known.last_heartbeat = time.monotonic()
                return known
        if not req.member_id:
            new = Member(f"{req.client_id or 'consumer'}-{uuid.uuid4()}", instance, req.client_id,
                         req.session_timeout_ms, req.rebalance_timeout_ms or req.session_timeout_ms, protocols,
                         client_host=req.client_host)
            g.members[new.member_id] = new
            return new
        m = g.members.get(req.member_id)
        if m is None:
            raise KafkaError(ErrorCode.UNKNOWN_MEMBER_ID,
                              f"member {req.member_id} is not in group {g.group_id}")
        m.protocols, m.session_timeout_ms = protocols, req.session_timeout_ms
        m.rebalance_timeout_ms = req.rebalance_timeout_ms or req.session_timeout_ms
        m.last_heartbeat = time.monotonic()
        return m

    async def _static_member_back(self, p: Partition, g: Group, member: Member, leader: str,
                                  req: JoinGroupRequest) -> JoinGroupResponse | None:
        """KIP-345: a static member restarted within its session, subscribed as before, takes its
        place in the current generation without a rebalance; its SyncGroup gets its old
        assignment. The new member id is persisted first (so a new coordinator fences the old
        one). A restarted leader must not run the assignor again: from JoinGroup v9 (KIP-814) it
        is told it leads, with the members, and ``skip_assignment``; before v9, as Kafka, the
        answer names the leader as it was, which is not its new id. None: persisting failed,
        rebalance."""
        generation = g.generation
        try:
            await self._persist_group(p, g)
        except KafkaError as e:
            log.info("group %s: could not persist static member %s (%s), rebalancing instead", g.group_id,
                     member.member_id, e.code.name)
            return None
        if g.generation != generation or member.member_id not in g.members:
            return None
        log.info("group %s: static member %s (instance %s) rejoined generation %d without a rebalance%s",
                 g.group_id, member.member_id, member.instance_id, g.generation, _reason(req.reason))
        if req.skip_assignment_supported and g.leader == member.member_id:
            return JoinGroupResponse(generation_id=g.generation, protocol_name=g.protocol, leader=member.member_id,
                                     member_id=member.member_id, members=_join_members(g), skip_assignment=True)
        return JoinGroupResponse(generation_id=g.generation, protocol_name=g.protocol, leader=leader,
                                 member_id=member.member_id)

    @staticmethod
    def _select_protocol(g: Group) -> str:
        """Kafka's selectProtocol: the protocol most members name first among those all support."""
        votes: dict[str, int] = {}
        common = set.intersection(*({n for n, _ in m.protocols} for m in g.members.values()))
        for m in g.members.values():
            choice = next(n for n, _ in m.protocols if n in common)
            votes[choice] = votes.get(choice, 0) + 1
        return max(votes, key=lambda n: votes[n])

    @staticmethod
    def _common(g: Group, protocols: list[tuple[str, bytes]], member_id: str) -> bool:
        names = {n for n, _ in protocols}
        for m in g.members.values():
            if m.member_id != member_id:
                names &= {n for n, _ in m.protocols}
        return bool(names)

    def _prepare_rebalance(self, g: Group, why: str) -> None:
        was_empty = g.state == GroupState.EMPTY
        g.state = GroupState.PREPARING_REBALANCE
        now = time.monotonic()
        timeout = max((m.rebalance_timeout_ms for m in g.members.values()), default=0) / 1000
        g.rebalance_deadline = now + timeout
        g.initial_delay_until = now + min(self.config.group_initial_rebalance_delay_ms / 1000, timeout) \
            if was_empty else 0.0
        for m in g.members.values():
            _fail(m.sync, ErrorCode.REBALANCE_IN_PROGRESS)
            m.sync = None
        log.info("group %s: preparing to rebalance in generation %d (%s)", g.group_id, g.generation, why)

    def _maybe_complete_join(self, g: Group, now: float | None = None) -> None:
        if g.state != GroupState.PREPARING_REBALANCE:
            return
        now = time.monotonic() if now is None else now
        all_joined = all(m.join is not None for m in g.members.values())
        if (all_joined and now >= g.initial_delay_until) or now >= g.rebalance_deadline:
            self._complete_join(g)

    def _complete_join(self, g: Group) -> None:
        for m in [m for m in g.members.values() if m.join is None]:
            log.info("group %s: member %s did not rejoin in time, removing it", g.group_id, m.member_id)
            del g.members[m.member_id]
        if not g.members:
            self._emptied(g)
            return
        g.generation += 1
        g.protocol = self._select_protocol(g)
        if g.leader not in g.members:
            g.leader = next(iter(g.members))
        g.state = GroupState.COMPLETING_REBALANCE
        now = time.monotonic()
        everyone = _join_members(g)
        for m in g.members.values():
            m.last_heartbeat = now
            resp = JoinGroupResponse(generation_id=g.generation, protocol_name=g.protocol, leader=g.leader,
                                     member_id=m.member_id, members=everyone if m.member_id == g.leader else [])
            if m.join is not None and not m.join.done():
                m.join.set_result(resp)
            m.join = None
        log.info("group %s: generation %d with %d members (leader %s, protocol %s)", g.group_id, g.generation,
                 len(g.members), g.leader, g.protocol)

    async def _persist_quietly(self, p: Partition, g: Group) -> None:
        try:
            await self._persist_group(p, g)
        except KafkaError as e:
            log.info("group %s: could not persist its metadata: %s", g.group_id, e)

    def _member(self, group_id: str, member_id: str, instance: str | None, generation: int | None
                ) -> tuple[Partition, Group, Member]:
        p = self._coordinator(group_id)
        g = self.groups.get(group_id)
        m = g.members.get(member_id) if g is not None else None
        if instance is not None and g is not None:
            known = g.by_instance(instance)
            if known is not None and known.member_id != member_id:
                raise KafkaError(ErrorCode.FENCED_INSTANCE_ID)
        if g is None or m is None:
            raise KafkaError(ErrorCode.UNKNOWN_MEMBER_ID,
                              f"member {member_id} is not in group {group_id}")
        if generation is not None and generation != g.generation:
            raise KafkaError(ErrorCode.ILLEGAL_GENERATION,
                              f"generation {generation} of group {group_id} is not its current one, {g.generation}")
        return p, g, m

    async def sync_group(self, req: SyncGroupRequest) -> SyncGroupResponse:
        try:
            p, g, m = self._member(req.group_id, req.member_id, req.group_instance_id, req.generation_id)
            if g.state == GroupState.PREPARING_REBALANCE:
                raise KafkaError(ErrorCode.REBALANCE_IN_PROGRESS)
            if g.state == GroupState.STABLE:
                return SyncGroupResponse(assignment=m.assignment)
            m.last_heartbeat = time.monotonic()
            synced = m.sync = asyncio.get_running_loop().create_future()
            if m.member_id == g.leader:
                assignments = {a.member_id: a.assignment for a in req.assignments}
                for member in g.members.values():
                    member.assignment = assignments.get(member.member_id, b"")
                generation = g.generation
                try:
                    await self._persist_group(p, g)
                except KafkaError as e:
                    for member in g.members.values():
                        _fail(member.sync, e.code, e.message)
                    if g.generation == generation and g.state == GroupState.COMPLETING_REBALANCE:
                        self._prepare_rebalance(g, f"its assignment could not be written: {e.code.name}")
                    raise
                if g.generation == generation and g.state == GroupState.COMPLETING_REBALANCE:
                    g.state = GroupState.STABLE
                    for member in g.members.values():
                        if member.sync is not None and not member.sync.done():
                            member.sync.set_result(member.assignment)
                        member.sync = None
                    log.info("group %s: stable in generation %d", g.group_id, g.generation)
            return SyncGroupResponse(assignment=await synced)
        except KafkaError as e:
            return SyncGroupResponse(error_code=int(e.code), error_message=e.message)

    async def heartbeat(self, req: HeartbeatRequest) -> HeartbeatResponse:
        try:
            _, g, m = self._member(req.group_id, req.member_id, req.group_instance_id, req.generation_id)
            m.last_heartbeat = time.monotonic()
            if g.state == GroupState.PREPARING_REBALANCE:
                raise KafkaError(ErrorCode.REBALANCE_IN_PROGRESS)
            return HeartbeatResponse()
        except KafkaError as e:
            return HeartbeatResponse(error_code=int(e.code), error_message=e.message)

    async def leave_group(self, req: LeaveGroupRequest) -> LeaveGroupResponse:
        try:
            self._coordinator(req.group_id)
        except KafkaError as e:
            return LeaveGroupResponse(error_code=int(e.code), error_message=e.message)
        g = self.groups.get(req.group_id)
        resp = LeaveGroupResponse()
        left = []
        for who in req.members:
            instance = who.group_instance_id
            m = g.members.get(who.member_id) if g is not None else None
            if m is None and instance is not None and g is not None:
                m = g.by_instance(instance)
            code = ErrorCode.NONE
            if m is None:
                code = ErrorCode.UNKNOWN_MEMBER_ID
            elif instance is not None and m.instance_id != instance:
                code = ErrorCode.FENCED_INSTANCE_ID
            else:
                left.append(m)
                if who.reason:
                    log.info("group %s: member %s leaves%s", req.group_id, m.member_id, _reason(who.reason))
            resp.members.append(LeaveGroupMemberResponse(member_id=who.member_id, group_instance_id=instance,
                                                         error_code=int(code)))
        if g is not None and left:
            self._remove(g, left, "left the group")
        return resp

    def _remove(self, g: Group, members: list[Member], why: str) -> None:
        for m in members:
            g.members.pop(m.member_id, None)
            _fail(m.join, ErrorCode.UNKNOWN_MEMBER_ID, why)
            _fail(m.sync, ErrorCode.UNKNOWN_MEMBER_ID, why)
            log.info("group %s: member %s %s", g.group_id, m.member_id, why)
        if g.state == GroupState.PREPARING_REBALANCE:
            self._maybe_complete_join(g)
        elif g.members:
            self._prepare_rebalance(g, f"{len(members)} member(s) {why}")
        else:
            self._emptied(g)

    def _emptied(self, g: Group) -> None:
        """The last member went: a new, empty generation, persisted in the background."""
        g.generation += 1
        g.state, g.protocol, g.leader = GroupState.EMPTY, "", ""
        p = self.rm.by_name.get((OFFSETS_TOPIC, g.partition))
        if p is not None:
            task = asyncio.get_running_loop().create_task(self._persist_quietly(p, g))
            self._writes.add(task)
            task.add_done_callback(self._writes.discard)

    async def _tick_forever(self) -> None:
        """Every 0.1 s while some group has members (sessions to expire, rebalances to end);
        while none has, asleep until one joins or a loaded partition brings some, so that an
        idle broker does not wake ten times a second for nothing (docs/brokers.md, "The
        brokers' idle CPU"). Partitions that moved away are dropped by ``leaderships_changed``
        meanwhile."""
        while True:
            if not any(g.members for g in self.groups.values()):
                self._members_arrived.clear()
                await self._members_arrived.wait()
            await asyncio.sleep(0.1)
            try:
                self._tick()
            except Exception as e:  # never let the sweep die
                log.error("group coordinator sweep failed: %s", e)

    def leaderships_changed(self) -> None:
        """Drop the groups of partitions no longer led here (in the epoch they were loaded in);
        called by the sweep and whenever the broker applied new metadata, which is what moves
        or stops a partition."""
        for index, epoch in list(self._partitions.loaded.items()):
            if not self._partitions.serves(index, epoch):
                self._unload(index, "this broker is no longer its coordinator")

    def _tick(self) -> None:
        """Drop partitions no longer led here, expire members, finish rebalances that timed out."""
        self.leaderships_changed()
        now = time.monotonic()
        for g in list(self.groups.values()):
            expired = [m for m in g.members.values()
                       if m.join is None and now - m.last_heartbeat > m.session_timeout_ms / 1000]
            if expired:
                self._remove(g, expired, "failed: no heartbeat within its session timeout")
            self._maybe_complete_join(g, now)

    # -- offsets -----------------------------------------------------------------------------------

    async def offset_commit(self, req: OffsetCommitRequest) -> OffsetCommitResponse:
        return await self._commit_offsets(req)

    async def txn_offset_commit(self, req: TxnOffsetCommitRequest) -> OffsetCommitResponse:
        """Offsets written as part of a transaction: kept pending until its marker reaches the
        group's partition (``marker_written``), then committed or dropped. The producer's first
        ones in the partition are verified with its transaction coordinator first (KIP-890)."""
        refused = await self._verify_txn(req)
        if refused is not None:
            return _refused(req.offsets, refused)
        return await self._commit_offsets(req.offsets, (req.producer_id, req.producer_epoch))

    async def _verify_txn(self, req: TxnOffsetCommitRequest) -> KafkaError | None:
        """KIP-890 part 1 for offsets, as Kafka 3.x's GroupCoordinator does: a producer with no
        transaction open in the group's partition of __consumer_offsets may write there only
        if AddOffsetsToTxn added that partition to its ongoing transaction under this producer
        id and epoch; otherwise a late or stray TxnOffsetCommit would open a transaction no
        marker closes (holding the partition's last stable offset, and the offsets pending,
        forever). The verifier's errors are mapped as Kafka's maybeConvertOffsetCommitError."""
        verifier, n = self.rm.txn_verifier, self._offsets_partitions()
        if verifier is None or not n or not req.offsets.group_id:
            return None  # _commit_offsets answers what is wrong
        index = partition_for(req.offsets.group_id, n)
        p = self.rm.by_name.get((OFFSETS_TOPIC, index))
        if p is None or not p.is_leader or req.producer_id in p.log.producers.ongoing:
            return None
        missing, error = await verifier.not_added(req.transactional_id, req.producer_id, req.producer_epoch,
                                                  [(OFFSETS_TOPIC, index)])
        if error is not None:
            return KafkaError(_OFFSET_COMMIT_ERRORS.get(error.code, error.code), error.message or None)
        if missing:
            return KafkaError(ErrorCode.INVALID_TXN_STATE,
                              f"group {req.offsets.group_id} is not in the ongoing transaction of "
                              f"{req.transactional_id} (producer {req.producer_id}, epoch {req.producer_epoch}): "
                              f"add it first (AddOffsetsToTxn)")
        return None

    def marker_written(self, topic: str, index: int, producer_id: int, commit: bool) -> None:
        """A transaction marker was written to a partition this broker leads."""
        if topic != OFFSETS_TOPIC:
            return
        done = self._txn_offsets.get(index, {}).pop(producer_id, [])
        if commit:
            for key, value in done:
                _replay(self.groups, index, key, value)

    def _pending_offsets(self, index: int, group_id: str) -> set[tuple[str, int]]:
        """The group's partitions with offsets of a transaction not yet ended."""
        out = set()
        for records in self._txn_offsets.get(index, {}).values():
            for key, _ in records:
                if key[0] == OFFSET_RECORD:
                    k = pb.OffsetKey.FromString(key[1:])
                    if k.group_id == group_id:
                        out.add((k.topic, k.partition))
        return out

    async def _commit_offsets(self, req: OffsetCommitRequest, producer: tuple[int, int] | None = None
                              ) -> OffsetCommitResponse:
        resp = OffsetCommitResponse()
        # Kafka's handleOffsetCommitRequest: a partition the metadata does not have is
        # UNKNOWN_TOPIC_OR_PARTITION and is not stored, whatever becomes of the others.
        image = self.rm.image
        unknown = {(t.name, x.partition) for t in req.topics for x in t.partitions
                   if (found := image.topics_by_name.get(t.name)) is None or x.partition not in found.partitions}
        try:
            p = self._coordinator(req.group_id)
            g = self.groups.get(req.group_id)
            simple = req.generation_id < 0 and not req.member_id
            if not (simple and (g is None or not g.members)):
                _, g, _ = self._member(req.group_id, req.member_id, req.group_instance_id, req.generation_id)
                # While a rebalance is being prepared, members commit what they consumed before
                # giving their partitions up (as Kafka allows); between the join and the leader's
                # assignment they may not.
                if g.state == GroupState.COMPLETING_REBALANCE:
                    raise KafkaError(ErrorCode.REBALANCE_IN_PROGRESS)
            too_big = {(t.name, x.partition) for t in req.topics for x in t.partitions
                       if len(x.metadata.encode()) > self.config.offset_metadata_max_bytes}
            now = int(time.time() * 1000)
            values = {(t.name, x.partition): pb.OffsetValue(offset=x.offset, leader_epoch=x.leader_epoch,
                                                             metadata=x.metadata, commit_timestamp=now)
                      for t in req.topics for x in t.partitions
                      if (t.name, x.partition) not in too_big and (t.name, x.partition) not in unknown}
            if values:
                records: list[tuple[bytes, bytes | None]] = [(_offset_key(req.group_id, *tp), v.SerializeToString())
                                                             for tp, v in values.items()]
                await self._write(p, records, producer)
                if producer is not None:
                    self._txn_offsets.setdefault(p.index, {}).setdefault(producer[0], []).extend(records)
                else:
                    g = self.groups.get(req.group_id)
                    if g is None:
                        g = self.groups[req.group_id] = Group(req.group_id, p.index)
                    g.offsets.update(values)
            for t in req.topics:
                tr = OffsetCommitTopicResponse(name=t.name)
                resp.topics.append(tr)
                for x in t.partitions:
                    code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if (t.name, x.partition) in unknown else \
                        ErrorCode.OFFSET_METADATA_TOO_LARGE if (t.name, x.partition) in too_big else ErrorCode.NONE
                    tr.partitions.append(OffsetCommitPartitionResponse(partition=x.partition, error_code=int(code)))
        except KafkaError as e:
            resp.topics.clear()
            for t in req.topics:
                tr = OffsetCommitTopicResponse(name=t.name)
                resp.topics.append(tr)
                for x in t.partitions:
                    if (t.name, x.partition) in unknown:
                        tr.partitions.append(OffsetCommitPartitionResponse(
                            partition=x.partition, error_code=int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)))
                    else:
                        tr.partitions.append(OffsetCommitPartitionResponse(
                            partition=x.partition, error_code=int(e.code), error_message=e.message))
        return resp

    async def offset_fetch(self, req: OffsetFetchRequest) -> OffsetFetchResponse:
        try:
            p = self._coordinator(req.group_id)
        except KafkaError as e:
            return OffsetFetchResponse(error_code=int(e.code), error_message=e.message)
        unstable = self._pending_offsets(p.index, req.group_id) if req.require_stable else set()
        g = self.groups.get(req.group_id)
        offsets = g.offsets if g is not None else {}
        wanted: dict[str, list[int]] = {}
        if req.topics:
            for t in req.topics:
                wanted[t.name] = list(t.partitions)
        else:
            for topic, part in sorted(offsets):
                wanted.setdefault(topic, []).append(part)
        resp = OffsetFetchResponse()
        for topic, parts in wanted.items():
            tr = OffsetFetchTopicResponse(name=topic)
            resp.topics.append(tr)
            for part in parts:
                v = offsets.get((topic, part))
                if (topic, part) in unstable:
                    tr.partitions.append(OffsetFetchPartitionResponse(
                        partition=part, offset=-1, leader_epoch=-1, error_code=int(ErrorCode.UNSTABLE_OFFSET_COMMIT)))
                elif v is None:
                    tr.partitions.append(OffsetFetchPartitionResponse(partition=part, offset=-1, leader_epoch=-1))
                else:
                    tr.partitions.append(OffsetFetchPartitionResponse(partition=part, offset=v.offset,
                                                                      leader_epoch=v.leader_epoch, metadata=v.metadata))
        return resp

    # -- administration ---------------------------------------------------------------------------

    def list_groups(self) -> ListGroupsResponse:
        resp = ListGroupsResponse()
        for g in sorted(self.groups.values(), key=lambda g: g.group_id):
            if self._partitions.serves(g.partition, self._partitions.loaded.get(g.partition)):
                resp.groups.append(ListedGroup(group_id=g.group_id, protocol_type=g.protocol_type, state=g.state.value))
        return resp

    def describe_groups(self, req: DescribeGroupsRequest) -> DescribeGroupsResponse:
        resp = DescribeGroupsResponse()
        for gid in req.groups:
            try:
                self._coordinator(gid)
            except KafkaError as e:
                resp.groups.append(DescribedGroup(group_id=gid, error_code=int(e.code), error_message=e.message,
                                                  state="Dead"))
                continue
            g = self.groups.get(gid)
            if g is None:
                resp.groups.append(DescribedGroup(group_id=gid, error_code=int(ErrorCode.GROUP_ID_NOT_FOUND),
                                                  error_message=capped(f"Group {gid} not found."), state="Dead"))
                continue
            resp.groups.append(DescribedGroup(
                group_id=gid, state=g.state.value, protocol_type=g.protocol_type, protocol=g.protocol,
                generation_id=g.generation, members=[DescribedGroupMember(
                    member_id=m.member_id, group_instance_id=m.instance_id, client_id=m.client_id,
                    client_host=m.client_host, metadata=m.metadata(g.protocol), assignment=m.assignment)
                    for m in g.members.values()]))
        return resp

    async def delete_groups(self, req: DeleteGroupsRequest) -> DeleteGroupsResponse:
        resp = DeleteGroupsResponse()
        for gid in req.groups:
            try:
                p = self._coordinator(gid)
                g = self.groups.get(gid)
                if g is None:
                    raise KafkaError(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {gid} not found.")
                if g.members:
                    raise KafkaError(ErrorCode.NON_EMPTY_GROUP, f"Group {gid} is not empty: it has "
                                                                 f"{len(g.members)} members.")
                tombstones: list[tuple[bytes, bytes | None]] = [(_group_key(gid), None)]
                await self._write(p, tombstones + [(_offset_key(gid, *tp), None) for tp in g.offsets])
                self.groups.pop(gid, None)
                resp.results.append(DeletedGroup(group_id=gid))
            except KafkaError as e:
                resp.results.append(DeletedGroup(group_id=gid, error_code=int(e.code), error_message=e.message))
        return resp

    async def offset_delete(self, req: OffsetDeleteRequest) -> OffsetDeleteResponse:
        """Kafka's GroupCoordinator.handleDeleteOffsets: a consumer group's offsets of topics no
        member subscribes to (the others GROUP_SUBSCRIBED_TO_TOPIC), any other group's only
        while it has no members (else NON_EMPTY_GROUP); deleted with tombstones, so that a
        reload of the partition forgets them too. A partition the metadata does not have is
        UNKNOWN_TOPIC_OR_PARTITION."""
        try:
            p = self._coordinator(req.group_id)
            g = self.groups.get(req.group_id)
            if g is None or g.state == GroupState.DEAD:
                raise KafkaError(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {req.group_id} not found.")
            if g.protocol_type != CONSUMER_PROTOCOL_TYPE and g.members:
                raise KafkaError(ErrorCode.NON_EMPTY_GROUP, f"Group {req.group_id} is not empty: it has "
                                                             f"{len(g.members)} members.")
        except KafkaError as e:
            return OffsetDeleteResponse(error_code=int(e.code), error_message=e.message)
        subscribed = _subscribed_topics(g)
        image = self.rm.image
        resp = OffsetDeleteResponse()
        doomed: list[tuple[str, int]] = []
        for t in req.topics:
            tr = OffsetDeleteTopicResponse(name=t.name)
            resp.topics.append(tr)
            found = image.topics_by_name.get(t.name)
            for index in t.partitions:
                code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if found is None or index not in found.partitions \
                    else ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC if t.name in subscribed else ErrorCode.NONE
                tr.partitions.append(OffsetDeletePartitionResponse(partition=index, error_code=int(code)))
                if code == ErrorCode.NONE and (t.name, index) in g.offsets:
                    doomed.append((t.name, index))
        if doomed:
            try:
                await self._write(p, [(_offset_key(req.group_id, *tp), None) for tp in doomed])
            except KafkaError as e:
                return OffsetDeleteResponse(error_code=int(e.code), error_message=e.message)
            for tp in doomed:
                g.offsets.pop(tp, None)
        return resp


def _subscribed_topics(g: Group) -> set[str]:
    """The topics a consumer group's members subscribe to (Kafka's isSubscribedToTopic), read
    from their subscriptions for the group's protocol."""
    if g.protocol_type != CONSUMER_PROTOCOL_TYPE:
        return set()
    out: set[str] = set()
    for m in g.members.values():
        try:
            out.update(decode_subscription(m.metadata(g.protocol) or m.protocols[0][1]).topics)
        except (ValueError, IndexError):
            continue
    return out


# -- the records of __consumer_offsets ------------------------------------------------------------

def _offset_key(group_id: str, topic: str, partition: int) -> bytes:
    return bytes([OFFSET_RECORD]) + pb.OffsetKey(group_id=group_id, topic=topic, partition=partition).SerializeToString()


def _group_key(group_id: str) -> bytes:
    return bytes([GROUP_RECORD]) + pb.GroupKey(group_id=group_id).SerializeToString()


def _replay(groups: dict[str, Group], index: int, key: bytes | None, value: bytes | None) -> None:
    """Apply one record of __consumer_offsets; a record it cannot read is skipped with a line
    in the log (a newer broker's record type, or damage the CRC did not catch)."""
    if not key:
        return
    try:
        if key[0] == OFFSET_RECORD:
            k = pb.OffsetKey.FromString(key[1:])
            g = groups.get(k.group_id) or groups.setdefault(k.group_id, Group(k.group_id, index))
            if value is None:
                g.offsets.pop((k.topic, k.partition), None)
            else:
                g.offsets[(k.topic, k.partition)] = pb.OffsetValue.FromString(value)
        elif key[0] == GROUP_RECORD:
            gk = pb.GroupKey.FromString(key[1:])
            if value is None:
                groups.pop(gk.group_id, None)
                return
            v = pb.GroupValue.FromString(value)
            g = groups.get(gk.group_id) or groups.setdefault(gk.group_id, Group(gk.group_id, index))
            g.protocol_type, g.generation, g.protocol, g.leader = v.protocol_type, v.generation_id, v.protocol, v.leader
            g.members = {m.member_id: Member(m.member_id, m.group_instance_id if m.HasField("group_instance_id") else None,
                                             m.client_id, m.session_timeout_ms, m.rebalance_timeout_ms,
                                             [(v.protocol, m.subscription)], m.assignment, client_host=m.client_host)
                         for m in v.members}
            g.state = GroupState.STABLE if g.members else GroupState.EMPTY
        else:
            log.warning("%s-%d: skipping a record of unknown type %d", OFFSETS_TOPIC, index, key[0])
    except Exception as e:  # DecodeError and the like: one line, go on
        log.warning("%s-%d: skipping an unreadable record: %s", OFFSETS_TOPIC, index, e)


def _same_subscription(protocol_type: str, before: bytes, after: bytes) -> bool:
    """Whether a restarted static member subscribes as before: for consumers the same topics
    (what else the metadata carries, owned partitions or the sticky assignor's user data,
    changes with every restart); for other protocols the same bytes."""
    if before == after:
        return True
    if protocol_type != "consumer":
        return False
    try:
        return set(decode_subscription(before).topics) == set(decode_subscription(after).topics)
    except ValueError:
        return False


def _find_error(code: ErrorCode, message: str = "") -> FindCoordinatorResponse:
    e = KafkaError(code, message or None)
    return FindCoordinatorResponse(error_code=int(code), error_message=e.message, node_id=-1, port=-1)


def _join_members(g: Group) -> list[JoinGroupMember]:
    """The members as JoinGroup tells the leader, with their subscriptions to the group's protocol."""
    return [JoinGroupMember(member_id=m.member_id, group_instance_id=m.instance_id, metadata=m.metadata(g.protocol))
            for m in g.members.values()]


def _reason(reason: str | None) -> str:
    """A client's reason (KIP-800) as Kafka's log lines end with it, or nothing."""
    return f"; client reason: {reason}" if reason else ""


#: Kafka's GroupMetadataManager.maybeConvertOffsetCommitError: what a failed verification of
#: a TxnOffsetCommit answers, in the errors a client expects from a group coordinator.
_OFFSET_COMMIT_ERRORS = {ErrorCode.NETWORK_EXCEPTION: ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                         ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: ErrorCode.COORDINATOR_NOT_AVAILABLE,
                         ErrorCode.NOT_ENOUGH_REPLICAS: ErrorCode.COORDINATOR_NOT_AVAILABLE,
                         ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND: ErrorCode.COORDINATOR_NOT_AVAILABLE,
                         ErrorCode.NOT_LEADER_OR_FOLLOWER: ErrorCode.NOT_COORDINATOR}


def _refused(req: OffsetCommitRequest, error: KafkaError) -> OffsetCommitResponse:
    """Every partition of ``req`` answered ``error``."""
    return OffsetCommitResponse(topics=[OffsetCommitTopicResponse(name=t.name, partitions=[
        OffsetCommitPartitionResponse(partition=x.partition, error_code=int(error.code), error_message=error.message)
        for x in t.partitions]) for t in req.topics])
