"""Incremental fetch sessions (KIP-227; Kafka's FetchSession.scala, FetchSessionHandler.java).

A consumer or follower fetching many partitions sends them all once (a full fetch, session
epoch 0) and the broker keeps them in a session whose id it answers with; later requests
(epoch 1, 2, ...) carry only the partitions added or altered (a new fetch offset) and those
to forget, and the answer holds only the partitions that changed: new records, a moved high
watermark, last stable offset or log start offset, or an error. Quiet partitions cost
nothing on the wire either way. Epoch -1 is a sessionless full fetch, as before KIP-227.

The cache holds ``max.incremental.fetch.session.cache.slots`` sessions (0: none, every fetch
is full). When it is full a new session takes the place of one not used for two minutes,
else of a less valuable one (Kafka's eviction order: a follower's session is worth more
than a consumer's, a bigger one more than a smaller one) among those open to eviction: a
consumer may only evict sessions older than two minutes, a follower also any consumer's.

The fetch itself (``brokerd.fetch``) knows nothing of this: ``FetchSessionCache.begin``
turns a request into the full set of partitions to read, and ``FetchContext.finish``
filters what was read down to what the client must be told.
"""
from __future__ import annotations

import random
import time
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from common.errors import ErrorCode, KafkaError
from .requests import FetchPartition, FetchPartitionResponse, FetchRequest, FetchResponse, FetchTopic

NO_SESSION = 0        # the session id of a sessionless fetch (INVALID_SESSION_ID)
INITIAL_EPOCH = 0     # a full fetch that creates a session
FINAL_EPOCH = -1      # a full fetch without a session
MAX_EPOCH = 2**31 - 1
EVICTION_MS = 120_000  # Kafka's MIN_INCREMENTAL_FETCH_SESSION_EVICTION_MS

TopicKey = str | bytes  # the topic's name, or its id in a session that names topics by id
PartitionKey = tuple[TopicKey, int]


def next_epoch(epoch: int) -> int:
    return 1 if epoch >= MAX_EPOCH else epoch + 1


@dataclass(slots=True)
class CachedPartition:
    """A partition of a session: what the client last asked for it, and what it was last
    told, so that an unchanged partition can be left out of the next answer."""
    name: str
    topic_id: bytes
    fetch: FetchPartition
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1


@dataclass(slots=True)
class FetchSession:
    id: int
    privileged: bool  # a follower's: worth more than a consumer's when the cache is full
    uses_topic_ids: bool
    created_ms: float
    last_used_ms: float
    epoch: int = 1  # the epoch the next (incremental) request must carry
    partitions: dict[PartitionKey, CachedPartition] = field(default_factory=dict)

    def eviction_key(self) -> tuple[bool, int, int]:
        """Kafka's EvictableKey order: the smallest is evicted first."""
        return self.privileged, len(self.partitions), self.id


@dataclass(slots=True)
class FetchContext:
    """One fetch request's view of its session: ``request`` is what to read (every partition
    of the session for an incremental fetch), ``finish`` what to answer."""
    cache: FetchSessionCache
    request: FetchRequest
    session: FetchSession | None = None  # the session continued (incremental), if any
    create: bool = False                 # a full fetch asking for a new session
    uses_topic_ids: bool = False

    def finish(self, resp: FetchResponse) -> tuple[int, FetchResponse]:
        """(the session id to answer with, the answer): a full fetch is answered whole and
        its partitions cached in a new session if there is room; an incremental one only
        with the partitions that changed, which move to the end of the session so that
        the next reads start with the others (Kafka's fairness rule)."""
        if self.create:
            return self.cache.create(self.request, resp, uses_topic_ids=self.uses_topic_ids), resp
        s = self.session
        if s is None:
            return NO_SESSION, resp
        for t in resp.topics:
            key_of = t.topic_id if s.uses_topic_ids else t.name
            kept = []
            for a in t.partitions:
                key = (key_of, a.partition)
                cached = s.partitions.get(key)
                if cached is None or _changed(cached, a):
                    kept.append(a)
                    if cached is not None:
                        del s.partitions[key]
                        s.partitions[key] = cached
            t.partitions = kept
        resp.topics = [t for t in resp.topics if t.partitions]
        return s.id, resp


def _changed(cached: CachedPartition, a: FetchPartitionResponse) -> bool:
    """Whether the client must hear about a partition, remembering what it is told. An
    error or a preferred read replica (KIP-392) is always sent, as Kafka's FetchSession does;
    an error forgets the high watermark, so that the partition is sent again once it is gone."""
    must = a.records_size > 0 or bool(a.error_code) or a.preferred_read_replica >= 0  # KIP-392: always told
    # field by field, not by name: a follower's session runs this for each of its partitions
    if cached.high_watermark != a.high_watermark:
        cached.high_watermark, must = a.high_watermark, True
    if cached.last_stable_offset != a.last_stable_offset:
        cached.last_stable_offset, must = a.last_stable_offset, True
    if cached.log_start_offset != a.log_start_offset:
        cached.log_start_offset, must = a.log_start_offset, True
    if a.error_code:
        cached.high_watermark = -1
    return must


class FetchSessionCache:
    """Kafka's FetchSessionCache: the broker's sessions, shared by its listeners."""

    def __init__(self, max_slots: int = 1000, eviction_ms: int = EVICTION_MS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.max_slots = max_slots
        self.eviction_ms = eviction_ms
        self.clock = clock
        self.sessions: dict[int, FetchSession] = {}
        self.evictions = 0           # IncrementalFetchSessionEvictionsPerSec
        self.incremental_fetches = 0  # requests served from a session
        self.sessions_created = 0

    def _now_ms(self) -> float:
        return self.clock() * 1000

    @property
    def partitions_cached(self) -> int:
        """NumIncrementalFetchPartitionsCached."""
        return sum(len(s.partitions) for s in list(self.sessions.values()))

    def begin(self, session_id: int, epoch: int, req: FetchRequest,
              forgotten: Iterable[tuple[TopicKey, Iterable[int]]] = (), *, privileged: bool = False,
              uses_topic_ids: bool = False) -> FetchContext:
        """The context of a fetch request carrying ``session_id`` and ``epoch`` (Kafka's
        FetchManager.newContext). Raises KafkaError FETCH_SESSION_ID_NOT_FOUND (no such
        session: evicted, or another broker's), INVALID_FETCH_SESSION_EPOCH (a request
        repeated or lost) or FETCH_SESSION_TOPIC_ID_ERROR (topics named by id in a session of
        names, or the other way round); the client then starts a new session."""
        if epoch in (INITIAL_EPOCH, FINAL_EPOCH):
            if session_id != NO_SESSION:
                self.sessions.pop(session_id, None)  # the client closes it, or starts over
            return FetchContext(self, req, create=epoch == INITIAL_EPOCH and self.max_slots > 0,
                                uses_topic_ids=uses_topic_ids)
        s = self.sessions.get(session_id)
        if s is None:
            raise KafkaError(ErrorCode.FETCH_SESSION_ID_NOT_FOUND,
                             f"Fetch session {session_id} is not found (evicted, or never created on this broker)")
        if s.epoch != epoch:
            raise KafkaError(ErrorCode.INVALID_FETCH_SESSION_EPOCH,
                             f"Fetch session {session_id} expected epoch {s.epoch}, but got epoch {epoch}")
        if s.uses_topic_ids != uses_topic_ids:
            raise KafkaError(ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR,
                             f"Fetch session {session_id} names topics "
                             f"{'by id' if s.uses_topic_ids else 'by name'}, this request does not")
        for t in req.topics:
            key_of = t.topic_id if uses_topic_ids else t.name
            for fp in t.partitions:
                cached = s.partitions.get((key_of, fp.partition))
                if cached is None:
                    s.partitions[(key_of, fp.partition)] = CachedPartition(t.name, t.topic_id, fp)
                else:
                    cached.fetch = fp
        for key_of, indexes in forgotten:
            for i in indexes:
                s.partitions.pop((key_of, i), None)
        if not s.partitions:  # Kafka closes an emptied session: the answer is sessionless
            del self.sessions[s.id]
            req.topics = []
            return FetchContext(self, req)
        s.epoch = next_epoch(s.epoch)
        s.last_used_ms = self._now_ms()
        self.incremental_fetches += 1
        req.topics = _topics(s.partitions.values())
        return FetchContext(self, req, session=s)

    def create(self, req: FetchRequest, resp: FetchResponse, *, uses_topic_ids: bool = False) -> int:
        """A new session of a full fetch's partitions, with what its answer told the client
        (Kafka's maybeCreateSession); NO_SESSION when the cache has no room for it."""
        size = sum(len(t.partitions) for t in req.topics)
        privileged = req.replica_id >= 0
        now = self._now_ms()
        if len(self.sessions) >= self.max_slots and not self._evict_for(privileged, size, now):
            return NO_SESSION
        sid = random.randint(1, 2**31 - 1)
        while sid in self.sessions:
            sid = random.randint(1, 2**31 - 1)
        s = FetchSession(sid, privileged, uses_topic_ids, now, now)
        answers = {(t.topic_id if uses_topic_ids else t.name, a.partition): a
                   for t in resp.topics for a in t.partitions}
        for t in req.topics:
            key_of = t.topic_id if uses_topic_ids else t.name
            for fp in t.partitions:
                cached = CachedPartition(t.name, t.topic_id, fp)
                a = answers.get((key_of, fp.partition))
                if a is not None and not a.error_code:
                    cached.high_watermark = a.high_watermark
                    cached.last_stable_offset = a.last_stable_offset
                    cached.log_start_offset = a.log_start_offset
                s.partitions[(key_of, fp.partition)] = cached
        self.sessions[sid] = s
        self.sessions_created += 1
        return sid

    def _evict_for(self, privileged: bool, size: int, now: float) -> bool:
        """Kafka's tryEvict: the least recently used session if it is stale, else the least
        valuable evictable one if it is worth less than the session asked for."""
        if not self.sessions:
            return False
        lru = min(self.sessions.values(), key=lambda s: (s.last_used_ms, s.id))
        if now - lru.last_used_ms > self.eviction_ms:
            return self._evict(lru)
        old = [s for s in self.sessions.values() if now - s.created_ms > self.eviction_ms
               or (privileged and not s.privileged)]
        if not old:
            return False
        victim = min(old, key=FetchSession.eviction_key)
        if (privileged, size) <= victim.eviction_key()[:2]:
            return False
        return self._evict(victim)

    def _evict(self, s: FetchSession) -> bool:
        del self.sessions[s.id]
        self.evictions += 1
        return True


def _topics(partitions: Iterable[CachedPartition]) -> list[FetchTopic]:
    """A session's partitions as a request's topics, in the session's order."""
    out: list[FetchTopic] = []
    for c in partitions:
        if not out or out[-1].name != c.name or out[-1].topic_id != c.topic_id:
            out.append(FetchTopic(name=c.name, topic_id=c.topic_id))
        out[-1].partitions.append(c.fetch)
    return out


Asked = tuple[int, ...]  # what a fetcher asks of a partition (offset, epoch, ...): sent when it changes


K = TypeVar("K", bound=Hashable)  # how a fetcher names a partition, e.g. (topic id, index)


@dataclass(slots=True)
class FetchSessionHandler(Generic[K]):
    """The fetching side of a session (Kafka's FetchSessionHandler), as followers use it: which
    partitions a request must carry given what the leader's session already holds, and what
    it must tell the leader to forget. A failed request (an error, no answer) starts over
    with a full fetch that closes the old session."""
    session_id: int = NO_SESSION
    epoch: int = INITIAL_EPOCH
    #: What the leader's session holds, once the request in flight is answered.
    held: dict[K, Asked] = field(default_factory=dict)
    _next: dict[K, Asked] = field(default_factory=dict)

    def build(self, wanted: dict[K, Asked]) -> tuple[list[K], list[K]]:
        """(the partitions to send, those to forget) for a request fetching ``wanted``: all of
        them in a full fetch, else those added or changed since the session last heard."""
        self._next = wanted
        if self.epoch == INITIAL_EPOCH:
            return list(wanted), []
        held = self.held
        return ([k for k, v in wanted.items() if held.get(k) != v], [k for k in held if k not in wanted])

    def answered(self, session_id: int) -> None:
        """The request was answered without a session error, with ``session_id``."""
        if self.epoch == INITIAL_EPOCH:
            self.session_id = session_id
            if session_id == NO_SESSION:  # no room in the leader's cache: full fetches until there is
                self.held = {}
                return
        self.epoch = next_epoch(self.epoch)
        self.held = self._next

    def reset(self) -> None:
        """The request failed (a session error, or no answer): the next one is full."""
        self.epoch = INITIAL_EPOCH
        self.held = {}
