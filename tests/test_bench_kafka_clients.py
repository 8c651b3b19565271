"""bench.kafka_clients' figures and its before/after comparison, without a cluster: the per-core
figure issue 31 asks for (messages per broker-CPU second), the client's CPU beside the
brokers', and a base measured by this tree's harness."""
from __future__ import annotations

import filecmp
import shutil

from bench.kafka_clients import REPO, base_tree, summaries, with_cpu

ISSUE_31_BASE = "2fc9982"


def _row(tree: str, r: int, msgs_per_s: float, brokers_cpu_s: float, client_cpu_s: float) -> dict:
    row = {"system": "confluent-kafka", "phase": "consume", "messages": 1_000_000, "msgs_per_s": msgs_per_s}
    return {**with_cpu(row, brokers_cpu_s, client_cpu_s, wall=5.0, value=256), "tree": tree, "round": r}


def test_a_row_carries_throughput_per_broker_core_and_the_clients_cpu() -> None:
    row = _row("this", 0, 200_000, brokers_cpu_s=2.0, client_cpu_s=4.5)
    assert row["msgs_per_broker_cpu_s"] == 500_000
    assert row["brokers_cpu_us_per_msg"] == 2.0 and row["client_cpu_us_per_msg"] == 4.5
    assert row["brokers_cores"] == 0.4 and row["client_cores"] == 0.9  # bounded by the client here


def test_the_summary_compares_messages_per_broker_cpu_second_round_by_round() -> None:
    rows = [_row("base", 0, 100_000, 4.0, 5.0), _row("this", 0, 110_000, 2.0, 5.0),
            _row("base", 1, 120_000, 5.0, 5.0), _row("this", 1, 120_000, 2.0, 4.0),
            _row("base", 2, 90_000, 4.0, 5.0), _row("this", 2, 100_000, 4.0, 5.0),
            {"tree": "base", "round": 1, "system": "cluster", "phase": "logs", "noteworthy_lines": 0}]
    [summary] = summaries(rows, 3)
    assert (summary["system"], summary["phase"]) == ("confluent-kafka", "consume")
    per_core = summary["msgs_per_broker_cpu_s"]
    assert per_core["base"] == 250_000 and per_core["this"] == 500_000
    assert per_core["paired_ratio"] == 2.0 and per_core["range"] == [1.0, 2.5] and per_core["pairs"] == 3
    assert summary["client_cpu_us_per_msg"]["paired_ratio"] == 1.0
    assert summary["msgs_per_s"]["range"] == [1.0, 1.11]
    [summary] = summaries(rows[1:], 3)  # the base's first run failed: two rounds pair
    assert summary["msgs_per_broker_cpu_s"]["pairs"] == 2 and summary["msgs_per_broker_cpu_s"]["base"] == 225_000


def test_the_base_is_measured_by_this_trees_harness() -> None:
    tree = base_tree(ISSUE_31_BASE)
    try:
        assert (tree / "brokerd").is_dir() and (tree / "protos" / "broker_pb2.py").is_file()
        for name in ("kafka_clients.py", "broker.py", "common.py"):
            assert filecmp.cmp(tree / "bench" / name, REPO / "bench" / name, shallow=False), name
    finally:
        shutil.rmtree(tree)


def test_the_client_cpu_bench_produces_through_the_stand_ins_produce_stream() -> None:
    """bench.client_cpu's broker stand-in serves ProduceStream, which the producer uses since
    84355ec (without it every Produce request failed and the run hung)."""
    import json
    import subprocess
    import sys
    out = subprocess.run([sys.executable, "-m", "bench.client_cpu", "--records", "3000"], cwd=REPO,
                         capture_output=True, text=True, timeout=120, check=True)
    rows = [json.loads(line) for line in out.stdout.splitlines()]
    assert [(r["phase"], r["records"]) for r in rows] == [("produce", 3000), ("consume", 3000)]


def test_librdkafkas_requests_batches_and_requests_in_flight_come_from_its_statistics() -> None:
    """``--requests``: each statistics' ``batchcnt`` window counts the batches made since the
    previous one, so they add up; the Produce requests are the brokers' cumulative ``req``
    counts (the bootstrap entries, node id -1, left out); in flight is ``waitresp_cnt``."""
    import json
    from bench.kafka_clients import RequestStats

    def stats(produces: tuple[int, int], waiting: tuple[int, int], batches: int) -> str:
        brokers = {f"b{i}": {"nodeid": i, "req": {"Produce": n}, "waitresp_cnt": w}
                   for i, (n, w) in enumerate(zip(produces, waiting, strict=True))}
        brokers["bootstrap"] = {"nodeid": -1, "req": {"Produce": 0}, "waitresp_cnt": 9}
        return json.dumps({"brokers": brokers, "topics": {"t": {"batchcnt": {"cnt": batches, "avg": 700}}}})
    s = RequestStats()
    s.config()["stats_cb"](stats((1, 1), (1, 0), 2))
    s.config()["stats_cb"](stats((3, 2), (2, 3), 4))
    assert s.figures() == {"client_produce_requests": 5, "batches_per_request": 1.2, "in_flight_mean": 3.0}


def test_our_consume_phase_is_timed_from_its_first_records_to_its_last(tmp_path) -> None:
    """The catch-up consumer runs in a process of its own: its start, its subscription and a
    wait for more records after the last are not counted (its brokers' CPU moved 2x between
    rounds when they were), as librdkafka's consume is timed from its first record."""
    import asyncio
    import time

    from bench.kafka_clients import pykraft_consume
    from clients import Producer
    from tests.brokercluster import BrokerCluster

    c = BrokerCluster(tmp_path, 1).start()
    try:
        async def produce() -> None:
            await c.wait_unfenced(timeout=60)
            await c.create_topic("catch-up", partitions=2, rf=1)
            async with Producer(c.bootstrap_servers) as p:
                for i in range(3000):
                    await p.send("catch-up", b"%d" % i)
                await p.flush()
        asyncio.run(produce())
        firsts: list[float] = []
        row = pykraft_consume(c.bootstrap_servers, "catch-up", 3000, 4,
                              on_first=lambda: firsts.append(time.monotonic()))
        returned = time.monotonic()
    finally:
        c.close()
    assert (row["messages"], row["complete"], len(firsts)) == (3000, True, 1)
    # it stopped at the 3000th record, not after the 10 s without records that end a short read
    assert returned - firsts[0] < 10


def test_each_client_produces_and_consumes_on_a_cluster_of_its_own(monkeypatch, tmp_path) -> None:
    """A produce phase that starts with empty RocksDB write buffers leaves its last memtable
    unflushed; in one shared cluster the second client's produce paid for flushing the first
    client's (two and a half memtables per broker against one). Each client's phases now run
    on a new cluster, stopped before the next client's starts."""
    import argparse
    import asyncio

    import bench.kafka_clients as kc

    events: list[tuple[str, ...]] = []

    class Cluster:
        broker_procs: dict = {}

        def __init__(self, n: int) -> None:
            self.name = f"cluster{n}"
            self.kafka_bootstrap_servers = self.bootstrap_servers = self.name

        def start(self) -> None:
            events.append(("start", self.name))

        async def wait_for_brokers(self, timeout: float) -> None:
            await asyncio.sleep(0)

        def stop(self) -> None:
            events.append(("stop", self.name))

    clusters = iter(range(2))
    monkeypatch.setattr(kc, "three_brokers", lambda base, extra, metrics=False: Cluster(next(clusters)))
    monkeypatch.setattr(kc, "fetch_conversion", lambda value: {})
    monkeypatch.setattr(kc, "emit", lambda row: None)
    monkeypatch.setattr(kc, "log_summary", lambda base: {})
    monkeypatch.setattr(kc, "create_topics", lambda where, names, n: events.append(("topics", where, *names)))

    def phase(name: str):
        def run(where: str, *args, **kwargs) -> dict:
            events.append((name, where))
            return {"messages": 10}
        return run
    monkeypatch.setattr(kc, "confluent_produce", phase("librdkafka produce"))
    monkeypatch.setattr(kc, "confluent_consume", phase("librdkafka consume"))
    monkeypatch.setattr(kc, "pykraft_consume", phase("our consume"))

    async def pykraft_produce(where: str, *args, **kwargs) -> dict:
        return phase("our produce")(where)
    monkeypatch.setattr(kc, "pykraft_produce", pykraft_produce)

    kc.run(argparse.Namespace(value=256, consumer_config=[], broker_config=[], requests=False, partitions=6,
                              keep=False, threads=False, windows=0, clients="both"))
    assert events == [("start", "cluster0"), ("topics", "cluster0", "bench-confluent"),
                      ("librdkafka produce", "cluster0"), ("librdkafka consume", "cluster0"), ("stop", "cluster0"),
                      ("start", "cluster1"), ("topics", "cluster1", "bench-pykraft"),
                      ("our produce", "cluster1"), ("our consume", "cluster1"), ("stop", "cluster1")]


def test_the_brokers_cpu_splits_by_thread_per_mb() -> None:
    """``--threads``: each phase's CPU per thread group of every broker (/proc/PID/task), added
    up over the brokers per MB of the phase's messages, largest first; a pool's numbered threads
    count as one name and a broker's main thread (its event loop) is ``main``."""
    import os
    import threading

    from bench.common import thread_cpu, thread_cpu_delta, thread_group
    from bench.kafka_clients import with_threads

    assert [thread_group(n) for n in ("rocksdb:low3", "rocksdb:high", "log-flush_0", "python")] == \
        ["rocksdb:low", "rocksdb:high", "log-flush", "python"]
    stop = threading.Event()

    def spin() -> None:  # a thread that burns CPU until told to stop
        while not stop.is_set():
            sum(range(1000))
    t = threading.Thread(target=spin)
    before = thread_cpu(os.getpid())
    t.start()
    deadline = os.times().elapsed + 30
    while sum(u for name, (u, _) in thread_cpu_delta(before, thread_cpu(os.getpid())).items()
              if name != "main") < 0.05:  # the thread is named as the process (python, pytest)
        assert os.times().elapsed < deadline
    stop.set()
    t.join()
    assert "main" in before  # this process's main thread, whatever the process is called
    row = {"messages": 4000, "phase": "produce"}  # 1.024 MB of 256-byte values
    by_thread = [{"main": (1.024, 0.512), "rocksdb:high": (0.1024, 0.0)}, {"main": (1.024, 0.0)}]
    out = with_threads(row, by_thread, 256)
    assert list(out["brokers_threads"]) == ["main", "rocksdb:high"]
    assert out["brokers_threads"]["main"] == {"user_ms_per_MB": 2000.0, "sys_ms_per_MB": 500.0, "cpu_s": 2.56}
    assert out["brokers_threads"]["rocksdb:high"]["user_ms_per_MB"] == 100.0
    assert out["per_broker_cpu_s"] == [1.64, 1.02]


def test_a_group_consumers_close_is_not_counted_in_its_phase(monkeypatch) -> None:
    """librdkafka's consume phase ends at its last record, as it starts at its first: the
    consumer's close (its offsets committed, the group left) costs the brokers once per
    consumer, 40-80 ms the first time in a broker process, not per record read."""
    import subprocess
    import sys
    import time

    import bench.kafka_clients as kc
    from bench.common import cpu_seconds

    calls: list[str] = []

    class Msg:
        def error(self) -> None:
            return None

        def value(self) -> bytes:
            return b"v"

    class FakeConsumer:
        def __init__(self, config: dict) -> None:
            self.left = 3

        def subscribe(self, topics: list[str]) -> None:
            pass

        def consume(self, num_messages: int, timeout: float) -> list[Msg]:
            n, self.left = min(num_messages, self.left), self.left - min(num_messages, self.left)
            return [Msg() for _ in range(n)]

        def close(self) -> None:
            calls.append("close")
    monkeypatch.setattr(kc, "Consumer", FakeConsumer)
    row = kc.confluent_consume("b", "t", 3, 1, on_first=lambda: calls.append("first"),
                               on_last=lambda: calls.append("last"))
    assert calls == ["first", "last", "close"] and row["complete"]

    # PhaseCpu.stop: what the "brokers" spend after it is not the phase's
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        class Cluster:
            broker_procs = {1: spinner}
        cpu = kc.PhaseCpu(Cluster())  # type: ignore[arg-type]

        def phase() -> dict:
            cpu.stop()
            start = cpu_seconds(spinner.pid)
            while cpu_seconds(spinner.pid) - start < 0.3:  # the close's work, after the last record
                time.sleep(0.01)
            return {"messages": 1000}
        row = cpu.of(phase, 256)
    finally:
        spinner.kill()
        spinner.wait()
    assert row["brokers_cpu_s"] < 0.2


def test_a_produce_window_reports_the_brokers_cpu_per_mb_and_per_request() -> None:
    """``--windows``: between two samples, the messages acknowledged, the brokers' CPU per MB in
    all and per thread group, the cores of the client and of everything else on the machine,
    and, with the request counts, records and CPU per Produce request."""
    from bench.kafka_clients import machine_busy_seconds, window_entry

    a = {"t": 10.0, "acked": 1000, "threads": {"main": (1.0, 0.5), "rocksdb:high": (0.1, 0.0)},
         "client": 2.0, "machine": 100.0, "rss_MB": [150.0], "produce_requests": 10}
    b = {"t": 15.0, "acked": 5000, "threads": {"main": (2.024, 0.5), "rocksdb:high": (0.2024, 0.0)},
         "client": 3.0, "machine": 104.0, "rss_MB": [160.0], "produce_requests": 14}
    w = window_entry(a, b, 256)  # 4000 messages: 1.024 MB
    assert (w["s"], w["msgs"], w["MBps"]) == (5.0, 4000, 0.2)
    assert w["brokers_ms_per_MB"] == 1100.0 and w["by_thread_ms_per_MB"] == {"main": 1000.0, "rocksdb:high": 100.0}
    assert (w["brokers_cores"], w["client_cores"], w["others_cores"]) == (0.23, 0.2, 0.37)
    assert w["records_per_request"] == 1000 and w["brokers_ms_per_request"] == 281.6
    assert w["rss_MB"] == [160.0]
    assert machine_busy_seconds() > 0
