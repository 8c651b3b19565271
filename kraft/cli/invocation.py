"""What every ``kraft`` tool command shares: failing in one line, running its coroutine, the
``--command-config`` TLS of the invocation, a client of the controller quorum, and the options
of the command groups that talk to it."""
from __future__ import annotations

import re
import sys
from typing import TYPE_CHECKING, Any, Awaitable, Callable

import click

# The rest is imported by the commands that use it: `kraft --help` and a command's own work
# then pay for nothing else (issue 25 item 9, bench/cli_startup.py).
if TYPE_CHECKING:
    from common.tls import TLSConfig
    from metadata.client import ControllerClient


def fail(message: str) -> None:
    click.echo(f"Error: {message}", err=True)
    sys.exit(1)


def run(coro: Awaitable[Any]) -> Any:
    import asyncio

    from common.config_def import ConfigError
    from common.errors import KafkaError
    from raft.errors import RaftError
    try:
        return asyncio.run(coro)  # type: ignore[arg-type]
    except (KafkaError, ConfigError, RaftError) as e:  # KafkaError: the controller's, or a rule checked here
        fail(str(e))
    except KeyboardInterrupt:
        sys.exit(130)


TLS_KEY = "kraft.tls"


def _load_command_config(ctx: click.Context, _param: click.Parameter, path: str | None) -> None:
    """``--command-config FILE``, on a group or a command: the client's ``security.protocol``
    and ``ssl.*`` keys (clients/security.py), kept in the invocation's ``ctx.meta`` so every
    command under it connects with them."""
    if path:
        from clients.cluster_view import CLIENT_ERRORS
        from clients.config import tools_tls
        try:
            ctx.meta[TLS_KEY] = tools_tls(path)
        except CLIENT_ERRORS as e:
            fail(str(e))


command_config_option = click.option(
    "--command-config", type=click.Path(exists=True, dir_okay=False), expose_value=False, is_eager=True,
    callback=_load_command_config, help="properties file with the client's security.protocol and ssl.* keys")


def command_tls() -> TLSConfig | None:
    """The TLS of this invocation's ``--command-config`` (None: plaintext)."""
    ctx = click.get_current_context(silent=True)
    return ctx.meta.get(TLS_KEY) if ctx is not None else None


def with_client(bootstrap: str, timeout: float, work: Callable[[ControllerClient], Awaitable[Any]]) -> Any:
    """``work`` with a client of the quorum at ``bootstrap``, which gives up at once when no
    address accepts a connection; one that turns out to be a broker's Kafka listener is named."""
    from common.errors import ErrorCode, KafkaError
    from metadata.client import ControllerClient
    from raft.client import CLOSED_DURING_SETUP

    async def go() -> Any:
        async with ControllerClient(bootstrap, timeout=timeout, tls=command_tls(),
                                    give_up_unconnectable=True) as client:
            try:
                return await work(client)
            except KafkaError as e:
                if e.code != ErrorCode.NETWORK_EXCEPTION or CLOSED_DURING_SETUP not in e.message:
                    raise  # only a listener that closed the connection may speak another protocol
                from clients.listener_probe import speaks_kafka
                kafka = [a for a in client.endpoints if await speaks_kafka(a, timeout_s=1.0)]
                if kafka:
                    raise KafkaError(ErrorCode.INVALID_REQUEST, f"{','.join(kafka)} is a broker's Kafka listener, "
                                          f"not a controller's: give --bootstrap-controller the controllers' "
                                          f"listener, as in controller.quorum.voters") from None
                raise
    return run(go())


bootstrap_option = click.option("--bootstrap-controller", "bootstrap", required=True, envvar="KRAFT_BOOTSTRAP_CONTROLLER",
                                help="HOST:PORT[,HOST:PORT...] of any controllers")
timeout_option = click.option("--command-timeout", "timeout", type=float, default=30.0, show_default=True,
                              help="seconds to keep retrying while no active controller answers")


def controller_group(fn: Callable[[], None]) -> click.Group:
    """A ``kraft`` command group that talks to the controller quorum, named and documented
    by ``fn``: its commands get (bootstrap, timeout) as their context object."""
    @click.group(name=fn.__name__, help=fn.__doc__)
    @bootstrap_option
    @timeout_option
    @command_config_option
    @click.pass_context
    def group(ctx: click.Context, bootstrap: str, timeout: float) -> None:
        ctx.obj = (bootstrap, timeout)
    return group


def check_error(code: int, message: str, what: str) -> None:
    """One line with the Kafka error name of a per-item error code (``what`` when no message)."""
    from common.errors import ErrorCode
    c = ErrorCode.of(code)
    if c != ErrorCode.NONE:
        fail(f"{c.name}: {message or what}")


def parse_configs(pairs: tuple[str, ...]) -> dict[str, str]:
    """``KEY=VALUE[,KEY=VALUE...]`` options (topics create --config, configs --add-config); a
    list value is bracketed, as kafka-configs.sh takes it: ``cleanup.policy=[compact,delete]``."""
    out = {}
    for p in pairs:
        for item in re.split(r",(?![^\[]*\])", p):  # the commas outside brackets
            if "=" not in item:
                fail(f"bad config {item!r}: expected KEY=VALUE")
            k, v = item.split("=", 1)
            v = v.strip()
            out[k.strip()] = v[1:-1] if v.startswith("[") and v.endswith("]") else v
    return out
