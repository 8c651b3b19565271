"""Who may use the console: with ``kraft web --auth-file FILE``, every request (pages, forms,
the stylesheet) must carry HTTP basic credentials of one of the file's users; without it,
anyone who reaches the listen address may (it is 127.0.0.1 by default). The cluster does
not see these users: the console acts on it as its own principal (``--command-config``)."""
from __future__ import annotations

import base64
import binascii
import hmac

from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

REALM = "kraft console"


class AuthFileError(Exception):
    """The auth file cannot be used; the message names the file and line."""


def read_auth_file(path: str) -> dict[str, str]:
    """``USER:PASSWORD`` lines (blank lines and ``#`` comments skipped) as {user: password}."""
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError as e:
        raise AuthFileError(f"{path}: {e.strerror}") from None
    users: dict[str, str] = {}
    for number, line in enumerate(lines, 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        user, sep, password = line.partition(":")
        if not sep or not user.strip() or not password:
            raise AuthFileError(f"{path}:{number}: expected USER:PASSWORD")
        users[user.strip()] = password
    if not users:
        raise AuthFileError(f"{path}: no USER:PASSWORD line")
    return users


def _credentials(header: str | None) -> tuple[str, str] | None:
    scheme, _, encoded = (header or "").partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        user, sep, password = base64.b64decode(encoded, validate=True).decode("utf-8").partition(":")
    except (binascii.Error, UnicodeDecodeError):
        return None
    return (user, password) if sep else None


class BasicAuth:
    """Refuse (401, asking for credentials) every request without a user's right password."""

    def __init__(self, app: ASGIApp, users: dict[str, str]) -> None:
        self.app = app
        self.users = {u: p.encode() for u, p in users.items()}

    def allowed(self, request: Request) -> bool:
        given = _credentials(request.headers.get("authorization"))
        if given is None:
            return False
        expected = self.users.get(given[0])
        # compared in constant time, and a wrong user costs as much as a wrong password
        return hmac.compare_digest(expected or b"\0" * 32, given[1].encode()) and expected is not None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and not self.allowed(Request(scope)):
            await Response("this console needs a user and password (kraft web --auth-file)\n", 401,
                           headers={"WWW-Authenticate": f'Basic realm="{REALM}", charset="UTF-8"'},
                           media_type="text/plain")(scope, receive, send)
            return
        await self.app(scope, receive, send)
