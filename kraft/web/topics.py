"""The topics pages: a searchable list, 100 topics a page; a topic's partitions (replicas, ISR,
leader, log start and end offsets); create (with configs) and delete after a confirmation."""
from __future__ import annotations

import math
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from clients.admin import EARLIEST, LATEST

from .pages import bad_request, cluster_of, int_param, not_found, render, require_writable

PAGE_SIZE = 100


async def topic_list(request: Request) -> Response:
    query = request.query_params.get("q", "").strip()
    topics = await cluster_of(request).topics()
    names = sorted(t.name for t in topics if query.lower() in t.name.lower())
    partitions = {t.name: len(t.partitions) for t in topics}
    pages = max(1, math.ceil(len(names) / PAGE_SIZE))
    page = int_param(request.query_params.get("page"), "page", 1, minimum=1)
    if page > pages:
        raise not_found(f"page {page} does not exist: {len(names)} topics make {pages} page(s)")
    shown = names[(page - 1) * PAGE_SIZE:page * PAGE_SIZE]
    return render(request, "topics.html", query=query, page=page, pages=pages, total=len(names),
                  rows=[(n, partitions[n]) for n in shown])


async def topic_detail(request: Request) -> Response:
    name = request.path_params["name"]
    cluster = cluster_of(request)
    (topic,) = await cluster.topics([name])
    offsets: dict[tuple[str, int], tuple[int, int]] = {}
    if topic.partitions:
        admin = await cluster.brokers()
        tps = [(name, p.partition) for p in topic.partitions]
        starts = await admin.offsets({tp: EARLIEST for tp in tps})
        ends = await admin.offsets({tp: LATEST for tp in tps})
        offsets = {tp: (starts[tp][0], ends[tp][0]) for tp in tps}
    return render(request, "topic.html", topic=topic, offsets=offsets,
                  configs=sorted(topic.configs.items()))


async def topic_new(request: Request) -> Response:
    require_writable(request)
    return render(request, "topic_new.html")


def parse_configs(text: str, commas: bool = True) -> dict[str, str]:
    """``KEY=VALUE`` lines (or commas, as ``kraft topics create --config``; the edit form
    keeps a value with commas whole, e.g. ``cleanup.policy=compact,delete``)."""
    out = {}
    for item in (text.replace(",", "\n") if commas else text).splitlines():
        if not item.strip():
            continue
        key, found, value = item.partition("=")
        if not found or not key.strip():
            raise bad_request(f"bad config {item.strip()!r}: expected KEY=VALUE")
        out[key.strip()] = value.strip()
    return out


async def topic_create(request: Request) -> Response:
    require_writable(request)
    form = await request.form()
    name = str(form.get("name", "")).strip()
    if not name:
        raise bad_request("give the topic a name")
    partitions = int_param(str(form.get("partitions", "")), "partitions", -1, minimum=1, maximum=100000)
    rf = int_param(str(form.get("replication_factor", "")), "replication factor", -1, minimum=1, maximum=1000)
    configs = parse_configs(str(form.get("configs", "")))
    await cluster_of(request).create_topic(name, partitions, rf, configs)
    return RedirectResponse(request.url_for("topic", name=name), status_code=303)


async def topic_configs(request: Request) -> Response:
    """The form to edit a topic's own configs, one KEY=VALUE a line."""
    require_writable(request)
    (topic,) = await cluster_of(request).topics([request.path_params["name"]])
    return render(request, "topic_configs.html", topic=topic,
                  text="\n".join(f"{k}={v}" for k, v in sorted(topic.configs.items())))


async def topic_configs_alter(request: Request) -> Response:
    """What the form changed, as one IncrementalAlterConfigs: SET for a new or changed value,
    DELETE for a line removed (the cluster's default applies again)."""
    require_writable(request)
    name = request.path_params["name"]
    form = await request.form()
    wanted = parse_configs(str(form.get("configs", "")), commas=False)
    cluster = cluster_of(request)
    (topic,) = await cluster.topics([name])
    set_ = {k: v for k, v in wanted.items() if topic.configs.get(k) != v}
    delete = sorted(k for k in topic.configs if k not in wanted)
    if set_ or delete:
        await cluster.alter_topic_configs(name, set_, delete)
    said = ", ".join([f"set {k}={v}" for k, v in sorted(set_.items())] + [f"deleted {k}" for k in delete])
    return RedirectResponse(str(request.url_for("topic", name=name)) + "?" + urlencode(
        {"updated": said or "nothing changed"}), status_code=303)


async def topic_delete_confirm(request: Request) -> Response:
    require_writable(request)
    name = request.path_params["name"]
    (topic,) = await cluster_of(request).topics([name])
    return render(request, "topic_delete.html", topic=topic)


async def topic_delete(request: Request) -> Response:
    require_writable(request)
    name = request.path_params["name"]
    form = await request.form()
    if form.get("confirm") != name:
        raise bad_request(f"type the topic's name, {name}, to delete it")
    await cluster_of(request).delete_topic(name)
    return RedirectResponse(str(request.url_for("topics")) + f"?deleted={name}", status_code=303)
