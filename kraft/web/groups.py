"""The consumer groups pages: every group with its state, and a group's members, what each is
assigned, and the committed offset, log end offset and lag of each partition, read as
``kraft consumer-groups --describe`` reads them (clients.consumer_groups.describe_group)."""
from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from clients.consumer_groups import describe_group

from .pages import cluster_of, render


async def group_list(request: Request) -> Response:
    admin = await cluster_of(request).brokers()
    return render(request, "groups.html", groups=await admin.list_groups())


async def group_detail(request: Request) -> Response:
    group_id = request.path_params["group"]
    admin = await cluster_of(request).brokers()
    group, rows = await describe_group(admin, group_id)
    assigned: dict[str, list[str]] = {m.member_id: [] for m in group.members}
    for r in rows:
        if r.member is not None:
            assigned[r.member.member_id].append(f"{r.topic}-{r.partition}")
    return render(request, "group.html", group_id=group_id, group=group, rows=rows, assigned=assigned,
                  total_lag=sum(r.lag or 0 for r in rows))
