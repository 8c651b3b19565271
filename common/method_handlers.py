"""Server interceptors' wrapped handlers, made once per method.

gRPC runs a server's interceptors on every call, while the service answers each method with
the same handler; an interceptor that wraps it (timing, quotas) would make a new wrapper, and
gRPC's handler around it, for every call. ``WrappedHandlers`` keeps, per method, the service's
handler and its wrapper, and makes a new wrapper only when the service answers with another
handler."""
from __future__ import annotations

from collections.abc import Callable

import grpc


class WrappedHandlers:
    """``wrap(method, handler)``'s result per method, for as long as the service's handler is
    the same object."""

    def __init__(self, wrap: Callable[[str, grpc.RpcMethodHandler], grpc.RpcMethodHandler]) -> None:
        self.wrap = wrap
        self._made: dict[str, tuple[grpc.RpcMethodHandler, grpc.RpcMethodHandler]] = {}

    def __call__(self, method: str, handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
        known = self._made.get(method)
        if known is not None and known[0] is handler:
            return known[1]
        wrapped = self.wrap(method, handler)
        self._made[method] = (handler, wrapped)
        return wrapped
