"""``kraft configs --entity-type users|clients|ips`` for client quotas (kafka-configs.sh's way,
KIP-546): the entity options and ``--add-config producer_byte_rate=1048576`` turned into the
controller's AlterClientQuotas/DescribeClientQuotas requests, and their answers printed as
kafka-configs.sh prints them."""
from __future__ import annotations

from collections.abc import Sequence

from protos import controller_pb2 as pb

# metadata.client_quotas' names, spelled here so that `kraft --help` loads no metadata module
USER, CLIENT_ID, IP = "user", "client-id", "ip"
#: The CLI's entity types (kafka-configs.sh's) -> the quota entity types.
ENTITY_TYPES = {"users": USER, "clients": CLIENT_ID, "ips": IP}
QUOTA_KEYS = frozenset({"producer_byte_rate", "consumer_byte_rate", "request_percentage", "controller_mutation_rate",
                        "connection_creation_rate"})
#: What ``--entity-default`` puts among the entity names (it shares their option, to keep the order).
DEFAULT = "\0default"
_LABELS = {USER: "user-principal", CLIENT_ID: "client-id", IP: "ip"}


def is_quota_key(item: str) -> bool:
    """``producer_byte_rate=1024`` or ``producer_byte_rate``: a quota key, not a SCRAM mechanism."""
    return item.split("=", 1)[0].strip().lower() in QUOTA_KEYS


def entity(types: Sequence[str], names: Sequence[str]) -> list[tuple[str, str | None]]:
    """Each ``--entity-type`` paired with the ``--entity-name`` or ``--entity-default`` after it;
    ValueError when they do not pair up."""
    if len(types) != len(names):
        raise ValueError("give each --entity-type an --entity-name or --entity-default")
    return [(ENTITY_TYPES[t], None if n == DEFAULT else n) for t, n in zip(types, names, strict=True)]


def alter_request(parts: Sequence[tuple[str, str | None]], add: Sequence[str], delete: Sequence[str]
                  ) -> pb.AlterClientQuotasRequest:
    """``add``: KEY=VALUE items; ``delete``: KEY items. ValueError naming a value that is not a number."""
    ops = []
    for item in add:
        key, _, raw = item.partition("=")
        try:
            ops.append(pb.QuotaOp(key=key.strip(), value=float(raw)))
        except ValueError:
            raise ValueError(f"{item.strip()!r}: a quota is KEY=NUMBER, e.g. producer_byte_rate=1048576") from None
    ops += [pb.QuotaOp(key=k.strip(), remove=True) for k in delete]
    return pb.AlterClientQuotasRequest(entries=[pb.QuotaAlteration(entity=parts_of(parts), ops=ops)])


def describe_request(parts: Sequence[tuple[str, str | None]]) -> pb.DescribeClientQuotasRequest:
    """Exactly the entity named (``--entity-name`` or ``--entity-default`` for each type)."""
    return pb.DescribeClientQuotasRequest(strict=True, components=[
        pb.QuotaFilterComponent(entity_type=t, match_type=0, match=n) if n is not None
        else pb.QuotaFilterComponent(entity_type=t, match_type=1) for t, n in parts])


#: With no names (``--entity-type users`` alone): every entity, of which ``describe_lines`` keeps
#: those of exactly the types given, default entities included.
DESCRIBE_ALL = pb.DescribeClientQuotasRequest(strict=False)


def describe_lines(resp: pb.DescribeClientQuotasResponse, types: Sequence[str] | None = None) -> list[str]:
    """``Quota configs for user-principal 'alice', client-id 'app' are producer_byte_rate=1048576.0``;
    ``types``: keep only entities of exactly these quota entity types."""
    out = []
    for e in resp.entries:
        if types is not None and {p.entity_type for p in e.entity} != set(types):
            continue
        out.append(f"Quota configs for {label(e.entity)} are "
                   + ", ".join(f"{k}={v!r}" for k, v in sorted(e.values.items())))
    return out


def label(parts: Sequence[pb.QuotaEntityPart]) -> str:
    order = {USER: 0, CLIENT_ID: 1, IP: 2}
    return ", ".join(f"the default {_LABELS[p.entity_type]}" if not p.HasField("entity_name")
                     else f"{_LABELS[p.entity_type]} '{p.entity_name}'"
                     for p in sorted(parts, key=lambda p: order.get(p.entity_type, 3)))


def parts_of(parts: Sequence[tuple[str, str | None]]) -> list[pb.QuotaEntityPart]:
    return [pb.QuotaEntityPart(entity_type=t) if n is None else pb.QuotaEntityPart(entity_type=t, entity_name=n)
            for t, n in parts]
