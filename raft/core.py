"""The Raft consensus algorithm as a pure state machine.

No sockets, threads, clocks or disks: the caller feeds ``tick()``, ``step(message)``,
``propose(...)`` and ``read_index(...)``, then drains a :class:`~raft.messages.Ready` that
says what to persist, send and apply, and acknowledges it with ``advance``. Randomness comes
from the injected seed, so a whole cluster can be simulated deterministically
(``raft.testing``). The structure follows etcd's ``raft`` package; section numbers refer to
the Raft paper (Ongaro and Ousterhout, 2014) and thesis (Ongaro, 2014).
"""
from __future__ import annotations

import random
import zlib
from dataclasses import dataclass, field
from enum import Enum
from typing import Callable

from .errors import (CommittedConflict, MembershipRefused, NotLeader, ProposalDropped, RaftError,
                     TooManyObservers)
from .log import RaftLog
from .messages import (ConfChange, ConfChangeType, Entry, EntryType, HardState, Membership,
                       Message, MessageType as MT, ReadState, Ready, Role, Snapshot,
                       SnapshotMeta, SnapshotSource, BytesReceiver, SnapshotReceiver, SoftState)
from .progress import Progress, ProgressState


@dataclass(slots=True)
class CoreConfig:
    """Tunables, in ticks and counts. The runtime maps milliseconds onto ticks."""

    election_ticks: int = 10  # followers wait a random [T, 2T) ticks before campaigning
    heartbeat_ticks: int = 1
    max_inflight: int = 256  # pipelined appends per follower
    max_entries_per_msg: int = 4096
    max_bytes_per_msg: int = 1 << 20
    max_apply_entries: int = 16384  # committed entries handed out per Ready
    max_uncommitted_entries: int = 65536  # backpressure: proposals beyond this are dropped
    pre_vote: bool = True  # thesis §9.6: a rejoining node cannot depose a healthy leader
    check_quorum: bool = True  # thesis §6.2: a leader cut off from a majority steps down
    fast_backoff: bool = True  # thesis §5.3: skip a whole conflicting term per round trip
    snapshot_chunk_bytes: int = 1 << 20
    snapshot_chunks_inflight: int = 4

    def __post_init__(self) -> None:
        if self.election_ticks <= self.heartbeat_ticks or self.heartbeat_ticks < 1:
            raise ValueError("election_ticks must exceed heartbeat_ticks >= 1")
        if min(self.max_inflight, self.max_entries_per_msg, self.max_bytes_per_msg,
               self.snapshot_chunk_bytes, self.snapshot_chunks_inflight) < 1:
            raise ValueError("flow-control limits must be positive")


class VoteResult(Enum):
    WON = "won"
    LOST = "lost"
    PENDING = "pending"


@dataclass(slots=True)
class _ReadRequest:
    index: int
    acks: set[int] = field(default_factory=set)


@dataclass(slots=True)
class _IncomingSnapshot:
    key: tuple[int, int, int, int]  # (term, leader, snapshot index, snapshot term)
    meta: SnapshotMeta
    receiver: SnapshotReceiver  # the chunks go straight here (to disk), never into a buffer
    size: int = 0  # bytes received so far: the offset the next chunk must start at
    crc: int = 0


@dataclass(frozen=True, slots=True)
class PeerStatus:
    node_id: int
    match: int
    next: int
    state: str
    kind: str  # "voter", "learner", or "observer": not a member, or not the member's directory
    ticks_since_contact: int  # -1: never heard from
    directory: str  # the data directory its answers come from ("" until it answers)


@dataclass(frozen=True, slots=True)
class CoreStatus:
    id: int
    role: Role
    term: int
    leader: int
    commit: int
    applied: int
    last_index: int
    snapshot_index: int
    membership: Membership
    peers: tuple[PeerStatus, ...]
    dropped: dict[str, int]


#: Election timeouts of silence after which a leader forgets an observer (it asks again).
OBSERVER_TIMEOUT = 10
#: Observers a leader replicates to at once. Each costs a progress entry, a transport link and
#: its queues, and anyone reaching the port may ask (Observe); a KRaft quorum's observers are
#: its controllers waiting to be added, a handful. Asking beyond this is refused (TooManyObservers).
MAX_OBSERVERS = 64

_LEADER_TRAFFIC = frozenset({MT.APPEND, MT.HEARTBEAT, MT.SNAPSHOT})
_RESPONSES = frozenset({MT.APPEND_RESP, MT.HEARTBEAT_RESP, MT.SNAPSHOT_RESP})
_RESPONSES_AND_VOTES = _RESPONSES | {MT.VOTE_RESP, MT.PRE_VOTE_RESP}


class RaftCore:
    """One node's Raft state. See the module docstring for the calling convention."""

    def __init__(self, node_id: int, config: CoreConfig | None = None, *, seed: int = 0,
                 hard_state: HardState | None = None, snapshot: SnapshotMeta | None = None,
                 entries: list[Entry] | None = None, membership: Membership | None = None,
                 snapshot_source: SnapshotSource | None = None,
                 receive_snapshot: Callable[[SnapshotMeta], SnapshotReceiver] = BytesReceiver,
                 directory_id: str = "") -> None:
        """Start from what storage recovered: ``snapshot`` (or, on a fresh node, the bootstrap
        ``membership``), the ``entries`` after it and the last ``hard_state``. Snapshots
        arriving from a leader are written to ``receive_snapshot(meta)`` chunk by chunk
        (``Storage.receive_snapshot``; in memory by default). ``directory_id`` names this
        node's data directory (KIP-853): it votes and counts only as the member of that one."""
        if node_id <= 0:
            raise ValueError("node ids are positive integers")
        self.id = node_id
        self.directory_id = directory_id
        self.cfg = config or CoreConfig()
        self.rng = random.Random(seed * 1_000_003 + node_id)
        hs = hard_state or HardState()
        snap = snapshot or SnapshotMeta(membership=membership or Membership())
        self.log = RaftLog(snap.index, snap.term, entries)
        self.log.committed = min(max(hs.commit, snap.index), self.log.last_index())
        self.term, self.vote = hs.term, hs.vote
        self.snapshot_meta = snap
        self.snapshot_source = snapshot_source
        self.membership = snap.membership
        self._conf_history: list[tuple[int, Membership]] = []
        self.role = Role.FOLLOWER
        self.leader = 0
        self.ticks = 0
        self.progress: dict[int, Progress] = {}
        self.votes: dict[int, bool] = {}
        self.election_elapsed = 0
        self.heartbeat_elapsed = 0
        self.randomized_timeout = self.cfg.election_ticks
        self.lead_transferee = 0
        self.pending_conf_index = 0
        # On a leader whose removal committed: the index of that change. It leads (counting
        # itself for nothing) until the voters left know it, then steps down (_maybe_resign).
        self.resigning = 0
        self.msgs: list[Message] = []
        self.read_states: list[ReadState] = []
        self.read_queue: dict[bytes, _ReadRequest] = {}
        self.reads_waiting_commit: list[bytes] = []
        self.dropped_reads: list[bytes] = []
        self._receive_snapshot = receive_snapshot
        self.incoming: _IncomingSnapshot | None = None
        self.pending_snapshot: Snapshot | None = None
        self.dropped: dict[str, int] = {}
        self._persisted_hs = hs
        self._prev_soft = SoftState(Role.FOLLOWER, 0, self.term)
        self._need_bcast = False
        for e in self.log.entries[:self.log.committed - self.log.snap_index]:
            if e.type == EntryType.CONF_CHANGE:
                self._apply_conf(e)
        self._become_follower(self.term, 0)

    # ------------------------------------------------------------------ public inputs --

    def tick(self) -> None:
        """Advance logical time by one tick."""
        self.ticks += 1
        if self.role == Role.LEADER:
            self._tick_leader()
        else:
            self.election_elapsed += 1
            if self.promotable() and self.election_elapsed >= self.randomized_timeout:
                self.election_elapsed = 0
                self._campaign(pre=self.cfg.pre_vote)

    def step(self, m: Message) -> None:
        """Take one message from a peer. Malformed, stale or foreign messages are dropped
        and counted in ``dropped``; they never raise."""
        reason = self._invalid(m)
        if reason:
            self._drop(reason)
            return
        if m.term > self.term:
            if m.type in (MT.VOTE, MT.PRE_VOTE) and not m.force:
                # Thesis §4.2.3: while we hear from a live leader, do not let a candidate
                # disrupt it: any candidate under CheckQuorum, and always one that is not a
                # voter in our configuration (a removed node that never learned it).
                in_lease = self.leader != 0 and self.election_elapsed < self.cfg.election_ticks
                if in_lease and (self.cfg.check_quorum or not self.membership.is_voter(m.frm, m.directory)):
                    self._drop("vote_in_lease")
                    return
            if m.type == MT.PRE_VOTE or (m.type == MT.PRE_VOTE_RESP and not m.reject):
                pass  # pre-votes speak of a future term without moving to it
            else:
                self._become_follower(m.term, m.frm if m.type in _LEADER_TRAFFIC else 0)
        elif m.term < self.term:
            if m.type in (MT.APPEND, MT.HEARTBEAT):
                # A stale leader: tell it our term so it steps down (Raft §5.1). Waiting for
                # us to campaign is not enough: we may not be promotable (a voter that has
                # not yet learned it was added back), and then nobody would ever tell it.
                self._send(Message(MT.APPEND_RESP, m.frm, self.id, self.term))
            elif m.type in (MT.VOTE, MT.PRE_VOTE):
                # Refuse with our term (Raft §5.1): a candidate that never hears of it keeps
                # campaigning in a term nobody answers when the nodes at the higher term
                # have no reason to write to it.
                resp = MT.VOTE_RESP if m.type == MT.VOTE else MT.PRE_VOTE_RESP
                self._send(Message(resp, m.frm, self.id, self.term, reject=True))
            else:
                self._drop("stale_term")
            return
        if m.type in (MT.VOTE, MT.PRE_VOTE):
            self._handle_vote_request(m)
        elif self.role == Role.LEADER:
            self._step_leader(m)
            if self.resigning and self.role == Role.LEADER:
                self._maybe_resign()
        elif self.role == Role.FOLLOWER:
            self._step_follower(m)
        else:
            self._step_candidate(m)

    def propose(self, datas: list[bytes]) -> tuple[int, int]:
        """Append ``datas`` as entries of the current term; returns their (first, last)
        index. They are replicated when the caller next takes a Ready."""
        self._check_can_propose()
        li, t = self.log.last_index(), self.term
        if li - self.log.committed + len(datas) > self.cfg.max_uncommitted_entries and li > self.log.committed:
            raise ProposalDropped("too many uncommitted entries; retry after some commit")
        self.log.append([Entry(li + 1 + k, t, d) for k, d in enumerate(datas)])
        self._need_bcast = True
        return li + 1, li + len(datas)

    def propose_conf_change(self, change: ConfChangeType, node_id: int, context: bytes = b"",
                            directory_id: str | None = None) -> int:
        """Propose a single-server membership change (thesis §4.1); returns its index, or 0
        when the membership already has that shape. One change may be pending at a time.

        ``directory_id`` names the member's data directory (KIP-853): recorded when adding, and
        needed then once the configuration records any (a member without one matches any
        directory); when removing, the member's recorded one ("" if unknown) must be it. Refused
        (MembershipRefused), with nothing appended: a removal that would leave fewer live voters
        than a majority of the rest, as etcd's strict reconfiguration check does (the cluster
        could not commit anything afterwards); and any change while the current voters lack a
        live majority, since a change commits under the configuration before it (§4.1)."""
        self._check_can_propose()
        if not self._committed_in_term():
            raise ProposalDropped("the leader has not committed an entry of its term yet; retry")
        if self.pending_conf_index > self.log.committed:
            raise ProposalDropped("a membership change is already in progress; retry once it commits")
        if node_id <= 0:
            raise RaftError("node ids are positive integers")
        m = self.membership
        voters, learners, dirs = set(m.voters), set(m.learners), dict(m.directories)
        known = m.directory(node_id)
        if change == ConfChangeType.REMOVE:
            if directory_id is not None and node_id in m.members and directory_id != known:
                raise MembershipRefused(f"node {node_id} is a member with directory id "
                                        f"{known or '(unknown)'}, not {directory_id or '(unknown)'}")
            voters.discard(node_id)
            learners.discard(node_id)
            if node_id in m.voters:
                self._check_live_after_removal(node_id, voters)
        else:
            if directory_id and known and known != directory_id and node_id in m.members:
                raise MembershipRefused(f"node {node_id} is a member with directory id {known}, not "
                                        f"{directory_id}: remove it first (a formatted-again disk is a new replica)")
            if not directory_id and not known and m.directories:
                # A member without a directory matches any (voters configured statically), so a
                # disk formatted again would count as it: what KIP-853's directories prevent.
                raise MembershipRefused(f"give node {node_id}'s directory id: this configuration names its members "
                                        f"by node id and directory id (KIP-853), and a member without one would match "
                                        f"any directory, a disk formatted again included")
            if change == ConfChangeType.ADD_VOTER:
                voters.add(node_id)
                learners.discard(node_id)
            else:
                if node_id in voters:
                    raise MembershipRefused(f"node {node_id} is a voter; remove it before re-adding it as a learner")
                learners.add(node_id)
            if directory_id:
                dirs[node_id] = directory_id
        result = Membership(frozenset(voters), frozenset(learners), tuple(dirs.items()))
        if result == self.membership:
            return 0
        self._check_live_now(change, node_id)
        index = self.log.last_index() + 1
        cc = ConfChange(change, node_id, result, context)
        self.log.append([Entry(index, self.term, cc.encode(), EntryType.CONF_CHANGE)])
        self.pending_conf_index = index
        self._need_bcast = True
        return index

    def _check_live_after_removal(self, removed: int, voters: set[int]) -> None:
        """Once a removal commits, the voters left must make a majority to commit anything,
        the change undoing it included (etcd's strict reconfiguration check)."""
        if not voters:
            raise MembershipRefused("cannot remove the last voter")
        live, need = self._live_among(voters)
        if len(live) < need:
            raise MembershipRefused(
                f"without node {removed}, voters {sorted(voters)} would have {len(live)} live "
                f"({', '.join(map(str, live)) or 'none'}), fewer than the {need} a majority needs; "
                f"bring a voter back or add one first")

    def _check_live_now(self, change: ConfChangeType, node_id: int) -> None:
        """A change takes effect when it commits, and commits under the current voters (§4.1):
        without a live majority of them it would sit uncommitted, and every later change would
        be refused as in progress."""
        voters = self.membership.voters
        live, need = self._live_among(voters)
        if len(live) >= need:
            return
        why = "bring a voter back first"
        if change == ConfChangeType.REMOVE and len(voters) == 2 and node_id in voters and node_id not in live:
            why = (f"a dead voter of a 2-voter quorum cannot be removed: committing its removal needs its own "
                   f"acknowledgement, so bring node {node_id} back first")
        raise MembershipRefused(
            f"the change commits under the current voters {sorted(voters)}, which have {len(live)} live "
            f"({', '.join(map(str, live)) or 'none'}), fewer than the {need} a majority needs; {why}")

    def _live_among(self, voters: set[int] | frozenset[int]) -> tuple[list[int], int]:
        """The live ones of ``voters``, and how many a majority of them is."""
        return sorted(n for n in voters if self._live(n)), len(voters) // 2 + 1

    def _live(self, node_id: int) -> bool:
        """The leader itself, or a voter that answered the leader's own messages of this term,
        as its member, within an election timeout. Only such answers show the leader reaches it:
        a change commits by the acknowledgements of nodes the leader's appends reach (§4.1)."""
        if node_id == self.id:
            return True
        pr = self.progress.get(node_id)
        return (pr is not None and pr.last_contact_tick >= 0 and self._counts(node_id, pr)
                and self.ticks - pr.last_contact_tick < self.cfg.election_ticks)

    def observe(self, node_id: int) -> None:
        """On a leader: replicate the log to a node that is not a member, without counting it
        anywhere (a KIP-853 observer, such as a controller that will be added once caught up).
        The node asks again after a leader change; one silent for ``OBSERVER_TIMEOUT`` election
        timeouts is forgotten. At most ``MAX_OBSERVERS`` at once (TooManyObservers)."""
        if self.role != Role.LEADER:
            raise NotLeader(self.leader)
        if node_id <= 0 or node_id == self.id:
            raise RaftError(f"cannot observe node {node_id}")
        pr = self.progress.get(node_id)
        if pr is None:
            if sum(1 for p in self.progress.values() if p.observer) >= MAX_OBSERVERS:
                raise TooManyObservers(
                    f"the leader replicates to at most {MAX_OBSERVERS} observers and has that many; node "
                    f"{node_id} may ask again once one is added as a member or forgotten (silent for "
                    f"{OBSERVER_TIMEOUT} election timeouts)")
            # The next heartbeat starts it: by then the observer has our answer and our address.
            pr = self.progress[node_id] = Progress(self.log.last_index() + 1, self.cfg.max_inflight,
                                                   is_learner=True, observer=True)
        # Not contact: a voter asks when it no longer hears us (raft.observer.MEMBER_SILENCE),
        # so a request proves only that it reaches us, never that we reach it (``_live``).
        pr.asked_tick = self.ticks

    def read_index(self, context: bytes) -> None:
        """Start a linearizable read (thesis §6.4). A ReadState with this context appears in a
        later Ready once a heartbeat round has confirmed leadership; serve the read when the
        state machine has applied its index. Raises NotLeader on other roles."""
        if self.role != Role.LEADER or self.resigning:
            raise NotLeader(0 if self.resigning else self.leader)
        if not self._committed_in_term():
            self.reads_waiting_commit.append(context)  # no read before our first commit
            return
        self._start_read(context)

    def transfer_leadership(self, target: int) -> None:
        """Bring ``target`` up to date, then tell it to campaign at once (thesis §3.10).
        Proposals are refused until it completes or an election timeout passes. Naming this
        node itself cancels a pending transfer, as etcd's raft does."""
        if self.role != Role.LEADER:
            raise NotLeader(self.leader)
        if target == self.id:
            self.lead_transferee = 0
            return
        if target == self.lead_transferee:
            return
        if target not in self.membership.voters or not self._counts(target, self.progress[target]):
            raise RaftError(f"node {target} is not a voter")
        self.lead_transferee = target
        self.election_elapsed = 0
        pr = self.progress[target]
        if pr.match == self.log.last_index():
            self._send(Message(MT.TIMEOUT_NOW, target, self.id, self.term))
        else:
            self._send_append(target)

    def compact(self, source: SnapshotSource, trailing: int = 0) -> None:
        """The application has written a snapshot (``source.meta``) of its state at an applied
        index: drop the log before it, keeping ``trailing`` entries for slow followers."""
        meta = source.meta
        if meta.index <= self.snapshot_meta.index:
            return
        self.snapshot_meta = meta
        self.snapshot_source = source
        keep_from = max(meta.index - trailing, self.log.snap_index)
        self.log.compact(keep_from)
        self._conf_history = [(i, m) for i, m in self._conf_history if i > keep_from]

    def caught_up(self, node_id: int, directory_id: str | None = None) -> bool:
        """On a leader: whether ``node_id`` (its replica on ``directory_id``, when given) holds
        every committed entry: a learner or observer ready to be promoted without weighing on
        the quorum, as in etcd's learner promotion and KIP-853's AddVoter."""
        pr = self.progress.get(node_id) if self.role == Role.LEADER else None
        return (pr is not None and pr.match >= self.log.committed
                and (directory_id is None or pr.directory == directory_id))

    def membership_at(self, index: int) -> Membership:
        """The configuration in force after applying ``index`` (for snapshot metadata)."""
        if index < self.snapshot_meta.index:
            raise ValueError(f"membership at {index} is no longer known")
        found = self.snapshot_meta.membership
        for i, m in self._conf_history:
            if i <= index:
                found = m
        return found

    def promotable(self) -> bool:
        """A voter of the configuration, as the member with this data directory (KIP-853)."""
        return self.membership.is_voter(self.id, self.directory_id)

    # ------------------------------------------------------------------ Ready protocol --

    def has_ready(self) -> bool:
        log, hs, soft = self.log, self._persisted_hs, self._prev_soft
        return bool(self.msgs or self._need_bcast or log.stable < log.snap_index + len(log.entries)
                    or log.committed > log.applied or self.pending_snapshot
                    or self.read_states or self.dropped_reads
                    or hs.term != self.term or hs.vote != self.vote or hs.commit != log.committed
                    or soft.role != self.role or soft.leader != self.leader)

    def ready(self) -> Ready:
        """Take what must be done now. Call ``advance`` with it before the next ``ready``."""
        if self._need_bcast:
            self._need_bcast = False
            if self.role == Role.LEADER:
                self._bcast_append(allow_empty=False)
        log, hs, soft = self.log, self._persisted_hs, self._prev_soft
        rd = Ready(messages=self.msgs)
        self.msgs = []
        if hs.term != self.term or hs.vote != self.vote:
            rd.hard_state = HardState(self.term, self.vote, log.committed)
            rd.sync = True  # a vote or term must be on disk before anyone hears of it
        elif hs.commit != log.committed:
            rd.hard_state = HardState(self.term, self.vote, log.committed)  # no fsync needed
        if soft.role != self.role or soft.leader != self.leader or soft.term != self.term:
            rd.soft_state = self._prev_soft = SoftState(self.role, self.leader, self.term)
        if self.pending_snapshot is not None:
            rd.snapshot, self.pending_snapshot = self.pending_snapshot, None
            rd.sync = True
        if log.stable < log.snap_index + len(log.entries):
            rd.entries = log.unstable()
            rd.sync = True
        if log.committed > log.applied:
            rd.committed = log.take_committed(self.cfg.max_apply_entries)
        if self.read_states:
            rd.read_states, self.read_states = self.read_states, []
        if self.dropped_reads:
            rd.dropped_reads, self.dropped_reads = self.dropped_reads, []
        return rd

    def advance(self, rd: Ready) -> None:
        """The Ready's state is durable and its messages are sent."""
        if rd.hard_state is not None:
            self._persisted_hs = rd.hard_state
        if rd.entries:
            last = rd.entries[-1]
            self.log.stable_to(last.index, last.term)
            if self.role == Role.LEADER:
                me = self.progress.get(self.id)
                if me is not None and me.maybe_update(self.log.stable):
                    self._maybe_commit()

    # ------------------------------------------------------------------ introspection --

    def status(self) -> CoreStatus:
        m = self.membership
        peers = tuple(
            PeerStatus(nid, pr.match, pr.next, pr.state.name,
                       # a member not heard from yet is what the configuration says it is
                       "observer" if pr.observer or (pr.directory and not m.matches(nid, pr.directory))
                       else "learner" if pr.is_learner else "voter",
                       self.ticks - pr.last_contact_tick if pr.last_contact_tick >= 0 else -1,
                       pr.directory)
            for nid, pr in sorted(self.progress.items()) if nid != self.id)
        return CoreStatus(self.id, self.role, self.term, self.leader, self.log.committed,
                          self.log.applied, self.log.last_index(), self.snapshot_meta.index,
                          self.membership, peers, dict(self.dropped))

    # ------------------------------------------------------------------ role changes --

    def _reset(self, term: int) -> None:
        if term != self.term:
            self.term = term
            self.vote = 0
        self.leader = 0
        self.election_elapsed = 0
        self.heartbeat_elapsed = 0
        self.randomized_timeout = self.cfg.election_ticks + self.rng.randrange(self.cfg.election_ticks)
        self.votes = {}
        self.progress = {}
        self.lead_transferee = 0
        self.resigning = 0
        self._fail_reads()

    def _become_follower(self, term: int, leader: int) -> None:
        self._reset(term)
        self.role = Role.FOLLOWER
        self.leader = leader

    def _become_leader(self) -> None:
        self._reset(self.term)
        self.role = Role.LEADER
        self.leader = self.id
        nxt = self.log.last_index() + 1
        for nid in self.membership.members:
            self.progress[nid] = Progress(nxt, self.cfg.max_inflight, nid not in self.membership.voters)
        me = self.progress.setdefault(self.id, Progress(nxt, self.cfg.max_inflight))
        me.directory = self.directory_id
        me.match = self.log.stable
        me.state = ProgressState.REPLICATE
        self.log.append([Entry(nxt, self.term, b"", EntryType.NOOP)])
        self.pending_conf_index = nxt  # no membership change until our term commits
        if self.membership.directories and not self._membership_recorded():
            cc = ConfChange(ConfChangeType.BOOTSTRAP, self.id, self.membership)
            self.log.append([Entry(nxt + 1, self.term, cc.encode(), EntryType.CONF_CHANGE)])
            self.pending_conf_index = nxt + 1
        self._bcast_append(allow_empty=True)

    def _membership_recorded(self) -> bool:
        """Whether the log or the snapshot records the configuration, rather than only the
        storage this node was formatted with (the bootstrap voter set)."""
        return (self.snapshot_meta.index > 0 or bool(self._conf_history)
                or any(e.type == EntryType.CONF_CHANGE for e in self.log.entries))

    def _campaign(self, pre: bool, force: bool = False) -> None:
        if pre:
            self.role = Role.PRE_CANDIDATE
            self.votes = {}
            self.leader = 0
            self.randomized_timeout = self.cfg.election_ticks + self.rng.randrange(self.cfg.election_ticks)
            vterm, vtype = self.term + 1, MT.PRE_VOTE
        else:
            self._reset(self.term + 1)
            self.role = Role.CANDIDATE
            self.vote = self.id
            vterm, vtype = self.term, MT.VOTE
        if self._poll(self.id, True) == VoteResult.WON:
            if pre:
                self._campaign(pre=False)
            else:
                self._become_leader()
            return
        li, lt = self.log.last_index(), self.log.last_term()
        for nid in sorted(self.membership.voters):
            if nid != self.id:
                self._send(Message(vtype, nid, self.id, vterm, index=li, log_term=lt, force=force))

    def _poll(self, nid: int, granted: bool) -> VoteResult:
        """Record ``nid``'s (pre-)vote, the first one only, and count (Raft §5.2)."""
        if nid in self.membership.voters:
            self.votes.setdefault(nid, granted)
        yes = sum(1 for v in self.votes.values() if v)
        no = len(self.votes) - yes
        q = self.membership.quorum()
        if yes >= q:
            return VoteResult.WON
        if no > len(self.membership.voters) - q:
            return VoteResult.LOST  # a majority can no longer be reached
        return VoteResult.PENDING

    # ------------------------------------------------------------------ leader --

    def _tick_leader(self) -> None:
        self.heartbeat_elapsed += 1
        self.election_elapsed += 1
        if self.election_elapsed >= self.cfg.election_ticks:
            self.election_elapsed = 0
            if self.cfg.check_quorum and not self._quorum_active():
                self._become_follower(self.term, 0)
                return
            self.lead_transferee = 0
            self._expire_observers()
        for nid, pr in self.progress.items():
            if pr.snapshot is not None and pr.snapshot.tick(self.cfg.election_ticks):
                self._send_snapshot(nid, pr)  # chunks or acknowledgements were lost
        if self.heartbeat_elapsed >= self.cfg.heartbeat_ticks:
            self.heartbeat_elapsed = 0
            self._bcast_heartbeat(next(reversed(self.read_queue), b""))

    def _quorum_active(self) -> bool:
        active = 0
        for nid, pr in self.progress.items():
            if nid not in self.membership.voters:  # a leader resigning counts itself for nothing
                pass
            elif nid == self.id or (pr.recent_active and self._counts(nid, pr)):
                active += 1
            pr.recent_active = False
        return active >= self.membership.quorum()

    def _expire_observers(self) -> None:
        limit = OBSERVER_TIMEOUT * self.cfg.election_ticks
        silent = [n for n, pr in self.progress.items()
                  if pr.observer and self.ticks - max(pr.last_contact_tick, pr.asked_tick) > limit]
        for nid in silent:
            del self.progress[nid]

    def _counts(self, node_id: int, pr: Progress) -> bool:
        """Whether ``pr``'s answers come from the replica the configuration names as member
        ``node_id``: one of the same id on a disk formatted again is not it (KIP-853)."""
        return not pr.observer and self.membership.matches(node_id, pr.directory)

    def _step_leader(self, m: Message) -> None:
        pr = self.progress.get(m.frm)
        if pr is None or m.type not in _RESPONSES:
            self._drop("unexpected_for_leader")
            return
        pr.recent_active = True
        pr.last_contact_tick = self.ticks
        pr.commit_known = max(pr.commit_known, m.commit)  # every answer says how far it knows the commit
        if m.directory != pr.directory:
            if pr.directory and pr.match:
                # Its disk was formatted again: what it acknowledged is gone. Catch it up from
                # scratch (and, when the configuration names its directory, stop counting it).
                pr.match = 0
                pr.become_probe()
                pr.next = self.log.last_index() + 1
                self._drop("peer_reset")
            pr.directory = m.directory
        if m.type == MT.APPEND_RESP:
            if m.reject:
                if self._maybe_decrease(pr, m):
                    self._send_append(m.frm)
                return
            probing = pr.state == ProgressState.PROBE and pr.match == m.index
            if not pr.maybe_update(m.index) and not probing:
                return
            if pr.state == ProgressState.PROBE:
                pr.become_replicate()
            # Followers learn the new commit index with the next append or heartbeat, as Kafka
            # followers learn the high watermark with their next fetch: an eager broadcast
            # (etcd's choice) would double the messages per write.
            self._maybe_commit()
            while self._send_append(m.frm, allow_empty=False):
                pass
            if m.frm == self.lead_transferee and pr.match == self.log.last_index():
                self._send(Message(MT.TIMEOUT_NOW, m.frm, self.id, self.term))
        elif m.type == MT.HEARTBEAT_RESP:
            if m.reject and m.index < pr.match:  # the follower lost acknowledged entries
                self._drop("follower_lost_entries")
                pr.match = m.index
                pr.become_probe()
            pr.probe_sent = False
            if pr.state == ProgressState.REPLICATE and pr.paused():
                pr.inflight.popleft()  # appends may have been lost: let one more out to find out
            if pr.match < self.log.last_index():
                self._send_append(m.frm)
            if m.context:
                self._ack_read(m.frm, m.context)
        else:
            self._handle_snapshot_resp(pr, m)

    def _maybe_resign(self) -> None:
        """A removed leader steps down once a majority of the voters left have answered that
        they know its removal committed: from then on they elect among themselves. One of them
        holding our whole log is told to campaign at once (thesis §3.10), so no election
        timeout passes without a leader."""
        voters = self.membership.voters
        know = sorted(n for n in voters if (pr := self.progress.get(n)) is not None
                      and self._counts(n, pr) and pr.commit_known >= self.resigning)
        if len(know) < self.membership.quorum():
            return
        last = self.log.last_index()
        successor = next((n for n in know if self.progress[n].match == last), 0)
        if successor:
            self._send(Message(MT.TIMEOUT_NOW, successor, self.id, self.term))
        self._become_follower(self.term, 0)

    def _maybe_decrease(self, pr: Progress, m: Message) -> bool:
        """A follower rejected the append whose previous entry is ``m.index``."""
        if self.cfg.fast_backoff:
            nxt = m.hint_index
            if m.hint_term > 0:
                last = self.log.last_index_of_term(m.hint_term)
                if last > 0:
                    nxt = last + 1
        else:
            nxt = m.index  # the seed's rule: step back one entry per rejection
        return pr.maybe_decrease(m.index, nxt)

    def _maybe_commit(self) -> bool:
        """Raft §5.4.2: commit the highest index on a majority, only if it is of our term."""
        progress = self.progress
        matches = [progress[n].match for n in self.membership.voters
                   if n in progress and self._counts(n, progress[n])]
        q = self.membership.quorum()
        if len(matches) < q:
            return False
        matches.sort(reverse=True)
        idx = matches[q - 1]
        if idx > self.log.committed and self.log.term(idx) == self.term:
            old = self.log.committed
            self.log.commit_to(idx)
            self._on_commit(old)
            return True
        return False

    def _bcast_append(self, allow_empty: bool) -> None:
        for nid in list(self.progress):
            if nid != self.id:
                self._send_append(nid, allow_empty)

    def _send_append(self, to: int, allow_empty: bool = True) -> bool:
        pr = self.progress.get(to)
        if pr is None or (not allow_empty and pr.next > self.log.last_index()) or pr.paused():
            return False
        prev = pr.next - 1
        prev_term = self.log.term(prev)
        if prev_term is None:
            if prev < self.log.snap_index:
                return self._send_snapshot(to, pr)
            pr.next = self.log.last_index() + 1  # beyond our log: restart at its end
            prev, prev_term = pr.next - 1, self.log.last_term()
        entries = []
        if pr.next <= self.log.last_index():
            entries = self.log.slice(pr.next, self.cfg.max_entries_per_msg,
                                     self.cfg.max_bytes_per_msg)
        elif not allow_empty:
            return False
        self._send(Message(MT.APPEND, to, self.id, self.term, index=prev, log_term=prev_term,
                           entries=entries, commit=self.log.committed))
        if entries:
            pr.sent(entries[-1].index)
        elif pr.state == ProgressState.PROBE:
            pr.probe_sent = True
        return bool(entries)

    def _bcast_heartbeat(self, context: bytes) -> None:
        """``context`` names the newest pending ReadIndex request (empty if none): followers
        echo it, and a majority of echoes confirms leadership for that read and every one
        queued before it (``_ack_read``), so one round serves all reads waiting (thesis §6.4)."""
        for nid, pr in self.progress.items():
            if nid != self.id:
                # Never a commit index beyond what the follower holds: it could not tell that
                # entry from a different one it has at that index (etcd does the same).
                self._send(Message(MT.HEARTBEAT, nid, self.id, self.term,
                                   commit=min(pr.match, self.log.committed), context=context))

    # snapshots, leader side

    def _send_snapshot(self, to: int, pr: Progress) -> bool:
        if pr.state != ProgressState.SNAPSHOT:
            if self.snapshot_source is None:
                self._drop("snapshot_unavailable")
                return False
            pr.become_snapshot(self.snapshot_source)
        transfer = pr.snapshot
        assert transfer is not None
        meta = transfer.source.meta
        sent = False
        for off, data, last in transfer.chunks(self.cfg.snapshot_chunk_bytes,
                                               self.cfg.snapshot_chunk_bytes * self.cfg.snapshot_chunks_inflight):
            self._send(Message(MT.SNAPSHOT, to, self.id, self.term, snapshot=meta, offset=off,
                               data=data, done=last))
            sent = True
        return sent

    def _handle_snapshot_resp(self, pr: Progress, m: Message) -> None:
        if m.done and not m.reject:
            pr.maybe_update(m.index)
            if pr.state == ProgressState.SNAPSHOT:
                pr.become_probe()
            self._send_append(m.frm)
            return
        if pr.snapshot is None or m.index != pr.snapshot.index:
            return
        if pr.snapshot.answered(m.offset, m.reject):
            self._send_snapshot(m.frm, pr)

    # reads

    def _start_read(self, ctx: bytes) -> None:
        if len(self.membership.voters) == 1:
            self.read_states.append(ReadState(ctx, self.log.committed))
            return
        self.read_queue[ctx] = _ReadRequest(self.log.committed, {self.id})
        self._bcast_heartbeat(ctx)

    def _ack_read(self, frm: int, ctx: bytes) -> None:
        req = self.read_queue.get(ctx)
        if req is None or frm not in self.membership.voters or not self._counts(frm, self.progress[frm]):
            return
        req.acks.add(frm)
        if len(req.acks & self.membership.voters) < self.membership.quorum():
            return
        # Leadership confirmed now also confirms every read queued before this one.
        while self.read_queue:
            c, r = next(iter(self.read_queue.items()))
            del self.read_queue[c]
            self.read_states.append(ReadState(c, r.index))
            if c == ctx:
                break

    def _fail_reads(self) -> None:
        self.dropped_reads.extend(self.read_queue)
        self.dropped_reads.extend(self.reads_waiting_commit)
        self.read_queue.clear()
        self.reads_waiting_commit.clear()

    def _committed_in_term(self) -> bool:
        return self.log.term(self.log.committed) == self.term

    def _check_can_propose(self) -> None:
        if self.role != Role.LEADER:
            raise NotLeader(self.leader)
        if self.resigning:
            raise ProposalDropped("this node was removed from the voters; it leads only until the voters left "
                                  "know it, then hands over: retry at the next leader")
        if self.lead_transferee:
            raise ProposalDropped(f"leadership is being transferred to node {self.lead_transferee}")

    # ------------------------------------------------------------------ followers --

    def _step_follower(self, m: Message) -> None:
        if m.type in _LEADER_TRAFFIC:
            self.election_elapsed = 0
            self.leader = m.frm
            self._handle_leader_traffic(m)
        elif m.type == MT.TIMEOUT_NOW:
            if self.promotable():
                self._campaign(pre=False, force=True)
        else:
            self._drop("unexpected_for_follower")

    def _step_candidate(self, m: Message) -> None:
        if m.type in _LEADER_TRAFFIC:
            self._become_follower(self.term, m.frm)
            self._handle_leader_traffic(m)
            return
        want = MT.PRE_VOTE_RESP if self.role == Role.PRE_CANDIDATE else MT.VOTE_RESP
        if m.type != want:
            self._drop("unexpected_for_candidate")
            return
        if not self.membership.matches(m.frm, m.directory):
            # Not the voter we know: a disk formatted again forgot the vote it may have cast
            # in this term, so its vote cannot count (KIP-853).
            self._drop("vote_from_other_directory")
            return
        outcome = self._poll(m.frm, not m.reject)
        if outcome == VoteResult.WON:
            if self.role == Role.PRE_CANDIDATE:
                self._campaign(pre=False)
            else:
                self._become_leader()
        elif outcome == VoteResult.LOST:
            self._become_follower(self.term, 0)

    def _handle_leader_traffic(self, m: Message) -> None:
        if m.type == MT.APPEND:
            self._handle_append(m)
        elif m.type == MT.HEARTBEAT:
            old = self.log.committed
            if self.log.commit_to(m.commit):
                self._on_commit(old)
            # The leader only sends a commit index we acknowledged holding; in its term our log
            # never shrinks below that, unless our disk lost entries: tell it where we end.
            lost = m.commit > self.log.last_index()
            self._send(Message(MT.HEARTBEAT_RESP, m.frm, self.id, self.term, context=m.context,
                               reject=lost, index=self.log.last_index() if lost else 0))
        else:
            self._handle_snapshot_chunk(m)

    def _handle_append(self, m: Message) -> None:
        if m.index < self.log.committed:
            self._send(Message(MT.APPEND_RESP, m.frm, self.id, self.term, index=self.log.committed))
            return
        try:
            last_new = self.log.maybe_append(m.index, m.log_term, m.entries)
        except CommittedConflict:
            self._drop("committed_conflict")
            return
        if last_new is None:
            hint_index, hint_term = self.log.conflict_hint(m.index)
            self._send(Message(MT.APPEND_RESP, m.frm, self.id, self.term, index=m.index,
                               reject=True, hint_index=hint_index, hint_term=hint_term))
            return
        old = self.log.committed
        if self.log.commit_to(min(m.commit, last_new)):
            self._on_commit(old)
        self._send(Message(MT.APPEND_RESP, m.frm, self.id, self.term, index=last_new))

    def _handle_snapshot_chunk(self, m: Message) -> None:
        meta = m.snapshot
        assert meta is not None  # checked by _invalid
        if meta.index <= self.log.committed:
            self._abandon_incoming()
            self._send(Message(MT.SNAPSHOT_RESP, m.frm, self.id, self.term,
                               index=self.log.committed, done=True))
            return
        key = (m.term, m.frm, meta.index, meta.term)
        inc = self.incoming
        if m.offset == 0:
            self._abandon_incoming()
            inc = self.incoming = _IncomingSnapshot(key, meta, self._receive_snapshot(meta))
        elif inc is None or inc.key != key:
            self._snap_reject(m, 0)
            return
        if m.offset < inc.size:  # a duplicate: say where we are, the leader may not know
            self._send(Message(MT.SNAPSHOT_RESP, m.frm, self.id, self.term, index=meta.index,
                               offset=inc.size))
            return
        if m.offset > inc.size:
            self._snap_reject(m, inc.size)  # a chunk was lost: ask for it again
            return
        if inc.size + len(m.data) > meta.size:
            self._abandon_incoming()
            self._snap_reject(m, 0)
            return
        inc.receiver.write(m.data)
        inc.size += len(m.data)
        inc.crc = zlib.crc32(m.data, inc.crc)
        if not m.done:
            self._send(Message(MT.SNAPSHOT_RESP, m.frm, self.id, self.term, index=meta.index,
                               offset=inc.size))
            return
        if inc.size != meta.size or inc.crc != meta.crc:
            self._abandon_incoming()
            self._drop("snapshot_checksum")
            self._snap_reject(m, 0)
            return
        self.incoming = None
        if self.log.match_term(meta.index, meta.term):
            inc.receiver.abort()  # we hold that entry already: just commit up to it
            old = self.log.committed
            if self.log.commit_to(meta.index):
                self._on_commit(old)
        else:
            self._install_snapshot(meta, inc.receiver.finish())
        self._send(Message(MT.SNAPSHOT_RESP, m.frm, self.id, self.term, index=meta.index, done=True))

    def _abandon_incoming(self) -> None:
        if self.incoming is not None:
            self.incoming.receiver.abort()
            self.incoming = None

    def _snap_reject(self, m: Message, offset: int) -> None:
        assert m.snapshot is not None
        self._send(Message(MT.SNAPSHOT_RESP, m.frm, self.id, self.term, index=m.snapshot.index,
                           offset=offset, reject=True))

    def _install_snapshot(self, meta: SnapshotMeta, source: SnapshotSource) -> None:
        self.log.restore(meta)
        self.snapshot_meta = meta
        self.snapshot_source = source
        self.membership = meta.membership
        self._conf_history = []
        self.pending_snapshot = Snapshot(meta, source)

    # ------------------------------------------------------------------ shared --

    def _handle_vote_request(self, m: Message) -> None:
        resp = MT.VOTE_RESP if m.type == MT.VOTE else MT.PRE_VOTE_RESP
        can_vote = (self.vote == m.frm or (self.vote == 0 and self.leader == 0)
                    or (m.type == MT.PRE_VOTE and m.term > self.term))
        if can_vote and self.log.is_up_to_date(m.index, m.log_term):
            self._send(Message(resp, m.frm, self.id, m.term))
            if m.type == MT.VOTE:
                self.election_elapsed = 0
                self.vote = m.frm
        else:
            self._send(Message(resp, m.frm, self.id, self.term, reject=True))

    def _on_commit(self, old: int) -> None:
        """The commit index moved past ``old``: membership changes take effect now."""
        log = self.log
        lo = max(old, log.snap_index) - log.snap_index
        for e in log.entries[lo:log.committed - log.snap_index]:
            if e.type == EntryType.CONF_CHANGE:
                self._apply_conf(e)
        if self.role == Role.LEADER and self.reads_waiting_commit and self._committed_in_term():
            waiting, self.reads_waiting_commit = self.reads_waiting_commit, []
            for ctx in waiting:
                self._start_read(ctx)

    def _apply_conf(self, e: Entry) -> None:
        try:
            cc = ConfChange.decode(e.data)
        except Exception:  # a corrupt entry cannot be committed by a correct leader
            self._drop("bad_conf_change")
            return
        self.membership = cc.result
        self._conf_history.append((e.index, cc.result))
        if self.role != Role.LEADER:
            return
        nxt = self.log.last_index() + 1
        for nid in cc.result.members:
            pr = self.progress.get(nid)
            if pr is None:
                self.progress[nid] = Progress(nxt, self.cfg.max_inflight, nid not in cc.result.voters)
            else:  # an observer becoming a member keeps what it has replicated
                pr.is_learner = nid not in cc.result.voters
                pr.observer = False
        for nid, pr in list(self.progress.items()):
            if nid not in cc.result.members and nid != self.id and not pr.observer:
                # One last append with the commit, so that it learns it was removed: otherwise
                # it never does, and campaigns for ever (thesis §4.2.3). Best effort.
                pr.become_probe()
                self._send_append(nid)
                del self.progress[nid]
        if self.lead_transferee and self.lead_transferee not in cc.result.voters:
            self.lead_transferee = 0
        if self.id not in cc.result.voters:
            # Removed. A change takes effect where it is known committed, and a voter left that
            # does not know it still counts us: it needs our vote, which we give only to a log as
            # long as ours, and we never campaign. So lead on, counting ourselves for nothing and
            # taking no proposals (thesis §4.2.2), until the voters left know it; then hand over.
            self.resigning = e.index
            self._fail_reads()
            self._bcast_append(allow_empty=True)
            self._maybe_commit()
            if self.role == Role.LEADER:
                self._maybe_resign()
        else:
            self._maybe_commit()  # the new quorum may already hold more entries

    def _send(self, m: Message) -> None:
        m.directory = self.directory_id
        if m.type in _RESPONSES:
            m.commit = self.log.committed  # how far we know the commit: a removed leader waits for it
        self.msgs.append(m)

    def _drop(self, reason: str) -> None:
        self.dropped[reason] = self.dropped.get(reason, 0) + 1

    def _invalid(self, m: Message) -> str:
        """Why a message cannot be taken at all, or '' if it can."""
        if m.to != self.id:
            return "wrong_recipient"
        if m.frm <= 0 or m.frm == self.id:
            return "bad_sender"
        if m.term < 0 or m.index < 0 or m.log_term < 0 or m.commit < 0 or m.log_term > m.term:
            return "bad_fields"
        t = m.type
        if t == MT.APPEND:
            prev_t, expect = m.log_term, m.index + 1
            for e in m.entries:
                if e.index != expect or e.term < prev_t or e.term > m.term:
                    return "bad_entries"
                prev_t, expect = e.term, expect + 1
        elif t in _RESPONSES_AND_VOTES:
            if self.role == Role.LEADER and m.frm not in self.progress:  # neither member nor observer
                return "unknown_sender"
        elif t == MT.SNAPSHOT:
            s = m.snapshot
            if (s is None or s.index <= 0 or s.term <= 0 or s.term > m.term or s.size < 0
                    or m.offset < 0 or not s.membership.voters):
                return "bad_snapshot"
        return ""
