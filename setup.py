"""Generates the protobuf/gRPC modules from protos/*.proto, raft/proto/*.proto and
raft/examples/kv/*.proto whenever a wheel is built.

The generated *_pb2*.py files are build products (see .gitignore), never edited by hand.
"""
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py


def generate_protos() -> None:
    from grpc_tools import protoc  # build-time requirement, see pyproject.toml

    root = Path(__file__).parent
    import grpc_tools

    include = Path(grpc_tools.__file__).parent / "_proto"
    for proto in sorted([*(root / "protos").glob("*.proto"), *(root / "raft" / "proto").glob("*.proto"),
                         *(root / "raft" / "examples" / "kv").glob("*.proto")]):
        rc = protoc.main([
            "protoc", f"-I{root}", f"-I{include}",
            f"--python_out={root}", f"--grpc_python_out={root}", f"--pyi_out={root}",
            str(proto.relative_to(root)),
        ])
        if rc != 0:
            raise SystemExit(f"protoc failed on {proto}")


class BuildWithProtos(build_py):
    def run(self) -> None:
        generate_protos()
        super().run()


setup(cmdclass={"build_py": BuildWithProtos})
