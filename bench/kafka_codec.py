"""The Kafka codec on the data path, in one process: Fetch and Produce responses encoded,
a follower's Fetch request encoded, by kio (the generic codec, as before) and by the
hand-written ``brokerd.kafka.data_path_codec``; and what kio's reader (compiled, kept) takes to
decode Fetch and Produce requests and Fetch responses.

    python -m bench.kafka_codec --seconds 1

Why: a profile of replication over Kafka's protocol put kio's per-field Python encoding at
more than half of the leader's CPU per fetch (docs/brokers.md, "Data path performance"); this
measures each message on its own, at the versions the clients negotiate with this listener
(librdkafka 2.x, kafka-python 3.x and our follower all send Fetch v12 and Produce v9; v11 and
v7 for older clients).

JSON lines, one per (message, shape, version): ``kio_us`` (this process's CPU per message,
kio: for a response ``build`` then kio's writer, as the listener did before) and, where the
hand codec serves, ``fast_us`` and ``ratio`` (fast / kio): the two are timed in turn
``--repeats`` times, medians reported, the ratio the median of the paired ratios. Shapes:
``replica`` (3 partitions of 2 batches of 200 records of 256 bytes: a follower's fetch under
load), ``idle-1000`` (a consumer's fetch of 1,000 partitions with no records) and ``produce``
(one partition, one batch of 200 records).
"""
from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

from brokerd.kafka.codec import (RequestHeader, build, encode_response, frame_request, frame_request_by_kio,
                                 frame_response, read_request, read_response, request_schema, response_schema)

from .common import emit

FETCH, PRODUCE = 1, 0
BATCH = bytes(61 + 200 * 270)  # a batch of 200 records of 256-byte values (passed through, never read)


def per_call(fn: Callable[[], Any], seconds: float) -> int:
    """How many calls of ``fn`` take about ``seconds``."""
    n, start = 0, time.process_time()
    while time.process_time() - start < 0.05:
        fn()
        n += 1
    return max(1, int(n * seconds / 0.05))


def cpu_us(fn: Callable[[], Any], calls: int) -> float:
    """Microseconds of this process's CPU per call of ``fn`` (CPU time, not wall time: the
    machine is shared, and another process's turn on the core is not ours)."""
    start = time.process_time()
    for _ in range(calls):
        fn()
    return (time.process_time() - start) / calls * 1e6


def fetch_answer(partitions: int, batches: int) -> dict[str, Any]:
    return {"error_code": 0, "session_id": 7, "responses": [{"topic": "bench", "partitions": [
        {"partition_index": i, "error_code": 0, "high_watermark": 10_000, "last_stable_offset": 10_000,
         "log_start_offset": 0, "aborted_transactions": None, "current_leader": {},
         "records": BATCH * batches, "preferred_read_replica": -1} for i in range(partitions)]}]}


def fetch_request(partitions: int, replica: bool) -> dict[str, Any]:
    return {"replica_id": 102 if replica else -1, "max_wait": 500, "min_bytes": 1, "max_bytes": 50 << 20,
            "session_id": 0, "session_epoch": -1, "rack_id": "",
            "topics": [{"topic": "bench", "partitions": [
                {"partition": i, "current_leader_epoch": 3, "fetch_offset": 1000, "log_start_offset": -1,
                 "partition_max_bytes": 1 << 20} for i in range(partitions)]}], "forgotten_topics_data": []}


def produce_answer() -> dict[str, Any]:
    return {"responses": [{"name": "bench", "partition_responses": [
        {"index": 0, "error_code": 0, "base_offset": 123_456, "log_append_time": None, "log_start_offset": 0,
         "error_message": None, "record_errors": []}]}]}


def produce_request() -> dict[str, Any]:
    return {"transactional_id": None, "acks": -1, "timeout": 30_000,
            "topic_data": [{"name": "bench", "partition_data": [{"index": 0, "records": BATCH}]}]}


def run(seconds: float, repeats: int) -> None:
    def row(message: str, shape: str, version: int, kio: Callable[[], Any], fast: Callable[[], Any] | None) -> None:
        """kio and the hand codec timed in turn ``repeats`` times: their medians and the median
        of the paired ratios (fast / kio), steadier than either on a loaded machine."""
        calls = per_call(kio, seconds / repeats)
        pairs = [(cpu_us(kio, calls), cpu_us(fast, calls) if fast is not None else None) for _ in range(repeats)]
        out: dict[str, Any] = {"bench": "kafka_codec", "message": message, "shape": shape, "version": version,
                               "kio_us": round(statistics.median(k for k, _ in pairs), 2)}
        if fast is not None:
            out["fast_us"] = round(statistics.median(f for _, f in pairs if f is not None), 2)
            out["ratio"] = round(statistics.median(f / k for k, f in pairs if f is not None), 3)
        emit(out)

    for shape, answer in (("replica", fetch_answer(3, 2)), ("idle-1000", fetch_answer(1000, 0))):
        for version in (11, 12):
            header = RequestHeader(FETCH, version, 1, "c", version >= 12)
            schema = response_schema(FETCH, version)
            row("FetchResponse encode", shape, version,
                lambda: frame_response(header, build(schema, answer)),  # noqa: B023 (run at once)
                lambda: frame_response(header, encode_response(header, answer)))  # noqa: B023
        h12 = RequestHeader(FETCH, 12, 1, "c", True)
        body = frame_response(h12, encode_response(h12, answer))[4:]
        row("FetchResponse decode", shape, 12, lambda: read_response(body, FETCH, 12), None)  # noqa: B023
    for shape, partitions, replica in (("replica", 3, True), ("idle-1000", 1000, False)):
        for version in (11, 12):
            raw = frame_request(FETCH, version, 1, "c", build(request_schema(FETCH, version),
                                                              fetch_request(partitions, replica)))[4:]
            row("FetchRequest decode", shape, version, lambda: read_request(raw, FETCH, version), None)  # noqa: B023
            fields = fetch_request(partitions, replica)
            schema = request_schema(FETCH, version)
            row("FetchRequest encode", shape, version,  # the follower's: its fields built, then encoded
                lambda: frame_request_by_kio(FETCH, version, 1, "c", build(schema, fields)),  # noqa: B023
                lambda: frame_request(FETCH, version, 1, "c", build(schema, fields)))  # noqa: B023
    for version in (7, 9):
        raw = frame_request(PRODUCE, version, 1, "c", build(request_schema(PRODUCE, version), produce_request()))[4:]
        row("ProduceRequest decode", "produce", version, lambda: read_request(raw, PRODUCE, version), None)  # noqa
        header = RequestHeader(PRODUCE, version, 1, "c", version >= 9)
        schema = response_schema(PRODUCE, version)
        answer = produce_answer()
        row("ProduceResponse encode", "produce", version, lambda: frame_response(header, build(schema, answer)),  # noqa
            lambda: frame_response(header, encode_response(header, answer)))  # noqa: B023


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=1.0, help="time per measurement (default 1)")
    ap.add_argument("--repeats", type=int, default=5, help="timings per measurement, their median reported")
    args = ap.parse_args()
    run(args.seconds, args.repeats)


if __name__ == "__main__":
    main()
