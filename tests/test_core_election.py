"""Elections: roles, terms, RequestVote, PreVote, CheckQuorum (Raft §5.2, thesis §9.6, §6.2)."""
from raft.core import CoreConfig, RaftCore
from raft.messages import HardState, Membership, Message, MessageType as MT, Role
from raft.testing.network import Network, entries


def test_a_follower_times_out_campaigns_and_wins_with_a_durable_self_vote():
    net = Network([1, 2, 3])
    c = net.nodes[1]
    for _ in range(2 * net.config.election_ticks):
        c.tick()
        if c.role != Role.FOLLOWER:
            break
    assert c.role == Role.CANDIDATE and c.term == 1 and c.vote == 1
    rd = c.ready()
    # the vote for itself is in the hard state that must be persisted before the requests go
    assert rd.hard_state == HardState(term=1, vote=1, commit=0)
    assert sorted(m.to for m in rd.messages if m.type == MT.VOTE) == [2, 3]
    assert all(m.term == 1 and m.index == 0 for m in rd.messages)
    net.handle_ready(1, rd)
    for m in rd.messages:
        net.nodes[m.to].step(m)
    net.settle()
    assert c.role == Role.LEADER and c.leader == 1
    assert net.nodes[2].leader == 1 and net.nodes[3].leader == 1
    assert net.nodes[2].vote == 1


def test_randomized_election_timeouts_stay_in_range_and_differ():
    cfg = CoreConfig(election_ticks=10)
    timeouts = {RaftCore(n, cfg, seed=42, membership=Membership(frozenset({1, 2, 3}))).randomized_timeout
                for n in range(1, 30)}
    assert all(10 <= t < 20 for t in timeouts)
    assert len(timeouts) > 3


def test_pre_candidate_keeps_its_term_until_a_majority_would_vote():
    net = Network([1, 2, 3], CoreConfig(pre_vote=True, check_quorum=False))
    net.isolate(1)
    net.tick(1, 40)
    c = net.nodes[1]
    assert c.role == Role.PRE_CANDIDATE
    assert c.term == 0  # pre-votes never raised the term
    net.heal()
    net.elect(1)
    assert c.term == 1


def test_one_vote_per_term():
    net = Network([1, 2, 3])
    v = net.nodes[3]
    v.step(Message(MT.VOTE, 3, 1, 5, index=0, log_term=0))
    v.step(Message(MT.VOTE, 3, 2, 5, index=0, log_term=0))
    replies = [m for m in v.ready().messages if m.type == MT.VOTE_RESP]
    assert [(m.to, m.reject) for m in replies] == [(1, False), (2, True)]
    assert v.vote == 1 and v.term == 5
    # asking again in the same term, the same candidate gets the same answer
    v.step(Message(MT.VOTE, 3, 1, 5, index=0, log_term=0))
    assert [m.reject for m in v.ready().messages] == [False]


def test_vote_is_refused_to_a_candidate_with_a_less_up_to_date_log():
    logs = {3: entries(1, 2, 2)}
    net = Network([1, 2, 3], logs=logs)
    v = net.nodes[3]
    # higher last term wins regardless of length; equal term needs equal-or-longer log
    for term, (index, log_term, granted) in enumerate([(5, 1, False), (2, 2, False), (3, 2, True)], 5):
        v.step(Message(MT.VOTE, 3, 1, term, index=index, log_term=log_term))
        (resp,) = v.ready().messages
        assert resp.reject == (not granted), (index, log_term)


def test_prevote_stops_a_rejoining_partitioned_node_from_deposing_the_leader():
    net = Network([1, 2, 3], CoreConfig(pre_vote=True, check_quorum=True))
    leader = net.elect(1)
    term = leader.term
    net.isolate(3)
    net.tick(3, 100)  # times out again and again, but never wins a pre-vote
    assert net.nodes[3].term == term
    net.heal()
    for _ in range(3):
        net.tick(1)
    assert leader.role == Role.LEADER and leader.term == term
    assert net.nodes[3].leader == 1 and net.nodes[3].role == Role.FOLLOWER


def test_without_prevote_a_rejoining_node_does_disrupt_the_term():
    # the contrast to the test above: why PreVote matters
    net = Network([1, 2, 3], CoreConfig(pre_vote=False, check_quorum=False))
    leader = net.elect(1)
    net.isolate(3)
    net.tick(3, 100)
    assert net.nodes[3].term > leader.term
    net.heal()
    net.tick(3, 2 * net.config.election_ticks)  # its next campaign reaches the leader
    assert leader.term > 1 and leader.term >= 7  # the healthy leader was forced out of its term


def test_check_quorum_makes_an_isolated_leader_step_down():
    net = Network([1, 2, 3], CoreConfig(pre_vote=True, check_quorum=True))
    leader = net.elect(1)
    net.isolate(1)
    for _ in range(2 * net.config.election_ticks):
        net.tick(1)
    assert leader.role == Role.FOLLOWER
    assert leader.leader == 0


def test_a_lease_holding_follower_ignores_vote_requests():
    net = Network([1, 2, 3], CoreConfig(pre_vote=False, check_quorum=True))
    net.elect(1)
    f = net.nodes[2]
    f.step(Message(MT.VOTE, 2, 3, 7, index=100, log_term=100 and 7))
    assert f.term == 1 and not f.ready().messages
    assert f.dropped["vote_in_lease"] == 1


def test_split_votes_resolve_in_a_later_term():
    net = Network([1, 2, 3, 4])
    # nodes 1 and 2 campaign at once; 3 votes for 1, 4 votes for 2: nobody wins term 1
    for nid in (1, 2):
        net.nodes[nid]._campaign(pre=False)
    net.cut(1, 4)
    net.cut(2, 3)
    net.settle()
    assert all(net.nodes[n].role != Role.LEADER for n in (1, 2))
    net.heal()
    winner = net.elect(3)
    assert winner.term >= 2


def test_a_stale_leader_learns_the_higher_term_from_a_follower_that_cannot_campaign():
    """Without PreVote or CheckQuorum a follower whose term was raised by some candidate
    still answers the old leader with its term; otherwise a follower that is not promotable
    (it has not yet learned it was added back) leaves the old leader stuck forever."""
    net = Network([1, 2, 3], CoreConfig(pre_vote=False, check_quorum=False))
    net.elect(1)
    f = net.nodes[2]
    f.step(Message(MT.VOTE, 2, 3, 7, index=0, log_term=0))  # a candidate with a short log
    f.ready()
    assert f.term == 7 and f.leader == 0
    f.step(Message(MT.HEARTBEAT, 2, 1, 1))
    replies = f.ready().messages
    assert [(m.type, m.to, m.term) for m in replies] == [(MT.APPEND_RESP, 1, 7)]
    leader = net.nodes[1]
    leader.step(replies[0])
    assert leader.role == Role.FOLLOWER and leader.term == 7


def test_a_candidate_behind_in_term_is_refused_with_the_higher_term():
    """A stale vote request is answered (rejected, with our term), so a candidate whose
    peers have no other reason to write to it still catches up in term and can win."""
    net = Network([1, 2, 3], CoreConfig(pre_vote=False, check_quorum=True))
    v = net.nodes[2]
    v.step(Message(MT.VOTE, 2, 3, 9, index=0, log_term=0))
    v.ready()
    v.step(Message(MT.VOTE, 2, 1, 4, index=0, log_term=0))
    assert [(m.type, m.to, m.term, m.reject) for m in v.ready().messages] == [
        (MT.VOTE_RESP, 1, 9, True)]
