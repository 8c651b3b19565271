"""Connection limits of a broker's Kafka listeners (Kafka's ConnectionQuotas): at most
``max.connections`` connections in all and ``max.connections.per.ip`` from one address (with
``max.connections.per.ip.overrides``, ``IP:N,...``). A connection over a limit is closed as it
is accepted, before a byte is read or a TLS handshake is done, so a flood of connections from
one address costs the broker a counter per address and keeps the others served.

``connection_creation_rate`` (KIP-612), a client quota of IP entities (the address's own, else
the default IP's), limits the connections an address opens per second, measured as the client
quotas' rates are: a connection over it is held, unread, for the time that brings the rate back
to the quota and then closed, and is not counted in the rate (as Kafka delays closing it), so a
client reconnecting in a loop waits; held connections count towards ``max.connections.per.ip``,
which bounds what a flood holds.

``max.connection.creation.rate`` (KIP-612), the broker's, and
``listener.name.<l>.max.connection.creation.rate``, a listener's own, limit the connections
accepted per second however many addresses they come from: as Kafka's acceptor waits before
accepting more, a connection over either is held, unread, for the time that brings the rate
back to it and then served (it is counted: it will be served). They are checked after the
connection counts, so ``max.connections`` bounds what waits."""
from __future__ import annotations

import ipaddress
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from common.config_def import ConfigError
from metadata.client_quotas import CONNECTION_CREATION_RATE, IP
from metadata.image import ClientQuotasImage

from .quotas import QuotaWindow, Rate

log = logging.getLogger("brokerd.kafka")

INT_MAX = 2 ** 31 - 1  # the keys' default: no limit

#: One log line per address this often while its connections are refused (a flood logs little).
LOG_INTERVAL_S = 10.0


def parse_overrides(text: str) -> dict[str, int]:
    """``max.connections.per.ip.overrides``: ``127.0.0.1:200,10.0.0.5:0`` -> {address: limit}."""
    out: dict[str, int] = {}
    for item in filter(None, (i.strip() for i in text.split(","))):
        host, sep, count = item.rpartition(":")
        try:
            out[str(ipaddress.ip_address(host))] = int(count)
            if not sep or int(count) < 0:
                raise ValueError(item)
        except ValueError:
            raise ConfigError(f"max.connections.per.ip.overrides: {item!r} is not IP:COUNT (e.g. "
                              f"127.0.0.1:200)") from None
    return out


@dataclass
class ConnectionQuotas:
    max_connections: int
    max_per_ip: int
    overrides: dict[str, int] = field(default_factory=dict)
    quotas: Callable[[], ClientQuotasImage] | None = None  # connection_creation_rate of ip entities
    window: QuotaWindow = QuotaWindow()
    max_creation_rate: int = INT_MAX  # max.connection.creation.rate
    listener_creation_rates: dict[str, int] = field(default_factory=dict)  # listener -> its own rate
    total: int = 0
    by_ip: dict[str, int] = field(default_factory=dict)
    _logged: dict[str, float] = field(default_factory=dict)
    _rates: dict[str, Rate] = field(default_factory=dict)
    _accepted: dict[str, Rate] = field(default_factory=dict)  # "" (the broker's) or a listener -> its rate

    def admit(self, ip: str) -> bool:
        """Count a new connection from ``ip``; False (counted nowhere) when it is over a limit."""
        limit = self.overrides.get(ip, self.max_per_ip)
        have = self.by_ip.get(ip, 0)
        if have >= limit or self.total >= self.max_connections:
            self._refusing(ip, f"it has the maximum of {limit} connections (max.connections.per.ip)" if have >= limit
                           else f"the broker has the maximum of {self.max_connections} connections (max.connections)")
            return False
        self.by_ip[ip] = have + 1
        self.total += 1
        return True

    def accept_delay_ms(self, listener: str) -> int:
        """Count a new connection on ``listener`` in the broker's and the listener's
        connection creation rates; how long to hold it before serving it (0: at once)."""
        delay = 0
        now = time.monotonic()
        for name, bound in (("", self.max_creation_rate), (listener, self.listener_creation_rates.get(listener))):
            if bound is None or bound >= INT_MAX:
                continue
            rate = self._accepted.get(name)
            if rate is None:
                rate = self._accepted[name] = Rate(self.window, now)
            rate.record(1, now)
            delay = max(delay, rate.throttle_ms(bound, now))
        return delay

    def creation_throttle_ms(self, ip: str) -> int:
        """Count a new connection from ``ip`` in its ``connection_creation_rate``; how long to
        hold it before closing it when that is over the quota (0: serve it)."""
        image = self.quotas() if self.quotas is not None else None
        if image is None or not image.entities:
            return 0
        bound = image.of(((IP, ip),)).get(CONNECTION_CREATION_RATE) or image.of(((IP, None),)).get(
            CONNECTION_CREATION_RATE)
        if bound is None:
            return 0
        now = time.monotonic()
        rate = self._rates.get(ip)
        if rate is None:
            if len(self._rates) > 10_000:  # a flood of addresses: a new rate is what each then gets
                self._rates.clear()
            rate = self._rates[ip] = Rate(self.window, now)
        rate.record(1, now)
        observed, window_s = rate.measure(now)
        if observed <= bound:
            return 0
        rate.record(-1, now)  # a refused connection is not counted: the rate comes back to the quota
        self._refusing(ip, f"over its connection_creation_rate of {bound:g}/s")
        return max(1, round((observed - bound) / bound * window_s * 1000))

    def _refusing(self, ip: str, why: str) -> None:
        now = time.monotonic()
        if now - self._logged.get(ip, -LOG_INTERVAL_S) >= LOG_INTERVAL_S:
            self._logged[ip] = now
            if len(self._logged) > 10_000:
                self._logged.clear()
            log.info("rejecting connections from %s: %s", ip, why)

    def release(self, ip: str) -> None:
        left = self.by_ip.get(ip, 0) - 1
        if left > 0:
            self.by_ip[ip] = left
        else:
            self.by_ip.pop(ip, None)
        self.total -= 1
