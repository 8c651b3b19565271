"""A broker process (Kafka's BrokerServer in KRaft mode).

Start-up, in Kafka's order: check the log directories belong to one cluster and this node;
open the partition stores; load the local metadata snapshot; listen; register with the
controller quorum (a new incarnation id, the broker starts fenced) and heartbeat; catch up
with the metadata log; only then act on it (become leader or follower of the partitions
assigned here, delete stray logs); only then serve clients, and ask to be unfenced (the
controller unfences the broker once its heartbeats report an offset at least that of its
registration). Stop is a controlled shutdown: the controller moves this broker's leaderships
away before the process goes. A failed log directory halts the process instead, as Kafka's
broker halts (``log_dir_failure``).

Listeners bind early, so that a port in use stops the server at once with one line, but serve
clients only after the initial catch-up, as Kafka's BrokerServer enables request processing
only then: before, a restarting broker would answer Metadata with no brokers and no topics,
and clients (librdkafka) would drop every broker they knew. Kafka listeners refuse
connections until then; gRPC listeners answer UNAVAILABLE (``ServingGate``).
"""
from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

import grpc

from metadata.authorizer import StandardAuthorizer
from metadata.client import ControllerClient
from common.errors import ErrorCode as ControllerCode, KafkaError
from metadata.config import ServerConfig
from metadata.delta import MetadataChanges
from metadata.image import MetadataImage
from common.metrics import MetricsEndpoint
from metadata.principal import mapper_from_config
from protos import broker_pb2 as pb
from protos import controller_pb2 as cpb
from common.config_def import ConfigError
from raft.errors import StorageError
from raft.storage import check_formatted
from raft.transport import EXCLUSIVE_BIND, add_port, add_service

from .auto_topics import TopicAutoCreator, create_topic
from .cluster_metadata import replica_status
from .config import BrokerConfig
from .connection_quotas import ConnectionQuotas, parse_overrides
from .grpc_fetch_answer import add_broker_servicer
from .grpc_throttling import RequestTimeQuotas
from .group_coordinator import OFFSETS_TOPIC, GroupCoordinator
from .isr import IsrManager
from .kafka.apis import KafkaApis
from .kafka.listener import KafkaListener
from .kafka.throttling import KafkaThrottling
from .lifecycle import BrokerLifecycle
from .log_dir_failure import halt_broker, refuse_failed
from .log_manager import LogManager
from .fetch_session import FetchSessionCache
from .metrics import BrokerMetrics
from .metadata_checkpoint import MetadataCheckpoint
from .metadata_fetcher import MetadataFetcher
from .replica_fetcher import ReplicaFetcherManager
from .producer_ids import ProducerIdManager
from .quotas import ClientQuotas
from .replica_manager import ReplicaManager
from .service import BrokerService
from .transaction_coordinator import TransactionCoordinator
from .transaction_verification import TransactionVerifier
from clients.topics import TRANSACTION_STATE_TOPIC

#: How long a stopping broker waits for the controller to confirm its controlled shutdown.
CONTROLLED_SHUTDOWN_S = 5.0
log = logging.getLogger("brokerd.server")

CATCH_UP_TIMEOUT_S = 60.0


#: How far over ``socket.request.max.bytes`` a gRPC message may be and still be refused by the
#: guard (``raft.transport.add_service``) rather than end its call: a producer's
#: ``max.request.size`` default.
TRANSPORT_HEADROOM = 1 << 20


class ServingGate(grpc.aio.ServerInterceptor):
    """Until ``open()``, every call to a broker's gRPC listener but DescribeBroker (its own
    status, which `kraft health` reads while it starts) ends UNAVAILABLE, which clients and
    other brokers retry, elsewhere or later."""

    ALWAYS = frozenset({"DescribeBroker"})

    def __init__(self, broker_id: int) -> None:
        self.broker_id = broker_id
        self.is_open = False

    def open(self) -> None:
        self.is_open = True

    async def intercept_service(self, continuation: Callable[[grpc.HandlerCallDetails], Awaitable[Any]],
                                details: grpc.HandlerCallDetails) -> Any:
        handler = await continuation(details)
        if self.is_open or handler is None or details.method.rsplit("/", 1)[-1] in self.ALWAYS:
            return handler
        message = (f"broker {self.broker_id} is starting: it serves once it has caught up with the "
                   f"metadata log")

        async def refuse(request_or_stream: Any, context: grpc.aio.ServicerContext) -> Any:
            await context.abort(grpc.StatusCode.UNAVAILABLE, message)

        serializers = dict(request_deserializer=handler.request_deserializer,
                           response_serializer=handler.response_serializer)
        if handler.unary_unary is not None:
            return grpc.unary_unary_rpc_method_handler(refuse, **serializers)
        if handler.stream_stream is not None:  # ProduceStream
            return grpc.stream_stream_rpc_method_handler(refuse, **serializers)
        return grpc.stream_unary_rpc_method_handler(refuse, **serializers)  # ProduceNoAck


def cannot_listen(address: str, listener: str, why: str) -> ConfigError:
    return ConfigError(f"cannot listen on {address} (listener {listener}): {why}")


def cluster_id_of(cfg: ServerConfig) -> str:
    """The cluster id all of this broker's directories are formatted with (StorageError if
    one is not formatted, is another node's, or another cluster's)."""
    found: dict[str, str] = {}
    for d in dict.fromkeys((cfg.metadata_log_dir, *cfg.log_dirs)):
        found[d] = check_formatted(d, None, cfg.node_id)["cluster.id"]
    ids = set(found.values())
    if len(ids) > 1:
        raise StorageError("log directories are formatted for different clusters: " +
                           ", ".join(f"{d} for {c}" for d, c in found.items()))
    return ids.pop()


class BrokerServer:
    def __init__(self, cfg: ServerConfig, metrics: MetricsEndpoint | None = None) -> None:
        """``metrics``: a combined node's endpoint, shared with its controller and served by the
        caller; by default the broker serves its own at ``prometheus.listener``."""
        self.cfg = cfg
        self.config = BrokerConfig.from_server(cfg)
        self._own_metrics = metrics is None
        self.metrics = metrics or MetricsEndpoint(cfg.prometheus_listener())
        self.cluster_id = ""
        self.published_offset = 0
        self.resumed_from_offset = 0
        self._done: asyncio.Future[BaseException | None] | None = None
        self._stopping = False
        self._started = False
        # What start() opened, each closed by its step of _close(), in reverse: steps are
        # pushed as parts are made, in the order that stops clients' work before what it uses.
        self._closing = contextlib.AsyncExitStack()
        self._published = asyncio.Event()  # set, and replaced, at each metadata image acted on

    # -- start --------------------------------------------------------------------------------

    async def start(self) -> None:
        """Raises StorageError (log directories), KafkaError (registration refused, e.g.
        INCONSISTENT_CLUSTER_ID, or no catching up), StorageFailure (RocksDB) or ConfigError (a
        listener that cannot bind); what was opened is closed."""
        self._done = asyncio.get_running_loop().create_future()
        try:
            await self._start()
        except BaseException:
            self._stopping = True
            await self._close()
            raise

    async def _start(self) -> None:
        cfg, bcfg = self.cfg, self.config
        self.cluster_id = cluster_id_of(cfg)
        # Decided from the ACLs of the metadata this broker acts on (denied until it has some).
        self.authorizer = authorizer = StandardAuthorizer.from_config(cfg.props, lambda: self.rm.image.acls)
        self.mapper = mapper = mapper_from_config(cfg.props)
        if self._own_metrics:
            self.metrics.start()
        self.client = ControllerClient(cfg.quorum_bootstrap(), timeout=30, attempt_timeout=5, tls=cfg.controller_tls)
        self._on_close(self.client, self.client.close)
        refuse_failed(cfg.log_dirs)  # a store that failed a read is not served again (log_dir_failure)
        self.logs = LogManager(cfg.log_dirs, bcfg.flush, halt_broker)
        self._on_close(self.logs, self.logs.close)
        self.checkpoint = MetadataCheckpoint(cfg.log_dirs[0], self.cluster_id, bcfg.metadata_snapshot_interval_ms)
        self._on_close(self.checkpoint, self.checkpoint.stop, once_started=True)
        image = self.checkpoint.load()
        if image is not None:
            self.resumed_from_offset = image.offset
            log.info("resuming the metadata log after offset %d (local snapshot)", image.offset)
        self.fetcher = MetadataFetcher(self.client, cfg.node_id, image or MetadataImage.empty(self.cluster_id),
                                       max_wait_ms=500)
        self.lifecycle = BrokerLifecycle(
            self.client, cfg.node_id, self.cluster_id, self._endpoints(), rack=bcfg.rack,
            heartbeat_interval_s=bcfg.heartbeat_interval_ms / 1000, metadata_offset=lambda: self.published_offset,
            ready_to_unfence=False)
        self.fetchers = ReplicaFetcherManager(bcfg, lambda: self.lifecycle.epoch, self._fatal)
        self.rm = ReplicaManager(bcfg, self.logs, self.fetchers, fenced=lambda: self.lifecycle.fenced)
        self._on_close(self.rm, self.rm.stop, once_started=True)
        self.rm.isr = IsrManager(self.client, cfg.node_id, lambda: self.lifecycle.epoch,
                                 bcfg.replica_lag_time_max_ms, self.rm.leaders, eligible=self._isr_eligible)
        self.groups = GroupCoordinator(self.rm, bcfg, self._create_offsets_topic)
        self.fetch_sessions = FetchSessionCache(bcfg.fetch_session_cache_slots)  # shared by every listener
        requests = self.metrics.requests if self.metrics.enabled else None
        self.producer_ids = producer_ids = ProducerIdManager(self.client, cfg.node_id, lambda: self.lifecycle.epoch)
        self.transactions = TransactionCoordinator(self.rm, bcfg, producer_ids, self._create_transaction_state_topic,
                                                   self.groups.marker_written)
        self.rm.txn_verifier = TransactionVerifier(self.rm, self.transactions)
        BrokerMetrics(self.rm, self.groups, lambda: self.published_offset, self.metrics.registry,
                      self.fetch_sessions, self.transactions)
        auto_topics = TopicAutoCreator(bcfg.auto_create, self.client)
        self.kafka_listeners = []
        self.servers = []
        self.gate = ServingGate(cfg.node_id)
        self.client_quotas = ClientQuotas(lambda: self.rm.image.client_quotas, bcfg.quota_window)
        connections = ConnectionQuotas(bcfg.max_connections, bcfg.max_connections_per_ip,
                                       parse_overrides(bcfg.max_connections_per_ip_overrides),
                                       lambda: self.rm.image.client_quotas, bcfg.quota_window,
                                       bcfg.max_connection_creation_rate, bcfg.listener_connection_creation_rates)
        for name, (host, port) in cfg.listeners.items():
            if name == cfg.controller_listener:
                continue
            address = f"{host or '0.0.0.0'}:{port}"
            security = bcfg.security[name]
            if name in bcfg.kafka_listeners:
                listener = KafkaListener(name, host, port, KafkaApis(self.rm, name, self.groups, producer_ids,
                                                                     self.client, authorizer, mapper, auto_topics,
                                                                     self.transactions,
                                                                     KafkaThrottling(self.client_quotas), self.fetch_sessions),
                                         bcfg.request_max_bytes, requests, security, connections)
                try:
                    await listener.bind()
                except OSError as e:
                    raise cannot_listen(address, name, e.strerror or str(e)) from None
                self.kafka_listeners.append(listener)
                self._on_close(listener, listener.stop)
                continue
            # A gRPC server per listener, so that each answers Metadata with its own listener's
            # addresses (as Kafka does) and is counted under its own name.
            # socket.request.max.bytes is checked per message by the service's guard, which
            # refuses one line; gRPC's own limit above it ends a call (a whole ProduceStream) at
            # once, as Kafka closes the connection, for a message far over the limit.
            server = grpc.aio.server(options=[("grpc.max_receive_message_length",
                                               bcfg.request_max_bytes + TRANSPORT_HEADROOM),
                                              ("grpc.max_send_message_length", 256 << 20),
                                              EXCLUSIVE_BIND],
                                     interceptors=[*([requests.interceptor(name)] if requests else []), self.gate,
                                                   RequestTimeQuotas(self.client_quotas, mapper)])
            add_service(server, add_broker_servicer,
                        BrokerService(self.rm, name, lambda: self.client.last_controller_id, self.describe,
                                      producer_ids, self.groups, authorizer, mapper, auto_topics,
                                      self.transactions, self.client_quotas, self.fetch_sessions),
                        max_bytes=bcfg.request_max_bytes)
            if not add_port(server, address, security.tls):
                raise cannot_listen(address, name, "the port is in use or the address is not local")
            self.servers.append(server)
            self._on_close(server, functools.partial(server.stop, grace=1.0))
        # Stopped before the listeners, in this order (the last pushed goes first).
        for part in (self.fetchers, self.rm.isr, self.fetcher, self.lifecycle, self.groups, self.transactions):
            self._on_close(part, part.stop)
        for server in self.servers:
            await server.start()
        try:
            await self.lifecycle.start()
        except KafkaError as e:
            if e.code == ControllerCode.INCONSISTENT_CLUSTER_ID:
                raise StorageError(f"log directory {cfg.log_dirs[0]} is formatted for cluster {self.cluster_id}, "
                                   f"but the controller quorum is another cluster ({e.message})") from None
            raise
        log.info("broker %d registered with epoch %d; catching up with the metadata log", cfg.node_id,
                 self.lifecycle.epoch)
        self.fetcher.start()
        try:
            await self.fetcher.wait_caught_up(CATCH_UP_TIMEOUT_S)
        except asyncio.TimeoutError:
            raise KafkaError(ControllerCode.REQUEST_TIMED_OUT,
                                  f"broker {cfg.node_id} did not catch up with the metadata log within "
                                  f"{CATCH_UP_TIMEOUT_S:.0f}s (at offset {self.fetcher.offset}, the controller's "
                                  f"high watermark is {self.fetcher.high_watermark})") from None
        self._publish(self.fetcher.image, None)
        self.rm.delete_stray_logs()
        self.fetcher.listeners.append(self._publish)
        self.fetcher.listeners.append(self.checkpoint.listener)
        self.checkpoint.listener(self.fetcher.image, None)
        await self.checkpoint.save_async()
        self.checkpoint.start()
        self.logs.start()
        self.rm.start()
        self.groups.start()
        self.transactions.start()
        self.rm.isr.start()
        self._started = True
        await self._serve_clients()
        log.info("broker %d serving at metadata offset %d (first fetch from offset %s)", cfg.node_id,
                 self.published_offset, self.fetcher.first_fetch_offset)

    async def _serve_clients(self) -> None:
        """Caught up: open the listeners to clients, then ask to be unfenced."""
        self.gate.open()
        for listener in self.kafka_listeners:
            try:
                await listener.start()
            except OSError as e:
                raise cannot_listen(f"{listener.host or '0.0.0.0'}:{listener.port}", listener.name,
                                    e.strerror or str(e)) from None
        self.lifecycle.ready_to_unfence = True

    async def _create_offsets_topic(self, partitions: int, replication_factor: int) -> None:
        """Have the controller create __consumer_offsets (the first FindCoordinator asks)."""
        await self._create_internal_topic(OFFSETS_TOPIC, partitions, replication_factor, {})

    async def _create_transaction_state_topic(self, partitions: int, replication_factor: int) -> None:
        """__transaction_state, on the first FindCoordinator for a transactional id, with
        Kafka's transaction.state.log.min.isr; no more than the replication factor, which the
        coordinator lowers to the live brokers (a one-broker cluster needs no settings)."""
        min_isr = min(self.config.transaction_state_min_isr, replication_factor)
        await self._create_internal_topic(TRANSACTION_STATE_TOPIC, partitions, replication_factor,
                                          {"min.insync.replicas": str(min_isr)})

    async def _create_internal_topic(self, name: str, partitions: int, replication_factor: int,
                                     configs: dict[str, str]) -> None:
        try:
            code, message = await create_topic(self.client, cpb.CreatableTopic(
                name=name, num_partitions=partitions, replication_factor=replication_factor,
                configs={"cleanup.policy": "compact", **configs}))
        except KafkaError as e:
            log.warning("could not create %s: %s", name, e)
            return
        if code not in (ControllerCode.NONE, ControllerCode.TOPIC_ALREADY_EXISTS):
            log.warning("could not create %s: %s: %s", name, code.name, message)

    def _endpoints(self) -> list[cpb.Endpoint]:
        return [cpb.Endpoint(name=n, host=h, port=p, security_protocol=self.config.security_protocol(n))
                for n, (h, p) in self.cfg.broker_listeners().items()]

    def _publish(self, image: MetadataImage, changes: MetadataChanges | None) -> None:
        try:
            self.rm.apply(image, changes)
            self.groups.leaderships_changed()
        except Exception as e:
            log.exception("applying metadata offset %d failed", image.offset)
            self._fatal(e)
            return
        self.published_offset = image.offset
        self._published.set()
        self._published = asyncio.Event()

    def _isr_eligible(self, replica: int) -> bool:
        """Kafka's isReplicaIsrEligible (KIP-841): registered, unfenced and not shutting down."""
        b = self.rm.image.brokers.get(replica)
        return b is not None and not b.fenced and not b.in_controlled_shutdown

    def _fatal(self, e: BaseException) -> None:
        if self._done is not None and not self._done.done():
            self._done.set_result(e)

    # -- status -------------------------------------------------------------------------------

    def describe(self) -> pb.DescribeBrokerResponse:
        return pb.DescribeBrokerResponse(
            broker_id=self.cfg.node_id, broker_epoch=self.lifecycle.epoch, fenced=self.lifecycle.fenced,
            metadata_offset=self.published_offset, first_metadata_fetch_offset=self.fetcher.first_fetch_offset or 0,
            resumed_from_offset=self.resumed_from_offset, metadata_snapshots_loaded=self.fetcher.snapshots_loaded,
            cluster_id=self.cluster_id, log_dirs=[str(d) for d in self.cfg.log_dirs],
            replicas=[replica_status(p) for _, p in sorted(self.rm.partitions.items(), key=lambda kv: (kv[1].topic, kv[1].index))])

    # -- stop ---------------------------------------------------------------------------------

    async def stop(self) -> None:
        """Controlled shutdown, then close everything; idempotent."""
        if self._stopping:
            return
        self._stopping = True
        if self._started:
            if await self.lifecycle.controlled_shutdown(timeout=CONTROLLED_SHUTDOWN_S):
                await self._await_no_leaderships(5.0)
            else:
                log.warning("no controller confirmed the controlled shutdown within %.0fs; stopping anyway "
                            "(the controller fences this broker when its session expires)", CONTROLLED_SHUTDOWN_S)
        await self._close()
        if self._done is not None and not self._done.done():
            self._done.set_result(None)

    async def _await_no_leaderships(self, timeout: float) -> None:
        """Until the metadata moving our leaderships away has arrived, so that waiting producers
        hear NOT_LEADER_OR_FOLLOWER rather than a timeout."""
        deadline = time.monotonic() + timeout
        while any(True for _ in self.rm.leaders()) and (left := deadline - time.monotonic()) > 0:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._published.wait(), left)

    def _on_close(self, part: object, close: Callable[[], Awaitable[Any]], *, once_started: bool = False) -> None:
        """Have ``_close`` call ``close`` (``once_started``: only if start() completed), logging
        a failure in one line and going on with the next step."""
        async def step() -> None:
            if once_started and not self._started:
                return
            try:
                await close()
            except Exception as e:
                log.warning("shutdown of %s: %s", type(part).__name__, e)
        self._closing.push_async_callback(step)

    async def _close(self) -> None:
        """Close whatever start() got to open, in reverse dependency order."""
        await self._closing.aclose()
        if self._own_metrics:
            self.metrics.stop()
        if self._started:
            log.info("broker %d stopped", self.cfg.node_id)

    async def wait_stopped(self) -> BaseException | None:
        """None after ``stop()``; the error when the broker cannot go on (metadata it cannot apply, a
        replica fetcher's failure; a failed log directory halts the process at once: ``log_dir_failure``)."""
        assert self._done is not None, "start() first"
        return await asyncio.shield(self._done)
