"""Transactions' cost (issue 28): librdkafka's transactional producer against its idempotent
producer, and read_committed against read_uncommitted consumers, in the same run on the same
three-broker cluster (replication factor 3).

    python -m bench.transactions --seconds 5 --rounds 2 --value 256 --partitions 6

JSON lines (``phase``):
- ``produce``, one per round and mode, the modes alternating (idempotent, transactional,
  idempotent, ...) so that load from elsewhere on the machine falls on both alike: acks=all,
  linger.ms=5, ``--value``-byte records for ``--seconds``; ``transactional`` commits every
  100 ms (``--commit-ms``). Messages/s and MB/s acknowledged (committed, for transactions);
  for transactions also ``cycle_ms`` (the seconds per transaction) and ``commit_call_ms``
  (the median time in ``commit_transaction``: the flush of the records in flight, acks=all,
  then EndTxn);
- ``consume``, alternating too: everything the transactional rounds committed, read from the
  beginning by an assigned (group-less) consumer with ``isolation.level`` read_committed or
  read_uncommitted: messages/s (the markers are skipped by both);
- ``summary``: the medians' ratios, transactional / idempotent produce (target >= 0.8) and
  read_committed / read_uncommitted consume (target >= 0.9), with ``met`` for each;
- ``logs``: WARNING/ERROR/Traceback lines in the servers' logs during the run.

The benchmark, 3 controllers and 3 brokers share this machine's cores (and whatever else runs
on it), which bounds what is measured here.
"""
from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaError, Message, Producer, TopicPartition


from .broker import json_line
from .common import emit, three_brokers
from .kafka_clients import create_topics, stop_cluster

LINGER_MS = 5
TARGETS = {"produce": 0.8, "consume": 0.9}


def produce(bootstrap: str, topic: str, args: argparse.Namespace, transactional_id: str | None) -> dict[str, Any]:
    """One round: an idempotent producer, or a transactional one committing every
    ``--commit-ms``; what was acknowledged (and committed) per second."""
    conf = {"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True, "linger.ms": LINGER_MS}
    if transactional_id:
        conf["transactional.id"] = transactional_id
    p = Producer(conf)
    values = [json_line(i, args.value) for i in range(1024)]
    acked = failed = 0

    def delivered(err: KafkaError | None, _msg: Message) -> None:
        nonlocal acked, failed
        if err is None:
            acked += 1
        else:
            failed += 1

    def send(n: int) -> None:
        for i in range(n):
            while True:
                try:
                    p.produce(topic, values[i % len(values)], on_delivery=delivered)
                    break
                except BufferError:
                    p.poll(0.005)
        p.poll(0)

    if transactional_id:
        p.init_transactions(60)
    transactions = 0
    commits: list[float] = []  # seconds in commit_transaction: the flush of what is in flight, then EndTxn
    start = time.perf_counter()
    end = start + args.seconds
    while time.perf_counter() < end:
        if transactional_id:
            p.begin_transaction()
            until = min(end, time.perf_counter() + args.commit_ms / 1000)
            while time.perf_counter() < until:
                send(200)
            t = time.perf_counter()
            p.commit_transaction(60)
            commits.append(time.perf_counter() - t)
            transactions += 1
        else:
            send(200)
    p.flush(60)
    elapsed = time.perf_counter() - start
    mode = "transactional" if transactional_id else "idempotent"
    return {"phase": "produce", "mode": mode, "messages": acked, "failed": failed,
            "msgs_per_s": round(acked / elapsed), "MBps": round(acked * args.value / elapsed / 1e6, 2),
            "transactions": transactions, "commit_ms": args.commit_ms if transactional_id else None,
            "cycle_ms": round(elapsed / transactions * 1000) if transactions else None,
            "commit_call_ms": round(statistics.median(commits) * 1000) if commits else None,
            "acks": "all", "replication_factor": 3, "linger_ms": LINGER_MS, "value_bytes": args.value,
            "partitions": args.partitions}


def consume(bootstrap: str, topic: str, partitions: int, expected: int, isolation: str) -> dict[str, Any]:
    """Read ``expected`` records from the beginning of every partition; records per second
    from the first record to the last."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{isolation}", "enable.auto.commit": False,
                  "isolation.level": isolation, "auto.offset.reset": "earliest"})
    c.assign([TopicPartition(topic, i, 0) for i in range(partitions)])
    n = errors = 0
    begin = time.perf_counter()
    first = last = 0.0
    try:
        while n < expected and time.perf_counter() - begin < 120:
            for m in c.consume(num_messages=10000, timeout=0.5):
                if m.error() is not None:
                    errors += 1
                    continue
                n += 1
            if n:
                last = time.perf_counter()
                first = first or last
    finally:
        c.close()
    elapsed = last - first
    return {"phase": "consume", "isolation_level": isolation, "messages": n, "expected": expected,
            "complete": n == expected, "errors": errors, "msgs_per_s": round(n / elapsed) if elapsed else 0}


def run(args: argparse.Namespace) -> None:
    base = Path(tempfile.mkdtemp(prefix="txnbench"))
    cluster = three_brokers(base)
    cluster.start()
    try:
        asyncio.run(cluster.wait_for_brokers(timeout=90))
        kafka = cluster.kafka_bootstrap_servers
        topics = {"idempotent": "bench-idempotent", "transactional": "bench-transactional"}
        create_topics(kafka, list(topics.values()), args.partitions)
        rates: dict[str, list[int]] = {"idempotent": [], "transactional": [],
                                       "read_committed": [], "read_uncommitted": []}
        committed = 0
        for r in range(args.rounds):
            for mode in ("idempotent", "transactional"):
                row = produce(kafka, topics[mode], args, f"bench-txn-{r}" if mode == "transactional" else None)
                emit({**row, "round": r})
                rates[mode].append(row["msgs_per_s"])
                committed += row["messages"] if mode == "transactional" else 0
        for r in range(args.rounds):
            for isolation in ("read_uncommitted", "read_committed"):
                row = consume(kafka, topics["transactional"], args.partitions, committed, isolation)
                emit({**row, "round": r})
                rates[isolation].append(row["msgs_per_s"])
        produce_ratio = _ratio(rates["transactional"], rates["idempotent"])
        consume_ratio = _ratio(rates["read_committed"], rates["read_uncommitted"])
        emit({"phase": "summary", "transactional_over_idempotent": produce_ratio,
              "target_produce_ratio": TARGETS["produce"], "produce_met": produce_ratio >= TARGETS["produce"],
              "read_committed_over_read_uncommitted": consume_ratio, "target_consume_ratio": TARGETS["consume"],
              "consume_met": consume_ratio >= TARGETS["consume"], "rounds": args.rounds})
    finally:
        stop_cluster(cluster, base, args.keep)


def _ratio(a: list[int], b: list[int]) -> float:
    return round(statistics.median(a) / statistics.median(b), 3) if a and b and statistics.median(b) else 0.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=10, help="seconds of producing per round and mode")
    ap.add_argument("--rounds", type=int, default=3, help="rounds of each mode, alternating")
    ap.add_argument("--commit-ms", type=int, default=100, help="a transaction's length")
    ap.add_argument("--value", type=int, default=256, help="value bytes")
    ap.add_argument("--partitions", type=int, default=6)
    ap.add_argument("--keep", action="store_true", help="keep the cluster's directory (logs, data)")
    run(ap.parse_args())


if __name__ == "__main__":
    main()
