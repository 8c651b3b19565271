"""The analytics command line: a click group ``analytics`` holding ``report`` and
``standalone start|stop`` (a Spark standalone cluster on this machine), for the main
``kraft`` CLI to mount (``kraft analytics report ...``); ``python -m
metadata.analytics.report`` runs the same command. Spark is only imported when a command
runs, so mounting the group costs the CLI nothing."""
from __future__ import annotations

import sys

import click

from metadata.analytics.errors import AnalyticsError
from metadata.analytics.report import FORMATS, ReportOptions, run
from metadata.analytics.standalone import standalone
from metadata.log_dir import MetadataLogError


@click.group("analytics")
def analytics() -> None:
    """Spark analytics over metadata snapshots and log directories."""


@analytics.command("report")
@click.option("--snapshot", metavar="PATH",
              help="A metadata snapshot file (plain, or a Raft .snap file).")
@click.option("--directory", metavar="DIR",
              help="A metadata log directory (a controller's metadata.log.dir).")
@click.option("--offset", type=click.IntRange(min=0), metavar="N",
              help="With --directory: report on the metadata as of this offset.")
@click.option("--output", metavar="DIR",
              help="Write the report's tables, summary.json (and plots) here.")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="parquet",
              show_default=True, help="Format of the tables written to --output.")
@click.option("--plots", is_flag=True, help="Also draw PNG charts into --output.")
@click.option("--master", metavar="URL",
              help="Spark master (default local[*], or what spark-submit was given).")
def report(snapshot: str | None, directory: str | None, offset: int | None,
           output: str | None, fmt: str, plots: bool, master: str | None) -> None:
    """Cluster health: load and skew per broker and rack, under-replicated, under-min-ISR
    and offline partitions, placement violations, topic and partition counts over time."""
    try:
        run(ReportOptions(snapshot, directory, offset, output, fmt, plots, master))
    except (AnalyticsError, MetadataLogError) as e:
        click.echo(f"error: {e}", err=True)
        sys.exit(1)


analytics.add_command(standalone)
