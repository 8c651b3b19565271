"""Live charts from the nodes' Prometheus endpoints (``kraft web --metrics``, each node's
``prometheus.listener``): messages and bytes in, and bytes out to consumers, per broker and per
topic, bytes out to followers per broker, the mean request latency of each node and of each
request type, each controller's event queue (its size, and the mean wait in it) and Raft commit
latency, over the last minutes.

The console scrapes every endpoint every few seconds for as long as it runs and keeps the
rounds in memory; a chart is a rate (a counter's increase per second) or a mean (a histogram's
sum over its count) between consecutive rounds, or a gauge as each round found it. Charts are
inline SVG drawn here, on the server, and the page reloads itself to move on: Debian does
package JavaScript chart libraries (libjs-chart.js), but a line per series needs none, and
server-side SVG keeps the console free of JavaScript and of one more install step."""
from __future__ import annotations

import asyncio
import logging
import time
import urllib.request
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from itertools import pairwise
from typing import ClassVar

from markupsafe import Markup, escape
from starlette.requests import Request
from starlette.responses import Response

from .pages import render
from .periodic import Periodic

log = logging.getLogger("kraft.web")

SCRAPE_EVERY_S = 2.0
KEEP_ROUNDS = 150  # five minutes at one round every two seconds
PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf")

Labels = tuple[tuple[str, str], ...]
Samples = dict[tuple[str, Labels], float]


@dataclass(frozen=True, slots=True)
class Round:
    """One scrape of every endpoint: its samples, or None where the endpoint did not answer."""

    at: float
    nodes: dict[str, Samples | None]


def parse(text: str) -> Samples:
    """Prometheus' text format as ``{(sample name, sorted labels): value}``."""
    from prometheus_client.parser import text_string_to_metric_families
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def _fetch(endpoint: str, timeout: float) -> str:
    with urllib.request.urlopen(f"http://{endpoint}/metrics", timeout=timeout) as r:
        return r.read().decode()


@dataclass
class Scraper(Periodic):
    """Scrapes ``endpoints`` every ``every`` seconds into the last ``keep`` rounds."""

    TASK_NAME: ClassVar[str] = "kraft-web-scraper"

    endpoints: list[str]
    every: float = SCRAPE_EVERY_S
    keep: int = KEEP_ROUNDS
    rounds: deque[Round] = field(default_factory=deque)
    problems: dict[str, str] = field(default_factory=dict)  # endpoint -> why its last scrape failed

    def __post_init__(self) -> None:
        self.rounds = deque(maxlen=self.keep)

    async def scrape(self) -> None:
        got = await asyncio.gather(*(self._one(e) for e in self.endpoints))
        self.rounds.append(Round(time.time(), dict(zip(self.endpoints, got, strict=True))))

    step = scrape

    async def _one(self, endpoint: str) -> Samples | None:
        try:
            samples = parse(await asyncio.to_thread(_fetch, endpoint, self.every * 2))
        except Exception as e:  # noqa: BLE001 (a node down or not serving metrics: said on the page, a gap)
            if self.problems.get(endpoint) is None:
                log.warning("metrics of %s: %s", endpoint, e)
            self.problems[endpoint] = f"{type(e).__name__}: {e}"
            return None
        self.problems.pop(endpoint, None)
        return samples


Series = dict[str, list[tuple[float, float]]]


def _sum(samples: Samples, name: str, by: str | None) -> dict[str, float]:
    """The samples named ``name``, summed by the value of label ``by`` (None: all together)."""
    out: dict[str, float] = {}
    for (n, labels), value in samples.items():
        if n == name:
            key = dict(labels).get(by, "") if by else ""
            out[key] = out.get(key, 0.0) + value
    return out


def rates(rounds: Iterable[Round], name: str, by: str | None, per_node: bool) -> Series:
    """A counter's increase per second between consecutive rounds: one series per node
    (``per_node``) or per value of label ``by`` summed over the nodes."""
    series: Series = {}
    for before, after in pairwise(rounds):
        seconds = after.at - before.at
        totals: dict[str, float] = {}
        for node, now in after.nodes.items():
            then = before.nodes.get(node)
            if now is None or then is None:
                continue
            old = _sum(then, name, by)
            for key, value in _sum(now, name, by).items():
                before_ = old.get(key, 0.0)  # a series the node did not have yet (a new topic) started at 0
                increase = value - before_ if value >= before_ else value  # a restarted node counts from 0
                label = node if per_node else key
                totals[label] = totals.get(label, 0.0) + increase / seconds
        for label, value in totals.items():
            series.setdefault(label, []).append((after.at, value))
    return series


def means(rounds: Iterable[Round], histogram: str, scale: float = 1000.0, by: str | None = None) -> Series:
    """A histogram's mean over each interval (its sum's increase over its count's): one series
    per node, or with ``by`` one per value of that label over every node together."""
    series: Series = {}
    for before, after in pairwise(rounds):
        sums: dict[str, float] = {}
        counts: dict[str, float] = {}
        for node, now in after.nodes.items():
            then = before.nodes.get(node)
            if now is None or then is None:
                continue
            for totals, suffix in ((sums, "_sum"), (counts, "_count")):
                old = _sum(then, histogram + suffix, by)
                for key, value in _sum(now, histogram + suffix, by).items():
                    before_ = old.get(key, 0.0)
                    label = key if by else node
                    totals[label] = totals.get(label, 0.0) + (value - before_ if value >= before_ else value)
        for label, count in counts.items():
            if count > 0:
                series.setdefault(label, []).append((after.at, scale * sums.get(label, 0.0) / count))
    return series


def values(rounds: Iterable[Round], gauge: str) -> Series:
    """A gauge as each round found it: one series per node that serves it."""
    series: Series = {}
    for r in rounds:
        for node, samples in r.nodes.items():
            if samples is not None and (found := _sum(samples, gauge, None)):
                series.setdefault(node, []).append((r.at, found[""]))
    return series


@dataclass(frozen=True, slots=True)
class Chart:
    """One chart of the page: its id, title, unit and series, drawn as inline SVG."""

    id: str
    title: str
    unit: str
    series: Series

    def last(self, name: str) -> float:
        return self.series[name][-1][1]

    def svg(self, width: int = 560, height: int = 160) -> Markup:
        points = [p for s in self.series.values() for p in s]
        if not points:
            return Markup('<p class="empty">No samples yet.</p>')
        t0, t1 = min(t for t, _ in points), max(t for t, _ in points)
        top = max(v for _, v in points) or 1.0
        pad = 30

        def xy(t: float, v: float) -> str:
            x = pad + (width - pad) * ((t - t0) / (t1 - t0) if t1 > t0 else 1.0)
            return f"{x:.1f},{height - 15 - (height - 25) * v / top:.1f}"
        lines = [f'<polyline class="series" data-name="{escape(name)}" data-last="{s[-1][1]:.6g}" '
                 f'data-max="{max(v for _, v in s):.6g}" fill="none" '
                 f'stroke="{PALETTE[i % len(PALETTE)]}" stroke-width="1.5" points="{" ".join(xy(t, v) for t, v in s)}"/>'
                 for i, (name, s) in enumerate(sorted(self.series.items()))]
        axis = (f'<text x="0" y="12" class="axis">{top:.3g} {escape(self.unit)}</text>'
                f'<text x="0" y="{height - 3}" class="axis">0</text>'
                f'<text x="{width}" y="{height - 3}" class="axis" text-anchor="end">'
                f'{time.strftime("%H:%M:%S", time.gmtime(t1))} UTC</text>')
        return Markup(f'<svg width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img" '
                      f'aria-label="{escape(self.title)}">{axis}{"".join(lines)}</svg>')

    def legend(self) -> list[tuple[str, str, str]]:
        """(colour, series name, its last value) in the order the lines are drawn."""
        return [(PALETTE[i % len(PALETTE)], name, f"{s[-1][1]:.3g} {self.unit}")
                for i, (name, s) in enumerate(sorted(self.series.items()))]


#: What the page charts: (id, title, unit, how it is computed from the rounds).
CHARTS: tuple[tuple[str, str, str, Callable[[Iterable[Round]], Series]], ...] = (
    ("messages-in-broker", "Messages in per broker", "msg/s",
     lambda r: rates(r, "kafka_server_brokertopicmetrics_messagesin_total", "topic", per_node=True)),
    ("messages-in-topic", "Messages in per topic", "msg/s",
     lambda r: rates(r, "kafka_server_brokertopicmetrics_messagesin_total", "topic", per_node=False)),
    ("bytes-in-broker", "Bytes in per broker", "B/s",
     lambda r: rates(r, "kafka_server_brokertopicmetrics_bytesin_total", "topic", per_node=True)),
    ("bytes-in-topic", "Bytes in per topic", "B/s",
     lambda r: rates(r, "kafka_server_brokertopicmetrics_bytesin_total", "topic", per_node=False)),
    ("bytes-out-broker", "Bytes out to consumers per broker", "B/s",
     lambda r: rates(r, "kafka_server_brokertopicmetrics_bytesout_total", "topic", per_node=True)),
    ("bytes-out-topic", "Bytes out to consumers per topic", "B/s",
     lambda r: rates(r, "kafka_server_brokertopicmetrics_bytesout_total", "topic", per_node=False)),
    ("replication-bytes-out-broker", "Bytes out to follower replicas per broker", "B/s",
     lambda r: rates(r, "kafka_server_brokertopicmetrics_replicationbytesout_total", "topic", per_node=True)),
    ("request-latency", "Request latency per node (mean of every request)", "ms",
     lambda r: means(r, "kafka_network_requestmetrics_total_time_seconds")),
    ("request-latency-type", "Request latency per request type (mean over every node)", "ms",
     lambda r: means(r, "kafka_network_requestmetrics_total_time_seconds", by="request")),
    ("event-queue-size", "Controller event queue per controller (writes waiting for their turn or being built)",
     "writes", lambda r: values(r, "kafka_controller_controllereventmanager_eventqueuesize")),
    ("event-queue-time", "Controller event queue time per controller (mean wait from a write's arrival to its build)",
     "ms", lambda r: means(r, "kafka_controller_controllereventmanager_event_queue_time_seconds")),
    ("commit-latency", "Raft commit latency per controller (mean)", "ms",
     lambda r: means(r, "kafka_server_raftmetrics_commit_latency_seconds")),
)


async def charts_page(request: Request) -> Response:
    scraper: Scraper | None = request.app.state.scraper
    charts = [Chart(id_, title, unit, compute(list(scraper.rounds))) for id_, title, unit, compute in CHARTS] \
        if scraper is not None else []
    return render(request, "charts.html", scraper=scraper, charts=charts,
                  problems=sorted(scraper.problems.items()) if scraper is not None else [])
