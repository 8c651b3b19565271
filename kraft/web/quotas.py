"""The client quotas page: every quota the metadata log holds (of users, client ids, their
pairs and IPs, named or the default), one set or removed through a form. Requests are
``kraft configs --entity-type users|clients|ips``'s own (kraft/client_quotas.py):
DescribeClientQuotas and AlterClientQuotas, which the controller authorizes as the console's
principal (DESCRIBE_CONFIGS and ALTER_CONFIGS on the cluster) and validates (the keys, and
which entity types go together)."""
from __future__ import annotations

from urllib.parse import urlencode

from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from kraft import client_quotas as cq

from .cluster import check
from .pages import bad_request, cluster_of, render, require_writable

#: What names the default entity of a type in the form and the table, as Kafka's configs
#: paths (/config/users/<default>) and its tools name it.
DEFAULT_NAME = "<default>"
#: The form's fields, one per entity type, in the order Kafka names them.
FIELDS = (("user", cq.USER), ("client_id", cq.CLIENT_ID), ("ip", cq.IP))


def _entity(form: FormData) -> list[tuple[str, str | None]]:
    """The entity the form's fields name: (type, name or None for the default) per field given."""
    parts = [(kind, None if name == DEFAULT_NAME else name)
             for field, kind in FIELDS if (name := str(form.get(field, "")).strip())]
    if not parts:
        raise bad_request(f"name a user, a client id or an IP (or {DEFAULT_NAME} for the default one)")
    return parts


def _row(entry: object) -> dict[str, object]:
    """One entity of DescribeClientQuotas as the table and its remove forms show it."""
    names = {p.entity_type: p.entity_name if p.HasField("entity_name") else DEFAULT_NAME
             for p in entry.entity}  # type: ignore[attr-defined]
    return {"names": names, "fields": {f: names.get(kind, "") for f, kind in FIELDS},
            "label": cq.label(entry.entity), "values": sorted(entry.values.items())}  # type: ignore[attr-defined]


async def quota_list(request: Request) -> Response:
    r = await cluster_of(request).controller.describe_client_quotas(cq.DESCRIBE_ALL)
    rows = sorted((_row(e) for e in r.entries), key=lambda row: str(row["label"]))
    return render(request, "quotas.html", rows=rows, fields=FIELDS, keys=sorted(cq.QUOTA_KEYS),
                  default_name=DEFAULT_NAME)


async def quota_alter(request: Request) -> Response:
    """Set one key of an entity (``value`` given) or remove it (``remove``), as ``kraft configs
    --alter --add-config KEY=VALUE`` or ``--delete-config KEY``."""
    require_writable(request)
    form = await request.form()
    parts = _entity(form)
    key = str(form.get("key", "")).strip()
    if key not in cq.QUOTA_KEYS:
        raise bad_request(f"quota key must be one of {', '.join(sorted(cq.QUOTA_KEYS))}, not {key!r}")
    remove = bool(form.get("remove"))
    value = str(form.get("value", "")).strip()
    if not remove and not value:
        raise bad_request(f"give {key}'s value (a number)")
    try:
        req = cq.alter_request(parts, [] if remove else [f"{key}={value}"], [key] if remove else [])
    except ValueError as e:
        raise bad_request(str(e)) from None
    for result in (await cluster_of(request).controller.alter_client_quotas(req)).results:
        check(result.error_code, result.error_message)
    label = cq.label(cq.parts_of(parts))
    said = f"removed {key} of {label}" if remove else f"set {key}={float(value)!r} for {label}"
    return RedirectResponse(str(request.url_for("quotas")) + "?" + urlencode({"changed": said}), status_code=303)
