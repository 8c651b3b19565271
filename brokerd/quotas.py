"""Client quotas on a broker (Kafka's ClientQuotaManager; KIP-13, KIP-55, KIP-124, KIP-219, KIP-599).

A quota belongs to the most specific entity of the metadata image that matches the request's
user (the principal's name) and client id, in Kafka's order of precedence:

    1. user and client id        2. user, default client id     3. user
    4. default user, client id   5. default user and client id  6. default user
    7. client id                 8. default client id

Clients that the matched entity groups share one measured rate: a quota set for ``user=alice``
alone is shared by all of alice's clients, one for the default user is had by each user on its
own. The byte rates are kept as a ``Backlog`` (a leaky bucket: the bytes a client sent beyond
the allowance of ``quota.window.num - 1`` windows of ``quota.window.size.seconds`` a new client
has under Kafka's ``Rate``, draining at the quota), not as Kafka's windowed ``Rate``: a
client over its quota is throttled for the time the backlog takes to drain back to the
allowance, answered as ``throttle_time_ms``. Under Kafka's ``Rate`` the windows' worth a
client sent at once counts until its sample expires and is then allowed again at once, every
``quota.window.num`` windows, so a throttled client's rate over 30 s swings by +-20% around its
quota; a backlog holds it there. ``request_percentage`` and the connection rates are measured
as Kafka's ``Rate``, over the same samples. The codecs apply the throttle (``brokerd.kafka.listener``
mutes the connection for that long, KIP-219). The image is read on every request, so a quota
changed by a metadata delta applies to the next request.
"""
from __future__ import annotations

import functools
import time
from collections.abc import Awaitable, Callable, Generator
from dataclasses import dataclass
from typing import Any

from metadata.client_quotas import (CLIENT_ID, CONSUMER_BYTE_RATE, CONTROLLER_MUTATION_RATE, PRODUCER_BYTE_RATE,
                                    REQUEST_PERCENTAGE, USER)
from metadata.image import ClientQuotasImage, QuotaEntity

#: Sensors of clients idle this long are dropped (Kafka's inactive sensor expiration: an hour).
IDLE_EXPIRY_S = 3600.0


@dataclass(frozen=True, slots=True)
class QuotaWindow:
    """``quota.window.num`` samples of ``quota.window.size.seconds`` (Kafka's defaults: 11 of 1 s)."""

    samples: int = 11
    size_s: float = 1.0


class Rate:
    """Kafka's ``Rate`` over a ``SampledStat``: the sum of the live samples over the time they
    span, which is padded to ``samples - 1`` windows while younger (a new client may send one
    window's worth less than a quota's full window at once, and is then held to the rate).

    Counted on every request, so the sum and the oldest sample's start are kept rather than
    recomputed: a request within the current sample, with no sample to expire, adds a number
    and divides; the samples are walked only when one starts or expires (once a window)."""

    __slots__ = ("_size", "_samples", "_expired", "_starts", "_values", "_current", "_total", "_oldest",
                 "used")

    def __init__(self, window: QuotaWindow, now: float) -> None:
        self._size, self._samples = window.size_s, window.samples
        self._expired = window.size_s * window.samples
        self._starts = [now]
        self._values = [0.0]
        self._current = 0
        self._total = 0.0
        self._oldest = now
        self.used = now

    def record(self, value: float, now: float) -> None:
        self.used = now
        if now - self._starts[self._current] >= self._size:  # a new sample, over the oldest one
            self._current = (self._current + 1) % self._samples
            if self._current == len(self._starts):
                self._starts.append(now)
                self._values.append(0.0)
            else:
                self._starts[self._current], self._values[self._current] = now, 0.0
            self._settle()
        self._values[self._current] += value
        self._total += value

    def measure(self, now: float) -> tuple[float, float]:
        """(bytes per second, the seconds the rate is taken over)."""
        elapsed = self._elapsed(now)
        return self._total / elapsed, elapsed

    def throttle_ms(self, bound: float, now: float) -> int:
        """The time that brings the rate back to ``bound``, in ms (0: within it):
        ``(rate - bound) / bound * window``, Kafka's ``throttleTime``."""
        elapsed = self._elapsed(now)
        observed = self._total / elapsed
        return 0 if observed <= bound else round((observed - bound) / bound * elapsed * 1000)

    def _elapsed(self, now: float) -> float:
        if now - self._oldest >= self._expired:  # samples older than the whole window count nothing
            for i, start in enumerate(self._starts):
                if now - start >= self._expired:
                    self._starts[i], self._values[i] = now, 0.0
            self._settle()
        elapsed = now - self._oldest
        full = int(elapsed // self._size)
        if full < self._samples - 1:
            elapsed += (self._samples - 1 - full) * self._size
        return max(elapsed, 1e-3)

    def _settle(self) -> None:
        """After a sample started or expired: the sum (summed afresh, so no rounding drifts) and
        the oldest start."""
        self._total = sum(self._values)
        self._oldest = min(self._starts)


class Backlog:
    """A byte rate as a leaky bucket: the bytes a client sent beyond its quota's allowance,
    draining at the quota (the shape of KIP-599's token bucket, in bytes owed rather than tokens
    left, so that a quota change re-prices what was sent, as Kafka's ``Rate`` does). Its
    interface is ``Rate``'s, as a sensor uses it.

    Why not ``Rate`` (issue 29): a client that sent its allowance at once has it counted in one
    sample until that sample expires, is then let send it again at once, and so on every
    ``quota.window.num`` windows; its rate over 30 s swings by +-20% around the quota. Drained
    continuously, a throttled client's rate is its quota over any span."""

    __slots__ = ("_allowance_s", "_quota", "_owed", "_at", "used")

    def __init__(self, allowance_s: float, quota: float, now: float) -> None:
        self._allowance_s, self._quota = allowance_s, quota
        self._owed = 0.0
        self._at = self.used = now

    def record(self, value: float, now: float) -> None:
        """Count ``value`` bytes (negative: taken back), after draining at the quota until now."""
        self._drain(now)
        self._owed = max(0.0, self._owed + value)
        self.used = now

    def throttle_ms(self, bound: float, now: float) -> int:
        """The time the bytes owed take to drain back to ``bound``'s allowance, in ms (0: within
        it); ``bound`` drains from now on (the time before drained at the bound it replaces)."""
        self._drain(now)
        self._quota = bound
        over = self._owed - bound * self._allowance_s
        return 0 if over <= 0 else max(1, round(over / bound * 1000))

    def _drain(self, now: float) -> None:
        if now > self._at:
            self._owed = max(0.0, self._owed - self._quota * (now - self._at))
            self._at = now


@functools.lru_cache(maxsize=4096)
def user_of(principal: str) -> str:
    """The quota user of a principal: ``User:alice`` -> ``alice`` (Kafka's sanitized name);
    asked on every request, of few principals."""
    return principal.split(":", 1)[1] if ":" in principal else principal


def _levels(user: str, client_id: str) -> list[QuotaEntity]:
    """The entities that may hold a client's quota, most specific first (sorted parts, as the
    image keeps them: ``client-id`` before ``user``)."""
    u, c, du, dc = (USER, user), (CLIENT_ID, client_id), (USER, None), (CLIENT_ID, None)
    return [(c, u), (dc, u), (u,), (c, du), (dc, du), (du,), (c,), (dc,)]


class Sensor:
    """A client's quota as the current image sets it: the bound, and the rate (or backlog) of
    the group of clients that share it (Kafka's quota sensor)."""

    __slots__ = ("group", "bound", "rate")

    def __init__(self, group: tuple[str, str], bound: float, rate: Rate | Backlog) -> None:
        self.group, self.bound, self.rate = group, bound, rate

    def record(self, value: float, now: float) -> int:
        """Count ``value``; the throttle time in ms (0 within the quota)."""
        self.rate.record(value, now)
        return self.rate.throttle_ms(self.bound, now)


class ClientQuotaManager:
    """One quota key (``producer_byte_rate`` or ``consumer_byte_rate``) over every client.

    A client's sensor is resolved once and kept until a metadata delta changes the quotas (the
    image is then another object), so a request costs a dictionary lookup, not eight."""

    def __init__(self, key: str, quotas: Callable[[], ClientQuotasImage], window: QuotaWindow = QuotaWindow(),
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.key = key
        self._quotas = quotas
        self.window = window
        self.clock = clock
        self._seen: ClientQuotasImage | None = None
        self._resolved: dict[tuple[str, str], Sensor | None] = {}
        self._anyone = False
        self._rates: dict[tuple[str, str], Rate | Backlog] = {}
        self._swept = clock()

    def anyone(self) -> bool:
        """Whether the key is set for any entity (else nothing need be measured)."""
        image = self._quotas()
        if image is not self._seen:
            self._see(image)
        return self._anyone

    def _see(self, image: ClientQuotasImage) -> None:
        """A metadata delta changed quotas: every client is resolved again."""
        self._seen, self._resolved = image, {}
        self._anyone = any(self.key in keys for keys in image.entities.values())

    def sensor(self, user: str, client_id: str) -> Sensor | None:
        """The client's sensor; None: no quota of this key applies to it."""
        image = self._quotas()
        if image is not self._seen:
            self._see(image)
        try:
            return self._resolved[(user, client_id)]
        except KeyError:
            return self._resolve(image, user, client_id)

    def _resolve(self, image: ClientQuotasImage, user: str, client_id: str) -> Sensor | None:
        found = None
        if image.entities:
            for entity in _levels(user, client_id):
                bound = image.of(entity).get(self.key)
                if bound is not None:
                    types = {t for t, _ in entity}
                    group = (user if USER in types else "", client_id if CLIENT_ID in types else "")
                    rate = self._rates.get(group)
                    if rate is None:
                        now = self.clock()
                        self._sweep(now)
                        rate = self._rates[group] = self._measure(bound, now)
                    found = Sensor(group, bound, rate)
                    break
        if len(self._resolved) > 100_000:  # a flood of client ids: resolving again is cheap
            self._resolved.clear()
        self._resolved[(user, client_id)] = found
        return found

    def _measure(self, bound: float, now: float) -> Rate | Backlog:
        """A new group's measure: bytes owed beyond the allowance of ``quota.window.num - 1``
        windows, the bytes a new client may send at once under Kafka's ``Rate``."""
        return Backlog(max(1, self.window.samples - 1) * self.window.size_s, bound, now)

    def quota(self, user: str, client_id: str) -> tuple[tuple[str, str], float] | None:
        """(the measured group's (user, client id), the quota) of a client; None: unlimited."""
        s = self.sensor(user, client_id)
        return (s.group, s.bound) if s is not None else None

    def record(self, user: str, client_id: str, value: float) -> int:
        """Count ``value`` bytes for the client; the throttle time in ms (0 within its quota)."""
        s = self.sensor(user, client_id)
        return 0 if s is None else s.record(value, self.clock())

    def unrecord(self, user: str, client_id: str, value: float) -> None:
        """Take back bytes counted but not sent (a fetch answered empty because it was throttled)."""
        s = self.sensor(user, client_id)
        if s is not None:
            s.rate.record(-value, self.clock())

    def max_in_window(self, user: str, client_id: str) -> int | None:
        """The most bytes one fetch may return (Kafka's getMaxValueInQuotaWindow); None: no quota."""
        s = self.sensor(user, client_id)
        if s is None:
            return None
        return max(1, int(s.bound * max(1, self.window.samples - 1) * self.window.size_s))

    def _sweep(self, now: float) -> None:
        if now - self._swept < 60:
            return
        self._swept = now
        idle = [g for g, r in self._rates.items() if now - r.used > IDLE_EXPIRY_S]
        for group in idle:
            del self._rates[group]
        if idle:  # sensors resolved before hold the dropped rates
            self._resolved = {}


class RequestQuotaManager(ClientQuotaManager):
    """``request_percentage`` (KIP-124): the time the broker spends on a client's requests, as a
    percent of one thread's time (our broker has one event loop), over the same windows as the
    byte rates. As Kafka's ClientRequestQuotaManager, a throttle is at most one window: the time
    is taken from the broker, not from the client, so a long throttle would gain nothing."""

    def __init__(self, quotas: Callable[[], ClientQuotasImage], window: QuotaWindow = QuotaWindow(),
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(REQUEST_PERCENTAGE, quotas, window, clock)

    def _measure(self, bound: float, now: float) -> Rate | Backlog:
        """Kafka's ``Rate``, as Kafka measures request time (its throttle is at most one window)."""
        return Rate(self.window, now)

    def record(self, user: str, client_id: str, value: float) -> int:
        """Count ``value`` seconds of the broker's time; the throttle time in ms (0: within quota)."""
        s = self.sensor(user, client_id)
        return 0 if s is None else self.spent(s, value, self.clock())

    def spent(self, sensor: Sensor, seconds: float, now: float) -> int:
        """Count ``seconds`` of the broker's time in a client's sensor; its throttle time in ms."""
        return min(sensor.record(seconds * 100, now), round(self.window.size_s * 1000))


class MutationQuotaManager(ClientQuotaManager):
    """``controller_mutation_rate`` (KIP-599): partitions created or deleted per second, as a
    token bucket of ``rate * quota.window.num * quota.window.size.seconds`` tokens refilled at
    ``rate`` (a ``Backlog`` of that allowance: the tokens taken beyond it are the debt). A
    request is let through while the bucket is not in debt and takes its partitions from it,
    which may leave it in debt; the debt is the throttle time, ``debt / rate``. A quota change
    keeps the partitions owed (Kafka's ``TokenBucket`` keeps its tokens, up to the new burst)."""

    def __init__(self, quotas: Callable[[], ClientQuotasImage], window: QuotaWindow = QuotaWindow(),
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(CONTROLLER_MUTATION_RATE, quotas, window, clock)

    def _measure(self, bound: float, now: float) -> Rate | Backlog:
        return Backlog(self.window.samples * self.window.size_s, bound, now)

    def throttle_ms(self, user: str, client_id: str) -> int:
        """How long the client must wait before it may mutate again (0: it may now)."""
        s = self.sensor(user, client_id)
        return 0 if s is None else s.rate.throttle_ms(s.bound, self.clock())


class HandlerTime:
    """A handler awaited while the seconds its own steps run on the event loop are summed: the
    time it waits (a long-polling fetch, an acks=all produce waiting for its replicas) costs the
    broker nothing, as Kafka's purgatory costs no request handler thread. ``sensor``: the
    client's ``request_percentage`` sensor the time goes to."""

    __slots__ = ("_work", "spent", "sensor")

    def __init__(self, work: Awaitable[Any], sensor: Sensor | None = None) -> None:
        self._work = work
        self.spent = 0.0
        self.sensor = sensor

    def __await__(self) -> Generator[Any, Any, Any]:
        steps = self._work.__await__()
        value: Any = None
        error: BaseException | None = None
        while True:
            start = time.perf_counter()
            try:
                step = steps.send(value) if error is None else steps.throw(error)
            except StopIteration as done:
                return done.value
            finally:
                self.spent += time.perf_counter() - start
            try:
                value, error = (yield step), None
            except BaseException as e:  # a cancellation goes on into the handler
                value, error = None, e


class ClientQuotas:
    """The broker's quota managers, one per key, over the broker's metadata image."""

    def __init__(self, quotas: Callable[[], ClientQuotasImage], window: QuotaWindow = QuotaWindow(),
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.produce = ClientQuotaManager(PRODUCER_BYTE_RATE, quotas, window, clock)
        self.fetch = ClientQuotaManager(CONSUMER_BYTE_RATE, quotas, window, clock)
        self.mutations = MutationQuotaManager(quotas, window, clock)
        self.request = RequestQuotaManager(quotas, window, clock)
