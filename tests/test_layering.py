"""The package layering (README, "Code map"), checked from the source: every import between the
top-level packages points down, and no two modules import each other at load time.

    kraft      composes processes and tools          -> brokerd, clients, metadata, raft, protos
    brokerd    the brokers                           -> clients, metadata, raft, protos
    metadata   the controller quorum and its tools   -> clients (error codes), raft, protos
    clients    producer, consumer, console tools     -> protos (and the record format it owns), raft
                                                        (TLSConfig and gRPC dialling, raft.transport)
    raft       the embeddable Raft library           -> nothing (its wire is raft/proto; its
                                                        example service raft/examples/kv)
    bench      benchmarks (not installed)            -> anything above, never tests
"""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ALLOWED = {
    "protos": set(),
    "raft": set(),
    "metadata": {"clients", "raft", "protos"},
    "clients": {"protos", "raft"},
    "brokerd": {"clients", "metadata", "raft", "protos"},
    "kraft": {"brokerd", "clients", "metadata", "raft", "protos"},
    "bench": {"kraft", "brokerd", "clients", "metadata", "raft", "protos"},
}


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
