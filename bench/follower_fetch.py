"""The follower's receive path in one process: a leader's Fetch answer over Kafka's protocol
read from the connection (a ``FrameConnection`` fed the answer's bytes), its batches checked and turned into stored frames, staged and
written to RocksDB (``ReplicaFetcher._fetch`` with ``KafkaLeaderClient``, the answer fed to
its stream reader instead of a socket).

    python -m bench.follower_fetch --seconds 1

Why: the follower's fetcher was a fifth of the brokers' Python CPU while librdkafka
produced, and each batch was copied about fifteen times on a follower (docs/brokers.md, "The
data path's codec"). Shapes: ``replica`` (3 partitions x 2 batches x 200 records of 256
bytes), ``1mib`` (1 partition x 2 batches of about 1 MiB), and three answers as a follower of
two partitions gets them in its session while librdkafka produces: ``produce`` (one partition
with a batch of 770 records of 256 bytes, about 200 KB, the other a high watermark move),
``hw`` (both partitions' high watermarks moved, no records) and ``empty`` (a long poll that
timed out: no partitions). JSON lines: this process's CPU per fetch (request built, answer
read, staged, written, applied; RocksDB's flushes and compactions in its threads too), and
``loop_us_per_fetch`` the fetching thread's alone; medians of ``--repeats`` timings, ranges;
``--profile N``: then the N functions taking most CPU (cProfile on ``time.thread_time``),
in microseconds per fetch.
"""
from __future__ import annotations

import argparse
import asyncio
import cProfile
import pstats
import statistics
import tempfile
import time
import uuid
from typing import Any

from brokerd.config import BrokerConfig, LogConfig
from brokerd.kafka.batches import to_wire
from brokerd.kafka.codec import RequestHeader, encode_response, frame_response
from brokerd.kafka.framing import FrameConnection
from brokerd.kafka.replica_client import KafkaLeaderClient
from brokerd.log_store import FlushPolicy, LogStore
from brokerd.partition import Partition
from brokerd.partition_log import PartitionLog
from brokerd.replica_fetcher import FetchState, ReplicaFetcher
from clients.records import build_batch
from metadata.image import PartitionRegistration

from .common import emit

#: name: (partitions followed, partitions answered, of them with records, batches each, records
#: per batch, bytes per record, the answer's session id: 0 a full fetch each time)
SHAPES = {"replica": (3, 3, 3, 2, 200, 256, 0), "1mib": (1, 1, 1, 2, 1000, 1024, 0),
          "produce": (2, 2, 1, 1, 770, 256, 0), "hw": (2, 2, 0, 0, 0, 0, 7), "empty": (2, 0, 0, 0, 0, 0, 7)}
#: The log end of a partition whose answer only moves its high watermark (to alternate below it).
HW_LOG_END = 1000


def answer(answered: int, with_records: int, batches: int, records: int, size: int, session_id: int,
           hw: int = 0) -> bytes:
    """The leader's Fetch v12 answer, framed as on the wire: ``answered`` partitions, the first
    ``with_records`` of them with batches, the others at high watermark ``hw``."""
    parts: list[dict[str, Any]] = []
    for i in range(answered):
        wire, offset = b"", 0 if i < with_records else hw
        for _ in range(batches if i < with_records else 0):
            b = build_batch([(None, bytes(size), 1_700_000_000_000 + k, ()) for k in range(records)])
            b.base_offset, b.partition_leader_epoch = offset, 2
            offset += records
            wire += to_wire(b)
        parts.append({"partition_index": i, "error_code": 0, "high_watermark": offset, "last_stable_offset": offset,
                      "log_start_offset": 0, "aborted_transactions": None, "current_leader": {}, "records": wire,
                      "preferred_read_replica": -1})
    header = RequestHeader(1, 12, 0, "c", True)
    return frame_response(header, encode_response(header, {"error_code": 0, "session_id": session_id, "responses": [
        {"topic": "bench", "partitions": parts}] if parts else []}))


class _Writer:
    def write(self, data: bytes) -> None:
        pass

    def close(self) -> None:
        pass


def config() -> BrokerConfig:
    return BrokerConfig(7, "", "PLAINTEXT", (), {}, None, 2000, 30000, 500, 1, 1 << 20, 10 << 20, 100, 300000, 5000,
                        3600000, 1 << 20, 86_400_000, 600_000, True, 15_000, 50, 3, 6000, 1_800_000, 3000, 4096,
                        FlushPolicy(), LogConfig())


async def measure(shape: str, seconds: float, repeats: int, profile: int = 0) -> dict[str, Any]:
    partitions, answered, with_records, batches, records, size, session_id = SHAPES[shape]
    # a session's answers of high watermark moves alternate between two, so that each moves it
    framed = [answer(answered, with_records, batches, records, size, session_id, hw) for hw in (10, 20)]
    with tempfile.TemporaryDirectory() as d:
        store = LogStore(d)
        tid = uuid.uuid4()
        fetcher = ReplicaFetcher(config(), 8, "127.0.0.1:1", lambda: 1, lambda _: None, kafka=True)
        client = fetcher.stub
        assert isinstance(client, KafkaLeaderClient)
        states = []
        for i in range(partitions):
            p = Partition(7, "bench", tid, i, PartitionLog(store, tid, i), LogConfig())
            p.update(PartitionRegistration((7, 8), (8,), 8, 2, 3))
            s = FetchState(p, p.leader_epoch, truncating=False)
            fetcher.states[p] = s
            states.append(s)

        turn = 0

        async def once() -> None:
            nonlocal turn
            turn += 1
            for i, s in enumerate(states):  # the same batches again each time: their keys overwritten
                s.partition.log.next_offset = s.partition.log.log_end_offset = 0 if i < with_records else HW_LOG_END
            if not session_id:
                fetcher.session.reset()
            conn = FrameConnection(lambda size: None)
            conn.transport = _Writer()  # type: ignore[assignment]
            data = framed[turn % 2]
            while data:  # the answer as the socket would hand it over
                buf = conn.get_buffer(len(data))
                n = min(len(buf), len(data))
                buf[:n] = data[:n]
                conn.buffer_updated(n)
                data = data[n:]
            client._conn = conn
            client._correlation = -1  # the answer's correlation id is 0
            await fetcher._fetch(states)
            assert all(s.partition.log.log_end_offset > 0 for s in states)

        n, start = 0, time.process_time()
        while time.process_time() - start < 0.1:
            await once()
            n += 1
        calls = max(1, int(n * seconds / 0.1 / repeats))
        timings, in_loop = [], []
        for _ in range(repeats):
            start, start_loop = time.process_time(), time.thread_time()
            for _ in range(calls):
                await once()
            timings.append((time.process_time() - start) / calls * 1e6)
            in_loop.append((time.thread_time() - start_loop) / calls * 1e6)
        top = []
        if profile:
            prof = cProfile.Profile(time.thread_time)
            prof.enable()
            for _ in range(calls):
                await once()
            prof.disable()
            stats = pstats.Stats(prof).stats  # type: ignore[attr-defined]
            rows = sorted(stats.items(), key=lambda kv: -kv[1][2])[:profile]
            top = [[f"{f.rsplit('/', 1)[-1]}:{line}({name})", round(tt / calls * 1e6, 1), round(ct / calls * 1e6, 1)]
                   for (f, line, name), (_, _, tt, ct, _) in rows]
        await fetcher.stop()
        await store.close()
    out = {"bench": "follower_fetch", "shape": shape, "answer_bytes": len(framed[0]), "calls": calls,
           "us_per_fetch": round(statistics.median(timings), 1), "range": [round(min(timings), 1),
                                                                          round(max(timings), 1)],
           "loop_us_per_fetch": round(statistics.median(in_loop), 1),
           "loop_range": [round(min(in_loop), 1), round(max(in_loop), 1)]}
    if top:
        out["profile_self_cum_us"] = top
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=1.0, help="time per shape (default 1)")
    ap.add_argument("--repeats", type=int, default=5, help="timings per shape, their median reported")
    ap.add_argument("--shape", choices=sorted(SHAPES), action="append", help="default: all")
    ap.add_argument("--profile", type=int, default=0, metavar="N",
                    help="also profile each shape and print its N costliest functions (self and cumulative us per fetch)")
    args = ap.parse_args()
    for shape in args.shape or SHAPES:
        emit(asyncio.run(measure(shape, args.seconds, args.repeats, args.profile)))


if __name__ == "__main__":
    main()
