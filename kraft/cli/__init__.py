"""``kraft``: format storage, run a server, and administer the quorum the way a Kafka operator
does with kafka-storage.sh, kafka-server-start.sh, kafka-topics.sh, kafka-configs.sh and
kafka-metadata-quorum.sh. Every failure prints one line and exits non-zero.

This module is the ``kraft`` group and its start-up; each tool group has a module of its own
(storage, servers, topics, quorum, configs, acls, partitions, brokers, transactions), whose commands import
what they need when run, and MOUNTED names the commands imported only when run at all."""
from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

import click

from kraft.cli.acls import acls_command
from kraft.cli.brokers import broker_api_versions, delete_records, get_offsets, log_dirs
from kraft.cli.configs import configs
from kraft.cli.invocation import fail
from kraft.cli.partitions import leader_election, reassign_partitions
from kraft.cli.quorum import cluster, quorum
from kraft.cli.servers import dev_quorum, health, server_start
from kraft.cli.storage import storage
from kraft.cli.topics import topics
from kraft.cli.transactions import transactions

NO_ARGS_IS_HELP = getattr(click.exceptions, "NoArgsIsHelpError", ())  # click >= 8.2


class ToolGroup(click.Group):
    """The ``kraft`` group: a usage mistake is one line (with where to find the options), and
    an exception no command expected still ends in one line, never a traceback (each command
    turns the failures it knows into Kafka's error names)."""

    def main(self, args: Sequence[str] | None = None, prog_name: str | None = None,
             complete_var: str | None = None, standalone_mode: bool = True, **extra: Any) -> Any:
        """click's main, always in non-standalone mode so that every ending is handled here."""
        try:
            code = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)  # ctx.exit(n): n
            sys.exit(code if isinstance(code, int) else 0)
        except NO_ARGS_IS_HELP as e:  # `kraft` alone, or a group alone: its help, as click shows it
            click.echo(e.format_message(), err=True)
            sys.exit(e.exit_code)
        except click.UsageError as e:
            where = f" ('{e.ctx.command_path} -h' lists the options)" if e.ctx is not None else ""
            click.echo(f"Error: {e.format_message()}{where}", err=True)
            sys.exit(e.exit_code)
        except click.ClickException as e:
            click.echo(f"Error: {e.format_message()}", err=True)
            sys.exit(e.exit_code)
        except click.Abort:
            sys.exit(1)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *MOUNTED})

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name in MOUNTED and name not in self.commands:
            import importlib
            module, attribute, _ = MOUNTED[name]
            self.add_command(getattr(importlib.import_module(module), attribute), name)
        return super().get_command(ctx, name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """click's listing, with the mounted commands' lines from MOUNTED (nothing imported)."""
        names = self.list_commands(ctx)
        limit = formatter.width - 6 - max(map(len, names))
        rows = []
        for name in names:
            if name in MOUNTED and name not in self.commands:
                rows.append((name, MOUNTED[name][2]))
            elif (cmd := self.get_command(ctx, name)) is not None and not cmd.hidden:
                rows.append((name, cmd.get_short_help_str(limit)))
        with formatter.section("Commands"):
            formatter.write_dl(rows)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (click.ClickException, click.exceptions.Exit, click.Abort):
            raise
        except Exception as e:
            fail(f"unexpected {type(e).__name__}: {e} (a bug: please report it with the command that caused it)")


@click.group(cls=ToolGroup, context_settings={"help_option_names": ["-h", "--help"]})
def main() -> None:
    """Run and operate a KRaft-style metadata quorum."""


for command in (storage, server_start, health, dev_quorum, topics, quorum, cluster, configs, acls_command,
                get_offsets, delete_records, log_dirs, broker_api_versions, reassign_partitions, leader_election,
                transactions):
    main.add_command(command)


#: Commands that live in their own modules, imported when run: (module, attribute, the line
#: `kraft --help` shows, which would otherwise cost importing them all).
MOUNTED = {
    "analytics": ("metadata.analytics.cli", "analytics", "Spark analytics over metadata snapshots and logs."),
    "console-consumer": ("clients.console", "console_consumer", "Print the messages of TOPIC to stdout."),
    "console-producer": ("clients.console", "console_producer", "Send the lines of stdin to TOPIC."),
    "consumer-groups": ("clients.consumer_groups", "consumer_groups",
                        "List, describe, reset and delete consumer groups."),
    "dump-log": ("metadata.dump_log", "dump_log", "Decode metadata log segments and snapshots."),
    "dump-data": ("brokerd.dump_data", "dump_data", "Decode a partition's batches in a broker's log dir."),
    "web": ("kraft.web.command", "web", "Serve a web console for the cluster (overview, topics, messages, groups)."),
}
