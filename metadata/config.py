"""Server configuration from a Kafka-style properties file: the keys a Kafka operator knows
(``node.id``, ``process.roles``, ``controller.quorum.voters`` or
``controller.quorum.bootstrap.servers``, ``listeners``,
``advertised.listeners``, ``metadata.log.dir``, ``log.dirs``, ...), with Kafka's defaults
unless docs/operations.md says otherwise. Every key is declared once, with its type, default and
rule, in ``common.server_keys``; ``ServerConfig`` reads them through it, typed."""
from __future__ import annotations

import re
import socket
from dataclasses import dataclass, field
from typing import Any

from clients.security import ListenerSecurity, connecting_tls, listener_security, security_protocol_map
from common.config_def import ConfigError
from common.host_ports import host_ports, parse_host_port
from common.properties import read_properties
from common.server_keys import BOOTSTRAP_SERVERS, PROMETHEUS_LISTENER, SERVER_KEYS, VOTERS
from common.tls import TLSConfig
from raft.config import parse_voters

ROLES = {"controller", "broker"}
_LISTENER = re.compile(r"^([A-Za-z][A-Za-z0-9_]*)://(\[[0-9a-fA-F:.]*\]|[A-Za-z0-9_.-]*):(\d{1,5})$")


def parse_listeners(text: str, key: str) -> dict[str, tuple[str, int]]:
    """``PLAINTEXT://host:9092,CONTROLLER://:9093`` -> {name: (host, port)}."""
    out: dict[str, tuple[str, int]] = {}
    for part in (p.strip() for p in text.split(",") if p.strip()):
        m = _LISTENER.match(part)
        if not m or not 0 < int(m.group(3)) < 65536:
            raise ConfigError(f"bad {key} entry {part!r}: expected NAME://HOST:PORT, e.g. CONTROLLER://localhost:9093")
        name = m.group(1).upper()
        if name in out:
            raise ConfigError(f"listener {name} appears twice in {key}")
        out[name] = (m.group(2).strip("[]"), int(m.group(3)))
    return out


@dataclass(frozen=True, slots=True)
class ServerConfig:
    node_id: int
    roles: frozenset[str]
    voters: dict[int, str]
    listeners: dict[str, tuple[str, int]]
    advertised: dict[str, tuple[str, int]]
    controller_listener: str
    metadata_log_dir: str
    log_dirs: tuple[str, ...]
    props: dict[str, str] = field(default_factory=dict)
    #: How each listener is served (listener.security.protocol.map and the ssl.* keys).
    security: dict[str, ListenerSecurity] = field(default_factory=dict)
    #: What this server dials the controllers with: the controller listener's protocol, its own
    #: key store and trust store (Kafka: the controller listener's settings on every node).
    controller_tls: TLSConfig | None = None
    bootstrap_servers: tuple[str, ...] = ()  # controller.quorum.bootstrap.servers

    # -- the values of the keys, typed, with their defaults (common.server_keys) ---------------

    def value(self, key: str) -> Any:
        """``key``'s value, or its default (None when it has none); KeyError for a key that is
        not in the table, so that every key a server reads is declared and documented."""
        return SERVER_KEYS.value(self.props, key)

    @property
    def is_controller(self) -> bool:
        return "controller" in self.roles

    @property
    def is_broker(self) -> bool:
        return "broker" in self.roles

    def controller_address(self) -> str:
        """This controller's advertised HOST:PORT: its entry in the static voters, else its
        advertised controller listener (a dynamic quorum's voters record it when added)."""
        if self.node_id in self.voters:
            return self.voters[self.node_id]
        host, port = self.advertised[self.controller_listener]
        return f"{host}:{port}"

    def quorum_bootstrap(self) -> list[str]:
        """HOST:PORT of controllers to find the quorum through: the static voters, else
        controller.quorum.bootstrap.servers (brokers, tools and observers use either)."""
        return list(self.voters.values()) if self.voters else list(self.bootstrap_servers)

    def controller_bind(self) -> str:
        host, port = self.listeners[self.controller_listener]
        return f"{host or '0.0.0.0'}:{port}"

    def broker_listeners(self) -> dict[str, tuple[str, int]]:
        return {n: hp for n, hp in self.advertised.items() if n != self.controller_listener}

    def prometheus_listener(self) -> tuple[str, int] | None:
        """(host, port) of ``prometheus.listener``, None when unset (no metrics are served)."""
        raw = self.value(PROMETHEUS_LISTENER)
        return parse_host_port(raw, PROMETHEUS_LISTENER) if raw else None

    def _typed(self, key: str, kind: str) -> Any:
        """The typed reads are for keys with a default, so they never answer None."""
        spec = SERVER_KEYS[key]
        if spec.type != kind or spec.default is None:
            raise TypeError(f"{key} is a {spec.type} with default {spec.default!r}: read it with value()")
        return self.value(key)

    # The typed reads come last, str the very last: each name (int, list, str, ...) shadows
    # the builtin in the annotations that follow it in the class.

    def int(self, key: str) -> int:
        return self._typed(key, "int")

    def bool(self, key: str) -> bool:
        return self._typed(key, "boolean")

    def float(self, key: str) -> float:
        return self._typed(key, "double")

    def list(self, key: str) -> tuple[str, ...]:
        return self._typed(key, "list")

    def str(self, key: str) -> str:
        return self._typed(key, "string")


def _check_protocol_map(props: dict[str, str], listeners: dict[str, tuple[str, int]], controller: str) -> None:
    """An explicit ``listener.security.protocol.map`` names every listener this server serves or
    dials (the controller listener): one left out or misspelt would otherwise be served in
    plaintext while its owner believes it is TLS (Kafka refuses it too: "No security protocol
    defined for listener"). Entries for other names are allowed, as in Kafka's default map, so
    one map can serve every node."""
    mapped = security_protocol_map(props.get("listener.security.protocol.map", ""))
    if not mapped:
        return
    known = [*listeners, *([] if controller in listeners else [controller])]
    missing = [n for n in known if n not in mapped]
    if missing:
        raise ConfigError(f"No security protocol defined for listener {missing[0]} in listener.security.protocol.map "
                          f"(it names {', '.join(mapped)})")


def load(path: str) -> ServerConfig:
    return from_properties(read_properties(path), path)


def from_properties(props: dict[str, str], source: str = "config") -> ServerConfig:
    if "node.id" not in props:
        raise ConfigError(f"{source}: node.id is required")
    try:
        SERVER_KEYS.validate(props)
    except ConfigError as e:
        raise ConfigError(f"{source}: {e}") from None
    node_id: int = SERVER_KEYS.value(props, "node.id")
    roles_raw = props.get("process.roles", "")
    roles = frozenset(r.strip() for r in roles_raw.split(",") if r.strip())
    if not roles or not roles <= ROLES:
        raise ConfigError(f"{source}: process.roles={roles_raw!r}: use controller, broker, or broker,controller "
                          f"(ZooKeeper mode is not supported)")
    voters = parse_voters(props[VOTERS]) if props.get(VOTERS, "").strip() else {}
    try:
        bootstrap = tuple(host_ports(props.get(BOOTSTRAP_SERVERS, "")))
    except ValueError as e:
        raise ConfigError(f"{source}: bad {BOOTSTRAP_SERVERS} entry {str(e)!r}: expected HOST:PORT[,HOST:PORT...], "
                          f"e.g. controller1:9093,controller2:9093") from None
    if not voters and not bootstrap:
        raise ConfigError(f"{source}: set {VOTERS} (ID@HOST:PORT,..., a static quorum) or {BOOTSTRAP_SERVERS} "
                          f"(HOST:PORT,..., a quorum whose voters change with kraft quorum add-controller)")
    listeners = parse_listeners(props.get("listeners", ""), "listeners")
    controller_listener = (SERVER_KEYS.value(props, "controller.listener.names") or ("CONTROLLER",))[0].upper()
    if "controller" in roles:
        if voters and node_id not in voters:
            raise ConfigError(f"{source}: node.id={node_id} has the controller role but is not in "
                              f"{VOTERS} ({props[VOTERS]}); to add a controller to a running quorum, "
                              f"use {BOOTSTRAP_SERVERS} instead")
        if controller_listener not in listeners:
            raise ConfigError(f"{source}: listeners must include {controller_listener}://HOST:PORT for the controller role")
        if voters and listeners[controller_listener][1] != int(voters[node_id].rsplit(":", 1)[1]):
            raise ConfigError(f"{source}: the {controller_listener} listener port "
                              f"{listeners[controller_listener][1]} differs from this node's entry in "
                              f"controller.quorum.voters ({voters[node_id]})")
    if "broker" in roles and not [n for n in listeners if n != controller_listener]:
        raise ConfigError(f"{source}: the broker role needs a listener other than {controller_listener}, "
                          f"e.g. listeners=PLAINTEXT://:9092")
    advertised = dict(listeners)
    if props.get("advertised.listeners"):
        advertised.update(parse_listeners(props["advertised.listeners"], "advertised.listeners"))
    host = socket.gethostname()
    advertised = {n: (h or host, p) for n, (h, p) in advertised.items()}
    log_dirs = SERVER_KEYS.value(props, "log.dirs") or SERVER_KEYS.value(props, "log.dir") or ()
    metadata_dir = SERVER_KEYS.value(props, "metadata.log.dir") or (log_dirs[0] if log_dirs else "")
    if not metadata_dir:
        raise ConfigError(f"{source}: set metadata.log.dir (or log.dirs)")
    if "broker" in roles and not log_dirs:
        raise ConfigError(f"{source}: the broker role needs log.dirs for partition data")
    try:
        _check_protocol_map(props, listeners, controller_listener)
        security = {name: listener_security(props, name) for name in listeners}
        served = security.get(controller_listener)
        if served is not None:
            served.check_grpc(controller_listener)
        # A controller dials its peers with what it serves their listener with; a broker reads
        # the controller listener's settings for that alone.
        controller_tls = served.tls if served is not None else connecting_tls(props, controller_listener)
        cfg = ServerConfig(node_id, roles, voters, listeners, advertised, controller_listener, metadata_dir,
                           log_dirs, dict(props), security, controller_tls, bootstrap)
        cfg.prometheus_listener()
    except ConfigError as e:
        raise ConfigError(f"{source}: {e}") from None
    return cfg
