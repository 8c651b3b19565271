"""A streaming query for tests/test_spark_topics.py to kill -9 and start again: a topic read
with ``kraft-topic`` (small micro-batches) into a Parquet sink, with a checkpoint.

    python -m tests.spark_topic_stream BOOTSTRAP TOPIC CHECKPOINT SINK
"""
from __future__ import annotations

import sys

from metadata.analytics.session import start


def main() -> None:
    bootstrap, topic, checkpoint, sink = sys.argv[1:5]
    spark = start("local[2]")
    query = (spark.readStream.format("kraft-topic").option("bootstrap.servers", bootstrap)
             .option("subscribe", topic).option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "300")
             .load().selectExpr("CAST(key AS STRING) AS key", "partition", "offset")
             .writeStream.format("parquet").option("checkpointLocation", checkpoint).option("path", sink)
             .trigger(processingTime="200 milliseconds").start())
    print("started", flush=True)
    while not query.awaitTermination(10):  # what it is doing, for the test's failure message
        progress = query.lastProgress or {}
        print(f"status: {query.status['message']}; last batch {progress.get('batchId')}: "
              f"{progress.get('numInputRows')} rows, {progress.get('durationMs')}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
