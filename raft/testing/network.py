"""A synchronous in-memory cluster for scenario tests: every Ready is persisted, sent and
applied at once, and messages are delivered until the cluster is quiet. Scenarios control
exactly which messages arrive (``cut``, ``isolate``, ``drop``) and count them by type."""
from __future__ import annotations

import zlib
from collections import Counter
from collections.abc import Sequence
from typing import Callable

from ..core import CoreConfig, RaftCore
from ..driver import handle_ready
from ..messages import (BytesSnapshotSource, Entry, EntryType, HardState, Membership, Message,
                        MessageType, Ready, Role, Snapshot, SnapshotMeta, SoftState)
from .sim import Durable


class Network:
    def __init__(self, ids: list[int], config: CoreConfig | None = None, *,
                 logs: dict[int, list[Entry]] | None = None,
                 terms: dict[int, int] | None = None, learners: Sequence[int] = (),
                 joining: Sequence[int] = (), directories: dict[int, str] | None = None) -> None:
        """``logs``/``terms`` preload nodes (e.g. the Raft paper's Figure 7); ``joining``
        nodes start with no configuration, as a node added later does. ``directories``
        gives nodes data directory ids, recorded in the initial membership (KIP-853)."""
        self.config = config or CoreConfig(pre_vote=False, check_quorum=False)
        self.directories = dict(directories or {})
        membership = self.bootstrap = Membership(frozenset(ids), frozenset(learners),
                                                 tuple(self.directories.items()))
        self.durable: dict[int, Durable] = {}
        self.applied: dict[int, list[Entry]] = {}
        self.nodes: dict[int, RaftCore] = {}
        for nid in [*ids, *learners, *joining]:
            d = Durable(Membership() if nid in joining else membership)
            d.entries = list((logs or {}).get(nid, []))
            d.hard_state = HardState(term=(terms or {}).get(nid, d.entries[-1].term if d.entries else 0))
            self.durable[nid] = d
            self.applied[nid] = []
            self.start(nid)
        self.blocked: set[tuple[int, int]] = set()
        self.drop: Callable[[Message], bool] = lambda m: False
        self.sent: Counter[MessageType] = Counter()
        self.delivered: list[Message] = []
        self.down: set[int] = set()

    # -- lifecycle -------------------------------------------------------------------------

    def start(self, nid: int, seed: int = 0) -> RaftCore:
        d = self.durable[nid]
        src = BytesSnapshotSource(d.snapshot, d.snapshot_data) if d.snapshot.index else None
        core = RaftCore(nid, self.config, seed=seed, hard_state=d.hard_state, snapshot=d.snapshot,
                        entries=list(d.entries), snapshot_source=src,
                        directory_id=self.directories.get(nid, ""))
        self.nodes[nid] = core
        return core

    def crash(self, nid: int) -> None:
        self.down.add(nid)

    def restart(self, nid: int) -> RaftCore:
        self.down.discard(nid)
        self.applied[nid] = []
        return self.start(nid, seed=len(self.delivered))

    def reformat(self, nid: int, directory: str) -> RaftCore:
        """Restart ``nid`` on a wiped disk formatted again: no log, no vote, a new directory
        id, and the initial configuration (as ``--initial-controllers`` would write it)."""
        self.durable[nid] = Durable(self.bootstrap)
        self.directories[nid] = directory
        return self.restart(nid)

    # -- faults --------------------------------------------------------------------------

    def isolate(self, nid: int) -> None:
        for other in self.nodes:
            if other != nid:
                self.blocked |= {(nid, other), (other, nid)}

    def cut(self, a: int, b: int) -> None:
        self.blocked |= {(a, b), (b, a)}

    def heal(self) -> None:
        self.blocked.clear()

    # -- driving ---------------------------------------------------------------------------

    def tick(self, nid: int, n: int = 1) -> None:
        for _ in range(n):
            self.nodes[nid].tick()
        self.settle()

    def elect(self, nid: int) -> RaftCore:
        """Run ``nid``'s election timer out until it leads."""
        core = self.nodes[nid]
        for _ in range(4 * self.config.election_ticks):
            core.tick()
            self.settle()
            if core.role == Role.LEADER:
                self.tick(nid, self.config.heartbeat_ticks)  # spread the commit of its no-op
                return core
        raise AssertionError(f"node {nid} did not become leader ({core.role.name})")

    def propose(self, nid: int, *datas: bytes) -> tuple[int, int]:
        """Propose, then run one heartbeat round so followers learn the new commit index."""
        r = self.nodes[nid].propose(list(datas))
        self.settle()
        self.tick(nid, self.config.heartbeat_ticks)
        return r

    def settle(self, max_rounds: int = 10_000) -> None:
        """Process Readys and deliver messages until nothing moves."""
        for _ in range(max_rounds):
            msgs: list[Message] = []
            for nid, core in self.nodes.items():
                if nid not in self.down and core.has_ready():
                    msgs += self.handle_ready(nid, core.ready())
            if not msgs:
                return
            for m in msgs:
                self.sent[m.type] += 1
                if (m.frm, m.to) in self.blocked or m.to in self.down or self.drop(m):
                    continue
                if m.to in self.nodes:
                    self.delivered.append(m)
                    self.nodes[m.to].step(m)
        raise AssertionError("cluster did not settle")

    def handle_ready(self, nid: int, rd: Ready) -> list[Message]:
        """Handle a Ready at once (``raft.driver.handle_ready``); returns what it sent."""
        runtime = _NetRuntime(self, nid)
        try:
            handle_ready(self.nodes[nid], rd, runtime).send(None)
        except StopIteration:
            return runtime.sent
        raise AssertionError("handling a Ready waited for something")

    def snapshot(self, nid: int, data: bytes = b"state", trailing: int = 0) -> SnapshotMeta:
        """Have ``nid`` snapshot at its applied index and compact its log."""
        core = self.nodes[nid]
        idx = core.log.applied
        meta = SnapshotMeta(idx, core.log.term(idx) or 0, core.membership_at(idx), len(data),
                            zlib.crc32(data))
        core.compact(BytesSnapshotSource(meta, data), trailing)
        self.durable[nid].take_snapshot(meta, data)
        return meta

    # -- inspection ------------------------------------------------------------------------

    def leader(self) -> RaftCore | None:
        ls = [c for n, c in self.nodes.items() if c.role == Role.LEADER and n not in self.down]
        return max(ls, key=lambda c: c.term) if ls else None

    def log_of(self, nid: int) -> list[tuple[int, int]]:
        """(index, term) of every entry ``nid`` holds after its snapshot."""
        return [(e.index, e.term) for e in self.nodes[nid].log.entries]

    def datas(self, nid: int) -> list[bytes]:
        return [e.data for e in self.applied[nid]]


class _NetRuntime:
    """Persists at once, records what is applied, collects what is sent."""

    def __init__(self, net: Network, nid: int) -> None:
        self.net, self.nid = net, nid
        self.sent: list[Message] = []

    def send(self, msgs: list[Message]) -> None:
        self.sent += msgs

    def soft_state_changed(self, soft: SoftState) -> None:
        pass

    async def persist(self, rd: Ready) -> None:
        self.net.durable[self.nid].persist(rd)

    async def restore(self, snapshot: Snapshot) -> None:
        self.net.applied[self.nid] = [Entry(snapshot.meta.index, snapshot.meta.term, b"<snapshot>")]

    async def apply(self, entries: Sequence[Entry]) -> None:
        self.net.applied[self.nid] += [e for e in entries if e.type == EntryType.NORMAL]

    def read_ready(self, context: bytes, index: int) -> None:
        pass

    def read_dropped(self, context: bytes) -> None:
        pass


def entries(*terms: int, start: int = 1) -> list[Entry]:
    """A log with one entry per term given, from index ``start``: ``entries(1, 1, 4)``."""
    return [Entry(start + k, t, b"e%d.%d" % (start + k, t)) for k, t in enumerate(terms)]
