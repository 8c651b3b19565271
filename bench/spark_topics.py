"""Spark over topics, measured: the ``kraft-topic`` data source (clients/spark) reading a topic
into a DataFrame, beside our plain consumer client reading the same messages, in the same run
and the same three-broker cluster (replication factor 3).

    python -m bench.spark_topics --messages 1000000 --value 256 --partitions 6

Why (the issue): "read 1,000,000 messages of 256 bytes from 6 partitions into a DataFrame count
and into Parquet; target >= 100,000 messages/s on this 2-core machine, reported beside our plain
consumer client in the same run". A Spark job is only worth pointing at the brokers if it reads
at least about as fast as a plain consumer does.

The messages are produced first, as fast as our producer goes (``bench.kafka_clients``'
``pykraft_produce``: acks=all, idempotent, ``bench.broker.json_line`` values). JSON lines
(each with ``target_msgs_per_s``, ``seconds`` wall clock, MB/s of value bytes):
- ``pykraft-producer`` ``produce``: how the topic was filled (not a target of the issue);
- ``pykraft-consumer`` ``consume``: ``bench.broker``'s catch-up consumer (every partition,
  from the beginning, its own process; the clock stops at its last record);
- ``spark-kraft-topic`` ``startup``: Spark's start (JVM, session) and a warm-up read of a few
  records per partition (starts the Python workers); excluded from the rows below;
- ``spark-kraft-topic`` ``count``: ``load()`` then ``agg(count(*), sum(length(value)))``, which
  makes every row's value cross from the Python workers into the JVM (a bare ``count()`` over
  a pruned column could skip that); ``cpu_s`` the CPU seconds Spark used for it, split into
  ``jvm_cpu_s`` (of which ``jit_cpu_s``, the JIT compiler threads') and ``python_cpu_s`` (the
  Python workers);
- ``spark-kraft-topic`` ``count-again``: the same count once more, on a JVM whose JIT has
  compiled the read path in the first (steady state: what a longer job pays per record);
- ``spark-kraft-topic`` ``parquet``: ``load()`` written to Parquet in a temporary directory;
  its row count, read back afterwards (not timed), must equal the messages produced;
- ``spark-standalone`` ``startup``, ``count`` and ``count-again``: the same counts on a Spark standalone cluster
  on loopback (``metadata.analytics.standalone``: a master and ``--workers`` workers of one core
  and 512 MiB each, started while the topic is filled), in cluster mode (executors of their
  own; with ``--no-standalone``, skipped; with ``--no-local``, the ``local[*]`` rows are, for
  long reads on the cluster alone);
- ``per-core`` ``compare``: each reader's msgs/s per core it had (our consumer: one process,
  one core; Spark: its task slots, ``local[*]``'s or the executors' cores), and the standalone
  cluster's against our consumer's (``standalone_over_consumer``; target >= 0.8, issue 31);
  and the same per CPU second the reader used (``msgs_per_cpu_s``, ``*_over_consumer_cpu``:
  our consumer's process; Spark's JVM and Python workers, ``local[*]``'s whole JVM or the
  standalone executors, from /proc), which a machine shared with other work does not skew;
  ``standalone_again_over_consumer_cpu`` for the standalone ``count-again``;
- ``cluster`` ``logs``: WARNING/ERROR/Traceback lines in the controllers' and brokers' logs.

Spark runs ``local[*]``; the benchmark, Spark's JVM and Python workers, 3 controllers and 3
brokers share this machine's cores, which bounds what is measured here (``load_average``).
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

from metadata.analytics.standalone import EXECUTOR_MEMORY, StandaloneCluster

from .common import REPO, emit, free_ports, three_brokers
from .kafka_clients import create_topics, pykraft_produce, stop_cluster

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

TARGET = {"target_msgs_per_s": 100_000}
TOPIC = "bench-spark"


def _row(system: str, phase: str, n: int, nbytes: int, seconds: float, **extra: Any) -> dict[str, Any]:
    return {"system": system, "phase": phase, "messages": n, "msgs_per_s": round(n / seconds) if seconds else 0,
            "MBps": round(nbytes / seconds / 1e6, 2) if seconds else 0, "seconds": round(seconds, 2), **extra,
            **TARGET, "load_average": round(os.getloadavg()[0], 2)}


#: Threads of a JVM whose CPU is its JIT compilers' (Linux truncates names to 15 characters).
JIT_THREADS = ("C1 CompilerThre", "C2 CompilerThre")


def _cpu(stat: str, own: bool = False) -> float:
    """utime + stime, and the reaped children's unless ``own``, of a /proc stat line, in seconds."""
    return sum(int(f) for f in stat.rsplit(")", 1)[1].split()[11:13 if own else 15]) / os.sysconf("SC_CLK_TCK")


def _processes(own: bool = False) -> dict[int, tuple[int, float, str]]:
    """pid -> (parent pid, CPU seconds: user + system, its reaped children's included unless
    ``own``, command name), /proc."""
    out = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                stat = Path(f"/proc/{name}/stat").read_text()
            except OSError:  # gone meanwhile
                continue
            out[int(name)] = (int(stat.rsplit(")", 1)[1].split()[1]), _cpu(stat, own),
                              stat[stat.index("(") + 1:stat.rindex(")")])
    return out


def _jit_seconds(pid: int) -> float:
    """CPU seconds of a JVM's JIT compiler threads."""
    total = 0.0
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            try:
                stat = Path(f"/proc/{pid}/task/{tid}/stat").read_text()
            except OSError:
                continue
            if stat[stat.index("(") + 1:stat.rindex(")")].startswith(JIT_THREADS):
                total += _cpu(stat)
    except OSError:
        pass
    return total


def _tree(table: dict[int, tuple[int, float, str]], roots: list[int],
          include_roots: bool) -> dict[int, tuple[int, float, str]]:
    """The rows of ``table`` (``_processes``) of ``roots``' descendants, and of the roots if
    asked: a Spark JVM and its Python workers, or a standalone worker's executors."""
    children: dict[int, list[int]] = {}
    for pid, (parent, _, _) in table.items():
        children.setdefault(parent, []).append(pid)
    out = {}
    todo = list(roots)
    while todo:
        pid = todo.pop()
        if pid in table and (include_roots or pid not in roots):
            out[pid] = table[pid]
        todo += children.get(pid, [])
    return out


class TreeCPU:
    """CPU seconds a process tree uses between ``start`` and ``stop``, from samples every
    ``interval`` seconds. Why not the tree's CPU, its reaped children's included, at both ends: a process that exits meanwhile
    takes its CPU with it unless a process of the tree reaps it, and Spark's Python workers
    do exit (in 1,500,000-record counts, the second one's ``python_cpu_s`` came out at -0.23
    and -0.65 s). Here each process counts up to its last sample (a process that lives
    less than ``interval`` is missed), by its own CPU, its reaped children's left out since
    they were counted themselves."""

    def __init__(self, roots: Callable[[], list[int]], *, include_roots: bool = True, interval: float = 0.2) -> None:
        self.roots, self.include_roots, self.interval = roots, include_roots, interval
        self.first: dict[tuple[int, str], float] = {}
        self.last: dict[tuple[int, str], tuple[float, str]] = {}
        self.jit_first: dict[int, float] = {}
        self._done = threading.Event()
        self._thread: threading.Thread | None = None

    def _sample(self, initial: bool = False) -> None:
        for pid, (_, cpu, name) in _tree(_processes(own=True), self.roots(), self.include_roots).items():
            key = (pid, _start_time(pid))
            self.first.setdefault(key, cpu if initial else 0.0)  # born after start: all of its CPU
            self.last[key] = (cpu, name)

    def start(self) -> None:
        self._sample(initial=True)
        for (pid, _), (_, name) in self.last.items():
            if name == "java":
                self.jit_first[pid] = _jit_seconds(pid)
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._done.wait(self.interval):
            self._sample()

    def stop(self) -> dict[str, float]:
        """CPU seconds used since ``start``: ``total``, split by process into ``jvm`` and
        ``python``; ``jit`` is the JVMs' compiler threads' part of ``jvm``, a cost of fresh JVMs
        (and of new generated code) rather than of each record."""
        self._done.set()
        if self._thread is not None:
            self._thread.join()
        self._sample()
        out = {"total": 0.0, "jvm": 0.0, "jit": 0.0, "python": 0.0}
        for key, (cpu, name) in self.last.items():
            used = cpu - self.first[key]
            out["total"] += used
            if name == "java":
                out["jvm"] += used
                out["jit"] += _jit_seconds(key[0]) - self.jit_first.get(key[0], 0.0)
            elif name.startswith("python"):
                out["python"] += used
        return out


def _start_time(pid: int) -> str:
    """When ``pid`` started (clock ticks since boot), which tells a reused pid apart."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except OSError:
        return ""


def consume(bootstrap: str, expected: int, value: int) -> dict[str, Any]:
    """``bench.broker``'s catch-up consumer, in its own process."""
    p = subprocess.run([sys.executable, "-m", "bench.broker", "--role", "catch-up", "--bootstrap", bootstrap,
                        "--topic", TOPIC, "--value", str(value)], cwd=REPO, capture_output=True, text=True,
                       timeout=300, check=False)
    if p.returncode:
        raise RuntimeError(f"the catch-up consumer failed: {p.stderr.strip()[-2000:]}")
    c = json.loads(p.stdout.strip().splitlines()[-1])
    return _row("pykraft-consumer", "consume", c["consumed"], c["bytes"], c["elapsed"], expected=expected,
                complete=c["consumed"] == expected, cpu_s=round(c["cpu_s"], 2))


def _topic(spark: SparkSession, bootstrap: str, most: int, **options: str) -> DataFrame:
    reader = spark.read.format("kraft-topic").option("bootstrap.servers", bootstrap).option("subscribe", TOPIC)
    if most:
        reader = reader.option("maxRecordsPerPartition", str(most))
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


def spark_reads(bootstrap: str, args: argparse.Namespace, expected: int, spark_box: list[Any],
                system: str = "spark-kraft-topic", master: str | None = None, parquet: bool = True,
                executors: StandaloneCluster | None = None) -> dict[str, Any]:
    """Start a session on ``master`` (None: ``local[*]``), warm it up, then time the reads;
    returns the ``count`` row, with the CPU seconds Spark used for it (``executors``' processes,
    or without them the session's JVM and its Python workers)."""
    from pyspark.sql import functions as F

    from metadata.analytics import session

    start = time.perf_counter()
    spark = session.start(master)
    spark_box.append(spark)
    started = time.perf_counter() - start
    few = json.dumps({TOPIC: {str(p): 100 for p in range(args.partitions)}})
    start = time.perf_counter()
    _topic(spark, bootstrap, 0, endingOffsets=few).agg(F.sum(F.length("value"))).collect()
    warm = time.perf_counter() - start
    spark_row = {"max_records_per_partition": args.max_records_per_partition or None,
                 "master": spark.sparkContext.master, "cores": spark.sparkContext.defaultParallelism,
                 "spark_startup_s": round(started + warm, 2)}
    emit({"system": system, "phase": "startup", "session_s": round(started, 2),
          "warmup_s": round(warm, 2), "seconds": round(started + warm, 2),
          "load_average": round(os.getloadavg()[0], 2)})

    def cpu() -> TreeCPU:
        if executors is not None:
            return TreeCPU(executors.worker_pids, include_roots=False)
        gateway = spark.sparkContext._gateway  # its JVM, which py4j started as a child of ours
        return TreeCPU(lambda: [gateway.proc.pid] if gateway is not None else [])

    def timed_count(phase: str) -> dict[str, Any]:
        start, sampled = time.perf_counter(), cpu()
        sampled.start()
        n, nbytes = _topic(spark, bootstrap, args.max_records_per_partition).agg(
            F.count(F.lit(1)), F.sum(F.length("value"))).collect()[0]
        elapsed, used = time.perf_counter() - start, sampled.stop()
        split = {f"{k}_cpu_s": round(v, 2) for k, v in used.items() if k != "total"}
        row = _row(system, phase, n, nbytes or 0, elapsed, expected=expected, complete=n == expected,
                   cpu_s=round(used["total"], 2), **split, **spark_row)
        emit(row)
        return row

    count = timed_count("count")
    count["again"] = timed_count("count-again")
    if not parquet:
        return count

    out = tempfile.mkdtemp(prefix="spark-topics-parquet")
    try:
        start = time.perf_counter()
        _topic(spark, bootstrap, args.max_records_per_partition).write.mode("overwrite").parquet(out + "/t")
        elapsed = time.perf_counter() - start
        written = spark.read.parquet(out + "/t").count()
        emit(_row("spark-kraft-topic", "parquet", written, written * args.value, elapsed, expected=expected,
                  complete=written == expected, **spark_row))
    finally:
        shutil.rmtree(out, ignore_errors=True)
    return count


def per_core(consumer: dict[str, Any], local: dict[str, Any] | None, standalone: dict[str, Any] | None) -> dict[str, Any]:
    """msgs/s per core each reader had: our consumer is one process on one core; Spark has
    its task slots (local[*]'s cores, or the executors')."""
    rates = {"pykraft_consumer": consumer["msgs_per_s"],
             **({"spark_local": round(local["msgs_per_s"] / local["cores"])} if local else {}),
             **({"spark_standalone": round(standalone["msgs_per_s"] / standalone["cores"])} if standalone else {})}
    row: dict[str, Any] = {"system": "per-core", "phase": "compare", "msgs_per_s_per_core": rates}
    if local:
        row["local_over_consumer"] = round(rates["spark_local"] / rates["pykraft_consumer"], 2)
    readers = {"pykraft_consumer": consumer, **({"spark_local": local} if local else {}),
               **({"spark_standalone": standalone} if standalone else {})}
    per_cpu = {name: round(r["messages"] / r["cpu_s"]) if r.get("cpu_s") else 0 for name, r in readers.items()}
    row["msgs_per_cpu_s"] = per_cpu
    if per_cpu["pykraft_consumer"] and local:
        row["local_over_consumer_cpu"] = round(per_cpu["spark_local"] / per_cpu["pykraft_consumer"], 2)
    if standalone:
        row["standalone_over_consumer"] = round(rates["spark_standalone"] / rates["pykraft_consumer"], 2)
        if per_cpu["pykraft_consumer"]:
            again = standalone["again"]
            row["standalone_over_consumer_cpu"] = round(per_cpu["spark_standalone"] / per_cpu["pykraft_consumer"], 2)
            if again.get("cpu_s"):  # the same count on executors whose JIT has compiled the read path
                row["standalone_again_over_consumer_cpu"] = round(
                    again["messages"] / again["cpu_s"] / per_cpu["pykraft_consumer"], 2)
        row["target_standalone_over_consumer"] = 0.8
    return {**row, "load_average": round(os.getloadavg()[0], 2)}


def run(args: argparse.Namespace) -> None:
    base = Path(tempfile.mkdtemp(prefix="sparkbench"))
    cluster = three_brokers(base)
    spark_box: list[Any] = []
    cluster.start()
    standalone = None
    if args.standalone:  # its JVMs start while the topic fills
        port, webui = free_ports(2)
        standalone = StandaloneCluster(Path(tempfile.mkdtemp(prefix="sparkbench-standalone")), port=port,
                                       webui_port=webui, workers=args.workers)
        os.environ["SPARK_EXECUTOR_MEMORY"] = EXECUTOR_MEMORY
    pool = ThreadPoolExecutor(1)
    standalone_up = pool.submit(standalone.start) if standalone else None
    try:
        asyncio.run(cluster.wait_for_brokers(timeout=90))
        create_topics(cluster.kafka_bootstrap_servers, [TOPIC], args.partitions)
        grpc = cluster.bootstrap_servers
        produced = asyncio.run(pykraft_produce(grpc, TOPIC, argparse.Namespace(
            messages=args.messages, seconds=0.0, value=args.value, partitions=args.partitions)))
        for k in ("target_produce_msgs_per_s", "target_consume_msgs_per_s"):
            produced.pop(k, None)
        rate = produced["msgs_per_s"]  # the helper's row has no elapsed time: derived from the rate
        emit({**produced, "system": "pykraft-producer",
              "seconds": round(produced["messages"] / rate, 2) if rate else None,
              "load_average": round(os.getloadavg()[0], 2)})
        expected = produced["messages"]
        consumer = consume(grpc, expected, args.value)
        emit(consumer)
        local = spark_reads(grpc, args, expected, spark_box) if args.local else None
        on_cluster = None
        if standalone_up is not None:
            if spark_box:
                spark_box.pop().stop()  # one SparkContext per driver: local mode's ends first
            on_cluster = spark_reads(grpc, args, expected, spark_box, "spark-standalone", standalone_up.result(),
                                     parquet=False, executors=standalone)
        emit(per_core(consumer, local, on_cluster))
    finally:
        for spark in spark_box:
            spark.stop()
        if standalone is not None:
            if standalone_up is not None:
                standalone_up.exception()  # started (or failed) before it is stopped
            standalone.stop()
            shutil.rmtree(standalone.directory, ignore_errors=True)
        pool.shutdown()
        stop_cluster(cluster, base, args.keep)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--messages", type=int, default=1_000_000)
    ap.add_argument("--value", type=int, default=256, help="value bytes")
    ap.add_argument("--partitions", type=int, default=6)
    ap.add_argument("--max-records-per-partition", type=int, default=0,
                    help="the source's maxRecordsPerPartition (0: not set, one Spark task per topic partition)")
    ap.add_argument("--no-standalone", dest="standalone", action="store_false",
                    help="skip the Spark standalone cluster's read")
    ap.add_argument("--no-local", dest="local", action="store_false",
                    help="skip the local[*] reads (count, count-again, Parquet): for long reads on the standalone "
                         "cluster alone")
    ap.add_argument("--workers", type=int, default=2, help="the standalone cluster's workers (one core each)")
    ap.add_argument("--keep", action="store_true", help="keep the cluster's directory (logs, data)")
    run(ap.parse_args())


if __name__ == "__main__":
    main()
