"""The store's state machine: a dict of bytes, changed only by committed commands."""
from __future__ import annotations

import struct
from typing import BinaryIO, Callable

from raft.examples.kv import kv_pb2 as pb
from raft.messages import Entry
from raft.state_machine import StateMachine

_PAIR = struct.Struct(">II")


class KVStateMachine(StateMachine):
    def __init__(self) -> None:
        self.data: dict[bytes, bytes] = {}
        self.index = 0

    def apply(self, entry: Entry) -> object:
        """Returns PutResponse, DeleteResponse or CasResponse for the proposer; for a Batch
        (the stream's writes of one loop turn), the list of them, in order."""
        self.index = entry.index
        cmd = pb.Command.FromString(entry.data)
        if cmd.WhichOneof("op") == "batch":
            return [self._one(c, entry.index) for c in cmd.batch.commands]
        return self._one(cmd, entry.index)

    def _one(self, cmd: pb.Command, index: int) -> object:
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
        raise ValueError(f"not a command of one write: {op or 'empty'}")

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

    def prepare_restore(self, source: BinaryIO) -> Callable[[], None]:
        """Decoded in the node's worker thread; only the swap runs on the event loop."""
        raw = source.read()
        data, off = {}, 0
        while off < len(raw):
            kl, vl = _PAIR.unpack_from(raw, off)
            off += _PAIR.size
            data[raw[off:off + kl]] = raw[off + kl:off + kl + vl]
            off += kl + vl

        def swap() -> None:
            self.data = data
        return swap

    def restore(self, source: BinaryIO) -> None:
        self.prepare_restore(source)()
