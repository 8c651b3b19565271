"""``request_percentage`` (KIP-124) at the brokers' gRPC listeners, as a server interceptor: the
time each call's handler runs on the event loop (``quotas.HandlerTime``, as on the Kafka
listener) is counted for its user (the call's principal) and client id (the request's
``client_id``, which Produce, Fetch and JoinGroup carry; else the empty one, as a Kafka client
without one). The byte rates are counted by the service itself (``service.py``).

gRPC multiplexes a connection, so nothing is muted: a client over its quota is told on the
answers that carry ``throttle_time_ms`` (Produce and Fetch, the longer of it and a byte rate's
throttle), and our producer and consumer hold back from that broker for that long; a Fetch
throttled so is answered empty, its bytes taken back from the consumer rate, as on the Kafka
listener. Other calls' time is counted and weighs on the client's next Produce or Fetch.
Calls between brokers cost no client anything: replicas' fetches, OffsetsForLeaderEpoch,
WriteTxnMarkers, VerifyTxnPartitions (Kafka's cluster actions)."""
from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import grpc

from common.method_handlers import WrappedHandlers
from metadata.principal import PrincipalError, PrincipalMapper, grpc_session
from protos import broker_pb2 as pb

from .grpc_fetch_answer import FetchAnswer
from .quotas import ClientQuotas, HandlerTime, user_of

#: Sent by brokers, never charged to a client.
EXEMPT = frozenset({"OffsetsForLeaderEpoch", "WriteTxnMarkers", "VerifyTxnPartitions"})
T = TypeVar("T")


async def charged(quotas: ClientQuotas, user: str, client_id: str, work: Awaitable[T]) -> tuple[T, int]:
    """``work`` awaited, the time it runs on the loop counted for the client (a unary call
    here, each request of ``ProduceStream`` in the service); with the throttle (ms) it earned."""
    sensor = quotas.request.sensor(user, client_id) if quotas.request.anyone() else None
    if sensor is None:
        return await work, 0
    timer = HandlerTime(work, sensor)
    answer = await timer
    return answer, quotas.request.spent(sensor, timer.spent, quotas.clock())


class RequestTimeQuotas(grpc.aio.ServerInterceptor):
    def __init__(self, quotas: ClientQuotas, mapper: PrincipalMapper) -> None:
        self.quotas = quotas
        self.mapper = mapper
        self._timed = WrappedHandlers(self._time)  # once per method, not per call

    async def intercept_service(self, continuation: Callable[[grpc.HandlerCallDetails], Awaitable[Any]],
                                details: grpc.HandlerCallDetails) -> Any:
        handler = await continuation(details)
        if handler is None or handler.unary_unary is None or details.method.rpartition("/")[2] in EXEMPT:
            return handler  # ProduceNoAck's stream is not a request one can time; ProduceStream's
            # requests are timed by the service (``charged``)
        return self._timed(details.method, handler)

    def _time(self, method: str, handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
        """``handler`` with its calls' time counted for their client."""
        inner = handler.unary_unary

        async def timed(request: Any, context: grpc.aio.ServicerContext) -> Any:
            if not self.quotas.request.anyone() or getattr(request, "replica_id", -1) >= 0:
                return await inner(request, context)
            try:
                user = user_of(grpc_session(context, self.mapper).principal)
            except PrincipalError:  # the service ends the call with one line
                return await inner(request, context)
            client_id = getattr(request, "client_id", "")
            answer, busy = await charged(self.quotas, user, client_id, inner(request, context))
            if busy and isinstance(answer, FetchAnswer):
                size = answer.records_size
                if size:  # answered empty: fetched again after the throttle
                    self.quotas.fetch.unrecord(user, client_id, size)
                return answer.emptied(busy)
            if busy and isinstance(answer, pb.ProduceResponse):
                answer.throttle_time_ms = max(busy, answer.throttle_time_ms)
            return answer

        return grpc.unary_unary_rpc_method_handler(timed, request_deserializer=handler.request_deserializer,
                                                   response_serializer=handler.response_serializer)
