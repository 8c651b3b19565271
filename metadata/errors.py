"""The exception that carries one of Kafka's error codes back to a controller client. The
codes are the one enum in ``clients.errors``, re-exported here for the controller's modules."""
from __future__ import annotations

from clients.errors import ErrorCode, capped

__all__ = ["ApiError", "ErrorCode", "capped"]


class ApiError(Exception):
    """A request cannot be carried out; ``code`` is what the response carries, ``message`` one
    line of at most ``clients.errors.MAX_MESSAGE_CHARS`` whatever names it echoes."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        self.code = code
        self.message = capped(message)
        super().__init__(f"{code.name}: {self.message}")
