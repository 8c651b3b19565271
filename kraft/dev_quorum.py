"""A local quorum for development and demos: three controller processes on loopback, each
with its own properties file and formatted data directory, started with ``kraft
server-start`` exactly as an operator would."""
from __future__ import annotations

import asyncio
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

from common.config_def import ConfigError
from common.tls import TLSConfig
from raft.config import new_directory_id

from metadata.client import ControllerClient
from metadata.ids import random_id
from protos import controller_pb2 as pb

REPO = Path(__file__).resolve().parent.parent


def consecutive_ports(n: int) -> int:
    """A base port with ``n`` free loopback ports from it: a DevQuorum listens on a run of ports
    from its base (3 controllers, then each broker's gRPC and Kafka listener), so checking only
    the base let a cluster start on a port another process held (a broker exits, "not all
    unfenced")."""
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            base = s.getsockname()[1]
        if base + n >= 65535:
            continue
        socks = []
        try:
            for port in range(base, base + n):
                socks.append(sock := socket.socket())
                sock.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
        finally:
            for sock in socks:
                sock.close()
    raise OSError(f"no {n} consecutive free ports on 127.0.0.1 in 50 tries")


class DevQuorum:
    """Controllers 1-3 on base_port..base_port+2; brokers 101.. on the ports after them (gRPC),
    then the brokers' Kafka listeners: 3 + 2 x brokers consecutive ports in all; with
    ``metrics``, every node's Prometheus metrics on the 3 + brokers ports after those. A
    console (``kraft web``) over them is one more process, started with ``start_console``."""

    def __init__(self, base_dir: str | None = None, base_port: int = 19093, *, election_timeout_ms: int = 500,
                 session_timeout_ms: int = 9000, extra: dict[str, str] | None = None, brokers: int = 0,
                 broker_extra: dict[str, str] | None = None, node_extra: dict[int, dict[str, str]] | None = None,
                 dynamic: bool = False, client_tls: TLSConfig | None = None, metrics: bool = False) -> None:
        """``extra`` goes into every controller's properties, ``broker_extra`` into every
        broker's, ``node_extra[id]`` into node ``id``'s alone (e.g. its prometheus.listener).
        ``dynamic``: servers find the quorum through controller.quorum.bootstrap.servers and
        the controllers are formatted with --initial-controllers, so that the voter set can
        change while it runs (KIP-853); otherwise controller.quorum.voters, a static one.
        ``client_tls``: what this object's own checks dial the controllers with (TLS listeners).
        ``metrics``: every node serves its metrics (prometheus.listener), for the console's charts."""
        self.client_tls = client_tls
        self.base_dir = Path(base_dir or tempfile.mkdtemp(prefix="kraft-dev-"))
        self.ports = {i: base_port + i - 1 for i in (1, 2, 3)}
        self.broker_ports = {101 + i: base_port + 3 + i for i in range(brokers)}
        self.kafka_ports = {101 + i: base_port + 3 + brokers + i for i in range(brokers)}
        self.bootstrap_servers = ",".join(f"127.0.0.1:{p}" for p in self.broker_ports.values())
        #: what a Kafka client (librdkafka, kafka-python, ...) takes as bootstrap.servers
        self.kafka_bootstrap_servers = ",".join(f"127.0.0.1:{p}" for p in self.kafka_ports.values())
        first_metrics = base_port + 3 + 2 * brokers
        self.metrics_ports = {nid: first_metrics + i for i, nid in enumerate([*self.ports, *self.broker_ports])} \
            if metrics else {}
        self.console: subprocess.Popen | None = None
        self._console_log_from = 0
        self.broker_extra = broker_extra or {}
        self.broker_procs: dict[int, subprocess.Popen] = {}
        self.voters = ",".join(f"{i}@127.0.0.1:{p}" for i, p in self.ports.items())
        self.bootstrap = ",".join(f"127.0.0.1:{p}" for p in self.ports.values())
        self.directory_ids = {i: new_directory_id() for i in self.ports} if dynamic else {}
        self.initial_controllers = ",".join(f"{i}@127.0.0.1:{p}:{self.directory_ids[i]}"
                                            for i, p in self.ports.items()) if dynamic else ""
        self.election_timeout_ms = election_timeout_ms
        self.session_timeout_ms = session_timeout_ms
        self.extra = extra or {}
        self.node_extra = node_extra or {}
        self.procs: dict[int, subprocess.Popen] = {}
        self.cluster_id = ""

    def quorum_props(self) -> dict[str, str]:
        """How a server finds the quorum: the static voters, or bootstrap servers (dynamic)."""
        if self.directory_ids:
            return {"controller.quorum.bootstrap.servers": self.bootstrap}
        return {"controller.quorum.voters": self.voters}

    def config_path(self, nid: int) -> Path:
        return self.base_dir / (f"controller-{nid}.properties" if nid in self.ports else f"broker-{nid}.properties")

    def write_configs(self) -> None:
        self.base_dir.mkdir(parents=True, exist_ok=True)
        for nid, port in self.ports.items():
            lines = {"node.id": str(nid), "process.roles": "controller",
                     **self.quorum_props(), "listeners": f"CONTROLLER://127.0.0.1:{port}",
                     "controller.listener.names": "CONTROLLER",
                     "metadata.log.dir": str(self.base_dir / f"controller-{nid}"),
                     "controller.quorum.election.timeout.ms": str(self.election_timeout_ms),
                     "broker.session.timeout.ms": str(self.session_timeout_ms), **self.extra,
                     **self._metrics_props(nid), **self.node_extra.get(nid, {})}
            self.config_path(nid).write_text("".join(f"{k}={v}\n" for k, v in lines.items()))
        for bid, port in self.broker_ports.items():
            lines = {"node.id": str(bid), "process.roles": "broker", **self.quorum_props(),
                     "listeners": f"PLAINTEXT://127.0.0.1:{port},KAFKA://127.0.0.1:{self.kafka_ports[bid]}",
                     "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,KAFKA:PLAINTEXT",
                     "log.dirs": str(self.base_dir / f"broker-{bid}"),
                     "broker.rack": f"rack-{'abc'[(bid - 101) % 3]}", "broker.heartbeat.interval.ms": "500",
                     **self.broker_extra, **self._metrics_props(bid), **self.node_extra.get(bid, {})}
            self.config_path(bid).write_text("".join(f"{k}={v}\n" for k, v in lines.items()))

    def _metrics_props(self, nid: int) -> dict[str, str]:
        return {"prometheus.listener": f"127.0.0.1:{self.metrics_ports[nid]}"} if nid in self.metrics_ports else {}

    def kraft(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "kraft.cli", *args], cwd=REPO, capture_output=True, text=True)

    def start(self) -> None:
        id_file = self.base_dir / "cluster.id"
        if id_file.exists():
            self.cluster_id = id_file.read_text().strip()
        else:
            self.write_configs()
            self.cluster_id = random_id()
            # every node's format at once: each is a Python start-up of its own
            formats = []
            for nid in [*self.ports, *self.broker_ports]:
                voters = ("--initial-controllers", self.initial_controllers) if self.directory_ids and nid in self.ports else ()
                formats.append(subprocess.Popen(
                    [sys.executable, "-m", "kraft.cli", "storage", "format", "--cluster-id", self.cluster_id,
                     "--config", str(self.config_path(nid)), *voters],
                    cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
            outputs = [p.communicate() for p in formats]
            for p, (out, err) in zip(formats, outputs, strict=True):
                if p.returncode != 0:
                    raise ConfigError(err.strip() or out.strip())
            id_file.write_text(self.cluster_id)
        for nid in [*self.ports, *self.broker_ports]:
            self.start_node(nid)

    def start_node(self, nid: int) -> subprocess.Popen:
        """Start controller or broker ``nid``."""
        kind = "controller" if nid in self.ports else "broker"
        log = open(self.base_dir / f"{kind}-{nid}.log", "a")
        p = subprocess.Popen([sys.executable, "-m", "kraft.cli", "server-start", str(self.config_path(nid))],
                             cwd=REPO, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        (self.procs if kind == "controller" else self.broker_procs)[nid] = p
        return p

    def kill(self, nid: int, sig: int = signal.SIGKILL) -> None:
        p = self.procs.get(nid) or self.broker_procs[nid]
        p.send_signal(sig)
        if sig in (signal.SIGKILL, signal.SIGTERM):
            p.wait(20)

    async def wait_for_leader(self, timeout: float = 30.0, among: list[int] | None = None) -> int:
        async with ControllerClient([f"127.0.0.1:{self.ports[i]}" for i in (among or self.ports)],
                                    timeout=timeout, attempt_timeout=1.0, tls=self.client_tls) as c:
            r = await c.describe_quorum(pb.DescribeQuorumRequest())
            return r.leader_id

    async def wait_for_brokers(self, timeout: float = 60.0, ids: list[int] | None = None) -> None:
        """Until the brokers are registered and unfenced."""
        want = set(ids or self.broker_ports)
        deadline = time.monotonic() + timeout
        async with ControllerClient(self.bootstrap, timeout=timeout, attempt_timeout=1.0, tls=self.client_tls) as c:
            while True:
                r = await c.describe_cluster(pb.DescribeClusterRequest())
                if want <= {b.id for b in r.brokers if not b.fenced}:
                    return
                for nid in sorted(want):  # a broker that exited will not register: say why at once
                    p = self.broker_procs.get(nid)
                    if p is not None and p.poll() is not None:
                        raise ConfigError(f"broker {nid} exited (code {p.returncode}): {self._last_line('broker', nid)}")
                if time.monotonic() > deadline:
                    raise ConfigError(f"brokers {sorted(want)} were not all unfenced within {timeout:.0f}s; "
                                      f"see the broker logs in {self.base_dir}")
                await asyncio.sleep(0.2)

    def start_console(self, listen: str) -> subprocess.Popen:
        """``kraft web`` over this quorum's controllers and brokers at ``listen`` (HOST:PORT),
        charting every node's metrics when they serve them; it logs to web.log."""
        args = ["web", "--bootstrap-controller", self.bootstrap, "--bootstrap-server", self.bootstrap_servers,
                "--listen", listen]
        if self.metrics_ports:
            args += ["--metrics", ",".join(f"127.0.0.1:{p}" for p in self.metrics_ports.values())]
        log = open(self.base_dir / "web.log", "a")
        self._console_log_from = log.tell()  # where this console's lines begin
        # a session of its own, as the servers: Ctrl-C reaches only the caller, which stops it
        self.console = subprocess.Popen([sys.executable, "-m", "kraft.cli", *args], cwd=REPO, stdout=log,
                                        stderr=subprocess.STDOUT, start_new_session=True)
        return self.console

    def wait_for_console(self, listen: str, timeout: float = 60.0) -> None:
        """Until the console holds ``listen`` (it says so once bound, exclusively: not another
        server on that port) and answers there; ConfigError, with its last line, if it exits."""
        deadline = time.monotonic() + timeout
        while True:
            if self.console is None or self.console.poll() is not None:
                raise ConfigError(f"the console stopped: {self._console_said()}")
            if "Console at " in self._console_output():
                try:
                    with urllib.request.urlopen(f"http://{listen}/", timeout=5):
                        return
                except urllib.error.HTTPError:
                    return  # it answers (a page's error is the page's to show)
                except OSError:
                    pass
            if time.monotonic() > deadline:
                raise ConfigError(f"the console did not answer at http://{listen}/ within {timeout:.0f}s; "
                                  f"see {self.base_dir}/web.log")
            time.sleep(0.2)

    def _console_output(self) -> str:
        with open(self.base_dir / "web.log", errors="replace") as f:
            f.seek(self._console_log_from)
            return f.read()

    def _console_said(self) -> str:
        """The console's last line (its one-line error), else where its log is."""
        lines = self._console_output().strip().splitlines()
        return lines[-1].removeprefix("Error: ") if lines else f"see {self.base_dir}/web.log"

    def _last_line(self, kind: str, nid: int) -> str:
        """A server's last log line (its one-line error when it stopped at start), else where its log is."""
        path = self.base_dir / f"{kind}-{nid}.log"
        try:
            lines = path.read_text(errors="replace").strip().splitlines()
        except OSError:
            lines = []
        return lines[-1].removeprefix("Error: ") if lines else f"see {path}"

    def wait(self) -> None:
        """Block until a server or the console exits (or Ctrl-C)."""
        everyone = {**self.procs, **self.broker_procs}
        while all(p.poll() is None for p in everyone.values()) and (self.console is None or self.console.poll() is None):
            time.sleep(0.5)
        if self.console is not None and self.console.poll() is not None:
            raise ConfigError(f"the console stopped: {self._console_said()}")
        dead = [n for n, p in everyone.items() if p.poll() is not None][0]
        kind = "controller" if dead in self.ports else "broker"
        raise ConfigError(f"{kind} {dead} exited; see {self.base_dir}/{kind}-{dead}.log")

    def stop(self) -> None:
        """The console first (a client), then brokers (their controlled shutdown needs the
        controllers), then controllers. Each runs in a session of its own, so nothing else
        stops them: whatever cuts this short (an exception raised into a wait, such as a
        test's timeout or a signal's handler) still has every one that is left killed."""
        try:
            if self.console is not None and self.console.poll() is None:
                self.console.terminate()
                try:
                    self.console.wait(20)
                except subprocess.TimeoutExpired:
                    self.console.kill()
                    self.console.wait()
            for group in (self.broker_procs, self.procs):
                for p in group.values():
                    if p.poll() is None:
                        p.send_signal(signal.SIGCONT)
                        p.send_signal(signal.SIGTERM)
                for p in group.values():
                    try:
                        p.wait(30)
                    except subprocess.TimeoutExpired:
                        p.kill()
                        p.wait()
        finally:
            for p in [*([self.console] if self.console is not None else []), *self.broker_procs.values(),
                      *self.procs.values()]:
                if p.poll() is None:
                    p.send_signal(signal.SIGCONT)
                    p.kill()
                    p.wait()
