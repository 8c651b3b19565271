"""``metadata-shell``: browse a metadata snapshot, a controller's metadata log directory or a
running controller quorum as a file-system tree, like Kafka's ``kafka-metadata-shell.sh``.

    metadata-shell --snapshot FILE                    interactive
    metadata-shell --directory DIR -c 'ls /topics; cat /cluster/id'
    metadata-shell --directory DIR --at-offset 5 ls /topics
    metadata-shell --snapshot FILE < commands.txt     one command per line
    metadata-shell --bootstrap-controller HOST:PORT[,HOST:PORT...] cat /quorum/leader

One-shot and scripted runs stop at the first failing command and exit with 1; a source that
cannot be read (or a quorum that does not answer) exits with 1 after one line saying why.
"""
from __future__ import annotations

import os
import shlex
import sys
from collections.abc import Iterable

import click

from .commands import CommandHistory, ExitShell, MemoryHistory, Shell
from .source import MetadataSource, SourceError, open_source

SOURCES = "--snapshot FILE, --directory DIR or --bootstrap-controller HOST:PORT[,HOST:PORT...]"


@click.command(context_settings={"help_option_names": ["-h", "--help"],
                                 "ignore_unknown_options": True,
                                 "allow_interspersed_args": False})
@click.option("--snapshot", "-s", metavar="FILE",
              help="A metadata snapshot: a plain one or a Raft snapshot (*.snap).")
@click.option("--directory", "-d", metavar="DIR",
              help="A controller's metadata log directory: its newest snapshot plus the log "
                   "replayed to its end.")
@click.option("--bootstrap-controller", "-b", "bootstrap", metavar="HOST:PORT[,HOST:PORT...]",
              help="A running controller quorum, read live (committed metadata, read-only); "
                   "interactive mode refreshes before each command.")
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True), default=10.0,
              show_default=True, metavar="SECONDS",
              help="With --bootstrap-controller: how long to wait for the quorum to answer.")
@click.option("--command-config", type=click.Path(exists=True, dir_okay=False), metavar="FILE",
              help="With --bootstrap-controller: the client's security.protocol and ssl.* keys (TLS).")
@click.option("--at-offset", type=click.IntRange(min=0), metavar="N",
              help="Browse the image as it was at offset N (all entries up to N applied).")
@click.option("--json", "json_output", is_flag=True,
              help="JSON output for ls, cat, tree, find and changes.")
@click.option("-c", "--command", "commands", metavar="'CMD; CMD'",
              help="Run these commands and exit (non-zero if one fails).")
@click.argument("words", nargs=-1, type=click.UNPROCESSED, metavar="[COMMAND [ARGS]...]")
def main(snapshot: str | None, directory: str | None, bootstrap: str | None, timeout: float,
         command_config: str | None, at_offset: int | None, json_output: bool, commands: str | None,
         words: tuple[str, ...]) -> None:
    """Browse cluster metadata as a file-system tree (see docs/metadata-shell.md).

    With -c or a trailing COMMAND, runs it and exits; with commands on standard input (not
    a terminal), runs them one line at a time; otherwise starts an interactive shell."""
    if [snapshot, directory, bootstrap].count(None) != 2:
        raise click.UsageError(f"give exactly one of {SOURCES}")
    try:
        source = open_source(snapshot, directory, bootstrap, timeout, command_config)
    except SourceError as e:
        click.echo(f"metadata-shell: {e}", err=True)
        sys.exit(1)
    except KeyboardInterrupt:  # Ctrl-C while a quorum is being read
        sys.exit(130)
    try:
        _browse(source, at_offset, json_output, commands, words)
    finally:
        source.close()


def _browse(source: MetadataSource, at_offset: int | None, json_output: bool,
            commands: str | None, words: tuple[str, ...]) -> None:
    try:
        for warning in source.warnings():
            click.echo(f"warning: {warning}", err=True)
        one_shot = commands is not None or bool(words)
        interactive = not one_shot and sys.stdin.isatty() and sys.stdout.isatty()
        history: CommandHistory
        if interactive:
            # prompt_toolkit takes a third of a one-shot run's start-up: imported only here.
            from .interactive import PersistentHistory, history_path, run_interactive
            history = PersistentHistory(history_path())
        else:
            history = MemoryHistory()
        shell = Shell(source, sys.stdout, sys.stderr, at_offset=at_offset,
                      json_output=json_output, history=history)
    except SourceError as e:
        click.echo(f"metadata-shell: {e}", err=True)
        sys.exit(1)
    if interactive:
        assert isinstance(history, PersistentHistory)
        sys.exit(run_interactive(shell, history))
    assert isinstance(history, MemoryHistory)
    lines = [commands] if commands is not None else []
    if words:
        lines.append(" ".join(_quote(w) for w in words))
    try:
        code = _run_lines(shell, history, lines if one_shot else sys.stdin)
    except KeyboardInterrupt:
        code = 130
    except BrokenPipeError:  # `metadata-shell ... tree / | head`: the reader has gone
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        code = 1
    sys.exit(code)


def _run_lines(shell: Shell, history: MemoryHistory, lines: Iterable[str]) -> int:
    for line in lines:
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        history.append(line)
        try:
            if not shell.run_line(line):
                return 1
        except ExitShell:
            break
    return 0


def _quote(word: str) -> str:
    """Trailing arguments were already split by the caller's shell: keep each one a word."""
    return word if word == ";" else shlex.quote(word)


if __name__ == "__main__":
    main()
