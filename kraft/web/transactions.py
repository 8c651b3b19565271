"""The transactions pages: every transactional id the coordinators keep (state, producer id
and epoch, coordinator, how long its transaction has been open), one transaction's partitions,
and the hanging transactions, found by ``kraft transactions find-hanging``'s own code and
aborted by ``kraft transactions abort``'s."""
from __future__ import annotations

import time
from dataclasses import dataclass
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from kraft.cli.transactions import HANGING_HEADER, NoOpenTransaction, abort_transaction, hanging

from .pages import bad_request, cluster_of, int_param, not_found, render, require_writable

#: DescribeTransactions asked per listed id: a page shows at most this many.
MAX_LISTED = 500


@dataclass(frozen=True, slots=True)
class Row:
    """One transactional id as its coordinator describes it."""

    transactional_id: str
    coordinator: int
    producer_id: int
    producer_epoch: int
    state: str
    duration_ms: int | None  # None: no transaction open


def _duration(start_ms: int, now_ms: int) -> int | None:
    return now_ms - start_ms if start_ms >= 0 else None


async def transaction_list(request: Request) -> Response:
    admin = await cluster_of(request).brokers()
    listed = sorted(await admin.list_transactions(), key=lambda ct: ct[1].transactional_id)
    now = int(time.time() * 1000)
    rows = []
    for _, t in listed[:MAX_LISTED]:
        coordinator, d = await admin.describe_transaction(t.transactional_id)
        rows.append(Row(d.transactional_id, coordinator, d.producer_id, d.producer_epoch, d.state,
                        _duration(d.start_ms, now)))
    return render(request, "transactions.html", rows=rows, total=len(listed))


async def transaction_detail(request: Request) -> Response:
    admin = await cluster_of(request).brokers()
    coordinator, d = await admin.describe_transaction(request.path_params["transactional_id"])
    return render(request, "transaction.html", d=d, coordinator=coordinator,
                  duration_ms=_duration(d.start_ms, int(time.time() * 1000)),
                  partitions=[(t.name, p) for t in d.topics for p in t.partitions])


async def transaction_hanging(request: Request) -> Response:
    """``kraft transactions find-hanging --max-transaction-timeout M`` over every broker's partitions."""
    minutes = int_param(request.query_params.get("max_timeout"), "max_timeout", 15, minimum=0)
    rows = await hanging(await cluster_of(request).brokers(), minutes)
    return render(request, "transactions_hanging.html", header=HANGING_HEADER, rows=rows, minutes=minutes)


async def transaction_abort(request: Request) -> Response:
    """``kraft transactions abort --topic T --partition N --start-offset O`` for one hanging
    transaction, then the hanging transactions again, with what was aborted."""
    require_writable(request)
    form = await request.form()
    topic = str(form.get("topic", "")).strip()
    fields = {name: str(form.get(name, "")).strip() for name in ("partition", "start_offset")}
    if not topic or not all(fields.values()):
        raise bad_request("give the hanging transaction's topic, partition and start_offset")
    partition = int_param(fields["partition"], "partition", 0)
    start = int_param(fields["start_offset"], "start_offset", 0)
    minutes = int_param(str(form.get("max_timeout", "")), "max_timeout", 15)
    try:
        producer_id, epoch, _ = await abort_transaction(await cluster_of(request).brokers(), topic, partition, start)
    except NoOpenTransaction as e:  # ended meanwhile (aborted from another page, or by the tool)
        raise not_found(str(e)) from None
    said = f"Aborted the transaction of producer {producer_id} (epoch {epoch}) open in {topic}-{partition} " \
           f"from offset {start}."
    query = urlencode({"max_timeout": minutes, "aborted": said})
    return RedirectResponse(f"{request.url_for('transactions_hanging')}?{query}", status_code=303)
