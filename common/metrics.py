"""A process's Prometheus metrics (docs/operations.md, "Monitoring"), named after Kafka's JMX
metrics as Prometheus' JMX exporter spells them (``kafka.controller:type=KafkaController,name=
ActiveControllerCount`` is ``kafka_controller_kafkacontroller_activecontrollercount``).

What every server process shares: ``MetricsEndpoint`` (one registry and one HTTP server per
process, so that several servers in one test process never share the global registry),
``RequestMetrics`` (a latency histogram per request type, fed by a gRPC interceptor and by the
Kafka listener) and ``StateCollector``, the base of the gauges read from live state when
Prometheus scrapes (custom collectors). The controller's and the broker's own collectors live
with them (metadata/metrics.py, brokerd/metrics.py).

Collectors run on the HTTP server's thread: they read plain attributes and immutable metadata
images, never structures the event loop may be changing mid-iteration.

The one module of the floor that needs prometheus-client (a server dependency), imported where
a registry or a metric is made: importing this module, or anything else in ``common``, does
not load it, so the Raft library's base install never needs it.
"""
from __future__ import annotations

import inspect
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Any

import grpc

from .config_def import ConfigError
from .method_handlers import WrappedHandlers
from .server_keys import PROMETHEUS_LISTENER

if TYPE_CHECKING:
    from wsgiref.simple_server import WSGIServer

    from prometheus_client import CollectorRegistry
    from prometheus_client.core import GaugeMetricFamily, Metric

#: Request latency buckets in seconds: from a sub-millisecond metadata answer to a long poll.
LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


def gauge(name: str, doc: str, value: float, labels: dict[str, str] | None = None) -> GaugeMetricFamily:
    """One gauge sample, for a collector."""
    from prometheus_client.core import GaugeMetricFamily
    g = GaugeMetricFamily(name, doc, labels=list(labels) if labels else None)
    g.add_metric(list(labels.values()) if labels else [], value)
    return g


class MetricsEndpoint:
    """A process's ``/metrics``: its own registry, served over HTTP at ``prometheus.listener``
    (nothing is served when ``listener`` is None, but collectors may still register)."""

    def __init__(self, listener: tuple[str, int] | None) -> None:
        from prometheus_client import GC_COLLECTOR, CollectorRegistry, PlatformCollector, ProcessCollector
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
        from prometheus_client import start_http_server
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
        from prometheus_client import Histogram
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
        self._timed = WrappedHandlers(self._time)  # once per method: a controller answers ~9 calls/s idle

    async def intercept_service(self, continuation: Callable[[grpc.HandlerCallDetails], Awaitable[Any]],
                                details: grpc.HandlerCallDetails) -> Any:
        handler = await continuation(details)
        if handler is not None and handler.stream_stream is not None:
            return self._pipelined(handler, details.method.rpartition("/")[2])
        if handler is None or handler.unary_unary is None:
            return handler  # streams (Raft's Send, ProduceNoAck) are not requests one can time
        return self._timed(details.method, handler)

    def _time(self, method: str, handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
        """``handler`` with each call's time observed in ``method``'s histogram."""
        inner = handler.unary_unary
        observe = self.metrics.observer(method.rpartition("/")[2], self.listener)

        async def timed(request: Any, context: grpc.aio.ServicerContext) -> Any:
            started = time.perf_counter()
            try:
                answer = inner(request, context)
                return await answer if inspect.isawaitable(answer) else answer
            finally:
                observe(time.perf_counter() - started)

        return grpc.unary_unary_rpc_method_handler(timed, request_deserializer=handler.request_deserializer,
                                                   response_serializer=handler.response_serializer)

    def _pipelined(self, handler: grpc.RpcMethodHandler, method: str) -> grpc.RpcMethodHandler:
        """A stream of requests, each answered by its ``correlation_id`` (the broker's
        ProduceStream) or, for messages without one, in the order they came (the controller's
        FetchMetadataStream): each request timed from its arrival to its answer, counted as the
        request type it carries (``ProduceStream``'s as ``Produce``, as the Kafka listener
        counts them; ``FetchMetadataStream``'s as ``FetchMetadata``)."""
        inner = handler.stream_stream
        observe = self.metrics.observer(method.removesuffix("Stream"), self.listener)

        async def timed(requests: AsyncIterator[Any], context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
            arrived: dict[int, float] = {}
            in_order: deque[float] = deque()

            async def arriving() -> AsyncIterator[Any]:
                async for request in requests:
                    key = getattr(request, "correlation_id", None)  # None: in order, or a malformed one
                    if key is not None:
                        arrived[key] = time.perf_counter()
                    else:  # a malformed one ends the stream: no answer pops its time
                        in_order.append(time.perf_counter())
                    yield request
            answers = inner(arriving(), context)
            if inspect.isawaitable(answers):  # a handler that writes with context.write (or refuses)
                await answers
                return
            async for answer in answers:
                key = getattr(answer, "correlation_id", None)
                started = arrived.pop(key, None) if key is not None else in_order.popleft() if in_order else None
                if started is not None:
                    observe(time.perf_counter() - started)
                yield answer

        return grpc.stream_stream_rpc_method_handler(timed, request_deserializer=handler.request_deserializer,
                                                     response_serializer=handler.response_serializer)


class StateCollector:
    """A collector whose samples are read from live state at each scrape (``collect``); it
    registers itself. ``describe`` is empty: there is nothing to sample until the server runs."""

    def __init__(self, registry: CollectorRegistry) -> None:
        registry.register(self)

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterable[Metric]:
        """The samples, read from the live state each subclass knows."""
        raise NotImplementedError
