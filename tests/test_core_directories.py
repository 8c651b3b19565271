"""Voters named by node id and data directory (KIP-853), observers, and the rules for removing
voters: the Raft core's side of changing the controller quorum while it runs.

Raft's safety assumes a voter never forgets its vote or an entry it acknowledged. A disk
wiped and formatted again forgets both; with its directory recorded in the membership, the
new replica is not counted as the voter it replaced (the first tests show what happens when
it is)."""
import pytest

from raft.core import MAX_OBSERVERS, OBSERVER_TIMEOUT
from raft.errors import MembershipRefused, NotLeader, TooManyObservers
from raft.messages import ConfChange, ConfChangeType as CC, Membership, Message, MessageType as MT, Role
from raft.testing.network import Network

DIRS = {1: "dir-1", 2: "dir-2", 3: "dir-3"}


def _lose_a_committed_entry_to_a_reformatted_voter(directories: dict[int, str]) -> tuple[Network, int]:
    """Entry 2 commits on nodes 1 and 3 while 2 is cut off; then 1 crashes, 3's disk is
    formatted again, and 2, which lacks the entry, campaigns."""
    net = Network([1, 2, 3], directories=directories)
    net.elect(1)
    net.isolate(2)
    index = net.propose(1, b"committed")[0]
    assert net.nodes[1].log.committed == index and (index, 1) in net.log_of(3)
    net.crash(1)
    net.heal()
    net.reformat(3, "dir-3-formatted-again")
    for _ in range(4 * net.config.election_ticks):
        net.tick(2)
    return net, index


def test_without_directories_a_reformatted_voter_elects_a_leader_that_lost_a_committed_entry():
    net, index = _lose_a_committed_entry_to_a_reformatted_voter({})
    assert net.nodes[2].role == Role.LEADER  # with the vote of the empty node 3
    assert (index, 1) not in net.log_of(2)  # the committed entry is gone: what KIP-853 prevents


def test_a_reformatted_voter_cannot_help_elect_a_leader_that_lacks_committed_entries():
    net, index = _lose_a_committed_entry_to_a_reformatted_voter(DIRS)
    assert net.leader() is None
    assert net.nodes[2].dropped.get("vote_from_other_directory", 0) >= 1
    assert not net.nodes[3].promotable()  # and it never campaigns as voter 3
    net.tick(3, 4 * net.config.election_ticks)
    assert net.nodes[3].role == Role.FOLLOWER and net.nodes[3].term <= net.nodes[2].term
    net.restart(1)  # the real voter 1 comes back: 1 and 2 elect a leader that has the entry
    leader = net.elect(1)
    assert (index, 1) in net.log_of(leader.id)


def test_a_reformatted_voter_is_caught_up_but_not_counted_for_commit():
    net = Network([1, 2, 3], directories=DIRS)
    leader = net.elect(1)
    net.propose(1, b"a")
    net.crash(3)
    net.reformat(3, "dir-3-new")
    net.propose(1, b"b")
    assert leader.dropped.get("peer_reset") == 1  # what it had acknowledged is gone
    net.crash(2)
    index = net.propose(1, b"c")[0]
    assert net.log_of(3) == net.log_of(1)  # replicated to it from scratch...
    assert leader.log.committed < index  # ...but its acknowledgements do not count
    peer = next(p for p in leader.status().peers if p.node_id == 3)
    assert (peer.kind, peer.directory) == ("observer", "dir-3-new")


def test_a_voter_not_heard_from_is_listed_as_a_voter_and_one_formatted_again_as_an_observer():
    net = Network([1, 2, 3], directories=DIRS)
    net.crash(3)
    leader = net.elect(1)
    assert {p.node_id: (p.kind, p.directory) for p in leader.status().peers} == {
        2: ("voter", "dir-2"), 3: ("voter", "")}
    net.reformat(3, "dir-3-new")
    net.tick(1, net.config.heartbeat_ticks)
    assert {p.node_id: p.kind for p in leader.status().peers} == {2: "voter", 3: "observer"}


def test_a_static_voter_whose_disk_was_formatted_again_is_caught_up_from_scratch_and_counted():
    net = Network([1, 2, 3])  # voters without directories, as controller.quorum.voters gives them
    net.directories.update(DIRS)
    for nid in DIRS:
        net.restart(nid)
    leader = net.elect(1)
    net.propose(1, b"a")
    net.reformat(3, "dir-3-new")
    net.propose(1, b"b")
    assert leader.dropped.get("peer_reset") == 1
    assert net.log_of(3) == net.log_of(1)
    net.crash(2)
    index = net.propose(1, b"c")[0]
    assert leader.log.committed == index  # an unknown directory matches any


def test_removing_a_voter_is_refused_when_the_rest_would_lack_a_live_majority():
    net = Network([1, 2, 3])
    leader = net.elect(1)
    net.crash(3)
    net.tick(1, net.config.election_ticks + 1)  # 3 has not answered for an election timeout
    end = leader.log.last_index()
    with pytest.raises(MembershipRefused, match=r"without node 2, voters \[1, 3\] would have 1 live \(1\), fewer than the 2"):
        leader.propose_conf_change(CC.REMOVE, 2)
    assert leader.log.last_index() == end  # nothing appended
    assert leader.propose_conf_change(CC.REMOVE, 3) > 0  # removing the dead one is fine
    net.settle()
    net.tick(1)
    assert leader.membership.voters == {1, 2}
    assert leader.propose_conf_change(CC.REMOVE, 2) > 0  # {1} alone is a live majority of itself
    net.settle()
    net.tick(1)
    with pytest.raises(MembershipRefused, match="last voter"):
        leader.propose_conf_change(CC.REMOVE, 1)


def test_removing_or_re_adding_a_member_needs_its_directory():
    net = Network([1, 2, 3], directories=DIRS)
    leader = net.elect(1)
    with pytest.raises(MembershipRefused, match="node 3 is a member with directory id dir-3, not other"):
        leader.propose_conf_change(CC.REMOVE, 3, directory_id="other")
    with pytest.raises(MembershipRefused, match=r"not \(unknown\)"):
        leader.propose_conf_change(CC.REMOVE, 3, directory_id="")
    with pytest.raises(MembershipRefused, match="remove it first"):
        leader.propose_conf_change(CC.ADD_VOTER, 3, directory_id="dir-3-new")
    assert leader.propose_conf_change(CC.ADD_VOTER, 3, directory_id="dir-3") == 0  # already so
    assert leader.propose_conf_change(CC.REMOVE, 3, directory_id="dir-3") > 0
    net.settle()
    net.tick(1)
    leader.propose_conf_change(CC.ADD_LEARNER, 3, directory_id="dir-3-new")
    net.settle()
    net.tick(1)
    assert leader.membership.learners == {3} and leader.membership.directory(3) == "dir-3-new"
    assert net.nodes[2].membership.directory(3) == "dir-3-new"  # learned from the log


def test_an_observer_gets_the_log_counts_for_nothing_and_can_then_be_promoted():
    net = Network([1, 2, 3], joining=[4], directories={**DIRS, 4: "dir-4"})
    leader = net.elect(1)
    net.propose(1, b"a")
    with pytest.raises(NotLeader):
        net.nodes[2].observe(4)
    leader.observe(4)
    net.tick(1, net.config.heartbeat_ticks)  # the next heartbeat starts the replication
    assert net.log_of(4) == net.log_of(1) and net.datas(4) == [b"a"]
    assert not net.nodes[4].promotable()
    assert next(p.kind for p in leader.status().peers if p.node_id == 4) == "observer"
    net.crash(2)
    net.crash(3)
    index = net.propose(1, b"b")[0]
    assert leader.log.committed < index  # the observer's copy is no majority
    net.restart(2)
    net.restart(3)
    net.tick(1, net.config.heartbeat_ticks)
    assert leader.log.committed >= index
    # KIP-853's AddVoter: a caught-up observer becomes a learner, then a voter, at once
    leader.propose_conf_change(CC.ADD_LEARNER, 4, directory_id="dir-4")
    net.settle()
    net.tick(1)
    assert leader.caught_up(4, "dir-4") and not leader.caught_up(4, "another")
    leader.propose_conf_change(CC.ADD_VOTER, 4, directory_id="dir-4")
    net.settle()
    net.tick(1)
    assert leader.membership.voters == {1, 2, 3, 4} and net.nodes[4].promotable()


def test_the_first_leader_records_the_voters_storage_was_formatted_with():
    net = Network([1, 2, 3], joining=[4], directories=DIRS)
    leader = net.elect(1)
    entry = leader.log.entry(2)
    assert ConfChange.decode(entry.data) == ConfChange(CC.BOOTSTRAP, 1, net.bootstrap)
    leader.observe(4)  # a node formatted without voters learns them from the log
    net.tick(1, net.config.heartbeat_ticks)
    assert net.nodes[4].membership == net.bootstrap
    net.crash(1)
    again = net.elect(2)  # recorded once: the next leader appends only its no-op
    assert [e.type.name for e in again.log.entries[2:]] == ["NOOP"]
    static = Network([1, 2, 3])  # voters without directories (controller.quorum.voters): nothing to record
    assert [e.type.name for e in static.elect(1).log.entries] == ["NOOP"]


def test_an_observer_outlives_other_membership_changes():
    net = Network([1, 2, 3], joining=[4])
    leader = net.elect(1)
    leader.observe(4)
    leader.propose_conf_change(CC.REMOVE, 3)
    net.settle()
    net.tick(1)
    assert leader.membership.voters == {1, 2} and leader.progress[4].observer
    net.propose(1, b"after")
    assert net.log_of(4) == net.log_of(1)


def test_a_removed_follower_learns_it_was_removed():
    net = Network([1, 2, 3])
    leader = net.elect(1)
    leader.propose_conf_change(CC.REMOVE, 3)
    net.settle()  # no heartbeat round after the commit: only the leader's last append tells 3
    assert leader.membership.voters == {1, 2}
    assert net.nodes[3].membership.voters == {1, 2} and not net.nodes[3].promotable()


def test_a_silent_observer_is_forgotten():
    net = Network([1, 2, 3], joining=[4])
    leader = net.elect(1)
    leader.observe(4)
    net.tick(1, net.config.heartbeat_ticks)
    net.crash(4)
    net.tick(1, (OBSERVER_TIMEOUT + 2) * net.config.election_ticks)
    assert 4 not in leader.progress
    assert leader.role == Role.LEADER


def test_a_membership_with_directories_encodes_for_old_and_new_readers():
    m = Membership(frozenset({1, 2}), frozenset({3}), {1: "dir-1", 3: "dir-3", 9: "not-a-member"})
    assert m.directories == ((1, "dir-1"), (3, "dir-3"))
    assert Membership.decode(m.encode()) == m
    cc = ConfChange(CC.ADD_LEARNER, 3, m, b"ctx")
    assert ConfChange.decode(cc.encode()) == cc
    old = Membership(frozenset({1, 2}), frozenset({3}))
    assert Membership.decode(old.encode()) == old and old.encode() == m.encode()[:len(old.encode())]
    assert m.matches(2, "anything") and m.matches(1, "dir-1") and not m.matches(1, "dir-x")
    assert m.is_voter(1, "dir-1") and not m.is_voter(3, "dir-3")


def test_an_observe_request_from_a_voter_does_not_make_it_live():
    """A voter the leader cannot reach asks to observe (raft.observer, after MEMBER_SILENCE);
    that request proves nothing about the leader's appends reaching it, so a removal that
    would leave it as one of a bare majority stays refused."""
    net = Network([1, 2, 3])
    leader = net.elect(1)
    net.blocked.add((1, 3))  # 3 reaches the leader, the leader does not reach 3
    net.tick(1, net.config.election_ticks + 1)
    end = leader.log.last_index()
    refused = r"without node 2, voters \[1, 3\] would have 1 live \(1\)"
    with pytest.raises(MembershipRefused, match=refused):
        leader.propose_conf_change(CC.REMOVE, 2)
    leader.observe(3)
    with pytest.raises(MembershipRefused, match=refused):
        leader.propose_conf_change(CC.REMOVE, 2)
    assert leader.log.last_index() == end and not leader.progress[3].observer
    net.heal()
    net.tick(1, net.config.heartbeat_ticks)  # answers to the leader's own heartbeats do count
    assert leader.propose_conf_change(CC.REMOVE, 2) > 0


def test_a_change_needs_a_live_majority_of_the_voters_it_commits_under():
    """A change takes effect when it commits, and it commits under the configuration before
    it: removing the dead voter of a 2-voter quorum needs that voter's acknowledgement. Such a
    removal would sit uncommitted, and every later change would be refused as "in progress"."""
    net = Network([1, 2], joining=[3])
    leader = net.elect(1)
    net.crash(2)
    net.tick(1, net.config.election_ticks + 1)
    end = leader.log.last_index()
    with pytest.raises(MembershipRefused, match=r"the change commits under the current voters \[1, 2\], which "
                                                r"have 1 live \(1\), fewer than the 2 a majority needs; a dead voter "
                                                r"of a 2-voter quorum cannot be removed"):
        leader.propose_conf_change(CC.REMOVE, 2)
    with pytest.raises(MembershipRefused, match=r"current voters \[1, 2\], which have 1 live"):
        leader.propose_conf_change(CC.ADD_LEARNER, 3)  # it could not commit either
    assert leader.log.last_index() == end and leader.pending_conf_index <= leader.log.committed
    net.restart(2)
    net.tick(1, net.config.heartbeat_ticks)
    assert leader.propose_conf_change(CC.REMOVE, 2) > 0
    net.settle()
    net.tick(1)
    assert leader.membership.voters == {1}
    assert leader.propose_conf_change(CC.ADD_LEARNER, 3) > 0  # nothing is left pending


def test_adding_a_member_without_its_directory_is_refused_once_the_membership_records_directories():
    """A member without a directory matches any: a disk formatted again would count as it,
    which is what naming voters by directory (KIP-853) is there to prevent."""
    net = Network([1, 2, 3], joining=[4], directories=DIRS)
    leader = net.elect(1)
    end = leader.log.last_index()
    for kind in (CC.ADD_LEARNER, CC.ADD_VOTER):
        with pytest.raises(MembershipRefused, match="give node 4's directory id: this configuration names its "
                                                    "members by node id and directory id"):
            leader.propose_conf_change(kind, 4)
    assert leader.log.last_index() == end
    leader.propose_conf_change(CC.ADD_LEARNER, 4, directory_id="dir-4")
    net.settle()
    net.tick(1)
    assert leader.propose_conf_change(CC.ADD_VOTER, 4) > 0  # promoting keeps the directory recorded
    net.settle()
    net.tick(1)
    assert leader.membership.voters == {1, 2, 3, 4} and leader.membership.directory(4) == "dir-4"
    static = Network([1, 2, 3], joining=[4])  # voters without directories: none to give
    assert static.elect(1).propose_conf_change(CC.ADD_LEARNER, 4) > 0


def test_a_leader_replicates_to_at_most_max_observers():
    """Each observer costs the leader a progress entry and a link with its queues; anyone
    reaching the port may ask, so the number is bounded."""
    net = Network([1, 2, 3])
    leader = net.elect(1)
    asking = range(100, 100 + MAX_OBSERVERS)
    for nid in asking:
        leader.observe(nid)
    with pytest.raises(TooManyObservers, match=f"the leader replicates to at most {MAX_OBSERVERS} observers"):
        leader.observe(99)
    assert 99 not in leader.progress
    leader.observe(100)  # one it replicates to already may ask again
    leader.observe(2)  # and a member is no observer
    net.tick(1, (OBSERVER_TIMEOUT + 2) * net.config.election_ticks)  # none of them answers: forgotten
    assert not any(pr.observer for pr in leader.progress.values())
    leader.observe(99)
    assert leader.progress[99].observer


def test_a_removed_leader_hands_over_only_once_the_voters_left_know_its_removal_committed():
    """A change takes effect where it is known committed. A leader that steps down as soon as
    its own removal commits leaves the voters left under the old configuration if its last
    append is lost, and there they need its vote; it refuses a candidate whose log is shorter
    than its own and never campaigns itself. With another voter down, nobody is ever elected,
    although the voters left are a live majority of the new configuration (found by the
    simulator with a disk wipe among membership changes)."""
    net = Network([1, 2, 3, 4], directories={**DIRS, 4: "dir-4"})
    leader = net.elect(1)
    net.crash(2)
    net.tick(1, net.config.election_ticks + 1)  # 2 is not live; 1, 3 and 4 are
    held: list[Message] = []
    net.drop = lambda m: m.type == MT.APPEND_RESP and not held.append(m)  # 3 and 4 hold the removal...
    index = leader.propose_conf_change(CC.REMOVE, 1, directory_id="dir-1")
    net.settle()
    net.drop = lambda m: m.frm == 1 and m.to != 1  # ...then nothing from 1 arrives: its log grows alone
    leader.propose([b"only on 1"])
    net.settle()
    for m in held:  # the acknowledgements commit the removal
        leader.step(m)
    net.settle()
    assert leader.log.committed >= index and leader.membership.voters == {2, 3, 4}
    assert net.nodes[3].log.committed < index and net.nodes[3].membership.voters == {1, 2, 3, 4}
    net.drop = lambda m: False
    for _ in range(10 * net.config.election_ticks):
        for nid in (1, 3, 4):
            net.tick(nid)
    new = net.leader()
    assert new is not None and new.id in (3, 4), "the voters left elected nobody"
    assert new.membership.voters == {2, 3, 4} and not net.nodes[1].promotable()
    last = net.propose(new.id, b"after")[1]
    assert new.log.committed == last
