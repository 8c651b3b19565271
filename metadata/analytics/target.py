"""What a report is about: a snapshot file or a log directory, at one offset."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Target:
    """``offset`` is resolved: the snapshot's, or the one asked for in a directory (by
    default its end when the report started); every table is read at it."""

    path: str
    directory: bool
    offset: int
