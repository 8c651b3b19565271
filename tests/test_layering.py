"""The package layering (README, "Code map"), checked from the source: every import between the
top-level packages points down, and no two modules import each other at load time.

    kraft      composes processes and tools          -> brokerd, clients, metadata, raft, protos, common
    brokerd    the brokers                           -> clients, metadata, raft, protos, common
    metadata   the controller quorum and its tools   -> clients, raft, protos, common
    clients    producer, consumer, console tools     -> protos (and the record format it owns), raft
                                                        (the leader-finding client), common
    raft       the embeddable Raft library           -> common (its wire is raft/proto; its
                                                        example service raft/examples/kv)
    common     the floor: error codes, properties,   -> nothing of the project, and only the
               TLS settings and dialling, host:port     standard library and grpcio (prometheus-
               lists, the configuration table,          client in common.metrics alone), since
               metrics                                  the Raft library's base install uses it
    bench      benchmarks (not installed)            -> anything above, never tests

Raft imports the floor rather than keeping TLS settings of its own: one home for TLSConfig
(common.tls), and pyproject installs common with raft in the base install.
"""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ALLOWED = {
    "common": set(),
    "protos": set(),
    "raft": {"common"},
    "metadata": {"clients", "raft", "protos", "common"},
    "clients": {"protos", "raft", "common"},
    "brokerd": {"clients", "metadata", "raft", "protos", "common"},
    "kraft": {"brokerd", "clients", "metadata", "raft", "protos", "common"},
    "bench": {"kraft", "brokerd", "clients", "metadata", "raft", "protos", "common"},
}
#: What the floor may import besides the standard library: what the base install has.
FLOOR_DEPENDENCIES = {"grpc"}
#: ... and the one module that needs a server dependency.
FLOOR_EXCEPTIONS = {"common.metrics": {"prometheus_client"}}


def _module(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, *, top_level_only: bool) -> set[str]:
    """Absolute names of the modules ``path`` imports (at load time only, if asked)."""
    tree = ast.parse(path.read_text(), str(path))
    package = _module(path) if path.name == "__init__.py" else _module(path).rpartition(".")[0]
    nodes = tree.body if top_level_only else list(ast.walk(tree))
    out: set[str] = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - node.level + 1]
                name = ".".join(base + ([node.module] if node.module else []))
            else:
                name = node.module or ""
            out.add(name)
            out |= {f"{name}.{a.name}" for a in node.names}  # "from pkg import module"
    return out


def _sources() -> dict[str, Path]:
    return {_module(p): p for top in ALLOWED for p in (ROOT / top).rglob("*.py")
            if "_pb2" not in p.name}


def test_imports_between_packages_point_down():
    wrong = []
    for module, path in sorted(_sources().items()):
        top = module.split(".")[0]
        for name in _imports(path, top_level_only=False):
            other = name.split(".")[0]
            if other in ALLOWED and other != top and other not in ALLOWED[top]:
                wrong.append(f"{module} imports {name}")
            if other == "tests":
                wrong.append(f"{module} imports {name}")
    assert not wrong, "\n".join(wrong)


def test_no_import_cycles_between_modules():
    sources = _sources()
    graph = {m: {n for n in _imports(p, top_level_only=True)  # a module's own packages load first anyway
                 if n in sources and n != m and not m.startswith(n + ".")}
             for m, p in sources.items()}
    cycles = sorted({" <-> ".join(sorted((a, b))) for a, deps in graph.items() for b in deps
                     if a in graph.get(b, ())})
    assert not cycles, "\n".join(cycles)


def test_the_floor_needs_only_the_standard_library_and_grpc():
    wrong = []
    for module, path in sorted(_sources().items()):
        if module.split(".")[0] != "common":
            continue
        allowed = FLOOR_DEPENDENCIES | FLOOR_EXCEPTIONS.get(module, set())
        for name in _imports(path, top_level_only=False):
            top = name.split(".")[0]
            if top not in sys.stdlib_module_names and top != "common" and top not in allowed and top != "__future__":
                wrong.append(f"{module} imports {name}")
    assert not wrong, "\n".join(wrong)


def test_the_base_install_packages_the_floor():
    """raft imports common, so pyproject's package list installs common too."""
    text = (ROOT / "pyproject.toml").read_text()
    include = next(line for line in text.splitlines() if line.startswith("include = "))
    assert '"common*"' in include and '"raft*"' in include


def test_the_raft_library_loads_without_the_server_dependencies():
    """What the base install has is enough for raft and the floor under it (common.metrics loads
    prometheus-client only when a server makes its registry)."""
    code = ("import sys, raft.node, raft.client, raft.admin, common.properties, common.host_ports, "
            "common.config_docs, common.metrics\n"
            "loaded = sorted({m.split('.')[0] for m in sys.modules} & {'prometheus_client', 'cryptography', "
            "'rocksdict', 'click', 'kio', 'clients', 'metadata', 'brokerd', 'kraft'})\n"
            "assert not loaded, loaded")
    p = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
