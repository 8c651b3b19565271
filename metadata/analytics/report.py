"""Cluster health report over a metadata snapshot or a metadata log directory, with Spark.

    python -m metadata.analytics.report --snapshot PATH | --directory DIR [--offset N]
        [--output DIR] [--format parquet|csv|json] [--plots] [--master URL]

    PYSPARK_PYTHON=.venv/bin/python .venv/bin/spark-submit --master 'local[*]' \\
        metadata/analytics/report.py --snapshot PATH

Also ``kraft analytics report`` (``metadata.analytics.cli``). Prints a one-screen summary;
with ``--output`` writes each table (load per broker and rack, each kind of problem, the
history) and ``summary.json``; with ``--plots`` also PNG charts. Any error is one line on
stderr and a non-zero exit. See docs/analytics.md.
"""
from __future__ import annotations

import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a file (spark-submit .../report.py): find the packages
    sys.path[0] = str(Path(__file__).resolve().parents[2])

import json
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, TextIO

from metadata.analytics.errors import AnalyticsError
from metadata.analytics.figures import Figures
from metadata.analytics.target import Target
from metadata.log_dir import MetadataLogDir, MetadataLogError, open_snapshot
from metadata.reassignments import Plan, plan_json
from metadata.snapshot import SnapshotError, read_info

PLAN_FILE = "reassignment.json"

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


FORMATS = ("parquet", "csv", "json")


@dataclass(frozen=True, slots=True)
class ReportOptions:
    snapshot: str | None = None
    directory: str | None = None
    offset: int | None = None
    output: str | None = None
    format: str = "parquet"
    plots: bool = False
    master: str | None = None


def resolve_target(opts: ReportOptions) -> Target:
    """Check the input before starting Spark (a missing file should not cost a JVM start),
    and find the offset reported on."""
    from metadata.analytics.log_view import check_offset

    if (opts.snapshot is None) == (opts.directory is None):
        raise AnalyticsError("give exactly one of --snapshot PATH and --directory DIR")
    if opts.format not in FORMATS:
        raise AnalyticsError(f"--format must be one of {', '.join(FORMATS)}")
    if opts.plots and not opts.output:
        raise AnalyticsError("--plots needs --output DIR to write the charts to")
    if opts.snapshot is not None:
        with open_snapshot(opts.snapshot) as f:
            try:
                info = read_info(f)
            except SnapshotError as e:
                raise MetadataLogError(str(e)) from None
        if opts.offset is not None and opts.offset != info.last_offset:
            raise AnalyticsError(f"{opts.snapshot} is a snapshot at offset {info.last_offset}; "
                                 f"--offset {opts.offset} needs a log directory (--directory)")
        return Target(opts.snapshot, False, info.last_offset)
    assert opts.directory is not None
    log = MetadataLogDir(opts.directory)
    return Target(opts.directory, True, check_offset(log, opts.offset))


def run(opts: ReportOptions, spark: SparkSession | None = None,
        out: TextIO = sys.stdout) -> Figures:
    """Compute, write and print the report; returns its figures. Errors are raised as
    AnalyticsError or MetadataLogError, with one line."""
    target = resolve_target(opts)
    try:
        from metadata.analytics.health import compute
    except ImportError as e:
        raise AnalyticsError(f"PySpark is not installed ({e}): install the analytics extra, "
                             "pip install 'pykraft[analytics]' (make venv does)") from None
    from metadata.analytics import session
    from metadata.analytics.summary import render

    own = spark is None
    try:
        if spark is None:
            spark = session.start(opts.master)
        health = compute(spark, target)
        tables = list(health.tables)
        drawn: list[str] = []
        if opts.output:
            write_tables(health.tables, opts.output, opts.format)
            write_summary(health.figures, opts.output)
            if health.plan:
                write_plan(health.plan, opts.output)
            if opts.plots:
                from metadata.analytics.plots import draw

                drawn = draw(health.figures, health.broker_load, opts.output)
        health.release()
        print(render(health.figures, kind="directory" if target.directory else "snapshot",
                     tables=tables, output=opts.output, fmt=opts.format, plots=drawn, moves=len(health.plan)),
              file=out, flush=True)
        return health.figures
    except (AnalyticsError, MetadataLogError):
        raise
    except Exception as e:
        if os.environ.get("KRAFT_ANALYTICS_DEBUG"):
            raise
        raise AnalyticsError(explain(e)) from None
    finally:
        if own and spark is not None:
            spark.stop()


def write_tables(tables: dict[str, DataFrame], output: str, fmt: str) -> None:
    """Each table as one file in ``output/<table>/`` (Spark's layout: part file and _SUCCESS),
    written side by side. CSV has no arrays: they are written as JSON text."""
    from pyspark.sql import functions as fn
    from pyspark.sql.types import ArrayType

    from metadata.analytics.health import concurrently

    def writer(name: str, df: DataFrame) -> Callable[[], None]:
        if fmt == "csv":
            df = df.select([fn.to_json(c.name).alias(c.name) if isinstance(c.dataType, ArrayType)
                            else fn.col(c.name) for c in df.schema.fields])
        return lambda: (df.coalesce(1).write.mode("overwrite").format(fmt)
                        .option("header", "true").save(os.path.join(output, name)))

    concurrently(*[writer(name, df) for name, df in tables.items()])


def write_plan(plan: Plan, output: str) -> None:
    """``reassignment.json``, the input of ``kraft reassign-partitions --execute``."""
    os.makedirs(output, exist_ok=True)
    with open(os.path.join(output, PLAN_FILE), "w") as f:
        f.write(plan_json(plan) + "\n")


def write_summary(figures: Figures, output: str) -> None:
    os.makedirs(output, exist_ok=True)
    with open(os.path.join(output, "summary.json"), "w") as f:
        json.dump(figures.to_json(), f, indent=2)
        f.write("\n")


_REASON = re.compile(r"(?:MetadataLogError|SnapshotError|AnalyticsError|RecordError): (.+)")
#: The last line of a Python traceback: what a worker raised.
_PYTHON_ERROR = re.compile(r"^\s*((?:\w+\.)*\w+(?:Error|Exception): .+)$", re.MULTILINE)


def explain(e: BaseException) -> str:
    """One line for an exception from Spark: the metadata error a task or the planner raised
    (Spark wraps it in pages of JVM and Python traces), else the Python error a worker
    raised, else the first line Spark gave."""
    text = str(e)
    java = getattr(e, "java_exception", None)
    if java is not None:
        try:
            text += "\n" + str(java.toString())
        except Exception:  # the JVM may be gone
            pass
    found = _REASON.search(text)
    if found:
        return found.group(1).strip()
    if "Traceback" in text:
        raised = _PYTHON_ERROR.findall(text.split("Traceback", 1)[1])
        if raised:
            return f"Spark failed: {raised[-1].strip()}"
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return f"Spark failed: {lines[0] if lines else type(e).__name__}"


def main(argv: list[str] | None = None) -> None:
    from metadata.analytics.cli import report

    report.main(args=argv, prog_name="python -m metadata.analytics.report")


if __name__ == "__main__":
    main()
