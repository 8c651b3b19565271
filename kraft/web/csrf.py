"""Cross-site request forgery: every form the console renders carries a token bound to the
browser's session (a random id in a cookie, signed with a secret the console draws when it
starts), and a POST whose token is missing or not the session's is refused with 403 before
any page sees it. Another site can make a browser post to the console with its cookie, but
cannot read a page of it to learn the token (the ``Origin`` check in app.py refuses such
posts too when the browser says where they come from)."""
from __future__ import annotations

import hashlib
import hmac
import secrets
from urllib.parse import parse_qs

from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

#: The form field (and the ``X-CSRF-Token`` header, for scripts) that carries the token.
FIELD = "csrf_token"
HEADER = "x-csrf-token"
#: Over https a ``__Host-`` cookie: sent only over TLS, to this host and path, never overwritten
#: by a plain-http page of the same host (the browser keeps the two names apart).
COOKIE, SECURE_COOKIE = "kraft_session", "__Host-kraft_session"
#: A form bigger than this is not the console's (its largest is a message's value).
MAX_FORM_BYTES = 8 * 1024 * 1024


class CsrfProtection:
    """Give each browser a session id (cookie), put the session's token in ``request.state``
    for the templates' forms, and refuse (403, one line) a POST without that token."""

    def __init__(self, app: ASGIApp, secret: bytes | None = None) -> None:
        self.app = app
        self.secret = secret or secrets.token_bytes(32)

    def token(self, session: str) -> str:
        return hmac.new(self.secret, session.encode(), hashlib.sha256).hexdigest()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        request = Request(scope)
        name = SECURE_COOKIE if scope.get("scheme") == "https" else COOKIE
        session = request.cookies.get(name, "")
        fresh = len(session) < 32
        if fresh:
            session = secrets.token_urlsafe(32)
        expected = self.token(session)
        scope.setdefault("state", {})["csrf_token"] = expected
        if request.method == "POST":
            body = await _body(receive)
            given = request.headers.get(HEADER) or _field(body, request.headers.get("content-type", ""))
            if fresh or body is None or not hmac.compare_digest(given.encode(), expected.encode()):
                await Response("refused: this form does not carry this session's CSRF token (reload the page "
                               "that has the form and send it again)\n", 403,
                               media_type="text/plain")(scope, receive, send)
                return
            receive = _replay(body, receive)

        async def sending(message: Message) -> None:
            if fresh and message["type"] == "http.response.start":
                cookie = f"{name}={session}; Path=/; HttpOnly; SameSite=Strict"  # token_urlsafe: no quoting
                if name == SECURE_COOKIE:
                    cookie += "; Secure"
                message["headers"] = [*message.get("headers", []), (b"set-cookie", cookie.encode("latin-1"))]
            await send(message)
        await self.app(scope, receive, sending)


async def _body(receive: Receive) -> bytes | None:
    """The request's whole body (None when it is larger than any form of the console's)."""
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return None  # the client went away
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > MAX_FORM_BYTES:
            return None
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


def _field(body: bytes | None, content_type: str) -> str:
    """The token field of a URL-encoded form (every form of the console is one)."""
    if body is None or not content_type.startswith("application/x-www-form-urlencoded"):
        return ""
    try:
        return parse_qs(body.decode("latin-1"), max_num_fields=1000).get(FIELD, [""])[0]
    except ValueError:  # more fields than any form of the console's
        return ""


def _replay(body: bytes, receive: Receive) -> Receive:
    """A ``receive`` that hands the page the body already read, then the server's own (which
    tells of a disconnect)."""
    sent = False

    async def replaying() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()
    return replaying
