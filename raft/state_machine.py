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

    # Optional: ``prepare(entry) -> Callable[[], Any]``. For an entry of at least
    # ``NodeOptions.prepare_in_thread_bytes``, the node calls ``prepare`` in a worker thread
    # (as hashicorp/raft applies in a goroutine of its own, runFSM) and then, on the event loop,
    # the function it returns, whose result goes to the proposer as ``apply``'s would. No other
    # entry is applied meanwhile, so ``prepare`` may read what only ``apply`` changes; it must
    # change nothing itself. It keeps one large entry from stalling the loop: heartbeats and
    # requests go on while it is worked out.

    def snapshot(self) -> Callable[[BinaryIO], None]:
        """Capture the state as of the last applied entry and return a function that writes
        it. The capture runs on the event loop and must be quick (a copy-on-write reference
        or a shallow copy); the returned writer runs in a thread while ``apply`` carries on,
        so it must not read state that later entries change."""

    def restore(self, source: BinaryIO) -> None:
        """Replace the whole state with a snapshot's contents."""
