"""Client quotas on a broker (Kafka's ClientQuotaManager; KIP-13, KIP-55, KIP-124, KIP-219, KIP-599).

A quota belongs to the most specific entity of the metadata image that matches the request's
user (the principal's name) and client id, in Kafka's order of precedence:

    1. user and client id        2. user, default client id     3. user
    4. default user, client id   5. default user and client id  6. default user
    7. client id                 8. default client id

Clients that the matched entity groups share one measured rate: a quota set for ``user=alice``
alone is shared by all of alice's clients, one for the default user is had by each user on its
own. The rate is measured, as Kafka's ``Rate`` over a ``SampledStat`` measures it, over
``quota.window.num`` samples of ``quota.window.size.seconds``; a client over its quota is
throttled for ``(rate - quota) / quota * window`` (the time that brings its rate back to the
quota), answered as ``throttle_time_ms``. The codecs apply the throttle (``brokerd.kafka.listener``
mutes the connection for that long, KIP-219). The image is read on every request, so a quota
changed by a metadata delta applies to the next request.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

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
    window's worth less than a quota's full window at once, and is then held to the rate)."""

    __slots__ = ("_window", "_starts", "_values", "_current", "used")

    def __init__(self, window: QuotaWindow, now: float) -> None:
        self._window = window
        self._starts = [now]
        self._values = [0.0]
        self._current = 0
        self.used = now

    def record(self, value: float, now: float) -> None:
        w = self._window
        self.used = now
        if now - self._starts[self._current] >= w.size_s:
            self._current = (self._current + 1) % w.samples
            if self._current == len(self._starts):
                self._starts.append(now)
                self._values.append(0.0)
            else:
                self._starts[self._current], self._values[self._current] = now, 0.0
        self._values[self._current] += value

    def measure(self, now: float) -> tuple[float, float]:
        """(bytes per second, the seconds the rate is taken over)."""
        w = self._window
        expired = w.size_s * w.samples
        for i, start in enumerate(self._starts):
            if now - start >= expired:
                self._starts[i], self._values[i] = now, 0.0
        elapsed = now - min(self._starts)
        full = int(elapsed // w.size_s)
        if full < w.samples - 1:
            elapsed += (w.samples - 1 - full) * w.size_s
        elapsed = max(elapsed, 1e-3)
        return sum(self._values) / elapsed, elapsed


def user_of(principal: str) -> str:
    """The quota user of a principal: ``User:alice`` -> ``alice`` (Kafka's sanitized name)."""
    return principal.split(":", 1)[1] if ":" in principal else principal


def _levels(user: str, client_id: str) -> list[QuotaEntity]:
    """The entities that may hold a client's quota, most specific first (sorted parts, as the
    image keeps them: ``client-id`` before ``user``)."""
    u, c, du, dc = (USER, user), (CLIENT_ID, client_id), (USER, None), (CLIENT_ID, None)
    return [(c, u), (dc, u), (u,), (c, du), (dc, du), (du,), (c,), (dc,)]


class ClientQuotaManager:
    """One quota key (``producer_byte_rate`` or ``consumer_byte_rate``) over every client."""

    def __init__(self, key: str, quotas: Callable[[], ClientQuotasImage], window: QuotaWindow = QuotaWindow(),
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.key = key
        self._quotas = quotas
        self.window = window
        self._clock = clock
        self._seen: ClientQuotasImage | None = None
        self._resolved: dict[tuple[str, str], tuple[tuple[str, str], float] | None] = {}
        self._rates: dict[tuple[str, str], Rate] = {}
        self._swept = clock()

    def quota(self, user: str, client_id: str) -> tuple[tuple[str, str], float] | None:
        """(the measured group's (user, client id), the quota) of a client; None: unlimited."""
        image = self._quotas()
        if image is not self._seen:  # a metadata delta changed quotas: resolve every client again
            self._seen, self._resolved = image, {}
        if not image.entities:
            return None
        if (user, client_id) in self._resolved:
            return self._resolved[(user, client_id)]
        found = None
        for entity in _levels(user, client_id):
            bound = image.of(entity).get(self.key)
            if bound is not None:
                types = {t for t, _ in entity}
                found = ((user if USER in types else "", client_id if CLIENT_ID in types else ""), bound)
                break
        if len(self._resolved) > 100_000:  # a flood of client ids: resolving again is cheap
            self._resolved.clear()
        self._resolved[(user, client_id)] = found
        return found

    def record(self, user: str, client_id: str, value: float) -> int:
        """Count ``value`` bytes for the client; the throttle time in ms (0 within its quota)."""
        q = self.quota(user, client_id)
        if q is None:
            return 0
        group, bound = q
        now = self._clock()
        rate = self._rates.get(group)
        if rate is None:
            self._sweep(now)
            rate = self._rates[group] = Rate(self.window, now)
        rate.record(value, now)
        observed, window_s = rate.measure(now)
        if observed <= bound:
            return 0
        return round((observed - bound) / bound * window_s * 1000)

    def unrecord(self, user: str, client_id: str, value: float) -> None:
        """Take back bytes counted but not sent (a fetch answered empty because it was throttled)."""
        q = self.quota(user, client_id)
        rate = self._rates.get(q[0]) if q is not None else None
        if rate is not None:
            rate.record(-value, self._clock())

    def max_in_window(self, user: str, client_id: str) -> int | None:
        """The most bytes one fetch may return (Kafka's getMaxValueInQuotaWindow); None: no quota."""
        q = self.quota(user, client_id)
        if q is None:
            return None
        return max(1, int(q[1] * max(1, self.window.samples - 1) * self.window.size_s))

    def _sweep(self, now: float) -> None:
        if now - self._swept < 60:
            return
        self._swept = now
        for group in [g for g, r in self._rates.items() if now - r.used > IDLE_EXPIRY_S]:
            del self._rates[group]


class RequestQuotaManager(ClientQuotaManager):
    """``request_percentage`` (KIP-124): the time the broker spends on a client's requests, as a
    percent of one thread's time (our broker has one event loop), over the same windows as the
    byte rates. As Kafka's ClientRequestQuotaManager, a throttle is at most one window: the time
    is taken from the broker, not from the client, so a long throttle would gain nothing."""

    def __init__(self, quotas: Callable[[], ClientQuotasImage], window: QuotaWindow = QuotaWindow(),
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(REQUEST_PERCENTAGE, quotas, window, clock)

    def record(self, user: str, client_id: str, value: float) -> int:
        """Count ``value`` seconds of the broker's time; the throttle time in ms (0: within quota)."""
        return min(super().record(user, client_id, value * 100), round(self.window.size_s * 1000))


class MutationQuotaManager(ClientQuotaManager):
    """``controller_mutation_rate`` (KIP-599): partitions created or deleted per second, as a
    token bucket of ``rate * quota.window.num * quota.window.size.seconds`` tokens refilled at
    ``rate``. A request is let through while the bucket is not in debt and takes its partitions
    from it, which may leave it in debt; the debt is the throttle time, ``-tokens / rate``."""

    def __init__(self, quotas: Callable[[], ClientQuotasImage], window: QuotaWindow = QuotaWindow(),
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(CONTROLLER_MUTATION_RATE, quotas, window, clock)
        self._buckets: dict[tuple[str, str], list[float]] = {}  # group -> [tokens, last refill]

    def _tokens(self, user: str, client_id: str) -> tuple[list[float], float] | None:
        q = self.quota(user, client_id)
        if q is None:
            return None
        group, rate = q
        now, burst = self._clock(), rate * self.window.samples * self.window.size_s
        bucket = self._buckets.get(group)
        if bucket is None:
            if len(self._buckets) > 100_000:  # a flood of client ids: a full bucket is what a new one gets
                self._buckets.clear()
            bucket = self._buckets[group] = [burst, now]
        bucket[0], bucket[1] = min(burst, bucket[0] + (now - bucket[1]) * rate), now
        return bucket, rate

    def throttle_ms(self, user: str, client_id: str) -> int:
        """How long the client must wait before it may mutate again (0: it may now)."""
        found = self._tokens(user, client_id)
        if found is None or found[0][0] >= 0:
            return 0
        return max(1, round(-found[0][0] / found[1] * 1000))

    def record(self, user: str, client_id: str, value: float) -> int:
        """Take ``value`` partitions; the throttle time that leaves (0: none)."""
        found = self._tokens(user, client_id)
        if found is None:
            return 0
        found[0][0] -= value
        return self.throttle_ms(user, client_id)


class ClientQuotas:
    """The broker's quota managers, one per key, over the broker's metadata image."""

    def __init__(self, quotas: Callable[[], ClientQuotasImage], window: QuotaWindow = QuotaWindow(),
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.produce = ClientQuotaManager(PRODUCER_BYTE_RATE, quotas, window, clock)
        self.fetch = ClientQuotaManager(CONSUMER_BYTE_RATE, quotas, window, clock)
        self.mutations = MutationQuotaManager(quotas, window, clock)
        self.request = RequestQuotaManager(quotas, window, clock)
