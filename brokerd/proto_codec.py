"""The gRPC front end's codec: a domain dataclass (``requests``, ``group_requests``) from the
protobuf message of the same shape in ``protos/broker.proto``, and back, field by field by
name. A name one side lacks raises AttributeError at once, so the two shapes cannot drift
apart silently; ``X | None`` fields are protobuf ``optional`` (or message) fields, absent
when None. A field with ``metadata={"wire": False}`` is the domain's own, which its gRPC
service puts on the wire itself (a fetch answer's stored frames: ``grpc_fetch_answer``)."""
from __future__ import annotations

from dataclasses import fields, is_dataclass
from functools import cache
from types import NoneType, UnionType
from typing import Any, TypeVar, get_args, get_origin, get_type_hints

from google.protobuf.message import Message

D = TypeVar("D")
M = TypeVar("M", bound=Message)

_ENTITY, _ENTITIES, _VALUE, _VALUES, _MESSAGE = range(5)


@cache
def _plan(cls: type) -> tuple[tuple[str, int, Any, bool], ...]:
    """Each field of dataclass ``cls``: its name, kind, nested class, and whether it may be None."""
    hints = get_type_hints(cls)
    out = []
    for f in fields(cls):
        if f.metadata.get("wire") is False:
            continue
        t, optional = hints[f.name], False
        if get_origin(t) is UnionType:
            t, optional = next(a for a in get_args(t) if a is not NoneType), True
        if get_origin(t) is list:
            inner = get_args(t)[0]
            out.append((f.name, _ENTITIES if is_dataclass(inner) else _VALUES, inner, optional))
        elif is_dataclass(t):
            out.append((f.name, _ENTITY, t, optional))
        elif isinstance(t, type) and issubclass(t, Message):
            out.append((f.name, _MESSAGE, t, optional))
        else:
            out.append((f.name, _VALUE, t, optional))
    return tuple(out)


def to_domain(cls: type[D], msg: Message) -> D:
    """The dataclass ``cls`` with ``msg``'s values (a nested record batch is shared, not copied)."""
    kwargs: dict[str, Any] = {}
    # a class is Hashable, but mypy does not see it for type[D] (functools.cache's argument)
    for name, kind, target, optional in _plan(cls):  # type: ignore[arg-type]
        if optional and not msg.HasField(name):
            kwargs[name] = None
        elif kind == _ENTITIES:
            kwargs[name] = [to_domain(target, m) for m in getattr(msg, name)]
        elif kind == _VALUES:
            kwargs[name] = list(getattr(msg, name))
        elif kind == _ENTITY:
            kwargs[name] = to_domain(target, getattr(msg, name))
        else:
            kwargs[name] = getattr(msg, name)
    return cls(**kwargs)


def to_wire(cls: type[M], obj: Any) -> M:
    """The protobuf message ``cls`` with dataclass ``obj``'s values."""
    msg = cls()
    _fill(msg, obj)
    return msg


def _fill(msg: Message, obj: Any) -> None:
    for name, kind, _, _ in _plan(type(obj)):  # type: ignore[arg-type]  # as in to_domain
        v = getattr(obj, name)
        if v is None:
            continue
        if kind == _ENTITIES:
            repeated = getattr(msg, name)
            for x in v:
                _fill(repeated.add(), x)
        elif kind == _VALUES:
            getattr(msg, name).extend(v)
        elif kind == _ENTITY:
            inner = getattr(msg, name)
            inner.SetInParent()
            _fill(inner, v)
        elif kind == _MESSAGE:
            getattr(msg, name).CopyFrom(v)
        else:
            setattr(msg, name, v)
