"""A client of a Raft-backed gRPC service that finds the leader from any endpoint and retries
only what is safe to retry (docs/raft.md, "Write outcomes").

The rule: an answer that proves the request changed nothing (``not-applied: 1``, NotLeader, a
connection that never opened) is retried anywhere; an answer that leaves the outcome unknown
(a broken connection mid-call, a deadline, a server-side timeout) is retried only for requests
the caller marks ``idempotent`` (reads, heartbeats) and otherwise reported as unknown, so a
compare-and-set or a create is never run twice behind the caller's back.

Services answer in two ways, and both are handled here: with gRPC statuses and trailing
metadata (``raft.admin.abort_with``; the KV example), or in-band in the response (the KRaft
controller's ``Status``). Subclasses read the latter in ``check``.
"""
from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

import grpc

from .admin import NOT_APPLIED, leader_hint
from common.tls import TLSConfig, closed_hint, tls_failure
from common.channels import open_channel

R = TypeVar("R")


class Retry(Exception):
    """Raised by ``check`` (or the error rules) to try again, at ``leader`` when it is known."""

    def __init__(self, reason: str, leader: str | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.leader = leader


class _TlsRefused(Retry):
    """A TLS handshake with one endpoint failed on this side's checks: final for that endpoint
    (retrying it cannot help), the others are still tried."""

    def __init__(self, error: grpc.aio.AioRpcError) -> None:
        super().__init__(describe(error))
        self.error = error


class LeaderClient:
    """Endpoints, a channel per address (TLS when configured), the leader remembered between
    calls, and capped exponential backoff with jitter between attempts. Subclasses choose the
    exceptions ``call`` raises (``unreachable``, ``outcome_unknown``, ``failed``)."""

    def __init__(self, endpoints: Sequence[str], *, timeout: float = 10.0, attempt_timeout: float = 3.0,
                 tls: TLSConfig | None = None, max_message_bytes: int = 64 << 20,
                 backoff_s: tuple[float, float] = (0.02, 0.25), give_up_unconnectable: bool = False) -> None:
        """``give_up_unconnectable``: fail once every endpoint has refused the connection (or
        closed it while it was being set up), instead of waiting out ``timeout``: what a tool
        given a wrong address wants; a server waiting for its peers to start does not."""
        if not endpoints:
            raise ValueError("no endpoints given")
        self.endpoints = list(endpoints)
        self.timeout = timeout
        self.attempt_timeout = attempt_timeout  # also the bound on connecting, whatever a call allows
        self.tls = tls
        self.max_message_bytes = max_message_bytes
        self.backoff_s = backoff_s
        self.give_up_unconnectable = give_up_unconnectable
        self.leader: str | None = None
        self._channels: dict[str, grpc.aio.Channel] = {}
        self._next = 0

    def unreachable(self, message: str) -> Exception:
        """No answer was final within the budget; ``message`` reads "within Ns (last: ...)"."""
        return ConnectionError(f"no leader answered {message}")

    def outcome_unknown(self, message: str) -> Exception:
        return TimeoutError(message)

    def unconnectable(self, message: str) -> Exception:
        """Every endpoint refused the connection or closed it during set-up (with
        ``give_up_unconnectable``); ``message`` names each with why."""
        return ConnectionError(message)

    def failed(self, address: str, error: grpc.aio.AioRpcError) -> Exception:
        return RuntimeError(f"{address}: {describe(error)}")

    def channel(self, address: str) -> grpc.aio.Channel:
        ch = self._channels.get(address)
        if ch is None:
            ch = self._channels[address] = open_channel(address, self.tls, self.max_message_bytes)
        return ch

    def _target(self) -> str:
        if self.leader:
            return self.leader
        address = self.endpoints[self._next % len(self.endpoints)]
        self._next += 1
        return address

    async def call(self, invoke: Callable[[grpc.aio.Channel, float], Awaitable[R]], *, idempotent: bool,
                   check: Callable[[str, R], R] | None = None, timeout: float | None = None,
                   attempt_timeout: float | None = None) -> R:
        """``invoke(channel, attempt_timeout)`` at the leader (or the next endpoint) until an
        answer is final. ``check(address, response)`` may raise Retry for in-band answers.
        A short ``attempt_timeout`` moves on quickly from a leader that hangs (SIGSTOP)."""
        per_attempt = attempt_timeout or self.attempt_timeout
        loop = asyncio.get_running_loop()
        budget = timeout or self.timeout
        deadline = loop.time() + budget
        last = "no endpoint answered"
        attempt = 0
        refused: set[str] = set()  # endpoints whose TLS handshake failed
        unconnectable: dict[str, str] = {}  # endpoint -> why no connection opened to it
        while True:
            address = self._target()
            try:
                channel = self.channel(address)
                if not idempotent:  # a call that may take long (its server waits) connects as quickly as any
                    await self._connected(address, channel, min(per_attempt, self.attempt_timeout))
                response = await invoke(channel, per_attempt)
                if check is not None:
                    response = check(address, response)
                self.leader = address
                return response
            except grpc.aio.AioRpcError as e:
                retry = self._rpc_error(address, e, idempotent)
            except Retry as r:
                retry = r
            if isinstance(retry, _TlsRefused):
                refused.add(address)
                if refused >= set(self.endpoints):
                    raise self.failed(address, retry.error)
            last = f"{address}: {retry.reason}"
            if self.give_up_unconnectable:
                if not_connected(retry.reason):
                    unconnectable[address] = retry.reason
                    if set(unconnectable) >= set(self.endpoints):
                        raise self.unconnectable("; ".join(
                            f"{a}: {connect_failure(unconnectable[a])}{closed_hint(unconnectable[a])}"
                            for a in dict.fromkeys(self.endpoints)))
                else:
                    unconnectable.clear()
            self.leader = retry.leader if retry.leader and retry.leader != address else None
            if address in self.endpoints:  # without a hint, ask the next endpoint, not this one again
                self._next = self.endpoints.index(address) + 1
            lo, hi = self.backoff_s
            delay = min(hi, lo * 2 ** attempt) * random.uniform(0.5, 1.0)
            attempt += 1
            if loop.time() + delay >= deadline:
                raise self.unreachable(f"within {budget:.0f}s (last: {last}{closed_hint(last)})")
            await asyncio.sleep(delay)

    async def _connected(self, address: str, channel: grpc.aio.Channel, timeout: float) -> None:
        """Before a call that must not run twice: a channel that cannot connect (refused, a
        name that does not resolve, a stopped container) is left without sending anything,
        so the next endpoint may be tried; only a failure after this may have been applied."""
        state = channel.get_state(try_to_connect=True)
        if state == grpc.ChannelConnectivity.READY:
            return  # the common case, without a task for the wait
        try:
            async with asyncio.timeout(timeout):
                while state != grpc.ChannelConnectivity.READY:
                    if state == grpc.ChannelConnectivity.TRANSIENT_FAILURE:  # refused, or a failed handshake
                        raise Retry(f"could not connect ({await self._why(channel)}); nothing was sent")
                    await channel.wait_for_state_change(state)
                    state = channel.get_state(try_to_connect=True)
        except TimeoutError:
            raise Retry("could not connect in time; nothing was sent") from None

    async def _why(self, channel: grpc.aio.Channel) -> str:
        """Why a channel does not connect: a call to no method fails at once with the channel's
        last connect error and sends nothing. A failed TLS handshake is final for the endpoint."""
        try:
            await channel.unary_unary("/raft.client/Probe")(b"", timeout=1.0)
        except grpc.aio.AioRpcError as e:
            if tls_failure(e.details() or ""):
                raise _TlsRefused(e) from None
            return e.details() or e.code().name
        return "connected late"

    def _rpc_error(self, address: str, e: grpc.aio.AioRpcError, idempotent: bool) -> Retry:
        """The shared outcome rules for gRPC-level answers: a Retry, or raise a final error."""
        code = e.code()
        reason = e.details() or code.name
        not_applied = dict(e.trailing_metadata() or ()).get(NOT_APPLIED) == "1"
        if not_applied:
            _, leader = leader_hint(e)
            return Retry(reason, leader)
        if code == grpc.StatusCode.UNAVAILABLE and tls_failure(reason):
            return _TlsRefused(e)  # not transient: certificates, or TLS to a plaintext port
        if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.CANCELLED):
            if idempotent or (code == grpc.StatusCode.UNAVAILABLE and not sent(e)):
                return Retry(reason)
            self.leader = None
            raise self.outcome_unknown(f"{address}: {reason}; the write may or may not have been applied")
        raise self.failed(address, e)

    async def close(self) -> None:
        await asyncio.gather(*(ch.close() for ch in self._channels.values()), return_exceptions=True)
        self._channels.clear()


def describe(e: grpc.aio.AioRpcError) -> str:
    """One line for a final gRPC error: what a failed TLS handshake means, else its details."""
    details = e.details() or e.code().name
    return tls_failure(details) or details


def not_connected(details: str) -> bool:
    """Whether a failure means no connection opened: refused, or closed during set-up (a
    listener of another protocol, or TLS against plaintext), as opposed to a slow peer."""
    details = details.lower()
    return "connection refused" in details or "socket closed" in details


#: How ``connect_failure`` names a listener that closed the connection: one of another
#: protocol, or of TLS when the client spoke plaintext.
CLOSED_DURING_SETUP = "the connection was closed while being set up"


def connect_failure(details: str) -> str:
    """The last error of gRPC's "failed to connect to all addresses; last error: ..." line."""
    return "connection refused" if "connection refused" in details.lower() else \
        CLOSED_DURING_SETUP if "socket closed" in details.lower() else details


def sent(e: grpc.aio.AioRpcError) -> bool:
    """Whether an UNAVAILABLE failure happened after the request may have reached a server
    (a reset mid-call) rather than while connecting (nothing was sent)."""
    details = (e.details() or "").lower()
    return not any(s in details for s in ("failed to connect", "connection refused", "no connection",
                                          "connect failed", "dns resolution", "errors resolving"))
