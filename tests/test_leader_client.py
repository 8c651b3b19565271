"""raft.client.LeaderClient moves past endpoints that cannot be reached without counting them
as "maybe applied": a write is sent elsewhere when a stopped controller's name no longer
resolves (docker compose) or its port refuses, and is reported unknown only once it may have
reached a server (docs/raft.md, "Write outcomes")."""
import asyncio

from raft.examples.kv.client import KVClient
from raft.examples.kv.server import build
from raft.config import NodeOptions
from raft.storage import format_storage
from tests.kvcluster import free_ports


def test_a_write_skips_an_unresolvable_and_a_refusing_endpoint(tmp_path):
    async def go():
        ports = free_ports(2)  # the second stays closed: connections to it are refused
        format_storage(str(tmp_path / "n1"), "lc", 1)
        node, _ = build(1, f"1@127.0.0.1:{ports[0]}", str(tmp_path / "n1"), options=NodeOptions(fsync=False))
        await node.start()
        kv = KVClient(["no-such-host.invalid:9093", f"127.0.0.1:{ports[1]}", f"127.0.0.1:{ports[0]}"],
                      timeout=15, attempt_timeout=2)
        try:
            await node.wait_for_leader()
            await kv.put(b"k", b"v")  # a write: never retried once it may have been sent
            assert await kv.get(b"k") == b"v"
        finally:
            await kv.close()
            await node.stop(transfer=False)
    asyncio.run(go())
