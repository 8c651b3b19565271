"""Client quotas as KRaft keeps them in the metadata log (KIP-13, KIP-124, KIP-546, KIP-599,
KIP-612): per entity (a user, a client id, both, or an IP address, each possibly the default
entity of its type), a few numeric keys. The controller validates an AlterClientQuotas as
Kafka's ClientQuotaControlManager does and writes one ``ClientQuotaRecord`` per key set or
removed; DescribeClientQuotas matches the entities against filter components as Kafka's
ClientQuotasImage does. Brokers read the entities from the image (``brokerd.quotas``).

An entity is a tuple of (entity type, name) sorted by type, the name None for the default
entity of that type: ``(("client-id", None), ("user", "alice"))`` is alice with any client id
that has no quota of its own.
"""
from __future__ import annotations

import ipaddress
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from common.errors import ErrorCode, KafkaError
from .records import MetadataRecord, client_quota

USER, CLIENT_ID, IP = "user", "client-id", "ip"
ENTITY_TYPES = (USER, CLIENT_ID, IP)

PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
REQUEST_PERCENTAGE = "request_percentage"
CONTROLLER_MUTATION_RATE = "controller_mutation_rate"
CONNECTION_CREATION_RATE = "connection_creation_rate"

#: The keys of user and client-id entities, and whether each is a whole number (Kafka's
#: QuotaConfigs: the byte rates are LONGs, the others DOUBLEs).
CLIENT_KEYS: dict[str, bool] = {PRODUCER_BYTE_RATE: True, CONSUMER_BYTE_RATE: True,
                                REQUEST_PERCENTAGE: False, CONTROLLER_MUTATION_RATE: False}
#: The key of ip entities (an INT in Kafka).
IP_KEYS: dict[str, bool] = {CONNECTION_CREATION_RATE: True}
_MAX_WHOLE = {PRODUCER_BYTE_RATE: 2 ** 63 - 1, CONSUMER_BYTE_RATE: 2 ** 63 - 1, CONNECTION_CREATION_RATE: 2 ** 31 - 1}

#: DescribeClientQuotas' match types (Kafka's ClientQuotaFilterComponent).
MATCH_EXACT, MATCH_DEFAULT, MATCH_ANY = 0, 1, 2

Entity = tuple[tuple[str, "str | None"], ...]
Quotas = Mapping[Entity, Mapping[str, float]]


@dataclass(frozen=True, slots=True)
class QuotaOp:
    key: str
    value: float
    remove: bool = False


@dataclass(frozen=True, slots=True)
class QuotaAlteration:
    """One entry of AlterClientQuotas: the entity as sent (checked here) and its changes."""

    entity: tuple[tuple[str, str | None], ...]
    ops: tuple[QuotaOp, ...]


@dataclass(frozen=True, slots=True)
class QuotaAlterResult:
    entity: tuple[tuple[str, str | None], ...]
    error: KafkaError | None = None


@dataclass(frozen=True, slots=True)
class QuotaFilterComponent:
    entity_type: str
    match_type: int
    match: str | None = None


def _invalid(message: str) -> KafkaError:
    return KafkaError(ErrorCode.INVALID_REQUEST, message)


def check_entity(parts: Sequence[tuple[str, str | None]]) -> Entity:
    """The entity, sorted; INVALID_REQUEST as Kafka refuses an entity it cannot hold."""
    if not parts:
        raise _invalid("Invalid empty client quota entity")
    types = [t for t, _ in parts]
    for t, name in parts:
        if t not in ENTITY_TYPES:
            raise _invalid(f"Unhandled client quota entity type: {t}")
        if name == "":
            raise _invalid(f"Invalid empty {t} name: name an entity, or leave the name out for the default entity")
    if len(set(types)) != len(types):
        raise _invalid(f"Invalid client quota entity: an entity type appears more than once ({', '.join(types)})")
    if IP in types and len(types) > 1:
        raise _invalid("Invalid quota entity combination, IP entity should not be combined with User or ClientId")
    for t, name in parts:
        if t == IP and name is not None:
            try:
                ipaddress.ip_address(name)
            except ValueError:
                raise _invalid(f"{name} is not a valid IP address") from None
    return tuple(sorted(parts))


def _check_value(key: str, value: float, keys: Mapping[str, bool]) -> None:
    if key not in keys:
        raise _invalid(f"Invalid configuration key {key}")
    if math.isnan(value) or math.isinf(value) or value <= 0:
        raise _invalid(f"Quota {key} must be a number greater than 0, not {value}")
    if keys[key]:
        if value != int(value):
            raise _invalid(f"Quota {key} must be a whole number, not {value}")
        if value > _MAX_WHOLE[key]:
            raise _invalid(f"Quota {key} is too large: {value:.0f}")


def alter_quotas(current: Quotas, alterations: Sequence[QuotaAlteration]
                 ) -> tuple[list[MetadataRecord], list[QuotaAlterResult]]:
    """The records of AlterClientQuotas and one result per entry; an entry refused writes none
    of its changes. Removing a key that is not set writes nothing (as Kafka)."""
    records: list[MetadataRecord] = []
    results = []
    for a in alterations:
        try:
            entity = check_entity(a.entity)
            keys = IP_KEYS if entity[0][0] == IP else CLIENT_KEYS
            mine: list[MetadataRecord] = []
            have = current.get(entity, {})
            for op in a.ops:
                if op.remove:
                    if op.key not in keys:
                        raise _invalid(f"Invalid configuration key {op.key}")
                    if op.key in have:
                        mine.append(client_quota(entity, op.key, None))
                else:
                    _check_value(op.key, op.value, keys)
                    mine.append(client_quota(entity, op.key, float(op.value)))
            records += mine
            results.append(QuotaAlterResult(a.entity))
        except KafkaError as e:
            results.append(QuotaAlterResult(a.entity, e))
    return records, results


def _check_filter(components: Sequence[QuotaFilterComponent]) -> None:
    types = [c.entity_type for c in components]
    for c in components:
        if c.entity_type not in ENTITY_TYPES:
            raise _invalid(f"Custom entity type {c.entity_type} not supported")
        if c.match_type == MATCH_EXACT:
            if c.match is None:
                raise _invalid(f"Filter component for {c.entity_type} asks for an exact match without a name")
        elif c.match_type in (MATCH_DEFAULT, MATCH_ANY):
            if c.match is not None:
                raise _invalid(f"Filter component for {c.entity_type} matches the default or any entity: "
                               f"it takes no name (got {c.match!r})")
        else:
            raise _invalid(f"Unknown match type {c.match_type} in the filter component for {c.entity_type}")
    if len(set(types)) != len(types):
        raise _invalid("Duplicate entity type in the filter: each entity type may appear once")
    if IP in types and len(types) > 1:
        raise _invalid("Invalid entity filter component combination, IP filter component should not be used "
                       "with user or clientId filter component.")


def _matches(entity: Entity, components: Sequence[QuotaFilterComponent], strict: bool) -> bool:
    names = dict(entity)
    if strict and set(names) != {c.entity_type for c in components}:
        return False
    for c in components:
        if c.entity_type not in names:
            return False
        name = names[c.entity_type]
        if c.match_type == MATCH_EXACT and name != c.match:
            return False
        if c.match_type == MATCH_DEFAULT and name is not None:
            return False
        if c.match_type == MATCH_ANY and name is None:
            return False
    return True


def describe_quotas(current: Quotas, components: Sequence[QuotaFilterComponent], strict: bool
                    ) -> list[tuple[Entity, dict[str, float]]]:
    """The entities the filter matches with their keys, sorted (default entities first);
    INVALID_REQUEST for a filter Kafka refuses. No components and not strict: every entity."""
    _check_filter(components)
    found = [(e, dict(v)) for e, v in current.items() if _matches(e, components, strict)]
    return sorted(found, key=lambda item: [(t, n is not None, n or "") for t, n in item[0]])


def entity_label(entity: Sequence[tuple[str, str | None]]) -> str:
    """``user=alice,client-id=<default>``: how the tools and the shell print an entity."""
    return ",".join(f"{t}={'<default>' if n is None else n}" for t, n in entity)
