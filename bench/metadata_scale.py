"""Scale of the controller quorum: create N partitions (topics of 100 partitions, replication
factor 3, on 100 registered brokers) through a 3-process quorum, then measure what an
operator cares about at that size. Prints JSON lines:

  create      seconds and partitions/s to create them through CreateTopics
  memory      each controller's resident memory, and bytes per partition
  snapshot    snapshot file size, time to write it and to load it back
  replay      time to rebuild the image from the log alone (no snapshot)
  failover    kill -9 of the active controller to the new one committing a write (the
              median of --kills, at 10,000 partitions and at N)

    python -m bench.metadata_scale --partitions 1000000
"""
from __future__ import annotations

import argparse
import asyncio
import io
import os
import shutil
import tempfile
import time
import uuid

from metadata.client import ControllerClient
from metadata.delta import MetadataDelta
from kraft.dev_quorum import DevQuorum, consecutive_ports
from metadata.image import MetadataImage
from metadata.log_dir import MetadataLogDir, open_snapshot
from metadata.records import decode_batch, encode_batch
from metadata.snapshot import image_records, read_snapshot, write_snapshot
from protos import controller_pb2 as pb

from .common import emit

BROKERS = 100
PARTITIONS_PER_TOPIC = 100
TOPICS_PER_REQUEST = 10


def rss_kib(pid: int) -> tuple[int, int]:
    """(current, peak) resident KiB of a process."""
    cur = peak = 0
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                cur = int(line.split()[1])
            elif line.startswith("VmHWM:"):
                peak = int(line.split()[1])
    return cur, peak


async def register_brokers(q: DevQuorum) -> None:
    """Registered and unfenced brokers, kept alive by heartbeats from this process."""
    async with ControllerClient(q.bootstrap) as c:
        epochs = {}
        for b in range(1, BROKERS + 1):
            r = await c.broker_registration(pb.BrokerRegistrationRequest(
                broker_id=b, cluster_id=q.cluster_id, incarnation_id=uuid.uuid4().bytes, rack=f"rack-{b % 5}",
                listeners=[pb.Endpoint(name="PLAINTEXT", host="127.0.0.1", port=10000 + b)]))
            epochs[b] = r.broker_epoch
        for b, e in epochs.items():
            await c.broker_heartbeat(pb.BrokerHeartbeatRequest(broker_id=b, broker_epoch=e,
                                                                      current_metadata_offset=1 << 40))
    q.broker_epochs = epochs  # type: ignore[attr-defined]


async def heartbeat_forever(q: DevQuorum, stop: asyncio.Event) -> None:
    async with ControllerClient(q.bootstrap, timeout=60) as c:
        while not stop.is_set():
            for b, e in q.broker_epochs.items():  # type: ignore[attr-defined]
                try:
                    await c.broker_heartbeat(pb.BrokerHeartbeatRequest(
                        broker_id=b, broker_epoch=e, current_metadata_offset=1 << 40))
                except Exception:
                    pass
            await asyncio.sleep(1.0)


async def create(q: DevQuorum, topics: int, start: int, in_flight: int = 4) -> float:
    t0 = time.perf_counter()
    names = [f"topic-{i:06d}" for i in range(start, start + topics)]
    batches = [names[k:k + TOPICS_PER_REQUEST] for k in range(0, len(names), TOPICS_PER_REQUEST)]
    async with ControllerClient(q.bootstrap, timeout=120) as c:
        async def worker(mine: list[list[str]]) -> None:
            for batch in mine:
                r = await c.create_topics(pb.CreateTopicsRequest(topics=[
                    pb.CreatableTopic(name=n, num_partitions=PARTITIONS_PER_TOPIC, replication_factor=3)
                    for n in batch]))
                bad = [t for t in r.topics if t.error_code != 0]
                if bad:
                    raise SystemExit(f"create failed: {bad[0].error_message}")
        await asyncio.gather(*(worker(batches[w::in_flight]) for w in range(in_flight)))
    return time.perf_counter() - t0


async def failover(q: DevQuorum) -> float:
    leader = await q.wait_for_leader()
    others = [n for n in q.ports if n != leader]
    probe = f"probe-{uuid.uuid4().hex[:8]}"
    q.kill(leader)
    t0 = time.perf_counter()
    async with ControllerClient([f"127.0.0.1:{q.ports[n]}" for n in others], timeout=60, attempt_timeout=0.3) as c:
        await c.create_topics(pb.CreateTopicsRequest(topics=[
            pb.CreatableTopic(name=probe, num_partitions=1, replication_factor=3)]))
    took = time.perf_counter() - t0
    q.start_node(leader)
    return took


async def failovers(q: DevQuorum, partitions: int, kills: int) -> None:
    """The median of several kills: one is mostly the randomized election timeout's draw."""
    times = []
    for _ in range(kills):
        await caught_up(q)
        times.append(await failover(q))
    times.sort()
    emit({"bench": "metadata-failover", "partitions": partitions, "kills": kills,
          "p50_s": round(times[len(times) // 2], 3), "max_s": round(times[-1], 3),
          "seconds": [round(t, 3) for t in times]})


async def caught_up(q: DevQuorum, timeout: float = 180.0) -> None:
    """Until every voter fetches and has the whole log: a restarted controller loads its
    snapshot first, and killing the leader before that would leave no majority."""
    deadline = time.monotonic() + timeout
    async with ControllerClient(q.bootstrap, timeout=timeout, attempt_timeout=1.0) as c:
        while time.monotonic() < deadline:
            r = await c.describe_quorum(pb.DescribeQuorumRequest())
            now_ms = time.time() * 1000
            if all(v.lag == 0 and (v.replica_id == r.leader_id or now_ms - v.last_fetch_timestamp < 1000)
                   for v in r.voters):
                return
            await asyncio.sleep(0.5)
    raise RuntimeError(f"the controllers did not catch up within {timeout:.0f}s")


async def settle(pid: int, timeout: float = 120.0) -> None:
    """Until a (restarted) controller's memory stops growing: it has loaded the snapshot and
    replayed the log."""
    deadline = time.monotonic() + timeout
    last = rss_kib(pid)[0]
    while time.monotonic() < deadline:
        await asyncio.sleep(3.0)
        cur = rss_kib(pid)[0]
        if abs(cur - last) < max(last // 50, 1024):
            return
        last = cur


def snapshot_figures(q: DevQuorum) -> MetadataImage | None:
    dirs = [MetadataLogDir(str(q.base_dir / f"controller-{n}")) for n in q.ports]
    log_dir = max(dirs, key=lambda d: d.snapshot_offset)  # the newest snapshot of the three
    if log_dir.snapshot_path is None:
        emit({"bench": "metadata-snapshot", "skipped": "no snapshot was taken"})
        return None
    size = os.path.getsize(log_dir.snapshot_path)
    t0 = time.process_time()
    with open_snapshot(log_dir.snapshot_path) as f:
        image = read_snapshot(f)
    load = time.process_time() - t0
    t0 = time.process_time()
    write_snapshot(image, io.BytesIO(), created_ms=0)
    write = time.process_time() - t0
    emit({"bench": "metadata-snapshot", "partitions": image.partition_count(), "snapshot_bytes": size,
          "write_cpu_s": round(write, 2), "load_cpu_s": round(load, 2)})
    return image


def replay_figure(image: MetadataImage) -> None:
    """Log replay: the image's records cut into CreateTopics-sized batches (one Raft entry
    each), then decoded and replayed as a controller replays its log."""
    records = list(image_records(image))
    per_batch = TOPICS_PER_REQUEST * (PARTITIONS_PER_TOPIC + 1)
    blobs = [encode_batch(records[k:k + per_batch]) for k in range(0, len(records), per_batch)]
    t0 = time.process_time()
    replayed = MetadataImage.empty(image.cluster_id)
    for offset, blob in enumerate(blobs, 1):
        delta = MetadataDelta(replayed)
        delta.replay_batch(decode_batch(blob), offset, 1)
        replayed = delta.apply()
    emit({"bench": "metadata-replay", "batches": len(blobs), "partitions": replayed.partition_count(),
          "cpu_s": round(time.process_time() - t0, 2)})


async def run(partitions: int, keep: bool, kills: int) -> None:
    topics = max(1, partitions // PARTITIONS_PER_TOPIC)
    base = tempfile.mkdtemp(prefix="metadatascale")
    every = max(10, topics // TOPICS_PER_REQUEST // 3)  # a few snapshots while creating
    q = DevQuorum(base, consecutive_ports(3), extra={"metadata.log.max.records.between.snapshots": str(every),
                                     "metadata.log.max.record.bytes.between.snapshots": str(64 << 20)})
    q.start()
    stop = asyncio.Event()
    try:
        await q.wait_for_leader()
        await register_brokers(q)
        beats = asyncio.create_task(heartbeat_forever(q, stop))
        rss0 = {n: rss_kib(p.pid)[0] for n, p in q.procs.items()}
        small = min(topics, 100)
        secs = await create(q, small, 0)
        emit({"bench": "metadata-create", "partitions": small * PARTITIONS_PER_TOPIC, "seconds": round(secs, 2),
              "partitions_per_s": round(small * PARTITIONS_PER_TOPIC / secs)})
        await failovers(q, small * PARTITIONS_PER_TOPIC, kills)
        await q.wait_for_leader()
        if topics > small:
            secs = await create(q, topics - small, small)
            emit({"bench": "metadata-create", "partitions": topics * PARTITIONS_PER_TOPIC, "seconds": round(secs, 2),
                  "partitions_per_s": round((topics - small) * PARTITIONS_PER_TOPIC / secs)})
            await asyncio.sleep(2.0)
            await failovers(q, topics * PARTITIONS_PER_TOPIC, kills)
        for n, p in q.procs.items():
            if p.poll() is None:
                await settle(p.pid)
                cur, peak = rss_kib(p.pid)
                grown = (cur - rss0.get(n, cur)) * 1024
                emit({"bench": "metadata-memory", "controller": n, "rss_mib": round(cur / 1024),
                      "peak_rss_mib": round(peak / 1024),
                      "bytes_per_partition": round(grown / (topics * PARTITIONS_PER_TOPIC)) if n in rss0 else None})
        stop.set()
        await beats
    finally:
        q.stop()
    image = snapshot_figures(q)
    if image is not None:
        replay_figure(image)
    if not keep:
        shutil.rmtree(base, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--partitions", type=int, default=1_000_000)
    ap.add_argument("--keep", action="store_true", help="keep the data directory")
    ap.add_argument("--kills", type=int, default=5, help="failovers measured at each size")
    a = ap.parse_args()
    asyncio.run(run(a.partitions, a.keep, a.kills))


if __name__ == "__main__":
    main()
