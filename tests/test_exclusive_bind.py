"""Every listener binds its port exclusively (issue 25 item 2): a server whose port another
server already listens on stops at once with one line naming the address, even when that other
server allows sharing the port (SO_REUSEPORT, as grpcio's servers do by default), instead of
starting and splitting the clients between two clusters."""
from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.brokercluster import REPO
from tests.kvcluster import consecutive_ports

CLUSTER_ID = "MkU3OEVBNTcwNTJENDM2Qk"


def _shared_listener() -> tuple[socket.socket, int]:
    """A socket listening on a free port that allows others to share it, like a gRPC server."""
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    s.bind(("127.0.0.1", 0))
    s.listen()
    return s, s.getsockname()[1]


@pytest.mark.parametrize("taken", ["controller", "broker gRPC", "broker Kafka", "metrics"])
def test_a_port_in_use_stops_the_server_with_one_line(tmp_path: Path, taken: str):
    occupant, port = _shared_listener()
    try:
        first = consecutive_ports(3)
        controller, grpc_port, kafka_port = first, first + 1, first + 2
        role = "controller" if taken == "controller" else "broker"
        ports = {"controller": controller, "broker gRPC": grpc_port, "broker Kafka": kafka_port, "metrics": 0}
        ports[taken] = port
        listeners = (f"CONTROLLER://127.0.0.1:{ports['controller']}" if role == "controller" else
                     f"PLAINTEXT://127.0.0.1:{ports['broker gRPC']},KAFKA://127.0.0.1:{ports['broker Kafka']}")
        props = tmp_path / "server.properties"
        props.write_text(f"node.id=1\nprocess.roles={role}\ncontroller.quorum.voters=1@127.0.0.1:{ports['controller']}\n"
                         f"listeners={listeners}\nlog.dirs={tmp_path / 'data'}\nmetadata.log.dir={tmp_path / 'meta'}\n"
                         + (f"prometheus.listener=127.0.0.1:{port}\n" if taken == "metrics" else ""))
        kraft = [sys.executable, "-m", "kraft.cli"]
        fmt = subprocess.run([*kraft, "storage", "format", "--cluster-id", CLUSTER_ID, "--config", str(props)],
                             cwd=REPO, capture_output=True, text=True, timeout=60)
        assert fmt.returncode == 0, fmt.stderr
        server = subprocess.Popen([*kraft, "server-start", str(props)], cwd=REPO, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True)
        try:
            _, err = server.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.communicate()
            raise AssertionError(f"the server started on 127.0.0.1:{port}, which another server listens on") from None
        lines = err.strip().splitlines()
        assert server.returncode == 1 and len(lines) == 1, err
        assert lines[0].startswith("Error: cannot listen on 127.0.0.1:%d" % port), err
    finally:
        occupant.close()
