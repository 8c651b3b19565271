import os
import sys
import tempfile
from pathlib import Path

import pytest

from tests.kvcluster import KVCluster
from tests.logs import assert_no_tracebacks


def _share_bytecode() -> None:
    """Every server and tool the tests start is a Python process of its own (nine for a
    cluster); with PYTHONDONTWRITEBYTECODE set, as in these machines' environment, each
    compiled the standard library, the dependencies and this project from source again:
    ~0.5 s more CPU per server start, ~3.5 s per cluster. The test run and its processes
    keep compiled modules in one cache outside the source tree instead (PYTHONPYCACHEPREFIX,
    unless set)."""
    prefix = os.environ.setdefault("PYTHONPYCACHEPREFIX",
                                   str(Path(tempfile.gettempdir()) / f"pykraft-pycache-{os.getuid()}"))
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    sys.pycache_prefix, sys.dont_write_bytecode = prefix, False


_share_bytecode()


@pytest.fixture
def kv_cluster(tmp_path):
    """A factory of `raft-kv` process clusters, all torn down after the test."""
    made = []

    def make(n=3, **kw):
        c = KVCluster(tmp_path, n, **kw)
        made.append(c)
        return c
    yield make
    for c in made:
        c.close()
    assert_no_tracebacks(tmp_path)
