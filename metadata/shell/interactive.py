"""The interactive shell: a prompt_toolkit session with tab completion of commands and tree
paths (readline style: Tab completes the common part, a second Tab lists the choices) and a
history that persists across sessions in ``~/.kraft_metadata_shell_history``
(``$KRAFT_METADATA_SHELL_HISTORY`` overrides it, e.g. for tests)."""
from __future__ import annotations

import os
import sys
from collections.abc import Iterable

from prompt_toolkit import PromptSession
from prompt_toolkit.completion import CompleteEvent, Completer, Completion
from prompt_toolkit.document import Document
from prompt_toolkit.history import FileHistory
from prompt_toolkit.shortcuts import CompleteStyle

from .commands import ExitShell, Shell, describe_source
from .paths import has_magic, lookup, normalize
from .tree import Directory

HISTORY_ENV = "KRAFT_METADATA_SHELL_HISTORY"
DEFAULT_HISTORY = "~/.kraft_metadata_shell_history"


def history_path() -> str:
    return os.path.expanduser(os.environ.get(HISTORY_ENV) or DEFAULT_HISTORY)


class PersistentHistory(FileHistory):
    """prompt_toolkit's file history that the ``history`` command can list, and that keeps
    the shell usable when the file cannot be written (a read-only home)."""

    def __init__(self, path: str) -> None:
        super().__init__(path)
        self.unwritable: str | None = None

    def load_history_strings(self) -> Iterable[str]:
        try:
            yield from super().load_history_strings()
        except OSError:
            return  # an unreadable history is an empty one

    def entries(self) -> list[str]:
        return list(reversed(list(self.load_history_strings())))

    def store_string(self, string: str) -> None:
        if self.unwritable is not None:
            return
        try:
            super().store_string(string)
        except OSError as e:
            self.unwritable = (f"history file {os.fsdecode(self.filename)}: {e.strerror}; "
                               f"history is not saved")
            sys.stderr.write(f"warning: {self.unwritable}\n")


class ShellCompleter(Completer):
    """Command names in first position, tree paths after a command that takes them."""

    def __init__(self, shell: Shell) -> None:
        self.shell = shell

    def get_completions(self, document: Document,
                        complete_event: CompleteEvent) -> Iterable[Completion]:
        segment = document.text_before_cursor.rsplit(";", 1)[-1]
        words = segment.split()
        current = "" if not words or segment[-1:].isspace() else words[-1]
        if len(words) == 0 or (len(words) == 1 and current):
            for name in sorted(self.shell.commands):
                if name.startswith(current):
                    yield Completion(name + " ", start_position=-len(current), display=name)
            return
        command = self.shell.commands.get(words[0])
        if command is None or not command.takes_paths or current.startswith("-"):
            return
        if has_magic(current):
            return
        yield from self._paths(current)

    def _paths(self, partial: str) -> Iterable[Completion]:
        parent, slash, prefix = partial.rpartition("/")
        directory = normalize(self.shell.cwd, parent or "/") if slash else self.shell.cwd
        node = lookup(self.shell.root(), directory)
        if not isinstance(node, Directory):
            return
        for name, child in node.children().items():
            if name.startswith(prefix):
                suffix = "/" if isinstance(child, Directory) else ""
                yield Completion(name + suffix, start_position=-len(prefix),
                                 display=name + suffix)


def run_interactive(shell: Shell, history: PersistentHistory) -> int:
    """Prompt until ``exit`` or end of input (Ctrl-D); Ctrl-C abandons the line typed."""
    session: PromptSession[str] = PromptSession(
        history=history, completer=ShellCompleter(shell),
        complete_style=CompleteStyle.READLINE_LIKE, complete_while_typing=False)
    shell.emit(f"[ metadata shell ] {describe_source(shell)}. Type 'help' for the commands.")
    while True:
        try:
            line = session.prompt(lambda: f"metadata:{shell.cwd}> ")
        except KeyboardInterrupt:
            continue
        except EOFError:
            break
        if not line.strip():
            continue
        try:
            shell.refresh()
            shell.run_line(line)
        except ExitShell:
            break
        except KeyboardInterrupt:  # a long `find /`, `changes /` or refresh: back to the prompt
            shell.err.write("interrupted\n")
    return 0
