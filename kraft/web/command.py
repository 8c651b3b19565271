"""``kraft web``: serve the console (docs/web.md) on an address of its own, bound exclusively
(a second console on the same port stops at once, as every listener of the project does),
over https with ``--listen-config`` (and then with client certificates if it asks for them)."""
from __future__ import annotations

import asyncio
import errno
import socket
import ssl

import click

from common.config_def import ConfigError
from common.host_ports import host_ports
from common.tls import ssl_context
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


def listen_tls(path: str) -> ssl.SSLContext:
    """The console's own TLS from a properties file with the keys of a broker's SSL listener
    (``ssl.keystore.location``, ``ssl.truststore.location``, ``ssl.client.auth``), read and
    checked by the code the brokers use: a wrong file is one line before the console starts."""
    from clients.config import read_config_file
    from clients.security import listener_security
    try:
        security = listener_security({**read_config_file(path), "listener.security.protocol.map": "CONSOLE:SSL"},
                                     "CONSOLE")
    except ConfigError as e:
        fail(f"--listen-config {path}: {e}")
    assert security.tls is not None  # an SSL listener always has its material
    return ssl_context(security.tls, server=True, client_auth=security.client_auth)


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
@click.option("--listen-config", default=None, metavar="FILE",
              help="serve https: ssl.keystore.location, and ssl.truststore.location with ssl.client.auth=required "
                   "for client certificates (a broker's SSL listener's keys)")
@command_config_option
def web(bootstrap_controller: str, bootstrap_server: str, listen: str, read_only: bool, metrics: str | None,
        auth_file: str | None, listen_config: str | None) -> None:
    """Serve a web console for the cluster (docs/web.md)."""
    import logging

    import uvicorn

    from .app import create_app
    from .lag import SAMPLE_EVERY_S
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
    serving = listen_tls(listen_config) if listen_config else None
    sock = bind(listen)
    app = create_app(Cluster(bootstrap_controller, bootstrap_server, command_tls()), read_only=read_only,
                     metrics=endpoints, users=users, lag_every=SAMPLE_EVERY_S)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    click.echo(f"Console at {'https' if serving else 'http'}://{listen}/ (Ctrl-C stops it)", err=True)
    # A browser's idle https connections close only after their TLS shutdown (close_notify),
    # which an idle browser may never answer: Ctrl-C waits for them 5 s at most.
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on", timeout_graceful_shutdown=5,
                                           ssl_context_factory=(lambda _config, _default: serving) if serving else None))
    try:
        asyncio.run(server.serve(sockets=[sock]))
    except KeyboardInterrupt:
        pass
