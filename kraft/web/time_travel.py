"""Metadata time travel: the metadata tree at any offset of the log, and what the records
between two offsets changed under a path. Both are metadata-shell's own code over the log
it fetches from the quorum (``metadata-shell --bootstrap-controller ... --at-offset N`` and
its ``changes`` command, docs/metadata-shell.md): the page lays out their answers."""
from __future__ import annotations

import io
import json
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from metadata.record_json import format_time
from metadata.shell.commands import Shell
from metadata.shell.paths import PathError, has_magic, normalize, resolve
from metadata.shell.render import long_entry, value_text
from metadata.shell.source import MetadataSource, SourceError
from metadata.shell.tree import Directory, join, metadata_tree

from .pages import bad_request, cluster_of, int_param, not_found, render


def _path(request: Request, default: str) -> str:
    """The one path asked about, absolute and normalized; globs are refused."""
    path = request.query_params.get("path", "").strip() or default
    if has_magic(path):
        raise bad_request(f"path {path!r}: name one path, without glob characters (*, ? or [)")
    return normalize("/", path)


def _at(source: MetadataSource, path: str, offset: int | None) -> dict[str, Any]:
    """The node at ``path`` in the image at ``offset`` (the newest when None), as ``ls -l``
    lists a directory and ``cat`` shows a file, with the offsets the history reaches."""
    history = source.history()
    try:
        image = source.image_at(offset) if offset is not None else source.image()
    except SourceError as e:  # an offset out of the history's reach
        raise bad_request(str(e)) from None
    try:
        node = resolve(metadata_tree(image, source.quorum), path)
    except PathError as e:
        raise not_found(f"{e} at offset {image.offset}") from None
    entries = value = None
    if isinstance(node, Directory):
        entries = [dict(long_entry(name, child), path=join(path, name)) for name, child in node.children().items()]
        for entry in entries:
            if "value" in entry:
                entry["text"] = value_text(entry["value"])
    else:
        value = value_text(node.value)
    return {"offset": image.offset, "first": history.first_offset, "last": history.last_offset,
            "entries": entries, "value": value}


async def tree(request: Request) -> Response:
    path = _path(request, "/")
    raw = request.query_params.get("offset", "").strip()
    offset = int_param(raw, "offset", 0, minimum=0) if raw else None
    shown = await cluster_of(request).metadata_log(lambda source: _at(source, path, offset))
    parents = [(p or "/", normalize("/", p or "/")) for p in _prefixes(path)]
    return render(request, "metadata.html", path=path, parents=parents, asked=raw, **shown)


def _prefixes(path: str) -> list[str]:
    """``/a/b`` -> ``["", "/a", "/a/b"]``: the breadcrumbs' targets."""
    parts = [p for p in path.split("/") if p]
    return [""] + ["/" + "/".join(parts[:i + 1]) for i in range(len(parts))]


def _changes(source: MetadataSource, path: str, start: int | None, end: int | None) -> dict[str, Any]:
    """The shell's ``changes --json PATH FROM TO`` (FROM defaults to the history's start, TO
    to the newest offset), run by the shell itself; its failure is one line, 400."""
    history = source.history()
    words = ["changes", "--json", path, str(history.first_offset if start is None else start)]
    if end is not None:
        words.append(str(end))
    out, err = io.StringIO(), io.StringIO()
    if not Shell(source, out, err).run(words):
        raise bad_request(err.getvalue().strip())
    answer = json.loads(out.getvalue())
    answer.update(first=history.first_offset, last=history.last_offset)
    return answer


async def changes(request: Request) -> Response:
    path = _path(request, "/topics")
    bounds = [request.query_params.get(k, "").strip() for k in ("from", "to")]
    start, end = (int_param(b, name, 0, minimum=0) if b else None for b, name in zip(bounds, ("from", "to"), strict=True))
    answer = await cluster_of(request).metadata_log(lambda source: _changes(source, path, start, end))
    for c in answer["changes"]:
        c["cause"] = _cause(c)
        c["append_time"] = format_time(c["appendTimeMs"])
        for f in c["files"]:
            f["before_text"] = json.dumps(f["before"]) if "before" in f else "(absent)"
            f["after_text"] = json.dumps(f["after"]) if "after" in f else "(absent)"
    return render(request, "metadata_changes.html", **answer)


def _cause(change: dict[str, Any]) -> str:
    """What made the change, in the words ``changes`` prints (metadata.shell.render.change_lines)."""
    record = change["record"]
    if record is not None:
        return f"{record['type']} {json.dumps(record['data'])}"
    return {"noop": "no-op entry (a new leader's first entry)",
            "membership": "membership change entry"}.get(change["entry"], "the entry itself (offset and epoch)")
