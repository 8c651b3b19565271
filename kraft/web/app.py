"""The console's web application: routes to the pages, the cluster's connections for the
server's life, and failures as one line on the page (never a traceback, on the page or in
the log)."""
from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from . import acls, charts, groups, lag, messages, overview, quorum, quotas, reassignments, time_travel, topics, transactions
from .auth import BasicAuth
from .cluster import CLUSTER_ERRORS, Cluster, error_status
from .csrf import CsrfProtection
from .pages import HERE, render

log = logging.getLogger("kraft.web")


async def overview_page(request: Request) -> Response:
    return render(request, "overview.html", **await overview.overview(request.app.state.cluster))


async def http_error(request: Request, e: Exception) -> Response:
    assert isinstance(e, HTTPException)
    return render(request, "error.html", status_code=e.status_code, message=e.detail)


async def cluster_error(request: Request, e: Exception) -> Response:
    return render(request, "error.html", status_code=error_status(e), message=str(e))


def unexpected(e: Exception) -> str:
    return f"unexpected {type(e).__name__}: {e} (a bug: please report it with what you did)"


async def unexpected_error(request: Request, e: Exception) -> Response:
    return render(request, "error.html", status_code=500, message=unexpected(e))


class OneLineErrors:
    """A failure nothing else caught: one log line (the page, a 500, is ``unexpected_error``'s,
    which Starlette re-raises after), and a form posted from another site (cross-site request
    forgery) refused: its Origin is not this server (csrf.py then checks the form's token)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        request = Request(scope)
        origin = request.headers.get("origin")
        if request.method == "POST" and origin not in (None, "null") and \
                origin.split("://", 1)[-1] != request.headers.get("host"):
            await Response(f"refused: a form posted from {origin}, not from this console\n", 403,
                           media_type="text/plain")(scope, receive, send)
            return
        started = False

        async def sending(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)
        try:
            await self.app(scope, receive, sending)
        except Exception as e:
            log.error("%s %s: %s", request.method, request.url.path, unexpected(e))
            if not started:
                await Response(unexpected(e) + "\n", 500, media_type="text/plain")(scope, receive, send)


def create_app(cluster: Cluster, *, read_only: bool = False, metrics: list[str] | None = None,
               users: dict[str, str] | None = None, lag_every: float | None = None) -> Any:
    """The console for ``cluster`` (started with the app, closed with it); ``read_only``: no
    forms that change the cluster, and 403 for their requests; ``metrics``: the nodes'
    Prometheus endpoints (HOST:PORT) to scrape for the live charts; ``users``: {user:
    password} that HTTP basic auth admits (None: no login); ``lag_every``: sample every
    group's lag this often, in seconds (None: only when a group's page is shown)."""
    scraper = charts.Scraper(metrics) if metrics else None
    lags = lag.LagHistory(cluster, every=lag_every or lag.SAMPLE_EVERY_S)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await cluster.start()
        if scraper is not None:
            scraper.start()
        if lag_every is not None:
            lags.start()
        try:
            yield
        finally:
            await lags.close()
            if scraper is not None:
                await scraper.close()
            await cluster.close()

    routes = [
        Route("/", overview_page, name="overview"),
        Route("/topics", topics.topic_list, name="topics"),
        Route("/topics", topics.topic_create, methods=["POST"], name="topic_create"),
        Route("/topics/new", topics.topic_new, name="topic_new"),
        Route("/topics/{name}", topics.topic_detail, name="topic"),
        Route("/topics/{name}/configs", topics.topic_configs, name="topic_configs"),
        Route("/topics/{name}/configs", topics.topic_configs_alter, methods=["POST"], name="topic_configs_alter"),
        Route("/topics/{name}/delete", topics.topic_delete_confirm, name="topic_delete_confirm"),
        Route("/topics/{name}/delete", topics.topic_delete, methods=["POST"], name="topic_delete"),
        Route("/topics/{name}/partitions/{partition}", messages.browse, name="messages"),
        Route("/topics/{name}/partitions/{partition}", messages.produce, methods=["POST"], name="produce"),
        Route("/groups", groups.group_list, name="groups"),
        Route("/groups/{group}", groups.group_detail, name="group"),
        Route("/groups/{group}/reset", groups.group_reset_dry_run, methods=["POST"], name="group_reset"),
        Route("/groups/{group}/reset/execute", groups.group_reset_execute, methods=["POST"],
              name="group_reset_execute"),
        Route("/acls", acls.acl_list, name="acls"),
        Route("/acls", acls.acl_create, methods=["POST"], name="acl_create"),
        Route("/acls/new", acls.acl_new, name="acl_new"),
        Route("/acls/delete", acls.acl_delete_confirm, name="acl_delete_confirm"),
        Route("/acls/delete", acls.acl_delete, methods=["POST"], name="acl_delete"),
        Route("/quotas", quotas.quota_list, name="quotas"),
        Route("/quotas", quotas.quota_alter, methods=["POST"], name="quota_alter"),
        Route("/quorum", quorum.quorum_page, name="quorum"),
        Route("/quorum/add", quorum.controller_add, methods=["POST"], name="controller_add"),
        Route("/quorum/remove", quorum.controller_remove_confirm, name="controller_remove_confirm"),
        Route("/quorum/remove", quorum.controller_remove, methods=["POST"], name="controller_remove"),
        Route("/reassignments", reassignments.reassignment_list, name="reassignments"),
        Route("/reassignments/review", reassignments.reassignment_review, methods=["POST"],
              name="reassignment_review"),
        Route("/reassignments/start", reassignments.reassignment_start, methods=["POST"], name="reassignment_start"),
        Route("/reassignments/cancel", reassignments.reassignment_cancel, methods=["POST"],
              name="reassignment_cancel"),
        Route("/reassignments/unthrottle", reassignments.throttles_remove, methods=["POST"], name="throttles_remove"),
        Route("/transactions", transactions.transaction_list, name="transactions"),
        Route("/transactions/hanging", transactions.transaction_hanging, name="transactions_hanging"),
        Route("/transactions/abort", transactions.transaction_abort, methods=["POST"], name="transaction_abort"),
        Route("/transactions/{transactional_id}", transactions.transaction_detail, name="transaction"),
        Route("/charts", charts.charts_page, name="charts"),
        Route("/metadata", time_travel.tree, name="metadata"),
        Route("/metadata/changes", time_travel.changes, name="metadata_changes"),
        Mount("/static", StaticFiles(directory=str(HERE / "static")), name="static"),
    ]
    handlers: dict[Any, Any] = {HTTPException: http_error, Exception: unexpected_error}
    handlers.update({cls: cluster_error for cls in CLUSTER_ERRORS})
    app = Starlette(routes=routes, exception_handlers=handlers, lifespan=lifespan)
    app.state.cluster = cluster
    app.state.read_only = read_only
    app.state.scraper = scraper
    app.state.lags = lags
    console = OneLineErrors(CsrfProtection(app))
    return BasicAuth(console, users) if users else console
