"""bench.spark_topics' CPU accounting, without Spark: the executors' CPU is the figure issue 31
item 4 compares with our consumer's, so a process that exits during a count must not take
its CPU with it."""
from __future__ import annotations

import subprocess
import sys

from bench.spark_topics import TreeCPU, _processes, _tree

BURN = "import time\nwhile time.process_time() < 0.6: pass\n"
# M starts W, which burns 0.6 s of CPU and exits; M leaves it unreaped and exits itself, so W
# is reaped outside the tree (as a Python worker whose daemon dies is): R reaps M and says so.
MIDDLE = f"import subprocess, sys, os, time\nw = subprocess.Popen([sys.executable, '-c', {BURN!r}])\n" \
         "while open(f'/proc/{w.pid}/stat').read().rsplit(')', 1)[1].split()[0] != 'Z': time.sleep(0.05)\n" \
         "os._exit(0)\n"
ROOT = f"import subprocess, sys\nsubprocess.Popen([sys.executable, '-c', {MIDDLE!r}]).wait()\n" \
       "print('reaped', flush=True)\nsys.stdin.read()\n"


def test_the_cpu_of_a_process_that_exits_during_a_count_is_counted() -> None:
    root = subprocess.Popen([sys.executable, "-c", ROOT], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        sampled = TreeCPU(lambda: [root.pid], include_roots=False, interval=0.05)
        before = sum(cpu for _, cpu, _ in _tree(_processes(), [root.pid], False).values())
        sampled.start()
        assert root.stdout is not None and root.stdout.readline() == "reaped\n"
        used = sampled.stop()
        after = sum(cpu for _, cpu, _ in _tree(_processes(), [root.pid], False).values())
    finally:
        root.communicate("")
    assert after - before < 0.3  # the tree's CPU at both ends, reaped children's included, lost W's
    assert used["total"] >= 0.4 and used["python"] == used["total"] and used["jvm"] == 0.0
