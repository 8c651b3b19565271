"""The ``kraft`` command is a package (kraft/cli/): the group and its start-up in __init__, each
tool group in a module of its own. What ``kraft --help`` loads stays what it was before the
split (bench/cli_startup.py times it): the tool modules, click and the controller's messages,
and none of the project's packages under them nor the MOUNTED commands' modules."""
from __future__ import annotations

import subprocess
import sys

from kraft.cli import MOUNTED
from tests.brokercluster import REPO

BELOW = {"metadata", "brokerd", "clients", "raft", "common", "grpc", "kio", "rocksdict"}


def test_kraft_help_loads_no_package_below_the_tools():
    code = ("import sys\nfrom kraft.cli import main\n"
            "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
            "print(' '.join(sorted(sys.modules)))")
    p = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    loaded = set(p.stdout.split("\n")[-2].split())
    assert not {m.split(".")[0] for m in loaded} & BELOW, sorted(m for m in loaded if m.split(".")[0] in BELOW)
    mounted = {module for module, _, _ in MOUNTED.values()}
    assert not loaded & mounted, loaded & mounted
    assert "Commands:" in p.stdout and "server-start" in p.stdout
