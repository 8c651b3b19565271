"""Real clusters of `raft-kv serve` processes on loopback, for fault tests.

Every node reaches every other through its own TCP proxy, so a test can cut any link
(`cut`, `isolate`) while clients still reach the nodes directly. Processes are killed with
real signals: SIGKILL, SIGSTOP/SIGCONT, SIGTERM.
"""
from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

from kraft.dev_quorum import consecutive_ports  # noqa: F401  (the tests' name for it)
from raft.examples.kv.client import KVClient
from tests.eventually import eventually

REPO = Path(__file__).resolve().parent.parent
RAFT_KV = [sys.executable, "-m", "raft.examples.kv.cli"]


def free_ports(n: int, avoid: set[int] = frozenset()) -> list[int]:
    """``n`` distinct free ports, none of them in ``avoid`` (ports handed out earlier that
    nothing listens on yet: the kernel may offer those again)."""
    socks, ports = [], []
    try:
        while len(ports) < n:
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
            port = s.getsockname()[1]
            if port not in avoid:
                ports.append(port)
    finally:
        for s in socks:
            s.close()
    return ports


class FaultProxy:
    """A TCP forwarder of one directed link that can be cut: ``set_blocked`` resets its
    connections and refuses new ones; ``set_stalled`` keeps them open but stops forwarding what
    the client sends, as a one-way partition does to TCP: nothing arrives and nothing fails
    until the sender's buffers fill, and what was held arrives once the cut heals (TCP never
    loses bytes from the middle of a stream)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, port: int, target: int) -> None:
        self.loop, self.port, self.target = loop, port, target
        self.blocked = False
        self.flowing = asyncio.Event()
        loop.call_soon_threadsafe(self.flowing.set)
        self.conns: set[asyncio.StreamWriter] = set()
        self.server = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self._accept, "127.0.0.1", port), loop).result()

    async def _accept(self, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        if self.blocked:
            w.transport.abort()
            return
        try:
            ur, uw = await asyncio.open_connection("127.0.0.1", self.target)
        except OSError:
            w.transport.abort()
            return
        self.conns |= {w, uw}

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter, outbound: bool) -> None:
            try:
                while data := await src.read(65536):
                    if outbound:
                        await self.flowing.wait()
                    dst.write(data)
                    await dst.drain()
            except (OSError, asyncio.CancelledError):
                pass
            finally:
                dst.transport.abort()
                self.conns.discard(dst)
        await asyncio.gather(pipe(r, uw, True), pipe(ur, w, False))

    def set_blocked(self, blocked: bool) -> None:
        def apply() -> None:
            self.blocked = blocked
            if blocked:
                for w in list(self.conns):
                    w.transport.abort()
                self.conns.clear()
        self.loop.call_soon_threadsafe(apply)

    def set_stalled(self, stalled: bool) -> None:
        self.loop.call_soon_threadsafe(self.flowing.clear if stalled else self.flowing.set)


class KVCluster:
    def __init__(self, base: Path, n: int = 3, *, args: tuple[str, ...] = (),
                 cluster_id: str = "test") -> None:
        self.base = base
        self.ids = list(range(1, n + 1))
        self.args = list(args)
        self.cluster_id = cluster_id
        self.ports: dict[int, int] = {}
        self.procs: dict[int, subprocess.Popen] = {}
        self.logs: dict[int, Path] = {}
        self.proxies: dict[tuple[int, int], FaultProxy] = {}
        self.proxy_ports: dict[tuple[int, int], int] = {}
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        for nid in self.ids:
            self.add_node_slot(nid)

    # -- layout ------------------------------------------------------------------------------

    def add_node_slot(self, nid: int) -> None:
        """Allocate ports and proxies for node ``nid`` (to add a node later too)."""
        links = [(a, b) for other in [*self.ports, nid] for a, b in ((nid, other), (other, nid))
                 if a != b and (a, b) not in self.proxies]
        node_port, *link_ports = free_ports(1 + len(links), avoid=set(self.ports.values()))
        self.ports[nid] = node_port
        for (a, b), port in zip(links, link_ports, strict=True):
            self.proxy_ports[(a, b)] = port
            self.proxies[(a, b)] = FaultProxy(self._loop, port, self.ports[b])

    def voters_for(self, nid: int, members: list[int] | None = None) -> str:
        """Node ``nid``'s view of the voters: itself directly, the others through proxies."""
        members = members or self.ids
        return ",".join(f"{m}@127.0.0.1:{self.ports[m] if m == nid else self.proxy_ports[(nid, m)]}"
                        for m in members)

    def address(self, nid: int) -> str:
        return f"127.0.0.1:{self.ports[nid]}"

    def endpoints(self, ids: list[int] | None = None) -> list[str]:
        return [self.address(i) for i in (ids or self.ids)]

    def data_dir(self, nid: int) -> Path:
        return self.base / f"node{nid}"

    # -- processes -----------------------------------------------------------------------

    def run_cli(self, *argv: str, check: bool = True, timeout: float = 30) -> subprocess.CompletedProcess:
        p = subprocess.run([*RAFT_KV, *argv], cwd=REPO, capture_output=True, text=True, timeout=timeout)
        if check and p.returncode != 0:
            raise AssertionError(f"raft-kv {' '.join(argv)} failed: {p.stderr.strip()}")
        return p

    def format(self, nid: int) -> None:
        self.run_cli("format", "--id", str(nid), "--data-dir", str(self.data_dir(nid)),
                     "--cluster-id", self.cluster_id)

    def start(self, nid: int, *, voters: str | None = None, extra: tuple[str, ...] = (),
              fmt: bool = True) -> subprocess.Popen:
        if fmt and not (self.data_dir(nid) / "meta.properties").exists():
            self.format(nid)
        self.logs[nid] = self.base / f"node{nid}.log"
        argv = [*RAFT_KV, "serve", "--id", str(nid), "--voters", voters or self.voters_for(nid),
                "--data-dir", str(self.data_dir(nid)), *self.args, *extra]
        if voters is not None and f"{nid}@" not in voters:
            argv += ["--address", self.address(nid)]
        log = open(self.logs[nid], "a")
        self.procs[nid] = subprocess.Popen(argv, cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
        return self.procs[nid]

    def start_all(self) -> None:
        for nid in self.ids:
            self.start(nid)

    def signal(self, nid: int, sig: int) -> None:
        self.procs[nid].send_signal(sig)

    def kill(self, nid: int) -> None:
        p = self.procs[nid]
        p.send_signal(signal.SIGKILL)
        p.wait(10)

    def stop(self, nid: int) -> int:
        p = self.procs[nid]
        if p.poll() is None:
            p.send_signal(signal.SIGCONT)
            p.send_signal(signal.SIGTERM)
        return p.wait(20)

    def alive(self, nid: int) -> bool:
        return nid in self.procs and self.procs[nid].poll() is None

    def close(self) -> None:
        for p in self.procs.values():
            if p.poll() is None:
                p.send_signal(signal.SIGCONT)
                p.kill()
                p.wait(10)
        for proxy in self.proxies.values():
            self._loop.call_soon_threadsafe(proxy.server.close)
        self._loop.call_soon_threadsafe(self._loop.stop)

    def log_text(self, nid: int) -> str:
        return self.logs[nid].read_text() if nid in self.logs else ""

    # -- network faults -------------------------------------------------------------------------

    def cut(self, a: int, b: int) -> None:
        self.proxies[(a, b)].set_blocked(True)
        self.proxies[(b, a)].set_blocked(True)

    def isolate(self, nid: int) -> None:
        for (a, b), p in self.proxies.items():
            if nid in (a, b):
                p.set_blocked(True)

    def stall(self, a: int, b: int) -> None:
        """Cut the link from ``a`` to ``b`` one way: nothing ``a`` sends reaches ``b`` until
        ``heal``, while ``b`` still reaches ``a``."""
        self.proxies[(a, b)].set_stalled(True)

    def heal(self) -> None:
        for p in self.proxies.values():
            p.set_blocked(False)
            p.set_stalled(False)

    # -- observing ---------------------------------------------------------------------------

    def client(self, ids: list[int] | None = None, **kw) -> KVClient:
        return KVClient(self.endpoints(ids), **kw)

    async def statuses(self, ids: list[int] | None = None) -> dict[int, object]:
        c = self.client(attempt_timeout=1.0)
        out = {}
        try:
            for nid in ids or self.ids:
                if self.alive(nid):
                    try:
                        out[nid] = await c.status(self.address(nid))
                    except Exception:
                        pass
        finally:
            await c.close()
        return out

    async def wait_leader(self, among: list[int] | None = None, timeout: float = 15.0,
                          not_term: int = 0) -> tuple[int, int]:
        """(leader id, term) once a live node of ``among`` leads in a term other than
        ``not_term`` and the others in ``among`` agree."""
        among = among or self.ids

        async def agreed() -> tuple[int, int] | None:
            st = await self.statuses(among)
            leaders = [(s.node_id, s.term) for s in st.values() if s.role == "LEADER" and s.term != not_term]
            if leaders:
                lid, term = max(leaders, key=lambda x: x[1])
                if all(s.leader_id == lid for s in st.values() if s.term == term):
                    return lid, term
            return None

        try:
            return await eventually(agreed, timeout, what=f"a leader among {among}")
        except AssertionError as e:
            st = await self.statuses()
            raise AssertionError(f"{e}; " +
                                 "; ".join(f"node {s.node_id}: {s.role} term {s.term} commit {s.commit_index} "
                                           f"last {s.last_index} snap {s.snapshot_index} rejected {dict(s.rejected)}"
                                           for s in st.values()) + "; logs:\n" +
                                 "\n".join(f"--- node {n}\n{self.log_text(n)[-2000:]}" for n in among)) from None

    async def wait_applied(self, nid: int, index: int, timeout: float = 15.0) -> None:
        async def applied() -> bool:
            st = await self.statuses([nid])
            return nid in st and st[nid].applied_index >= index

        await eventually(applied, timeout, what=f"node {nid} applied index {index}")


def wipe(path: Path) -> None:
    import shutil
    shutil.rmtree(path)
    assert not os.path.exists(path)
