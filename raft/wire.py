"""Conversion between the core's messages and ``raft/proto/raft.proto``, validating as it goes:
a peer's bytes become core messages only if every enum and field is in range."""
from __future__ import annotations

from typing import cast

from .proto import raft_pb2 as pb

from .messages import Entry, EntryType, Membership, Message, MessageType, SnapshotMeta

_MT = {int(t): t for t in MessageType}
_ET = {int(t): t for t in EntryType}
_U63 = (1 << 63) - 1


class WireError(ValueError):
    """A peer sent something that is well-formed protobuf but not a valid Raft message."""


def membership_to_pb(m: Membership) -> pb.Membership:
    return pb.Membership(voters=sorted(m.voters), learners=sorted(m.learners), directories=dict(m.directories))


def meta_to_pb(s: SnapshotMeta) -> pb.SnapshotMeta:
    return pb.SnapshotMeta(index=s.index, term=s.term, membership=membership_to_pb(s.membership),
                           size=s.size, crc=s.crc, context=s.context)


def to_pb(m: Message) -> pb.Message:
    out = pb.Message(type=cast(pb.MessageType, int(m.type)), to=m.to, term=m.term, log_term=m.log_term, index=m.index,
                     commit=m.commit, reject=m.reject, hint_index=m.hint_index,
                     hint_term=m.hint_term, context=m.context, offset=m.offset, data=m.data,
                     done=m.done, force=m.force)
    setattr(out, "from", m.frm)
    if m.entries:
        out.entries.extend([pb.Entry(index=e.index, term=e.term, type=cast(pb.EntryType, int(e.type)), data=e.data)
                            for e in m.entries])
    if m.snapshot is not None:
        out.snapshot.CopyFrom(meta_to_pb(m.snapshot))
    return out


def from_pb(p: pb.Message) -> Message:
    mtype = _MT.get(p.type)
    if mtype is None:
        raise WireError(f"unknown message type {p.type}")
    nums = (p.to, getattr(p, "from"), p.term, p.log_term, p.index, p.commit, p.hint_index,
            p.hint_term, p.offset)
    if max(nums) > _U63:
        raise WireError("a numeric field is out of range")
    entries = []
    for e in p.entries:
        et = _ET.get(e.type)
        if et is None:
            raise WireError(f"unknown entry type {e.type} at index {e.index}")
        if e.index > _U63 or e.term > _U63:
            raise WireError("an entry index or term is out of range")
        entries.append(Entry(e.index, e.term, e.data, et))
    snapshot = None
    if p.HasField("snapshot"):
        s = p.snapshot
        if max(s.index, s.term, s.size) > _U63:
            raise WireError("a snapshot field is out of range")
        snapshot = SnapshotMeta(s.index, s.term, Membership(frozenset(s.membership.voters),
                                                            frozenset(s.membership.learners),
                                                            tuple(s.membership.directories.items())),
                                s.size, s.crc, s.context)
    return Message(mtype, p.to, getattr(p, "from"), p.term, log_term=p.log_term, index=p.index,
                   entries=entries, commit=p.commit, reject=p.reject, hint_index=p.hint_index,
                   hint_term=p.hint_term, context=p.context, snapshot=snapshot, offset=p.offset,
                   data=p.data, done=p.done, force=p.force)
