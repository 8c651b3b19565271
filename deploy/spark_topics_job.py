"""The docs' batch word count and streaming aggregation over ``kraft-topic``
(docs/analytics.md, "Topics"), as a driver on a Spark standalone cluster: in the compose
cluster, run in the spark-master container, reading what its stdin gives it (the image has
pykraft, not this file):

    docker-compose -f deploy/docker-compose.yml -f deploy/docker-compose.spark.yml exec -T spark-master \\
        python - --servers broker-4:9092,broker-5:9092,broker-6:9092 < deploy/spark_topics_job.py

Reads the topic ``--topic`` (default web-logs: lines "GET /path STATUS"), counts its words
(batch), counts requests per status with a streaming query up to the high watermarks
(Trigger.AvailableNow, a checkpoint on the workers' shared volume) written to
``--counts-topic``, reads the latest count per status back, and prints one JSON line: the
master, the number of executors, the word counts and the status counts.
"""
from __future__ import annotations

import argparse
import json

from pyspark.sql import functions as F

from metadata.analytics.session import start


def main() -> None:
    ap = argparse.ArgumentParser(description="word and status counts over a topic, on a Spark cluster")
    ap.add_argument("--servers", required=True, help="the brokers' gRPC listeners, HOST:PORT,...")
    ap.add_argument("--master", default="spark://spark-master:7077")
    ap.add_argument("--topic", default="web-logs")
    ap.add_argument("--counts-topic", default="status-counts")
    ap.add_argument("--checkpoint", default="/var/lib/spark/checkpoints/status-counts",
                    help="on a file system every executor shares (the compose volume spark-shared)")
    ap.add_argument("--max-offsets-per-trigger", default="400")
    a = ap.parse_args()

    spark = start(a.master)
    # A shuffle per executor core, not Spark's 200: each is a task, and a state store of the
    # streaming aggregation, in every micro-batch (session.start sizes it so on one machine only).
    spark.conf.set("spark.sql.shuffle.partitions", str(spark.sparkContext.defaultParallelism))
    source = {"bootstrap.servers": a.servers, "subscribe": a.topic}
    # Batch: a word count
    words = (spark.read.format("kraft-topic").options(**source).load()
             .selectExpr("explode(split(CAST(value AS STRING), ' ')) AS word").groupBy("word").count())
    word_counts = {r.word: r["count"] for r in words.collect()}
    # Streaming: an aggregation with a checkpoint, written back to a topic
    (spark.readStream.format("kraft-topic").options(**source).option("startingOffsets", "earliest")
     .option("maxOffsetsPerTrigger", a.max_offsets_per_trigger).load()
     .selectExpr("split(CAST(value AS STRING), ' ')[2] AS status").groupBy("status").count()
     .selectExpr("status AS key", "CAST(count AS STRING) AS value")
     .writeStream.format("kraft-topic").option("bootstrap.servers", a.servers).option("topic", a.counts_topic)
     .option("checkpointLocation", a.checkpoint).outputMode("complete")
     .trigger(availableNow=True).start().awaitTermination())
    latest = (spark.read.format("kraft-topic").option("bootstrap.servers", a.servers)
              .option("subscribe", a.counts_topic).load()
              .selectExpr("CAST(key AS STRING) AS status", "CAST(CAST(value AS STRING) AS INT) AS n", "offset")
              .groupBy("status").agg(F.max_by("n", "offset").alias("n")))
    status_counts = {r.status: r.n for r in latest.collect()}
    executors = spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size() - 1  # the driver's is listed too
    print(json.dumps({"master": spark.sparkContext.master, "executors": executors, "words": word_counts,
                      "statuses": status_counts}), flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
