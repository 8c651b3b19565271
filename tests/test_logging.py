"""Server logs carry no tracebacks: what gRPC's core logs with one (here an answer to a client
that had gone away while the controller was stopped, seen in test_hung_controller) is one line
in every server process (controller and combined nodes, brokers, raft-kv)."""
from __future__ import annotations

import io
import logging
from collections.abc import Callable

from raft.transport import grpc_errors_in_one_line


def _core_logged(log: Callable[[logging.Logger], None]) -> str:
    """What gRPC's core logger writes for ``log(core)`` once the filter is installed."""
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    core = logging.getLogger("grpc._cython.cygrpc")
    core.addHandler(handler)
    try:
        grpc_errors_in_one_line()
        log(core)
    finally:
        core.removeHandler(handler)
    return out.getvalue()


def test_grpc_core_errors_are_logged_in_one_line():
    def log(core: logging.Logger) -> None:
        try:
            raise RuntimeError('Failed "execute_batch": (SendInitialMetadataOperation, ...)')
        except RuntimeError:
            core.error("ExecuteBatchError raised in core by servicer method [%s]", "/kraft.controller.Controller/Fetch",
                       exc_info=True)
    text = _core_logged(log)
    assert "Traceback" not in text and text.count("\n") == 1
    assert "servicer method [/kraft.controller.Controller/Fetch]: Failed \"execute_batch\"" in text


def test_a_traceback_written_into_the_message_is_folded_too():
    """Seen in a controller's log as a peer's Send stream was cancelled: gRPC wrote the
    traceback into the message itself."""
    text = _core_logged(lambda core: core.error(
        "Exception not handled by _handle_exceptions in servicer method [%s]: \n%s", "/kraft.raft.RaftPeer/Send",
        'Traceback (most recent call last):\n  File "src/python/grpcio/grpc/_cython/_cygrpc/aio/server.pyx.pxi", '
        'line 812, in _schedule_rpc_coro\nasyncio.exceptions.CancelledError\n'))
    assert text == ("Exception not handled by _handle_exceptions in servicer method "
                    "[/kraft.raft.RaftPeer/Send]: asyncio.exceptions.CancelledError\n")


def test_every_server_entry_point_installs_it():
    import inspect

    import brokerd.main
    import kraft.cli.servers
    import raft.examples.kv.cli
    for module in (kraft.cli.servers, brokerd.main, raft.examples.kv.cli):
        assert "grpc_errors_in_one_line()" in inspect.getsource(module), module.__name__


def test_the_handlers_fold_any_grpc_loggers_traceback():
    """The root logger's handlers fold what any ``grpc*`` logger sends them (a CancelledError
    traceback from a Send stream reached a controller's log once, past the logger's filter);
    other loggers' records pass unchanged."""
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        grpc_errors_in_one_line()
        try:
            raise RuntimeError("boom")
        except RuntimeError:
            logging.getLogger("grpc.aio._server").error("stream ended", exc_info=True)
        logging.getLogger("kraft.test").warning("plain line")
    finally:
        root.removeHandler(handler)
    assert out.getvalue() == "stream ended: boom\nplain line\n"
