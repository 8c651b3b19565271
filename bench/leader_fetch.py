"""The leader's side of a follower's fetch in one process: a Fetch v12 request of a follower's
incremental session read by kio, answered by ``KafkaApis.fetch`` (the session, the reads, the
follower's log end, the high watermark) and encoded and framed as the listener sends it.

    python -m bench.leader_fetch --seconds 1

Why: while librdkafka produces (acks=all, RF 3) the leader's answers to follower fetches were a
fifth of the brokers' Python CPU (docs/brokers.md, "Data path performance"). One leader (broker
7) of a topic of 6 partitions with two followers (8 and 9), each fetching in a session of all
6. Shapes:

- ``news``: each round appends a batch of 770 records of 256 bytes (~200 KB, as librdkafka
  sends them) to one or two partitions in turn (not timed), then each follower fetches: its
  request carries the offsets of the partitions it got last round (which moves its log end
  and the high watermark, waking an acks=all produce waiting on it) and its answer the new
  batches. The fetches' timings are reported.
- ``idle``: nothing new; each fetch reads the session's partitions and answers nothing
  (``max_wait_ms`` 0: what a long poll's first read and every wake-up without data cost).
- ``wakeup``: a long poll (``max_wait_ms`` 500) of the session with nothing new, woken by an
  append to one partition (not timed); the fetch's CPU before and after the append is timed.
- ``expire``: a long poll of the session with nothing new that times out (``max_wait_ms`` 2),
  as every idle follower fetch of a cluster does after ``replica.fetch.wait.max.ms``: its
  thread CPU (timer, loop turns and the empty answer included, the wait itself not).
- ``consume``: librdkafka reading a produced topic back with its defaults: no session (id 0,
  epoch -1), read_committed, 1 MiB per partition, 50 MiB per answer, its three partitions of
  this leader each holding batches of 980 records of 256 bytes (~260 KB, as librdkafka
  produces them), so that four fill all but a few KB of a partition's 1 MiB; each fetch asks
  for the next offsets (and wraps around), answered, encoded and cut in parts as the listener
  writes them (``response_parts``); the memtable flushed first, so the values are read from
  blob files as a cluster reads a topic of a hundred MB.
- ``grpc-consume``: the same partitions read by our client's consumer over gRPC as
  ``bench.kafka_clients``'s catch-up consumer reads them (no session, read_uncommitted, 4 MiB
  per partition, so about 12 MiB per answer): the request decoded, answered by the broker's
  ``BrokerService.Fetch`` and serialized by the response serializer the broker registers for
  Fetch (``_grpc_fetch``), which is what gRPC sends; the answer's copies of the records are most
  of its cost (docs/brokers.md, "Our client's consume (gRPC)"). This shape keeps freed memory
  as the broker process does (``brokerd.memory``), for itself and any shape run after it in
  the same process (it is the last by default). Run from another tree for a before/after (its
  registration is found either way).

JSON lines: this thread's CPU per fetch (``time.thread_time``), the median of ``--repeats``
timings, each the median fetch of a run of them (a shared machine's interruptions land in
single fetches), and their range; ``--profile`` prints cProfile's
top functions (thread CPU) per shape instead.
"""
from __future__ import annotations

import argparse
import asyncio
import cProfile
import datetime
import heapq
import io
import pstats
import statistics
import tempfile
import time
import uuid
from typing import Any

from brokerd.config import LogConfig
from brokerd.fetch_session import FetchSessionCache
from brokerd.kafka import apis
from brokerd.kafka.codec import (RequestHeader, encode_response, frame_request, frame_response, read_request,
                                 response_parts)
from brokerd.kafka.replica_client import FetchPartitionFields, FetchRequestFields, FetchTopicFields
from brokerd.log_manager import LogManager
from brokerd.log_store import FlushPolicy
from brokerd.partition import Partition
from brokerd.replica_fetcher import ReplicaFetcherManager
from brokerd.replica_manager import ReplicaManager
from brokerd.service import BrokerService
from clients.records import build_batch
from metadata.authorizer import Access
from metadata.image import PartitionRegistration
from metadata.principal import Session
from protos import broker_pb2 as pb

from .common import emit
from .follower_fetch import config

LEADER, FOLLOWERS, PARTITIONS, TOPIC = 7, (8, 9), 6, "bench"
FETCH, VERSION = 1, 12
BATCH = build_batch([(None, bytes(256), 1_700_000_000_000 + k, ()) for k in range(770)])
CONSUMED = build_batch([(None, bytes(256), 1_700_000_000_000 + k, ()) for k in range(980)])
CONSUMER_PARTITIONS, CONSUMER_BATCHES = 3, 24  # a consumer's partitions of this leader, batches in each
GRPC_PARTITION_BYTES = 4 << 20  # bench.broker's catch-up consumer's max_partition_fetch_bytes
GRPC_BATCHES = 32  # twice what 4 MiB holds: every answer the same size


class Leader:
    """A leader of ``PARTITIONS`` partitions answering its followers' sessions."""

    def __init__(self, directory: str) -> None:
        cfg = config()
        self.rm = ReplicaManager(cfg, LogManager((directory,), FlushPolicy()),
                                 ReplicaFetcherManager(cfg, lambda: 1, lambda e: None), lambda: False)
        self.tid = uuid.uuid4()
        self.partitions: list[Partition] = []
        for i in range(PARTITIONS):
            p = Partition(LEADER, TOPIC, self.tid, i, self.rm.logs.open(self.tid, i), LogConfig())
            p.update(PartitionRegistration((LEADER, *FOLLOWERS), (LEADER, *FOLLOWERS), LEADER, 1, 1))
            self.rm.partitions[(self.tid, i)] = p
            self.rm.by_name[(TOPIC, i)] = p
            self.partitions.append(p)
        self.handler = _Handler(self.rm)
        self.access = Access(None, Session("User:ANONYMOUS", "127.0.0.1"))
        self.sessions = {f: (0, 0) for f in FOLLOWERS}  # follower -> (session id, epoch)
        self.told = {f: [0] * PARTITIONS for f in FOLLOWERS}  # the offsets each follower last sent

    async def append(self, index: int, batch: Any = BATCH) -> None:
        b = type(batch)()
        b.CopyFrom(batch)
        p = self.partitions[index]
        await p.log.append_as_leader(b, p.leader_epoch)
        p.notify()
        # an acks=all produce waiting for the high watermark to pass the batch
        fut = asyncio.get_running_loop().create_future()
        heapq.heappush(p._hw_waiters, (p.log.log_end_offset, next(p._seq), fut))

    def request(self, follower: int, max_wait_ms: int = 0) -> tuple[RequestHeader, Any]:
        """The follower's next request, read as the listener reads it: the partitions whose
        offset moved since it last said (all in the first, full, one)."""
        sid, epoch = self.sessions[follower]
        told = self.told[follower]
        parts = []
        for p in self.partitions:
            if epoch == 0 or told[p.index] != self.fetched[follower][p.index]:
                parts.append(FetchPartitionFields(p.index, 1, self.fetched[follower][p.index], 0, 1 << 20))
                told[p.index] = self.fetched[follower][p.index]
        fields = FetchRequestFields(follower, datetime.timedelta(milliseconds=max_wait_ms), 1, 10 << 20, sid, epoch,
                                    [FetchTopicFields(TOPIC, parts)] if parts else [])
        framed = frame_request(FETCH, VERSION, 1, f"broker-{follower}-replica-fetcher", fields)
        return read_request(framed[4:], FETCH, VERSION)

    async def fetch(self, header: RequestHeader, request: Any, follower: int) -> bytes:
        """What the listener does with a follower's Fetch, but reading and writing it."""
        answer = await self.handler.fetch(request, VERSION, self.access)
        sid, epoch = self.sessions[follower]
        self.sessions[follower] = (answer["session_id"], epoch + 1)
        for t in answer["responses"]:
            for a in t["partitions"]:
                if a["records"]:
                    self.fetched[follower][a["partition_index"]] = self.partitions[a["partition_index"]].log.log_end_offset
        return frame_response(header, encode_response(header, answer))

    fetched: dict[int, list[int]]

    def consumer_request(self) -> tuple[RequestHeader, Any]:
        """librdkafka's next full fetch of its partitions, from where its last answer ended."""
        parts = [FetchPartitionFields(i, 1, self.consumed[i], -1, 1 << 20) for i in range(CONSUMER_PARTITIONS)]
        fields = FetchRequestFields(-1, datetime.timedelta(milliseconds=500), 1, 50 << 20, 0, -1,
                                    [FetchTopicFields(TOPIC, parts)], isolation_level=1)
        framed = frame_request(FETCH, VERSION, 1, "rdkafka", fields)
        return read_request(framed[4:], FETCH, VERSION)

    async def consume(self, header: RequestHeader, request: Any) -> list[bytes | memoryview]:
        """What the listener does with a consumer's Fetch: answered, encoded, in parts."""
        answer = await self.handler.fetch(request, VERSION, self.access)
        for t in answer["responses"]:
            for a in t["partitions"]:
                i = a["partition_index"]
                p = self.partitions[i]
                batches = len(a["records"].parts) // 2 if a["records"] else 0  # a head and records each
                got = self.consumed[i] + batches * CONSUMED.record_count
                self.consumed[i] = got if got < p.log.high_watermark else p.log.log_start_offset
        return response_parts(header, encode_response(header, answer))

    consumed: list[int]

    def grpc_consumer_request(self) -> bytes:
        """Our consumer's next Fetch of its partitions (clients/consumer.py), as gRPC receives it."""
        req = pb.FetchRequest(replica_id=-1, max_wait_ms=100, min_bytes=1, max_bytes=50 << 20, client_id="bench")
        t = req.topics.add(name=TOPIC)
        for i in range(CONSUMER_PARTITIONS):
            t.partitions.add(partition=i, fetch_offset=self.consumed[i], log_start_offset=-1,
                             partition_max_bytes=GRPC_PARTITION_BYTES, current_leader_epoch=1)
        return req.SerializeToString()

    async def grpc_consume(self, request: bytes) -> bytes:
        """What the broker's gRPC server does with it: decoded, answered, serialized."""
        handler = self.grpc_fetch
        answer = handler.response_serializer(await handler.unary_unary(handler.request_deserializer(request),
                                                                       _Context()))
        for t in pb.FetchResponse.FromString(answer).topics if not self.answered else ():
            for a in t.partitions:  # where the next fetch starts: told once, as each answer is the same size
                self.answered[a.partition] = sum(1 for _ in _frames(a.records)) * CONSUMED.record_count
        for i in range(CONSUMER_PARTITIONS):
            got = self.consumed[i] + self.answered.get(i, 0)
            self.consumed[i] = got if got < self.partitions[i].log.high_watermark else 0
        return answer

    grpc_fetch: Any
    answered: dict[int, int]


def _frames(records: bytes) -> Any:
    from clients.records import frames
    return frames(records) if records else []


class _Context:
    """What ``BrokerService.Fetch`` asks of a gRPC call's context."""

    def auth_context(self) -> dict[str, Any]:
        return {}

    def peer(self) -> str:
        return "ipv4:127.0.0.1:5555"


def _grpc_fetch(rm: ReplicaManager) -> Any:
    """Fetch's method handler (its deserializer, the service's method, its serializer) as the
    broker's gRPC server registers it (``brokerd.server``): ``grpc_fetch_answer``'s, or, in a
    tree before that module, the generated registration's."""
    try:
        from brokerd.grpc_fetch_answer import add_broker_servicer as add
    except ImportError:
        from protos.broker_pb2_grpc import add_BrokerServicer_to_server as add
    handlers: dict[str, Any] = {}

    class Server:
        def add_generic_rpc_handlers(self, generic: tuple) -> None:
            pass

        def add_registered_method_handlers(self, name: str, methods: dict[str, Any]) -> None:
            handlers.update(methods)
    service = BrokerService(rm, "PLAINTEXT", lambda: 1, pb.DescribeBrokerResponse, None, None)  # type: ignore[arg-type]
    add(service, Server())
    return handlers["Fetch"]


class _Handler(apis.KafkaApis):
    """The listener's ``KafkaApis`` with only what its ``fetch`` uses: the replica manager and
    the session cache."""

    def __init__(self, rm: ReplicaManager) -> None:  # not KafkaApis.__init__: no listener here
        self.rm = rm
        self.fetch_sessions = FetchSessionCache(1000)


async def _timed(leader: Leader, follower: int, max_wait_ms: int = 0) -> float:
    header, request = leader.request(follower, max_wait_ms)
    start = time.thread_time()
    await leader.fetch(header, request, follower)
    return time.thread_time() - start


async def _round(leader: Leader, shape: str, n: int) -> list[float]:
    """One round's fetch timings (seconds)."""
    out = []
    if shape == "news":
        for index in ((n % PARTITIONS,) if n % 2 else (n % PARTITIONS, (n + 3) % PARTITIONS)):
            await leader.append(index)
        for f in FOLLOWERS:
            out.append(await _timed(leader, f))
    elif shape == "idle":
        for f in FOLLOWERS:
            out.append(await _timed(leader, f))
    elif shape == "expire":
        for f in FOLLOWERS:
            out.append(await _timed(leader, f, 2))
    elif shape == "grpc-consume":
        request = leader.grpc_consumer_request()
        start = time.thread_time()
        await leader.grpc_consume(request)
        out.append(time.thread_time() - start)
    elif shape == "consume":
        header, request = leader.consumer_request()
        start = time.thread_time()
        await leader.consume(header, request)
        out.append(time.thread_time() - start)
    else:  # wakeup: a long poll woken by an append
        f = FOLLOWERS[n % 2]
        header, request = leader.request(f, 500)
        start = time.thread_time()
        task = asyncio.ensure_future(leader.fetch(header, request, f))
        await asyncio.sleep(0)  # the fetch runs until it waits
        assert any(p.delayed_fetches for p in leader.partitions)
        waited = time.thread_time() - start
        await leader.append(n % PARTITIONS)
        start = time.thread_time()
        await task
        out.append(waited + time.thread_time() - start)
        # the other follower catches up (not timed), so that the next long poll waits
        other = FOLLOWERS[(n + 1) % 2]
        await leader.fetch(*leader.request(other), other)
        await leader.fetch(*leader.request(f), f)
        await leader.fetch(*leader.request(other), other)
    return out


async def measure(shape: str, seconds: float, repeats: int, profile: bool) -> dict[str, Any]:
    if shape == "grpc-consume":
        from brokerd.memory import keep_freed_memory
        keep_freed_memory()
    with tempfile.TemporaryDirectory() as d:
        leader = Leader(d)
        leader.fetched = {f: [0] * PARTITIONS for f in FOLLOWERS}
        leader.consumed = [0] * PARTITIONS
        leader.grpc_fetch, leader.answered = _grpc_fetch(leader.rm), {}
        consuming = shape in ("consume", "grpc-consume")
        for i in range(PARTITIONS):  # something in every partition, all of it replicated
            batches = GRPC_BATCHES if shape == "grpc-consume" else CONSUMER_BATCHES
            for _ in range(batches if consuming and i < CONSUMER_PARTITIONS else 1):
                await leader.append(i, CONSUMED if consuming else BATCH)
        if consuming:  # read from blob files, as a cluster reads a topic of 100 MB
            leader.partitions[0].log.db.flush()
        for _ in range(2):
            for f in FOLLOWERS:
                await leader.fetch(*leader.request(f), f)  # a full fetch opens the session, then acks
        assert all(p.log.high_watermark == p.log.log_end_offset for p in leader.partitions)
        n = 0
        timings: list[float] = []
        prof = cProfile.Profile(time.thread_time) if profile else None
        start = time.monotonic()
        per_repeat: list[float] = []
        count = 0
        while len(per_repeat) < repeats:
            if prof is not None:
                prof.enable()
            got = await _round(leader, shape, n)
            if prof is not None:
                prof.disable()
            n += 1
            timings += got
            count += len(got)
            if time.monotonic() - start >= seconds / repeats:
                per_repeat.append(statistics.median(timings) * 1e6)
                timings, start = [], time.monotonic()
                for p in leader.partitions if not consuming else ():  # keep the logs small
                    p.log.delete_before(p.log.high_watermark)
        await leader.rm.logs.close()
    if prof is not None:
        out = io.StringIO()
        pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(25)
        print(f"== {shape}: {count} fetches ==")
        print(out.getvalue())
    return {"bench": "leader_fetch", "shape": shape, "fetches": count,
            "us_per_fetch": round(statistics.median(per_repeat), 1),
            "range": [round(min(per_repeat), 1), round(max(per_repeat), 1)]}


SHAPES = ("news", "idle", "wakeup", "expire", "consume", "grpc-consume")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=1.0, help="time per shape (default 1)")
    ap.add_argument("--repeats", type=int, default=5, help="timings per shape, their median reported")
    ap.add_argument("--shape", choices=SHAPES, action="append", help="default: all")
    ap.add_argument("--profile", action="store_true", help="print cProfile's top functions per shape")
    args = ap.parse_args()
    for shape in args.shape or SHAPES:
        emit(asyncio.run(measure(shape, args.seconds, args.repeats, args.profile)))


if __name__ == "__main__":
    main()
