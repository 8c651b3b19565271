"""The shell's commands and the state they share (``Shell``): Kafka's metadata-shell set
(cat, cd, exit, find, help, history, ls, man, pwd, tree) plus ``changes``, which shows how a
path changed between two offsets and which record changed it.

Every command parses its arguments with argparse, so ``help CMD`` is generated from the same
definition that parses. A failing command raises ``ShellError`` with one line; the caller
prints it as ``cmd: message`` and, in one-shot mode, stops with a non-zero exit code.
"""
from __future__ import annotations

import argparse
import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import NoReturn, Protocol, TextIO

from ..image import MetadataImage
from ..log_dir import MetadataLogError
from .changes import path_changes
from .paths import PathError, expand, has_magic, normalize
from .render import (change_json, change_lines, json_text, long_entry, long_lines, tree_lines,
                     value_text)
from .source import MetadataSource, SourceError
from .tree import Directory, File, JsonValue, Node, metadata_tree, to_json, walk


class ShellError(Exception):
    """A command failed; the message is one line."""


class ExitShell(Exception):
    """``exit`` was typed."""


class _HelpShown(Exception):
    """argparse printed ``--help``; the command is done."""


class CommandHistory(Protocol):
    """The commands typed so far, oldest first (persistent in interactive mode)."""

    def entries(self) -> list[str]: ...


class MemoryHistory:
    """The history of a one-shot or scripted run: only this run's commands."""

    def __init__(self) -> None:
        self._entries: list[str] = []

    def append(self, line: str) -> None:
        self._entries.append(line)

    def entries(self) -> list[str]:
        return list(self._entries)


class _Parser(argparse.ArgumentParser):
    """argparse that reports to the shell instead of exiting the process."""

    def __init__(self, shell_out: Callable[[], TextIO], **kw: object) -> None:
        super().__init__(allow_abbrev=False, **kw)  # type: ignore[arg-type]
        self._shell_out = shell_out

    def error(self, message: str) -> NoReturn:
        raise ShellError(f"{message} (see: help {self.prog})")

    def exit(self, status: int = 0, message: str | None = None) -> NoReturn:
        if status:
            raise ShellError(message.strip() if message else f"exit status {status}")
        raise _HelpShown()

    def _print_message(self, message: str, file: object = None) -> None:
        if message:
            self._shell_out().write(message)


@dataclass(frozen=True, slots=True)
class Command:
    name: str
    summary: str
    parser: argparse.ArgumentParser
    run: Callable[[Shell, argparse.Namespace], None]
    takes_paths: bool


class Shell:
    """The state commands share: the source, the image browsed, the working directory."""

    def __init__(self, source: MetadataSource, out: TextIO, err: TextIO, *,
                 at_offset: int | None = None, json_output: bool = False,
                 history: CommandHistory | None = None) -> None:
        self.source = source
        self.out, self.err = out, err
        self.json_output = json_output
        self.history: CommandHistory = history if history is not None else MemoryHistory()
        self.cwd = "/"
        # A fixed offset is resolved once; otherwise each command sees the source's newest
        # image (a live source moves on between commands).
        self._fixed = source.image_at(at_offset) if at_offset is not None else None
        self.commands = _commands(lambda: self.out)

    def image(self) -> MetadataImage:
        return self._fixed if self._fixed is not None else self.source.image()

    def root(self) -> Directory:
        return metadata_tree(self.image(), self.source.quorum)

    # -- running -------------------------------------------------------------------------------

    def refresh(self) -> None:
        """Let a live source catch up before a command line, so an interactive session follows
        the cluster. If it cannot, say so and keep the view already held: a quorum that is
        down for a moment should not end a session."""
        try:
            notes = list(self.source.refresh())
        except SourceError as e:
            notes = [f"{e}; still showing offset {self.source.image().offset}"]
        for note in notes:
            self.err.write(f"warning: {note}\n")
        self.err.flush()

    def run_line(self, line: str) -> bool:
        """Run the ``;``-separated commands of a line, stopping at the first that fails;
        False if one failed. ExitShell propagates."""
        try:
            commands = split_commands(line)
        except ShellError as e:
            self.err.write(f"{e}\n")
            return False
        return all(self.run(words) for words in commands)  # all() stops at the first failure

    def run(self, words: Sequence[str]) -> bool:
        name, args = words[0], list(words[1:])
        command = self.commands.get(name)
        try:
            if command is None:
                raise ShellError("unknown command (try: help)")
            options = command.parser.parse_args(args)
            command.run(self, options)
        except _HelpShown:
            pass
        except (ShellError, PathError, SourceError, MetadataLogError) as e:
            self.err.write(f"{name}: {e}\n")
            return False
        self.out.flush()
        return True

    # -- helpers for commands ------------------------------------------------------------------

    def emit(self, text: str) -> None:
        self.out.write(text + "\n")

    def emit_json(self, value: JsonValue) -> None:
        self.emit(json_text(value))

    def wants_json(self, options: argparse.Namespace) -> bool:
        return self.json_output or getattr(options, "json", False)

    def targets(self, patterns: Sequence[str]) -> list[tuple[str, Node]]:
        """Every path the patterns name, in order."""
        found: list[tuple[str, Node]] = []
        root = self.root()
        for pattern in patterns:
            found.extend(expand(root, self.cwd, pattern))
        return found


def split_commands(line: str) -> list[list[str]]:
    """A line's commands: shell words, split on unquoted ``;``."""
    lexer = shlex.shlex(line, posix=True, punctuation_chars=";")
    lexer.whitespace_split = True
    lexer.commenters = ""
    try:
        tokens = list(lexer)
    except ValueError as e:
        raise ShellError(f"syntax error: {e}") from None
    commands: list[list[str]] = [[]]
    for token in tokens:
        if token and set(token) == {";"}:
            commands.extend([] for _ in token)
        else:
            commands[-1].append(token)
    return [c for c in commands if c]


def _single(patterns: Sequence[str]) -> bool:
    """One plain path: JSON gives the bare result rather than an object keyed by path."""
    return len(patterns) == 1 and not has_magic(patterns[0])


# -- the commands --------------------------------------------------------------------------------

def _ls(shell: Shell, o: argparse.Namespace) -> None:
    patterns = o.paths or ["."]
    results: dict[str, JsonValue] = {}
    for path, node in shell.targets(patterns):
        if isinstance(node, Directory):
            items = node.children().items()
            results[path] = ([long_entry(n, c) for n, c in items] if o.long
                             else [n for n, _ in items])
        else:
            name = path.rsplit("/", 1)[-1]
            results[path] = [long_entry(name, node)] if o.long else [name]
    if shell.wants_json(o):
        shell.emit_json(next(iter(results.values())) if _single(patterns) else results)
        return
    many = len(results) > 1
    for k, (path, entries) in enumerate(results.items()):
        if many:
            shell.emit(("\n" if k else "") + f"{path}:")
        lines = long_lines(entries) if o.long else entries
        for line in lines:
            shell.emit(line)


def _cat(shell: Shell, o: argparse.Namespace) -> None:
    values: dict[str, JsonValue] = {}
    for path, node in shell.targets(o.paths):
        if not isinstance(node, File):
            raise ShellError(f"{path}: is a directory (tree shows everything under it)")
        values[path] = node.value
    if shell.wants_json(o):
        shell.emit_json(next(iter(values.values())) if _single(o.paths) else values)
    elif _single(o.paths):
        shell.emit(value_text(next(iter(values.values()))))
    else:
        for path, value in values.items():
            shell.emit(f"{path}: {value_text(value)}")


def _tree(shell: Shell, o: argparse.Namespace) -> None:
    patterns = o.paths or ["."]
    found = shell.targets(patterns)
    if shell.wants_json(o):
        shell.emit_json(to_json(found[0][1]) if _single(patterns)
                        else {path: to_json(node) for path, node in found})
        return
    for path, node in found:
        for line in tree_lines(path.rstrip("/"), node):  # the root prints as "/"
            shell.emit(line)


def _find(shell: Shell, o: argparse.Namespace) -> None:
    matches = []
    for start, node in shell.targets(o.paths or ["."]):
        for path, child in walk(node, start):
            if o.name is not None and not fnmatchcase(path.rsplit("/", 1)[-1], o.name):
                continue
            if o.type == "d" and not isinstance(child, Directory):
                continue
            if o.type == "f" and not isinstance(child, File):
                continue
            matches.append(path)
    if shell.wants_json(o):
        shell.emit_json(matches)
    else:
        for path in matches:
            shell.emit(path)


def _cd(shell: Shell, o: argparse.Namespace) -> None:
    found = shell.targets([o.path or "/"])
    if len(found) > 1:
        raise ShellError(f"{o.path}: matches {len(found)} paths; name one directory")
    path, node = found[0]
    if not isinstance(node, Directory):
        raise ShellError(f"{path}: not a directory")
    shell.cwd = path


def _pwd(shell: Shell, o: argparse.Namespace) -> None:
    shell.emit(shell.cwd)


def _history(shell: Shell, o: argparse.Namespace) -> None:
    entries = shell.history.entries()
    first = max(0, len(entries) - o.count) if o.count is not None else 0
    for i in range(first, len(entries)):
        shell.emit(f"{i + 1:>5}  {entries[i]}")


def _help(shell: Shell, o: argparse.Namespace) -> None:
    if o.command:
        command = shell.commands.get(o.command)
        if command is None:
            raise ShellError(f"{o.command}: no such command (try: help)")
        shell.out.write(command.parser.format_help())
        return
    shell.emit("Commands (help COMMAND for details):")
    for name, command in shell.commands.items():
        if name != command.name:
            continue  # an alias
        shell.emit(f"  {name:<9} {command.summary}")
    shell.emit("Paths are absolute or relative to the working directory; *, ? and [...] glob "
               "(quote them in your system shell). Separate commands with ';'.")


def _exit(shell: Shell, o: argparse.Namespace) -> None:
    raise ExitShell()


def _changes(shell: Shell, o: argparse.Namespace) -> None:
    if has_magic(o.path):
        raise ShellError(f"{o.path}: name one path, without glob characters (it may be a "
                         f"path that no longer exists)")
    path = normalize(shell.cwd, o.path)
    history = shell.source.history()
    if not history.batches:
        raise ShellError(shell.source.no_records_message(history))
    start = history.first_offset if o.start is None else o.start
    end = shell.image().offset if o.end is None else o.end
    for offset in (start, end):
        shell.source.check_offset(offset, history)
    if start > end:
        raise ShellError(f"FROM ({start}) is after TO ({end})")
    changes = list(path_changes(history, path, start, end))
    if shell.wants_json(o):
        shell.emit_json({"path": path, "from": start, "to": end,
                         "changes": [change_json(c) for c in changes]})
        return
    for change in changes:
        for line in change_lines(change):
            shell.emit(line)
    span = f"after offset {start} up to offset {end}"
    if not changes:
        shell.emit(f"no changes to {path} {span}")
    else:
        offsets = len({c.batch.offset for c in changes})
        shell.emit(f"{offsets} {'entry' if offsets == 1 else 'entries'} changed {path} {span}")


def _natural(what: str) -> Callable[[str], int]:
    """An argparse type for a non-negative integer named ``what`` in its error."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not {what}: {text!r}") from None
        if value < 0:
            raise argparse.ArgumentTypeError(f"not {what}: {value} is negative")
        return value
    return parse


def _commands(out: Callable[[], TextIO]) -> dict[str, Command]:
    table: dict[str, Command] = {}

    def command(name: str, summary: str, run: Callable[[Shell, argparse.Namespace], None],
                takes_paths: bool = False, description: str | None = None) -> _Parser:
        parser = _Parser(out, prog=name, description=description or summary)
        table[name] = Command(name, summary, parser, run, takes_paths)
        return parser

    def json_flag(p: _Parser) -> None:
        p.add_argument("--json", action="store_true", help="print JSON")

    p = command("cat", "Show the values of files.", _cat, True,
                "Show the values of files. One plain path prints the bare value; globs or "
                "several paths print 'path: value' lines (with --json, an object by path).")
    p.add_argument("paths", nargs="+", metavar="PATH")
    json_flag(p)

    p = command("cd", "Change the working directory.", _cd, True)
    p.add_argument("path", nargs="?", metavar="PATH", help="default: /")

    p = command("changes", "Show how a path changed between two offsets, and which record "
                "changed it.", _changes, True,
                "Show every change to the files at or under PATH made by the log entries after "
                "offset FROM up to offset TO, with the entry's offset, term and append time and "
                "the record that made it. PATH may be one that no longer exists (a deleted "
                "topic). FROM defaults to the oldest offset the source holds, TO to the image "
                "being browsed.")
    p.add_argument("path", metavar="PATH")
    p.add_argument("start", nargs="?", type=_natural("an offset"), metavar="FROM")
    p.add_argument("end", nargs="?", type=_natural("an offset"), metavar="TO")
    json_flag(p)

    command("exit", "Exit the shell.", _exit)

    p = command("find", "Search for paths under directories.", _find, True,
                "Print every path at or under each PATH (default: the working directory), "
                "optionally only those whose last component matches -name's glob pattern.")
    p.add_argument("paths", nargs="*", metavar="PATH")
    p.add_argument("-name", metavar="PATTERN", help="glob on the last path component")
    p.add_argument("-type", choices=("d", "f"), help="only directories (d) or files (f)")
    json_flag(p)

    p = command("help", "Show the commands, or one command's usage.", _help)
    p.add_argument("command", nargs="?", metavar="COMMAND")

    p = command("history", "Show the command history.", _history)
    p.add_argument("count", nargs="?", type=_natural("a count"), metavar="N",
                   help="only the last N")

    p = command("ls", "List directories.", _ls, True)
    p.add_argument("-l", "--long", action="store_true",
                   help="one line per entry with its type and value (files) or size (directories)")
    p.add_argument("paths", nargs="*", metavar="PATH")
    json_flag(p)

    p = command("man", "Show a command's usage.", _help)
    p.add_argument("command", metavar="COMMAND")

    command("pwd", "Print the working directory.", _pwd)

    p = command("tree", "Show directories with everything under them.", _tree, True)
    p.add_argument("paths", nargs="*", metavar="PATH")
    json_flag(p)

    table["quit"] = table["exit"]
    return table


def describe_source(shell: Shell) -> str:
    image = shell.image()
    return f"{shell.source.description}, at offset {image.offset} (epoch {image.epoch})"

