import pytest

from tests.kvcluster import KVCluster
from tests.logs import assert_no_tracebacks


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
