"""The consumer's side of a consumer group (Kafka's ConsumerCoordinator): it finds the group's
coordinator, joins (the leader runs the assignor), heartbeats, commits and fetches committed
offsets, and leaves. The consumer drives it from ``poll``, as Kafka's does: a rebalance the
coordinator asked for is carried out on the next poll, after committing what was consumed and
telling the application which partitions it is losing."""
from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any

import grpc

from protos import broker_pb2 as pb

from .cluster_view import CLIENT_ERRORS, ClientError, ClusterView, Connections
from common.errors import ErrorCode, KafkaError
from .group_protocol import (ASSIGNORS, Subscription, TopicPartition, decode_assignment, decode_subscription,
                             encode_assignment, encode_subscription)

log = logging.getLogger("clients.consumer")

#: The coordinator moved or is loading: find it again and retry.
COORDINATOR_ERRORS = frozenset({ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE,
                                ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.REQUEST_TIMED_OUT,
                                ErrorCode.NETWORK_EXCEPTION})
#: This member's generation is over: rejoin.
REJOIN_ERRORS = frozenset({ErrorCode.REBALANCE_IN_PROGRESS, ErrorCode.ILLEGAL_GENERATION,
                           ErrorCode.UNKNOWN_MEMBER_ID})


class CommitFailedError(ClientError):
    """Kafka's CommitFailedException: the group rebalanced, so the partitions may be another
    member's now and the commit was refused."""

    def __init__(self) -> None:
        super().__init__("Commit cannot be completed since the group has already rebalanced and assigned the "
                         "partitions to another member. This means that the time between subsequent calls to "
                         "poll() was longer than the configured max.poll.interval.ms, which typically implies "
                         "that the poll loop is spending too much time message processing.")


@dataclass(frozen=True, slots=True)
class ConsumerGroupMetadata:
    """Kafka's ConsumerGroupMetadata: who a consumer is in its group, which a transactional
    producer's ``send_offsets_to_transaction`` passes on so that the group coordinator refuses
    offsets of a member the group has since left behind (KIP-447)."""
    group_id: str
    generation_id: int = -1
    member_id: str = ""
    group_instance_id: str | None = None


class ConsumerCoordinator:
    def __init__(self, group_id: str, cluster: ClusterView, connections: Connections, *, client_id: str,
                 session_timeout_ms: int, rebalance_timeout_ms: int, heartbeat_interval_ms: int,
                 strategies: list[str], instance_id: str | None, request_timeout_ms: int, retry_backoff_ms: int) -> None:
        unknown = [s for s in strategies if s not in ASSIGNORS]
        if not group_id or unknown:
            raise ClientError("group.id must not be empty" if not group_id else
                              f"Invalid value {unknown[0]} for configuration partition.assignment.strategy: one of "
                              f"{', '.join(ASSIGNORS)}")
        self.group_id = group_id
        self.cluster, self.connections = cluster, connections
        self.client_id = client_id
        self.session_timeout_ms, self.rebalance_timeout_ms = session_timeout_ms, rebalance_timeout_ms
        self.heartbeat_s = heartbeat_interval_ms / 1000
        self.strategies = strategies
        self.instance_id = instance_id
        self.timeout_s = request_timeout_ms / 1000
        self.backoff_s = retry_backoff_ms / 1000
        self.member_id = ""
        self.generation = -1
        self.coordinator: str | None = None
        self.rejoin_needed = False
        self.assigned: list[TopicPartition] = []
        self._heartbeats: asyncio.Task | None = None
        self._leaving: asyncio.Task | None = None  # the heartbeat task, leaving after a poll timeout
        #: When the application last called poll (the consumer sets it): a member that stops
        #: polling for max.poll.interval.ms (the rebalance timeout) leaves, as Kafka's does.
        self.last_poll = time.monotonic()

    # -- talking to the coordinator ---------------------------------------------------------------

    async def _find(self, deadline: float) -> str:
        while self.coordinator is None:
            addresses = list(self.cluster.brokers.values()) or self.cluster.bootstrap
            for address in addresses:
                try:
                    r = await self.connections.stub(address).FindCoordinator(
                        pb.FindCoordinatorRequest(key=self.group_id), timeout=self.timeout_s)
                except grpc.aio.AioRpcError:
                    continue
                if r.error_code == 0:
                    self.coordinator = f"{r.host}:{r.port}"
                    break
                code = ErrorCode.of(r.error_code)
                if code not in COORDINATOR_ERRORS:
                    raise KafkaError(code, r.error_message)
                break  # not available yet (the offsets topic may be being created): back off
            if self.coordinator is None:
                if self.cluster.fatal_error is not None:
                    raise self.cluster.fatal_error
                if time.monotonic() > deadline:
                    raise ClientError(f"no coordinator found for group {self.group_id}")
                await asyncio.sleep(self.backoff_s)
        return self.coordinator

    async def call(self, method: str, request: Any, deadline: float, timeout: float | None = None) -> Any:
        """One request to the coordinator, finding it again while it moves or loads."""
        while True:
            address = await self._find(deadline)
            try:
                resp = await getattr(self.connections.stub(address), method)(request, timeout=timeout or self.timeout_s)
            except grpc.aio.AioRpcError as e:
                log.debug("%s to coordinator %s failed: %s", method, address, e.code().name)
                code = ErrorCode.NETWORK_EXCEPTION
            else:
                code = _first_error(resp)
                if code not in COORDINATOR_ERRORS:
                    return resp
            self.coordinator = None
            if time.monotonic() > deadline:
                raise KafkaError(code, f"{method} to the coordinator of group {self.group_id} failed")
            await asyncio.sleep(self.backoff_s)

    # -- membership -------------------------------------------------------------------------------

    async def join(self, topics: list[str], current: Iterable[TopicPartition],
                   wait_topics: Callable[[list[str]], Awaitable[dict[str, int]]]) -> list[TopicPartition]:
        """Join (or rejoin) and sync until this member has an assignment for this generation."""
        self.stop_heartbeats()
        await self._left()
        deadline = time.monotonic() + max(self.rebalance_timeout_ms, self.session_timeout_ms) / 1000 + 30
        while True:
            user_data = encode_assignment(list(current)) if "sticky" in self.strategies else None
            meta = encode_subscription(Subscription(tuple(topics), user_data))
            req = pb.JoinGroupRequest(group_id=self.group_id, session_timeout_ms=self.session_timeout_ms,
                                      rebalance_timeout_ms=self.rebalance_timeout_ms, member_id=self.member_id,
                                      protocol_type="consumer", client_id=self.client_id,
                                      protocols=[pb.JoinGroupProtocol(name=s, metadata=meta) for s in self.strategies])
            if self.instance_id is not None:
                req.group_instance_id = self.instance_id
            r = await self.call("JoinGroup", req, deadline, timeout=self.rebalance_timeout_ms / 1000 + self.timeout_s)
            code = ErrorCode.of(r.error_code)
            if code == ErrorCode.UNKNOWN_MEMBER_ID:
                self.member_id, self.generation = "", -1
                continue
            if code == ErrorCode.REBALANCE_IN_PROGRESS:
                continue
            if code != ErrorCode.NONE:
                raise KafkaError(code, r.error_message)
            self.member_id, self.generation = r.member_id, r.generation_id
            assignments = []
            if r.leader == r.member_id:
                assignments = await self._assign(r, wait_topics)
            s = pb.SyncGroupRequest(group_id=self.group_id, generation_id=self.generation, member_id=self.member_id,
                                    assignments=assignments)
            if self.instance_id is not None:
                s.group_instance_id = self.instance_id
            sr = await self.call("SyncGroup", s, deadline, timeout=self.rebalance_timeout_ms / 1000 + self.timeout_s)
            code = ErrorCode.of(sr.error_code)
            if code in REJOIN_ERRORS:
                if code == ErrorCode.UNKNOWN_MEMBER_ID:
                    self.member_id, self.generation = "", -1
                continue
            if code != ErrorCode.NONE:
                raise KafkaError(code, sr.error_message)
            self.assigned = decode_assignment(sr.assignment)
            self.rejoin_needed = False
            self._heartbeats = asyncio.get_running_loop().create_task(self._heartbeat_loop())
            log.info("group %s: generation %d, member %s, assigned %s", self.group_id, self.generation,
                     self.member_id, self.assigned)
            return self.assigned

    async def _assign(self, r: pb.JoinGroupResponse,
                      wait_topics: Callable[[list[str]], Awaitable[dict[str, int]]]) -> list[pb.SyncGroupAssignment]:
        """The leader's part: run the chosen assignor over every member's subscription."""
        subs = {}
        for m in r.members:
            try:
                subs[m.member_id] = decode_subscription(m.metadata)
            except ValueError as e:
                log.warning("group %s: member %s sent an unreadable subscription (%s); it gets nothing",
                            self.group_id, m.member_id, e)
                subs[m.member_id] = Subscription(())
        counts = await wait_topics(sorted({t for s in subs.values() for t in s.topics}))
        plan = ASSIGNORS[r.protocol_name](subs, counts)
        return [pb.SyncGroupAssignment(member_id=m, assignment=encode_assignment(tps)) for m, tps in plan.items()]

    async def _heartbeat_loop(self) -> None:
        while True:
            await asyncio.sleep(self.heartbeat_s)
            if time.monotonic() - self.last_poll > self.rebalance_timeout_ms / 1000:
                log.warning("group %s: consumer poll timeout has expired: poll() was not called for longer than "
                            "max.poll.interval.ms (%d ms); leaving the group", self.group_id,
                            self.rebalance_timeout_ms)
                self.rejoin_needed = True
                # This task leaves, and is no longer the heartbeats that leave() would cancel:
                # join() and leave() wait for it instead.
                self._heartbeats, self._leaving = None, asyncio.current_task()
                await self._leave()
                return
            req = pb.HeartbeatRequest(group_id=self.group_id, generation_id=self.generation, member_id=self.member_id)
            if self.instance_id is not None:
                req.group_instance_id = self.instance_id
            try:
                r = await self.call("Heartbeat", req, time.monotonic() + self.session_timeout_ms / 1000)
            except CLIENT_ERRORS as e:
                log.info("group %s: heartbeat failed: %s", self.group_id, e)
                continue
            code = ErrorCode.of(r.error_code)
            if code in REJOIN_ERRORS:
                if code == ErrorCode.UNKNOWN_MEMBER_ID:
                    self.member_id, self.generation = "", -1
                self.rejoin_needed = True
                return
            if code == ErrorCode.FENCED_INSTANCE_ID:
                log.error("group %s: %s", self.group_id, r.error_message or code.name)
                self.rejoin_needed = True
                return

    def stop_heartbeats(self) -> None:
        if self._heartbeats is not None:
            self._heartbeats.cancel()
            self._heartbeats = None

    async def leave(self) -> None:
        """Leave now, so the others rebalance at once (a static member stays: its instance id
        keeps its place until the session times out)."""
        self.stop_heartbeats()
        await self._left()
        await self._leave()

    async def _left(self) -> None:
        """Until the heartbeat task has left after a poll timeout, if it is leaving."""
        leaving, self._leaving = self._leaving, None
        if leaving is not None:
            await leaving

    async def _leave(self) -> None:
        if not self.member_id or self.instance_id is not None:
            return
        try:
            await self.call("LeaveGroup", pb.LeaveGroupRequest(group_id=self.group_id, members=[
                pb.MemberIdentity(member_id=self.member_id)]), time.monotonic() + self.timeout_s)
        except CLIENT_ERRORS as e:
            log.info("group %s: leaving failed: %s", self.group_id, e)
        self.member_id, self.generation = "", -1

    # -- offsets ----------------------------------------------------------------------------------

    async def commit(self, offsets: dict[TopicPartition, int], managed: bool) -> None:
        """Commit ``offsets`` (the next offset to read, per partition); CommitFailedError when
        the group rebalanced meanwhile."""
        if not offsets:
            return
        req = pb.OffsetCommitRequest(group_id=self.group_id, generation_id=self.generation if managed else -1,
                                     member_id=self.member_id if managed else "")
        if managed and self.instance_id is not None:
            req.group_instance_id = self.instance_id
        by_topic: dict[str, pb.OffsetCommitTopic] = {}
        for (topic, p), offset in sorted(offsets.items()):
            t = by_topic.get(topic) or by_topic.setdefault(topic, req.topics.add(name=topic))
            t.partitions.add(partition=p, offset=offset, leader_epoch=-1)
        r = await self.call("OffsetCommit", req, time.monotonic() + self.timeout_s * 2)
        for t in r.topics:
            for x in t.partitions:
                code = ErrorCode.of(x.error_code)
                if code in REJOIN_ERRORS:
                    self.rejoin_needed = True
                    raise CommitFailedError()
                if code != ErrorCode.NONE:
                    raise KafkaError(code, x.error_message or f"commit of {t.name}-{x.partition} failed")

    async def committed(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """Committed offsets (the next offset to read); absent where none was committed."""
        req = pb.OffsetFetchRequest(group_id=self.group_id)
        by_topic: dict[str, pb.OffsetFetchTopic] = {}
        for topic, p in tps:
            t = by_topic.get(topic) or by_topic.setdefault(topic, req.topics.add(name=topic))
            t.partitions.append(p)
        r = await self.call("OffsetFetch", req, time.monotonic() + self.timeout_s * 2)
        if r.error_code:
            raise KafkaError(ErrorCode.of(r.error_code), r.error_message)
        return {(t.name, x.partition): x.offset for t in r.topics for x in t.partitions if x.offset >= 0}


def _first_error(resp: Any) -> ErrorCode:
    """The first error code anywhere in a coordinator's answer (top level, per group as
    DescribeGroups and DeleteGroups answer, or per partition)."""
    code = getattr(resp, "error_code", 0)
    if code:
        return ErrorCode.of(code)
    for g in (*getattr(resp, "groups", ()), *getattr(resp, "results", ())):
        if getattr(g, "error_code", 0):
            return ErrorCode.of(g.error_code)
    for t in getattr(resp, "topics", ()):
        for x in getattr(t, "partitions", ()):
            if x.error_code:
                return ErrorCode.of(x.error_code)
    return ErrorCode.NONE
