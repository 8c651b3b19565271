"""The application side of the embedding API, modelled on hashicorp/raft's FSM.

Subclass :class:`StateMachine` to inherit the defaults of its optional methods (``prepare`` and
``prepare_restore``); a state machine that only has the methods by name (duck-typed, as before
they were part of the protocol) gets the same defaults from :func:`with_defaults`."""
from __future__ import annotations

import functools
import io
from typing import Any, BinaryIO, Callable, Protocol

from .messages import Entry


class StateMachine(Protocol):
    def apply(self, entry: Entry) -> Any:
        """Apply one committed entry (``entry.index``, ``entry.term``, ``entry.data``), in log
        order, and return the result for its proposer.
        Must be deterministic: every node applies the same entries and must reach the same
        state. An exception raised here is handed to the proposer as the result; the entry
        still counts as applied."""

    def prepare(self, entry: Entry) -> Callable[[], Any]:
        """For an entry of at least ``NodeOptions.prepare_in_thread_bytes``, the node calls
        this in a worker thread (as hashicorp/raft applies in a goroutine of its own, runFSM)
        and then, on the event loop, the function it returns, whose result goes to the
        proposer as ``apply``'s would. No other entry is applied meanwhile, so it may read
        what only ``apply`` changes; it must change nothing itself. It keeps one large entry
        from stalling the loop: heartbeats and requests go on while it is worked out.
        By default nothing is done in the thread: ``apply`` runs on the loop."""
        return functools.partial(self.apply, entry)

    def snapshot(self) -> Callable[[BinaryIO], None]:
        """Capture the state as of the last applied entry and return a function that writes
        it. The capture runs on the event loop and must be quick (a copy-on-write reference
        or a shallow copy); the returned writer runs in a thread while ``apply`` carries on,
        so it must not read state that later entries change."""

    def prepare_restore(self, source: BinaryIO) -> Callable[[], None]:
        """The first half of a restore, in a worker thread: read and decode the snapshot into
        a new state, leaving the current one untouched (it is still read meanwhile), and
        return the second half, which the node calls on the event loop to put the new state
        in place; that must be quick (an assignment). No entry is applied between the two,
        so a large snapshot no longer stalls heartbeats for as long as it takes to decode.
        By default only the bytes are read in the thread and ``restore`` runs on the loop."""
        data = source.read()
        return lambda: self.restore(io.BytesIO(data))

    def restore(self, source: BinaryIO) -> None:
        """Replace the whole state with a snapshot's contents."""


def with_defaults(sm: Any) -> StateMachine:
    """``sm`` itself when it subclasses :class:`StateMachine` (it inherits every default);
    otherwise a view of it that adds the defaults of the optional methods it lacks."""
    return sm if StateMachine in type(sm).__mro__ else _Completed(sm)


class _Completed(StateMachine):
    """A duck-typed state machine, with the protocol's defaults for what it does not define."""

    def __init__(self, sm: Any) -> None:
        self.sm = sm

    def apply(self, entry: Entry) -> Any:
        return self.sm.apply(entry)

    def prepare(self, entry: Entry) -> Callable[[], Any]:
        own = getattr(self.sm, "prepare", None)
        return own(entry) if own is not None else super().prepare(entry)

    def snapshot(self) -> Callable[[BinaryIO], None]:
        return self.sm.snapshot()

    def prepare_restore(self, source: BinaryIO) -> Callable[[], None]:
        own = getattr(self.sm, "prepare_restore", None)
        return own(source) if own is not None else super().prepare_restore(source)

    def restore(self, source: BinaryIO) -> None:
        self.sm.restore(source)
