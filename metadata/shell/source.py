"""Where the shell's metadata comes from: a ``MetadataSource``.

A source answers three questions: the newest image, what it knows of the Raft quorum, and
the record history it holds (a base image and the log batches after it). Every earlier image
within reach is rebuilt from that history, so a source only has to describe what it has; the
shell, ``--at-offset`` and ``changes`` work the same over any of them. Files are the sources
here (a snapshot, a metadata log directory); the live one that follows a controller quorum
over the network (``live.py``) answers the same three questions, knowing more of the quorum
(the leader, the high watermark, the observers) and moving on when ``refresh`` is called.
"""
from __future__ import annotations

import os
import struct
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import cached_property

from raft.errors import StorageError
from raft.messages import ConfChange, EntryType, Membership
from raft.storage import replay
from raft.storage.disk import bootstrap_voters
from raft.storage.snapshot_file import is_raft_snapshot, read_meta

from ..image import MetadataImage
from ..log_dir import LogBatch, MetadataLogDir, MetadataLogError, read_snapshot_file, replay_batches


class SourceError(Exception):
    """The source cannot give what was asked; the message says why in one line."""


@dataclass(frozen=True, slots=True)
class ReplicaState:
    """One replica's replication as the leader sees it (DescribeQuorum). Timestamps are ms
    since the epoch, ``None`` when the leader has not heard from the replica."""

    id: int
    log_end_offset: int
    lag: int
    last_fetch_ms: int | None
    last_caught_up_ms: int | None


@dataclass(frozen=True, slots=True)
class QuorumState:
    """What a source knows of the quorum; ``None`` where it does not know. Files know little:
    a log directory holds its node's current epoch, vote, commit index and the membership in
    its log; a snapshot only the membership it was taken under (a Raft snapshot) or nothing.
    A live source knows what the leader reports: itself, its epoch, the high watermark, the
    voters and the observers (brokers fetching metadata), each with its replication state.
    ``high_watermark`` is exclusive, as in Kafka: the offset after the last committed one.
    ``voted_for`` 0: no vote in the current epoch (shown as null). ``static``: the voters come
    from controller.quorum.voters, which a static quorum's directory does not record (shown as
    null) until a snapshot does; such a quorum has no learners."""

    leader: int | None = None
    epoch: int | None = None
    voters: tuple[int, ...] | None = None
    learners: tuple[int, ...] | None = None
    high_watermark: int | None = None
    voted_for: int | None = None
    observers: tuple[int, ...] | None = None
    voter_states: tuple[ReplicaState, ...] | None = None
    observer_states: tuple[ReplicaState, ...] | None = None
    static: bool = False


@dataclass(frozen=True, slots=True)
class RecordHistory:
    """The image at ``base.offset`` and the batches after it, in log order."""

    base: MetadataImage
    batches: Sequence[LogBatch]

    @property
    def first_offset(self) -> int:
        return self.base.offset

    @property
    def last_offset(self) -> int:
        return self.batches[-1].offset if self.batches else self.base.offset

    def image_at(self, offset: int) -> MetadataImage:
        """The image with every batch up to ``offset`` applied (the caller checked the range)."""
        return replay_batches(self.base, [b for b in self.batches if b.offset <= offset])

    def steps(self, after: int,
              upto: int) -> Iterator[tuple[LogBatch, MetadataImage, MetadataImage]]:
        """Each batch in (after, upto] with the images just before and just after it."""
        image = self.image_at(after)
        for batch in self.batches:
            if batch.offset <= after:
                continue
            if batch.offset > upto:
                break
            following = replay_batches(image, [batch])
            yield batch, image, following
            image = following


class MetadataSource(ABC):
    """The metadata the shell browses; see the module docstring."""

    #: Names the source in messages, e.g. ``snapshot /var/kraft/...snap``.
    description: str

    @abstractmethod
    def image(self) -> MetadataImage:
        """The newest image this source has."""

    @abstractmethod
    def quorum(self) -> QuorumState:
        """What the source knows of the quorum now."""

    @abstractmethod
    def history(self) -> RecordHistory:
        """The record history this source holds."""

    def warnings(self) -> Sequence[str]:
        """Things the user should know that do not stop the shell (a torn log tail)."""
        return ()

    def refresh(self) -> Sequence[str]:
        """Catch up with what the source follows, before an interactive command line; returns
        warnings, raises SourceError if it cannot (the caller keeps the view it has). Files
        do not move, so by default nothing happens."""
        return ()

    def close(self) -> None:  # noqa: B027 -- a hook, not abstract: most sources hold nothing open
        """Release what the source holds open (a live source's connections)."""

    def no_records_message(self, history: RecordHistory) -> str:
        """Why ``changes`` has nothing to compare when the history holds no batches."""
        return (f"{self.description} holds no log records after its image at offset "
                f"{history.first_offset}, so nothing to compare; a metadata log directory "
                f"(--directory) keeps them")

    def image_at(self, offset: int) -> MetadataImage:
        """The image as of ``offset``; SourceError if the history does not reach it."""
        history = self.history()
        self.check_offset(offset, history)
        if offset == history.last_offset:
            return self.image()
        return history.image_at(offset)

    def check_offset(self, offset: int, history: RecordHistory) -> None:
        first, last = history.first_offset, history.last_offset
        if first <= offset <= last:
            return
        if not history.batches:
            raise SourceError(f"{self.description} holds only the image at offset {first}, "
                              f"not offset {offset}; a metadata log directory (--directory) "
                              f"keeps the records between snapshots")
        if offset < first:
            raise SourceError(f"offset {offset} is before the oldest state in {self.description}:"
                              f" its snapshot at offset {first} (the records before it were "
                              f"compacted away)")
        raise SourceError(f"offset {offset} is after the end of {self.description} "
                          f"(its last offset is {last})")


class SnapshotFileSource(MetadataSource):
    """One snapshot file: a plain metadata snapshot, or a Raft snapshot (``*.snap``) whose
    payload is one and whose footer also records the quorum membership."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.description = f"snapshot {path}"
        self._image = read_snapshot_file(path)  # reads and checks the whole file
        self._quorum = QuorumState()
        if is_raft_snapshot(path):
            try:
                self._quorum = _membership_state(read_meta(path).membership)
            except StorageError as e:
                raise SourceError(str(e)) from None

    def image(self) -> MetadataImage:
        return self._image

    def quorum(self) -> QuorumState:
        return self._quorum

    def history(self) -> RecordHistory:
        return RecordHistory(self._image, ())


class LogDirectorySource(MetadataSource):
    """A controller's metadata log directory: its newest snapshot and the log after it,
    replayed to the end. Read-only, so it is safe on the directory of a running node."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.description = f"metadata log directory {path}"
        self._dir = MetadataLogDir(path)
        self._history = RecordHistory(self._dir.snapshot_image(), tuple(self._dir.batches()))
        self._image = self._history.image_at(self._history.last_offset)

    def image(self) -> MetadataImage:
        return self._image

    def history(self) -> RecordHistory:
        return self._history

    def warnings(self) -> Sequence[str]:
        if not self._dir.torn_tail:
            return ()
        return (f"{self._dir.torn_tail}: torn tail ignored (a write in progress, or one cut "
                f"short by a crash)",)

    def quorum(self) -> QuorumState:
        return self._quorum

    @cached_property
    def _quorum(self) -> QuorumState:
        """The node's hard state and the newest membership in its log. ``MetadataLogDir``
        does not expose them, so the directory is read a second time, only when asked."""
        try:
            log = replay(self.path, verify=False)
        except (StorageError, OSError) as e:
            raise SourceError(f"{self.path}: {e}") from None
        membership = log.snapshot.membership if log.snapshot is not None else None
        for entry in log.entries:
            if entry.type == EntryType.CONF_CHANGE:
                try:
                    membership = ConfChange.decode(entry.data).result
                except (struct.error, ValueError) as e:  # a damaged entry
                    raise SourceError(f"{self.path}: membership change at offset {entry.index} "
                                      f"cannot be decoded: {e}") from None
        hs = log.hard_state
        if membership is None:  # none in the log yet: a dynamic quorum's formatted first voters
            try:
                bootstrap = bootstrap_voters(self.path)
            except StorageError as e:
                raise SourceError(str(e)) from None
            membership = Membership(voters=frozenset(v.node_id for v in bootstrap)) if bootstrap else None
        members = _membership_state(membership) if membership is not None else QuorumState(static=True)
        # The hard state holds the commit index; a high watermark is exclusive, as in Kafka
        # and DescribeQuorum, so a live source and a directory read the same for one state.
        return QuorumState(epoch=hs.term, voters=members.voters, learners=members.learners,
                           high_watermark=hs.commit + 1, voted_for=hs.vote, static=members.static)


def _membership_state(m: Membership) -> QuorumState:
    return QuorumState(voters=tuple(sorted(m.voters)), learners=tuple(sorted(m.learners)))


def open_source(snapshot: str | None, directory: str | None, bootstrap: str | None = None,
                timeout: float = 10.0, command_config: str | None = None) -> MetadataSource:
    """The source named on the command line; SourceError (one line) if it cannot be read."""
    if bootstrap is not None:
        # Imported only here: gRPC costs a file source's start-up for nothing.
        from clients.cluster_view import CLIENT_ERRORS
        from clients.config import tools_tls
        from .live import LiveSource
        try:
            tls = tools_tls(command_config)
        except CLIENT_ERRORS as e:
            raise SourceError(str(e)) from None
        return LiveSource(bootstrap, timeout=timeout, tls=tls)
    try:
        if snapshot is not None:
            return SnapshotFileSource(snapshot)
        assert directory is not None
        if not os.path.exists(directory):
            raise SourceError(f"{directory}: no such directory")
        return LogDirectorySource(directory)
    except MetadataLogError as e:
        raise SourceError(str(e)) from None
    except OSError as e:
        raise SourceError(f"{e.filename or snapshot or directory}: {e.strerror}") from None
