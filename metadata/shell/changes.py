"""How a path of the metadata tree changed between two offsets, and which record changed it.

The answer to "when did this partition lose broker 3 from its ISR, and why?": the history is
replayed batch by batch, the path's files compared before and after each batch, and a batch
that changed them is replayed again one record at a time to name the record responsible.
The entry itself (its offset and epoch) is reported apart from its records, so that
``/cluster/metadataOffset`` moving is not blamed on whichever record came first.

A path need not exist now: a deleted topic's history is still there to ask about. /quorum is
the source's state now, not part of the record history, so it never changes here.
"""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from ..delta import MetadataDelta
from ..image import MetadataImage
from ..log_dir import LogBatch
from ..records import MetadataRecord
from .paths import components, lookup
from .source import QuorumState, RecordHistory
from .tree import File, JsonValue, metadata_tree, natural_key, walk


class _Absent:
    """The value of a file that does not exist (distinct from a JSON null)."""

    def __repr__(self) -> str:
        return "(absent)"


ABSENT = _Absent()


@dataclass(frozen=True, slots=True)
class LeafChange:
    """One file under the path: its value before and after (``ABSENT`` if missing)."""

    path: str
    before: JsonValue
    after: JsonValue


@dataclass(frozen=True, slots=True)
class PathChange:
    """What one record (``None``: the Raft entry itself) of ``batch`` changed under the path."""

    batch: LogBatch
    record: MetadataRecord | None
    leaves: tuple[LeafChange, ...]


def _no_quorum() -> QuorumState:
    return QuorumState()


def leaves(image: MetadataImage, path: str) -> dict[str, JsonValue]:
    """Every file at or under ``path`` in ``image`` with its value; empty if it is absent."""
    node = lookup(metadata_tree(image, _no_quorum), path)
    if node is None:
        return {}
    return {p: n.value for p, n in walk(node, path) if isinstance(n, File)}


def diff(before: dict[str, JsonValue], after: dict[str, JsonValue]) -> tuple[LeafChange, ...]:
    paths = sorted(before.keys() | after.keys(),
                   key=lambda p: [natural_key(c) for c in components(p)])
    return tuple(LeafChange(p, before.get(p, ABSENT), after.get(p, ABSENT))
                 for p in paths if before.get(p, ABSENT) != after.get(p, ABSENT))


def path_changes(history: RecordHistory, path: str, start: int, end: int) -> Iterator[PathChange]:
    """The changes under ``path`` made by the batches in (start, end], in log order."""
    for batch, before, after in history.steps(start, end):
        old, new = leaves(before, path), leaves(after, path)
        if old == new:
            continue
        # The entry moves the image's offset and epoch whatever its records do.
        moved = leaves(before.at(after.offset, after.epoch), path)
        entry_changes = diff(old, moved)
        if entry_changes:
            yield PathChange(batch, None, entry_changes)
        if not batch.records:
            continue
        delta = MetadataDelta(before)
        previous = moved
        for record in batch.records:
            delta.replay(record, batch.offset, batch.term)
            current = leaves(delta.apply().at(after.offset, after.epoch), path)
            changed = diff(previous, current)
            if changed:
                yield PathChange(batch, record, changed)
            previous = current
