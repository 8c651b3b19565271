"""Client settings by their Kafka names (``linger.ms=5``, ``enable.auto.commit=false``), as the
console tools' ``--producer-property`` and ``--consumer-property`` take them."""
from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from common.config_def import ConfigError
from common.properties import read_properties
from common.tls import TLSConfig

from .security import client_tls, is_security_key


def from_properties(constructor: Callable[..., Any], properties: dict[str, str], what: str) -> dict[str, Any]:
    """Keyword arguments of ``constructor`` from Kafka-named properties; the type of each comes
    from its annotation (bool, int, a list of strings, else a string). ``security.protocol``
    and the ``ssl.*`` keys together become its ``tls``."""
    params = inspect.signature(constructor).parameters
    out: dict[str, Any] = {}
    security = {k.strip(): v for k, v in properties.items() if is_security_key(k.strip())}
    if security and "tls" in params:
        try:
            out["tls"] = client_tls(security)
        except ConfigError as e:
            raise ConfigError(str(e)) from None
    for key, raw in properties.items():
        if key.strip() in security and "tls" in params:
            continue
        name = key.strip().replace(".", "_")
        param = params.get(name)
        if param is None or param.kind != param.KEYWORD_ONLY:
            raise ConfigError(f"Unknown {what} config {key}")
        value, kind = raw.strip(), str(param.annotation)
        if "bool" in kind:
            if value.lower() not in ("true", "false"):
                raise ConfigError(f"Invalid value {value} for configuration {key}: Expected value to be "
                                      f"either true or false")
            out[name] = value.lower() == "true"
        elif kind.startswith("int"):
            try:
                out[name] = int(value)
            except ValueError:
                raise ConfigError(f"Invalid value {value} for configuration {key}: Not a number of "
                                      f"type INT") from None
        elif "list" in kind and "," in value:
            out[name] = [v.strip() for v in value.split(",") if v.strip()]
        else:
            out[name] = value
    return out


def read_config_file(path: str) -> dict[str, str]:
    """A client properties file (``--producer.config``, ``--command-config``): Kafka's keys."""
    try:
        return read_properties(path)
    except ConfigError as e:
        raise ConfigError(str(e)) from None


def tools_tls(path: str | None) -> TLSConfig | None:
    """The TLS of a tool's ``--command-config FILE`` (None without one, or for PLAINTEXT)."""
    if not path:
        return None
    try:
        return client_tls(read_config_file(path))
    except ConfigError as e:
        raise ConfigError(f"{path}: {e}") from None
