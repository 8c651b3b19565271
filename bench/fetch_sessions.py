"""Incremental fetch sessions (KIP-227) against full fetches: one consumer on many partitions,
most of them idle, a few receiving a steady trickle, the way a consumer of a wide topic
mostly waits.

    python -m bench.fetch_sessions --partitions 1000 --active 10 --rate 200 --seconds 10 --rounds 2

Why: without sessions every fetch names every partition and every answer lists every
partition, so the broker parses and encodes a thousand entries to hand over a few records;
with sessions an idle partition costs nothing on the wire. kafka-python's consumer is the
client (it fetches incrementally; librdkafka and aiokafka do not), run with
``enable_incremental_fetch_sessions`` on and off against the same one-broker cluster, in the
same run, alternating, ``--rounds`` times each.

JSON lines, one per window (``sessions`` true or false): ``messages`` consumed in the
window, ``broker_cpu_s`` (user + system time of the broker process over the window),
``broker_cpu_us_per_msg``, ``fetch_requests`` (counted by the broker's request metrics) and
``broker_cpu_us_per_fetch``, and kafka-python's own averages over the window:
``request_bytes_avg`` (bytes per request sent, fetches nearly all) and ``response_bytes_per_s``.
The producer is a process of its own.

``--follower``: the same trickle on a topic of ``--partitions`` partitions, replication factor
2, every partition led by broker 101 and followed by broker 102 (issue 27 item 6's follower
half): one window per round, in which the follower copies what the trickle writes. The row
gives ``follower_cpu_us_per_msg`` and ``leader_cpu_us_per_msg`` (each broker's CPU over the
window per message replicated), ``fetches`` (the Fetch requests the leader answered, the
follower's) with each broker's CPU per fetch, and ``label`` (``--label``: which code ran, e.g. a commit). Run
it from two checkouts alternating for a before/after::

    python -m bench.fetch_sessions --follower --partitions 1000 --seconds 10 --rounds 2 --label after
"""
from __future__ import annotations

import argparse
import asyncio
import contextlib
import shutil
import tempfile
import multiprocessing
import urllib.request
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic

from kraft.dev_quorum import DevQuorum, consecutive_ports

from .common import cpu_seconds, emit, free_ports

TOPIC = "bench-fetch-sessions"
BROKER = 101


def trickle(bootstrap: str, partitions: list[int], rate: float) -> None:
    """``rate`` records a second over ``partitions``, round robin, until killed (a process of
    its own, so that the measured consumer does not share a GIL with it)."""
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks=1, linger_ms=0)
    i = 0
    start = time.monotonic()
    while True:
        producer.send(TOPIC, b"x" * 100, partition=partitions[i % len(partitions)])
        i += 1
        delay = start + i / rate - time.monotonic()
        if delay > 0:
            time.sleep(delay)


def fetch_requests(metrics_port: int) -> int:
    """Fetch requests the broker has answered (its request metrics)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10) as r:
        text = r.read().decode()
    return sum(int(float(line.rsplit(" ", 1)[1])) for line in text.splitlines()
               if line.startswith("kafka_network_requestmetrics_total_time_seconds_count") and 'request="Fetch"' in line)


def _metric(consumer: KafkaConsumer, name: str) -> float:
    return float(consumer.metrics().get("consumer-metrics", {}).get(name, 0.0) or 0.0)


def window(bootstrap: str, partitions: int, sessions: bool, seconds: float, pid: int,
           metrics_port: int) -> dict[str, Any]:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, fetch_max_wait_ms=500,
                             enable_incremental_fetch_sessions=sessions, metrics_sample_window_ms=int(seconds * 1000),
                             metrics_num_samples=2)
    try:
        consumer.assign([TopicPartition(TOPIC, p) for p in range(partitions)])
        consumer.seek_to_end()
        for _ in range(5):  # positions looked up, the first (full) fetch done
            consumer.poll(500)
        cpu0, fetches0, t0 = cpu_seconds(pid), fetch_requests(metrics_port), time.monotonic()
        n = 0
        while time.monotonic() - t0 < seconds:
            n += sum(len(rs) for rs in consumer.poll(200).values())
        elapsed = time.monotonic() - t0
        cpu = cpu_seconds(pid) - cpu0
        fetches = fetch_requests(metrics_port) - fetches0
        return {"sessions": sessions, "partitions": partitions, "seconds": round(elapsed, 1), "messages": n,
                "broker_cpu_s": round(cpu, 2), "broker_cpu_us_per_msg": round(cpu / n * 1e6) if n else None,
                "fetch_requests": fetches, "broker_cpu_us_per_fetch": round(cpu / fetches * 1e6) if fetches else None,
                "request_bytes_avg": round(_metric(consumer, "request-size-avg")),
                "response_bytes_per_s": round(_metric(consumer, "incoming-byte-rate"))}
    finally:
        consumer.close()


FOLLOWER = 102


def log_ends(metrics_port: int) -> list[int]:
    """The log end offsets of a broker's replicas of TOPIC (its metrics)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=30) as r:
        text = r.read().decode()
    return [int(float(line.rsplit(" ", 1)[1])) for line in text.splitlines()
            if line.startswith("kafka_log_log_logendoffset{") and f'topic="{TOPIC}"' in line]


def replicated(metrics_port: int) -> int:
    """The messages a broker's replicas of TOPIC hold."""
    return sum(log_ends(metrics_port))


@contextlib.contextmanager
def bench_cluster(metrics_ports: dict[int, int]) -> Iterator[DevQuorum]:
    """A dev quorum with a broker per entry of ``metrics_ports`` (its Prometheus port), up;
    stopped and its directory removed afterwards."""
    base = Path(tempfile.mkdtemp(prefix="fetchsessions"))
    cluster = DevQuorum(str(base), consecutive_ports(3 + 2 * len(metrics_ports)), brokers=len(metrics_ports),
                        broker_extra={"broker.heartbeat.interval.ms": "1000"},
                        node_extra={b: {"prometheus.listener": f"127.0.0.1:{port}"} for b, port in metrics_ports.items()})
    cluster.start()
    try:
        asyncio.run(cluster.wait_for_brokers(timeout=120))
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(base, ignore_errors=True)


@contextlib.contextmanager
def trickling(bootstrap: str, args: argparse.Namespace) -> Iterator[list[int]]:
    """A producer writing ``args.rate`` records/s over ``args.active`` evenly spread partitions
    (which it yields), killed afterwards."""
    step = max(1, args.partitions // max(1, args.active))
    active = list(range(0, args.partitions, step))[:args.active]
    producer = multiprocessing.Process(target=trickle, args=(bootstrap, active, args.rate), daemon=True)
    producer.start()
    try:
        yield active
    finally:
        producer.kill()
        producer.join()


def run_follower(args: argparse.Namespace) -> None:
    """Broker 101 leads every partition, broker 102 follows them all."""
    ports = dict(zip((BROKER, FOLLOWER), free_ports(2), strict=True))
    with bench_cluster(ports) as cluster:
        bootstrap = cluster.kafka_bootstrap_servers
        admin = KafkaAdminClient(bootstrap_servers=bootstrap)
        admin.create_topics([NewTopic(TOPIC, -1, -1, replica_assignments={
            p: [BROKER, FOLLOWER] for p in range(args.partitions)})])
        admin.close()
        deadline = time.monotonic() + 180
        while len(log_ends(ports[FOLLOWER])) < args.partitions and time.monotonic() < deadline:
            time.sleep(1)  # until every follower replica exists
        with trickling(bootstrap, args) as active:
            time.sleep(3)  # the producer connected and writing
            pids = {b: cluster.broker_procs[b].pid for b in ports}
            for _ in range(args.rounds):
                n0, f0 = replicated(ports[FOLLOWER]), fetch_requests(ports[BROKER])
                cpu0, t0 = {b: cpu_seconds(pid) for b, pid in pids.items()}, time.monotonic()
                time.sleep(args.seconds)
                cpu = {b: cpu_seconds(pid) - cpu0[b] for b, pid in pids.items()}
                elapsed = time.monotonic() - t0
                n, fetches = replicated(ports[FOLLOWER]) - n0, fetch_requests(ports[BROKER]) - f0
                emit({"label": args.label, "phase": "follower", "partitions": args.partitions, "active": len(active),
                      "rate": args.rate, "seconds": round(elapsed, 1), "messages": n,
                      "follower_cpu_s": round(cpu[FOLLOWER], 2), "leader_cpu_s": round(cpu[BROKER], 2),
                      "follower_cpu_us_per_msg": round(cpu[FOLLOWER] / n * 1e6) if n else None,
                      "leader_cpu_us_per_msg": round(cpu[BROKER] / n * 1e6) if n else None, "fetches": fetches,
                      "follower_cpu_us_per_fetch": round(cpu[FOLLOWER] / fetches * 1e6) if fetches else None,
                      "leader_cpu_us_per_fetch": round(cpu[BROKER] / fetches * 1e6) if fetches else None})


def run(args: argparse.Namespace) -> None:
    if args.follower:
        run_follower(args)
        return
    metrics_port = free_ports(1)[0]
    with bench_cluster({BROKER: metrics_port}) as cluster:
        bootstrap = cluster.kafka_bootstrap_servers
        admin = KafkaAdminClient(bootstrap_servers=bootstrap)
        admin.create_topics([NewTopic(TOPIC, args.partitions, 1)])
        admin.close()
        probe = KafkaConsumer(bootstrap_servers=bootstrap)
        deadline = time.monotonic() + 120
        while len(probe.partitions_for_topic(TOPIC) or ()) < args.partitions and time.monotonic() < deadline:
            time.sleep(0.5)
        probe.close()
        with trickling(bootstrap, args) as active:
            pid = cluster.broker_procs[BROKER].pid
            for _ in range(args.rounds):
                for sessions in (True, False):
                    emit({**window(bootstrap, args.partitions, sessions, args.seconds, pid, metrics_port),
                          "active": len(active),
                          "rate": args.rate})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--partitions", type=int, default=1000)
    ap.add_argument("--active", type=int, default=10, help="partitions that receive records")
    ap.add_argument("--rate", type=float, default=200, help="records per second over the active partitions")
    ap.add_argument("--seconds", type=float, default=10, help="length of each measured window")
    ap.add_argument("--rounds", type=int, default=2, help="windows with sessions on, then off, this many times")
    ap.add_argument("--follower", action="store_true", help="measure a follower of every partition instead")
    ap.add_argument("--label", default="", help="--follower: a name for the code measured, copied into each row")
    run(ap.parse_args())


if __name__ == "__main__":
    main()
