"""The store's state machine: a dict of bytes, changed only by committed commands."""
from __future__ import annotations

import struct
from typing import BinaryIO, Callable

from raft.examples.kv import kv_pb2 as pb
from raft.messages import Entry

_PAIR = struct.Struct(">II")


class KVStateMachine:
    def __init__(self) -> None:
        self.data: dict[bytes, bytes] = {}
        self.index = 0

    def apply(self, entry: Entry) -> object:
        """Returns PutResponse, DeleteResponse or CasResponse for the proposer."""
        self.index = index = entry.index
        cmd = pb.Command.FromString(entry.data)
        op = cmd.WhichOneof("op")
        if op == "put":
            self.data[cmd.put.key] = cmd.put.value
            return pb.PutResponse(index=index)
        if op == "delete":
            return pb.DeleteResponse(deleted=self.data.pop(cmd.delete.key, None) is not None, index=index)
        if op == "cas":
            c = cmd.cas
            current = self.data.get(c.key)
            ok = current is None if c.expect_absent else current == c.expected
            if ok:
                self.data[c.key] = c.value
            return pb.CasResponse(succeeded=ok, found=current is not None, current=current or b"", index=index)
        raise ValueError("empty command")

    def snapshot(self) -> Callable[[BinaryIO], None]:
        frozen = dict(self.data)  # a shallow copy: values are immutable bytes

        def write(f: BinaryIO) -> None:
            buf = []
            for k, v in frozen.items():
                buf.append(_PAIR.pack(len(k), len(v)) + k + v)
                if len(buf) >= 4096:
                    f.write(b"".join(buf))
                    buf.clear()
            f.write(b"".join(buf))
        return write

    def restore(self, source: BinaryIO) -> None:
        raw = source.read()
        data, off = {}, 0
        while off < len(raw):
            kl, vl = _PAIR.unpack_from(raw, off)
            off += _PAIR.size
            data[raw[off:off + kl]] = raw[off + kl:off + kl + vl]
            off += kl + vl
        self.data = data
