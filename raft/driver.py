"""The one place that handles a :class:`~raft.messages.Ready` in the order its contract
gives, shared by the asyncio node (``raft.node``), the simulator (``raft.testing.sim``) and
the scenario network (``raft.testing.network``), so that what the simulator proves is what
the node does.

``handle_ready`` is a coroutine. The node awaits it on its event loop; the simulator steps it
by hand (``coroutine.send``), so a persist that the simulator delays, or loses in a crash,
suspends it exactly where a real fsync would.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from .core import RaftCore
from .messages import EARLY_TYPES, Entry, Message, Ready, Role, Snapshot, SoftState


class Runtime(Protocol):
    """What a runtime does for each step of a Ready."""

    def send(self, msgs: list[Message]) -> None: ...

    def soft_state_changed(self, soft: SoftState) -> None: ...

    async def persist(self, rd: Ready) -> None:
        """Make ``rd.snapshot``, ``rd.hard_state`` and ``rd.entries`` durable (when
        ``rd.must_sync()``); called for every Ready, so runtimes skip empty ones."""

    async def restore(self, snapshot: Snapshot) -> None:
        """Replace the state machine with a snapshot received from the leader. The node
        decodes it in a thread (``StateMachine.prepare_restore``); the entries of this and
        later Readies are applied only after it."""

    async def apply(self, entries: Sequence[Entry]) -> None: ...

    def read_ready(self, context: bytes, index: int) -> None:
        """A linearizable read may be served once ``index`` is applied."""

    def read_dropped(self, context: bytes) -> None:
        """A read request was dropped (leadership lost): fail it."""


async def handle_ready(core: RaftCore, rd: Ready, runtime: Runtime) -> None:
    """Persist, send, restore, apply, answer reads, then ``advance``. A leader's appends
    leave before its own write completes (Raft thesis §10.2.1: the leader may write its log
    in parallel with replicating it); every other message waits for the write, because it
    may promise what is written (a vote, an acknowledgement)."""
    if rd.soft_state is not None:
        runtime.soft_state_changed(rd.soft_state)
    late = rd.messages
    if core.role == Role.LEADER and late:
        early = [m for m in late if m.type in EARLY_TYPES]
        if early:
            runtime.send(early)
            late = [m for m in late if m.type not in EARLY_TYPES]
    await runtime.persist(rd)
    if late:
        runtime.send(late)
    if rd.snapshot is not None:
        await runtime.restore(rd.snapshot)
    if rd.committed:
        await runtime.apply(rd.committed)
    for rs in rd.read_states:
        runtime.read_ready(rs.context, rs.index)
    for ctx in rd.dropped_reads:
        runtime.read_dropped(ctx)
    core.advance(rd)
