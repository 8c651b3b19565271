"""A peer link stops when cancelled even if its write completes at that very moment. With
asyncio.wait_for around the write, Python 3.11 loses such a cancel (CPython gh-86296): the
link ran on, and RaftNode.stop waited for it for ever (the suite froze in 2 of 8 runs)."""
import asyncio
from types import SimpleNamespace

from raft.messages import Message, MessageType
from raft.transport import _Link


def test_a_link_cancelled_as_its_write_completes_stops():
    async def go():
        written = asyncio.get_running_loop().create_future()
        writing = asyncio.Event()

        class Call:
            def write(self, data):
                writing.set()
                return written

            def cancel(self):
                pass

        channel = SimpleNamespace(stream_unary=lambda *a, **kw: (lambda: Call()))
        transport = SimpleNamespace(cluster_id="c", directory_id="", node_id=1, max_message_bytes=1 << 20,
                                    write_timeout=5.0, send_failures=0, channel=lambda peer: channel)
        link = _Link(transport, 2, "Send")
        link.push([Message(MessageType.HEARTBEAT, 2, 1, 1)])
        await writing.wait()  # the link is now waiting for its write
        written.set_result(None)  # the write completes ...
        link.task.cancel()  # ... in the same step as the cancel
        done, _ = await asyncio.wait({link.task}, timeout=2)
        assert done and link.task.cancelled(), "the link ran on after it was cancelled"
    asyncio.run(go())
