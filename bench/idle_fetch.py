"""What idle consumers cost the brokers: CPU of the three brokers while ``--consumers``
confluent-kafka consumers, each assigned every partition of a ``--partitions``-partition topic
(replication factor 3) at its end, long-poll with nothing to read (issue 31 item 3).

    python -m bench.idle_fetch --consumers 10 --partitions 1000 --seconds 10

Why: a consumer that waits for data must cost the broker little; every poll of an idle
consumer is a fetch of all its partitions that waits ``fetch.wait.max.ms`` (500) and answers
empty, so its cost is per partition and per poll. The brokers' CPU is measured twice over
``--seconds``: with no consumers (what idle replication costs: followers long-poll too) and
with the consumers polling.

One JSON line (``system`` brokerd, ``phase`` idle_fetch): ``cpu_pct_no_consumers`` and
``cpu_pct_consumers`` (the three brokers together, percent of one core), their difference
per consumer, and the fetch and metadata requests the consumers sent meanwhile (librdkafka's
statistics).
"""
from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from confluent_kafka import OFFSET_END, Consumer, TopicPartition

from kraft.dev_quorum import DevQuorum

from .broker import _cpu_seconds
from .common import emit, three_brokers
from .kafka_clients import create_topics


def _brokers_cpu(cluster: DevQuorum, seconds: float) -> float:
    """The brokers' CPU over ``seconds``, in percent of one core."""
    pids = [p.pid for p in cluster.broker_procs.values()]
    before = sum(_cpu_seconds(p) for p in pids)
    time.sleep(seconds)
    return round((sum(_cpu_seconds(p) for p in pids) - before) / seconds * 100, 1)


def _profile(cluster: DevQuorum, out: str) -> list[subprocess.Popen]:
    """py-spy on every broker (collapsed stacks, ``out``/broker-ID.txt) until interrupted."""
    Path(out).mkdir(parents=True, exist_ok=True)
    return [subprocess.Popen(["py-spy", "record", "--pid", str(p.pid), "--rate", "100", "--nonblocking", "--format",
                              "raw", "-o", f"{out}/broker-{b}.txt"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            for b, p in cluster.broker_procs.items()]


def run(args: argparse.Namespace) -> dict[str, Any]:
    base = Path(tempfile.mkdtemp(prefix="idlefetch"))
    cluster = three_brokers(base)
    cluster.start()
    consumers: list[Consumer] = []
    stop = threading.Event()
    fetches = [0] * args.consumers
    metadata = [0] * args.consumers
    try:
        asyncio.run(cluster.wait_for_brokers(timeout=90))
        kafka = cluster.kafka_bootstrap_servers
        created = time.perf_counter()
        create_topics(kafka, ["idle"], args.partitions)
        created = time.perf_counter() - created
        time.sleep(args.settle)
        no_consumers = _brokers_cpu(cluster, args.seconds)

        def stats(i: int, raw: str) -> None:
            brokers = json.loads(raw)["brokers"].values()
            fetches[i] = sum(b.get("req", {}).get("Fetch", 0) for b in brokers)
            metadata[i] = sum(b.get("req", {}).get("Metadata", 0) for b in brokers)
        for i in range(args.consumers):
            c = Consumer({"bootstrap.servers": kafka, "group.id": f"idle-{i}", "enable.auto.commit": False,
                          "statistics.interval.ms": 1000, "stats_cb": lambda raw, i=i: stats(i, raw)})
            c.assign([TopicPartition("idle", p, OFFSET_END) for p in range(args.partitions)])
            consumers.append(c)

        def poll(c: Consumer) -> None:
            while not stop.is_set():
                c.poll(0.2)
        threads = [threading.Thread(target=poll, args=(c,), daemon=True) for c in consumers]
        for t in threads:
            t.start()
        time.sleep(args.settle)  # every consumer has found its leaders and is long-polling
        sent, asked = sum(fetches), sum(metadata)
        spies = _profile(cluster, args.profile) if args.profile else []
        with_consumers = _brokers_cpu(cluster, args.seconds)
        for spy in spies:
            spy.send_signal(signal.SIGINT)  # py-spy writes its file and exits
            spy.wait(30)
        time.sleep(1.1)  # one more statistics callback
        sent, asked = sum(fetches) - sent, sum(metadata) - asked
        stop.set()
        for t in threads:
            t.join(5)
        return {"system": "brokerd", "phase": "idle_fetch", "consumers": args.consumers, "partitions": args.partitions,
                "replication_factor": 3, "seconds": args.seconds, "topic_create_s": round(created, 1),
                "cpu_pct_no_consumers": no_consumers, "cpu_pct_consumers": with_consumers,
                "cpu_pct_per_consumer": round((with_consumers - no_consumers) / max(args.consumers, 1), 2),
                "fetch_requests_per_s": round(sent / (args.seconds + 1.1), 1),
                "metadata_requests_per_s": round(asked / (args.seconds + 1.1), 1)}
    finally:
        stop.set()
        for c in consumers:
            c.close()
        cluster.stop()
        shutil.rmtree(base, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--consumers", type=int, default=10)
    ap.add_argument("--partitions", type=int, default=1000)
    ap.add_argument("--seconds", type=float, default=10, help="seconds each CPU measurement lasts")
    ap.add_argument("--settle", type=float, default=10, help="seconds to wait before each measurement (the first "
                    "Metadata answers for every partition are not idle)")
    ap.add_argument("--profile", metavar="DIR", help="py-spy the brokers while the consumers poll (DIR/broker-ID.txt)")
    emit(run(ap.parse_args()))


if __name__ == "__main__":
    main()
