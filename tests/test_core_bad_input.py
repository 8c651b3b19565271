"""Bad input never raises out of the core and never corrupts it: foreign or stale messages,
out-of-range indexes, hostile snapshot chunks, and random garbage."""
import zlib

from hypothesis import HealthCheck, given, settings, strategies as st

from raft.core import CoreConfig
from raft.messages import (Entry, Membership, Message, MessageType as MT, Role, SnapshotMeta)
from raft.testing.network import Network, entries


def _leader_and_follower(**cfg):
    net = Network([1, 2, 3], CoreConfig(**cfg) if cfg else None)
    net.elect(1)
    net.propose(1, b"a", b"b")
    net.tick(1)  # the heartbeat brings the followers the commit index
    return net, net.nodes[1], net.nodes[2]


def test_messages_for_another_node_or_from_ourselves_are_dropped():
    net, leader, f = _leader_and_follower()
    f.step(Message(MT.APPEND, 9, 1, 1, index=3, log_term=1, entries=[Entry(4, 1, b"x")]))
    f.step(Message(MT.APPEND, 2, 2, 1, index=3, log_term=1, entries=[Entry(4, 1, b"x")]))
    assert f.log.last_index() == 3
    assert f.dropped == {"wrong_recipient": 1, "bad_sender": 1}


def test_responses_from_unknown_nodes_do_not_reach_the_leaders_progress():
    net, leader, f = _leader_and_follower(pre_vote=True, check_quorum=True)
    leader.step(Message(MT.APPEND_RESP, 1, 42, 1, index=1000))
    assert 42 not in leader.progress and leader.dropped["unknown_sender"] == 1
    # a vote request from a node we do not know, while we hold the leader lease: ignored
    f.step(Message(MT.VOTE, 2, 42, 99, index=1000, log_term=99))
    assert f.term == 1 and f.leader == 1 and f.dropped["vote_in_lease"] == 1
    assert leader.role == Role.LEADER and leader.term == 1


def test_stale_terms_are_ignored_and_a_stale_leader_is_told_the_current_term():
    net, leader, f = _leader_and_follower(pre_vote=True, check_quorum=True)
    f.term = 5  # as if it had moved on
    f.step(Message(MT.APPEND, 2, 1, 1, index=3, log_term=1, entries=[Entry(4, 1, b"x")]))
    (resp,) = f.ready().messages
    assert resp.type == MT.APPEND_RESP and resp.term == 5 and f.log.last_index() == 3
    leader.step(resp)
    assert leader.role == Role.FOLLOWER and leader.term == 5


def test_a_future_term_from_a_leader_is_adopted():
    net, leader, f = _leader_and_follower()
    f.step(Message(MT.HEARTBEAT, 2, 3, 9, commit=0))
    assert f.term == 9 and f.leader == 3


def test_append_indexes_out_of_range_are_rejected_not_applied():
    net, leader, f = _leader_and_follower()
    f.step(Message(MT.APPEND, 2, 1, 1, index=10**12, log_term=1, entries=[Entry(10**12 + 1, 1, b"x")]))
    (resp,) = f.ready().messages
    assert resp.reject and (resp.hint_index, resp.hint_term) == (4, 0)
    f.step(Message(MT.APPEND, 2, 1, 1, index=-5, log_term=0))
    assert f.dropped["bad_fields"] == 1
    assert f.log.last_index() == 3


def test_malformed_entry_runs_are_dropped():
    net, leader, f = _leader_and_follower()
    gap = [Entry(4, 1, b"x"), Entry(6, 1, b"y")]
    future = [Entry(4, 7, b"x")]
    backwards = [Entry(4, 1, b"x"), Entry(5, 0, b"y")]
    for es in (gap, future, backwards):
        f.step(Message(MT.APPEND, 2, 1, 1, index=3, log_term=1, entries=es))
    assert f.dropped["bad_entries"] == 3 and f.log.last_index() == 3


def test_an_append_that_would_overwrite_a_committed_entry_is_refused():
    net, leader, f = _leader_and_follower()
    assert f.log.committed == 3
    # same term, but claims a different entry at committed index 3: impossible from a correct leader
    f.step(Message(MT.APPEND, 2, 1, 1, index=2, log_term=1, entries=[Entry(3, 1, b"evil"), Entry(4, 1, b"z")]))
    assert f.log.entry(3).data == b"b"
    # a conflicting term at a committed index is caught by the committed-index short cut
    f.step(Message(MT.APPEND, 2, 1, 1, index=1, log_term=1, entries=[Entry(2, 1, b"evil")]))
    assert f.log.entry(2).data == b"a"


def _chunk(meta, offset, data, term=1, done=False, frm=1):
    return Message(MT.SNAPSHOT, 2, frm, term, snapshot=meta, offset=offset, data=data, done=done)


def test_snapshot_chunks_out_of_order_are_answered_with_the_offset_we_need():
    net, leader, f = _leader_and_follower()
    data = b"0123456789" * 3
    meta = SnapshotMeta(50, 1, Membership(frozenset({1, 2, 3})), len(data), zlib.crc32(data))
    f.step(_chunk(meta, 10, data[10:20]))  # first chunk never arrived
    f.step(_chunk(meta, 0, data[:10]))
    f.step(_chunk(meta, 20, data[20:], done=True))  # skips 10..20
    resps = [m for m in f.ready().messages if m.type == MT.SNAPSHOT_RESP]
    assert [(m.reject, m.offset) for m in resps] == [(True, 0), (False, 10), (True, 10)]
    assert f.log.snap_index == 0  # nothing installed from an incomplete transfer


def test_snapshot_chunks_of_a_stale_term_or_another_leader_are_ignored():
    net, leader, f = _leader_and_follower()
    data = b"x" * 20
    meta = SnapshotMeta(50, 1, Membership(frozenset({1, 2, 3})), 20, zlib.crc32(data))
    f.step(_chunk(meta, 0, data[:10]))
    f.term = 2
    f.step(_chunk(meta, 10, data[10:], term=1, done=True))  # stale term
    assert f.log.snap_index == 0 and f.dropped["stale_term"] == 1
    f.step(_chunk(meta, 10, data[10:], term=2, done=True, frm=3))  # another leader's transfer
    assert f.log.snap_index == 0


def test_a_snapshot_whose_checksum_or_size_is_wrong_is_not_installed():
    net, leader, f = _leader_and_follower()
    data = b"y" * 20
    bad_crc = SnapshotMeta(50, 1, Membership(frozenset({1, 2, 3})), 20, zlib.crc32(data) ^ 1)
    f.step(_chunk(bad_crc, 0, data, done=True))
    assert f.log.snap_index == 0 and f.dropped["snapshot_checksum"] == 1
    too_big = SnapshotMeta(50, 1, Membership(frozenset({1, 2, 3})), 5, zlib.crc32(data))
    f.step(_chunk(too_big, 0, data, done=True))
    assert f.log.snap_index == 0
    no_voters = SnapshotMeta(50, 1, Membership(), 20, zlib.crc32(data))
    f.step(_chunk(no_voters, 0, data, done=True))
    assert f.dropped["bad_snapshot"] == 1


def test_a_snapshot_older_than_our_commit_is_acknowledged_but_not_installed():
    net, leader, f = _leader_and_follower()
    data = b"old"
    meta = SnapshotMeta(2, 1, Membership(frozenset({1, 2, 3})), 3, zlib.crc32(data))
    f.step(_chunk(meta, 0, data, done=True))
    (resp,) = f.ready().messages
    assert resp.done and resp.index == 3 and f.log.last_index() == 3


# ----------------------------------------------------------------------------- fuzzing

_types = st.sampled_from(list(MT))
_ints = st.integers(min_value=-3, max_value=12)
_entries = st.lists(st.builds(Entry, _ints, _ints, st.binary(max_size=4)), max_size=4)
_meta = st.one_of(st.none(), st.builds(
    SnapshotMeta, _ints, _ints,
    st.builds(Membership, st.frozensets(st.integers(1, 4), max_size=3),
              st.frozensets(st.integers(1, 4), max_size=2)),
    _ints, st.integers(0, 2**32 - 1)))
_messages = st.builds(
    Message, _types, st.integers(0, 4), st.integers(-1, 5), _ints, log_term=_ints, index=_ints,
    entries=_entries, commit=_ints, reject=st.booleans(), hint_index=_ints, hint_term=_ints,
    context=st.binary(max_size=3), snapshot=_meta, offset=_ints, data=st.binary(max_size=8),
    done=st.booleans(), force=st.booleans())


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_messages, max_size=25), st.sampled_from([1, 2]))
def test_random_messages_never_raise_and_keep_the_log_consistent(msgs, target):
    net = Network([1, 2, 3], CoreConfig(pre_vote=True, check_quorum=True, snapshot_chunk_bytes=4),
                  logs={n: entries(1, 1, 2) for n in (1, 2, 3)}, terms={n: 2 for n in (1, 2, 3)})
    net.elect(1)
    core = net.nodes[target]
    committed_before = [(e.index, e.term, e.data) for e in core.log.entries[:core.log.committed]]
    for m in msgs:
        m.to = target if m.to else m.to
        core.step(m)
        core.tick()
        if core.has_ready():
            net.handle_ready(target, core.ready())
    log = core.log
    assert all(e.index == log.snap_index + 1 + k for k, e in enumerate(log.entries))
    assert log.committed >= len(committed_before) and log.committed <= log.last_index()
    assert [(e.index, e.term, e.data) for e in log.entries[:len(committed_before)]] == committed_before \
        or log.snap_index > 0


def test_a_follower_that_lost_acknowledged_entries_is_caught_up_again():
    """Raft assumes acknowledged entries stay on disk; when a disk breaks that promise (a file
    cut short by hand, a lost write cache), the leader learns it at the next heartbeat."""
    net = Network([1, 2, 3])
    leader = net.elect(1)
    net.propose(1, b"a", b"b", b"c")
    assert leader.progress[2].match == 4
    net.crash(2)
    del net.durable[2].entries[-2:]  # entries 3 and 4 vanish from node 2's disk
    net.restart(2)
    assert net.nodes[2].log.last_index() == 2
    net.tick(1)
    assert leader.dropped["follower_lost_entries"] == 1
    net.tick(1)
    assert net.log_of(2) == net.log_of(1)
