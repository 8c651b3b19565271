"""A listener that speaks Kafka's wire protocol (Kafka's SocketServer and its Processors).

Each connection reads size-prefixed requests, refusing a size over ``socket.request.max.bytes``
before reading the body, and handles them as they arrive: a client may pipeline (Kafka's
producers keep up to five requests in flight), requests start in the order they came, and
responses are written in that same order, each by its request's task as soon as its handler
returns and those before it are answered (``_Answers``). At most ``MAX_IN_FLIGHT`` requests of
a connection are pending; reading waits for the oldest to be answered. Whatever cannot be read (garbage, a
truncated request, an API or version we did not advertise) closes that one connection with
one log line; the broker and other connections go on. A request whose handler fails is
answered with its error response (``error_answers``), as Kafka's KafkaApis answers it, and
its connection goes on. Frames are read by
``framing.FrameConnection`` (an asyncio BufferedProtocol: one copy per request).
"""
from __future__ import annotations

import asyncio
import collections
import logging
import ssl
import time
from collections.abc import Callable, Coroutine
from typing import Any

from clients.security import ListenerSecurity
from common.metrics import RequestMetrics
from common.tls import ssl_context
from metadata.principal import PrincipalError, Session

from .apis import (API_VERSIONS, BEFORE_AUTHENTICATION, SASL_AUTHENTICATE, SASL_HANDSHAKE, VERSIONS, CloseConnection,
                   KafkaApis, newer_api_versions_answer, sasl_answer)
from ..connection_quotas import ConnectionQuotas
from .sasl import SaslAuthenticator
from .throttling import CLIENT_THROTTLES, throttle_ms
from .codec import MalformedRequest, RequestHeader, correlation_id, peek_api, read_request, response_parts
from .error_answers import error_answer, error_of
from .framing import FrameConnection, SpareBuffers

log = logging.getLogger("brokerd.kafka")

MAX_IN_FLIGHT = 16
#: A client that has not finished its TLS handshake by then is disconnected.
HANDSHAKE_TIMEOUT_S = 10.0


#: The first four bytes of what clients of other protocols send, read as a Kafka size prefix.
_HTTP2_PREFACE = int.from_bytes(b"PRI ", "big")  # "PRI * HTTP/2.0": a gRPC client
_TLS_HANDSHAKE = 0x16_03  # a TLS record of type handshake, protocol version 3.x


def other_protocol(size: int) -> str | None:
    """What a size prefix no Kafka client sends says about the client, so that the log names
    the mistake (a gRPC client, or TLS against a plaintext listener) instead of a size."""
    if size == _HTTP2_PREFACE:
        return ("an HTTP/2 connection preface (a gRPC client, such as kraft's tools?): this is a Kafka-protocol "
                "listener; gRPC clients use the broker's gRPC listener")
    if size >> 16 == _TLS_HANDSHAKE:
        return "a TLS handshake on a plaintext listener: the client is set for SSL, the listener is PLAINTEXT"
    return None


class KafkaListener:
    def __init__(self, name: str, host: str, port: int, apis: KafkaApis, max_request_bytes: int,
                 requests: RequestMetrics | None = None, security: ListenerSecurity | None = None,
                 connections: ConnectionQuotas | None = None) -> None:
        """``requests``: where each request's time, from its arrival to its answer written, is
        recorded per API (Kafka's RequestMetrics TotalTimeMs). ``security``: SSL listeners
        do a TLS handshake before the first request; SASL listeners serve nothing but
        ApiVersions and the SASL exchange until the client has authenticated."""
        self.name = name
        self.sasl = security.sasl if security is not None else None
        self.ssl = (ssl_context(security.tls, server=True, client_auth=security.client_auth)
                    if security is not None and security.tls is not None else None)
        self.host = host
        self.port = port
        self.apis = apis
        self.max_request_bytes = max_request_bytes
        self.requests = requests
        self.connections = connections  # max.connections, max.connections.per.ip (shared by the listeners)
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()
        #: Each API's request-time histogram, looked up once (a labelled child is a lookup under
        #: a lock, and every request records one).
        self._observers: dict[int, Callable[[float], None]] = {}
        self._spares = SpareBuffers()  # large requests' buffers, shared by the connections

    async def bind(self) -> None:
        """Bind the address without listening yet (connections are refused, so clients try
        another broker) until ``start``; raises OSError when the address cannot be bound."""
        self._server = await asyncio.get_running_loop().create_server(
            lambda: FrameConnection(self._refused, self._connected, self._spares), self.host or "0.0.0.0", self.port,
            reuse_address=True, start_serving=False)

    async def start(self) -> None:
        """Listen and serve, once ``bind`` has bound; raises OSError when it cannot listen."""
        assert self._server is not None, "bind() first"
        await self._server.start_serving()

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._connections):
            task.cancel()
        if self._connections:
            await asyncio.gather(*self._connections, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()

    def _refused(self, size: int) -> str | None:
        """What is wrong with a request's size prefix, read before its body."""
        if 8 <= size <= self.max_request_bytes:
            return None
        return other_protocol(size) or f"a request of {size} bytes (socket.request.max.bytes is {self.max_request_bytes})"

    def _connected(self, conn: FrameConnection) -> None:
        self._connections.add(asyncio.get_running_loop().create_task(self._serve(conn)))

    async def _serve(self, writer: FrameConnection) -> None:
        me = asyncio.current_task()
        assert me is not None
        peer = writer.get_extra_info("peername")
        where = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        ip = peer[0] if isinstance(peer, tuple) else str(peer)
        if self.connections is not None and not self.connections.admit(ip):
            writer.abort()  # before any read or handshake: a refused connection costs nothing more
            self._connections.discard(me)
            return
        try:
            if self.connections is not None and (wait := self.connections.accept_delay_ms(self.name)):
                await asyncio.sleep(wait / 1000)  # KIP-612: the broker's or listener's rate; served after
            if self.connections is not None and (held := self.connections.creation_throttle_ms(ip)):
                await asyncio.sleep(held / 1000)  # KIP-612: closed after the throttle, so a reconnect loop waits
                writer.abort()
                self._connections.discard(me)
                return
            await self._serve_admitted(writer, where, me)
        finally:
            if self.connections is not None:
                self.connections.release(ip)

    async def _serve_admitted(self, writer: FrameConnection, where: str, me: asyncio.Task[None]) -> None:
        if self.ssl is not None and not await self._handshake(writer, where):
            self._connections.discard(me)
            return
        mute = _Mute()  # KIP-219: a throttled client's channel is not read until its throttle ends
        slots = asyncio.Semaphore(MAX_IN_FLIGHT)
        answers = _Answers(self, writer, where, mute, slots)
        sasl = SaslAuthenticator(self.sasl, lambda: self.apis.image.scram) if self.sasl is not None else None
        stopping = False
        try:
            session = self.apis.session(writer)  # the principal, once per connection (SASL: once authenticated)
            while True:
                body = await writer.frame()  # MalformedRequest on a size _refused
                if (muted := mute.until - time.monotonic()) > 0:
                    await asyncio.sleep(muted)
                arrived = time.perf_counter()
                api_key, version = peek_api(body)
                await slots.acquire()
                if api_key == API_VERSIONS and version > VERSIONS[API_VERSIONS][1]:
                    header = RequestHeader(api_key, 0, correlation_id(body), None, False)
                    answers.start(header, arrived, _ready(newer_api_versions_answer()))
                    continue
                served = VERSIONS.get(api_key)
                if served is None or not served[0] <= version <= served[1]:
                    raise MalformedRequest(f"api key {api_key} version {version} is not served here "
                                           f"(ApiVersions lists what is)")
                if sasl is not None and api_key in (SASL_HANDSHAKE, SASL_AUTHENTICATE):
                    header, request = read_request(body, api_key, version)
                    try:
                        answer, closing = sasl_answer(header, request, sasl)
                    except Exception as e:  # Kafka's authenticator closes the connection on any failure
                        log.error("closing the Kafka connection from %s on listener %s: api key %d v%d failed: %s",
                                  where, self.name, api_key, version, _failure(e))
                        break
                    answers.start(header, arrived, _ready(answer))
                    if closing is not None:
                        log.info("closing the Kafka connection from %s on listener %s: %s", where, self.name, closing)
                        await asyncio.sleep(self.sasl.failed_authentication_delay_ms / 1000)  # type: ignore[union-attr]
                        break
                    if sasl.principal is not None:
                        session = Session(sasl.principal, session.host)
                    continue
                if sasl is not None and api_key not in BEFORE_AUTHENTICATION and (
                        not sasl.authenticated or sasl.expired):
                    raise MalformedRequest(f"api key {api_key} before SASL authentication completed" if not
                                           sasl.authenticated else "the SASL session expired "
                                           "(connections.max.reauth.ms) and the client did not re-authenticate")
                header, request = read_request(body, api_key, version)
                # Before SASL authentication Kafka's authenticator answers ApiVersions itself, and
                # its failure fails the authentication: the connection is closed, not answered.
                answers.start(header, arrived, self.apis.handle(header, request, session),
                              request if sasl is None or sasl.authenticated else None)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass  # the client went away, or an answer's failure closed the connection
        except (MalformedRequest, PrincipalError) as e:
            log.warning("closing the Kafka connection from %s on listener %s: %s", where, self.name, e)
        except asyncio.CancelledError:
            stopping = True  # the listener is stopping; this task ends here, quietly
        finally:
            if not stopping and answers.tasks:
                try:
                    await asyncio.wait(list(answers.tasks))  # answers already started are still sent
                except asyncio.CancelledError:
                    pass
            for task in answers.tasks:  # requests that will never be answered: the listener is stopping
                task.cancel()
            await asyncio.gather(*answers.tasks, return_exceptions=True)
            writer.close()
            self._connections.discard(me)

    def observer(self, api_key: int) -> Callable[[float], None] | None:
        """Where an API's request times go (None: not recorded)."""
        if self.requests is None:
            return None
        observe = self._observers.get(api_key)
        if observe is None:
            observe = self._observers[api_key] = self.requests.observer(self.apis.api_name(api_key), self.name)
        return observe

    async def _handshake(self, writer: FrameConnection, where: str) -> bool:
        """TLS before anything else (Kafka's SslTransportLayer); a client that fails it (no
        certificate when one is required, one from another CA or expired, plaintext bytes) is
        disconnected with one line, as Kafka logs a failed authentication."""
        assert self.ssl is not None
        try:
            await writer.start_tls(self.ssl, HANDSHAKE_TIMEOUT_S)
            return True
        except (ssl.SSLError, ConnectionError, TimeoutError, OSError) as e:
            reason = getattr(e, "verify_message", None) or getattr(e, "reason", None) or str(e) or type(e).__name__
            if reason in ("WRONG_VERSION_NUMBER", "HTTP_REQUEST", "UNEXPECTED_RECORD"):
                reason = "the client does not speak TLS (security.protocol=PLAINTEXT?)"
            log.info("closing the Kafka connection from %s on listener %s: TLS handshake failed: %s", where,
                     self.name, reason)
            writer.close()
            return False


class _Request:
    """A request of a connection, from its arrival until its answer is written."""

    __slots__ = ("header", "request", "arrived", "done", "answer", "failure")

    def __init__(self, header: RequestHeader, request: Any, arrived: float) -> None:
        self.header = header
        self.request = request  # what a failed handler's error answer repeats (None: closed instead)
        self.arrived = arrived  # time.perf_counter(), for its request time
        self.done = False  # its handler has returned (``answer``) or raised (``failure``)
        self.answer: Any = None
        self.failure: BaseException | None = None


class _Answers:
    """A connection's answers, written in the order its requests came (Kafka's in-order
    responses): each request's task writes its own answer when its handler returns, if every
    request before it is answered, and then those behind it that are ready; an answer ready
    early waits in ``due`` for the task of the one before it. Why no writing task per
    connection: waking it for each answer cost the loop one more turn per request, and the
    done callbacks it needed another (docs/brokers.md, "The brokers' network I/O").

    A handler that fails is answered with its request's error response (``error_answers``,
    as Kafka's KafkaApis answers it) in its turn, and the connection goes on. Where Kafka
    closes the connection instead (an acks=0 produce, a failure while writing an answer)
    it is closed and the answers still due are not sent. An
    answer with a throttle time mutes the connection for that long (the reading task waits);
    a client from before KIP-219 gets it only then. Each request holds one of ``slots`` until
    its answer is written and drained, so the reading task waits while ``MAX_IN_FLIGHT`` are
    pending, among them those whose answers wait for the transport's buffer to drain."""

    def __init__(self, listener: KafkaListener, writer: FrameConnection, where: str, mute: _Mute,
                 slots: asyncio.Semaphore) -> None:
        self.listener = listener
        self.writer = writer
        self.where = where
        self.mute = mute
        self.slots = slots
        self.due: collections.deque[_Request] = collections.deque()  # in the order the requests came
        self.tasks: set[asyncio.Task[None]] = set()  # the requests' tasks, until they end
        self.writing = False  # a task is writing the answers due (and may be waiting to drain)
        self.closed = False

    def start(self, header: RequestHeader, arrived: float, work: Coroutine[Any, Any, Any],
              body: Any = None) -> None:
        """Handle a request in a task of its own, which then answers it in its turn; ``body``,
        the request read, is what an error answer repeats if its handler fails (None: a
        failure closes the connection)."""
        request = _Request(header, body, arrived)
        self.due.append(request)
        self.tasks.add(asyncio.create_task(self._answer(request, work)))

    async def _answer(self, request: _Request, work: Coroutine[Any, Any, Any]) -> None:
        me = asyncio.current_task()
        assert me is not None
        try:
            try:
                request.answer = await work
            except Exception as e:
                request.failure = e
            except asyncio.CancelledError as e:
                if me.cancelling():
                    raise  # the listener is stopping: nothing more is answered
                request.failure = e  # cancelled inside the handler: it failed, as any exception
            request.done = True
            if not self.writing and self.due[0] is request:
                await self._write_due()
        finally:
            self.tasks.discard(me)

    async def _write_due(self) -> None:
        """Write the answers due, in order, while the first one is ready."""
        writer = self.writer
        self.writing = True
        try:
            while self.due and self.due[0].done:
                request = self.due.popleft()
                header = request.header
                try:
                    if request.failure is not None:
                        answer = self._error_answer(request, request.failure)
                        if answer is None:
                            continue
                    else:
                        answer = request.answer
                    if answer is not None and (throttle := throttle_ms(answer)):
                        self.mute.until = max(self.mute.until, time.monotonic() + throttle / 1000)
                        if header.api_version < CLIENT_THROTTLES.get(header.api_key, 0):
                            await asyncio.sleep(throttle / 1000)
                    if answer is not None and not self.closed:
                        writer.write_parts(response_parts(header, answer))
                        await writer.drain()
                    if (observe := self.listener.observer(header.api_key)) is not None:
                        observe(time.perf_counter() - request.arrived)
                except Exception as e:
                    self._fail(header, e)
                finally:
                    self.slots.release()
                    if self.closed:
                        writer.close()
        finally:
            self.writing = False

    def _error_answer(self, request: _Request, e: BaseException) -> Any | None:
        """The error response to a request whose handler failed, with one line (Kafka's
        KafkaApis.handleError); None, the connection closed, where Kafka closes it: an acks=0
        produce (``CloseConnection``, or no response to carry the error), a request before
        SASL authentication, or an error answer that cannot be built."""
        header = request.header
        if isinstance(e, CloseConnection) or request.request is None:
            self._fail(header, e)
            return None
        try:
            answer = error_answer(header, request.request, e)
        except Exception as failed:
            log.error("api key %d v%d from %s failed (%s), and so did its error answer: %s", header.api_key,
                      header.api_version, self.where, _failure(e), _failure(failed))
            self.closed = True
            return None
        if answer is None:
            self._fail(header, CloseConnection(_failure(e)))
            return None
        log.error("answered %s to api key %d v%d from %s: its handler failed: %s", error_of(e)[0].name,
                  header.api_key, header.api_version, self.where, _failure(e))
        return answer

    def _fail(self, header: RequestHeader, e: BaseException) -> None:
        """A request's answer cannot be given (an acks=0 produce failed) or its writing failed:
        the connection is closed, with one line unless the client went away."""
        if isinstance(e, CloseConnection):
            log.info("closing the Kafka connection from %s after an acks=0 produce failed: %s", self.where, e)
        elif not isinstance(e, ConnectionError):
            log.error("closing the Kafka connection from %s: api key %d v%d failed: %s", self.where,
                      header.api_key, header.api_version, _failure(e))
        self.closed = True


def _failure(e: BaseException) -> str:
    """A handler's failure in a few words: its type and message (a bare CancelledError, from a
    future its handler awaited that something else cancelled, has none: ``_answer`` tells it
    from the listener's own cancellation by the task's ``cancelling()``)."""
    what = type(e).__name__
    if isinstance(e, asyncio.CancelledError):
        what += " (cancelled inside its handler)"
    return f"{what}: {e}" if str(e) else what


class _Mute:
    """Until when (time.monotonic) a connection's next request waits."""

    __slots__ = ("until",)

    def __init__(self) -> None:
        self.until = 0.0


async def _ready(value: Any) -> Any:
    return value
