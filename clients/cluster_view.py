"""A client's view of the cluster (Kafka's ProducerMetadata / ConsumerMetadata): the
brokers and the topics it uses, refreshed from any broker's Metadata API when asked or every
``metadata.max.age.ms``, with a version that grows at every update.

A producer that does not know a topic yet waits for it as Kafka's ``waitOnMetadata`` does:
request an update, wait until the version moves past the one it saw, look again, until the
topic (and the partition asked for, if any) is there or ``max.block.ms`` has passed, and then
fails with Kafka's messages.
"""
from __future__ import annotations

import asyncio
import logging
import random
import time
import uuid
from dataclasses import dataclass

import grpc

from protos import broker_pb2 as pb
from protos import broker_pb2_grpc
from raft.client import describe
from common.tls import TLSConfig, tls_failure
from common.channels import dial
from common.config_def import ConfigError
from common.errors import ErrorCode, KafkaError
from common.host_ports import host_ports

from .listener_probe import kafka_listener, not_a_broker, speaks_kafka

log = logging.getLogger("clients")

GRPC_OPTIONS = [("grpc.max_receive_message_length", 256 << 20), ("grpc.max_send_message_length", 256 << 20)]


class ClientError(Exception):
    """Base of what the client raises; the message is one line."""


#: What a client's calls fail with, each in one line: the client's own ClientError, an error code
#: a broker answered (KafkaError), a setting (ConfigError).
CLIENT_ERRORS = (ClientError, KafkaError, ConfigError)


class KafkaTimeoutError(ClientError):
    """Kafka's TimeoutException."""


def parse_bootstrap(servers: str | list[str]) -> list[str]:
    try:
        out = host_ports(servers)
    except ValueError as e:
        raise ClientError(f"Invalid url in bootstrap.servers: {e}") from None
    if not out:
        raise ClientError("No resolvable bootstrap urls given in bootstrap.servers")
    return out


class SslAuthenticationError(ClientError):
    """Kafka's SslAuthenticationException: the TLS handshake with a broker failed; retrying
    with the same settings cannot succeed, so it is raised rather than waited out."""


class WrongListenerError(ClientError):
    """No bootstrap address serves the broker's gRPC API, and one of them is known to serve
    another protocol (``listener_probe``); retrying cannot help."""


class Connections:
    """One gRPC channel per broker address, shared by everything a client sends; TLS with
    ``tls`` (``security.protocol=SSL``, clients/security.py)."""

    def __init__(self, tls: TLSConfig | None = None) -> None:
        self.tls = tls
        self._stubs: dict[str, tuple[grpc.aio.Channel, broker_pb2_grpc.BrokerStub]] = {}

    def stub(self, address: str) -> broker_pb2_grpc.BrokerStub:
        entry = self._stubs.get(address)
        if entry is None:
            ch = dial(address, self.tls, GRPC_OPTIONS)
            entry = self._stubs[address] = (ch, broker_pb2_grpc.BrokerStub(ch))
        return entry[1]

    async def close(self) -> None:
        stubs, self._stubs = self._stubs, {}
        await asyncio.gather(*(ch.close() for ch, _ in stubs.values()), return_exceptions=True)


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    partition: int
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class TopicInfo:
    name: str
    topic_id: uuid.UUID | None
    partitions: tuple[PartitionInfo, ...]
    error: ErrorCode = ErrorCode.NONE
    available: tuple[int, ...] = ()  # partitions with a leader


class ClusterView:
    def __init__(self, bootstrap: list[str], connections: Connections, *, refresh_backoff_ms: int = 100,
                 max_age_ms: int = 300_000, request_timeout_ms: int = 30_000,
                 allow_auto_topic_creation: bool = False) -> None:
        """``allow_auto_topic_creation``: Kafka's Metadata flag, true for producers and for
        consumers with ``allow.auto.create.topics`` (the broker decides, with
        ``auto.create.topics.enable``); false for admin tools, which must not create."""
        self.bootstrap = bootstrap
        self.allow_auto_topic_creation = allow_auto_topic_creation
        self.connections = connections
        self.refresh_backoff_s = refresh_backoff_ms / 1000
        self.max_age_s = max_age_ms / 1000
        self.request_timeout_s = request_timeout_ms / 1000
        self.brokers: dict[int, str] = {}
        self.topics: dict[str, TopicInfo] = {}
        self.cluster_id = ""
        self.version = 0
        #: Set when retrying cannot help (a broker refused the TLS handshake, or the bootstrap
        #: addresses are not brokers' gRPC listeners); waiting on metadata raises it.
        self.fatal_error: SslAuthenticationError | WrongListenerError | None = None
        self._listener_checked: dict[str, str | None] = {}  # address: why it is the wrong listener
        self.wanted: set[str] = set()
        #: Ask for every topic (a pattern subscription), not only the wanted ones.
        self.all_topics = False
        self._need_update = True
        self._wake = asyncio.Event()
        self._updated = asyncio.Event()
        self._last_refresh = 0.0
        self._task: asyncio.Task | None = None
        self._closed = False
        self._next = random.randrange(1 << 16)

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="client-metadata")

    async def close(self) -> None:
        self._closed = True
        self._updated.set()
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    # -- queries ----------------------------------------------------------------------------------

    def partition(self, topic: str, partition: int) -> PartitionInfo | None:
        t = self.topics.get(topic)
        if t is None or partition >= len(t.partitions):
            return None
        return t.partitions[partition]

    def leader_for(self, topic: str, partition: int) -> int | None:
        p = self.partition(topic, partition)
        return p.leader if p is not None and p.leader >= 0 else None

    def partition_count(self, topic: str) -> int | None:
        t = self.topics.get(topic)
        # not t.error: ErrorCode.NONE is 0 (the producer asks once per record: no enum lookup)
        return len(t.partitions) if t is not None and not t.error and t.partitions else None

    # -- updates ----------------------------------------------------------------------------------

    def add(self, topic: str) -> None:
        if topic not in self.wanted:
            self.wanted.add(topic)
            self._need_update = True

    def request_update(self) -> int:
        """Ask for a refresh; returns the version to wait past."""
        self._need_update = True
        self._wake.set()
        return self.version

    async def await_update(self, last_version: int, timeout_s: float) -> None:
        """Until the version is past ``last_version`` (Kafka's awaitUpdate); TimeoutError, or
        SslAuthenticationError when a broker refused the handshake meanwhile."""
        deadline = time.monotonic() + timeout_s
        while self.version <= last_version:
            if self.fatal_error is not None:
                raise self.fatal_error
            if self._closed:
                raise ClientError("Requested metadata update after close")
            left = deadline - time.monotonic()
            if left <= 0:
                raise asyncio.TimeoutError()
            await asyncio.wait_for(self._updated.wait(), left)

    async def wait_on_metadata(self, topic: str, partition: int | None, max_wait_ms: int) -> float:
        """Kafka's ``waitOnMetadata``: returns the ms waited; raises KafkaTimeoutError with
        Kafka's messages."""
        self.add(topic)
        count = self.partition_count(topic)
        if count is not None and (partition is None or partition < count):
            return 0.0
        self.check_authorized(topic)
        begin = time.monotonic()
        remaining_ms = float(max_wait_ms)
        while True:
            version = self.request_update()
            try:
                await self.await_update(version, remaining_ms / 1000)
            except asyncio.TimeoutError:
                # Rethrow with the original max wait, not what was left of it.
                raise KafkaTimeoutError(f"Topic {topic} not present in metadata after {max_wait_ms} ms.") from None
            elapsed_ms = (time.monotonic() - begin) * 1000
            if elapsed_ms >= max_wait_ms:
                if count is None:
                    raise KafkaTimeoutError(f"Topic {topic} not present in metadata after {max_wait_ms} ms.")
                raise KafkaTimeoutError(f"Partition {partition} of topic {topic} with partition count {count} is "
                                        f"not present in metadata after {max_wait_ms} ms.")
            t = self.topics.get(topic)
            if t is not None and t.error in (ErrorCode.INVALID_REQUEST, ErrorCode.INVALID_TOPIC_EXCEPTION):
                raise KafkaError(t.error, f"Invalid topic: {topic}")
            self.check_authorized(topic)
            remaining_ms = max_wait_ms - elapsed_ms
            count = self.partition_count(topic)
            if count is not None and (partition is None or partition < count):
                return elapsed_ms

    def check_authorized(self, topic: str) -> None:
        """Kafka's TopicAuthorizationException: the last metadata refused the topic, which
        waiting does not change."""
        t = self.topics.get(topic)
        if t is not None and t.error == ErrorCode.TOPIC_AUTHORIZATION_FAILED:
            raise KafkaError(t.error, f"Not authorized to access topics: [{topic}]")

    async def _run(self) -> None:
        while not self._closed:
            wait = self.max_age_s - (time.monotonic() - self._last_refresh)
            if not self._need_update and wait > 0:
                self._wake.clear()
                try:  # asyncio.timeout, not wait_for, which can lose a cancel on 3.11 (gh-86296)
                    async with asyncio.timeout(wait):
                        await self._wake.wait()
                except TimeoutError:
                    pass
                continue
            since = time.monotonic() - self._last_refresh
            if since < self.refresh_backoff_s:
                await asyncio.sleep(self.refresh_backoff_s - since)
            try:
                await self.refresh()
            except asyncio.CancelledError:
                raise
            except Exception as e:
                log.debug("metadata refresh failed: %s", e)
                self._last_refresh = time.monotonic()

    def _nodes(self) -> list[str]:
        known = list(self.brokers.values())
        return known + [b for b in self.bootstrap if b not in known]

    async def refresh(self) -> None:
        """One Metadata request to the next broker that answers."""
        self._need_update = False
        nodes = self._nodes()
        last: Exception | None = None
        wrong: list[str] = []
        for i in range(len(nodes)):
            address = nodes[(self._next + i) % len(nodes)]
            try:
                resp = await self.connections.stub(address).Metadata(
                    pb.MetadataRequest(topics=[] if self.all_topics else sorted(self.wanted),
                                       allow_auto_topic_creation=self.allow_auto_topic_creation),
                    timeout=min(self.request_timeout_s, 10))
            except grpc.aio.AioRpcError as e:
                last = e
                reason = tls_failure(e.details() or "")
                if reason is not None:
                    self.fatal_error = SslAuthenticationError(f"{address}: {reason}")
                    self._signal()
                    raise self.fatal_error from None
                why = await self._wrong_listener(address, e)
                if why is not None:
                    wrong.append(why)
                continue
            self._next += i + 1
            if not resp.brokers:
                log.debug("Ignoring empty metadata response from %s", address)
                continue
            self._update(resp)
            return
        self._need_update = True
        if wrong and not self.brokers:
            self.fatal_error = WrongListenerError("; ".join(wrong))
            self._signal()
            raise self.fatal_error
        raise ClientError(f"no broker answered a metadata request: {describe(last) if last else 'no broker known'}")

    async def _wrong_listener(self, address: str, e: grpc.aio.AioRpcError) -> str | None:
        """Why ``address`` is not a broker's gRPC listener, if that is why the call failed:
        it lacks the broker API (a controller), or it hung up at once and answers the Kafka
        protocol instead (checked once per address)."""
        if e.code() == grpc.StatusCode.UNIMPLEMENTED:
            return not_a_broker(address)
        if e.code() != grpc.StatusCode.UNAVAILABLE or "socket closed" not in (e.details() or "").lower():
            return None
        if address not in self._listener_checked:
            self._listener_checked[address] = kafka_listener(address) if await speaks_kafka(address) else None
        return self._listener_checked[address]

    def _update(self, resp: pb.MetadataResponse) -> None:
        self.brokers = {b.node_id: f"{b.host}:{b.port}" for b in resp.brokers}
        self.cluster_id = resp.cluster_id
        topics = dict(self.topics) if self.wanted and not self.all_topics else {}
        for t in resp.topics:
            topic_id = uuid.UUID(bytes=t.topic_id) if t.topic_id else None
            parts = tuple(PartitionInfo(p.partition, p.leader, p.leader_epoch, tuple(p.replicas), tuple(p.isr))
                          for p in sorted(t.partitions, key=lambda p: p.partition))
            known = self.topics.get(t.name)
            if known is not None and known.topic_id == topic_id:
                parts = tuple(_newer(known, p) for p in parts)
            topics[t.name] = TopicInfo(t.name, topic_id, parts, ErrorCode.of(t.error_code),
                                       tuple(p.partition for p in parts if p.leader >= 0))
        self.topics = topics
        self._last_refresh = time.monotonic()
        self.version += 1
        self.fatal_error = None
        self._signal()

    def _signal(self) -> None:
        """Wake whoever waits on an update."""
        updated, self._updated = self._updated, asyncio.Event()
        updated.set()


def _newer(known: TopicInfo, p: PartitionInfo) -> PartitionInfo:
    """``p``, unless what is known of the partition has a newer leader epoch: a broker that
    has not caught up with the metadata log answers with an older leader, and going back to
    it would send requests to a former leader (Kafka keeps the newer epoch the same way)."""
    if p.partition < len(known.partitions):
        before = known.partitions[p.partition]
        if before.partition == p.partition and before.leader_epoch > p.leader_epoch:
            log.debug("Not replacing the leader epoch %d of %s-%d with the older %d", before.leader_epoch,
                      known.name, p.partition, p.leader_epoch)
            return before
    return p
