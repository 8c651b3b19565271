"""Benchmark of the Spark health report against a plain Python pass, on one big snapshot.

    python -m bench.analytics [--partitions 1000000] [--brokers 100] [--racks 10]
                              [--cache /tmp/kraft-analytics-bench] [--master 'local[*]']

Builds (or reuses from the cache directory) a snapshot of ``partitions / 100`` topics of 100
partitions, RF 3, placed rack-aware on the brokers, with a sprinkling of problems (offline,
under-replicated, under-min-ISR partitions and rack violations) so that every part of the
report has work. Then, in the same run and on the same file:

- ``analytics-spark``: start Spark (``local[*]``), compute the report and write its tables
  (parquet) as ``python -m metadata.analytics.report --snapshot ... --output ...`` does;
- ``analytics-plain``: the same figures from one Python process streaming the snapshot;

and checks that both found the same figures. One JSON line per phase; ``seconds`` is wall
clock (the machine may be shared: compare runs, not single numbers).
"""
from __future__ import annotations

import argparse
import io
import json
import os
import tempfile
import time
import uuid

from metadata import records as R
from metadata.delta import MetadataDelta
from metadata.image import MetadataImage, ResourceType
from metadata.placement import UsableBroker, place_replicas
from metadata.snapshot import read_info, write_snapshot

PARTITIONS_PER_TOPIC = 100


def emit(**fields: object) -> None:
    print(json.dumps(fields), flush=True)


def build_image(partitions: int, brokers: int, racks: int) -> MetadataImage:
    """One CreateTopics batch per topic, replayed as a controller's log would be, with
    problems at fixed strides: every 10,000th partition offline, every 1,000th with one
    replica out of sync (under min ISR too in every 100th topic, which has
    min.insync.replicas 3), and every 50,000th partition with two replicas on one rack."""
    usable = [UsableBroker(b, f"rack-{b % racks}") for b in range(brokers)]
    delta = MetadataDelta(MetadataImage.empty("bench-analytics"))
    delta.replay_batch([R.feature_level("metadata.version", 3)]
                       + [R.register_broker(b.id, uuid.UUID(int=b.id + 1), 1,
                                            [R.endpoint("PLAINTEXT", f"broker-{b.id}", 9092)],
                                            rack=b.rack, fenced=False) for b in usable], 1, 1)
    topics = -(-partitions // PARTITIONS_PER_TOPIC)
    n = 0
    for t in range(topics):
        tid = uuid.UUID(int=(t + 1) << 64)
        count = min(PARTITIONS_PER_TOPIC, partitions - n)
        batch = [R.topic(f"topic-{t:06d}", tid)]
        for p, replicas in enumerate(place_replicas(usable, count, 3, start=t)):
            i = n + p
            if i % 50_000 == 7:  # a rack violation: a second replica on the leader's rack
                replicas = (replicas[0], (replicas[0] + racks) % brokers, replicas[2])
            if i % 10_000 == 3:
                batch.append(R.partition(tid, p, replicas, isr=[], leader=R.NO_LEADER))
            elif i % 1_000 == 5:
                batch.append(R.partition(tid, p, replicas, isr=replicas[:2]))
            else:
                batch.append(R.partition(tid, p, replicas))
        if t % 100 == 0:
            batch.append(R.config(ResourceType.TOPIC, f"topic-{t:06d}", "min.insync.replicas", "3"))
        delta.replay_batch(batch, t + 2, 1)
        n += count
    return delta.apply()


def snapshot_path(cache: str, partitions: int, brokers: int, racks: int) -> tuple[str, bool]:
    """The cached snapshot (built now if missing) and whether it was already there."""
    os.makedirs(cache, exist_ok=True)
    path = os.path.join(cache, f"bench-v2-{partitions}p-{brokers}b-{racks}r.snapshot")
    if os.path.exists(path):
        try:
            read_info(path)
            return path, True
        except Exception:
            os.unlink(path)  # a damaged cache entry: build it again
    t0 = time.perf_counter()
    image = build_image(partitions, brokers, racks)
    write_snapshot(image, path, created_ms=0)
    emit(bench="analytics-build", partitions=partitions,
         seconds=round(time.perf_counter() - t0, 2), mib=round(os.path.getsize(path) / 2**20, 1))
    return path, False


def spark_report(path: str, partitions: int, master: str):
    """Everything ``python -m metadata.analytics.report --snapshot PATH --output DIR`` does,
    timed by phase."""
    t0 = time.perf_counter()
    from metadata.analytics import session
    from metadata.analytics.health import compute
    from metadata.analytics.report import resolve_target, ReportOptions, write_summary, write_tables
    from metadata.analytics.summary import render

    with tempfile.TemporaryDirectory(prefix="kraft-analytics-bench-") as out:
        opts = ReportOptions(snapshot=path, output=out, master=master)
        target = resolve_target(opts)
        spark = session.start(master)
        t1 = time.perf_counter()
        health = compute(spark, target)
        t2 = time.perf_counter()
        write_tables(health.tables, out, opts.format)
        write_summary(health.figures, out)
        render(health.figures, kind="snapshot", tables=list(health.tables), output=out)
        t3 = time.perf_counter()
        parallelism = spark.sparkContext.defaultParallelism
        spark.stop()
    emit(bench="analytics-spark", partitions=partitions, seconds=round(t3 - t0, 2),
         start_s=round(t1 - t0, 2), compute_s=round(t2 - t1, 2), write_s=round(t3 - t2, 2),
         master=master, cores=parallelism)
    return health.figures


def plain_report(path: str, partitions: int):
    from metadata.analytics.plain import figures_of_snapshot
    from metadata.analytics.summary import render

    t0 = time.perf_counter()
    cpu = time.process_time()
    figures = figures_of_snapshot(path)
    render(figures, kind="snapshot")
    emit(bench="analytics-plain", partitions=partitions,
         seconds=round(time.perf_counter() - t0, 2), cpu_s=round(time.process_time() - cpu, 2))
    return figures


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--partitions", type=int, default=1_000_000)
    ap.add_argument("--brokers", type=int, default=100)
    ap.add_argument("--racks", type=int, default=10)
    ap.add_argument("--cache", default=os.path.join(tempfile.gettempdir(),
                                                    "kraft-analytics-bench"))
    ap.add_argument("--master", default="local[*]")
    args = ap.parse_args()
    path, cached = snapshot_path(args.cache, args.partitions, args.brokers, args.racks)
    info = read_info(path)
    emit(bench="analytics-snapshot", partitions=args.partitions, records=info.record_count,
         mib=round(os.path.getsize(path) / 2**20, 1), cached=cached, path=path)
    from metadata.analytics.figures import differences

    spark_figures = spark_report(path, args.partitions, args.master)
    plain_figures = plain_report(path, args.partitions)
    diff = differences(spark_figures, plain_figures)
    emit(bench="analytics-compare", partitions=args.partitions, same_figures=not diff,
         differences=diff[:5])
    buf = io.StringIO()
    from metadata.analytics.summary import render

    print(render(spark_figures, kind="snapshot"), file=buf)
    print(buf.getvalue(), end="")


if __name__ == "__main__":
    main()
