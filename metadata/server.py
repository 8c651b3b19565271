"""A controller process: the Raft node holding the metadata log, the quorum controller on
top of it, and the controller's gRPC service on the controller listener."""
from __future__ import annotations

import gc
from collections.abc import Awaitable, Callable
from typing import Any

import grpc

from common.metrics import MetricsEndpoint
from protos import controller_pb2_grpc
from raft.config import NodeOptions
from raft.node import RaftNode
from raft.transport import add_service, server_options
from raft.storage import DiskStorage

from .acls import AclOperation
from .authorizer import Access, StandardAuthorizer
from .bootstrap import read_bootstrap_records
from .config import ServerConfig
from .controller import ControllerConfig, QuorumController
from .loop_stall import LoopStallProbe
from .metrics import ControllerMetrics, RaftMetrics
from .principal import PrincipalMapper, caller, mapper_from_config
from .service import ControllerService
from .state_machine import MetadataStateMachine


def node_options(cfg: ServerConfig) -> NodeOptions:
    election = cfg.int("controller.quorum.election.timeout.ms")
    heartbeat = cfg.value("controller.quorum.heartbeat.interval.ms")
    return NodeOptions(
        tick_ms=min(50, max(5, election // 10)),
        heartbeat_interval_ms=min(100, election // 5) if heartbeat is None else heartbeat,
        election_timeout_ms=election,
        snapshot_entries=cfg.int("metadata.log.max.records.between.snapshots"),
        snapshot_bytes=cfg.int("metadata.log.max.record.bytes.between.snapshots"),
        snapshot_trailing_entries=cfg.int("metadata.log.snapshot.trailing.records"),
        listen=cfg.controller_bind(),
        # The controller listener's TLS serves clients and dials the other controllers.
        tls=cfg.security[cfg.controller_listener].tls)


def controller_config(cfg: ServerConfig) -> ControllerConfig:
    return ControllerConfig(
        session_timeout_ms=cfg.int("broker.session.timeout.ms"),
        heartbeat_interval_ms=cfg.int("broker.heartbeat.interval.ms"),
        default_partitions=cfg.int("num.partitions"),
        default_replication_factor=cfg.int("default.replication.factor"),
        auto_leader_rebalance=cfg.bool("auto.leader.rebalance.enable"),
        leader_imbalance_percentage=cfg.int("leader.imbalance.per.broker.percentage"),
        leader_imbalance_check_interval_s=cfg.int("leader.imbalance.check.interval.seconds"),
        bootstrap_records=read_bootstrap_records(cfg.metadata_log_dir))


class RaftAccess(grpc.aio.ServerInterceptor):
    """The Raft services on the controller listener need what Kafka's KRaft RPCs need on the
    cluster: CLUSTER_ACTION for another controller's messages (and an observer's Observe),
    DESCRIBE for RaftAdmin's Status, ALTER for the rest (leadership transfers; its membership RPCs are then
    refused anyway, by RaftMembershipRefused). A refusal ends the call with PERMISSION_DENIED and one line."""

    def __init__(self, authorizer: StandardAuthorizer, mapper: PrincipalMapper) -> None:
        self.authorizer = authorizer
        self.mapper = mapper

    @staticmethod
    def operation(method: str) -> AclOperation | None:
        service, _, name = method.lstrip("/").partition("/")
        if service == "kraft.raft.RaftPeer":
            return AclOperation.CLUSTER_ACTION
        if service == "kraft.raft.RaftAdmin":
            if name == "Observe":  # an observing controller asking to be replicated to, as a Raft peer
                return AclOperation.CLUSTER_ACTION
            return AclOperation.DESCRIBE if name == "Status" else AclOperation.ALTER
        return None  # the controller's service checks its own requests

    async def intercept_service(self, continuation: Callable[[grpc.HandlerCallDetails], Awaitable[Any]],
                                details: grpc.HandlerCallDetails) -> Any:
        handler = await continuation(details)
        op = self.operation(details.method)
        if handler is None or op is None:
            return handler

        async def check(context: grpc.aio.ServicerContext) -> None:
            access = Access(self.authorizer, await caller(context, self.mapper))
            if not access.cluster(op):
                await context.abort(grpc.StatusCode.PERMISSION_DENIED,
                                    f"CLUSTER_AUTHORIZATION_FAILED: {access.cluster_denied(op)}")

        def checked(inner: Callable[[Any, grpc.aio.ServicerContext], Awaitable[Any]]) -> Any:
            async def serve(request_or_stream: Any, context: grpc.aio.ServicerContext) -> Any:
                await check(context)
                return await inner(request_or_stream, context)
            return serve

        serializers = dict(request_deserializer=handler.request_deserializer,
                           response_serializer=handler.response_serializer)
        if handler.unary_unary is not None:  # RaftAdmin
            return grpc.unary_unary_rpc_method_handler(checked(handler.unary_unary), **serializers)
        return grpc.stream_unary_rpc_method_handler(checked(handler.stream_unary), **serializers)  # RaftPeer


class RaftMembershipRefused(grpc.aio.ServerInterceptor):
    """A controller does not serve the Raft library's own membership RPCs (RaftAdmin's
    AddVoter, AddLearner, RemoveMember): they would change the voters without the quorum's
    rules of metadata/quorum.py (a static quorum's voters cannot change, the cluster id,
    DUPLICATE_VOTER, catching up as an observer first, and KIP-853's directory ids). The
    operator's tools are ``kraft quorum add-controller`` and ``remove-controller``. raft-kv, the
    library's example, keeps serving them."""

    METHODS = frozenset({"AddVoter", "AddLearner", "RemoveMember"})

    async def intercept_service(self, continuation: Callable[[grpc.HandlerCallDetails], Awaitable[Any]],
                                details: grpc.HandlerCallDetails) -> Any:
        handler = await continuation(details)
        service, _, name = details.method.lstrip("/").partition("/")
        if handler is None or service != "kraft.raft.RaftAdmin" or name not in self.METHODS:
            return handler

        async def refuse(request: Any, context: grpc.aio.ServicerContext) -> Any:
            await context.abort(grpc.StatusCode.UNIMPLEMENTED, (
                f"a controller does not serve RaftAdmin {name}: change the controller quorum with "
                f"`kraft quorum add-controller` or `kraft quorum remove-controller`, which check the cluster id, "
                f"static quorums, duplicate voters and directory ids"))
        return grpc.unary_unary_rpc_method_handler(refuse, request_deserializer=handler.request_deserializer,
                                                   response_serializer=handler.response_serializer)


class ControllerServer:
    def __init__(self, cfg: ServerConfig, metrics: MetricsEndpoint | None = None) -> None:
        """``metrics``: a combined node's endpoint, shared with its broker and served by the
        caller; by default the controller serves its own at ``prometheus.listener``."""
        self.cfg = cfg
        self._own_metrics = metrics is None
        self.metrics = metrics or MetricsEndpoint(cfg.prometheus_listener())
        storage = DiskStorage(cfg.metadata_log_dir, cfg.node_id)
        self.sm = MetadataStateMachine(storage.cluster_id)
        self.authorizer = StandardAuthorizer.from_config(cfg.props, lambda: self.sm.image.acls)
        self.mapper = mapper = mapper_from_config(cfg.props)
        options = node_options(cfg)
        interceptors = [self.metrics.requests.interceptor(cfg.controller_listener)] if self.metrics.enabled else []
        if self.authorizer is not None:
            interceptors.append(RaftAccess(self.authorizer, mapper))
        interceptors.append(RaftMembershipRefused())  # after the authorizer: who may not ask learns nothing more
        server = grpc.aio.server(options=server_options(options.max_message_bytes), interceptors=interceptors)
        # Static voters (controller.quorum.voters), else the voter set storage was formatted
        # with; a controller in neither observes the quorum through its bootstrap servers.
        self.node = RaftNode(cfg.node_id, cfg.voters, self.sm, storage=storage, options=options,
                             address=cfg.controller_address(), server=server,
                             bootstrap_servers=None if cfg.voters else list(cfg.bootstrap_servers))
        self.controller = QuorumController(self.node, self.sm, controller_config(cfg))
        add_service(self.node.server, controller_pb2_grpc.add_ControllerServicer_to_server,
                    ControllerService(self.controller, self.authorizer, mapper, cfg.controller_listener))
        RaftMetrics(self.node, self.metrics.registry)
        ControllerMetrics(self.controller, self.metrics.registry)
        self.probe = LoopStallProbe()

    async def start(self) -> None:
        if self._own_metrics:
            self.metrics.start()  # first: a bad prometheus.listener fails before anything runs
        # What start-up made (modules, classes) lives as long as the process: frozen out of
        # the cyclic GC's generations (its garbage collected first), it is no longer walked by
        # every full collection, which a big batch's allocations set off in whichever thread
        # makes them and which holds the GIL throughout: ~35 ms of CPU with it, ~2 ms without
        # (docs/operations.md, "Bounded work per request"). Before the node runs on the loop.
        gc.collect()
        gc.freeze()
        await self.node.start()
        # Every stall over 100 ms is logged: no request may hold the loop that long (docs/operations.md).
        self.probe = LoopStallProbe(0.02, warn_ms=100, name=f"controller {self.cfg.node_id} event loop").start()

    async def stop(self) -> None:
        await self.probe.stop()
        await self.controller.stop()
        await self.node.stop()
        if self._own_metrics:
            self.metrics.stop()
