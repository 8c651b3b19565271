"""Java properties files: the servers' configurations, the tools' ``--command-config`` and
``meta.properties``."""
from __future__ import annotations

import re

from .config_def import ConfigError


def read_properties(path: str) -> dict[str, str]:
    """Java properties: ``key=value`` or ``key: value``, ``#``/``!`` comments, ``\\`` line
    continuations. The one parser of properties files (server configs, ``meta.properties``)."""
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError as e:
        raise ConfigError(f"cannot read {path}: {e.strerror}") from None
    props: dict[str, str] = {}
    buf = ""
    for raw in lines:
        line = raw.strip()
        if not buf and (not line or line[0] in "#!"):
            continue
        if line.endswith("\\") and not line.endswith("\\\\"):
            buf += line[:-1]
            continue
        line, buf = buf + line, ""
        m = re.match(r"^([^=:\s]+)\s*[=:\s]\s*(.*)$", line)
        if not m:
            raise ConfigError(f"{path}: cannot parse line {raw!r}: expected key=value")
        props[m.group(1)] = m.group(2).strip()
    return props
