"""What a report is about: a snapshot file or a log directory, at one offset."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Target:
    """``offset`` is resolved (the snapshot's, or the directory's end unless one was asked
    for); ``asked_offset`` is what the user gave, passed on to the data source."""

    path: str
    directory: bool
    offset: int
    asked_offset: int | None = None
