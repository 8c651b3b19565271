"""A deterministic simulation of a whole Raft cluster in one process.

Nodes run :class:`~raft.core.RaftCore` under a simulated runtime that does what the real one
does (persist before sending, leaders send appends while their own fsync runs, apply
committed entries, take snapshots), over a simulated network that loses, duplicates, delays
and reorders messages and can be cut into partitions, symmetric or one-way. Nodes crash and
restart, losing whatever was not yet persisted. Every step is checked against Raft's safety
properties; everything derives from one seed, so a failure replays exactly.

Use it to test your own state machine too: subclass :class:`SimStateMachine`.
"""
from __future__ import annotations

import heapq
import io
import random
import struct
import zlib
from dataclasses import dataclass, field
from collections.abc import Sequence
from typing import Any, BinaryIO, Callable, Coroutine, Generator

from ..core import CoreConfig, RaftCore
from ..driver import handle_ready
from ..errors import RaftError
from ..state_machine import StateMachine
from ..messages import (BytesSnapshotSource, ConfChange, ConfChangeType, Entry, EntryType, HardState,
                        Membership, Message, Ready, Role, Snapshot, SnapshotMeta, SoftState)
from .checker import SafetyChecker, SafetyViolation


class SimStateMachine(StateMachine):
    """A digest of every applied entry: two nodes agree iff they applied the same sequence.
    The snapshot is padded to a pseudo-random length so transfers span several chunks. It is
    a :class:`raft.state_machine.StateMachine`, as yours is (``skip`` is the simulator's: a
    configuration entry moves the applied index without changing the digest)."""

    def __init__(self, pad: int = 0) -> None:
        self.index = 0
        self.digest = 0
        self.pad = pad

    def apply(self, e: Entry) -> None:
        self.index = e.index
        self.digest = zlib.crc32(struct.pack(">QQ", e.index, e.term) + e.data, self.digest)

    def skip(self, e: Entry) -> None:
        self.index = e.index

    def snapshot(self) -> Callable[[BinaryIO], None]:
        data = struct.pack(">QI", self.index, self.digest) + bytes(self.pad)
        def write(f: BinaryIO) -> None:
            f.write(data)
        return write

    def prepare_restore(self, source: BinaryIO) -> Callable[[], None]:
        index, digest = struct.unpack(">QI", source.read(12))

        def swap() -> None:
            self.index, self.digest = index, digest
        return swap

    def restore(self, source: BinaryIO) -> None:
        self.prepare_restore(source)()


@dataclass
class SimConfig:
    nodes: int = 3  # initial voters
    spare_nodes: int = 0  # started empty; membership changes may add them
    tick_ms: int = 10
    election_ticks: int = 10
    heartbeat_ticks: int = 2
    latency_ms: tuple[int, int] = (1, 6)
    fsync_ms: tuple[int, int] = (0, 4)
    loss: float = 0.0
    duplicate: float = 0.0
    reorder: float = 0.0  # share of messages that may overtake earlier ones on their link
    partition_every_ms: int = 0  # 0: never partition
    crash_every_ms: int = 0  # 0: never crash
    restart_after_ms: tuple[int, int] = (50, 600)
    propose_every_ms: int = 5
    batch: tuple[int, int] = (1, 4)
    read_every_ms: int = 0
    transfer_every_ms: int = 0
    conf_change_every_ms: int = 0
    wipe_every_ms: int = 0  # a node's disk is wiped and formatted anew: a new directory id (KIP-853)
    snapshot_every: tuple[int, int] = (0, 0)  # entries between snapshots; (0, 0): never
    snapshot_pad: tuple[int, int] = (0, 0)
    snapshot_trailing: int = 0
    core: CoreConfig = field(default_factory=lambda: CoreConfig(
        election_ticks=10, heartbeat_ticks=2, max_inflight=8, max_entries_per_msg=16,
        max_bytes_per_msg=4096, snapshot_chunk_bytes=64, snapshot_chunks_inflight=2,
        max_uncommitted_entries=256))

    @classmethod
    def randomized(cls, rng: random.Random) -> "SimConfig":
        """A fault mix drawn from the seed, so that many seeds cover many combinations."""
        spare = rng.choice([0, 0, 1, 2])
        core = CoreConfig(
            election_ticks=10, heartbeat_ticks=rng.choice([1, 2, 3]),
            max_inflight=rng.choice([1, 4, 64]), max_entries_per_msg=rng.choice([1, 8, 256]),
            max_bytes_per_msg=rng.choice([64, 4096, 1 << 20]),
            pre_vote=rng.random() < 0.8, check_quorum=rng.random() < 0.8,
            fast_backoff=rng.random() < 0.85, snapshot_chunk_bytes=rng.choice([64, 256, 1024]),
            snapshot_chunks_inflight=rng.choice([1, 3]), max_uncommitted_entries=256)
        return cls(
            nodes=rng.choice([1, 3, 3, 3, 5]) if not spare else 3, spare_nodes=spare,
            heartbeat_ticks=core.heartbeat_ticks,
            # repairing logs one entry per round trip is only bearable on a fast network
            latency_ms=rng.choice([(1, 3), (1, 8), (2, 30)]) if core.fast_backoff else (1, 3),
            fsync_ms=rng.choice([(0, 1), (0, 5), (1, 15)]),
            loss=rng.choice([0.0, 0.01, 0.05, 0.2]),
            duplicate=rng.choice([0.0, 0.02, 0.1]),
            reorder=rng.choice([0.0, 0.05, 0.3]),
            partition_every_ms=rng.choice([0, 300, 1000]),
            crash_every_ms=rng.choice([0, 250, 800]),
            propose_every_ms=rng.choice([2, 5, 20]),
            batch=rng.choice([(1, 1), (1, 5), (10, 40)]),
            read_every_ms=rng.choice([0, 10, 40]),
            transfer_every_ms=rng.choice([0, 0, 500]),
            conf_change_every_ms=150 if spare else 0,
            snapshot_every=rng.choice([(0, 0), (5, 30), (40, 200)]),
            snapshot_pad=rng.choice([(0, 0), (0, 200), (100, 3000)]),
            snapshot_trailing=rng.choice([0, 0, 5]),
            core=core,
            # Drawn last, so the other choices of a seed stay what they were. Together with
            # membership changes too: ``Simulation._wipe`` keeps a majority of the voters of
            # every configuration on the replicas it records for them.
            wipe_every_ms=rng.choice([0, 300]))


class Durable:
    """What survives a crash: hard state, the latest snapshot and the log after it."""

    def __init__(self, membership: Membership) -> None:
        self.hard_state = HardState()
        self.snapshot = SnapshotMeta(membership=membership)
        self.snapshot_data = b""
        self.entries: list[Entry] = []

    def persist(self, rd: Ready) -> None:
        if rd.snapshot is not None:
            meta = rd.snapshot.meta
            self.snapshot, self.snapshot_data = meta, rd.snapshot.source.read(0, meta.size)
            self.entries = []  # a received snapshot replaces the log
        if rd.hard_state is not None:
            self.hard_state = rd.hard_state
        if rd.entries:
            first = rd.entries[0].index
            keep = first - self.snapshot.index - 1
            if keep < 0 or keep > len(self.entries):
                raise SafetyViolation(f"persisted entries start at {first} but the durable log "
                                      f"ends at {self.snapshot.index + len(self.entries)}")
            del self.entries[keep:]
            self.entries.extend(rd.entries)

    def term_at(self, index: int) -> int:
        if index == self.snapshot.index:
            return self.snapshot.term
        return self.entries[index - self.snapshot.index - 1].term

    def take_snapshot(self, meta: SnapshotMeta, data: bytes) -> None:
        """Entries the snapshot covers go; the core may keep a few in memory for followers."""
        del self.entries[:meta.index - self.snapshot.index]
        self.snapshot, self.snapshot_data = meta, data


class SimNode:
    def __init__(self, sim: "Simulation", nid: int, membership: Membership) -> None:
        self.sim = sim
        self.id = nid
        self.durable = Durable(membership)
        self.incarnation = 0
        self.alive = False
        self.busy = False
        self.core: RaftCore
        self.sm: SimStateMachine
        self.commit_seen = 0
        self.was_leader_term = -1
        self.next_snapshot = 0

    def start(self) -> None:
        d = self.durable
        self.incarnation += 1
        self.alive, self.busy = True, False
        src = BytesSnapshotSource(d.snapshot, d.snapshot_data) if d.snapshot.index else None
        self.core = RaftCore(self.id, self.sim.cfg.core, seed=self.sim.seed * 7 + self.incarnation,
                             hard_state=d.hard_state, snapshot=d.snapshot, entries=list(d.entries),
                             snapshot_source=src, directory_id=self.sim.directories[self.id])
        self.sm = SimStateMachine(self._pad())
        if d.snapshot.index:
            self.sm.restore(io.BytesIO(d.snapshot_data))
        self.sim.checker.commit_monotonic(self.id, d.hard_state.commit, self.core.log.committed)
        self.commit_seen = self.core.log.committed
        self.was_leader_term = -1
        self._plan_snapshot()

    def _pad(self) -> int:
        lo, hi = self.sim.cfg.snapshot_pad
        return self.sim.rng.randint(lo, hi) if hi else 0

    def _plan_snapshot(self) -> None:
        lo, hi = self.sim.cfg.snapshot_every
        self.next_snapshot = self.sm.index + self.sim.rng.randint(lo, hi) if hi else 0

    def crash(self) -> None:
        self.alive = False
        self.busy = False

    # the runtime loop, event by event

    def observe(self) -> None:
        """After any input: check invariants, then start work on a Ready if idle."""
        core, chk = self.core, self.sim.checker
        try:
            core.log.check()
        except AssertionError as e:
            raise SafetyViolation(f"node {self.id}: {e}") from None
        if core.log.committed != self.commit_seen:
            chk.commit_monotonic(self.id, self.commit_seen, core.log.committed)
            chk.commit(self.id, core.log, self.commit_seen, core.log.committed)
            self.commit_seen = core.log.committed
        if core.role == Role.LEADER and self.was_leader_term != core.term:
            self.was_leader_term = core.term
            chk.leader(self.id, core.term)
            chk.leader_log(self.id, core.term, core.log)
            self.sim.stats["elections"] += 1
            self.sim.log(f"node {self.id} leads term {core.term}")
        if not self.busy and core.has_ready():
            self.busy = True
            runtime = _SimRuntime(self, self.incarnation)
            runtime.work = handle_ready(core, core.ready(), runtime)
            self._step(runtime.work)

    def _step(self, work: Coroutine[Any, Any, None]) -> None:
        """Run a Ready's handling until it waits (``_SimRuntime.persist`` or ``restore``)."""
        try:
            work.send(None)
        except StopIteration:
            self.busy = False
            self._maybe_snapshot()
            self.observe()

    def _maybe_snapshot(self) -> None:
        if not self.next_snapshot or self.sm.index < self.next_snapshot:
            return
        core = self.core
        idx = self.sm.index
        if idx <= core.snapshot_meta.index:
            return
        buf = io.BytesIO()
        self.sm.snapshot()(buf)
        data = buf.getvalue()
        meta = SnapshotMeta(idx, core.log.term(idx) or 0, core.membership_at(idx), len(data),
                            zlib.crc32(data))
        trailing = self.sim.cfg.snapshot_trailing
        core.compact(BytesSnapshotSource(meta, data), trailing)
        self.durable.take_snapshot(meta, data)
        self.sm.pad = self._pad()
        self._plan_snapshot()
        self.sim.stats["snapshots"] += 1


class _Waiting:
    """What a Ready's handling awaits while the simulator "fsyncs" or decodes a snapshot: it
    suspends the coroutine until the scheduled event resumes it (or a crash abandons it)."""

    def __await__(self) -> Generator["_Waiting", None, None]:
        yield self


class _SimRuntime:
    """A simulated node's side of ``raft.driver.handle_ready``, checking safety as it goes."""

    def __init__(self, node: SimNode, incarnation: int) -> None:
        self.node, self.incarnation = node, incarnation
        self.sim, self.chk = node.sim, node.sim.checker
        self.work: Coroutine[Any, Any, None]  # the handling this runtime serves

    def send(self, msgs: list[Message]) -> None:
        for m in msgs:
            self.sim.send(m)

    def soft_state_changed(self, soft: SoftState) -> None:
        pass

    async def persist(self, rd: Ready) -> None:
        """Wait a random fsync time (none if nothing must sync); lost if the node crashes."""
        delay = self.sim.rng.randint(*self.sim.cfg.fsync_ms) if rd.must_sync() else 0
        self.sim.schedule(delay, self._persisted, rd)
        await _Waiting()

    def _persisted(self, rd: Ready) -> None:
        node = self.node
        if self.incarnation != node.incarnation or not node.alive:
            return  # crashed while writing: the Ready is lost
        node.durable.persist(rd)
        if rd.entries:
            self.chk.persisted(node.id, rd.entries, node.durable.term_at(rd.entries[0].index - 1))
        node._step(self.work)

    async def restore(self, snapshot: Snapshot) -> None:
        """Decode now, swap in after a random decode time, as the node decodes in a thread:
        messages keep arriving meanwhile and nothing is applied; lost if the node crashes."""
        with snapshot.source.open_payload() as payload:
            swap = self.node.sm.prepare_restore(payload)
        self.sim.schedule(self.sim.rng.randint(*self.sim.cfg.fsync_ms), self._resume)
        await _Waiting()
        swap()
        self.chk.digest(self.node.id, snapshot.meta.index, self.node.sm.digest)

    def _resume(self) -> None:
        if self.incarnation == self.node.incarnation and self.node.alive:
            self.node._step(self.work)

    async def apply(self, entries: Sequence[Entry]) -> None:
        sm, nid = self.node.sm, self.node.id
        for e in entries:
            if e.type == EntryType.NORMAL:
                sm.apply(e)
                self.chk.apply(nid, e, sm.digest)
            else:
                sm.skip(e)
                self.chk.digest(nid, e.index, sm.digest)

    def read_ready(self, context: bytes, index: int) -> None:
        self.sim.read_done(self.node.id, context, index)

    def read_dropped(self, context: bytes) -> None:
        pass


class Simulation:
    """Run ``steps`` events of a seeded scenario; raise SafetyViolation on any breach."""

    def __init__(self, seed: int, cfg: SimConfig | None = None,
                 trace: Callable[[str], None] | None = None) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        self.cfg = cfg or SimConfig.randomized(random.Random(seed ^ 0x5EED))
        self.trace = trace
        self.checker = SafetyChecker()
        self.now = 0
        self.steps = 0
        self._queue: list[tuple[int, int, Callable, tuple]] = []
        self._seq = 0
        ids = list(range(1, self.cfg.nodes + self.cfg.spare_nodes + 1))
        # Each node's data directory id, recorded in the membership (KIP-853); a wipe gives a new one.
        self.directories = {i: f"dir-{i}" for i in ids}
        initial = Membership(frozenset(ids[:self.cfg.nodes]),
                             directories=tuple((i, self.directories[i]) for i in ids[:self.cfg.nodes]))
        self.nodes = {i: SimNode(self, i, initial if i <= self.cfg.nodes else Membership())
                      for i in ids}
        self.blocked: set[tuple[int, int]] = set()
        self._link_clock: dict[tuple[int, int], int] = {}
        self.faults_on = True
        self.proposed = 0
        self.reads: dict[bytes, int] = {}
        self.read_seq = 0
        self.stats = {"delivered": 0, "lost": 0, "elections": 0, "crashes": 0, "snapshots": 0,
                      "reads": 0, "conf_changes": 0, "transfers": 0, "wipes": 0}
        for n in self.nodes.values():
            n.start()
            self.schedule(self.rng.randint(0, self.cfg.tick_ms), self._tick, n.id, n.incarnation)
        c = self.cfg
        self._every(c.propose_every_ms, self._propose)
        self._every(c.read_every_ms, self._read)
        self._every(c.partition_every_ms, self._partition)
        self._every(c.crash_every_ms, self._crash)
        self._every(c.transfer_every_ms, self._transfer)
        self._every(c.conf_change_every_ms, self._conf_change)
        self._every(c.wipe_every_ms, self._wipe)

    # -- event queue ----------------------------------------------------------------------

    def schedule(self, delay: int, fn: Callable, *args: object) -> None:
        self._seq += 1
        heapq.heappush(self._queue, (self.now + delay, self._seq, fn, args))

    def _every(self, period: int, fn: Callable[[], None]) -> None:
        if not period:
            return

        def again() -> None:
            if self.faults_on:
                fn()
            self.schedule(self.rng.randint(period // 2, period * 3 // 2), again)
        self.schedule(self.rng.randint(0, period), again)

    def step(self) -> None:
        self.now, _, fn, args = heapq.heappop(self._queue)
        self.steps += 1
        fn(*args)

    def run(self, steps: int) -> None:
        for _ in range(steps):
            self.step()

    def log(self, text: str) -> None:
        if self.trace:
            self.trace(f"{self.now:>7}ms  {text}")

    # -- network ---------------------------------------------------------------------------

    def send(self, m: Message) -> None:
        if self.faults_on and self.rng.random() < self.cfg.loss:
            self.stats["lost"] += 1
            return
        copies = 2 if self.faults_on and self.rng.random() < self.cfg.duplicate else 1
        link = (m.frm, m.to)
        for _ in range(copies):
            # A link is a stream (FIFO, as the gRPC transport's is) unless this message is one
            # of the few that may overtake the ones before it.
            delay = self.rng.randint(*self.cfg.latency_ms)
            if not (self.faults_on and self.rng.random() < self.cfg.reorder):
                delay = max(delay, self._link_clock.get(link, 0) - self.now)
                self._link_clock[link] = self.now + delay
            self.schedule(delay, self._deliver, m)

    def _deliver(self, m: Message) -> None:
        node = self.nodes.get(m.to)
        if node is None or not node.alive or (m.frm, m.to) in self.blocked:
            self.stats["lost"] += 1
            return
        self.stats["delivered"] += 1
        node.core.step(m)
        node.observe()

    def _tick(self, nid: int, incarnation: int) -> None:
        node = self.nodes[nid]
        if node.incarnation != incarnation or not node.alive:
            return
        node.core.tick()
        node.observe()
        self.schedule(self.cfg.tick_ms, self._tick, nid, incarnation)

    # -- workload and faults -------------------------------------------------------------------

    def leaders(self) -> list[SimNode]:
        return [n for n in self.nodes.values() if n.alive and n.core.role == Role.LEADER]

    def _propose(self) -> None:
        for n in self.leaders():
            k = self.rng.randint(*self.cfg.batch)
            datas = [b"p%d" % (self.proposed + j) for j in range(k)]
            try:
                n.core.propose(datas)
            except RaftError:
                continue
            self.proposed += k
            n.observe()

    def _read(self) -> None:
        for n in self.leaders():
            self.read_seq += 1
            ctx = b"r%d" % self.read_seq
            try:
                n.core.read_index(ctx)
            except RaftError:
                continue
            self.reads[ctx] = self.checker.max_committed
            n.observe()

    def read_done(self, nid: int, ctx: bytes, index: int) -> None:
        floor = self.reads.pop(ctx, None)
        if floor is None:
            raise SafetyViolation(f"node {nid} answered read {ctx!r} it was never asked, or twice")
        if index < floor:
            raise SafetyViolation(f"stale read on node {nid}: read index {index} < {floor}, "
                                  f"which was committed before the read began")
        self.stats["reads"] += 1

    def _partition(self) -> None:
        ids = [n for n in self.nodes]
        self.blocked = set()
        r = self.rng.random()
        if r < 0.35:
            return  # heal
        if r < 0.75:  # symmetric split
            side = set(self.rng.sample(ids, self.rng.randint(1, max(1, len(ids) // 2))))
            self.blocked = {(a, b) for a in ids for b in ids if (a in side) != (b in side)}
        else:  # one-way cuts
            for _ in range(self.rng.randint(1, len(ids))):
                a, b = self.rng.sample(ids, 2) if len(ids) > 1 else (ids[0], ids[0])
                self.blocked.add((a, b))
        self.log(f"partition {sorted(self.blocked)}")

    def _crash(self) -> None:
        alive = [n for n in self.nodes.values() if n.alive]
        if not alive:
            return
        n = self.rng.choice(alive)
        n.crash()
        self.stats["crashes"] += 1
        self.log(f"crash node {n.id}")
        self.schedule(self.rng.randint(*self.cfg.restart_after_ms), self._restart, n.id)

    def _wipe(self) -> None:
        """A node loses its disk and comes back formatted without voters (an observer, as
        ``--no-initial-controllers`` formats one): no log, no vote, a new directory id. It
        must never count as the voter it was (KIP-853). Only a replica some configuration
        names (never wiped, or added back with its new directory), and only while every
        configuration that is or may yet be in force keeps a majority of replicas it names
        after the wipe: the run must be able to make progress once healed (a wiped voter
        counts for nothing until it is removed and added back)."""
        configs = self._configurations()
        candidates = []
        for n in self.nodes.values():
            if not any(m.directory(n.id) == self.directories[n.id] for m in configs):
                continue  # wiped and not added back, or never a member: nothing to lose
            if all(self._intact(m, m.voters, wiped=n.id) >= m.quorum() for m in configs):
                candidates.append(n)
        if not candidates:
            return
        n = self.rng.choice(candidates)
        n.crash()
        n.durable = Durable(Membership())
        self.stats["wipes"] += 1
        self.directories[n.id] = f"dir-{n.id}-formatted-again-{self.stats['wipes']}"
        self.log(f"wipe node {n.id}")
        self.schedule(self.rng.randint(*self.cfg.restart_after_ms), self._restart, n.id)

    def _intact(self, m: Membership, voters: frozenset[int], wiped: int = 0) -> int:
        """How many of ``voters`` are on the replica ``m`` records for them (also once ``wiped``
        is wiped). Compared by hand, not with ``Membership.matches``: a test sabotages that."""
        return sum(1 for v in voters if not m.directory(v) or (v != wiped and m.directory(v) == self.directories[v]))

    def _configurations(self) -> list[Membership]:
        """Every configuration with voters that some node holds, in memory or on disk, or
        that a message in flight carries (uncommitted ones too: they may yet commit)."""
        found: list[Membership] = []
        entries: list[Entry] = []
        for n in self.nodes.values():
            core = n.core
            found += [core.membership, core.snapshot_meta.membership, n.durable.snapshot.membership]
            entries += core.log.entries
            entries += n.durable.entries
        for _, _, fn, args in self._queue:
            if fn == self._deliver:
                m = args[0]
                entries += m.entries
                if m.snapshot is not None:
                    found.append(m.snapshot.membership)
        found += [ConfChange.decode(e.data).result for e in entries if e.type == EntryType.CONF_CHANGE]
        return [m for m in found if m.voters]

    def _restart(self, nid: int) -> None:
        n = self.nodes[nid]
        if n.alive:
            return
        n.start()
        self.log(f"restart node {nid} (term {n.core.term}, log to {n.core.log.last_index()})")
        self.schedule(self.rng.randint(0, self.cfg.tick_ms), self._tick, nid, n.incarnation)

    def _transfer(self) -> None:
        for n in self.leaders():
            others = sorted(n.core.membership.voters - {n.id})
            if others:
                t = self.rng.choice(others)
                try:
                    n.core.transfer_leadership(t)
                    self.stats["transfers"] += 1
                    self.log(f"node {n.id} transfers leadership to {t}")
                except RaftError:
                    pass
                n.observe()

    def _conf_change(self) -> None:
        for n in self.leaders():
            m = n.core.membership
            ids = sorted(self.nodes)
            options = [(ConfChangeType.ADD_LEARNER, i) for i in ids if i not in m.members]
            options += [(ConfChangeType.ADD_VOTER, i) for i in sorted(m.learners)]
            if len(m.voters) > 2:
                # Like an operator who knows which machines lost their disks: never a removal
                # that leaves fewer voters on their recorded replicas than a majority. A wipe
                # is permanent, and the leader may count a voter wiped a moment ago as live
                # (it answered within an election timeout), so the core's rule cannot tell.
                options += [(ConfChangeType.REMOVE, i) for i in sorted(m.voters)
                            if self._intact(m, m.voters - {i}) >= len(m.voters - {i}) // 2 + 1]
            if not options:
                continue
            kind, target = self.rng.choice(options)
            try:
                directory = None if kind == ConfChangeType.REMOVE else self.directories[target]
                if n.core.propose_conf_change(kind, target, directory_id=directory):
                    self.stats["conf_changes"] += 1
                    self.log(f"node {n.id} proposes {kind.name} {target}")
            except RaftError:
                pass
            n.observe()

    # -- liveness -----------------------------------------------------------------------------

    def heal(self) -> None:
        """Stop all faults and bring every node back."""
        self.faults_on = False
        self.blocked = set()
        for n in self.nodes.values():
            if not n.alive:
                self._restart(n.id)

    def await_progress(self, max_ms: int) -> int:
        """After ``heal``: a leader must emerge, commit a new entry and every voter must apply
        it within ``max_ms`` of simulated time. Returns the time it took."""
        start = self.now
        marker = b"liveness-%d" % self.seed
        proposed: dict[int, int] = {}  # term -> index of the marker proposed in it
        while self.now - start <= max_ms:
            for n in self.leaders():
                if n.core.term not in proposed:
                    try:
                        proposed[n.core.term] = n.core.propose([marker])[1]
                        n.observe()
                    except RaftError:
                        pass
            voters = self._voters()
            for index in proposed.values():
                if (self.checker.applied.get(index, (0, b""))[1] == marker and voters
                        and all(self.nodes[v].sm.index >= index for v in voters)):
                    return self.now - start
            self.step()
        raise SafetyViolation(f"liveness: no entry committed on all voters within {max_ms} ms "
                              f"after faults stopped (leaders: {[n.id for n in self.leaders()]})")

    def _voters(self) -> frozenset[int]:
        ls = self.leaders()
        if not ls:
            return frozenset()
        return max(ls, key=lambda n: n.core.term).core.membership.voters


def run_seed(seed: int, steps: int, trace: Callable[[str], None] | None = None) -> Simulation:
    """One randomized run: ``steps`` events with faults, then the liveness check."""
    sim = Simulation(seed, trace=trace)
    sim.run(steps)
    sim.heal()
    # Repairing a follower one entry per round trip (no fast backoff) takes longer.
    timeouts = 100 if sim.cfg.core.fast_backoff else 400
    timeout = timeouts * sim.cfg.election_ticks * sim.cfg.tick_ms
    sim.await_progress(timeout)
    return sim
