"""Scale benchmark of the metadata image and its snapshot file.

    python -m bench.metadata_image [--topics 10000] [--partitions 100] [--brokers 100]

Builds an image of topics x partitions (RF 3, brokers on 5 racks) the way a broker does:
one Raft entry per CreateTopics (a TopicRecord and its PartitionRecords, encoded as the log
holds them), each decoded, replayed into a fresh MetadataDelta and applied. Then it measures
a one-partition change on the big image, writes the snapshot, reads it back in a fresh
process (so its peak RSS is the loader's alone), checks the round trip and reads one indexed
range. Prints one JSON line per phase: ``seconds`` are wall-clock, ``cpu_s`` the process's CPU
time (the steadier figure on a shared machine).
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
import uuid

from metadata import records as R
from metadata.delta import MetadataDelta
from metadata.image import MetadataImage
from metadata.placement import UsableBroker, place_replicas
from metadata.snapshot import iter_records, read_info, read_snapshot, write_snapshot


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def peak_rss_bytes() -> int:
    """This process's peak RSS since it started (VmHWM; ru_maxrss would include the parent's
    peak, as Linux carries it across exec)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


class Timer:
    """Wall and CPU seconds: on a shared machine the CPU time is the steadier figure."""

    def __enter__(self) -> Timer:
        self.wall, self.cpu = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc: object) -> None:
        self.wall = round(time.perf_counter() - self.wall, 2)
        self.cpu = round(time.process_time() - self.cpu, 2)


def emit(**fields: object) -> None:
    print(json.dumps(fields), flush=True)


def build(topics: int, partitions: int, brokers: int) -> MetadataImage:
    usable = [UsableBroker(b, f"rack{b % 5}") for b in range(brokers)]
    image = MetadataImage.empty("bench-cluster")
    d = MetadataDelta(image)
    d.replay_batch([R.feature_level("metadata.version", 1)]
                   + [R.register_broker(b.id, uuid.UUID(int=b.id + 1), 1,
                                        [R.endpoint("PLAINTEXT", f"broker{b.id}", 9092)],
                                        rack=b.rack, fenced=False) for b in usable], 1, 1)
    image = d.apply()
    gc.collect()
    rss0 = rss_bytes()
    replay_s = replay_cpu = encode_s = 0.0
    offset = 1
    for t in range(topics):
        t0 = time.perf_counter()
        tid = uuid.UUID(int=(t + 1) << 64)
        assignment = place_replicas(usable, partitions, 3, start=t)
        data = R.encode_batch([R.topic(f"topic-{t:05d}", tid)]
                              + [R.partition(tid, p, reps) for p, reps in enumerate(assignment)])
        t1, c1 = time.perf_counter(), time.process_time()
        offset += 1
        d = MetadataDelta(image)
        d.replay_batch(R.decode_batch(data), offset, 1)
        image = d.apply()
        encode_s += t1 - t0
        replay_s += time.perf_counter() - t1
        replay_cpu += time.process_time() - c1
    gc.collect()
    grown = rss_bytes() - rss0
    n = topics * partitions
    emit(phase="build", partitions=n, topics=topics, brokers=brokers,
         encode_s=round(encode_s, 2), decode_replay_apply_s=round(replay_s, 2),
         decode_replay_apply_cpu_s=round(replay_cpu, 2),
         image_rss_mib=round(grown / 2**20, 1), bytes_per_partition=round(grown / n),
         peak_rss_mib=round(peak_rss_bytes() / 2**20, 1))
    return image


def one_topic_change(image: MetadataImage) -> None:
    topic = image.topic("topic-00000")
    assert topic is not None
    p0 = topic.partitions[0]
    reps = 1000
    change = R.partition_change(topic.id, 0, isr=p0.replicas[:2])
    t0 = time.perf_counter()
    for i in range(reps):
        d = MetadataDelta(image)
        d.replay(change, image.offset + 1 + i, 1)
        new = d.apply()
    per = (time.perf_counter() - t0) / reps
    assert image.partition(topic.id, 0) == p0 and new.partition(topic.id, 0) != p0
    emit(phase="one_partition_change", replay_apply_us=round(per * 1e6, 1),
         changes=len(d.changes().partitions_changed))


def load_in_child(path: str) -> None:
    gc.collect()
    with Timer() as t:
        image = read_snapshot(path)
    emit(phase="load", partitions=image.partition_count(), seconds=t.wall, cpu_s=t.cpu,
         peak_rss_mib=round(peak_rss_bytes() / 2**20, 1))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--topics", type=int, default=10_000)
    ap.add_argument("--partitions", type=int, default=100)
    ap.add_argument("--brokers", type=int, default=100)
    ap.add_argument("--load", metavar="SNAPSHOT", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.load:
        load_in_child(args.load)
        return
    image = build(args.topics, args.partitions, args.brokers)
    one_topic_change(image)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "metadata.snapshot")
        with Timer() as t:
            size = write_snapshot(image, path, created_ms=0)
        emit(phase="write", seconds=t.wall, cpu_s=t.cpu, mib=round(size / 2**20, 1),
             peak_rss_mib=round(peak_rss_bytes() / 2**20, 1))
        subprocess.run([sys.executable, "-m", "bench.metadata_image", "--load", path],
                       check=True)
        t0 = time.perf_counter()
        back = read_snapshot(path)
        read_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        same = back == image
        emit(phase="round_trip", equal=same, read_s=round(read_s, 2),
             compare_s=round(time.perf_counter() - t0, 2))
        info = read_info(path)
        mid = info.record_count // 2 // info.index_interval * info.index_interval
        t0 = time.perf_counter()
        got = sum(1 for _ in iter_records(path, mid + 1, mid + 1 + info.index_interval))
        emit(phase="range_read", records=got, start=mid + 1,
             seconds=round(time.perf_counter() - t0, 3))


if __name__ == "__main__":
    main()
