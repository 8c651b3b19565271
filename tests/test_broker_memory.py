"""The broker process keeps the buffers it frees (brokerd/memory.py): a Fetch answer of 1 MiB
built and serialized as the gRPC service does, over and over, faults in a few pages per
answer instead of every page of every buffer afresh."""
from __future__ import annotations

import subprocess
import sys

from bench.common import REPO

ANSWERS = """
import os, resource, sys
from protos import broker_pb2 as pb
if sys.argv[1] == "kept":
    from brokerd.memory import keep_freed_memory
    assert keep_freed_memory()
frames = [os.urandom(256 << 10) for _ in range(4)]
def answer() -> bytes:
    m = pb.FetchResponse()
    m.topics.add().partitions.add().records = b"".join(frames)
    return m.SerializeToString()
answer()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(50):
    answer()
print((resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 50)
"""


def _faults_per_answer(mode: str) -> float:
    out = subprocess.run([sys.executable, "-c", ANSWERS, mode], cwd=REPO, capture_output=True, text=True,
                         check=True, timeout=60)
    return float(out.stdout)


def test_a_brokers_freed_buffers_are_kept_for_the_next_answer() -> None:
    # 1 MiB of records is 256 pages; each answer holds about three copies of them at once.
    assert _faults_per_answer("default") > 256  # glibc's defaults: every page faulted in again
    assert _faults_per_answer("kept") < 32
