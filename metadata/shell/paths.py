"""Paths in the metadata tree: normalizing them against the working directory, looking them
up, and expanding glob patterns (``*``, ``?``, ``[...]``) one component at a time, as a Unix
shell does, so ``ls /topics/orders-*/partitions`` works without walking the whole tree."""
from __future__ import annotations

from fnmatch import fnmatchcase

from .tree import Directory, Node, join


class PathError(Exception):
    """A path that does not lead anywhere; the message names it."""


def normalize(cwd: str, path: str) -> str:
    """An absolute path without ``.``, ``..``, repeated or trailing slashes."""
    parts: list[str] = []
    for part in (path if path.startswith("/") else f"{cwd}/{path}").split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            if parts:
                parts.pop()
        else:
            parts.append(part)
    return "/" + "/".join(parts)


def components(path: str) -> list[str]:
    return [p for p in path.split("/") if p]


def has_magic(path: str) -> bool:
    return any(c in path for c in "*?[")


def lookup(root: Directory, path: str) -> Node | None:
    """The node at an absolute, normalized path, or None."""
    node: Node = root
    for part in components(path):
        if not isinstance(node, Directory):
            return None
        child = node.children().get(part)
        if child is None:
            return None
        node = child
    return node


def resolve(root: Directory, path: str) -> Node:
    """The node at ``path`` (absolute, normalized); PathError saying what is missing."""
    node: Node = root
    walked = ""
    for part in components(path):
        if not isinstance(node, Directory):
            raise PathError(f"{walked}: not a directory")
        walked = join(walked, part)
        child = node.children().get(part)
        if child is None:
            raise PathError(f"{path}: no such file or directory")
        node = child
    return node


def expand(root: Directory, cwd: str, pattern: str) -> list[tuple[str, Node]]:
    """The paths matching ``pattern`` (relative to ``cwd``) with their nodes, in listing
    order; a pattern without glob characters is simply looked up. PathError if none match."""
    path = normalize(cwd, pattern)
    if not has_magic(path):
        return [(path, resolve(root, path))]
    matches: list[tuple[str, Node]] = [("/", root)]
    for part in components(path):
        following: list[tuple[str, Node]] = []
        for base, node in matches:
            if not isinstance(node, Directory):
                continue
            children = node.children()
            if has_magic(part):
                following.extend((join(base, name), child) for name, child in children.items()
                                 if fnmatchcase(name, part))
            elif part in children:
                following.append((join(base, part), children[part]))
        matches = following
        if not matches:
            break
    if not matches:
        raise PathError(f"{pattern}: no match")
    return matches
