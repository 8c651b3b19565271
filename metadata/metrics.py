"""Prometheus metrics (docs/operations.md, "Monitoring"), named after Kafka's JMX metrics as
Prometheus' JMX exporter spells them (``kafka.controller:type=KafkaController,name=
ActiveControllerCount`` is ``kafka_controller_kafkacontroller_activecontrollercount``).

What every server process shares lives here, below the broker: ``MetricsEndpoint`` (one
registry and one HTTP server per process, so that several servers in one test process never
share the global registry), ``RequestMetrics`` (a latency histogram per request type, fed by a
gRPC interceptor and by the Kafka listener), and ``RaftMetrics``. The controller's own gauges
are ``ControllerMetrics``. Gauges are read from the current state when Prometheus scrapes
(custom collectors); only latencies and elections are recorded as they happen.

Collectors run on the HTTP server's thread: they read plain attributes and immutable metadata
images, never structures the event loop may be changing mid-iteration.
"""
from __future__ import annotations

import inspect
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import TYPE_CHECKING, Any

import grpc
from prometheus_client import (GC_COLLECTOR, CollectorRegistry, Counter, Histogram, PlatformCollector, ProcessCollector,
                               start_http_server)
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from raft.config import ConfigError
from raft.messages import Role

from .config import PROMETHEUS_LISTENER

if TYPE_CHECKING:
    from wsgiref.simple_server import WSGIServer

    from raft.node import RaftNode

    from .controller import QuorumController

#: Request latency buckets in seconds: from a sub-millisecond metadata answer to a long poll.
LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


def gauge(name: str, doc: str, value: float, labels: dict[str, str] | None = None) -> GaugeMetricFamily:
    """One gauge sample, for a collector."""
    g = GaugeMetricFamily(name, doc, labels=list(labels) if labels else None)
    g.add_metric(list(labels.values()) if labels else [], value)
    return g


class MetricsEndpoint:
    """A process's ``/metrics``: its own registry, served over HTTP at ``prometheus.listener``
    (nothing is served when ``listener`` is None, but collectors may still register)."""

    def __init__(self, listener: tuple[str, int] | None) -> None:
        self.listener = listener
        self.registry = CollectorRegistry(auto_describe=True)
        ProcessCollector(registry=self.registry)  # process_resident_memory_bytes, process_cpu_seconds_total, ...
        PlatformCollector(registry=self.registry)
        self.registry.register(GC_COLLECTOR)
        self.requests = RequestMetrics(self.registry)
        self._httpd: WSGIServer | None = None

    @property
    def enabled(self) -> bool:
        return self.listener is not None

    def start(self) -> None:
        """Listen; ConfigError (one line) when the address cannot be bound."""
        if self.listener is None or self._httpd is not None:
            return
        host, port = self.listener
        try:
            self._httpd, _ = start_http_server(port, addr=host or "0.0.0.0", registry=self.registry)
        except OSError as e:
            raise ConfigError(f"cannot listen on {host or '0.0.0.0'}:{port} ({PROMETHEUS_LISTENER}): "
                              f"{e.strerror or e}") from None

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None


class RequestMetrics:
    """``kafka_network_requestmetrics_total_time_seconds{request,listener}``: Kafka's
    RequestMetrics TotalTimeMs per request type, as a histogram whose ``_count`` is the request
    count (``rate()`` of it is RequestsPerSec)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.total_time = Histogram(
            "kafka_network_requestmetrics_total_time_seconds",
            "Time from a request's arrival to its answer, per request type and listener",
            ["request", "listener"], registry=registry, buckets=LATENCY_BUCKETS)

    def observer(self, request: str, listener: str) -> Callable[[float], None]:
        return self.total_time.labels(request, listener).observe

    def interceptor(self, listener: str) -> grpc.aio.ServerInterceptor:
        """Times every unary gRPC call of a server (request type = the method's name)."""
        return _TimingInterceptor(self, listener)


class _TimingInterceptor(grpc.aio.ServerInterceptor):
    def __init__(self, metrics: RequestMetrics, listener: str) -> None:
        self.metrics = metrics
        self.listener = listener

    async def intercept_service(self, continuation: Callable[[grpc.HandlerCallDetails], Awaitable[Any]],
                                details: grpc.HandlerCallDetails) -> Any:
        handler = await continuation(details)
        if handler is None or handler.unary_unary is None:
            return handler  # streams (Raft's Send, ProduceNoAck) are not requests one can time
        inner = handler.unary_unary
        observe = self.metrics.observer(details.method.rpartition("/")[2], self.listener)

        async def timed(request: Any, context: grpc.aio.ServicerContext) -> Any:
            started = time.perf_counter()
            try:
                answer = inner(request, context)
                return await answer if inspect.isawaitable(answer) else answer
            finally:
                observe(time.perf_counter() - started)

        return grpc.unary_unary_rpc_method_handler(timed, request_deserializer=handler.request_deserializer,
                                                   response_serializer=handler.response_serializer)


class StateCollector(Collector):
    """A collector whose samples are read from live state at each scrape; it registers itself.
    ``describe`` is empty: there is nothing to sample until the server runs."""

    def __init__(self, registry: CollectorRegistry) -> None:
        registry.register(self)

    def describe(self) -> list[Metric]:
        return []


_STATES = {Role.LEADER: "leader", Role.CANDIDATE: "candidate", Role.PRE_CANDIDATE: "prospective",
           Role.FOLLOWER: "follower"}


class RaftMetrics(StateCollector):
    """``kafka_server_raftmetrics_*`` (Kafka's raft-metrics group) of one Raft node: its view
    of the leader and epoch, its log's high watermark and end (exclusive offsets, as Kafka's),
    append and commit latencies, and the elections it started and won."""

    def __init__(self, node: RaftNode, registry: CollectorRegistry) -> None:
        self.node = node
        self.commit_latency = Histogram(
            "kafka_server_raftmetrics_commit_latency_seconds",
            "Time from this node's proposal of an entry to its commit and apply", registry=registry,
            buckets=LATENCY_BUCKETS)
        self.append_latency = Histogram(
            "kafka_server_raftmetrics_append_latency_seconds",
            "Time to make newly appended log entries durable (write and fsync)", registry=registry,
            buckets=LATENCY_BUCKETS)
        self.elections = Counter("kafka_server_raftmetrics_elections_started",
                                 "Elections this node started as a candidate", registry=registry)
        self.elections_won = Counter("kafka_server_raftmetrics_elections_won",
                                     "Elections this node won (it became the leader)", registry=registry)
        node.commit_latency_observer = self.commit_latency.observe
        node.append_latency_observer = self.append_latency.observe
        node.on_role_change(self._role_changed)
        super().__init__(registry)

    def _role_changed(self, role: Role, leader: int, term: int) -> None:
        if role == Role.CANDIDATE:
            self.elections.inc()
        elif role == Role.LEADER:
            self.elections_won.inc()

    def collect(self) -> Iterator[Metric]:
        n = self.node
        if not hasattr(n, "core"):
            return
        state = _STATES.get(n.role, "follower")
        states = GaugeMetricFamily("kafka_server_raftmetrics_current_state",
                                   "1 for this node's Raft state", labels=["state"])
        for s in _STATES.values():
            states.add_metric([s], 1.0 if s == state else 0.0)
        yield states
        yield gauge("kafka_server_raftmetrics_current_leader", "The leader's node id, -1 when unknown",
                    n.leader_id or -1)
        yield gauge("kafka_server_raftmetrics_current_epoch", "The current Raft term (Kafka's epoch)", n.term)
        yield gauge("kafka_server_raftmetrics_high_watermark",
                    "The offset after the last committed entry", n.commit_index + 1)
        yield gauge("kafka_server_raftmetrics_log_end_offset",
                    "The offset after the last entry in this node's log", n.next_index)
        yield gauge("kafka_server_raftmetrics_applied_offset", "The last entry applied to the state machine",
                    n.applied)


class ControllerMetrics(StateCollector):
    """``kafka_controller_kafkacontroller_*`` of one controller, from its committed metadata
    image when scraped. Every controller replays the same log, so the standbys report the same
    partition and broker counts; ActiveControllerCount is 1 on the active one only."""

    def __init__(self, controller: QuorumController, registry: CollectorRegistry) -> None:
        self.controller = controller
        super().__init__(registry)

    def collect(self) -> Iterator[Metric]:
        c = self.controller
        if not hasattr(c.node, "core"):
            return  # not started yet
        image = c.sm.image
        offline = preferred_imbalance = partitions = 0
        for _, _, p in image.partitions():
            partitions += 1
            if not p.has_leader:
                offline += 1
            elif p.replicas and p.leader != p.replicas[0]:
                preferred_imbalance += 1
        brokers = list(image.brokers.values())
        fenced = sum(1 for b in brokers if b.fenced)
        prefix = "kafka_controller_kafkacontroller_"
        yield gauge(prefix + "activecontrollercount", "1 on the active controller, else 0",
                    1.0 if c.active else 0.0)
        yield gauge(prefix + "offlinepartitionscount", "Partitions without a leader", offline)
        yield gauge(prefix + "preferredreplicaimbalancecount",
                    "Partitions not led by their preferred (first) replica", preferred_imbalance)
        yield gauge(prefix + "globalpartitioncount", "Partitions in the cluster", partitions)
        yield gauge(prefix + "globaltopiccount", "Topics in the cluster", len(image.topics_by_id))
        yield gauge(prefix + "activebrokercount", "Registered brokers that are not fenced", len(brokers) - fenced)
        yield gauge(prefix + "fencedbrokercount", "Registered brokers that are fenced", fenced)
        yield gauge(prefix + "lastappliedrecordoffset", "The metadata offset of the image this controller serves",
                    image.offset)
        yield gauge(prefix + "lastcommittedrecordoffset", "The highest committed metadata offset",
                    c.node.commit_index)
