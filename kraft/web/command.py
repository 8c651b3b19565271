"""``kraft web``: serve the console (docs/web.md) on an address of its own, bound exclusively
(a second console on the same port stops at once, as every listener of the project does)."""
from __future__ import annotations

import asyncio
import errno
import socket

import click

from common.host_ports import host_ports
from kraft.cli.invocation import command_config_option, command_tls, fail


def bind(listen: str) -> socket.socket:
    """A listening socket on HOST:PORT, not shared (no SO_REUSEPORT); one line when taken."""
    host, _, port = listen.rpartition(":")
    try:
        number = int(port)
        if not 0 <= number <= 65535:
            raise ValueError(number)
    except ValueError:
        fail(f"--listen {listen!r}: expected HOST:PORT with a port from 0 to 65535, e.g. 127.0.0.1:8080")
    family = socket.AF_INET6 if ":" in host.strip("[]") else socket.AF_INET
    s = socket.socket(family, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        s.bind((host.strip("[]"), number))
    except OSError as e:
        s.close()
        why = "the address is already in use" if e.errno == errno.EADDRINUSE else e.strerror
        fail(f"cannot listen on {listen}: {why}")
    s.listen(128)
    return s


@click.command("web")
@click.option("--bootstrap-controller", required=True, envvar="KRAFT_BOOTSTRAP_CONTROLLER",
              help="HOST:PORT[,HOST:PORT...] of any controllers")
@click.option("--bootstrap-server", required=True, help="HOST:PORT[,HOST:PORT...] of any brokers (gRPC listeners)")
@click.option("--listen", default="127.0.0.1:8080", show_default=True, help="HOST:PORT the console serves on")
@click.option("--read-only", is_flag=True,
              help="show, never change: no form that changes the cluster, and 403 for such requests")
@click.option("--metrics", default=None, metavar="HOST:PORT[,HOST:PORT...]",
              help="the nodes' Prometheus endpoints (prometheus.listener) to chart live")
@click.option("--auth-file", default=None, metavar="FILE",
              help="USER:PASSWORD lines: the console asks for one of them (HTTP basic auth)")
@command_config_option
def web(bootstrap_controller: str, bootstrap_server: str, listen: str, read_only: bool, metrics: str | None,
        auth_file: str | None) -> None:
    """Serve a web console for the cluster (docs/web.md)."""
    import logging

    import uvicorn

    from .app import create_app
    from .auth import AuthFileError, read_auth_file
    from .cluster import Cluster

    try:
        endpoints = host_ports(metrics) if metrics else None
    except ValueError as e:
        fail(f"--metrics: {str(e)!r} is not HOST:PORT; give the nodes' prometheus.listener addresses, e.g. "
             "127.0.0.1:9404,127.0.0.1:9405")
    try:
        users = read_auth_file(auth_file) if auth_file else None
    except AuthFileError as e:
        fail(f"--auth-file {e}")
    sock = bind(listen)
    app = create_app(Cluster(bootstrap_controller, bootstrap_server, command_tls()), read_only=read_only,
                     metrics=endpoints, users=users)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    click.echo(f"Console at http://{listen}/ (Ctrl-C stops it)", err=True)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    try:
        asyncio.run(server.serve(sockets=[sock]))
    except KeyboardInterrupt:
        pass
