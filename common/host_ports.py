"""``HOST:PORT`` and lists of them: the one parser of addresses given as text, for
bootstrap.servers, --bootstrap-controller, controller.quorum.bootstrap.servers and the
listeners of the servers' own endpoints."""
from __future__ import annotations

import re
from collections.abc import Sequence

from .config_def import ConfigError

_HOST_PORT = re.compile(r"^(\[[0-9a-fA-F:.]*\]|[A-Za-z0-9_.-]*):(\d{1,5})$")


def host_ports(entries: str | Sequence[str]) -> list[str]:
    """``HOST:PORT[,HOST:PORT...]`` (or a list of them), trimmed: the one parser of address
    lists, for bootstrap.servers and --bootstrap-controller alike. ValueError names the first
    entry that is not HOST:PORT."""
    out = [e.strip() for e in (entries.split(",") if isinstance(entries, str) else entries) if e.strip()]
    for e in out:
        host, _, port = e.rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(e)
    return out


def parse_host_port(text: str, key: str) -> tuple[str, int]:
    """``host:9404``, ``:9404`` or ``[::1]:9404`` -> (host, port); ConfigError naming ``key`` otherwise."""
    m = _HOST_PORT.match(text.strip())
    if not m or not 0 < int(m.group(2)) < 65536:
        raise ConfigError(f"bad {key}={text!r}: expected HOST:PORT with a port from 1 to 65535, e.g. 0.0.0.0:9404")
    return m.group(1).strip("[]"), int(m.group(2))
