"""What every page shares: rendering a template, reading the cluster from the app, and the
one-line answers to bad input (400) and to what does not exist (404)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.templating import Jinja2Templates

from .cluster import Cluster

HERE = Path(__file__).resolve().parent
templates = Jinja2Templates(directory=str(HERE / "templates"))


def render(request: Request, template: str, status_code: int = 200, **context: Any) -> Response:
    return templates.TemplateResponse(request, template, context, status_code=status_code)


def cluster_of(request: Request) -> Cluster:
    return request.app.state.cluster


def require_writable(request: Request) -> None:
    """Refuse (403) what changes the cluster when the console was started with --read-only."""
    if request.app.state.read_only:
        raise HTTPException(403, "this console is read-only (kraft web --read-only): it changes nothing")


def bad_request(message: str) -> HTTPException:
    return HTTPException(400, message)


def not_found(message: str) -> HTTPException:
    return HTTPException(404, message)


def int_param(value: str | None, name: str, default: int, *, minimum: int = 0, maximum: int | None = None) -> int:
    """A whole-number query or form field, refused in one line when it is not one or is out of range."""
    if value is None or value == "":
        return default
    try:
        n = int(value)
    except ValueError:
        raise bad_request(f"{name} must be a whole number, not {value!r}") from None
    if n < minimum or (maximum is not None and n > maximum):
        bound = f"from {minimum} to {maximum}" if maximum is not None else f"at least {minimum}"
        raise bad_request(f"{name} must be {bound}, not {n}")
    return n
