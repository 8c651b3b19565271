"""Text and JSON renderings of the tree for the shell's commands.

Text is for eyes and grep: a file's value on one line (strings as they are, everything else
as JSON), directories as indented blocks. JSON is for scripts; its shape depends only on the
command typed, never on how many paths a glob happened to match: one plain path gives the bare
result, globs or several paths an object keyed by path.
"""
from __future__ import annotations

import json
from collections.abc import Iterator

from ..record_json import format_time, record_to_dict
from .changes import ABSENT, PathChange
from .tree import Directory, File, JsonValue, Node


def value_text(value: JsonValue) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def json_text(value: JsonValue) -> str:
    return json.dumps(value, indent=2)


def long_entry(name: str, node: Node) -> dict[str, JsonValue]:
    """``ls -l``'s view of one entry."""
    if isinstance(node, Directory):
        return {"name": name, "type": "directory", "entries": len(node.children())}
    return {"name": name, "type": "file", "value": node.value}


def long_lines(entries: list[dict[str, JsonValue]]) -> Iterator[str]:
    width = max((len(e["name"]) + (e["type"] == "directory") for e in entries), default=0)
    for e in entries:
        if e["type"] == "directory":
            n = e["entries"]
            yield f"d  {e['name'] + '/':<{width}}  {n} {'entry' if n == 1 else 'entries'}"
        else:
            yield f"-  {e['name']:<{width}}  {value_text(e['value'])}"


def tree_lines(name: str, node: Node, indent: str = "") -> Iterator[str]:
    """``name/`` then the children indented below it, or ``name: value`` for a file."""
    if isinstance(node, File):
        yield f"{indent}{name}: {value_text(node.value)}"
        return
    yield f"{indent}{name}/"
    for child_name, child in node.children().items():
        yield from tree_lines(child_name, child, indent + "  ")


def _change_value(value: JsonValue) -> str:
    return "(absent)" if value is ABSENT else json.dumps(value)


def change_lines(change: PathChange) -> Iterator[str]:
    b = change.batch
    if change.record is not None:
        r = record_to_dict(change.record)
        cause = f"{r['type']} {json.dumps(r['data'])}"
    elif b.kind == "noop":
        cause = "no-op entry (a new leader's first entry)"
    elif b.kind == "membership":
        cause = "membership change entry"
    else:
        cause = "the entry itself (offset and epoch)"
    yield f"offset {b.offset}  term {b.term}  {format_time(b.append_time_ms)}  {cause}"
    for leaf in change.leaves:
        yield f"    {leaf.path}: {_change_value(leaf.before)} -> {_change_value(leaf.after)}"


def change_json(change: PathChange) -> dict[str, JsonValue]:
    b = change.batch
    files = []
    for leaf in change.leaves:
        item: dict[str, JsonValue] = {"path": leaf.path}
        if leaf.before is not ABSENT:
            item["before"] = leaf.before
        if leaf.after is not ABSENT:
            item["after"] = leaf.after
        files.append(item)
    return {"offset": b.offset, "term": b.term, "appendTimeMs": b.append_time_ms,
            "entry": b.kind,
            "record": None if change.record is None else record_to_dict(change.record),
            "files": files}
