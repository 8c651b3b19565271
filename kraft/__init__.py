"""The composition layer: what runs processes and mounts tools, above both ``metadata`` (the
controller quorum) and ``brokerd`` (the brokers). ``kraft.cli`` is the ``kraft`` command, a module per tool group
(``server-start`` for either role, topics, quorum, cluster, console producer and consumer,
analytics, dump-log); ``kraft.dev_quorum`` runs a local quorum of processes; ``kraft.demo``
is the main job. Nothing below imports it (tests/test_layering.py)."""

import os as _os
import sys as _sys

# gRPC's core writes each failed connection (a refused TLS handshake) to stderr at INFO, before
# any import of grpc can change it. A tool reports the failure in its own one line, so its core
# stays quiet; a server keeps those lines, so an operator sees what its listeners refused.
if _sys.argv[1:2] != ["server-start"]:
    _os.environ.setdefault("GRPC_VERBOSITY", "ERROR")
