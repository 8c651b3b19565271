"""A hung active controller (SIGSTOP) fences no broker (issue 11 item 3): brokers give each
heartbeat attempt one interval, then ask the other controllers who leads, and a new active
controller gives every registered broker a fresh session. Controllers and brokers are
processes with the default timings (session 9 s, heartbeat 2 s, election 500 ms)."""
import asyncio
import signal
import time

from metadata.client import ControllerClient
from kraft.dev_quorum import DevQuorum
from protos import controller_pb2 as pb
from tests.kvcluster import consecutive_ports
from tests.logs import assert_no_tracebacks


def test_sigstop_of_the_active_controller_for_8_15_and_25_s_fences_no_broker(tmp_path):
    q = DevQuorum(str(tmp_path / "q"), consecutive_ports(9), brokers=3,
                  broker_extra={"broker.heartbeat.interval.ms": "2000"})
    q.start()

    async def go() -> list[str]:
        await q.wait_for_brokers()
        seen: list[str] = []
        for pause in (8, 15, 25):
            leader = await q.wait_for_leader()
            others = [f"127.0.0.1:{q.ports[i]}" for i in q.ports if i != leader]
            q.kill(leader, signal.SIGSTOP)
            try:
                async with ControllerClient(others, timeout=10, attempt_timeout=1) as c:
                    until = time.monotonic() + pause
                    while time.monotonic() < until:  # watch from the controllers that still run
                        try:
                            r = await c.describe_cluster(pb.DescribeClusterRequest())
                            fenced = sorted(b.id for b in r.brokers if b.fenced)
                            if fenced:
                                seen.append(f"{pause}s pause: brokers {fenced} fenced")
                        except Exception:
                            pass  # no active controller yet
                        await asyncio.sleep(0.25)
            finally:
                q.kill(leader, signal.SIGCONT)
            await q.wait_for_brokers(timeout=30)
        # read before the teardown, whose controlled shutdowns fence every broker
        seen += [line for p in (tmp_path / "q").glob("*.log") for line in p.read_text().splitlines()
                 if "fencing broker" in line or "is now fenced" in line]
        return seen

    try:
        seen = asyncio.run(go())
    finally:
        q.stop()
    assert not seen
    assert_no_tracebacks(tmp_path / "q")
