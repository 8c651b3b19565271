"""Client settings by their Kafka names (``linger.ms=5``, ``enable.auto.commit=false``), as the
console tools' ``--producer-property`` and ``--consumer-property`` take them."""
from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from .cluster_view import ClientError


class ConfigException(ClientError):
    """Kafka's ConfigException: a setting that is unknown, malformed, or cannot work with the
    others; raised before anything is sent."""


def from_properties(constructor: Callable[..., Any], properties: dict[str, str], what: str) -> dict[str, Any]:
    """Keyword arguments of ``constructor`` from Kafka-named properties; the type of each comes
    from its annotation (bool, int, a list of strings, else a string)."""
    params = inspect.signature(constructor).parameters
    out: dict[str, Any] = {}
    for key, raw in properties.items():
        name = key.strip().replace(".", "_")
        param = params.get(name)
        if param is None or param.kind != param.KEYWORD_ONLY:
            raise ConfigException(f"Unknown {what} config {key}")
        value, kind = raw.strip(), str(param.annotation)
        if "bool" in kind:
            if value.lower() not in ("true", "false"):
                raise ConfigException(f"Invalid value {value} for configuration {key}: Expected value to be "
                                      f"either true or false")
            out[name] = value.lower() == "true"
        elif kind.startswith("int"):
            try:
                out[name] = int(value)
            except ValueError:
                raise ConfigException(f"Invalid value {value} for configuration {key}: Not a number of "
                                      f"type INT") from None
        elif "list" in kind and "," in value:
            out[name] = [v.strip() for v in value.split(",") if v.strip()]
        else:
            out[name] = value
    return out
