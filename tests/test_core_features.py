"""Snapshots, membership, leadership transfer and linearizable reads (Raft §7, thesis §4, §3.10,
§6.4)."""
import pytest

from raft.core import CoreConfig
from raft.errors import NotLeader, ProposalDropped, RaftError
from raft.messages import ConfChangeType as CC, MessageType as MT, Role
from raft.testing.network import Network


def _cfg(**kw):
    return CoreConfig(pre_vote=False, check_quorum=False, **kw)


# ----------------------------------------------------------------------------- snapshots


def test_a_follower_that_needs_compacted_entries_gets_the_snapshot_in_chunks():
    net = Network([1, 2, 3], _cfg(snapshot_chunk_bytes=100, snapshot_chunks_inflight=2))
    net.elect(1)
    net.crash(3)
    for k in range(30):
        net.propose(1, b"v%d" % k)
    state = bytes(range(256)) * 4  # 1024 bytes: eleven chunks
    meta = net.snapshot(1, state)
    assert net.nodes[1].log.snap_index == meta.index == 31
    assert net.nodes[1].log.entries == []
    net.restart(3)
    net.tick(1)
    chunks = [m for m in net.delivered if m.type == MT.SNAPSHOT and m.to == 3]
    assert len(chunks) == 11 and all(len(m.data) <= 100 for m in chunks)
    assert b"".join(m.data for m in chunks) == state
    assert [m.offset for m in chunks] == list(range(0, 1024, 100))
    follower = net.nodes[3]
    assert follower.log.snap_index == 31 and follower.log.committed == 31
    assert net.durable[3].snapshot_data == state  # handed over for the state machine to restore
    # ...and it continues from the log afterwards
    net.propose(1, b"after")
    assert net.log_of(3) == net.log_of(1) == [(32, 1)]
    assert net.datas(3)[-1] == b"after"


def test_a_lost_chunk_is_sent_again_and_the_transfer_completes():
    net = Network([1, 2, 3], _cfg(snapshot_chunk_bytes=10, snapshot_chunks_inflight=3))
    net.elect(1)
    net.crash(2)
    net.propose(1, b"x")
    net.snapshot(1, b"0123456789" * 5)
    net.restart(2)
    lost = []
    net.drop = lambda m: m.type == MT.SNAPSHOT and m.offset == 20 and not lost and not lost.append(m)
    net.tick(1)
    net.drop = lambda m: False
    for _ in range(3 * net.config.election_ticks):
        net.tick(1)
    assert lost and net.durable[2].snapshot_data == b"0123456789" * 5
    assert net.nodes[2].log.committed == net.nodes[1].log.committed


def test_compaction_can_keep_trailing_entries_for_slow_followers():
    net = Network([1, 2, 3])
    net.elect(1)
    net.propose(1, b"a", b"b")
    net.crash(3)
    for k in range(10):
        net.propose(1, b"v%d" % k)
    net.snapshot(1, b"s", trailing=10)
    assert net.nodes[1].log.snap_index == 3
    net.restart(3)
    net.tick(1)
    assert not any(m.type == MT.SNAPSHOT for m in net.delivered)  # the log sufficed
    assert net.log_of(3)[-1] == net.log_of(1)[-1]


# ----------------------------------------------------------------------------- membership


def test_a_learner_receives_the_log_but_neither_votes_nor_counts_for_commit():
    net = Network([1, 2, 3], learners=[4])
    leader = net.elect(1)
    net.propose(1, b"a")
    assert net.log_of(4) == net.log_of(1)
    assert net.datas(4) == [b"a"]
    assert all(m.to != 4 for m in net.delivered if m.type in (MT.VOTE, MT.PRE_VOTE))
    net.crash(2)
    net.crash(3)
    net.propose(1, b"b")
    assert leader.log.committed == 2  # the learner's copy did not make a majority
    net.tick(4, 100)
    assert net.nodes[4].role == Role.FOLLOWER and net.nodes[4].term == 1  # never campaigns


def test_adding_a_learner_then_promoting_it_to_voter():
    net = Network([1, 2, 3], joining=[4])
    leader = net.elect(1)
    net.propose(1, b"a")
    leader.propose_conf_change(CC.ADD_LEARNER, 4)
    net.settle()
    net.tick(1)
    assert leader.membership.learners == {4}
    assert net.nodes[4].membership.learners == {4}  # learned from the log alone
    assert net.datas(4) == [b"a"]
    leader.propose_conf_change(CC.ADD_VOTER, 4)
    net.settle()
    assert leader.membership.voters == {1, 2, 3, 4} and not leader.membership.learners
    net.crash(2)
    net.propose(1, b"b")  # 3 of 4 voters: commits
    assert leader.log.committed == leader.log.last_index()
    net.crash(3)
    idx = net.propose(1, b"c")[0]
    assert leader.log.committed < idx  # 2 of 4 is not a majority any more


def test_one_membership_change_at_a_time_and_only_after_the_leader_committed_in_its_term():
    net = Network([1, 2, 3], joining=[4, 5])
    leader = net.elect(1)
    net.crash(2)
    net.crash(3)
    leader.propose_conf_change(CC.ADD_LEARNER, 4)
    with pytest.raises(ProposalDropped, match="already in progress"):
        leader.propose_conf_change(CC.ADD_LEARNER, 5)
    with pytest.raises(NotLeader):
        net.nodes[2].propose_conf_change(CC.ADD_LEARNER, 5)
    lone = Network([1, 2, 3])
    lone.drop = lambda m: m.type == MT.APPEND_RESP
    lone.elect(1)
    with pytest.raises(ProposalDropped, match="not committed an entry"):
        lone.nodes[1].propose_conf_change(CC.ADD_LEARNER, 4)


def test_removing_the_leader_makes_it_step_down_once_the_change_commits():
    net = Network([1, 2, 3])
    leader = net.elect(1)
    leader.propose_conf_change(CC.REMOVE, 1)
    net.settle()
    assert leader.role == Role.FOLLOWER
    assert net.nodes[2].membership.voters == {2, 3}
    assert net.nodes[3].membership.voters == {2, 3}
    new = net.elect(2)
    net.propose(2, b"x")
    assert new.log.committed == new.log.last_index()
    net.tick(1, 100)
    assert net.nodes[1].role == Role.FOLLOWER  # a removed node never campaigns


def test_removing_a_follower_shrinks_the_quorum():
    net = Network([1, 2, 3])
    leader = net.elect(1)
    leader.propose_conf_change(CC.REMOVE, 3)
    net.settle()
    net.crash(3)
    net.propose(1, b"x")
    assert leader.log.committed == leader.log.last_index()
    assert 3 not in leader.progress


def test_invalid_membership_changes_are_refused():
    net = Network([1])
    leader = net.elect(1)
    with pytest.raises(RaftError, match="last voter"):
        leader.propose_conf_change(CC.REMOVE, 1)
    assert leader.propose_conf_change(CC.ADD_VOTER, 1) == 0  # already so: nothing to do


# ----------------------------------------------------------------------------- transfer


def test_leadership_transfer_catches_the_target_up_then_hands_over():
    net = Network([1, 2, 3])
    leader = net.elect(1)
    net.crash(3)
    net.propose(1, b"a", b"b")
    net.restart(3)
    leader.transfer_leadership(3)
    with pytest.raises(ProposalDropped, match="transferred"):
        leader.propose([b"refused while transferring"])
    net.settle()
    assert net.nodes[3].role == Role.LEADER and net.nodes[3].term == 2
    assert leader.role == Role.FOLLOWER and leader.leader == 3
    assert any(m.type == MT.TIMEOUT_NOW and m.to == 3 for m in net.delivered)
    net.propose(3, b"c")
    assert net.datas(1) == [b"a", b"b", b"c"]


def test_transfer_works_even_while_voters_hold_a_leader_lease():
    net = Network([1, 2, 3], CoreConfig(pre_vote=True, check_quorum=True))
    leader = net.elect(1)
    leader.transfer_leadership(2)
    net.settle()
    assert net.nodes[2].role == Role.LEADER


def test_a_transfer_to_an_unreachable_node_is_abandoned_after_an_election_timeout():
    net = Network([1, 2, 3])
    leader = net.elect(1)
    net.crash(3)
    leader.transfer_leadership(3)
    for _ in range(net.config.election_ticks):
        net.tick(1)
    assert leader.role == Role.LEADER and leader.lead_transferee == 0
    net.propose(1, b"accepted again")


def test_transferring_to_the_leader_itself_cancels_a_pending_transfer():
    net = Network([1, 2, 3])
    leader = net.elect(1)
    net.crash(3)
    leader.transfer_leadership(3)
    with pytest.raises(ProposalDropped, match="transferred"):
        leader.propose([b"refused while transferring"])
    leader.transfer_leadership(1)  # etcd: a transfer to the leader itself cancels
    assert leader.lead_transferee == 0
    net.propose(1, b"accepted at once")
    net.settle()
    assert leader.role == Role.LEADER and net.datas(2) == [b"accepted at once"]


def test_transfer_refuses_non_voters():
    net = Network([1, 2], learners=[3])
    leader = net.elect(1)
    with pytest.raises(RaftError, match="not a voter"):
        leader.transfer_leadership(3)


# ----------------------------------------------------------------------------- reads


def test_read_index_is_served_after_a_heartbeat_round_confirms_leadership():
    net = Network([1, 2, 3])
    leader = net.elect(1)
    net.propose(1, b"a")
    leader.read_index(b"r1")
    rd = leader.ready()
    assert not rd.read_states  # not yet: leadership must be confirmed first
    assert {m.to for m in rd.messages if m.type == MT.HEARTBEAT and m.context == b"r1"} == {2, 3}
    states = []
    net.handle_ready = _capture(net, states)
    for m in rd.messages:
        net.nodes[m.to].step(m)
    net.settle()
    assert [(s.context, s.index) for s in states] == [(b"r1", 2)]


def test_no_read_before_the_new_leader_commits_an_entry_of_its_term():
    net = Network([1, 2, 3])
    net.drop = lambda m: m.type == MT.APPEND_RESP  # the no-op cannot commit
    leader = net.elect(1)
    states = []
    net.handle_ready = _capture(net, states)
    leader.read_index(b"early")
    net.tick(1, 3)
    assert states == []
    net.drop = lambda m: False
    net.tick(1, 2)
    assert [s.context for s in states] == [b"early"]
    assert states[0].index >= 1


def test_a_deposed_leader_never_serves_a_stale_read():
    net = Network([1, 2, 3])
    old = net.elect(1)
    net.isolate(1)
    net.elect(2)
    net.propose(2, b"newer")
    states = []
    net.handle_ready = _capture(net, states)
    old.read_index(b"stale?")
    net.tick(1, 5)
    assert states == []  # no quorum answers the old leader's heartbeat
    net.heal()
    net.tick(2)
    assert old.role == Role.FOLLOWER
    # the pending read is handed back as dropped so the caller can fail it


def test_reads_on_a_single_node_cluster_are_immediate():
    net = Network([1])
    leader = net.elect(1)
    states = []
    net.handle_ready = _capture(net, states)
    leader.read_index(b"solo")
    net.settle()
    assert [s.context for s in states] == [b"solo"]


def test_read_index_on_a_follower_says_who_leads():
    net = Network([1, 2, 3])
    net.elect(1)
    with pytest.raises(NotLeader) as err:
        net.nodes[2].read_index(b"x")
    assert err.value.leader_id == 1


def _capture(net, states):
    original = net.handle_ready

    def handle(nid, rd):
        states.extend(rd.read_states)
        return original(nid, rd)
    return handle
