"""docs/operations.md's table of server configuration keys, printed from the table the servers
read (``common.server_keys``), so that the documentation cannot drift from the code:

    python -m common.config_docs                         # print the table
    python -m common.config_docs --write docs/operations.md  # put it between the markers

tests/test_config_table.py fails when the file and the table differ."""
from __future__ import annotations

from collections.abc import Callable

import sys

from .config_def import BOTH, ConfigDef, ConfigKey
from .server_keys import SERVER_KEYS

START = "<!-- config-table: printed by python -m common.config_docs from common/server_keys.py; do not edit -->"
END = "<!-- config-table end -->"


def cell(text: str) -> str:
    """``text`` in a Markdown table cell."""
    return text.replace("|", "\\|")


def _default(key: ConfigKey) -> str:
    if key.default_doc is not None:
        return key.default_doc
    return "" if key.default is None else key.default


def table(keys: ConfigDef = SERVER_KEYS) -> str:
    """The keys as a Markdown table: key, role, default, dynamic, meaning."""
    rows = ["| key | role | default | dynamic | meaning |", "|---|---|---|---|---|"]
    for key in keys.values():
        role = "both" if key.role == BOTH else key.role
        rows.append(f"| `{key.name}` | {role} | {cell(_default(key))} | {'yes' if key.dynamic else ''} "
                    f"| {cell(key.doc)} |")
    return "\n".join(rows) + "\n"


def between_markers(text: str, start_marker: str, end_marker: str, body: str) -> str:
    """``text`` (a Markdown file) with what lies between its two marker lines replaced by ``body``."""
    head, start, rest = text.partition(start_marker + "\n")
    _, end, tail = rest.partition(end_marker)
    if not start or not end:
        raise ValueError(f"the markers {start_marker!r} and {end_marker!r} are missing")
    return head + start + body + end + tail


def with_table(text: str, keys: ConfigDef = SERVER_KEYS) -> str:
    """``text`` (a Markdown file) with the table between its markers replaced by ``table()``."""
    return between_markers(text, START, END, table(keys))


def table_command(argv: list[str], module: str, start: str, end: str, render: Callable[[], str]) -> int:
    """``python -m MODULE [--write FILE.md]``: print the table ``render`` makes, or write it
    between the markers of FILE.md (one way for every generated table in docs/)."""
    if argv[:1] == ["--write"] and len(argv) == 2:
        with open(argv[1], encoding="utf-8") as f:
            text = f.read()
        with open(argv[1], "w", encoding="utf-8") as f:
            f.write(between_markers(text, start, end, render()))
        return 0
    if argv:
        print(f"usage: python -m {module} [--write FILE.md]", file=sys.stderr)
        return 2
    sys.stdout.write(render())
    return 0


def main(argv: list[str]) -> int:
    return table_command(argv, "common.config_docs", START, END, table)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
