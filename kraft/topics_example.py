"""Spark over topics, end to end (``make topics-example``; docs/analytics.md, "Topics"): a local
quorum with three brokers, web-server log lines produced to a topic, then

1. a batch word count over the topic,
2. a streaming aggregation (requests per status code) with a checkpoint directory, written
   back to a topic, run twice: the second run starts from the checkpoint and reads only what
   arrived in between,
3. the results read back from that topic.

    python -m kraft.topics_example [--dir DIR] [--base-port P]
"""
from __future__ import annotations

import argparse
import asyncio
import random
import shutil
import tempfile
from pathlib import Path

from clients import Producer

from .dev_quorum import DevQuorum

STATUSES = ("200", "200", "200", "304", "404", "500")
PATHS = ("/", "/cart", "/search", "/orders", "/login")


async def produce_log_lines(bootstrap: str, n: int, seed: int) -> None:
    rnd = random.Random(seed)
    async with Producer(bootstrap, linger_ms=5) as p:
        futures = [await p.send("web-logs", f"GET {rnd.choice(PATHS)} {rnd.choice(STATUSES)}".encode(),
                                key=f"host-{rnd.randrange(8)}".encode()) for _ in range(n)]
        for f in futures:
            await f


def run(base: Path, base_port: int) -> None:
    from metadata.analytics.session import start

    q = DevQuorum(str(base / "quorum"), base_port, brokers=3)
    q.start()
    try:
        asyncio.run(q.wait_for_leader())
        asyncio.run(q.wait_for_brokers())
        for topic in ("web-logs", "status-counts"):
            p = q.kraft("topics", "--bootstrap-controller", q.bootstrap, "create", "--topic", topic,
                        "--partitions", "3", "--replication-factor", "3")
            if p.returncode:
                raise SystemExit(p.stderr.strip())
        asyncio.run(produce_log_lines(q.bootstrap_servers, 3000, seed=1))
        spark = start("local[2]")
        source = {"bootstrap.servers": q.bootstrap_servers, "subscribe": "web-logs"}

        print("== 1. batch: the words of every log line, counted")
        words = (spark.read.format("kraft-topic").options(**source).load()
                 .selectExpr("explode(split(CAST(value AS STRING), ' ')) AS word")
                 .groupBy("word").count().orderBy("count", ascending=False))
        words.show(8)

        print("== 2. streaming: requests per status, written to the topic status-counts")
        checkpoint = base / "checkpoint"

        def aggregate() -> None:
            (spark.readStream.format("kraft-topic").options(**source).option("startingOffsets", "earliest").load()
             .selectExpr("split(CAST(value AS STRING), ' ')[2] AS status").groupBy("status").count()
             .selectExpr("status AS key", "CAST(count AS STRING) AS value")
             .writeStream.format("kraft-topic").option("bootstrap.servers", q.bootstrap_servers)
             .option("topic", "status-counts").option("checkpointLocation", str(checkpoint))
             .outputMode("complete").trigger(availableNow=True).start().awaitTermination())
            # complete mode: each micro-batch writes every status's running count; a reader
            # takes the latest per key, as from a compacted topic

        aggregate()
        asyncio.run(produce_log_lines(q.bootstrap_servers, 1000, seed=2))
        aggregate()  # from the checkpoint: only the 1000 new lines are read; counts carry on

        print("== 3. the latest count per status, read back from status-counts")
        (spark.read.format("kraft-topic").option("bootstrap.servers", q.bootstrap_servers)
         .option("subscribe", "status-counts").load()
         .selectExpr("CAST(key AS STRING) AS status", "CAST(CAST(value AS STRING) AS INT) AS requests", "offset", "partition")
         .createOrReplaceTempView("counts"))
        spark.sql("SELECT status, max_by(requests, offset) AS requests FROM counts GROUP BY status "
                  "ORDER BY status").show()
        row = spark.sql("SELECT sum(r) FROM (SELECT max_by(requests, offset) AS r FROM counts "
                        "GROUP BY status)").first()
        assert row is not None, "an aggregate always has a row"
        total = row[0]
        print(f"{total} requests counted (4000 produced)")
        if total != 4000:
            raise SystemExit(f"the streaming counts add up to {total}, not 4000")
        spark.stop()
    finally:
        q.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", help="where the quorum and the checkpoint live (default: a new temp dir)")
    ap.add_argument("--base-port", type=int, default=19193)
    a = ap.parse_args()
    base = Path(a.dir or tempfile.mkdtemp(prefix="kraft-topics-"))
    try:
        run(base, a.base_port)
    finally:
        if not a.dir:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
