"""Kafka's ConfigDef: a configuration key declared once, with its type, default, validator,
documentation, role and whether it can be changed while the cluster runs (a dynamic broker
config), so that reading, validating and documenting a key are one entry, not three places."""
from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

LONG_MAX = (1 << 63) - 1
INT_MAX = (1 << 31) - 1

#: A value's problem in words ("value 'x' is not an integer"), or None when it is good.
Validator = Callable[[str], "str | None"]


class ConfigError(ValueError):
    """A configuration value is wrong; the message says which and what is expected. The one
    config exception: a server's settings, a tool's --command-config and a client's
    properties (Kafka's ConfigException, raised before anything is sent) alike."""


def bounded_int(text: str, least: int, most: int | None = None) -> int:
    """The one parser of integer options: ``text`` as an int within [least, most], or a
    ValueError whose message callers prefix with the option's name."""
    try:
        value = int(text)
    except (TypeError, ValueError):
        raise ValueError(f"{text!r} is not an integer") from None
    if most is not None and not least <= value <= most:
        raise ValueError(f"{value} must be between {least} and {most}")
    if value < least:
        raise ValueError(f"{value} must be at least {least}")
    return value


def in_range(least: int, most: int = LONG_MAX) -> Validator:
    """An integer within [least, most] (Kafka's ``Range.between``; ``Range.atLeast`` when
    ``most`` is Long.MAX_VALUE, which the message then leaves out)."""
    def check(v: str) -> str | None:
        try:
            if bounded_int(v, least, None if most == LONG_MAX else most) > most:
                return f"value {v} must be at most {most}"
        except ValueError as e:
            return f"value {e}"
        return None
    return check


def ratio(v: str) -> str | None:
    """A number from 0 to 1."""
    try:
        n = float(v)
    except ValueError:
        return f"value {v!r} is not a number"
    return None if 0.0 <= n <= 1.0 else f"value {n} must be between 0 and 1"


def one_of(*options: str) -> Validator:
    """One of ``options`` (Kafka's ``ValidString.in``; spaces around commas do not count)."""
    def check(v: str) -> str | None:
        return None if v.replace(" ", "") in options else f"value {v!r} must be one of {', '.join(options)}"
    return check


def boolean(v: str) -> str | None:
    return None if v.strip().lower() in ("true", "false") else f"value {v!r} must be true or false"


#: The types of values, each with how a good value's text becomes the value.
CONVERT: dict[str, Callable[[str], Any]] = {
    "int": int,
    "long": int,  # Kafka's LONG: the same text, reported as its own type (DescribeConfigs' config_type)
    "double": float,
    "boolean": lambda v: v.strip().lower() == "true",
    "string": str.strip,
    "list": lambda v: tuple(p.strip() for p in v.split(",") if p.strip()),
}
CONTROLLER, BROKER, BOTH = "controller", "broker", "controller,broker"


@dataclass(frozen=True, slots=True)
class ConfigKey:
    """One key. ``default`` is the text of Kafka's default (None: none, or computed by the
    reader, which ``default_doc`` then describes); ``dynamic`` keys can also be set per broker or
    cluster-wide with ``kraft configs`` (IncrementalAlterConfigs), checked by the same validator."""

    name: str
    type: str
    default: str | None
    doc: str
    validator: Validator | None = None
    role: str = BOTH
    dynamic: bool = False
    default_doc: str | None = None
    #: How a good value's text becomes the value, when the type's conversion is not enough.
    convert: Callable[[str], Any] | None = None

    def __post_init__(self) -> None:
        if self.type not in CONVERT or self.role not in (CONTROLLER, BROKER, BOTH):
            raise ValueError(f"{self.name}: bad type {self.type!r} or role {self.role!r}")

    def problem(self, value: str) -> str | None:
        """What is wrong with ``value`` for this key, in Kafka's words, or None."""
        check = self.validator or (boolean if self.type == "boolean" else None)
        if check is not None:
            return check(value)
        if self.type in ("int", "long", "double"):
            try:
                CONVERT[self.type](value)
            except ValueError:
                return f"value {value!r} is not a number"
        return None

    def parse(self, value: str) -> Any:
        """``value`` as this key's type; ConfigError naming the key when it is not good."""
        problem = self.problem(value)
        if problem:
            raise ConfigError(f"Invalid value {value} for configuration {self.name}: {problem}")
        return (self.convert or CONVERT[self.type])(value)


class ConfigDef(Mapping[str, ConfigKey]):
    """The keys of one kind of configuration, read typed from a properties mapping."""

    def __init__(self, keys: Iterable[ConfigKey]) -> None:
        self._keys: dict[str, ConfigKey] = {}
        for key in keys:
            if key.name in self._keys:
                raise ValueError(f"{key.name} is defined twice")
            self._keys[key.name] = key

    def __getitem__(self, name: str) -> ConfigKey:
        return self._keys[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._keys)

    def __len__(self) -> int:
        return len(self._keys)

    def value(self, props: Mapping[str, str], name: str) -> Any:
        """The typed value of ``name`` in ``props``, else its default (None when it has none).
        A name the table lacks is a programming error: KeyError, so no key is read undeclared."""
        key = self._keys.get(name)
        if key is None:
            raise KeyError(f"{name} is not a declared configuration key")
        raw = props.get(name)
        if raw is None:
            return None if key.default is None else key.parse(key.default)
        return key.parse(raw)

    def validate(self, props: Mapping[str, str]) -> None:
        """Check every key of ``props`` this table declares, so that a bad value is one line at
        start, whichever part reads it and whenever; keys it does not declare are left alone
        (other parts' keys, such as ``ssl.*``)."""
        for name, raw in props.items():
            if name in self._keys:
                self._keys[name].parse(raw)

    def dynamic(self) -> dict[str, ConfigKey]:
        """The keys ``kraft configs`` may set on brokers (per broker or cluster-wide)."""
        return {n: k for n, k in self._keys.items() if k.dynamic}
