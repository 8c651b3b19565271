"""A server process's loop ends only after every gRPC call's task has. grpc.aio's
``server.stop(grace)`` returns once its core has ended every call, while the tasks running them
may still be unwinding (a handler cancelled at the end of the grace period, its cleanup
awaiting); ``asyncio.run`` then cancels them as it ends, and grpc catches that cancel with a
bare except and prints a CancelledError traceback on stderr, the server's log (seen in a
controller's log at the teardown of tests/test_leader_election.py)."""
from __future__ import annotations

import subprocess
import sys
import textwrap

from tests.brokercluster import REPO

#: A node with its own gRPC server, as a controller builds it, and a service of the
#: application's whose calls are in flight when the node stops; then the process ends as the
#: servers' mains do (``raft.transport.calls_ended``).
NODE = textwrap.dedent("""
    import asyncio, logging, sys, tempfile
    import grpc
    from raft.node import RaftNode
    from raft.storage import format_storage
    from raft.transport import calls_ended, grpc_errors_in_one_line
    from tests.kvcluster import free_ports
    from tests.raftnodes import ListMachine

    logging.basicConfig(level=logging.INFO, stream=sys.stderr)
    grpc_errors_in_one_line()
    CALLS = 5
    entered, cleaned_up = [], []

    async def waiting(request, context):
        entered.append(1)
        try:
            await asyncio.Event().wait()  # a long poll
        except asyncio.CancelledError:
            await asyncio.sleep(0.3)  # its cleanup (cancelling and awaiting work of its own)
            cleaned_up.append(1)
            raise

    async def main():
        data = tempfile.mkdtemp()
        format_storage(data, "test", 1)
        address = f"127.0.0.1:{free_ports(1)[0]}"
        server = grpc.aio.server()
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(
            "test.Waiting", {"Wait": grpc.unary_unary_rpc_method_handler(waiting)}),))
        node = RaftNode(1, f"1@{address}", ListMachine(), data_dir=data, address=address, server=server)
        await node.start()
        channel = grpc.aio.insecure_channel(address)
        calls = [channel.unary_unary("/test.Waiting/Wait")(b"") for _ in range(CALLS)]
        while len(entered) < CALLS:
            await asyncio.sleep(0.01)
        await node.stop()
        await calls_ended()
        print(f"{len(cleaned_up)} of {CALLS} handlers cleaned up")

    asyncio.run(main())
""")


def test_a_stopped_nodes_calls_end_before_the_process_does():
    p = subprocess.run([sys.executable, "-c", NODE], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout == "5 of 5 handlers cleaned up\n", p.stdout + p.stderr
    assert "Traceback" not in p.stderr, p.stderr


def test_every_server_entry_point_waits_for_its_calls():
    import inspect

    import brokerd.main
    import kraft.cli.servers
    import raft.examples.kv.cli
    for module in (kraft.cli.servers, brokerd.main, raft.examples.kv.cli):
        assert "await calls_ended()" in inspect.getsource(module), module.__name__
