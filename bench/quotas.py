"""What quota accounting costs an unthrottled producer (issue 29): librdkafka, acks=all, against
a three-broker cluster (replication factor 3) with no client quota at all, and with quotas set
so high that they are never reached (``producer_byte_rate`` and ``request_percentage`` for the
default client id: every produce is counted, timed and measured, never throttled), in the same
run, the modes alternating.

    python -m bench.quotas --seconds 5 --rounds 3 --value 256 --partitions 6

JSON lines (``phase``):
- ``produce``, one per round and mode (none, quota, none, ...), so that load from elsewhere on
  the machine falls on both alike: linger.ms=5, ``--value``-byte records for ``--seconds``;
  messages/s and MB/s acknowledged, and the throttle librdkafka was told (0 expected);
- ``summary``: the medians' ratio quota / none (target >= 0.95, a cost of at most 5%), with
  ``met``, and the median of each round's own ratio (rounds alternate ABBA, so a drift of the
  machine's load over the run falls on both modes);
- ``accounting``, first, in this process: the microseconds of CPU time the broker's quota code
  adds to a produce request (timing its handler, counting its bytes and time, charging its
  response's encoding), without the cluster's noise;
- ``logs``: WARNING/ERROR/Traceback lines in the servers' logs during the run.

The benchmark, 3 controllers and 3 brokers share this machine's cores (and whatever else runs
on it): rounds are noisy, which is why several alternate and medians are compared.
"""
from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaError, Message, Producer

from metadata.client import ControllerClient
from metadata.image import ClientQuotasImage, MetadataImage
from protos import controller_pb2 as cpb

from .broker import json_line
from .common import emit, three_brokers
from .kafka_clients import create_topics, stop_cluster

LINGER_MS = 5
TARGET = 0.95
#: Never reached by one producer: a terabyte per second, and ten thousand times one thread's time.
HIGH = {"producer_byte_rate": 1e12, "request_percentage": 1e6}


async def set_quotas(bootstrap: str, on: bool) -> None:
    """Set (or remove) the high quotas of the default client id."""
    async with ControllerClient(bootstrap, timeout=30) as c:
        r = await c.alter_client_quotas(cpb.AlterClientQuotasRequest(entries=[cpb.QuotaAlteration(
            entity=[cpb.QuotaEntityPart(entity_type="client-id")],
            ops=[cpb.QuotaOp(key=k, value=v, remove=not on) for k, v in HIGH.items()])]))
        if r.results[0].error_code:
            raise SystemExit(f"Error: cannot set the quotas: {r.results[0].error_message}")


def produce(bootstrap: str, topic: str, args: argparse.Namespace, mode: str) -> dict[str, Any]:
    """One round: what was acknowledged per second, and the most throttle time seen."""
    throttles: list[float] = []
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": LINGER_MS, "client.id": "bench",
                  "throttle_cb": lambda e: throttles.append(e.throttle_time)})
    values = [json_line(i, args.value) for i in range(1024)]
    acked = failed = 0

    def delivered(err: KafkaError | None, _msg: Message) -> None:
        nonlocal acked, failed
        if err is None:
            acked += 1
        else:
            failed += 1

    start = time.perf_counter()
    end, i = start + args.seconds, 0
    while time.perf_counter() < end:
        try:
            p.produce(topic, values[i % len(values)], on_delivery=delivered)
            i += 1
        except BufferError:
            p.poll(0.005)
        if i % 200 == 0:
            p.poll(0)
    p.flush(60)
    elapsed = time.perf_counter() - start
    return {"phase": "produce", "mode": mode, "messages": acked, "failed": failed,
            "msgs_per_s": round(acked / elapsed), "MBps": round(acked * args.value / elapsed / 1e6, 2),
            "max_throttle_ms": round(max(throttles, default=0.0) * 1000), "acks": "all", "replication_factor": 3,
            "linger_ms": LINGER_MS, "value_bytes": args.value, "partitions": args.partitions}


def _quotas_of(image: MetadataImage) -> Callable[[], ClientQuotasImage]:
    """The quotas a broker on ``image`` would see (its metadata image's, fixed here)."""
    return lambda: image.client_quotas


def accounting(n: int = 20000) -> dict[str, Any]:
    """In-process, without the cluster's noise: the broker's quota work per produce request
    (KafkaThrottling's timing and counting), in microseconds, with no quota and with the high ones."""
    from brokerd.kafka.throttling import KafkaThrottling
    from brokerd.quotas import ClientQuotas
    from metadata.client_quotas import QuotaAlteration, QuotaOp, alter_quotas
    from metadata.delta import MetadataDelta
    from metadata.principal import Session

    base = MetadataImage.empty("bench")
    delta = MetadataDelta(base)
    delta.replay_batch(alter_quotas({}, [QuotaAlteration((("client-id", None),), tuple(
        QuotaOp(k, v) for k, v in HIGH.items()))])[0], 1, 1)
    images = {"none": base, "quota": delta.apply()}
    session = Session("User:ANONYMOUS", "127.0.0.1")
    batch = type("Partition", (), {"records": b"x" * 16384})()  # kio's fields the throttling reads
    request = type("Produce", (), {"topic_data": [type("Topic", (), {"partition_data": [batch]})()]})()

    async def handler() -> dict[str, Any]:
        return {"responses": []}

    async def requests(throttling: KafkaThrottling) -> None:
        for _ in range(n):  # as KafkaApis.handle does
            work = handler()
            timer = throttling.timed(0, session, "bench", work)
            answer = await (timer or work)
            throttling.after(0, request, answer, session, "bench", base, timer)
            if timer is not None:
                throttling.charge(timer, 1e-5)

    row: dict[str, Any] = {"phase": "accounting", "requests": n, "rounds": 5}
    spent: dict[str, list[float]] = {mode: [] for mode in images}
    for _ in range(5):  # CPU time, the least of 5: what the code costs, not what the machine's load adds
        for mode, image in images.items():
            throttling = KafkaThrottling(ClientQuotas(_quotas_of(image)))
            start = time.process_time()
            asyncio.run(requests(throttling))
            spent[mode].append(time.process_time() - start)
    for mode, times in spent.items():
        row[f"us_per_request_{mode}"] = round(min(times) / n * 1e6, 2)
    row["us_added_per_request"] = round(row["us_per_request_quota"] - row["us_per_request_none"], 2)
    return row


def run(args: argparse.Namespace) -> None:
    emit(accounting())
    base = Path(tempfile.mkdtemp(prefix="quotabench"))
    cluster = three_brokers(base)
    cluster.start()
    try:
        asyncio.run(cluster.wait_for_brokers(timeout=90))
        kafka = cluster.kafka_bootstrap_servers
        create_topics(kafka, ["bench-quotas"], args.partitions)
        rates: dict[str, list[int]] = {"none": [], "quota": []}
        for r in range(args.rounds):
            for mode in ("none", "quota") if r % 2 == 0 else ("quota", "none"):  # ABBA: a drift falls on both
                asyncio.run(set_quotas(cluster.bootstrap, mode == "quota"))
                create_topics(kafka, [f"bench-barrier-{r}-{mode}"], 1)  # every broker has the quotas' delta now
                row = produce(kafka, "bench-quotas", args, mode)
                emit({**row, "round": r})
                rates[mode].append(row["msgs_per_s"])
        ratio = round(statistics.median(rates["quota"]) / statistics.median(rates["none"]), 3) \
            if rates["none"] and statistics.median(rates["none"]) else 0.0
        paired = round(statistics.median(q / n for q, n in zip(rates["quota"], rates["none"], strict=True) if n), 3)
        emit({"phase": "summary", "quota_over_none": ratio, "cost_percent": round((1 - ratio) * 100, 1),
              "median_of_round_ratios": paired, "target_ratio": TARGET, "met": ratio >= TARGET,
              "rounds": args.rounds, "median_msgs_per_s": {m: statistics.median(v) for m, v in rates.items()}})
    finally:
        stop_cluster(cluster, base, args.keep)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=10, help="seconds of producing per round and mode")
    ap.add_argument("--rounds", type=int, default=3, help="rounds of each mode, alternating")
    ap.add_argument("--value", type=int, default=256, help="value bytes")
    ap.add_argument("--partitions", type=int, default=6)
    ap.add_argument("--keep", action="store_true", help="keep the cluster's directory (logs, data)")
    run(ap.parse_args())


if __name__ == "__main__":
    main()
