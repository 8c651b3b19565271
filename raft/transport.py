"""The gRPC transport between Raft peers (``raft/proto/raft.proto``).

Outgoing: one long-lived client stream per peer (``Send``) carries every message in batches,
so a busy follower costs one stream write per batch, not one call; snapshot chunks use a
second stream (``InstallSnapshot``) per transfer so they never delay appends. Lost
connections are re-dialled with backoff and the messages queued meanwhile are dropped: Raft
retransmits what matters.

Incoming: requests are parsed by hand from bytes, so that a malformed body, an oversized
batch, a foreign cluster id or an unknown node gets a gRPC error with a clear message and is
counted, instead of reaching the core.
"""
from __future__ import annotations

import asyncio
import errno
import inspect
import logging
import socket
import time
from collections import deque
from typing import Any, AsyncIterator, Callable, Protocol

import grpc
from google.protobuf.message import DecodeError

from common.channels import channel_options, open_channel
from common.tls import TLSConfig, server_credentials

from .proto import raft_pb2 as pb

from .messages import Message, MessageType
from .wire import WireError, from_pb, to_pb

log = logging.getLogger("raft.transport")


SERVICE = "kraft.raft.RaftPeer"


_TRACEBACK = "Traceback (most recent call last):"


def _one_line(record: logging.LogRecord) -> bool:
    """gRPC's core logs some failures with a traceback, attached (a request it cannot parse, an
    answer to a client that went away meanwhile) or written into the message (a stream's task
    cancelled as its peer went away); the error itself is the news."""
    if record.exc_info and record.exc_info[1] is not None:
        record.msg = f"{record.getMessage()}: {record.exc_info[1]}"
        record.args = ()
        record.exc_info = None
    elif _TRACEBACK in (text := record.getMessage()):
        head, _, trace = text.partition(_TRACEBACK)
        error = next((line.strip() for line in reversed(trace.splitlines()) if line.strip()), "")
        record.msg = f"{head.strip().rstrip(':')}: {error}"
        record.args = ()
    return True


def _grpc_one_line(record: logging.LogRecord) -> bool:
    return _one_line(record) if record.name.startswith("grpc") else True


def grpc_errors_in_one_line() -> None:
    """For server processes: what gRPC's core logs stays one line (docs: logs carry no traceback)."""
    logging.getLogger("grpc").setLevel(logging.WARNING)
    logging.getLogger("grpc._cython.cygrpc").addFilter(_one_line)
    for handler in logging.getLogger().handlers:  # and at the output, for any grpc logger: a
        handler.addFilter(_grpc_one_line)         # CancelledError traceback still reached a log once


async def calls_ended(timeout: float = 2.0) -> None:
    """Wait (up to ``timeout``) until the tasks running gRPC server calls have ended: what a
    process whose servers have stopped awaits before its event loop ends. grpc.aio's
    ``server.stop()`` returns once its core has ended every call, while the tasks running them
    may still be unwinding (handlers cancelled at the end of the grace period); ``asyncio.run``
    would cancel them as it ends, and grpc catches that cancel with a bare ``except``, logs it
    (folded to one line above) and prints its traceback on stderr, the server's log, with
    ``traceback.print_exc()``, which no logging filter sees (seen at a controller's teardown)."""
    calls = [t for t in asyncio.all_tasks() if _runs_a_call(t)]
    if calls:
        await asyncio.wait(calls, timeout=timeout)


def _runs_a_call(task: asyncio.Task) -> bool:
    """grpc.aio has no public handle on a call's task: it runs grpc's ``_schedule_rpc_coro``."""
    return getattr(task.get_coro(), "__name__", "") == "_schedule_rpc_coro"


class Transport(Protocol):
    """How a node's messages reach its peers (hashicorp/raft's Transport). ``RaftNode`` uses
    :class:`PeerTransport` (gRPC) unless given another, such as
    :class:`raft.testing.memory.MemoryTransport` for in-process tests."""

    #: When each peer was last heard from (``time.monotonic()``), for ``status()``.
    last_heard: dict[int, float]
    #: Incoming requests refused, by reason, for ``status()``.
    rejected: dict[str, int]

    def attach(self, deliver: Callable[[list[Message]], None]) -> None:
        """Hand incoming messages to ``deliver``, each with its sender's ``directory`` (the
        data directory id it was sent from; KIP-853). Called once, before the first ``send``."""

    def send(self, msgs: list[Message]) -> None:
        """Queue messages for their recipients without blocking; losing some is allowed
        (Raft retransmits), reordering within one peer's stream is not."""

    def set_address(self, peer: int, address: str) -> None:
        """A peer was added or moved (membership changes, snapshots)."""

    def remove(self, peer: int) -> None:
        """A peer left the cluster: stop sending to it."""

    async def close(self) -> None:
        """Stop sending; called once when the node stops."""
MAX_QUEUED = 20_000  # messages kept for a peer that is unreachable


#: The gRPC server option that binds a port exclusively. grpcio sets SO_REUSEPORT by default,
#: so a second server on a port in use would share the port, and its clients, with the first
#: instead of failing to start.
EXCLUSIVE_BIND = ("grpc.so_reuseport", 0)


def server_options(max_bytes: int) -> list[tuple[str, int]]:
    """A gRPC server's options: ``channel_options`` and an exclusive bind."""
    return [*channel_options(max_bytes), EXCLUSIVE_BIND]


def add_port(server: grpc.aio.Server, address: str, tls: TLSConfig | None) -> int:
    """Bind ``address``; returns the port, or 0 when it is in use or invalid (grpcio raises a
    RuntimeError that points at debug logging instead of saying so). Servers use
    ``server_options``, so a port another server listens on is in use even if that server
    allows sharing it."""
    if _in_use(address):
        return 0
    try:
        if tls is None:
            return server.add_insecure_port(address)
        return server.add_secure_port(address, server_credentials(tls))
    except RuntimeError:
        return 0


def _in_use(address: str) -> bool:
    """Whether a socket already listens on ``address``: asked before grpcio binds, whose core
    would log the failure on stderr, a second line beside the server's own error."""
    host, _, port = address.rpartition(":")
    try:
        infos = socket.getaddrinfo(host.strip("[]") or None, int(port), type=socket.SOCK_STREAM,
                                   flags=socket.AI_PASSIVE)
    except (OSError, ValueError):
        return False  # grpcio refuses it, and says why in its own words
    for family, kind, proto, _, sockaddr in infos:
        with socket.socket(family, kind, proto) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as grpcio binds
            try:
                s.bind(sockaddr)
            except OSError as e:
                if e.errno == errno.EADDRINUSE:
                    return True
    return False


class _Malformed:
    """What a request that does not decode (or is over the server's size limit) becomes, so its
    handler can refuse it in one line."""

    __slots__ = ("error", "status")

    def __init__(self, error: str, status: grpc.StatusCode = grpc.StatusCode.INVALID_ARGUMENT) -> None:
        self.error = error
        self.status = status  # a gRPC status, not a Kafka error code


def _guard(method: str, handler: grpc.RpcMethodHandler, max_bytes: int | None = None) -> grpc.RpcMethodHandler:
    """``handler`` with INVALID_ARGUMENT and one log line for a request that does not decode;
    grpcio would log a traceback and answer UNKNOWN ("Unexpected DecodeError"). ``max_bytes``:
    a larger request is refused RESOURCE_EXHAUSTED (the server's transport limit is set above
    it, so that a stream's answers to the requests before it are still written)."""
    decode = handler.request_deserializer
    if decode is None:  # raw bytes: the handler parses them itself (RaftPeer)
        return handler

    def safe_decode(data: bytes) -> object:
        if max_bytes is not None and len(data) > max_bytes:
            return _Malformed(f"{len(data)} bytes, larger than the server's limit of {max_bytes}",
                              grpc.StatusCode.RESOURCE_EXHAUSTED)
        try:
            return decode(data)
        except Exception as e:  # DecodeError, or anything a custom deserializer raises
            return _Malformed(str(e) or type(e).__name__)

    async def refuse(bad: _Malformed, context: grpc.aio.ServicerContext) -> None:
        what = "malformed" if bad.status == grpc.StatusCode.INVALID_ARGUMENT else "too large a"
        log.warning("refused a %s request to %s from %s: %s", what, method, context.peer(), bad.error)
        await context.abort(bad.status, f"{what} request to {method}: {bad.error}")

    if handler.unary_unary is not None:
        inner = handler.unary_unary

        async def unary(request: object, context: grpc.aio.ServicerContext) -> object:
            if isinstance(request, _Malformed):
                await refuse(request, context)
            return await inner(request, context)
        return handler._replace(request_deserializer=safe_decode, unary_unary=unary)
    if handler.stream_unary is not None:
        inner = handler.stream_unary

        async def checked(requests: AsyncIterator[object], context: grpc.aio.ServicerContext) -> AsyncIterator[object]:
            async for r in requests:
                if isinstance(r, _Malformed):
                    await refuse(r, context)
                yield r

        async def stream_unary(requests: AsyncIterator[object], context: grpc.aio.ServicerContext) -> object:
            return await inner(checked(requests, context), context)
        return handler._replace(request_deserializer=safe_decode, stream_unary=stream_unary)
    if handler.stream_stream is not None:  # the broker's ProduceStream
        pipelined = handler.stream_stream

        async def stream_stream(requests: AsyncIterator[object],
                                context: grpc.aio.ServicerContext) -> AsyncIterator[object]:
            # A malformed message ends the requests the handler reads; the answers to those
            # before it are still written, then the call ends with one line.
            refused: list[_Malformed] = []

            async def until_malformed() -> AsyncIterator[object]:
                async for r in requests:
                    if isinstance(r, _Malformed):
                        refused.append(r)
                        return
                    yield r
            answers = pipelined(until_malformed(), context)
            if inspect.isawaitable(answers):  # a handler that writes with context.write
                await answers
            else:
                async for answer in answers:
                    yield answer
            if refused:
                await refuse(refused[0], context)
        return handler._replace(request_deserializer=safe_decode, stream_stream=stream_stream)
    return handler


class HandlersRewritten:
    """What a generated ``add_*Servicer_to_server`` sees: it passes each method's handler through
    ``rewrite(full method name, handler)`` on its way to ``server`` (``add_service``'s guard, a
    method's own serializer)."""

    def __init__(self, server: Any, rewrite: Callable[[str, grpc.RpcMethodHandler], grpc.RpcMethodHandler]) -> None:
        self._server = server
        self._rewrite = rewrite

    def add_generic_rpc_handlers(self, handlers: tuple) -> None:
        rewritten = []
        for h in handlers:
            methods = getattr(h, "_method_handlers", None)  # grpc.method_handlers_generic_handler's
            if methods is None:
                rewritten.append(h)
                continue
            name = h.service_name()
            prefix = f"/{name}/"
            rewritten.append(grpc.method_handlers_generic_handler(
                name, {m[len(prefix):]: self._rewrite(m, hd) for m, hd in methods.items()}))
        self._server.add_generic_rpc_handlers(tuple(rewritten))

    def add_registered_method_handlers(self, name: str, handlers: dict) -> None:
        self._server.add_registered_method_handlers(
            name, {m: self._rewrite(f"/{name}/{m}", hd) for m, hd in handlers.items()})


def add_service(server: grpc.aio.Server, add_to_server: Callable[[object, object], None], servicer: object,
                max_bytes: int | None = None) -> None:
    """Register a servicer with a generated ``add_*Servicer_to_server`` so that every method
    refuses an undecodable request with INVALID_ARGUMENT and one log line (and, with
    ``max_bytes``, a larger one with RESOURCE_EXHAUSTED)."""
    add_to_server(servicer, HandlersRewritten(server, lambda method, handler: _guard(method, handler, max_bytes)))


class Rejected(Exception):
    def __init__(self, code: grpc.StatusCode, reason: str, details: str) -> None:
        super().__init__(details)
        self.code, self.reason, self.details = code, reason, details


class _Link:
    """One outgoing stream to one peer."""

    def __init__(self, transport: "PeerTransport", peer: int, method: str) -> None:
        self.t = transport
        self.peer = peer
        self.method = method
        self.queue: deque[Message] = deque()
        self.wake = asyncio.Event()
        self.task = asyncio.get_running_loop().create_task(self._run(), name=f"raft-link-{peer}-{method}")

    def push(self, msgs: list[Message]) -> None:
        self.queue.extend(msgs)
        while len(self.queue) > MAX_QUEUED:
            self.queue.popleft()
        self.wake.set()

    def _batch(self) -> tuple[bytes, bool]:
        batch = pb.MessageBatch(cluster_id=self.t.cluster_id, to=self.peer,
                                directory_id=self.t.directory_id)
        setattr(batch, "from", self.t.node_id)
        size, done = 0, False
        limit = self.t.max_message_bytes // 2
        while self.queue and size < limit:
            m = self.queue.popleft()
            p = to_pb(m)
            batch.messages.append(p)
            size += p.ByteSize()
            if m.type == MessageType.SNAPSHOT and m.done:
                done = True
                break
        return batch.SerializeToString(), done

    async def _run(self) -> None:
        backoff = 0.02
        while True:
            call = None
            try:
                while not self.queue:
                    self.wake.clear()
                    await self.wake.wait()
                stub = self.t.channel(self.peer).stream_unary(
                    f"/{SERVICE}/{self.method}", response_deserializer=pb.Ack.FromString)
                call = stub()
                log.debug("link to %s (%s): stream opened", self.peer, self.method)
                while True:
                    while not self.queue:
                        self.wake.clear()
                        await self.wake.wait()
                    data, done = self._batch()
                    # A write that cannot complete (a peer that accepts the connection but never
                    # reads) must not wedge the link forever: give up and re-dial. Not
                    # asyncio.wait_for: on 3.11 it can swallow the cancel that close() sends when
                    # the write completes at the same moment, and the link then runs on for ever
                    # (a node's stop hung on it; CPython gh-86296).
                    async with asyncio.timeout(self.t.write_timeout):
                        await call.write(data)
                    backoff = 0.02
                    if done:  # a snapshot transfer is complete: close its stream
                        await call.done_writing()
                        await call
                        break
            except asyncio.CancelledError:
                if call is not None:
                    call.cancel()
                raise
            except Exception as e:  # peer down or restarting: drop what was queued, retry
                log.debug("link to %s (%s) failed: %r", self.peer, self.method, e)
                self.t.send_failures += 1
                self.queue.clear()
                if call is not None:
                    call.cancel()
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 0.5)


class PeerTransport:
    """The gRPC :class:`Transport`: it serves ``RaftPeer`` on the node's server (``register``)
    and keeps one outgoing stream per peer."""

    def __init__(self, node_id: int, cluster_id: str, addresses: dict[int, str], *,
                 tls: TLSConfig | None = None, max_message_bytes: int = 32 << 20,
                 directory_id: str = "") -> None:
        self.node_id = node_id
        self.cluster_id = cluster_id
        self.directory_id = directory_id
        self.addresses = dict(addresses)
        self.deliver: Callable[[list[Message]], None] = lambda msgs: None
        self.tls = tls
        self.max_message_bytes = max_message_bytes
        self.rejected: dict[str, int] = {}
        self.last_heard: dict[int, float] = {}
        self.send_failures = 0
        self.write_timeout = 5.0
        self._channels: dict[int, grpc.aio.Channel] = {}
        self._links: dict[tuple[int, str], _Link] = {}
        self._retiring: set[asyncio.Task] = set()  # links cancelled and channels closing: close() awaits them

    def attach(self, deliver: Callable[[list[Message]], None]) -> None:
        self.deliver = deliver

    # -- outgoing --------------------------------------------------------------------------

    def channel(self, peer: int) -> grpc.aio.Channel:
        ch = self._channels.get(peer)
        if ch is None:
            ch = self._channels[peer] = open_channel(self.addresses[peer], self.tls, self.max_message_bytes)
        return ch

    def send(self, msgs: list[Message]) -> None:
        by_link: dict[tuple[int, str], list[Message]] = {}
        for m in msgs:
            if m.to not in self.addresses:
                continue  # not (or no longer) a member we know how to reach
            method = "InstallSnapshot" if m.type == MessageType.SNAPSHOT else "Send"
            by_link.setdefault((m.to, method), []).append(m)
        for key, group in by_link.items():
            link = self._links.get(key)
            if link is None:
                link = self._links[key] = _Link(self, key[0], key[1])
            link.push(group)

    def set_address(self, peer: int, address: str) -> None:
        if self.addresses.get(peer) != address:
            self.addresses[peer] = address
            self._drop_peer(peer)

    def remove(self, peer: int) -> None:
        self.addresses.pop(peer, None)
        self._drop_peer(peer)

    def _drop_peer(self, peer: int) -> None:
        for key in [k for k in self._links if k[0] == peer]:
            task = self._links.pop(key).task
            task.cancel()
            self._retire(task)
        ch = self._channels.pop(peer, None)
        if ch is not None:
            self._retire(asyncio.get_running_loop().create_task(ch.close()))

    def _retire(self, task: asyncio.Task) -> None:
        """Kept until it ends (the loop holds only weak references to tasks)."""
        self._retiring.add(task)
        task.add_done_callback(self._retiring.discard)

    async def close(self) -> None:
        for link in self._links.values():
            link.task.cancel()
        await asyncio.gather(*(link.task for link in self._links.values()), *self._retiring, return_exceptions=True)
        self._links.clear()
        await asyncio.gather(*(ch.close() for ch in self._channels.values()), return_exceptions=True)
        self._channels.clear()

    # -- incoming --------------------------------------------------------------------------

    def register(self, server: grpc.aio.Server) -> None:
        handler = grpc.method_handlers_generic_handler(SERVICE, {
            "Send": grpc.stream_unary_rpc_method_handler(
                self._serve, response_serializer=pb.Ack.SerializeToString),
            "InstallSnapshot": grpc.stream_unary_rpc_method_handler(
                self._serve, response_serializer=pb.Ack.SerializeToString),
        })
        server.add_generic_rpc_handlers((handler,))

    async def _serve(self, requests, context: grpc.aio.ServicerContext) -> pb.Ack:
        log.debug("incoming stream from %s", context.peer())
        try:
            async for raw in requests:
                self.deliver(self.parse(raw))
        except Rejected as r:
            self.rejected[r.reason] = self.rejected.get(r.reason, 0) + 1
            log.warning("refused a peer request: %s", r.details)
            await context.abort(r.code, r.details)
        return pb.Ack()

    def parse(self, raw: bytes) -> list[Message]:
        """Validate one incoming batch; raise Rejected with the reason."""
        if len(raw) > self.max_message_bytes:
            raise Rejected(grpc.StatusCode.RESOURCE_EXHAUSTED, "oversized",
                           f"batch of {len(raw)} bytes exceeds the limit of {self.max_message_bytes}")
        try:
            batch = pb.MessageBatch.FromString(raw)
        except DecodeError as e:
            raise Rejected(grpc.StatusCode.INVALID_ARGUMENT, "malformed", f"malformed batch: {e}") from None
        frm = getattr(batch, "from")
        if batch.cluster_id != self.cluster_id:
            raise Rejected(grpc.StatusCode.FAILED_PRECONDITION, "wrong_cluster",
                           f"batch for cluster {batch.cluster_id!r} reached node {self.node_id} of "
                           f"cluster {self.cluster_id!r}")
        if batch.to != self.node_id:
            raise Rejected(grpc.StatusCode.FAILED_PRECONDITION, "wrong_node",
                           f"batch for node {batch.to} reached node {self.node_id}")
        if frm not in self.addresses:
            raise Rejected(grpc.StatusCode.PERMISSION_DENIED, "unknown_node",
                           f"node {frm} is not a member known to node {self.node_id}")
        try:
            msgs = [from_pb(p) for p in batch.messages]
        except WireError as e:
            raise Rejected(grpc.StatusCode.INVALID_ARGUMENT, "malformed", f"malformed message: {e}") from None
        for m in msgs:
            if m.frm != frm or m.to != self.node_id:
                raise Rejected(grpc.StatusCode.INVALID_ARGUMENT, "malformed",
                               "a message's sender or recipient differs from its batch's")
            m.directory = batch.directory_id
        self.last_heard[frm] = time.monotonic()
        return msgs
