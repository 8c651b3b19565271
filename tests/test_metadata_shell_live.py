"""metadata-shell --bootstrap-controller: a live, read-only view of a running quorum.

One-shot runs call the shell in-process, in a worker thread, while the quorum and its test
brokers run on the test's event loop (the shell blocks on its own loop thread, so both make
progress). The interactive test drives a real terminal (pexpect) against a quorum of
controller processes (DevQuorum), to see the view follow the cluster between commands."""
from __future__ import annotations

import asyncio
import contextlib
import io
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

from click.testing import CliRunner, Result
from pexpect.fdpexpect import fdspawn

from tests.eventually import eventually
from tests.terminal import spawn_on_terminal

from metadata.client import ControllerClient
from kraft.dev_quorum import DevQuorum
from common.errors import ErrorCode
from metadata.shell.commands import Shell
from metadata.shell.live import LiveSource
from metadata.shell.main import main
from protos import controller_pb2 as pb
from tests.controllers import InProcessQuorum, TestBroker, start_brokers
from tests.kvcluster import free_ports, consecutive_ports

REPO = Path(__file__).resolve().parent.parent
COMPACTING = {"metadata.log.max.records.between.snapshots": "10",
              "metadata.log.snapshot.trailing.records": "0"}


def _invoke(args: list[str]) -> Result:
    result = CliRunner().invoke(main, args)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    assert "Traceback" not in result.output
    return result


async def shell(q: InProcessQuorum | str, *args: object) -> Result:
    """metadata-shell against ``q``'s bootstrap, off the loop the quorum runs on."""
    bootstrap = q if isinstance(q, str) else q.bootstrap
    return await asyncio.to_thread(_invoke, ["-b", bootstrap, *(str(a) for a in args)])


async def lines(q: InProcessQuorum, *args: object) -> list[str]:
    result = await shell(q, *args)
    assert result.exit_code == 0, result.output
    return result.stdout.splitlines()


@contextlib.asynccontextmanager
async def live(tmp_path: Path, racks: list[tuple[int, str]], **props: str
               ) -> AsyncIterator[tuple[InProcessQuorum, list[TestBroker], ControllerClient]]:
    """A running in-process quorum with test brokers and a client; all stopped afterwards
    (a test that stops some itself removes them from the list)."""
    q = InProcessQuorum(tmp_path, **props)
    await q.start()
    brokers = await start_brokers(q, racks)
    c = q.client()
    try:
        yield q, brokers, c
    finally:
        for b in brokers:
            await b.stop()
        await c.close()
        if q.servers:
            await q.stop()


async def wait_compacted(c: ControllerClient, offset: int) -> None:
    """Until the controller has compacted ``offset`` into a snapshot (taken in the
    background)."""
    async def compacted() -> bool:
        r = await c.fetch_metadata(pb.FetchMetadataRequest(offset=offset, broker_id=-1))
        return r.error_code == ErrorCode.OFFSET_OUT_OF_RANGE

    await eventually(compacted, 10, what="the controller compacted its log")


async def create(c: ControllerClient, name: str, partitions: int = 2, rf: int = 2) -> None:
    r = await c.create_topics(pb.CreateTopicsRequest(topics=[pb.CreatableTopic(
        name=name, num_partitions=partitions, replication_factor=rf)]))
    assert r.topics[0].error_code == ErrorCode.NONE, r.topics[0].error_message


def test_one_shot_over_a_live_quorum_and_back_in_time(tmp_path: Path) -> None:
    async def go() -> None:
        async with live(tmp_path, [(1, "a"), (2, "b"), (3, "c")]) as (q, _, c):
            await create(c, "orders", 3, 3)
            before_payments = int((await lines(q, "cat", "/cluster/metadataOffset"))[0])
            await create(c, "payments", 1, 2)
            active = await q.active()
            image = active.sm.image
            assert await lines(q, "-c", "ls /topics; ls /brokers; cat /cluster/id") == [
                "orders", "payments", "1", "2", "3", q.cluster_id]
            leader = image.topic("orders").partitions[1].leader
            assert await lines(q, "cat", "/topics/orders/partitions/1/leader") == [str(leader)]
            assert await lines(q, "cat", "/brokers/2/rack") == ["b"]
            # /quorum is the leader's DescribeQuorum: itself, its epoch, voters, observers (and
            # of a static quorum, no learners; the leader voted for itself)
            assert await lines(q, "ls", "/quorum") == [
                "epoch", "highWatermark", "leader", "learners", "observers", "replication", "votedFor", "voters"]
            assert await lines(q, "-c", "cat /quorum/leader; cat /quorum/voters") == [
                str(active.node.id), "[1, 2, 3]"]
            assert await lines(q, "cat", "/quorum/observers") == ["[1, 2, 3]"]
            assert await lines(q, "ls", "/quorum/replication/voters") == ["1", "2", "3"]
            hw = int((await lines(q, "cat", "/quorum/highWatermark"))[0])
            assert hw >= image.offset + 1  # exclusive, and it may have moved on (heartbeats)
            assert (await lines(q, "cat", f"/quorum/replication/voters/{active.node.id}/lag")
                    == ["0"])

            # --at-offset: before payments existed, and the same directory now
            assert await lines(q, "--at-offset", before_payments, "ls", "/topics") == ["orders"]
            assert await lines(q, "--at-offset", before_payments, "cat",
                               "/cluster/metadataOffset") == [str(before_payments)]
            assert (await lines(q, "ls", "/topics/payments/partitions")) == ["0"]
            late = await shell(q, "--at-offset", 10 ** 6, "ls", "/topics")
            assert late.exit_code == 1 and len(late.stderr.splitlines()) == 1
            assert "after the end of the controller quorum at" in late.stderr

            # changes names the entry and the record that made the path
            out = await lines(q, "changes", "/topics/payments/partitions/0/leader")
            assert out[0].startswith("offset ") and "PartitionRecord" in out[0]
            created_at = int(out[0].split()[1])
            assert created_at > before_payments
            assert out[1] == (f"    /topics/payments/partitions/0/leader: (absent) -> "
                              f"{image.topic('payments').partitions[0].leader}")
            assert out[-1] == (f"1 entry changed /topics/payments/partitions/0/leader after "
                               f"offset 0 up to offset {out[-1].split()[-1]}")
            # the log from offset 1 is there: the first entry is the first leader's no-op
            first = await lines(q, "changes", "/cluster/metadataOffset", 0, 1)
            assert "no-op entry" in first[0]
    asyncio.run(go())


def test_a_compacted_log_is_read_from_the_snapshot(tmp_path: Path) -> None:
    async def go() -> None:
        async with live(tmp_path, [(1, "a"), (2, "b")], **COMPACTING) as (q, _, c):
            names = [f"t{i}" for i in range(8)]
            for name in names:
                await create(c, name)
            await wait_compacted(c, 1)
            await create(c, "after-snapshot")
            image = (await q.active()).sm.image
            assert await lines(q, "ls", "/topics") == sorted([*names, "after-snapshot"])
            assert await lines(q, "ls", "/brokers") == ["1", "2"]
            assert await lines(q, "cat", "/topics/t0/partitions/1/isr") == [
                str(list(image.topic("t0").partitions[1].isr))]
            # the history starts at the snapshot: before it is a clear one-line error
            early = await shell(q, "--at-offset", 1, "ls", "/topics")
            assert early.exit_code == 1 and early.stdout == ""
            [message] = early.stderr.splitlines()
            assert message.startswith("metadata-shell: offset 1 is before the history fetched "
                                      "from the controller quorum at 127.0.0.1:")
            assert "compacted its log into a snapshot at offset" in message
            # ...and what came after the snapshot is there to trace
            out = await lines(q, "changes", "/topics/after-snapshot/name")
            assert out[0].endswith('TopicRecord {"name": "after-snapshot", "topicId": "'
                                   f'{image.topic("after-snapshot").id}"}}')
    asyncio.run(go())


def test_refresh_follows_compaction_and_survives_a_quorum_that_is_down(tmp_path: Path) -> None:
    """What interactive mode does before each line, on the source and the shell directly."""
    async def go() -> None:
        async with live(tmp_path, [(1, "a"), (2, "b")], **COMPACTING) as (q, brokers, c):
            source = await asyncio.to_thread(LiveSource, q.bootstrap, timeout=1.0)
            try:
                opened_at = source.image().offset
                assert source.history().first_offset == 0
                for i in range(8):  # enough records for a snapshot past where the source is
                    await create(c, f"t{i}")
                await wait_compacted(c, opened_at + 1)
                notes = await asyncio.to_thread(source.refresh)
                assert [n.split(":")[0] for n in notes] == [
                    f"the controller compacted its log past offset {opened_at}"]
                assert source.history().first_offset > opened_at
                assert sorted(source.image().topics_by_name) == [f"t{i}" for i in range(8)]
                assert source.image().offset == (await q.active()).sm.image.offset

                # the quorum goes away: a warning, and the view already held
                for b in brokers:
                    await b.stop()
                brokers.clear()
                await q.stop()
                out, err = io.StringIO(), io.StringIO()
                shell = Shell(source, out, err)
                await asyncio.to_thread(shell.refresh)
                [warning] = err.getvalue().splitlines()
                assert warning.startswith("warning: no controller accepted a connection: " + "; ".join(
                    f"{a}: connection refused" for a in q.bootstrap.split(",")))  # at once: all refused
                assert warning.endswith(f"; still showing offset {source.image().offset}")
                assert shell.run(["ls", "/topics/t7/partitions"]) and out.getvalue() == "0\n1\n"
            finally:
                await asyncio.to_thread(source.close)
    asyncio.run(go())


def test_unreachable_controllers_give_one_line_and_exit_1() -> None:
    async def go() -> None:
        bootstrap = ",".join(f"127.0.0.1:{p}" for p in free_ports(2))
        start = time.monotonic()
        result = await shell(bootstrap, "--timeout", "5", "ls", "/topics")
        assert time.monotonic() - start < 4  # refused everywhere: no use waiting out --timeout
        assert result.exit_code == 1 and result.stdout == ""
        [message] = result.stderr.splitlines()
        assert message == ("metadata-shell: no controller accepted a connection: " +
                           "; ".join(f"{a}: connection refused" for a in bootstrap.split(",")))
        bad = await shell("localhost", "ls")
        assert bad.exit_code == 1
        assert bad.stderr == ("metadata-shell: bad bootstrap address 'localhost': expected "
                              "HOST:PORT\n")
    asyncio.run(go())


def test_exactly_one_source() -> None:
    both = CliRunner().invoke(main, ["-b", "127.0.0.1:1", "-d", "/tmp", "ls"])
    none = CliRunner().invoke(main, ["ls"])
    for result in (both, none):
        assert result.exit_code == 2
        assert ("give exactly one of --snapshot FILE, --directory DIR or --bootstrap-controller "
                "HOST:PORT[,HOST:PORT...]") in result.output


# -- interactive ---------------------------------------------------------------------------------

def test_interactive_follows_the_cluster(tmp_path: Path) -> None:
    async def go() -> None:
        q = DevQuorum(str(tmp_path / "quorum"), consecutive_ports(3), election_timeout_ms=300)
        q.start()
        brokers: list[TestBroker] = []
        proc: subprocess.Popen | None = None
        try:
            leader = await q.wait_for_leader()
            brokers = [TestBroker(q.bootstrap, q.cluster_id, b) for b in (1, 2)]
            await asyncio.gather(*(b.start() for b in brokers))
            async with ControllerClient(q.bootstrap) as c:
                await create(c, "early")
                env = dict(os.environ, KRAFT_METADATA_SHELL_HISTORY=str(tmp_path / "history"),
                           TERM="xterm", PROMPT_TOOLKIT_NO_CPR="1")
                proc, child = spawn_on_terminal(
                    [sys.executable, "-m", "metadata.shell.main", "--bootstrap-controller",
                     q.bootstrap], env)
                child.logfile_read = seen = io.StringIO()

                def step(send: str | None, *expected: str) -> None:
                    if send is not None:
                        child.send(send)
                    for text in expected:
                        child.expect_exact(text)

                await asyncio.to_thread(step, None, "Type 'help' for the commands.",
                                        "metadata:/>")
                await asyncio.to_thread(step, "cat /topics/late/id\r",
                                        "cat: /topics/late/id: no such file or directory",
                                        "metadata:/>")
                await create(c, "late")  # after the shell started: seen at the next command
                await asyncio.to_thread(step, "ls /topics\r", "early\r\n", "late\r\n",
                                        "metadata:/>")
                await asyncio.to_thread(step, "cat /quorum/leader /quorum/epoch\r",
                                        f"/quorum/leader: {leader}\r\n", "/quorum/epoch: ")
                epoch = int(await asyncio.to_thread(_read_number, child))
                # the leader dies: the next command finds the new one and its epoch
                q.kill(leader)
                await asyncio.to_thread(step, "cat /quorum/leader /quorum/epoch\r",
                                        "/quorum/leader: ")
                new_leader = int(await asyncio.to_thread(_read_number, child))
                await asyncio.to_thread(step, None, "/quorum/epoch: ")
                assert new_leader != leader
                assert int(await asyncio.to_thread(_read_number, child)) > epoch
                child.send("exit\r")
                assert await asyncio.to_thread(proc.wait, 20) == 0
                child.close()
                assert "Traceback" not in seen.getvalue() and "warning" not in seen.getvalue()
        finally:
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()
            for b in brokers:
                await b.stop()
            q.stop()
    asyncio.run(go())


def _read_number(child: fdspawn) -> str:
    child.expect(r"(\d+)\r\n")
    return child.match.group(1)
