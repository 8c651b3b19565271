"""The consumer groups pages: every group with its state, and a group's members, what each is
assigned, and the committed offset, log end offset and lag of each partition, read as
``kraft consumer-groups --describe`` reads them (clients.consumer_groups.describe_group);
and resetting an inactive group's offsets of a topic, a dry run first and then applied, by
``kraft consumer-groups --reset-offsets``'s own code (its checks, bounds and warnings)."""
from __future__ import annotations

from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from clients.consumer_groups import _reset as reset_offsets
from clients.consumer_groups import describe_group

from .pages import bad_request, cluster_of, int_param, render, require_writable

#: --to-earliest, --to-latest, --to-offset N, --shift-by N
RESETS = ("earliest", "latest", "offset", "shift")


async def group_list(request: Request) -> Response:
    admin = await cluster_of(request).brokers()
    return render(request, "groups.html", groups=await admin.list_groups())


async def group_detail(request: Request) -> Response:
    group_id = request.path_params["group"]
    admin = await cluster_of(request).brokers()
    group, rows = await describe_group(admin, group_id)
    lags = request.app.state.lags
    lags.record(group_id, rows)
    assigned: dict[str, list[str]] = {m.member_id: [] for m in group.members}
    for r in rows:
        if r.member is not None:
            assigned[r.member.member_id].append(f"{r.topic}-{r.partition}")
    return render(request, "group.html", group_id=group_id, group=group, rows=rows, assigned=assigned,
                  total_lag=sum(r.lag or 0 for r in rows), topics=sorted({r.topic for r in rows}), resets=RESETS,
                  lag_chart=lags.chart(group_id), lag_every=lags.every)


async def _reset(request: Request, execute: bool) -> tuple[str, str, str, list[str]]:
    """The group, topic and new-offsets table of ``--reset-offsets --dry-run`` (or
    ``--execute``) with the form's choice, and its warnings (a target past the log's ends)."""
    require_writable(request)
    group_id = request.path_params["group"]
    form = await request.form()
    topic = str(form.get("topic", "")).strip()
    if not topic:
        raise bad_request("give the topic whose offsets to reset")
    to = str(form.get("to", ""))
    if to not in RESETS:
        raise bad_request(f"reset to one of {', '.join(RESETS)}, not {to!r}")
    value = None
    if to in ("offset", "shift"):
        raw = str(form.get("value", "")).strip()
        if not raw:
            raise bad_request(f"give the {'offset' if to == 'offset' else 'number to shift by'}")
        value = int_param(raw, to, 0, minimum=0 if to == "offset" else -(2 ** 63))
    warnings: list[str] = []
    admin = await cluster_of(request).brokers()
    table = await reset_offsets(admin, group_id, topic, (to, value), execute, warnings.append)
    return group_id, topic, table, warnings


async def group_reset_dry_run(request: Request) -> Response:
    group_id, topic, table, warnings = await _reset(request, execute=False)
    form = await request.form()
    return render(request, "group_reset.html", group_id=group_id, topic=topic, table=table, warnings=warnings,
                  fields={k: str(form.get(k, "")) for k in ("topic", "to", "value")})


async def group_reset_execute(request: Request) -> Response:
    group_id, topic, _, warnings = await _reset(request, execute=True)
    said = f"reset the offsets of {topic}" + "".join(f" (warning: {w})" for w in warnings)
    return RedirectResponse(str(request.url_for("group", group=group_id)) + "?" + urlencode({"reset": said}),
                            status_code=303)
