"""A stock Kafka client against the brokers' Kafka listener, next to our own client over gRPC:
produce and consume throughput, in the same run, each client on a three-broker cluster of its
own (replication factor 3, started afresh: ``client_phases``), for the same workload.

    python -m bench.kafka_clients --seconds 10 --value 256 --partitions 6

Why: the Kafka listener is only worth having if real Kafka clients work through it, without
errors and at least as fast as our own client does over gRPC; librdkafka (confluent-kafka)
is the client most deployments use. The topics are created with confluent-kafka's AdminClient
over the Kafka listener, so that path is exercised too.

JSON lines (``system`` is ``confluent-kafka`` or ``pykraft-client``):
- ``produce``: acks=all, idempotence on, linger.ms=5, batch.size 256 KiB, a 4 MiB buffer
  (``BUFFER_BYTES``), ``--value``-byte JSON log lines (``bench.broker.json_line``), no keys,
  for ``--seconds`` or ``--messages``: messages/s and MB/s acknowledged (the clock stops after
  the final flush), delivery failures (must be 0), and p50/p99 ms from a record's being queued
  by ``produce``/``send`` to its acknowledgement, for every record (librdkafka's
  ``Message.latency()``; our producer's batch future);
- ``consume``: everything read back from the beginning, messages/s and MB/s, and whether the
  count equals what was acknowledged. confluent-kafka uses a group consumer (the group APIs
  over the Kafka listener; the clock starts at its first record, ``join_s`` is the time before
  it), with librdkafka's defaults unless ``--consumer-config KEY=VALUE`` says otherwise; ours is
  ``bench.broker``'s catch-up consumer (every partition assigned, no group; the brokers' CPU
  counted from its first records to its last, like librdkafka's).
- ``fetch_conversion``: the broker's cost per record of answering a Kafka fetch from stored
  batches (headers packed, records untouched), beside re-encoding every record, which any
  stored record format other than Kafka's own would need (measured in this process);
- every produce and consume row: ``brokers_cpu_s`` (the three brokers' CPU during that phase;
  a group consumer's from its first record to its last, not its join nor its close), ``brokers_cpu_us_per_msg``,
  ``brokers_cpu_s_per_MB`` (for a produce: the leader's append and both followers' copies) and
  ``msgs_per_broker_cpu_s`` (messages per second of the brokers' CPU: throughput per core, as
  issue 31 asks for it); ``client_cpu_s`` and ``client_cpu_us_per_msg`` (the client's process:
  librdkafka's threads and the Python loop calling it, our producer, or our consumer's own
  process while it reads), and ``brokers_cores`` / ``client_cores`` (CPU seconds per second of
  the phase): a phase whose client is near one core is bounded by the client, not the brokers;
- ``logs``: WARNING/ERROR/Traceback lines in the controllers' and brokers' logs during the run.

``--base COMMIT --rounds N`` runs all of it against ``COMMIT``'s servers and clients and this
tree's in turn, N times each, with this tree's harness (``bench/``) on both sides, and ends with
one ``summary`` row per system and phase: medians and paired ratios (this / base) of
throughput, p99, the brokers' CPU per message and per MB, messages per broker-CPU second and
the client's CPU per message (``compare``); ``--broker-config KEY=VALUE`` sets a broker key
(with ``--base``, for this tree's runs only; ``--cluster-config KEY=VALUE`` for both trees').

``--requests`` (issue 31, our client's produce per request): the brokers serve their
Prometheus metrics, and each produce row also carries ``produce_requests`` (answered by the
three brokers, from their request metrics), ``records_per_request``,
``follower_fetches_per_request`` (Fetch requests answered during the phase, per Produce
request), ``batches_per_request`` (librdkafka's statistics or our producer's metrics) and
``in_flight_mean`` (Produce requests awaiting an answer, sampled every 10 ms: librdkafka's
``waitresp_cnt``, our producer's count), so the two clients' requests compare in one cluster.

``--threads`` (issue 31, the brokers' storage CPU): each produce and consume row also carries
``brokers_threads``, the three brokers' CPU split by thread (the event loop, RocksDB's
background flushes and compactions, executor threads, gRPC's), user and system, per MB
(``with_threads``).

``--windows SECONDS`` (issue 31, long produce runs): each produce row also carries ``windows``,
one entry per ``SECONDS`` of the phase (``ProduceWindows``): the messages acknowledged in it,
the three brokers' CPU per MB of them split by thread group (as ``--threads``), the brokers'
resident memory at its end and, with ``--requests``, the records per Produce request, so that a
cost that grows as the log grows shows where it grows. ``--clients confluent`` (or
``pykraft``) runs one client's phases only.

Each row carries the issue's targets (``target_produce_msgs_per_s``,
``target_consume_msgs_per_s``). The benchmark, 3 controllers and 3 brokers share this
machine's cores, which bounds what is measured here.
"""
from __future__ import annotations

import argparse
import asyncio
import inspect
import itertools
import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from collections.abc import Callable
from typing import Any

from confluent_kafka import Consumer, KafkaError, Message, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from kraft.dev_quorum import DevQuorum, consecutive_ports
from protos import broker_pb2 as pb
from common.tls import TLSConfig

from .broker import MiB, _cpu_seconds, _pct, json_line
from .common import REPO, emit, thread_cpu, thread_cpu_delta, three_brokers

TARGETS = {"target_produce_msgs_per_s": 50000, "target_consume_msgs_per_s": 100000}
BATCH_SIZE, LINGER_MS = 262144, 5
#: Both producers' buffer: flat out, a record waits behind a full buffer (Little's law), so the
#: produce latency mostly measures the buffer's size; the same size on both sides compares.
BUFFER_BYTES = 4 * MiB


def _values(size: int) -> list[bytes]:
    return [json_line(i, size) for i in range(1024)]


def _row(system: str, phase: str, n: int, nbytes: int, elapsed: float, **extra: Any) -> dict[str, Any]:
    return {"system": system, "phase": phase, "messages": n,
            "msgs_per_s": round(n / elapsed) if elapsed else 0,
            "MBps": round(nbytes / elapsed / 1e6, 2) if elapsed else 0, **extra, **TARGETS}


def _produce_row(system: str, acked: int, failed: int, elapsed: float, lat: list[float],
                 args: argparse.Namespace) -> dict[str, Any]:
    return _row(system, "produce", acked, acked * args.value, elapsed, failed=failed,
                p50_ms=_pct(lat, 0.5), p99_ms=_pct(lat, 0.99), acks="all", idempotence=True, linger_ms=LINGER_MS,
                batch_size=BATCH_SIZE, buffer_bytes=BUFFER_BYTES, value_bytes=args.value, partitions=args.partitions,
                replication_factor=3)


def _step(args: argparse.Namespace, start: float, sent: int) -> int:
    """How many records to send next (0: done): ``--messages`` in all, or for ``--seconds``."""
    if args.messages:
        return min(200, args.messages - sent)
    return 200 if time.perf_counter() - start < args.seconds else 0


# -- confluent-kafka over the Kafka listener ----------------------------------------------------

def create_topics(bootstrap: str, names: list[str], partitions: int) -> None:
    """Create the topics with the AdminClient, then wait until every partition has a leader."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(n, partitions, 3) for n in names], operation_timeout=30).values():
        f.result(timeout=60)
    deadline = time.monotonic() + 60
    for name in names:
        while True:
            t = admin.list_topics(name, timeout=10).topics[name]
            if t.error is None and len(t.partitions) == partitions and all(
                    p.leader >= 0 and len(p.isrs) == 3 for p in t.partitions.values()):
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"{name}: partitions without a leader or a full ISR: {t.partitions}")
            time.sleep(0.2)


def confluent_produce(bootstrap: str, topic: str, args: argparse.Namespace,
                      security: dict[str, str] | None = None,
                      windows: ProduceWindows | None = None) -> dict[str, Any]:
    """``security``: librdkafka's TLS settings (bench.security); ``windows``: counts this
    phase's acknowledged messages per window (``--windows``)."""
    lat: list[float] = []
    errors: list[str] = []
    requests = RequestStats() if getattr(args, "requests", False) else None

    def delivered(err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            errors.append(str(err))
        else:
            lat.append(msg.latency() or 0.0)
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                  "linger.ms": LINGER_MS, "batch.size": BATCH_SIZE, "queue.buffering.max.kbytes": BUFFER_BYTES // 1024,
                  "on_delivery": delivered, **(security or {}), **(requests.config() if requests else {})})
    values = _values(args.value)
    sent = 0
    if windows is not None:
        windows.start(lambda: len(lat))
    start = time.perf_counter()
    while step := _step(args, start, sent):
        for k in range(step):
            while True:
                try:
                    p.produce(topic, values[(sent + k) & 1023])
                    break
                except BufferError:  # the buffer is full: serve delivery callbacks until there is room
                    p.poll(0.005)
        sent += step
        p.poll(0)
    left = p.flush(120)
    elapsed = time.perf_counter() - start
    row = _produce_row("confluent-kafka", len(lat), len(errors) + left, elapsed, lat, args)
    if windows is not None:
        row["windows"] = windows.stop()
    if errors:
        row["first_error"] = errors[0]
    if requests:
        p.poll(0.3)  # the last statistics, with the final requests counted
        row.update(requests.figures())
    return row


class RequestStats:
    """librdkafka's own count of its Produce requests and batches and of its requests awaiting
    an answer, from its statistics (every 10 ms; ``--requests``). A topic's ``batchcnt`` is a
    window of the batches made since the previous statistics: their counts add up."""

    def __init__(self) -> None:
        self.last: dict[str, Any] = {}
        self.waiting: list[int] = []
        self.batches = 0

    def config(self) -> dict[str, Any]:
        return {"statistics.interval.ms": 10, "stats_cb": self._stats}

    def _stats(self, text: str) -> None:
        self.last = json.loads(text)
        self.waiting.append(sum(b.get("waitresp_cnt", 0) for b in self.last["brokers"].values()
                                if b.get("nodeid", -1) >= 0))
        self.batches += sum(t.get("batchcnt", {}).get("cnt", 0) for t in self.last.get("topics", {}).values())

    def figures(self) -> dict[str, Any]:
        requests = sum(b.get("req", {}).get("Produce", 0) for b in self.last.get("brokers", {}).values()
                       if b.get("nodeid", -1) >= 0)
        return {"client_produce_requests": requests,
                "batches_per_request": round(self.batches / requests, 2) if requests else None,
                "in_flight_mean": round(statistics.fmean(self.waiting), 2) if self.waiting else None}


def confluent_consume(bootstrap: str, topic: str, expected: int, value: int,
                      security: dict[str, str] | None = None, config: dict[str, str] | None = None,
                      on_first: Callable[[], None] | None = None,
                      on_last: Callable[[], None] | None = None) -> dict[str, Any]:
    """``security``: librdkafka's TLS and SASL settings (bench.security); ``config``: more of
    the consumer's settings (``--consumer-config``); ``on_first`` is called as the first
    records arrive (the group joined), where the clock starts, ``on_last`` after the last
    record, before the consumer closes (its commit and leave). Each poll asks for no more than
    what is left, so that the last one returns with the last record rather than at its timeout."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{topic}-readers", "auto.offset.reset": "earliest",
                  "enable.auto.commit": True, **(security or {}), **(config or {})})
    c.subscribe([topic])
    n = size = 0
    errors: list[str] = []
    begin = time.perf_counter()
    first = idle = 0.0
    try:
        while n < expected:
            now = time.perf_counter()
            if (first and now - idle > 10) or now - begin > 120:
                break  # nothing for 10 s after the first record, or 2 minutes in all
            got = c.consume(num_messages=min(10000, expected - n), timeout=0.05)
            if got and not first:
                first = now  # this poll's start: it waited at most its timeout for them
                if on_first is not None:
                    on_first()
            for m in got:
                if m.error() is not None:
                    errors.append(str(m.error()))
                    continue
                n += 1
                size += len(m.value() or b"")
            if got:
                idle = time.perf_counter()
        if n >= expected and on_last is not None:
            on_last()
    finally:
        c.close()
    elapsed = idle - first if first else 0.0
    row = _row("confluent-kafka", "consume", n, size, elapsed, expected=expected, complete=n == expected,
               join_s=round(first - begin, 2) if first else None, errors=len(errors))
    if errors:
        row["first_error"] = errors[0]
    return row


# -- our client over gRPC ---------------------------------------------------------------------

async def pykraft_produce(bootstrap: str, topic: str, args: argparse.Namespace,
                          tls: TLSConfig | None = None, windows: ProduceWindows | None = None) -> dict[str, Any]:
    """bench.broker's producer loop, plus a latency per record: the send times are kept per
    batch and resolved by one callback when the batch's answer comes. ``tls``: bench.security;
    ``windows``: as confluent_produce's."""
    from clients import Producer as OurProducer
    from clients.accumulator import RecordFuture

    lat: list[float] = []
    waiting: dict[Any, list[float]] = {}

    def answered(fut: RecordFuture) -> None:
        now = time.perf_counter()
        times = waiting.pop(fut.batch, [])
        if fut.exception() is None:
            lat.extend(now - t for t in times)
    values = _values(args.value)
    sent = 0
    async with OurProducer(bootstrap, acks="all", batch_size=BATCH_SIZE, linger_ms=LINGER_MS,
                           buffer_memory=BUFFER_BYTES, enable_idempotence=True, tls=tls) as p:
        send, clock = p.send, time.perf_counter
        in_flight: list[int] = []
        sampler = asyncio.get_running_loop().create_task(_sample_in_flight(p, in_flight)) \
            if getattr(args, "requests", False) else None
        if windows is not None:
            windows.start(lambda: len(lat))
        start = clock()
        while step := _step(args, start, sent):
            for k in range(step):
                fut = await send(topic, values[(sent + k) & 1023])
                t = clock()  # queued (a wait for buffer space is not counted, as librdkafka's latency())
                times = waiting.get(fut.batch)
                if times is None:
                    times = waiting[fut.batch] = []
                    fut.add_done_callback(answered)
                times.append(t)
            sent += step
            await asyncio.sleep(0)
        await p.flush()
        elapsed = clock() - start
        row = _produce_row("pykraft-client", p.metrics["record-send-total"], p.metrics["record-error-total"],
                           elapsed, lat, args)
        if windows is not None:
            row["windows"] = windows.stop()
        if sampler is not None:
            sampler.cancel()
            requests = p.metrics["request-total"]
            row.update(client_produce_requests=requests,
                       batches_per_request=round(p.metrics["batch-total"] / requests, 2) if requests else None,
                       in_flight_mean=round(statistics.fmean(in_flight), 2) if in_flight else None)
        return row


async def _sample_in_flight(p: Any, out: list[int]) -> None:
    """Our producer's Produce requests awaiting an answer, every 10 ms (``--requests``)."""
    while True:
        out.append(sum(p._inflight.values()))
        await asyncio.sleep(0.01)


def pykraft_consume(bootstrap: str, topic: str, expected: int, value: int,
                    on_first: Callable[[], None] | None = None) -> dict[str, Any]:
    """bench.broker's catch-up consumer, in its own process as bench.broker runs it, reading
    ``expected`` records; ``on_first`` is called when it reports its first records, where the
    clock starts (as confluent_consume's: the process's start and its group's join are not
    what is measured, nor a wait for records after the last)."""
    with tempfile.TemporaryFile("w+") as err, \
            subprocess.Popen([sys.executable, "-m", "bench.broker", "--role", "catch-up", "--bootstrap", bootstrap,
                              "--topic", topic, "--value", str(value), "--expected", str(expected)],
                             cwd=REPO, stdout=subprocess.PIPE, stderr=err, text=True) as p:
        timer = threading.Timer(300, p.kill)
        timer.start()
        try:
            lines = []
            for line in p.stdout or ():
                if line.startswith('{"first"') and on_first is not None:
                    on_first()
                lines.append(line)
        finally:
            timer.cancel()
        p.wait()
        err.seek(0)
        if p.returncode or not lines:
            raise RuntimeError(f"the catch-up consumer failed: {err.read().strip()[-2000:]}")
    c = json.loads(lines[-1])
    return _row("pykraft-client", "consume", c["consumed"], c["bytes"], c["elapsed"], expected=expected,
                complete=c["consumed"] == expected, client_cpu_s=c["cpu_s"])


# -- the run ------------------------------------------------------------------------------------

_NOTEWORTHY = re.compile(r" (WARNING|ERROR|CRITICAL) |Traceback")


def fetch_conversion(value: int, batches: int = 200, records: int = 500) -> dict[str, Any]:
    """What a Kafka fetch costs the broker per record, in one process: stored batches turned
    into Kafka's wire form as done here (pack each 61-byte header in front of the stored
    records), beside what it would cost if the stored records were in any other encoding
    (decode every record, re-encode it Kafka's way, recompute the CRC)."""
    from brokerd.kafka.batches import stored_to_wire
    from clients.records import batch_crc, build_batch, decode_records, encode_record, frame

    payloads = _values(value)
    stored = b"".join(frame(build_batch([(None, payloads[i % len(payloads)], 0, ()) for i in range(records)])
                            .SerializeToString()) for _ in range(batches))
    n = batches * records
    start = time.perf_counter()
    stored_to_wire(stored)
    header_only = time.perf_counter() - start
    start = time.perf_counter()
    for b in pb.RecordBatchSet.FromString(stored).batches:
        b.records = b"".join(encode_record(*r) for r in decode_records(b.records, b.record_count, "bench"))
        b.crc = batch_crc(b)
    re_encoded = time.perf_counter() - start
    return {"system": "brokerd", "phase": "fetch_conversion", "records": n, "value_bytes": value,
            "header_only_us_per_record": round(header_only / n * 1e6, 3),
            "re_encode_us_per_record": round(re_encoded / n * 1e6, 3),
            "ratio": round(re_encoded / header_only, 1)}


def _own_cpu() -> float:
    """This process's CPU (user + system, every thread: librdkafka's too)."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


class PhaseCpu:
    """The CPU (user + system) a phase cost the three brokers and the client, per message and
    per MB: what bounds the throughput when the cores are shared, and far less noisy than it on
    a busy machine. A produce's figure covers the leader's append and both followers' copies.
    A row that carries ``client_cpu_s`` (a client in a process of its own) keeps it; otherwise
    the client is this process. A phase may ``restart`` the count (a group consumer at its
    first record: its join is not what is measured) and ``stop`` it (the same consumer at its
    last record: nor is its close)."""

    def __init__(self, cluster: DevQuorum, threads: bool = False) -> None:
        self.pids = [p.pid for p in cluster.broker_procs.values()]
        self.threads = threads
        self.restart()

    def _brokers(self) -> float:
        return sum(_cpu_seconds(p) for p in self.pids)

    def _threads(self) -> list[dict[str, tuple[float, float]]]:
        return [thread_cpu(p) for p in self.pids] if self.threads else []

    def _now(self) -> tuple[float, float, float, list[dict[str, tuple[float, float]]]]:
        return self._brokers(), _own_cpu(), time.perf_counter(), self._threads()

    def restart(self) -> None:
        self.brokers, self.client, self.start, self.by_thread = self._now()
        self.end: tuple[float, float, float, list[dict[str, tuple[float, float]]]] | None = None

    def stop(self) -> None:
        """End the count before the phase returns. A group consumer's close commits its offsets
        and leaves the group (about 40-80 ms of the brokers' CPU the first time in a broker
        process, docs/brokers.md "librdkafka's consume per broker core"): once per consumer,
        not per message read, as its join is."""
        self.end = self._now()

    def of(self, phase: Callable[[], dict[str, Any]], value: int) -> dict[str, Any]:
        self.restart()
        row = phase()
        brokers, own, now, threads = self.end or self._now()
        client = row.get("client_cpu_s", own - self.client)
        by_thread = [thread_cpu_delta(b, a) for b, a in zip(self.by_thread, threads, strict=True)]
        row = with_cpu(row, brokers - self.brokers, client, now - self.start, value)
        return with_threads(row, by_thread, value) if self.threads else row


def with_cpu(row: dict[str, Any], brokers: float, client: float, wall: float, value: int) -> dict[str, Any]:
    """``row`` with the CPU figures of a phase that took ``wall`` seconds: ``brokers`` and
    ``client`` CPU seconds."""
    n, mb = max(row["messages"], 1), max(row["messages"] * value / 1e6, 1e-9)
    wall = max(wall, 1e-9)
    return {**row, "brokers_cpu_s": round(brokers, 2), "brokers_cpu_us_per_msg": round(brokers / n * 1e6, 2),
            "brokers_cpu_s_per_MB": round(brokers / mb, 3),
            "msgs_per_broker_cpu_s": round(row["messages"] / brokers) if brokers > 0 else None,
            "client_cpu_s": round(client, 2), "client_cpu_us_per_msg": round(client / n * 1e6, 2),
            "brokers_cores": round(brokers / wall, 2), "client_cores": round(client / wall, 2)}


def with_threads(row: dict[str, Any], by_thread: list[dict[str, tuple[float, float]]], value: int) -> dict[str, Any]:
    """``row`` with ``brokers_threads`` (``--threads``): the three brokers' CPU per thread group
    (``bench.common.thread_cpu``: ``main`` is the event loop, ``rocksdb:low`` / ``rocksdb:high``
    RocksDB's compactions and flushes, ``python`` executor threads such as ``log-flush``'s,
    gRPC's its own), added up over the brokers, as user and system ms per MB of the phase's
    messages, largest first; ``per_broker_cpu_s``: each broker's total of its threads."""
    mb = max(row["messages"] * value / 1e6, 1e-9)
    total: dict[str, list[float]] = {}
    for broker in by_thread:
        for name, (user, system) in broker.items():
            t = total.setdefault(name, [0.0, 0.0])
            t[0] += user
            t[1] += system
    groups = {name: {"user_ms_per_MB": round(u / mb * 1e3, 3), "sys_ms_per_MB": round(s / mb * 1e3, 3),
                     "cpu_s": round(u + s, 2)}
              for name, (u, s) in sorted(total.items(), key=lambda kv: -sum(kv[1])) if u + s > 0}
    return {**row, "brokers_threads": groups,
            "per_broker_cpu_s": [round(sum(u + s for u, s in b.values()), 2) for b in by_thread]}


class ProduceWindows:
    """A produce phase's cost window by window (``--windows``): every ``seconds`` a thread
    reads the brokers' CPU per thread group (``bench.common.thread_cpu``), their resident
    memory and the messages acknowledged so far (``start``'s ``acked``), and, with the brokers'
    metrics, the Produce requests they answered; ``stop`` returns one entry per window
    (``window_entry``). Why: a cost that grows as the log grows (RocksDB's compactions, a
    structure scanned per request, Python's collector over a growing heap) is averaged away in
    a phase's total."""

    def __init__(self, cluster: DevQuorum, seconds: float, value: int, requests: bool = False) -> None:
        self.pids = [p.pid for p in cluster.broker_procs.values()]
        self.cluster, self.seconds, self.value, self.requests = cluster, seconds, value, requests
        self.samples: list[dict[str, Any]] = []
        self._done = threading.Event()
        self._thread: threading.Thread | None = None

    def _sample(self, acked: Callable[[], int]) -> dict[str, Any]:
        from .common import request_counts
        threads: dict[str, tuple[float, float]] = {}
        for pid in self.pids:
            for name, (user, system) in thread_cpu(pid).items():
                u, s = threads.get(name, (0.0, 0.0))
                threads[name] = (u + user, s + system)
        return {"t": time.perf_counter(), "acked": acked(), "threads": threads, "client": _own_cpu(),
                "machine": machine_busy_seconds(), "rss_MB": [rss_mb(pid) for pid in self.pids],
                "produce_requests": request_counts(self.cluster, "Produce") if self.requests else None}

    def start(self, acked: Callable[[], int]) -> None:
        self.samples = [self._sample(acked)]

        def run() -> None:
            while not self._done.wait(self.seconds):
                self.samples.append(self._sample(acked))
            last = self._sample(acked)
            if len(self.samples) > 1 and last["t"] - self.samples[-1]["t"] < self.seconds / 2:
                self.samples[-1] = last  # a short tail joins the window before it
            else:
                self.samples.append(last)
        self._thread = threading.Thread(target=run, name="produce-windows", daemon=True)
        self._thread.start()

    def stop(self) -> list[dict[str, Any]]:
        self._done.set()
        if self._thread is not None:
            self._thread.join()
        return [window_entry(a, b, self.value) for a, b in itertools.pairwise(self.samples)]


def machine_busy_seconds() -> float:
    """The CPU seconds every process of the machine has spent, all cores (/proc/stat's first
    line less idle and iowait): with the phase's own, how busy the machine was besides."""
    fields = [int(f) for f in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:8]]
    return (sum(fields) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")


def rss_mb(pid: int) -> float:
    """A process's resident memory in MB (/proc/PID/status's VmRSS; 0 once it has ended)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return round(int(line.split()[1]) / 1024, 1)
    except FileNotFoundError:
        pass
    return 0.0


def window_entry(a: dict[str, Any], b: dict[str, Any], value: int) -> dict[str, Any]:
    """One window between two ``ProduceWindows`` samples: its length ``s``, the messages
    acknowledged in it, the brokers' CPU ms per MB of them in all and per thread group, the
    client's and the rest of the machine's cores (CPU seconds per second: what else ran),
    each broker's resident memory at its end and, with the request counts, the records and the
    brokers' CPU ms per Produce request."""
    msgs = b["acked"] - a["acked"]
    mb = max(msgs * value / 1e6, 1e-9)
    wall = max(b["t"] - a["t"], 1e-9)
    delta = thread_cpu_delta(a["threads"], b["threads"])
    total = sum(u + s for u, s in delta.values())
    client = b["client"] - a["client"]
    entry: dict[str, Any] = {
        "s": round(wall, 2), "msgs": msgs, "MBps": round(mb / wall, 2),
        "brokers_ms_per_MB": round(total / mb * 1e3, 1),
        "by_thread_ms_per_MB": {name: round((u + s) / mb * 1e3, 1)
                                for name, (u, s) in sorted(delta.items(), key=lambda kv: -sum(kv[1]))
                                if u + s >= 0.01},
        "brokers_cores": round(total / wall, 2), "client_cores": round(client / wall, 2),
        "others_cores": round((b["machine"] - a["machine"] - total - client) / wall, 2), "rss_MB": b["rss_MB"]}
    if a.get("produce_requests") is not None and b.get("produce_requests") is not None:
        requests = b["produce_requests"] - a["produce_requests"]
        entry["records_per_request"] = round(msgs / requests) if requests else None
        entry["brokers_ms_per_request"] = round(total / requests * 1e3, 2) if requests else None
    return entry


def log_summary(base: Path) -> dict[str, Any]:
    lines = [f"{f.name}: {line.strip()}" for f in sorted(base.glob("*.log"))
             for line in f.read_text(errors="replace").splitlines() if _NOTEWORTHY.search(line)]
    return {"system": "cluster", "phase": "logs", "noteworthy_lines": len(lines), "first": lines[:5]}


def run(args: argparse.Namespace) -> None:
    """Each client's produce, then its consume, on a cluster of its own (``client_phases``)."""
    emit(fetch_conversion(args.value))
    consumer = dict(kv.split("=", 1) for kv in args.consumer_config)

    def windows(cluster: DevQuorum) -> ProduceWindows | None:
        return ProduceWindows(cluster, args.windows, args.value, args.requests) if args.windows else None

    def confluent(cluster: DevQuorum, cpu: PhaseCpu, counted: Callable) -> None:
        kafka, topic = cluster.kafka_bootstrap_servers, "bench-confluent"
        create_topics(kafka, [topic], args.partitions)
        w = windows(cluster)
        row = counted(lambda: cpu.of(lambda: confluent_produce(kafka, topic, args, windows=w), args.value))
        emit(row)
        emit(cpu.of(lambda: confluent_consume(kafka, topic, row["messages"], args.value,
                                              config=consumer, on_first=cpu.restart, on_last=cpu.stop), args.value))

    def pykraft(cluster: DevQuorum, cpu: PhaseCpu, counted: Callable) -> None:
        grpc, topic = cluster.bootstrap_servers, "bench-pykraft"
        create_topics(cluster.kafka_bootstrap_servers, [topic], args.partitions)
        w = windows(cluster)
        row = counted(lambda: cpu.of(lambda: asyncio.run(pykraft_produce(grpc, topic, args, windows=w)),
                                     args.value))
        emit(row)
        emit(cpu.of(lambda: pykraft_consume(grpc, topic, row["messages"], args.value,
                                            on_first=cpu.restart), args.value))

    for name, phases in (("confluent", confluent), ("pykraft", pykraft)):
        if args.clients in ("both", name):
            client_phases(args, phases)


def client_phases(args: argparse.Namespace, phases: Callable[[DevQuorum, PhaseCpu, Callable], None]) -> None:
    """``phases`` (one client's produce and consume) on a new cluster, stopped after. Why not one
    cluster for both clients: a produce phase that starts with empty write buffers leaves its
    last RocksDB memtable unflushed (up to ``write_buffer_size``, 64 MiB, per broker), and the
    next client's produce paid for flushing it: in one cluster librdkafka's phase, always
    first, flushed one 57-60 MB memtable per broker for about 100 MB written, ours two and a
    half for 107 MB (the brokers' RocksDB LOGs, docs/brokers.md "Per core, against issue 31's
    base"). Each client now starts from the same state."""
    base = Path(tempfile.mkdtemp(prefix="kafkabench"))
    extra = dict(kv.split("=", 1) for kv in [*getattr(args, "cluster_config", []), *args.broker_config])
    cluster = three_brokers(base, extra, metrics=args.requests)
    cluster.start()
    try:
        asyncio.run(cluster.wait_for_brokers(timeout=90))
        cpu = PhaseCpu(cluster, args.threads)  # each phase is called at once, inside cpu.of
        counted = RequestCounts(cluster).of if args.requests else lambda phase: phase()
        phases(cluster, cpu, counted)
    finally:
        stop_cluster(cluster, base, args.keep)


class RequestCounts:
    """The Produce and Fetch requests the brokers answered during a produce phase, from their
    request metrics (``--requests``), read before and after the phase's CPU is counted (the
    brokers render their metrics for it)."""

    def __init__(self, cluster: DevQuorum) -> None:
        self.cluster = cluster

    def of(self, phase: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        from .common import request_counts
        produces, fetches = request_counts(self.cluster, "Produce"), request_counts(self.cluster, "Fetch")
        row = phase()
        produces = request_counts(self.cluster, "Produce") - produces
        fetches = request_counts(self.cluster, "Fetch") - fetches
        return {**row, "produce_requests": produces,
                "records_per_request": round(row["messages"] / produces) if produces else None,
                "follower_fetches_per_request": round(fetches / produces, 2) if produces else None}


def stop_cluster(cluster: DevQuorum, base: Path, keep: bool) -> None:
    """Stop it, report what its logs say, and remove its directory unless asked to keep it."""
    cluster.stop()
    emit(log_summary(base))
    if keep:
        print(f"cluster directory kept: {base}", file=sys.stderr)
    else:
        shutil.rmtree(base, ignore_errors=True)


# -- before and after in one session -------------------------------------------------------------

#: The figures compared between the base and this tree.
COMPARED = ("msgs_per_s", "p99_ms", "brokers_cpu_us_per_msg", "brokers_cpu_s_per_MB", "msgs_per_broker_cpu_s",
            "client_cpu_us_per_msg", "records_per_request", "batches_per_request", "in_flight_mean")


def base_tree(commit: str) -> Path:
    """``commit``'s files in a temporary directory, with their generated protobuf modules and
    this tree's ``bench/`` over theirs: the base's servers and clients measured by the same
    harness as this tree's (its ``bench.kafka_clients`` may predate the figures compared); a
    base older than ``kraft.dev_quorum.consecutive_ports``, which the harness imports, gets
    this tree's (a port search of the dev cluster's launcher, not of the servers)."""
    tree = Path(tempfile.mkdtemp(prefix="kafkabench-base-"))
    archive = subprocess.run(["git", "-C", str(REPO), "archive", commit], capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
    protos = [str(p.relative_to(tree)) for d in ("protos", "raft/proto", "raft/examples/kv")
              for p in sorted((tree / d).glob("*.proto"))]
    for proto in protos:
        subprocess.run([sys.executable, "-m", "grpc_tools.protoc", "-I.", "--python_out=.", "--grpc_python_out=.",
                        "--pyi_out=.", proto], cwd=tree, check=True)
    shutil.copytree(REPO / "bench", tree / "bench", dirs_exist_ok=True,
                    ignore=shutil.ignore_patterns("__pycache__"))
    quorum = tree / "kraft" / "dev_quorum.py"
    if "def consecutive_ports" not in quorum.read_text():
        # A base from before 9ab276d: the harness's port helper (kept with DevQuorum since) added
        # to its DevQuorum's module, so that this tree's bench/ imports it there.
        quorum.write_text(f"{quorum.read_text()}\n\nimport socket  # noqa: E402\n\n\n"
                          f"{inspect.getsource(consecutive_ports)}")
    return tree


def compare(args: argparse.Namespace) -> None:
    """``--base COMMIT``: the benchmark run against ``COMMIT``'s tree and this one in turn,
    ``--rounds`` times each, in one session (base, this, this, base, ...: a drift of the
    machine's load weighs on both alike); every row tagged ``tree`` (base or this) and
    ``round``, then the ``summaries``."""
    base = base_tree(args.base)
    passed = [*(["--requests"] if args.requests else []), *(["--threads"] if args.threads else []),
              *(["--windows", str(args.windows)] if args.windows else []), "--clients", args.clients,
              "--seconds", str(args.seconds),
              "--messages", str(args.messages), "--value", str(args.value), "--partitions", str(args.partitions), *(a for kv in args.consumer_config for a in ("--consumer-config", kv))]
    passed += [a for kv in args.cluster_config for a in ("--broker-config", kv)]
    ours = [a for kv in args.broker_config for a in ("--broker-config", kv)]
    try:
        rows = alternate("bench.kafka_clients", base, passed, args.rounds, ours)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    for summary in summaries(rows, args.rounds):
        emit(summary)


def alternate(module: str, base: Path, passed: list[str], rounds: int, ours: list[str] | None = None) -> list[dict[str, Any]]:
    """``python -m module`` with ``passed`` in ``base`` (a ``base_tree``) and in this tree in
    turn, ``rounds`` times each (base, this, this, base, ...: a drift of the machine's load
    weighs on both alike; ``ours``: arguments for this tree's runs only); every JSON line
    emitted and returned tagged ``tree`` (base or this) and ``round``, a failed run's last
    line of stderr emitted as its ``error``."""
    rows: list[dict[str, Any]] = []
    for r in range(rounds):
        order = [("base", base), ("this", REPO)]
        for label, tree in order if r % 2 == 0 else order[::-1]:
            out = subprocess.run([sys.executable, "-m", module, *passed, *((ours or []) if label == "this" else [])],
                                 cwd=tree, env={**os.environ, "PYTHONPATH": str(tree)}, capture_output=True, text=True)
            if out.returncode:
                emit({"tree": label, "round": r, "error": out.stderr.strip().splitlines()[-1:]})
            for line in out.stdout.splitlines():
                row = {**json.loads(line), "tree": label, "round": r}
                emit(row)
                rows.append(row)
    return rows


def summaries(rows: list[dict[str, Any]], rounds: int) -> list[dict[str, Any]]:
    """Per system and phase (produce, consume) of ``rows`` (tagged ``tree`` and ``round``), for
    each of ``COMPARED`` that both trees reported in a round: the medians of either tree and
    the median and range of the paired ratios (this / base, round by round), and how many
    rounds paired (a run that failed pairs with nothing)."""
    by = {(row["tree"], row["system"], row["phase"], row["round"]): row for row in rows if "system" in row}
    out = []
    for system, phase in sorted({(k[1], k[2]) for k in by if k[2] in ("produce", "consume")}):
        summary: dict[str, Any] = {"system": system, "phase": phase, "summary": f"this / base, {rounds} rounds"}
        for name in COMPARED:
            pairs: list[tuple[float, float]] = []
            for r in range(rounds):
                b, t = (by.get((tree, system, phase, r), {}).get(name) for tree in ("base", "this"))
                if b and t:
                    pairs.append((b, t))
            if not pairs:
                continue
            ratios = sorted(t / b for b, t in pairs)
            summary[name] = {"base": statistics.median(b for b, _ in pairs),
                             "this": statistics.median(t for _, t in pairs),
                             "paired_ratio": round(statistics.median(ratios), 2),
                             "range": [round(ratios[0], 2), round(ratios[-1], 2)], "pairs": len(pairs)}
        out.append(summary)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=10, help="seconds of producing per client")
    ap.add_argument("--messages", type=int, default=0, help="produce this many messages instead of --seconds")
    ap.add_argument("--value", type=int, default=256, help="value bytes")
    ap.add_argument("--partitions", type=int, default=6)
    ap.add_argument("--requests", action="store_true",
                    help="count Produce requests, batches and requests in flight per produce phase (the brokers "
                         "serve their metrics; with --base, the base's DevQuorum must have metrics)")
    ap.add_argument("--threads", action="store_true",
                    help="split the brokers' CPU per phase by thread (event loop, RocksDB's, gRPC's, executors')")
    ap.add_argument("--windows", type=float, default=0, metavar="SECONDS",
                    help="report each produce phase's brokers' CPU per MB, by thread, every SECONDS")
    ap.add_argument("--clients", choices=("both", "confluent", "pykraft"), default="both",
                    help="whose produce and consume to run (librdkafka's, our client's)")
    ap.add_argument("--keep", action="store_true", help="keep the cluster's directory (logs, data)")
    ap.add_argument("--base", help="a commit to compare with: its tree and this one run in turn (see compare)")
    ap.add_argument("--rounds", type=int, default=3, help="with --base: runs of each tree")
    ap.add_argument("--broker-config", action="append", default=[], metavar="KEY=VALUE",
                    help="a broker setting (with --base: for this tree's runs only), e.g. replica.fetch.protocol=kafka")
    ap.add_argument("--cluster-config", action="append", default=[], metavar="KEY=VALUE",
                    help="with --base: a broker setting for both trees' runs, e.g. log.retention.bytes=33554432")
    ap.add_argument("--consumer-config", action="append", default=[], metavar="KEY=VALUE",
                    help="a setting of librdkafka's consumer (with --base: for both trees), e.g. fetch.queue.backoff.ms=0")
    args = ap.parse_args()
    if args.base:
        compare(args)
    else:
        run(args)


if __name__ == "__main__":
    main()
