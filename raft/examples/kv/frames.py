"""Messages queued for one direction of a KV stream, in frames of about ``MAX_FRAME_BYTES``.

Each side of ``KVStream.Session`` writes whatever queued while its previous write was under
way; capped frames keep that below the channels' message limits however much queues (1,024
requests of 1 MiB values would otherwise make one frame of 1 GiB)."""
from __future__ import annotations

from collections import deque
from typing import Generic, Iterator, TypeVar

from google.protobuf.message import Message

#: A frame takes messages until it holds this many bytes, so it stays under about twice this
#: (a message is at most a key and a 1 MiB value); the channels refuse 16 MiB and more.
MAX_FRAME_BYTES = 1 << 20

F = TypeVar("F", bound=Message)


class FrameQueue(Generic[F]):
    """Frames of ``frame_type`` whose repeated field ``field`` takes the messages pushed."""

    def __init__(self, frame_type: type[F], field: str) -> None:
        self._type, self._field = frame_type, field
        self._frames: deque[F] = deque()
        self._last_bytes = 0  # in the last frame, the one still taking messages

    def push(self, message: Message) -> None:
        if not self._frames or self._last_bytes >= MAX_FRAME_BYTES:
            self._frames.append(self._type())
            self._last_bytes = 0
        getattr(self._frames[-1], self._field).append(message)
        self._last_bytes += message.ByteSize()

    def pop(self) -> F:
        """The oldest frame (there must be one)."""
        return self._frames.popleft()

    def __bool__(self) -> bool:
        return bool(self._frames)

    def __iter__(self) -> Iterator[Message]:
        for frame in self._frames:
            yield from getattr(frame, self._field)

    def remove(self, request_id: int) -> bool:
        """Take out the queued message with ``id`` ``request_id``; whether it was there."""
        for frame in self._frames:
            messages = getattr(frame, self._field)
            for i, m in enumerate(messages):
                if m.id == request_id:
                    del messages[i]
                    return True
        return False
