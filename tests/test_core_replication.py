"""Log replication: consistency check, conflict truncation, commit rules, nextIndex backoff and
flow control (Raft §5.3-5.4, Figures 7 and 8)."""
import pytest

from raft.core import CoreConfig
from raft.messages import Entry, Message, MessageType as MT, Role
from raft.testing.network import Network, entries

LEADER_LOG = [1, 1, 1, 4, 4, 5, 5, 6, 6, 6]  # the Raft paper's Figure 7, indexes 1-10

FIGURE_7 = {
    "a": [1, 1, 1, 4, 4, 5, 5, 6, 6],
    "b": [1, 1, 1, 4],
    "c": [1, 1, 1, 4, 4, 5, 5, 6, 6, 6, 6],
    "d": [1, 1, 1, 4, 4, 5, 5, 6, 6, 6, 7, 7],
    "e": [1, 1, 1, 4, 4, 4, 4],
    "f": [1, 1, 1, 2, 2, 2, 3, 3, 3, 3, 3],
}


@pytest.mark.parametrize("fast", [True, False], ids=["fast-backoff", "decrement"])
@pytest.mark.parametrize("case", sorted(FIGURE_7))
def test_figure_7_followers_converge_to_the_new_leaders_log(case, fast):
    # Node 1 leads term 8 with the paper's log; node 3 holds the same log and votes for it;
    # node 2 is the follower of case (a)-(f).
    net = Network([1, 2, 3], CoreConfig(pre_vote=False, check_quorum=False, fast_backoff=fast),
                  logs={1: entries(*LEADER_LOG), 2: entries(*FIGURE_7[case]),
                        3: entries(*LEADER_LOG)},
                  terms={1: 7, 2: 7, 3: 7})
    net.cut(1, 2)  # win the election with node 3's vote first, as in the figure
    leader = net.elect(1)
    assert leader.term == 8
    net.heal()
    net.tick(1)  # heartbeat: node 2 is now reached
    net.propose(1, b"after")
    assert net.log_of(2) == net.log_of(1)
    assert net.log_of(2)[:10] == [(i + 1, t) for i, t in enumerate(LEADER_LOG)]
    assert net.nodes[2].log.committed == leader.log.last_index() == 12
    # nothing of the follower's divergent suffix was ever applied
    assert net.datas(2) == net.datas(1)


def _rejections_to_converge(fast: bool, behind: int) -> tuple[int, int]:
    """A follower whose log diverges from the leader's for ``behind`` entries across several
    terms; returns (rejections, appends) the leader needed to repair it."""
    lead = [1] + [2] * (behind // 2) + [5] * (behind // 2)
    foll = [1] + [3] * (behind // 3) + [4] * (behind // 3)
    net = Network([1, 2, 3], CoreConfig(pre_vote=False, check_quorum=False, fast_backoff=fast,
                                        max_entries_per_msg=512),
                  logs={1: entries(*lead), 2: entries(*foll), 3: entries(*lead)},
                  terms={1: 5, 2: 5, 3: 5})
    net.cut(1, 2)
    net.elect(1)
    net.heal()
    net.sent.clear()
    rejections_before = sum(1 for m in net.delivered if m.type == MT.APPEND_RESP and m.reject)
    net.tick(1)
    assert net.log_of(2) == net.log_of(1)
    rejections = sum(1 for m in net.delivered if m.type == MT.APPEND_RESP and m.reject) - rejections_before
    return rejections, net.sent[MT.APPEND]


def test_decrementing_next_index_walks_back_one_entry_per_rejection():
    # Raft §5.3: the leader decrements nextIndex after each rejection until the logs
    # match, then overwrites everything after the match point
    rejections, _ = _rejections_to_converge(fast=False, behind=300)
    assert rejections == 300


def test_fast_conflict_hint_converges_a_follower_thousands_behind_in_a_few_round_trips():
    rejections, appends = _rejections_to_converge(fast=True, behind=6000)
    assert rejections <= 4
    assert appends < 40  # a handful of probes, then 512-entry pipelined appends


def test_a_follower_with_a_shorter_log_gets_the_missing_tail():
    net = Network([1, 2, 3], logs={1: entries(1, 1, 1), 2: entries(1), 3: entries(1, 1, 1)},
                  terms={1: 1, 2: 1, 3: 1})
    net.elect(1)
    assert net.log_of(2) == net.log_of(1) == [(1, 1), (2, 1), (3, 1), (4, 2)]


def test_append_consistency_check_rejects_a_gap_with_a_hint():
    net = Network([1, 2], logs={2: entries(1, 1)}, terms={2: 1})
    f = net.nodes[2]
    f.step(Message(MT.APPEND, 2, 1, 2, index=9, log_term=2, entries=[Entry(10, 2, b"x")]))
    (resp,) = f.ready().messages
    assert resp.reject and resp.index == 9
    assert (resp.hint_index, resp.hint_term) == (3, 0)  # "my log ends at 2"
    assert f.log.last_index() == 2


def test_figure_8_a_leader_never_commits_an_old_term_entry_by_counting_replicas():
    # (c) S1 leads term 4 and has replicated the term-2 entry at index 2 to a majority
    # (S1, S2, S3); it must not count that as committed, because S5 (last term 3) can still
    # be elected and overwrite it, as in (d).
    net = Network([1, 2, 3, 4, 5],
                  CoreConfig(pre_vote=False, check_quorum=False, max_entries_per_msg=1),
                  logs={1: entries(1, 2), 2: entries(1, 2), 3: entries(1), 4: entries(1),
                        5: entries(1, 3)},
                  terms={1: 3, 2: 3, 3: 3, 4: 3, 5: 3})
    net.cut(1, 5)
    net.drop = lambda m: m.type == MT.APPEND and any(e.index >= 3 for e in m.entries)
    s1 = net.elect(1)
    assert s1.term == 4
    pr = s1.progress[3]  # as if S3 had rejected the first probe: send it index 2 alone
    pr.next, pr.probe_sent = 2, False
    s1._send_append(3)
    net.settle()
    assert [net.nodes[n].log.term(2) for n in (1, 2, 3)] == [2, 2, 2]  # on a majority...
    assert s1.log.committed < 2  # ...and still not committed
    net.crash(1)
    net.drop = lambda m: False
    s5 = net.elect(5)
    assert s5.term == 5
    for n in (2, 3, 4, 5):
        assert net.nodes[n].log.term(2) == 3  # overwritten, which was safe
    # and the entry from term 2 was never applied anywhere
    assert all(e.term != 2 for n in net.nodes for e in net.applied[n])


def test_figure_8_e_an_entry_of_the_current_term_commits_the_older_ones_with_it():
    net = Network([1, 2, 3, 4, 5],
                  logs={1: entries(1, 2), 2: entries(1, 2), 3: entries(1), 4: entries(1),
                        5: entries(1, 3)},
                  terms={n: 3 for n in range(1, 6)})
    net.cut(1, 5)
    s1 = net.elect(1)  # its term-4 no-op reaches S2, S3 and S4: a majority
    assert s1.log.committed == 3
    assert net.nodes[2].log.term(2) == 2 and net.nodes[2].log.committed == 3


def test_match_and_next_index_track_each_follower():
    net = Network([1, 2, 3])
    leader = net.elect(1)
    net.propose(1, b"a", b"b")
    assert [(pr.match, pr.next) for n, pr in sorted(leader.progress.items())] == [(3, 4)] * 3


# ----------------------------------------------------------------------------- flow control


def test_a_follower_in_probe_state_gets_one_append_at_a_time():
    net = Network([1, 2, 3])
    net.elect(1)
    net.drop = lambda m: m.frm == 2  # node 2's answers are lost: its position stays unknown
    net.nodes[1].progress[2].become_probe()
    net.sent.clear()
    appends_to_2 = []
    net.drop = lambda m: (m.frm == 2) or (m.to == 2 and m.type == MT.APPEND and not appends_to_2.append(m))
    for k in range(20):
        net.propose(1, b"x%d" % k)
    assert len(appends_to_2) == 1


def test_replicating_followers_get_pipelined_appends_bounded_in_flight():
    net = Network([1, 2, 3], CoreConfig(pre_vote=False, check_quorum=False, max_inflight=4))
    net.elect(1)
    sent_to_2 = []
    net.drop = lambda m: (m.frm == 2) or (m.to == 2 and m.type == MT.APPEND and m.entries
                                          and not sent_to_2.append(m))
    for k in range(20):
        net.propose(1, b"x%d" % k)
    assert len(sent_to_2) == 4  # four in flight without any answer, then it waits
    assert [m.entries[0].index for m in sent_to_2] == [2, 3, 4, 5]
    net.drop = lambda m: False
    net.tick(1)  # a heartbeat answer lets the rest flow
    assert net.log_of(2) == net.log_of(1)


def test_appends_respect_the_byte_bound():
    cfg = CoreConfig(pre_vote=False, check_quorum=False, max_bytes_per_msg=1000)
    net = Network([1, 2], cfg)
    net.elect(1)
    net.crash(2)
    net.propose(1, *[b"v" * 100 for _ in range(50)])
    net.restart(2)
    net.tick(1)
    appends = [m for m in net.delivered if m.type == MT.APPEND and m.to == 2 and m.entries]
    assert all(sum(len(e.data) + 24 for e in m.entries) <= 1000 for m in appends)
    assert len(appends) >= 5
    assert net.log_of(2) == net.log_of(1)


def test_many_proposals_between_readys_share_one_append():
    net = Network([1, 2, 3])
    leader = net.elect(1)
    for k in range(100):
        leader.propose([b"p%d" % k])
    rd = leader.ready()
    appends = [m for m in rd.messages if m.type == MT.APPEND]
    assert len(appends) == 2 and all(len(m.entries) == 100 for m in appends)
    assert len(rd.entries) == 100  # and one write to persist them
    net.handle_ready(1, rd)


def test_the_leader_counts_itself_only_once_its_entries_are_durable():
    net = Network([1, 2, 3])
    leader = net.elect(1)
    net.crash(2)
    net.crash(3)
    leader.propose([b"x"])
    rd = leader.ready()
    # appends may leave before the leader's own fsync (thesis §10.2.1)...
    assert {m.to for m in rd.messages if m.type == MT.APPEND} == {2, 3}
    net.restart(2)
    for m in rd.messages:
        net.nodes[m.to].step(m) if m.to == 2 else None
    # ...the follower's acknowledgement arrives before the leader persisted
    for m in net.nodes[2].ready().messages:
        leader.step(m)
    assert leader.log.committed == 1  # node 2 alone is not a majority of {1, 2, 3} yet
    net.handle_ready(1, rd)  # now the leader's own write is durable
    assert leader.log.committed == 2
    assert leader.role == Role.LEADER
