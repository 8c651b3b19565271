"""The embeddable Raft node: the pure core driven by one asyncio loop, with a storage
(durable on disk by default) and a transport (gRPC by default).

    node = RaftNode(1, "1@127.0.0.1:9091,2@127.0.0.1:9092,3@127.0.0.1:9093",
                    MyStateMachine(), data_dir="/var/lib/app/raft")
    await node.start()
    result = await node.propose(b"...")   # applied on this node, result of apply()
    await node.read_barrier()             # then read the state machine linearizably

The loop persists before it sends (votes and acknowledgements leave only once fsynced), lets a
leader's appends go out while its own fsync runs, and accepts new proposals and messages while
a batch is being written, so that everything that arrived meanwhile shares the next write and
round trip (group commit).
"""
from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable, Coroutine, Iterator

import grpc

from .proto import raft_pb2_grpc

from .admin import AdminService
from .config import NodeOptions, parse_voters
from .core import RaftCore
from .driver import handle_ready
from .errors import (LeftAsLearner, LogCompacted, MembershipRefused, NodeStopped, NotCaughtUp, NotLeader,
                     OutcomeUnknown, ProposalDropped, RaftError, StorageError)
from .observer import Observing
from .messages import (ConfChange, ConfChangeType, Entry, EntryType, Membership, Message, Ready,
                       Role, Snapshot, SnapshotMeta, SnapshotSource, SoftState)
from .state_machine import StateMachine, with_defaults
from .storage import DiskStorage, Storage
from .transport import PeerTransport, Transport, add_port, add_service, server_options

log = logging.getLogger("raft.node")


class Proposal(asyncio.Future):
    """The future of one proposal, as hashicorp/raft's ApplyFuture: its result is what
    ``apply`` returned; ``index`` and ``term`` say where the entry sits in the log."""

    def __init__(self, index: int, term: int) -> None:
        super().__init__()
        self.index = index
        self.term = term
        self.proposed_at = time.monotonic()


@dataclass(frozen=True, slots=True)
class PeerInfo:
    node_id: int
    address: str | None
    voter: bool
    match_index: int
    next_index: int
    lag: int
    last_contact_s: float  # -1 when never heard from
    state: str
    kind: str  # "voter", "learner", or "observer" (not a member, or not the member's directory)
    directory_id: str  # the data directory its answers come from ("" until it answers)


@dataclass(frozen=True, slots=True)
class NodeStatus:
    node_id: int
    cluster_id: str
    role: str
    term: int
    leader_id: int
    leader_address: str | None
    commit_index: int
    applied_index: int
    last_index: int
    snapshot_index: int
    voters: tuple[int, ...]
    learners: tuple[int, ...]
    peers: tuple[PeerInfo, ...]
    directory_id: str = ""  # this node's data directory
    directories: dict[int, str] = field(default_factory=dict)  # the members' known directories (KIP-853)
    rejected: dict[str, int] = field(default_factory=dict)  # refused by the transport
    dropped: dict[str, int] = field(default_factory=dict)  # ignored by the Raft core


class RaftNode:
    def __init__(self, node_id: int, voters: dict[int, str] | str | None, state_machine: StateMachine, *,
                 data_dir: str | None = None, cluster_id: str | None = None,
                 storage: Storage | None = None, transport: Transport | None = None,
                 options: NodeOptions | None = None, address: str | None = None,
                 seed: int | None = None, server: grpc.aio.Server | None = None,
                 bootstrap_servers: list[str] | None = None) -> None:
        """``voters`` are the initial voters (``1@host:port,...``), static ones: their data
        directories are unknown. Without them the node starts from the voter set its storage
        was formatted with (``format_storage(initial_voters=...)``, KIP-853), if any. Once the
        cluster's log or a snapshot records a membership, that wins. A node absent from the
        voters starts as an observer (give its own ``address``): with ``bootstrap_servers``
        (``host:port`` of any members) it asks the leader to replicate the log to it, so that
        it is caught up before a leader adds it.

        By default the node keeps its log in ``data_dir`` and serves gRPC (``RaftPeer`` and
        ``RaftAdmin``) on its address, on ``server`` if given so that the application can add
        its own services. Another ``storage`` (``MemoryStorage``) or ``transport``
        (``raft.testing.memory``) replaces either; with a transport of its own the node
        serves no gRPC."""
        self.id = node_id
        self.voters = parse_voters(voters) if isinstance(voters, str) else dict(voters or {})
        self.sm = state_machine
        self._sm = with_defaults(state_machine)  # with the protocol's optional methods
        self.options = options or NodeOptions()
        if storage is None:
            if data_dir is None:
                raise RaftError("give a data_dir (durable) or a storage (e.g. MemoryStorage())")
            storage = DiskStorage(data_dir, node_id, cluster_id, fsync=self.options.fsync)
        self.storage = storage
        self.cluster_id = storage.cluster_id or cluster_id or "default"
        self.address: str = address or self.voters.get(node_id) or ""
        if not self.address:
            raise RaftError(f"node {node_id} is not among the voters; give its own address")
        self.seed = seed if seed is not None else int.from_bytes(os.urandom(4), "big")
        self.addresses: dict[int, str] = dict(self.voters)
        # Addresses the cluster recorded (membership changes, and snapshots of them): these are
        # shared by every node. The configured voters' addresses are this node's own view (a
        # NAT, a proxy) and stay out of snapshots, so one node's view never replaces another's.
        self._recorded: dict[int, str] = {}
        self._observers: dict[int, str] = {}  # on a leader: observers' addresses
        self._changing = ""  # the membership change under way, if any: one at a time
        self.server: grpc.aio.Server | None = server
        if transport is None:
            mb = self.options.max_message_bytes
            self.server = server or grpc.aio.server(options=server_options(mb))
            grpc_transport = PeerTransport(node_id, self.cluster_id, self.addresses,
                                           tls=self.options.tls, max_message_bytes=mb,
                                           directory_id=storage.directory_id)
            grpc_transport.register(self.server)
            add_service(self.server, raft_pb2_grpc.add_RaftAdminServicer_to_server, AdminService(self))
            transport = grpc_transport
        self.transport: Transport = transport
        self.transport.attach(self._deliver)
        self._observing = Observing(self, bootstrap_servers) if bootstrap_servers else None
        self.core: RaftCore
        self.applied = 0
        self.snapshot_index = 0
        #: Optional observers, for metrics: seconds each write of new entries took to be durable,
        #: and seconds from each of this node's proposals to its apply (Kafka's append and commit latency).
        self.append_latency_observer: Callable[[float], None] | None = None
        self.commit_latency_observer: Callable[[float], None] | None = None
        self._bytes_since_snapshot = 0
        self._snapshotting = False
        self._proposals: dict[int, tuple[int, Proposal]] = {}
        self._read_waiting: list[asyncio.Future] = []
        self._reads: dict[bytes, list[asyncio.Future]] = {}
        self._applied_waiters: list[tuple[int, asyncio.Future]] = []
        self._read_seq = 0
        self._role_callbacks: list[Callable[[Role, int, int], None]] = []
        self._soft = SoftState(Role.FOLLOWER, 0, 0)
        self._wake = asyncio.Event()
        self._changed = asyncio.Event()  # set, and replaced, whenever the core may have changed
        self._tasks: list[asyncio.Task] = []
        self._background: set[asyncio.Task] = set()  # snapshot writes; a failed node's shutdown
        self._io = ThreadPoolExecutor(1, thread_name_prefix=f"raft-{node_id}-wal")
        self._snap_io = ThreadPoolExecutor(1, thread_name_prefix=f"raft-{node_id}-snap")
        self._apply_io = ThreadPoolExecutor(1, thread_name_prefix=f"raft-{node_id}-apply")
        self._failed: Exception | None = None
        self._stopped = asyncio.Event()
        self._runtime = _NodeRuntime(self)
        self._started = False

    # ------------------------------------------------------------------ lifecycle --

    async def start(self) -> None:
        state = await asyncio.get_running_loop().run_in_executor(self._io, self.storage.recover)
        if state.truncated_tail:
            log.warning("node %d: cut a torn write off the log: %s", self.id, state.truncated_tail)
        if self.voters:
            initial = Membership(frozenset(self.voters))
        else:  # formatted with a voter set: its addresses are the cluster's, not this node's view
            initial = Membership(frozenset(v.node_id for v in state.bootstrap),
                                 directories=tuple((v.node_id, v.directory_id) for v in state.bootstrap))
            self._learn_book({v.node_id: v.address for v in state.bootstrap})
        self.core = RaftCore(self.id, self.options.core_config(), seed=self.seed,
                             hard_state=state.hard_state, snapshot=state.snapshot,
                             entries=state.entries, membership=initial,
                             snapshot_source=state.snapshot_source,
                             receive_snapshot=self.storage.receive_snapshot,
                             directory_id=self.storage.directory_id)
        if state.snapshot is not None and state.snapshot_source is not None:
            await self._restore_state(state.snapshot_source)
            self.applied = self.snapshot_index = state.snapshot.index
            self._learn_addresses(state.snapshot.context)
        for e in state.entries:  # addresses of members added since the snapshot
            if e.type == EntryType.CONF_CHANGE:
                self._learn_conf_change(ConfChange.decode(e.data), announce=False)
        if self.server is not None:
            listen = self.options.listen or self.address
            if add_port(self.server, listen, self.options.tls) == 0:
                raise RaftError(f"cannot listen on {listen}: the address is in use or invalid")
            await self.server.start()
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._run(), name=f"raft-{self.id}-loop"),
                       loop.create_task(self._ticker(), name=f"raft-{self.id}-ticker")]
        if self._observing is not None:
            self._tasks.append(loop.create_task(self._observing.run(), name=f"raft-{self.id}-observing"))
        self._started = True
        self._wake.set()

    async def stop(self, *, transfer: bool | None = None) -> None:
        """Stop the node; a leader first hands leadership to an up-to-date follower (like
        Kafka's controlled shutdown) unless ``transfer`` is False."""
        if not self._started:
            if self._failed is not None:  # stopping by itself: wait until it has
                await self._stopped.wait()
            return
        transfer = self.options.transfer_leadership_on_stop if transfer is None else transfer
        if transfer and self._failed is None and self.core.role == Role.LEADER:
            peers = [p for p in self.status().peers if p.voter]
            if peers:
                target = min(peers, key=lambda p: p.lag).node_id
                try:
                    await self.transfer_leadership(target, timeout=self.options.election_timeout_ms / 1000)
                except RaftError:
                    pass
        await self._shutdown(NodeStopped(f"node {self.id} stopped"))

    async def _shutdown(self, reason: Exception) -> None:
        if not self._started:
            return
        self._started = False
        tasks = [*self._tasks, *(t for t in self._background if t is not asyncio.current_task())]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self.transport.close()
        if self.server is not None:
            await self.server.stop(grace=0.2)
        self._fail_all(reason)
        self._notify_change()
        await asyncio.get_running_loop().run_in_executor(self._io, self.storage.close)
        self._io.shutdown(wait=False)
        self._snap_io.shutdown(wait=False)
        self._apply_io.shutdown(wait=False)
        self._stopped.set()

    async def wait_stopped(self) -> Exception | None:
        """Block until the node stops; returns the fatal error that stopped it, if any."""
        await self._stopped.wait()
        return self._failed

    # ------------------------------------------------------------------ the API --

    async def propose(self, data: bytes, *, timeout: float | None = None) -> Any:
        """Replicate ``data``; return what the state machine's ``apply`` returned for it on
        this node. NotLeader (with the leader's id and address) and ProposalDropped mean it was
        certainly not applied and may be retried; OutcomeUnknown and a timeout mean it may or
        may not have been (docs/raft.md, "Write outcomes")."""
        fut = self.propose_nowait(data)
        return await asyncio.wait_for(fut, timeout) if timeout else await fut

    def propose_nowait(self, data: bytes) -> "Proposal":
        """Append ``data`` now, in call order, and return a future of its ``apply`` result
        that also carries the entry's ``index`` and ``term``; for callers that pipeline many
        proposals. Raises NotLeader (and the other "not applied" errors) at once."""
        self._check_running()
        try:
            index = self.core.propose([data])[0]
        except NotLeader as e:
            raise self._not_leader(e) from None
        return self._await_entry(index)

    def _await_entry(self, index: int) -> "Proposal":
        """A future for the entry we just appended at ``index`` in this term."""
        fut = Proposal(index, self.core.term)
        replaced = self._proposals.get(index)
        if replaced is not None and not replaced[1].done():
            # An earlier term's entry at this index was cut from our log and the index is ours
            # again: that entry can never commit (log matching, Raft §5.3).
            replaced[1].set_exception(ProposalDropped(
                "a leader change replaced the entry before it committed; it was not applied"))
        # A caller that stopped waiting (a timeout) leaves the failure unread; mark it read, so
        # asyncio does not log "Future exception was never retrieved" for it.
        fut.add_done_callback(lambda f: f.cancelled() or f.exception())
        self._proposals[index] = (self.core.term, fut)
        self._wake.set()
        return fut

    async def wait_applied(self, index: int, timeout: float | None = None) -> int:
        """Wait until this node has applied ``index``; returns the applied index."""
        if self.applied >= index:
            return self.applied
        self._check_running()
        fut = asyncio.get_running_loop().create_future()
        self._applied_waiters.append((index, fut))
        return await asyncio.wait_for(fut, timeout) if timeout else await fut

    async def read_barrier(self, *, timeout: float | None = None) -> int:
        """Wait until this node's state machine reflects every write committed before the
        call (ReadIndex, thesis §6.4); then a read of it is linearizable. Leader only.
        Concurrent callers share one heartbeat round."""
        self._check_running()
        if self.core.role != Role.LEADER:
            raise self._not_leader(NotLeader(self.core.leader))
        fut = asyncio.get_running_loop().create_future()
        self._read_waiting.append(fut)
        self._wake.set()
        return await asyncio.wait_for(fut, timeout) if timeout else await fut

    async def add_learner(self, node_id: int, address: str, *, directory_id: str = "",
                          timeout: float = 10.0) -> int:
        with self._one_change(f"adding node {node_id} as a learner"):
            return await self._change(ConfChangeType.ADD_LEARNER, node_id, address, directory_id, timeout)

    async def add_voter(self, node_id: int, address: str, *, directory_id: str = "",
                        timeout: float = 30.0, observer_timeout: float | None = None) -> int:
        """Add a voter: a new node first joins as a learner and is promoted once it has caught
        up (thesis §4.2.1), so that an empty node never weighs on the quorum. With
        ``directory_id`` (KIP-853) only the replica on that data directory is the voter. With
        ``observer_timeout``, a node that is not a member must first be caught up as an
        observer (KIP-853's AddVoter): if it is not within that many seconds, RaftError, and
        nothing is written. Once it is a learner, a failure to promote it is LeftAsLearner
        (NotLeader aside: the next leader finishes the job when asked again)."""
        with self._one_change(f"adding node {node_id}"):
            deadline = time.monotonic() + timeout
            if node_id not in self.core.membership.members:
                if observer_timeout is not None:
                    await self.wait_caught_up(node_id, directory_id=directory_id or None, timeout=observer_timeout,
                                              why_not="it is not an observer of this leader; nothing was changed")
                await self._change(ConfChangeType.ADD_LEARNER, node_id, address, directory_id, timeout)
            # Only the replica on the learner's recorded directory: one formatted again meanwhile
            # could be caught up, but as a voter it would count for nothing (KIP-853).
            directory = directory_id or self.core.membership.directory(node_id)
            try:
                await self.wait_caught_up(node_id, directory_id=directory or None,
                                          timeout=max(0.0, deadline - time.monotonic()))
                return await self._change(ConfChangeType.ADD_VOTER, node_id, address, directory_id,
                                          max(1.0, deadline - time.monotonic()))
            except (NotCaughtUp, MembershipRefused, ProposalDropped) as e:
                if node_id not in self.core.membership.learners:
                    raise
                raise LeftAsLearner(node_id, directory, e) from e

    async def remove_member(self, node_id: int, *, directory_id: str | None = None,
                            timeout: float = 10.0) -> int:
        """Remove a voter or learner; with ``directory_id`` only if that is the member's
        ("" for one whose directory is unknown). Refused (MembershipRefused) when the voters
        left would not have a live majority, or none would be left."""
        with self._one_change(f"removing node {node_id}"):
            return await self._change(ConfChangeType.REMOVE, node_id, "", directory_id, timeout)

    async def wait_caught_up(self, node_id: int, *, directory_id: str | None = None, timeout: float,
                             why_not: str = "") -> None:
        """On the leader: until ``node_id`` (its replica on ``directory_id``, when given) holds
        every committed entry, as a learner or an observer; NotCaughtUp after ``timeout``."""
        deadline = time.monotonic() + timeout
        while not self.core.caught_up(node_id, directory_id):
            self._check_running()
            if not self.is_leader:
                raise self._not_leader(NotLeader(self.core.leader))
            if time.monotonic() > deadline:
                raise NotCaughtUp(f"node {node_id} did not catch up within {timeout:.0f}s"
                                + (f"; {why_not}" if why_not else ""))
            await self._next_change(deadline)

    def observe(self, node_id: int, address: str) -> dict[int, str]:
        """On the leader: replicate the log to ``node_id`` at ``address``, a node that is not (or
        not yet) a member (RaftAdmin ``Observe``, called by :class:`Observing`). Returns the
        members' addresses, for the observer to reach them."""
        self._check_running()
        try:
            self.core.observe(node_id)
        except NotLeader as e:
            raise self._not_leader(e) from None
        members = self.core.membership.members
        if node_id not in members:
            self._observers[node_id] = self.addresses[node_id] = address
            self.transport.set_address(node_id, address)
        for nid in [n for n in self._observers if n not in self.core.progress or n in members]:
            del self._observers[nid]
            if nid not in members:  # the core forgot it: silent too long
                self.addresses.pop(nid, None)
                self.transport.remove(nid)
        self._wake.set()
        return {n: a for n, a in self.addresses.items() if n in members or n == self.id}

    async def transfer_leadership(self, target: int, *, timeout: float = 5.0) -> None:
        self._check_running()
        try:
            self.core.transfer_leadership(target)
        except NotLeader as e:
            raise self._not_leader(e) from None
        self._wake.set()
        deadline = time.monotonic() + timeout
        while self.core.leader != target:
            if time.monotonic() > deadline or (self.core.role == Role.LEADER and not self.core.lead_transferee):
                raise RaftError(f"leadership did not move to node {target} within {timeout:.1f}s")
            await self._next_change(deadline)

    def committed_entries(self, start: int, max_bytes: int) -> list[Entry]:
        """Applied entries from ``start`` on (at least one if any), about ``max_bytes`` in all,
        from the in-memory log. Raises LogCompacted when ``start`` is before the log."""
        log = self.core.log
        if start <= log.snap_index:
            raise LogCompacted(log.snap_index + 1, self.core.snapshot_meta)
        out: list[Entry] = []
        size = 0
        for i in range(start, min(self.applied, log.committed) + 1):
            e = log.entry(i)
            out.append(e)
            size += len(e.data) + 32
            if size >= max_bytes:
                break
        return out

    def on_role_change(self, callback: Callable[[Role, int, int], None]) -> None:
        """``callback(role, leader_id, term)`` runs on the loop whenever either changes."""
        self._role_callbacks.append(callback)

    async def wait_for_leader(self, timeout: float = 10.0) -> int:
        deadline = time.monotonic() + timeout
        while not self.core.leader:
            if time.monotonic() > deadline:
                raise RaftError(f"no leader known to node {self.id} after {timeout:.0f}s")
            await self._next_change(deadline)
        return self.core.leader

    @property
    def is_leader(self) -> bool:
        return self.core.role == Role.LEADER

    @property
    def leader_id(self) -> int:
        return self.core.leader

    @property
    def role(self) -> Role:
        return self.core.role

    @property
    def leader_address(self) -> str | None:
        return self.addresses.get(self.core.leader)

    # Read-only views of the log, so that applications never reach into ``core`` (as
    # hashicorp/raft exposes LastIndex/AppliedIndex and Kafka's RaftClient its offsets).

    @property
    def term(self) -> int:
        return self.core.term

    @property
    def commit_index(self) -> int:
        """The highest index known to be committed (applied ones are ``applied``)."""
        return self.core.log.committed

    @property
    def next_index(self) -> int:
        """The index the next proposal gets, if it is made on the leader before anything else
        is appended (in the same step of the event loop): for records that embed their own
        offset, as KRaft's broker epochs do."""
        return self.core.log.last_index() + 1

    @property
    def log_start(self) -> int:
        """The first index still in the log; earlier ones are only in the latest snapshot."""
        return self.core.log.snap_index + 1

    @property
    def membership(self) -> Membership:
        """The configuration in force: voters, learners and their directories (KIP-853)."""
        return self.core.membership

    @property
    def latest_snapshot(self) -> SnapshotMeta:
        return self.core.snapshot_meta

    def snapshot_reader(self) -> SnapshotSource | None:
        """The latest snapshot's bytes (``read(position, size)``), for serving it to others."""
        return self.core.snapshot_source

    def status(self) -> NodeStatus:
        c = self.core.status()
        now = time.monotonic()
        peers = []
        for p in c.peers:
            heard = self.transport.last_heard.get(p.node_id)
            peers.append(PeerInfo(p.node_id, self.addresses.get(p.node_id), p.kind == "voter",
                                  p.match, p.next, max(0, c.last_index - p.match),
                                  round(now - heard, 3) if heard else -1.0, p.state, p.kind, p.directory))
        m = c.membership
        return NodeStatus(self.id, self.cluster_id, c.role.name, c.term, c.leader,
                          self.addresses.get(c.leader), c.commit, self.applied, c.last_index,
                          c.snapshot_index, tuple(sorted(m.voters)), tuple(sorted(m.learners)), tuple(peers),
                          directory_id=self.storage.directory_id, directories=dict(m.directories),
                          rejected=dict(self.transport.rejected), dropped=dict(c.dropped))

    # ------------------------------------------------------------------ the loop --

    def _deliver(self, msgs: list[Message]) -> None:
        step = self.core.step
        for m in msgs:
            step(m)
        self._wake.set()

    async def _ticker(self) -> None:
        period = self.options.tick_ms / 1000
        while True:
            await asyncio.sleep(period)
            self.core.tick()
            self._wake.set()
            self._notify_change()

    async def _run(self) -> None:
        try:
            while True:
                await self._wake.wait()
                self._wake.clear()
                self._start_reads()
                while self.core.has_ready():
                    await self._handle(self.core.ready())
                    self._start_reads()
                    self._notify_change()
        except StorageError as e:  # stop rather than run on without a disk
            self._fail(e)
        except OSError as e:
            self._fail(StorageError(f"node {self.id} stopped: persisting the log failed: {e}"))
        except RaftError as e:  # a snapshot from the leader that the state machine cannot restore
            self._fail(e)
        except Exception as e:
            log.exception("node %d: the loop failed", self.id)
            self._fail(RaftError(f"node {self.id} stopped: an unexpected error: {e!r}"))

    def _notify_change(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    async def _next_change(self, deadline: float) -> None:
        """Until the core may have changed (a tick, a handled Ready, a stop) or ``deadline``
        (``time.monotonic()``), whichever is first: waiters re-check their condition then."""
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._changed.wait(), max(0.0, deadline - time.monotonic()))

    def _fail(self, reason: Exception) -> None:
        """Stop for good: ``wait_stopped`` returns ``reason``, and every waiter gets it."""
        self._failed = reason
        log.error("%s", reason)
        self._spawn(self._shutdown(reason), f"raft-{self.id}-shutdown")

    def _spawn(self, work: Coroutine[Any, Any, None], name: str) -> asyncio.Task:
        """A task the node owns until it ends (the loop keeps only weak references to tasks);
        ``_shutdown`` cancels and awaits those still running."""
        task = asyncio.get_running_loop().create_task(work, name=name)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return task

    async def _handle(self, rd: Ready) -> None:
        await handle_ready(self.core, rd, self._runtime)
        self._maybe_snapshot()

    async def _persist(self, rd: Ready) -> None:
        if rd.hard_state is not None or rd.entries or rd.snapshot is not None:
            started = time.monotonic()
            await asyncio.get_running_loop().run_in_executor(self._io, self.storage.save, rd)
            if rd.entries and self.append_latency_observer is not None:
                self.append_latency_observer(time.monotonic() - started)

    async def _restore(self, snapshot: Snapshot) -> None:
        meta = snapshot.meta
        try:
            await self._restore_state(snapshot.source)
        except Exception as e:  # the node cannot go on from a state it does not have
            raise RaftError(f"node {self.id} stopped: restoring the leader's snapshot at index {meta.index} "
                            f"failed: {e}") from e
        log.info("node %d: installed a snapshot from the leader at index %d (term %d)", self.id, meta.index, meta.term)
        self.snapshot_index = meta.index
        self._set_applied(meta.index)
        self._bytes_since_snapshot = 0
        self._learn_addresses(meta.context)
        for idx in [i for i in self._proposals if i <= meta.index]:
            term, fut = self._proposals.pop(idx)
            if not fut.done():
                fut.set_exception(_superseded(idx, term, meta.term))

    async def _restore_state(self, source: SnapshotSource) -> None:
        """Decode the snapshot in the apply thread, then swap it in here, on the loop. The
        Ready being handled waits meanwhile, so nothing is applied between the two and
        entries that arrive wait for the swap (``handle_ready`` applies them after it)."""
        def decode() -> Callable[[], None]:
            with source.open_payload() as payload:
                return self._sm.prepare_restore(payload)
        swap = await asyncio.get_running_loop().run_in_executor(self._apply_io, decode)
        swap()

    def _read_dropped(self, ctx: bytes) -> None:
        for fut in self._reads.pop(ctx, ()):
            if not fut.done():
                fut.set_exception(self._not_leader(NotLeader(self.core.leader)))

    async def _apply(self, entries: Sequence[Entry]) -> None:
        apply, prepare = self._sm.apply, self._sm.prepare
        large = self.options.prepare_in_thread_bytes
        proposals = self._proposals
        for e in entries:
            result: Any = None
            if e.type == EntryType.NORMAL:
                try:
                    if len(e.data) >= large:
                        result = (await asyncio.get_running_loop().run_in_executor(self._apply_io, prepare, e))()
                    else:
                        result = apply(e)
                except Exception as ex:
                    result = ex
                self._bytes_since_snapshot += len(e.data)
            elif e.type == EntryType.CONF_CHANGE:
                self._learn_conf_change(ConfChange.decode(e.data), announce=True)
                result = e.index
            waiter = proposals.pop(e.index, None) if proposals else None
            if waiter is not None and not waiter[1].done():
                term, fut = waiter
                if term != e.term:
                    fut.set_exception(ProposalDropped(
                        "a leader change replaced the entry before it committed; it was not applied"))
                elif isinstance(result, Exception):
                    fut.set_exception(result)
                else:
                    fut.set_result(result)
                if term == e.term and self.commit_latency_observer is not None:
                    self.commit_latency_observer(time.monotonic() - fut.proposed_at)
        self._set_applied(entries[-1].index)

    def _set_applied(self, index: int) -> None:
        self.applied = index
        if self._applied_waiters:
            ready = [w for w in self._applied_waiters if w[0] <= index]
            self._applied_waiters = [w for w in self._applied_waiters if w[0] > index]
            for _, fut in ready:
                if not fut.done():
                    fut.set_result(index)

    def _start_reads(self) -> None:
        if not self._read_waiting:
            return
        waiting, self._read_waiting = self._read_waiting, []
        self._read_seq += 1
        ctx = self._read_seq.to_bytes(8, "big")
        try:
            self.core.read_index(ctx)
        except NotLeader as e:
            err = self._not_leader(e)
            for f in waiting:
                if not f.done():
                    f.set_exception(err)
            return
        self._reads[ctx] = waiting

    def _read_ready(self, ctx: bytes, index: int) -> None:
        waiting = self._reads.pop(ctx, [])
        if index <= self.applied:
            for f in waiting:
                if not f.done():
                    f.set_result(self.applied)
        else:
            self._applied_waiters.extend((index, f) for f in waiting)

    def _soft_changed(self, soft: SoftState) -> None:
        old, self._soft = self._soft, soft
        if soft.role != old.role or soft.leader != old.leader:
            log.info("node %d: %s in term %d, leader %s", self.id, soft.role.name.lower(),
                     soft.term, soft.leader or "unknown")
            for cb in self._role_callbacks:
                try:
                    cb(soft.role, soft.leader, soft.term)
                except Exception:
                    log.exception("role-change callback failed")

    # ------------------------------------------------------------------ snapshots --

    def _maybe_snapshot(self) -> None:
        o = self.options
        if self._snapshotting or self.applied <= self.snapshot_index:
            return
        if (self.applied - self.snapshot_index < o.snapshot_entries
                and self._bytes_since_snapshot < o.snapshot_bytes):
            return
        self.snapshot_now()

    def snapshot_now(self) -> asyncio.Task | None:
        """Take a snapshot of the state machine at the applied index, in the background."""
        if self._snapshotting or self.applied <= self.snapshot_index:
            return None
        index = self.applied
        term = self.core.log.term(index)
        if term is None:
            return None
        writer = self.sm.snapshot()
        membership = self.core.membership_at(index)
        context = json.dumps({str(k): v for k, v in sorted(self._recorded.items())}).encode()
        self._snapshotting = True
        self._bytes_since_snapshot = 0
        return self._spawn(self._write_snapshot(index, term, membership, context, writer),
                           f"raft-{self.id}-snapshot-{index}")

    async def _write_snapshot(self, index: int, term: int, membership: Membership, context: bytes,
                              writer: Callable) -> None:
        loop = asyncio.get_running_loop()
        try:
            source = await loop.run_in_executor(self._snap_io, self.storage.write_snapshot,
                                                index, term, membership, context, writer)
            if not self._started:
                return
            self.core.compact(source, self.options.snapshot_trailing_entries)
            self.snapshot_index = max(self.snapshot_index, index)
            await loop.run_in_executor(self._io, self.storage.compact, source.meta)
            log.info("node %d: snapshot at index %d (%d bytes)", self.id, index, source.meta.size)
        except Exception:
            log.exception("node %d: snapshot at %d failed; will retry later", self.id, index)
        finally:
            self._snapshotting = False

    # ------------------------------------------------------------------ membership --

    @contextlib.contextmanager
    def _one_change(self, what: str) -> Iterator[None]:
        """Membership changes one at a time, including an add's wait for the learner to catch
        up (between its two entries the core alone would let another change in)."""
        if self._changing:
            raise ProposalDropped(f"a membership change is in progress ({self._changing}); retry once it completes")
        self._changing = what
        try:
            yield
        finally:
            self._changing = ""

    async def _change(self, kind: ConfChangeType, node_id: int, address: str, directory_id: str | None,
                      timeout: float) -> int:
        self._check_running()
        context = b""
        if address:  # every member's address goes with the change: a node that joins later learns them all
            members = self.core.membership.members
            book = {n: a for n in members if (a := self._recorded.get(n) or self.addresses.get(n))}
            book[node_id] = address
            context = json.dumps({str(k): v for k, v in sorted(book.items())}).encode()
        try:
            index = self.core.propose_conf_change(kind, node_id, context, directory_id)
        except NotLeader as e:
            raise self._not_leader(e) from None
        if index == 0:
            return 0
        return await asyncio.wait_for(self._await_entry(index), timeout)

    def _learn_conf_change(self, cc: ConfChange, announce: bool) -> None:
        if cc.type == ConfChangeType.REMOVE:
            self._recorded.pop(cc.node_id, None)
            if cc.node_id != self.id:
                self.addresses.pop(cc.node_id, None)
                self.transport.remove(cc.node_id)
        elif cc.context.startswith(b"{"):
            self._learn_book(_address_book(cc.context), added=cc.node_id)
        elif cc.context:  # as changes were written before they carried every address
            self._learn_book({cc.node_id: cc.context.decode()}, added=cc.node_id)
        if announce:
            log.info("node %d: membership is now voters %s, learners %s", self.id,
                     sorted(cc.result.voters), sorted(cc.result.learners))

    def _learn_book(self, book: dict[int, str], added: int = 0) -> None:
        """Addresses the cluster recorded. A statically configured voter's address stays this
        node's own view (a NAT, a proxy) unless the change is about that very node."""
        for nid, addr in book.items():
            if nid in self.voters and nid != added:
                continue
            self.addresses[nid] = self._recorded[nid] = addr
            if nid != self.id:
                self.transport.set_address(nid, addr)

    def learn_view(self, book: dict[int, str]) -> None:
        """Addresses another node told this one (an observer asking the leader): used, not recorded."""
        for nid, addr in book.items():
            if nid != self.id and self.addresses.get(nid) != addr and nid not in self._recorded:
                self.addresses[nid] = addr
                self.transport.set_address(nid, addr)

    def _learn_addresses(self, context: bytes) -> None:
        if not context:
            return
        try:
            book = _address_book(context)
        except ValueError:
            log.warning("node %d: a snapshot carries an unreadable address book", self.id)
            return
        self._learn_book(book)

    # ------------------------------------------------------------------ helpers --

    def _not_leader(self, e: NotLeader) -> NotLeader:
        return NotLeader(e.leader_id, self.addresses.get(e.leader_id))

    def _check_running(self) -> None:
        if self._failed is not None:
            raise self._failed
        if not self._started:
            raise NodeStopped(f"node {self.id} is not running")

    def _fail_all(self, reason: BaseException) -> None:
        for index, (_, fut) in self._proposals.items():
            if not fut.done():  # appended, so it may still commit without us
                fut.set_exception(OutcomeUnknown(f"entry {index} was appended but {reason}; "
                                                 f"its outcome is unknown"))
        self._proposals.clear()
        for futs in [self._read_waiting, *self._reads.values(), [f for _, f in self._applied_waiters]]:
            for waiter in futs:
                if not waiter.done():
                    waiter.set_exception(reason)
        self._read_waiting, self._reads, self._applied_waiters = [], {}, []


class _NodeRuntime:
    """The node's side of ``raft.driver.handle_ready`` (kept off RaftNode's public API)."""

    def __init__(self, node: RaftNode) -> None:
        self.node = node
        self.soft_state_changed = node._soft_changed
        self.persist = node._persist
        self.restore = node._restore
        self.apply = node._apply
        self.read_ready = node._read_ready
        self.read_dropped = node._read_dropped

    def send(self, msgs: list[Message]) -> None:
        self.node.transport.send(msgs)  # looked up each time: tests wrap it to cut links


def _address_book(context: bytes) -> dict[int, str]:
    """``{"1": "host:port", ...}`` as recorded in snapshots and membership changes."""
    return {int(k): str(v) for k, v in json.loads(context).items()}


def _superseded(index: int, term: int, snapshot_term: int) -> RaftError:
    """What a snapshot from the leader covering our pending entry (``index``, ``term``) says
    about it. Terms never decrease along a log, so if ours is newer than the snapshot's last
    entry the leader's log holds another entry at ``index`` (Raft §5.3): not applied.
    Otherwise it may be the very entry the snapshot includes."""
    if term > snapshot_term:
        return ProposalDropped(f"entry {index} of term {term} was replaced by the leader's log "
                               f"(a snapshot of term {snapshot_term}); it was not applied")
    return OutcomeUnknown(f"entry {index} of term {term} is covered by a snapshot from the "
                          f"leader, which may or may not include it; its outcome is unknown")
