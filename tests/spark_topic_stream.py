"""A streaming query for tests/test_spark_topics.py to kill -9 and start again: a topic read
with ``kraft-topic`` (small micro-batches) into a Parquet sink, with a checkpoint.

    python -m tests.spark_topic_stream BOOTSTRAP TOPIC CHECKPOINT SINK

Prints ``started`` once its query runs, then its status every 10 s on stderr. Spark gives a
Python worker it starts 10 s to connect back (fixed in PythonWorkerFactory); on a busy
machine the data source's planner can miss that, and the query fails with "Python worker
failed to connect back" before reading anything. The job then starts the query again from its
checkpoint, as a supervisor would (docs/analytics.md, "Streaming").
"""
from __future__ import annotations

import faulthandler
import signal
import sys

from metadata.analytics.session import start

ATTEMPTS = 5


def main() -> None:
    bootstrap, topic, checkpoint, sink = sys.argv[1:5]
    faulthandler.register(signal.SIGUSR1)  # the test asks where the job is when it is late
    spark = start("local[2]")
    for attempt in range(1, ATTEMPTS + 1):
        try:
            query = (spark.readStream.format("kraft-topic").option("bootstrap.servers", bootstrap)
                     .option("subscribe", topic).option("startingOffsets", "earliest")
                     .option("maxOffsetsPerTrigger", "300").load()
                     .selectExpr("CAST(key AS STRING) AS key", "partition", "offset")
                     .writeStream.format("parquet").option("checkpointLocation", checkpoint).option("path", sink)
                     .trigger(processingTime="200 milliseconds").start())
            print("started", flush=True)
            while not query.awaitTermination(10):  # what it is doing, for the test's failure message
                progress = query.lastProgress or {}
                print(f"status: {query.status['message']}; last batch {progress.get('batchId')}: "
                      f"{progress.get('numInputRows')} rows, {progress.get('durationMs')}", file=sys.stderr, flush=True)
            return
        except Exception as e:
            if "failed to connect back" not in str(e) or attempt == ATTEMPTS:
                raise
            print(f"attempt {attempt}: {str(e).splitlines()[0]}; starting the query again", file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
