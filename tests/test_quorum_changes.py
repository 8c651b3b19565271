"""Changing the controller quorum while it runs (issue 17 part 4, Kafka's KIP-853), with real
processes started as an operator would: `kraft storage format --standalone` /
`--initial-controllers` / `--no-initial-controllers`, `controller.quorum.bootstrap.servers`,
`kraft quorum add-controller` / `remove-controller`, `describe --status`.

Every refusal is one line from the CLI, exit code 1, and writes nothing: the quorum's high
watermark and voters are the same before and after."""
from __future__ import annotations

import asyncio
import json
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from common.errors import ErrorCode, KafkaError
from kraft.dev_quorum import DevQuorum
from metadata.client import ControllerClient
from metadata.image import Endpoint
from protos import controller_pb2 as pb
from raft.proto import raft_pb2 as rpb
from raft.proto import raft_pb2_grpc
from tests.brokercluster import REPO, BrokerCluster, write_acked
from tests.controllers import InProcessQuorum
from tests.eventually import eventually
from tests.kvcluster import consecutive_ports, free_ports
from tests.logs import assert_no_tracebacks
from tests.test_broker_processes import consume_all


def kraft(*args: str, timeout: float = 90) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kraft.cli", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=timeout)


def ok(p: subprocess.CompletedProcess) -> str:
    assert p.returncode == 0, p.stderr
    return p.stdout


def refused(p: subprocess.CompletedProcess, code: str, says: str) -> None:
    """One line naming Kafka's code, exit code 1, no traceback."""
    assert p.returncode == 1 and p.stderr.startswith(f"Error: {code}: ") and p.stderr.count("\n") == 1, p.stderr
    assert says in p.stderr and "Traceback" not in p.stderr, p.stderr


def status(bootstrap: str) -> dict[str, object]:
    """`kraft quorum describe --status`, its voters and observers parsed: {"LeaderId": "2", ...}."""
    found = try_status(bootstrap, 20)
    assert found is not None, f"no active controller at {bootstrap}"
    return found


def try_status(bootstrap: str, timeout: float = 3) -> dict[str, object] | None:
    """``status``, or None while no controller is active (for ``eventually``)."""
    p = kraft("quorum", "--bootstrap-controller", bootstrap, "--command-timeout", str(timeout), "describe", "--status")
    if p.returncode != 0:
        return None
    fields: dict[str, object] = {k.strip(): v.strip() for k, v in (line.split(":", 1) for line in p.stdout.splitlines())}
    fields["CurrentVoters"] = json.loads(str(fields["CurrentVoters"]))
    fields["CurrentObservers"] = json.loads(str(fields["CurrentObservers"]))
    return fields


def voters(st: dict[str, object]) -> dict[int, str]:
    return {v["id"]: v["directoryId"] for v in st["CurrentVoters"]}  # type: ignore[union-attr]


def observers(st: dict[str, object]) -> dict[int, str]:
    return {v["id"]: v["directoryId"] for v in st["CurrentObservers"]}  # type: ignore[union-attr]


def unchanged(bootstrap: str, before: dict[str, object]) -> None:
    """Nothing was written: the same high watermark and voters (no brokers: the log is quiet)."""
    after = status(bootstrap)
    assert (after["HighWatermark"], after["CurrentVoters"]) == (before["HighWatermark"], before["CurrentVoters"])


def controller_config(q: DevQuorum, nid: int, port: int, cluster_base: str | None = None) -> Path:
    """A controller that finds the quorum through bootstrap servers (a new machine)."""
    q.ports[nid] = port  # DevQuorum names its files and runs it as a controller
    path = q.config_path(nid)
    path.write_text(f"node.id={nid}\nprocess.roles=controller\n"
                    f"controller.quorum.bootstrap.servers={cluster_base or q.bootstrap}\n"
                    f"listeners=CONTROLLER://127.0.0.1:{port}\ncontroller.listener.names=CONTROLLER\n"
                    f"metadata.log.dir={q.base_dir / f'controller-{nid}'}\n"
                    f"controller.quorum.election.timeout.ms={q.election_timeout_ms}\n")
    return path


def format_(q: DevQuorum, nid: int, *flags: str, cluster_id: str | None = None) -> str:
    """`kraft storage format` of controller ``nid``; returns its new directory id."""
    out = ok(kraft("storage", "format", "--cluster-id", cluster_id or q.cluster_id, "--config",
                   str(q.config_path(nid)), *flags))
    return out.split("directory id ", 1)[1].split(")", 1)[0]


async def raft_status(address: str) -> rpb.StatusResponse:
    import grpc
    async with grpc.aio.insecure_channel(address) as ch:
        return await raft_pb2_grpc.RaftAdminStub(ch).Status(rpb.StatusRequest(), timeout=3)


# ------------------------------------------------------------------------------- no processes


def test_format_and_config_refuse_what_makes_no_sense(tmp_path):
    def config(name: str, **props: str) -> str:
        path = tmp_path / f"{name}.properties"
        path.write_text("".join(f"{k}={v}\n" for k, v in {"process.roles": "controller", "node.id": "1",
                                                            "listeners": "CONTROLLER://127.0.0.1:9093",
                                                            "metadata.log.dir": str(tmp_path / name), **props}.items()))
        return str(path)

    dynamic = config("dynamic", **{"controller.quorum.bootstrap.servers": "127.0.0.1:9093"})
    static = config("static", **{"controller.quorum.voters": "1@127.0.0.1:9093"})
    broker = config("broker", **{"process.roles": "broker", "listeners": "PLAINTEXT://:9092",
                                 "log.dirs": str(tmp_path / "broker"), "controller.quorum.bootstrap.servers": "h:1"})
    neither = config("neither")
    badly = config("badly", **{"controller.quorum.bootstrap.servers": "127.0.0.1"})
    d = "MvDxzVmcRsaTz33bUuRU6A"
    for cfg, flags, says in [
        (dynamic, (), "because controller.quorum.voters is not set on this controller, give one of --standalone"),
        (dynamic, ("--standalone", "--no-initial-controllers"), "give only one of"),
        (static, ("--standalone",), "--standalone starts a dynamic quorum, but the config sets controller.quorum.voters"),
        (broker, ("--standalone",), "--standalone is for controllers"),
        (dynamic, ("--initial-controllers", "1@127.0.0.1:9093"), "expected ID@HOST:PORT:DIRECTORY_ID"),
        (dynamic, ("--initial-controllers", f"1@127.0.0.1:9093:{d},1@127.0.0.1:9094:{d}"), "node id 1 appears twice"),
        (dynamic, ("--initial-controllers", f"1@127.0.0.1:9999:{d}"), "but its CONTROLLER listener is on port 9093"),
        (dynamic, ("--initial-controllers", "1@127.0.0.1:9093:AAAAAAAAAAAAAAAAAAAAAA"), "bad directory id of voter 1"),
        (neither, ("--standalone",), "set controller.quorum.voters (ID@HOST:PORT,..., a static quorum) or "
                                     "controller.quorum.bootstrap.servers"),
        (badly, ("--standalone",), "bad controller.quorum.bootstrap.servers entry '127.0.0.1'"),
    ]:
        p = kraft("storage", "format", "--cluster-id", "c1", "--config", cfg, *flags)
        assert p.returncode == 1 and p.stderr.startswith("Error: ") and p.stderr.count("\n") == 1, (flags, p.stderr)
        assert says in p.stderr, (flags, p.stderr)
    assert not [p for p in tmp_path.iterdir() if p.is_dir()]  # nothing was formatted
    out = ok(kraft("storage", "format", "--cluster-id", "c1", "--config", dynamic, "--initial-controllers",
                   f"1@127.0.0.1:9093:{d},2@127.0.0.1:9094:MvDxzVmcRsaTz33bUuRU6B"))
    assert f"directory id {d}); initial controllers 1@127.0.0.1:9093:{d},2@" in out
    assert f"directory.id={d}" in (tmp_path / "dynamic" / "meta.properties").read_text()


def test_a_static_quorum_refuses_changes(tmp_path):
    """controller.quorum.voters is Kafka's kraft.version 0: its voters cannot change while it runs."""
    async def go() -> None:
        q = InProcessQuorum(tmp_path)
        await q.start()
        try:
            active = await q.active()
            # active is set before the controller's own first write (metadata.version) commits:
            # compare high watermarks once it has, when nothing else writes (no brokers)
            await eventually(lambda: active.sm.image.metadata_version != 0, 10, what="metadata.version recorded")
            async with q.client(timeout=10) as c:
                before = (await c.describe_quorum(pb.DescribeQuorumRequest())).high_watermark
                for method, req in [(ControllerClient.add_raft_voter, pb.AddRaftVoterRequest(
                                        cluster_id=q.cluster_id, voter_id=4, voter_directory_id="MvDxzVmcRsaTz33bUuRU6A",
                                        listeners=[pb.Endpoint(name="CONTROLLER", host="127.0.0.1", port=1)])),
                                    (ControllerClient.remove_raft_voter, pb.RemoveRaftVoterRequest(
                                        voter_id=3, voter_directory_id="AAAAAAAAAAAAAAAAAAAAAA"))]:
                    with pytest.raises(KafkaError) as e:
                        await c.send(method, req)
                    assert e.value.code == ErrorCode.UNSUPPORTED_VERSION and "static" in e.value.message
                after = await c.describe_quorum(pb.DescribeQuorumRequest())
                assert after.high_watermark == before and len(after.voters) == 3
        finally:
            await q.stop()
    asyncio.run(go())


def test_a_controller_refuses_the_raft_librarys_own_membership_rpcs(tmp_path):
    """RaftAdmin's AddVoter, AddLearner and RemoveMember would change the voters without the
    quorum's rules (static quorums, cluster id, DUPLICATE_VOTER, directory ids): a controller
    refuses them with one line naming the tool that applies those rules."""
    import grpc

    async def go() -> None:
        q = InProcessQuorum(tmp_path)
        await q.start()
        try:
            active = await q.active()
            before = active.node.membership
            async with grpc.aio.insecure_channel(active.node.address) as ch:
                admin = raft_pb2_grpc.RaftAdminStub(ch)
                for method, req in [("AddLearner", rpb.MemberRequest(node_id=4, address="127.0.0.1:1")),
                                    ("AddVoter", rpb.MemberRequest(node_id=4, address="127.0.0.1:1")),
                                    ("RemoveMember", rpb.MemberRequest(node_id=3))]:
                    with pytest.raises(grpc.aio.AioRpcError) as e:
                        await getattr(admin, method)(req, timeout=3)
                    assert e.value.code() == grpc.StatusCode.UNIMPLEMENTED, (method, e.value.details())
                    assert e.value.details() == (
                        f"a controller does not serve RaftAdmin {method}: change the controller quorum with "
                        f"`kraft quorum add-controller` or `kraft quorum remove-controller`, which check the cluster "
                        f"id, static quorums, duplicate voters and directory ids"), method
                assert (await admin.Status(rpb.StatusRequest(), timeout=3)).node_id == active.node.id  # still served
            assert active.node.membership == before
        finally:
            await q.stop()
    asyncio.run(go())


def test_a_learner_left_behind_by_add_controller_is_said_so_and_remove_controller_removes_it():
    """AddRaftVoter's first step commits, then the new controller dies: the answer says it is a
    learner now (not "nothing was changed"), and RemoveRaftVoter removes that learner by its
    node id and directory id; nothing else would."""
    from types import SimpleNamespace

    from common.errors import KafkaError
    from metadata import quorum
    from raft.config import Voter, new_directory_id
    from raft.messages import ConfChangeType
    from raft.node import RaftNode
    from raft.testing.memory import MemoryNetwork
    from tests.test_node_inprocess import OPTIONS, FormattedStorage, ListMachine

    async def go() -> None:
        net = MemoryNetwork()
        first, joining = new_directory_id(), new_directory_id()

        def node(nid: int, storage: FormattedStorage) -> RaftNode:
            return RaftNode(nid, None, ListMachine(), storage=storage, transport=net.transport(nid),
                            options=OPTIONS, address=f"mem:{nid}", seed=nid)
        leader = node(1, FormattedStorage(first, (Voter(1, "mem:1", first),)))
        new = node(2, FormattedStorage(joining))
        controller = SimpleNamespace(node=leader, not_controller=lambda: AssertionError("not the leader"))
        await leader.start()
        await new.start()
        try:
            await eventually(lambda: leader.is_leader, what="controller 1 leading")
            leader.observe(2, "mem:2")
            change = leader._change

            async def then_it_dies(kind: ConfChangeType, *args: object) -> int:
                index = await change(kind, *args)
                if kind == ConfChangeType.ADD_LEARNER:
                    await new.stop(transfer=False)
                    await leader.propose(b"written after it died")
                return index
            leader._change = then_it_dies  # type: ignore[method-assign]
            add = quorum.AddVoter(leader.cluster_id, 2, joining, (Endpoint("CONTROLLER", "mem", 2),), timeout_ms=1000)
            with pytest.raises(KafkaError) as e:
                await quorum.add_voter(controller, add, "CONTROLLER")  # type: ignore[arg-type]
            assert e.value.code == ErrorCode.REQUEST_TIMED_OUT and "nothing was changed" not in e.value.message
            assert e.value.message.startswith("adding controller 2: node 2 did not catch up within "), e.value.message
            assert e.value.message.endswith(
                f"; controller 2 was added as a learner and is one still: run add-controller again once it is caught "
                f"up, or remove it with remove-controller --controller-id 2 --controller-directory-id {joining}")
            assert leader.membership.learners == {2}
            with pytest.raises(KafkaError) as e:
                await quorum.remove_voter(controller, quorum.RemoveVoter("", 2, first))  # type: ignore[arg-type]
            assert e.value.code == ErrorCode.VOTER_NOT_FOUND and e.value.message.endswith(
                f"(and the learners 2 (directory id {joining})); nothing was changed")
            await quorum.remove_voter(controller, quorum.RemoveVoter("", 2, joining))  # type: ignore[arg-type]
            assert leader.membership.members == {1}
        finally:
            await leader.stop(transfer=False)
            await new.stop(transfer=False)
    asyncio.run(go())


# ------------------------------------------------------------------------------- processes


def test_standalone_grown_to_three_then_bad_input_is_refused_and_writes_nothing(tmp_path):
    q = DevQuorum(str(tmp_path / "q"), consecutive_ports(3), election_timeout_ms=500, dynamic=True)
    q.write_configs()
    q.cluster_id = ok(kraft("storage", "random-uuid")).strip()
    dirs = {1: format_(q, 1, "--standalone")}
    dirs.update({i: format_(q, i, "--no-initial-controllers") for i in (2, 3)})
    addr = {i: f"127.0.0.1:{p}" for i, p in q.ports.items()}
    try:
        q.start_node(1)
        # leading, and the controller's own first write committed: entries 1 (the leader's no-op), 2 (the
        # bootstrap voters) and 3 (metadata.version's FeatureLevelRecord, written once the controller is active),
        # so that the log is quiet before `unchanged` compares high watermarks
        st = asyncio.run(eventually(lambda: (s := try_status(addr[1])) and int(str(s["HighWatermark"])) >= 4 and s,
                                    30, what="controller 1 leading with metadata.version written"))
        assert st["LeaderId"] == "1" and voters(st) == {1: dirs[1]}
        refused(kraft("quorum", "--bootstrap-controller", addr[1], "remove-controller", "--controller-id", "1",
                      "--controller-directory-id", dirs[1]), "INVALID_REQUEST", "cannot remove the last voter")
        unchanged(addr[1], st)

        # 2 and 3 start as observers, then become voters one at a time
        q.start_node(2)
        q.start_node(3)
        asyncio.run(eventually(lambda: observers(status(addr[1])) == {2: dirs[2], 3: dirs[3]}, 30,
                               what="controllers 2 and 3 observing"))
        for i in (2, 3):
            out = ok(kraft("quorum", "add-controller", "--config", str(q.config_path(i))))  # bootstrap from the config
            assert out.strip() == f"Added controller {i} with directory id {dirs[i]} and endpoints: CONTROLLER://{addr[i]}"
        st = status(q.bootstrap)
        assert voters(st) == dirs and observers(st) == {}
        assert st["CurrentVoters"][1]["endpoints"] == [f"CONTROLLER://{addr[2]}"]  # type: ignore[index]

        # the voters added elect a leader among themselves once the first one is gone
        epoch = int(st["LeaderEpoch"])
        q.kill(1)
        st = asyncio.run(eventually(lambda: (s := try_status(f"{addr[2]},{addr[3]}")) and s["LeaderId"] in ("2", "3")
                                    and s, 30, what="a new leader among 2 and 3"))
        assert int(st["LeaderEpoch"]) > epoch and voters(st) == dirs
        q.start_node(1)

        def replication() -> list[list[str]] | None:
            rows = [line.split("\t") for line in ok(kraft("quorum", "--bootstrap-controller", q.bootstrap,
                                                           "describe", "--replication")).splitlines()]
            return rows if all(r[3] == "0" for r in rows[1:]) else None  # every voter caught up, 1 too
        rows = asyncio.run(eventually(replication, 30, what="controller 1 back and caught up"))
        assert rows[0] == ["NodeId", "DirectoryId", "LogEndOffset", "Lag", "LastFetchTimestamp",
                           "LastCaughtUpTimestamp", "Status"]
        assert {(int(r[0]), r[1]) for r in rows[1:]} == set(dirs.items()) and rows[1][6] == "Leader"

        # bad input: each refused with one line, nothing written
        b = q.bootstrap
        st = status(b)
        refused(kraft("quorum", "--bootstrap-controller", b, "add-controller", "--config", str(q.config_path(2))),
                "DUPLICATE_VOTER", f"controller 2 (directory id {dirs[2]}) is already a voter")
        refused(kraft("quorum", "--bootstrap-controller", b, "remove-controller", "--controller-id", "2",
                      "--controller-directory-id", dirs[3]), "VOTER_NOT_FOUND",
                f"controller 2 with directory id {dirs[3]} is not a voter")
        refused(kraft("quorum", "--bootstrap-controller", b, "remove-controller", "--controller-id", "2",
                      "--controller-directory-id", "not a directory id"), "INVALID_REQUEST", "bad directory id")
        foreign_port, spare_port = free_ports(2)
        controller_config(q, 9, foreign_port)
        format_(q, 9, "--no-initial-controllers", cluster_id="another-cluster")
        refused(kraft("quorum", "--bootstrap-controller", b, "add-controller", "--config", str(q.config_path(9))),
                "INCONSISTENT_CLUSTER_ID", f"controller 9 is formatted for cluster another-cluster, but this quorum is "
                                           f"cluster {q.cluster_id}; nothing was changed")
        unchanged(b, st)
        leader = int(st["LeaderId"])
        follower, other = [i for i in (1, 2, 3) if i != leader]
        q.kill(follower)

        def leader_sees_it_silent() -> bool:  # for three election timeouts: no longer live
            rows = [line.split("\t") for line in ok(kraft("quorum", "--bootstrap-controller", b, "describe",
                                                           "--replication")).splitlines()[1:]]
            fetched = next(int(r[4]) for r in rows if r[0] == str(follower))
            return fetched < time.time() * 1000 - 3 * q.election_timeout_ms
        asyncio.run(eventually(leader_sees_it_silent, 30, what=f"the leader to see {follower} silent"))
        refused(kraft("quorum", "--bootstrap-controller", b, "remove-controller", "--controller-id", str(other),
                      "--controller-directory-id", dirs[other]), "INVALID_REQUEST",
                f"removing controller {other}: without node {other}, voters {sorted({leader, follower})} would have 1 "
                f"live ({leader}), fewer than the 2 a majority needs; bring a voter back or add one first; nothing was "
                f"changed")
        # a change in flight: controller 5 is formatted but never started, so it never catches up
        controller_config(q, 5, spare_port)
        format_(q, 5, "--no-initial-controllers")
        adding = subprocess.Popen([sys.executable, "-m", "kraft.cli", "quorum", "--bootstrap-controller", b,
                                   "--command-timeout", "20", "add-controller", "--config", str(q.config_path(5))],
                                  cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            def in_flight() -> subprocess.CompletedProcess | None:
                p = kraft("quorum", "--bootstrap-controller", b, "remove-controller", "--controller-id", str(other),
                          "--controller-directory-id", dirs[other])
                assert p.returncode == 1, p.stdout  # refused either way: in flight, or no live majority left
                return p if "in progress" in p.stderr else None
            p = asyncio.run(eventually(lambda: asyncio.to_thread(in_flight), 15, what="the add of 5 in flight"))
            refused(p, "REQUEST_TIMED_OUT", "a membership change is in progress (adding node 5); retry once it "
                                            "completes; nothing was changed")
            out, err = adding.communicate(timeout=60)
        finally:
            adding.kill()
        refused(subprocess.CompletedProcess(adding.args, adding.returncode, out, err), "REQUEST_TIMED_OUT",
                "adding controller 5: node 5 did not catch up within 8s; it is not an observer of this leader")
        assert err.endswith("nothing was changed; is it running, with controller.quorum.bootstrap.servers naming "
                            "this quorum?\n"), err
        unchanged(b, st)
    finally:
        q.stop()
    assert_no_tracebacks(q.base_dir)


def test_a_controller_formatted_again_is_not_the_voter_it_was(tmp_path):
    """KIP-853's point: a wiped disk forgot its votes, so it may not vote as the old voter."""
    q = DevQuorum(str(tmp_path / "q"), consecutive_ports(3), election_timeout_ms=500, dynamic=True)
    try:
        q.start()
        addr = {i: f"127.0.0.1:{p}" for i, p in q.ports.items()}
        old = dict(q.directory_ids)
        leader = asyncio.run(q.wait_for_leader())
        victim, other = [i for i in (1, 2, 3) if i != leader]
        q.kill(victim)
        shutil.rmtree(q.base_dir / f"controller-{victim}")
        new = format_(q, victim, "--no-initial-controllers")
        assert new != old[victim]
        q.start_node(victim)
        st = asyncio.run(eventually(lambda: (s := try_status(q.bootstrap)) and observers(s).get(victim) == new and s,
                                    30, what=f"controller {victim} observing with its new directory"))
        assert voters(st) == old  # still the old replica's vote, which nobody can cast now
        health = kraft("health", "--config", str(q.config_path(victim)))
        assert health.returncode == 1 and "it was formatted again" in health.stderr, health.stderr
        # With one voter down, the new replica does not make a majority: its votes do not count.
        q.kill(other)

        async def leaderless() -> bool:
            s = await raft_status(addr[leader])
            return s.role != "LEADER" and s.dropped.get("vote_from_other_directory", 0) > 0
        asyncio.run(eventually(leaderless, 30, what=f"{leader} refusing {victim}'s votes and losing leadership"))
        assert (asyncio.run(raft_status(addr[victim]))).role == "FOLLOWER"  # it never campaigns as the old voter
        q.start_node(other)
        asyncio.run(q.wait_for_leader())
        remove = ["quorum", "--bootstrap-controller", q.bootstrap, "remove-controller", "--controller-id", str(victim),
                  "--controller-directory-id", old[victim]]
        described = f"KRaft controller {victim} with directory id {old[victim]}"
        assert ok(kraft(*remove, "--dry-run")).strip() == f"DRY RUN of removing {described}"
        assert voters(status(q.bootstrap)) == old  # a dry run changes nothing
        assert ok(kraft(*remove)).strip() == f"Removed {described}"
        ok(kraft("quorum", "add-controller", "--config", str(q.config_path(victim))))
        assert voters(status(q.bootstrap)) == {**old, victim: new}
        assert kraft("health", "--config", str(q.config_path(victim))).returncode == 0
        # the log names the voters: the first leader's record of the initial set, then each change
        wal = ",".join(str(p) for p in sorted((q.base_dir / f"controller-{leader}" / "wal").glob("*.log")))
        changes = [line for line in ok(kraft("dump-log", "--files", wal)).splitlines() if "| membership:" in line]
        everyone = json.dumps({str(i): old[i] for i in sorted(old)})
        assert changes[0].startswith("| membership: BOOTSTRAP node: ") and (
            f"voters: [1, 2, 3] learners: [] directories: {everyone} context: " in changes[0]), changes
        assert [c.split(" node:")[0] for c in changes[1:]] == [
            "| membership: REMOVE", "| membership: ADD_LEARNER", "| membership: ADD_VOTER"]
        assert f'"{victim}": "{new}"' in changes[-1]
    finally:
        q.stop()
    assert_no_tracebacks(q.base_dir)


def test_replace_a_killed_controller_while_producers_and_topic_creation_run(tmp_path):
    """The issue's scenario: kill -9 a controller, start a new machine (new node id, new
    directory) with bootstrap servers, add-controller it, remove-controller the dead one, all
    while an acks=all producer and topic creation run; nothing acknowledged is lost, and the
    new voter takes part in the election after the next kill -9."""
    c = BrokerCluster(tmp_path, 3, session_timeout_ms=3000, heartbeat_ms=300, dynamic=True,
                      broker_props={"replica.lag.time.max.ms": "3000"})
    q = c.quorum
    c.start()
    try:
        asyncio.run(c.wait_unfenced(timeout=60))
        asyncio.run(c.create_topic("orders", partitions=1, configs={"min.insync.replicas": "2"}))
        acked: list[int] = []
        created: list[str] = []
        port4 = free_ports(1)[0]
        controller_config(q, 4, port4)
        everywhere = f"{q.bootstrap},127.0.0.1:{port4}"

        async def scenario() -> tuple[int, int, str]:
            stop = asyncio.Event()

            async def create_topics() -> None:
                async with ControllerClient(everywhere, timeout=30, attempt_timeout=2) as client:
                    n = 0
                    while not stop.is_set():
                        name = f"t-{n}"
                        n += 1
                        try:
                            r = await client.create_topics(pb.CreateTopicsRequest(topics=[pb.CreatableTopic(
                                name=name, num_partitions=1, replication_factor=3)]))
                        except KafkaError as e:  # the outcome is unknown: not counted as created
                            assert e.code == ErrorCode.REQUEST_TIMED_OUT, e
                            continue
                        assert r.topics[0].error_code == 0, r.topics[0].error_message
                        created.append(name)
                        await asyncio.sleep(0.05)  # a pace for the loop, not a wait for a condition

            tasks = [asyncio.create_task(write_acked(c.bootstrap_servers, "orders", stop, acked, b"r-")),
                     asyncio.create_task(create_topics())]
            try:
                await eventually(lambda: len(acked) >= 100 and len(created) >= 3, 30, what="writes before the kill")
                async with ControllerClient(q.bootstrap, timeout=20) as client:
                    victim = (await client.describe_quorum(pb.DescribeQuorumRequest())).leader_id
                q.kill(victim)  # the active controller's machine is lost
                new_dir = await asyncio.to_thread(format_, q, 4, "--no-initial-controllers")
                q.start_node(4)
                out = await asyncio.to_thread(lambda: ok(kraft("quorum", "add-controller", "--config",
                                                               str(q.config_path(4)))))
                assert out.startswith(f"Added controller 4 with directory id {new_dir}")
                out = await asyncio.to_thread(lambda: ok(kraft(
                    "quorum", "--bootstrap-controller", everywhere, "remove-controller", "--controller-id",
                    str(victim), "--controller-directory-id", q.directory_ids[victim])))
                assert out.strip() == f"Removed KRaft controller {victim} with directory id {q.directory_ids[victim]}"
                n_acked, n_created = len(acked), len(created)
                await eventually(lambda: len(acked) >= n_acked + 100 and len(created) >= n_created + 3, 60,
                                 what="writes with the replaced quorum")
            finally:
                stop.set()
                await asyncio.gather(*tasks)
            return victim, int(status(everywhere)["LeaderEpoch"]), new_dir

        victim, epoch, new_dir = asyncio.run(asyncio.wait_for(scenario(), 240))
        st = status(everywhere)
        rest = sorted(set(q.directory_ids) - {victim})
        assert voters(st) == {**{i: q.directory_ids[i] for i in rest}, 4: new_dir}
        # kill -9 the leader: of the two voters left, one is 4, and both are needed to elect
        leader = int(st["LeaderId"])
        q.kill(leader)
        survivors = [i for i in (*rest, 4) if i != leader]
        st = asyncio.run(eventually(lambda: (s := try_status(everywhere)) and s["LeaderId"] in map(str, survivors)
                                    and s, 30, what=f"a leader elected by {survivors}"))
        assert int(st["LeaderEpoch"]) > epoch
        four = asyncio.run(raft_status(f"127.0.0.1:{port4}"))
        assert four.term == int(st["LeaderEpoch"]) and four.leader_id == int(st["LeaderId"])
        asyncio.run(c.create_topic("after-the-election", partitions=1))

        got = asyncio.run(consume_all(c.bootstrap_servers, "orders", expected=len(acked)))
        values = {int(r.value[2:]) for r in got}
        assert set(acked) <= values, f"acknowledged writes lost: {sorted(set(acked) - values)[:10]}"

        async def topics() -> set[str]:
            async with ControllerClient(everywhere, timeout=20) as client:
                return {t.name for t in (await client.describe_topics(pb.DescribeTopicsRequest())).topics}
        missing = set(created) - asyncio.run(topics())
        assert not missing, f"created topics lost: {sorted(missing)}"
    finally:
        for p in q.procs.values():
            if p.poll() is None:
                p.send_signal(signal.SIGCONT)
        c.close()
    assert_no_tracebacks(c.base)
