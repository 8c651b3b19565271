"""The application side of the embedding API, modelled on hashicorp/raft's FSM."""
from __future__ import annotations

from typing import Any, BinaryIO, Callable, Protocol

from .messages import Entry


class StateMachine(Protocol):
    def apply(self, entry: Entry) -> Any:
        """Apply one committed entry (``entry.index``, ``entry.term``, ``entry.data``), in log
        order, and return the result for its proposer.
        Must be deterministic: every node applies the same entries and must reach the same
        state. An exception raised here is handed to the proposer as the result; the entry
        still counts as applied."""

    def snapshot(self) -> Callable[[BinaryIO], None]:
        """Capture the state as of the last applied entry and return a function that writes
        it. The capture runs on the event loop and must be quick (a copy-on-write reference
        or a shallow copy); the returned writer runs in a thread while ``apply`` carries on,
        so it must not read state that later entries change."""

    def restore(self, source: BinaryIO) -> None:
        """Replace the whole state with a snapshot's contents."""
