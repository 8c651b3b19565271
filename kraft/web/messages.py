"""The messages page: a partition's records from an offset or a time, oldest first (forward
from it) or newest first (back from it, by default from the last record), with key and value
shown as text, JSON (pretty-printed) or hex; and a form to produce one. Reads go through the
project's Consumer (assign and seek), writes through its Producer."""
from __future__ import annotations

import asyncio
import json
from datetime import datetime, timezone

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from clients import Consumer
from clients.admin import EARLIEST, LATEST

from .pages import bad_request, cluster_of, int_param, not_found, render, require_writable

FORMATS = ("text", "json", "hex")
ORDERS = ("oldest", "newest")  # oldest first reads forward from the offset, newest first back from it
MAX_LIMIT = 500
READ_TIMEOUT_S = 10.0


def show(data: bytes | None, fmt: str) -> str:
    """Bytes as the chosen format; JSON that does not parse is shown as text."""
    if data is None:
        return "null"
    if fmt == "hex":
        return data.hex(" ")
    text = data.decode("utf-8", errors="replace")
    if fmt == "json":
        try:
            return json.dumps(json.loads(text), indent=2, ensure_ascii=False)
        except ValueError:
            return text
    return text


def parse_time(text: str) -> int:
    """Milliseconds since the epoch, from a number of them or an ISO 8601 time (UTC unless it says)."""
    if text.isdigit():
        return int(text)
    try:
        t = datetime.fromisoformat(text)
    except ValueError:
        raise bad_request(f"time must be milliseconds since the epoch or an ISO 8601 time such as "
                          f"2026-01-31T12:00:00Z, not {text!r}") from None
    return int((t if t.tzinfo else t.replace(tzinfo=timezone.utc)).timestamp() * 1000)


async def _partition(request: Request) -> tuple[str, int]:
    """The topic and partition of the path, 404 when the topic has no such partition."""
    name = request.path_params["name"]
    partition = int_param(request.path_params["partition"], "partition", 0)
    (topic,) = await cluster_of(request).topics([name])
    if partition not in {p.partition for p in topic.partitions}:
        raise not_found(f"topic {name} has no partition {partition} (it has {len(topic.partitions)})")
    return name, partition


async def browse(request: Request) -> Response:
    topic, partition = await _partition(request)
    fmt = request.query_params.get("format", "text")
    if fmt not in FORMATS:
        raise bad_request(f"format must be one of {', '.join(FORMATS)}, not {fmt!r}")
    limit = int_param(request.query_params.get("limit"), "limit", 50, minimum=1, maximum=MAX_LIMIT)
    cluster = cluster_of(request)
    admin = await cluster.brokers()
    tp = (topic, partition)
    start = (await admin.offsets({tp: EARLIEST}))[tp][0]
    end = (await admin.offsets({tp: LATEST}))[tp][0]
    order = request.query_params.get("order", "oldest")
    if order not in ORDERS:
        raise bad_request(f"order must be one of {', '.join(ORDERS)}, not {order!r}")
    newest = order == "newest"
    when = request.query_params.get("time", "").strip()
    if when:  # the first record at or after it (ListOffsets by time, as kraft get-offsets --time); wins over an offset
        found = (await admin.offsets({tp: parse_time(when)}))[tp][0]
        offset = found if found >= 0 else end - 1 if newest else end
    else:
        offset = int_param(request.query_params.get("offset"), "offset", end - 1 if newest else start, minimum=0)
    last = end - 1 if newest else end  # newest first reads back from a record, so it must be one
    if not start <= offset <= last and (end > start or "offset" in request.query_params):
        raise bad_request(f"offset {offset} is outside {topic}-{partition}'s log: offsets {start} to {end - 1}"
                          if end > start else f"offset {offset}: {topic}-{partition} holds no records")
    if newest:  # the records up to the offset, the newest first; "next" goes back to older ones
        first = max(start, offset - limit + 1)
        records = (await _read(cluster.bootstrap_server, cluster.tls, tp, first, offset - first + 1))[::-1] \
            if end > start else []
        next_offset = first - 1 if records and first > start else None
    else:
        records = await _read(cluster.bootstrap_server, cluster.tls, tp, offset, min(limit, end - offset))
        next_offset = offset + len(records) if offset + len(records) < end else None
    rows = [{"offset": r.offset, "key": show(r.key, fmt), "value": show(r.value, fmt),
             "headers": [(k, show(v, fmt)) for k, v in r.headers],
             "timestamp": datetime.fromtimestamp(r.timestamp / 1000, timezone.utc).isoformat(timespec="milliseconds")}
            for r in records]
    return render(request, "messages.html", topic=topic, partition=partition, fmt=fmt, formats=FORMATS,
                  limit=limit, offset=offset, time=when, start=start, end=end, rows=rows, order=order,
                  orders=ORDERS, next_offset=next_offset)


async def _read(bootstrap: str, tls, tp: tuple[str, int], offset: int, count: int) -> list:
    """Up to ``count`` records from ``offset`` (all below the high watermark, so they come)."""
    if count <= 0:
        return []
    out: list = []
    async with Consumer(bootstrap, tls=tls, enable_auto_commit=False, max_poll_records=count) as consumer:
        await consumer.assign([tp])
        consumer.seek(*tp, offset)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + READ_TIMEOUT_S
        while len(out) < count and loop.time() < deadline:
            out += [r for r in await consumer.poll(200) if r.offset >= offset]
    return out[:count]


async def produce(request: Request) -> Response:
    require_writable(request)
    topic, partition = await _partition(request)
    form = await request.form()
    key = str(form.get("key", ""))
    value = str(form.get("value", ""))
    cluster = cluster_of(request)
    producer = await cluster.producer()
    md = await producer.send_and_wait(topic, value.encode(), key.encode() if key else None, partition=partition)
    url = request.url_for("messages", name=topic, partition=str(partition))
    return RedirectResponse(f"{url}?offset={md.offset}", status_code=303)
