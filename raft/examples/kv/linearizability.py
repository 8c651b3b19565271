"""A linearizability checker for concurrent client histories of a key-value store.

Fault-injection tests run clients doing ``put``, ``get``, ``delete`` and ``cas`` against a
cluster while leaders die, pause and get partitioned. Each client records what it asked and
what it got back (:class:`HistoryRecorder`), and :func:`check` decides whether one order of
all the operations, consistent with real time, explains every result. Operations on
different keys are independent (P-compositionality), so each key is checked on its own with
a Wing-Gong / Lowe search memoized on (set of linearized operations, value) as in Porcupine.

Outcomes: ``ok`` (the result is known), ``unknown`` (a timeout or a broken connection: the
operation may take effect at any time after its call, or never, so its return time is
+infinity) and ``failed`` (definitely not applied, e.g. NotLeader before appending: dropped).
Every key starts absent (``None``). Values are compared with ``==``. An operation's call and
return at the same instant as another's count as concurrent.

A violation comes with a small window of operations that no order can explain. A search that
exceeds its budget is reported as *inconclusive*, never as a pass.

    rec = HistoryRecorder()
    op = rec.invoke(client_id, "cas", "k", "old", "new")   # just before sending
    rec.ok(op, True)          # or rec.unknown(op) on timeout, rec.fail(op) on NotLeader
    result = check(rec.history())
    assert result.ok, result.explanation
"""
from __future__ import annotations

import dataclasses
import math
import threading
import time
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

__all__ = ["PUT", "GET", "DELETE", "CAS", "Outcome", "Status", "Operation", "HistoryRecorder",
           "KeyResult", "CheckResult", "check"]

PUT, GET, DELETE, CAS = "put", "get", "delete", "cas"
_ARITY = {PUT: 1, GET: 0, DELETE: 0, CAS: 2}
_K_GET, _K_PUT, _K_DEL, _K_CAS = range(4)
_KIND_CODE = {GET: _K_GET, PUT: _K_PUT, DELETE: _K_DEL, CAS: _K_CAS}

# Real histories need a few thousand states; a pathological one reaches 500,000 in ~5 s, ~150 MB.
DEFAULT_MAX_STATES = 500_000
DEFAULT_EXPLAIN_STATES = 300_000


class Outcome(str, Enum):
    PENDING = "pending"  # not finished when the history was taken: checked as unknown
    OK = "ok"
    UNKNOWN = "unknown"
    FAILED = "failed"


class Status(str, Enum):
    LINEARIZABLE = "linearizable"
    NOT_LINEARIZABLE = "not linearizable"
    INCONCLUSIVE = "inconclusive"


@dataclass(slots=True, eq=False)
class Operation:
    """One client operation. ``args``: ``(value,)`` for put, ``(expected, new)`` for cas.
    ``result``: the value read for get, True/False for cas, None for put and delete (ignored).
    ``ret`` only matters when the outcome is ok. Compared by identity: it is a handle."""

    client: Hashable
    kind: str
    key: Hashable
    args: tuple[Any, ...] = ()
    call: float = 0.0
    ret: float = math.inf
    outcome: Outcome = Outcome.OK
    result: Any = None
    id: int = -1  # invocation number, set by HistoryRecorder

    def __post_init__(self) -> None:
        self.args = tuple(self.args)
        _validate(self.kind, self.args)
        self.outcome = Outcome(self.outcome)

    def describe(self, t0: float = 0.0) -> str:
        """``client 2  cas('k', 1, 2) -> True  [0.100, 0.250] ok``, times relative to ``t0``."""
        text = f"{self.kind}({', '.join(repr(a) for a in (self.key, *self.args))})"
        if self.outcome is Outcome.OK and self.kind in (GET, CAS):
            text += f" -> {self.result!r}"
        end = f"{self.ret - t0:.3f}" if self.outcome is Outcome.OK else "?"
        times = f"[{self.call - t0:.3f}, {end}]"
        return f"client {self.client!s:<4} {text:<30} {times}  {self.outcome.value}"


def _validate(kind: str, args: tuple[Any, ...]) -> None:
    if kind not in _ARITY:
        raise ValueError(f"unknown operation kind {kind!r} (expected put/get/delete/cas)")
    if len(args) != _ARITY[kind]:
        raise ValueError(f"{kind} takes {_ARITY[kind]} argument(s), got {args!r}")


class HistoryRecorder:
    """Collects a history from threaded or asyncio clients.

    Call :meth:`invoke` just before sending a request and :meth:`ok` / :meth:`unknown` /
    :meth:`fail` just after its answer (or timeout): the recorded interval then contains the
    real one, which can only make the check more permissive, never wrong. One short lock, never
    held across an await, makes it safe from threads and coroutines alike.
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._ops: list[Operation] = []

    def invoke(self, client: Hashable, kind: str, key: Hashable, *args: Any) -> Operation:
        _validate(kind, args)
        with self._lock:
            op = Operation(client, kind, key, args, call=self._clock(), outcome=Outcome.PENDING,
                           id=len(self._ops))
            self._ops.append(op)
        return op

    def ok(self, op: Operation, result: Any = None) -> None:
        self._finish(op, Outcome.OK, result)

    def unknown(self, op: Operation) -> None:
        self._finish(op, Outcome.UNKNOWN, None)

    def fail(self, op: Operation) -> None:
        self._finish(op, Outcome.FAILED, None)

    def _finish(self, op: Operation, outcome: Outcome, result: Any) -> None:
        with self._lock:
            if op.outcome is not Outcome.PENDING:
                raise ValueError(f"operation #{op.id} already finished as {op.outcome.value}")
            op.ret = math.inf if outcome is Outcome.UNKNOWN else self._clock()
            op.result = result
            op.outcome = outcome

    def history(self) -> list[Operation]:
        """A snapshot (copies) in invocation order, so positions equal ids."""
        with self._lock:
            return [dataclasses.replace(op) for op in self._ops]

    def __len__(self) -> int:
        with self._lock:
            return len(self._ops)


@dataclass(slots=True)
class KeyResult:
    """The verdict on one key; for a violation, the window of operations that proves it."""

    key: Hashable
    status: Status
    operations: int  # checked (failed ones and unanswered gets are dropped)
    unknown: int
    states: int  # configurations explored, explanation included
    elapsed: float
    explanation: str = ""
    window: list[Operation] = field(default_factory=list)  # violation: ops no order explains
    start_values: list[Any] = field(default_factory=list)  # the key's possible values before it
    culprit: Operation | None = None  # the op whose return no order could get past


@dataclass(slots=True)
class CheckResult:
    """``ok`` only when proven linearizable; ``status`` tells a violation from inconclusive."""

    status: Status
    explanation: str
    keys: dict[Hashable, KeyResult]
    states: int
    elapsed: float

    @property
    def ok(self) -> bool:
        return self.status is Status.LINEARIZABLE

    @property
    def inconclusive(self) -> bool:
        return self.status is Status.INCONCLUSIVE

    @property
    def violations(self) -> list[KeyResult]:
        return [r for r in self.keys.values() if r.status is Status.NOT_LINEARIZABLE]

    def __str__(self) -> str:
        return self.explanation


# ------------------------------------------------------------------------------ checking


def check(history: Iterable[Operation], *, max_states: int = DEFAULT_MAX_STATES,
          timeout: float | None = None,
          explain_states: int = DEFAULT_EXPLAIN_STATES) -> CheckResult:
    """Is ``history`` linearizable? Each key may explore ``max_states`` configurations, and the
    whole check take ``timeout`` seconds, before it is declared inconclusive; a violation is
    then narrowed down to a small window within ``explain_states`` more. Operations are named
    ``#i`` by their position in ``history``."""
    start = time.monotonic()
    deadline = None if timeout is None else start + timeout
    ops = list(history)
    t0 = min((op.call for op in ops), default=0.0)
    by_key: dict[Hashable, list[tuple[int, Operation]]] = {}
    for pos, op in enumerate(ops):
        if op.outcome is Outcome.OK and op.ret < op.call:
            raise ValueError(f"operation #{pos} returns ({op.ret}) before its call ({op.call})")
        if op.outcome is not Outcome.FAILED:
            by_key.setdefault(op.key, []).append((pos, op))
    results = {key: _check_key(key, key_ops, max_states, deadline, explain_states, t0)
               for key, key_ops in by_key.items()}
    states = sum(r.states for r in results.values())
    elapsed = time.monotonic() - start
    bad = [r for r in results.values() if r.status is Status.NOT_LINEARIZABLE]
    unsure = [r for r in results.values() if r.status is Status.INCONCLUSIVE]
    summary = (f"{sum(r.operations for r in results.values())} operations on {len(results)} "
               f"key(s), {states} states explored in {elapsed:.3f}s")
    if bad:
        status = Status.NOT_LINEARIZABLE
        text = "\n".join([f"NOT LINEARIZABLE ({summary})"] + [r.explanation for r in bad + unsure])
    elif unsure:
        status = Status.INCONCLUSIVE
        text = "\n".join([f"INCONCLUSIVE ({summary}): nothing was proven either way"]
                         + [r.explanation for r in unsure])
    else:
        status = Status.LINEARIZABLE
        text = f"linearizable ({summary})"
    return CheckResult(status, text, results, states, elapsed)


@dataclass(slots=True)
class _Op:
    """An operation ready for the search, its values interned as small ints (None is 0)."""

    pos: int  # position in the checked history
    src: Operation
    kind: int
    a: int  # put: value; cas: expected
    b: int  # cas: new value
    res: int  # get: value read; cas: 1 or 0; -1 when unknown
    known: bool
    call: float
    ret: float  # +inf when unknown


class _Values:
    """Interns values, so that states hash and compare as small ints."""

    def __init__(self) -> None:
        self.values: list[Any] = [None]
        self._ids: dict[Any, int] = {}
        self._unhashable: list[tuple[Any, int]] = []

    def id(self, value: Any) -> int:
        if value is None:
            return 0
        try:
            found = self._ids.get(value)
        except TypeError:  # a list, a dict...: compare with ==
            found = next((i for v, i in self._unhashable if v == value), None)
            if found is None:
                found = len(self.values)
                self.values.append(value)
                self._unhashable.append((value, found))
            return found
        if found is None:
            found = self._ids[value] = len(self.values)
            self.values.append(value)
        return found


def _prepare(key_ops: list[tuple[int, Operation]], values: _Values) -> list[_Op]:
    prepared = []
    for pos, op in key_ops:
        known = op.outcome is Outcome.OK
        if op.kind == GET and not known:
            continue  # an unanswered read neither constrains nor changes anything
        a = b = 0
        res = -1
        if op.kind == PUT:
            a = values.id(op.args[0])
        elif op.kind == CAS:
            a, b = values.id(op.args[0]), values.id(op.args[1])
            if known:
                if not isinstance(op.result, bool):
                    raise ValueError(f"operation #{pos}: a cas result is True or False, "
                                     f"not {op.result!r}")
                res = int(op.result)
        elif op.kind == GET:
            res = values.id(op.result)
        prepared.append(_Op(pos, op, _KIND_CODE[op.kind], a, b, res, known, op.call,
                            op.ret if known else math.inf))
    return prepared


def _observed(ops: Iterable[_Op]) -> set[int]:
    """The values these operations compare the key with."""
    seen: set[int] = set()
    for o in ops:
        if o.kind == _K_GET:
            seen.add(o.res)
        elif o.kind == _K_CAS:
            seen.add(o.a)
    return seen


def _written(o: _Op) -> int | None:
    """The value an operation certainly leaves, if it writes one."""
    if o.kind == _K_PUT:
        return o.a
    if o.kind == _K_DEL:
        return 0
    if o.kind == _K_CAS and o.res == 1:
        return o.b
    return None


_Todo = list[tuple[int, int, int]]  # (unknown write entry or 0, call entry, value after)


@dataclass(slots=True)
class _Search:
    status: Status
    states: int


def _search(ops: Sequence[_Op], inits: Sequence[int], budget: int,
            deadline: float | None) -> _Search:
    """Depth-first search for a linearization, after Wing & Gong, Lowe and Porcupine.

    Calls and returns sit in a doubly linked list in time order. The operations that may take
    effect next are the calls before the first remaining return (each must take effect before
    it returns). A step linearizes one and lifts its events out of the list; the memo skips
    any (ok set, value) reached before, since it failed whatever the path. Unknown operations
    have no return: they may take effect at any time after their call, or never, so the search
    succeeds once every ok operation is in. One memo serves every initial value.

    Reductions, each keeping some linearization if there is one:
    - a read the current value satisfies goes next, alone (see ``read_now``);
    - a configuration is dead once an ok operation still to come needs a value (a get of it, a
      successful cas from it) that the key does not hold and no remaining operation can write;
    - an unknown put or delete takes effect only right before an operation that observes its
      value (a get returning it, a cas expecting it, a failed cas it makes fail): any
      linearization can be rearranged so, by moving it later or dropping it. One whose value
      nothing observes never does. An unknown cas takes effect only if it changes the value;
    - (ok set K, unknown set U, value) is skipped once (K, U', value) was explored with U' a
      subset of U: the latter can do anything the former can (the rest are optional).
    The first two cut the dead ends of concurrent writes, the last two the doubling of every
    configuration after each unknown operation.
    """
    observed = _observed(ops)
    failed_cas = any(o.kind == _K_CAS and o.res == 0 for o in ops)
    present = [i for i, o in enumerate(ops)
               if o.known or failed_cas or o.kind == _K_CAS or _written(o) in observed]
    events = sorted([(ops[i].call, 0, i) for i in present]
                    + [(o.ret, 1, i) for i, o in enumerate(ops) if o.known])
    m = len(events)
    op_of = [0] * (m + 2)
    is_ret = [False] * (m + 1) + [True]  # the tail counts as a return: it ends every walk
    match = [0] * (m + 2)  # call entry -> its return entry, 0 when unknown
    call_entry: dict[int, int] = {}
    for e, (_, r, i) in enumerate(events, 1):
        op_of[e] = i
        if r:
            is_ret[e] = True
            match[call_entry[i]] = e
        else:
            call_entry[i] = e
    nxt = list(range(1, m + 3))  # 0 is the head, m + 1 the tail
    prv = list(range(-1, m + 1))
    kind = [o.kind for o in ops]
    arg_a = [o.a for o in ops]
    arg_b = [o.b for o in ops]
    res = [o.res for o in ops]
    known = [o.known for o in ops]
    lazy = [not o.known and o.kind in (_K_PUT, _K_DEL) for o in ops]
    readonly = [o.known and (o.kind == _K_GET or (o.kind == _K_CAS and o.res == 0)) for o in ops]
    lazy_entries = [e for e in range(1, m + 1) if not is_ret[e] and lazy[op_of[e]]]
    bit = [1 << i for i in range(len(ops))]
    n_known = sum(known)
    cache: dict[tuple[int, int], list[int]] = {}  # (ok set, value) -> unknown sets explored
    states = 0

    # For dead configurations: how many remaining ops may write / need each value, and the
    # values needed that nothing can write any more.
    writes = [-1] * len(ops)
    needs = [-1] * len(ops)
    writers: dict[int, int] = {}
    needers: dict[int, int] = {}
    for i in present:
        o = ops[i]
        if o.kind == _K_PUT or o.kind == _K_DEL or (o.kind == _K_CAS and o.res != 0):
            writes[i] = o.a if o.kind == _K_PUT else o.b if o.kind == _K_CAS else 0
            writers[writes[i]] = writers.get(writes[i], 0) + 1
        if o.known and (o.kind == _K_GET or (o.kind == _K_CAS and o.res == 1)):
            needs[i] = o.res if o.kind == _K_GET else o.a
            needers[needs[i]] = needers.get(needs[i], 0) + 1
    for v in needers:
        writers.setdefault(v, 0)
    for v in writers:
        needers.setdefault(v, 0)
    unwritable = {v for v, n in needers.items() if n and not writers[v]}

    def take(i: int) -> None:
        if (v := writes[i]) >= 0:
            writers[v] -= 1
            if not writers[v] and needers[v]:
                unwritable.add(v)
        if (v := needs[i]) >= 0:
            needers[v] -= 1
            if not needers[v]:
                unwritable.discard(v)

    def untake(i: int) -> None:
        if (v := needs[i]) >= 0:
            needers[v] += 1
            if not writers[v]:
                unwritable.add(v)
        if (v := writes[i]) >= 0:
            writers[v] += 1
            unwritable.discard(v)

    def step(i: int, state: int) -> int:
        """The value after operation i from ``state``, or -1 if its result rules that out."""
        k = kind[i]
        if k == _K_GET:
            return state if res[i] == state else -1
        if k == _K_PUT:
            return arg_a[i]
        if k == _K_DEL:
            return 0
        if state == arg_a[i]:
            return -1 if res[i] == 0 else arg_b[i]
        return -1 if res[i] == 1 else state

    def read_now(state: int) -> _Todo | None:
        """A read (get, failed cas) that ``state`` satisfies is the only next step worth trying:
        any linearization from here can move it to the front, as it changes nothing and all
        that returned before its call is in already."""
        e = nxt[0]
        while not is_ret[e]:
            i = op_of[e]
            if readonly[i] and ((res[i] == state) if kind[i] == _K_GET else (arg_a[i] != state)):
                return [(0, e, state)]
            e = nxt[e]
        return None

    def pairs(state: int, umask: int, first_ret: int) -> _Todo:
        """(unknown put or delete, call that observes it, value after) for each pair that may
        come next."""
        by_value: dict[int, list[int]] = {}
        for w in lazy_entries:
            if w > first_ret:
                break
            v = writes[op_of[w]]
            if v != state and not umask & bit[op_of[w]]:
                by_value.setdefault(v, []).append(w)
        if not by_value:
            return []
        found = []
        c = nxt[0]
        while c != first_ret:
            i = op_of[c]
            if kind[i] == _K_GET:
                found += [(w, c, res[i]) for w in by_value.get(res[i], ())]
            elif kind[i] == _K_CAS:
                new = step(i, arg_a[i])
                if new >= 0:
                    found += [(w, c, new) for w in by_value.get(arg_a[i], ())]
                if res[i] == 0 and arg_a[i] == state:
                    found += [(w, c, v) for v, ws in by_value.items() for w in ws]
            c = nxt[c]
        return found

    def lift(e: int) -> None:
        nxt[prv[e]] = nxt[e]
        prv[nxt[e]] = prv[e]

    def unlift(e: int) -> None:
        nxt[prv[e]] = e
        prv[nxt[e]] = e

    if deadline is not None and time.monotonic() >= deadline:
        return _Search(Status.INCONCLUSIVE, states)
    for init in inits:
        if n_known == 0:
            return _Search(Status.LINEARIZABLE, states)
        if unwritable and (len(unwritable) > 1 or init not in unwritable):
            continue
        state, kmask, umask, remaining = init, 0, 0, n_known
        # frames: resume point, todo, at, value, ok set, unknown set, unknown write, call
        stack: list[tuple[int, _Todo | None, int, int, int, int, int, int]] = []
        # A configuration walks its candidates one by one from the head (``e`` is where the walk
        # resumes), then at the first return tries the pairs; ``todo`` holds the pairs, or the
        # one read of ``read_now``, and ``at`` the next to try.
        e, todo, at = nxt[0], read_now(state), 0
        while True:
            if todo is None:
                if is_ret[e]:
                    todo, at = pairs(state, umask, e), 0
                    continue
                c = e
                e = nxt[e]
                i = op_of[c]
                if lazy[i]:
                    continue
                k = kind[i]
                if k == _K_GET:
                    new = state if res[i] == state else -1
                elif k == _K_PUT:
                    new = arg_a[i]
                elif k == _K_DEL:
                    new = 0
                elif state == arg_a[i]:
                    new = -1 if res[i] == 0 else arg_b[i]
                else:
                    new = -1 if res[i] == 1 else state
                if new < 0 or (new == state and not known[i]):
                    continue  # ruled out, or an unknown cas without effect
                w = 0
            elif at < len(todo):
                w, c, new = todo[at]
                at += 1
            else:  # this configuration is exhausted: backtrack
                if not stack:
                    break
                e, todo, at, state, kmask, umask, w, c = stack.pop()
                untake(op_of[c])
                if w:  # undo the lifts in reverse order
                    untake(op_of[w])
                    unlift(w)
                if match[c]:
                    unlift(match[c])
                    remaining += 1
                unlift(c)
                continue
            i = op_of[c]
            if known[i]:
                new_k, new_u = kmask | bit[i], umask
            else:
                new_k, new_u = kmask, umask | bit[i]
            if w:
                new_u |= bit[op_of[w]]
            seen = cache.get((new_k, new))
            if seen is None:
                cache[new_k, new] = [new_u]
            elif new_u in seen:
                continue
            else:
                subsumed = False
                for u in seen:
                    if not u & ~new_u:
                        subsumed = True
                        break
                if subsumed:
                    continue
                seen.append(new_u)
            if w:
                take(op_of[w])
            take(i)
            if unwritable and (len(unwritable) > 1 or new not in unwritable):
                untake(i)  # dead
                if w:
                    untake(op_of[w])
                continue
            states += 1
            if states > budget or (deadline is not None and not states & 1023
                                   and time.monotonic() >= deadline):
                return _Search(Status.INCONCLUSIVE, states)
            stack.append((e, todo, at, state, kmask, umask, w, c))
            state, kmask, umask = new, new_k, new_u
            lift(c)
            if match[c]:
                lift(match[c])
                remaining -= 1
                if remaining == 0:
                    return _Search(Status.LINEARIZABLE, states)
            if w:
                lift(w)
            e, todo, at = nxt[0], read_now(state), 0
    return _Search(Status.NOT_LINEARIZABLE, states)


def _check_key(key: Hashable, key_ops: list[tuple[int, Operation]], max_states: int,
               deadline: float | None, explain_states: int, t0: float) -> KeyResult:
    start = time.monotonic()
    values = _Values()
    ops = _prepare(key_ops, values)
    unknown = sum(not o.known for o in ops)
    found = _search(ops, [0], max_states, deadline)
    result = KeyResult(key, found.status, len(ops), unknown, found.states, 0.0)
    if found.status is Status.INCONCLUSIVE:
        result.explanation = (
            f"key {key!r}: INCONCLUSIVE: the search stopped after {found.states} states "
            f"({len(ops)} operations, {unknown} unknown) at its guard (max_states={max_states}"
            f"{' or the timeout' if deadline is not None else ''}). Raise it, or keep fewer "
            f"operations in flight or fewer unknown outcomes per key.")
    elif found.status is Status.NOT_LINEARIZABLE:
        window = _explain(ops, explain_states, deadline)
        result.states += window.states
        result.window = [o.src for o in window.ops]
        result.start_values = [values.values[s] for s in window.starts]
        result.culprit = window.culprit.src
        result.explanation = _describe(key, window, values, len(ops), t0)
    result.elapsed = time.monotonic() - start
    return result


# --------------------------------------------------------------------------- explanation


@dataclass(slots=True)
class _Window:
    ops: list[_Op]  # ok operations that no order explains
    starts: list[int]  # the values the key may hold when the window begins
    culprit: _Op
    before: int  # operations that returned before the window, summed up by ``starts``
    states: int
    minimal: bool


def _relax(o: _Op) -> _Op | None:
    """``o`` with its outcome forgotten: a read vanishes, a write becomes unknown. Any
    linearization of a history is one of the relaxed history, so if the relaxed history still
    fails, that proves the original fails as well."""
    if o.kind == _K_GET or (o.kind == _K_CAS and o.res == 0):
        return None
    return dataclasses.replace(o, res=-1, known=False, ret=math.inf)


def _representatives(starts: list[int], window: list[_Op]) -> list[int]:
    """Values the window never reads or compares are interchangeable: keep one of them."""
    seen = _observed(window)
    keep = [s for s in starts if s in seen]
    other = next((s for s in starts if s not in seen), None)
    return keep + ([other] if other is not None else [])


def _explain(ops: list[_Op], budget: int, deadline: float | None) -> _Window:
    """Narrows a violation down to a window of operations that cannot be ordered.

    1. End: the earliest return such that the history up to it already fails (operations
       still running then have their outcomes forgotten), by bisection: failing is prefix-closed.
    2. Start: the latest quiescent cut (all earlier ok operations returned before any later
       call) whose suffix still fails from any value written before the cut: every order of
       the whole history puts those earlier operations first, so that is sound.
    3. Core: forget outcomes, delta-debugging style, while the window still fails.
    Each step checks a relaxation of the previous one, so the final window proves the violation.
    """
    used = 0
    exhausted = False

    def fails(window: list[_Op], starts: list[int], limit: int) -> bool:
        nonlocal used, exhausted
        found = _search(window, _representatives(starts, window),
                        min(limit, max(budget - used, 0)), deadline)
        used += found.states
        exhausted |= found.status is Status.INCONCLUSIVE
        return found.status is Status.NOT_LINEARIZABLE

    def upto(end: tuple[float, int, int]) -> list[_Op]:
        """The history as it stood at return event ``end``, ordered by call."""
        prefix = []
        for i, o in enumerate(ops):
            if o.call > end[0]:
                continue  # called after: cannot matter
            if o.known and (o.ret, 1, i) > end:  # still running: outcome unknown
                if (r := _relax(o)) is not None:
                    prefix.append(r)
            else:
                prefix.append(o)
        return sorted(prefix, key=lambda o: o.call)

    returns = sorted((o.ret, 1, i) for i, o in enumerate(ops) if o.known)  # as _search orders them
    lo, hi = 0, len(returns) - 1  # the whole history, up to its last return, fails
    while lo < hi:
        mid = (lo + hi) // 2
        if fails(upto(returns[mid]), [0], budget // 8):
            hi = mid
        else:
            lo = mid + 1
    culprit = ops[returns[hi][2]]
    prefix = upto(returns[hi])

    window, starts, before = prefix, [0], 0
    cuts, latest_ret = [], -math.inf
    for i, o in enumerate(prefix):
        if i and latest_ret < o.call:
            cuts.append(i)
        if o is culprit:
            break
        if o.known:
            latest_ret = max(latest_ret, o.ret)
    for i in reversed(cuts):
        if used >= budget // 2:
            break
        head, tail = prefix[:i], prefix[i:]
        cut_starts = sorted({0} | {w for o in head if o.known and (w := _written(o)) is not None})
        candidate = [o for o in head if not o.known] + tail
        if fails(candidate, cut_starts, budget // 4):
            window, starts, before = candidate, cut_starts, sum(o.known for o in head)
            break

    def relaxed(window: list[_Op], chunk: Iterable[_Op]) -> list[_Op]:
        ids = {id(o) for o in chunk}
        return [r for o in window if (r := _relax(o) if id(o) in ids else o) is not None]

    # The culprit alone often suffices (a value never written); else try without other reads.
    others = [o for o in window if o.known and o is not culprit]
    for chunk in (others, [o for o in others if _relax(o) is None]):
        if chunk and fails(trial := relaxed(window, chunk), starts, budget // 10):
            window = trial
            break
    # Then delta debugging on what is left: reads before writes, the culprit last.
    pending = sorted((o for o in window if o.known),
                     key=lambda o: (o is culprit, _relax(o) is not None, o.call))
    minimal, chunks = True, 2
    while pending:
        if used >= budget:
            minimal = False
            break
        size = math.ceil(len(pending) / chunks)
        for c in range(0, len(pending), size):
            if fails(trial := relaxed(window, pending[c:c + size]), starts, budget // 20):
                window = trial
                pending = pending[:c] + pending[c + size:]
                chunks = max(chunks - 1, 2)
                break
        else:
            if size == 1:
                break  # no single outcome can be forgotten: minimal
            chunks = min(chunks * 2, len(pending))
    return _Window([o for o in window if o.known], starts, culprit, before, used,
                   minimal and not exhausted)


def _describe(key: Hashable, w: _Window, values: _Values, total: int, t0: float) -> str:
    lines = [f"key {key!r}: NOT LINEARIZABLE: no order of these {len(w.ops)} operation(s) is "
             "consistent with both their results and real time "
             "(times in s since the first call):"]
    for o in w.ops:
        mark = "  <- no order explains this result" if o is w.culprit else ""
        lines.append(f"  #{o.pos:<5} {o.src.describe(t0)}{mark}")
    if not w.before:
        lines.append("  starting from the beginning of the history, where the key is absent (None)")
    else:
        shown = [s for s in w.starts if s == 0 or s in _observed(w.ops)]
        hidden = len(w.starts) - len(shown)
        lines.append(f"  starting after {w.before} operation(s) that all returned before these "
                     "were called, so the key holds None or a value they wrote: "
                     + ", ".join(repr(values.values[s]) for s in shown)
                     + (f", or {hidden} other value(s) none of these reads" if hidden else ""))
    if rest := total - len(w.ops) - w.before:
        lines.append(f"  the other {rest} operation(s) cannot help: it would still fail if each of "
                     "them took effect at any time after its call, or never")
    if not w.minimal:
        lines.append("  (the explanation's search budget ran out: the window may not be minimal)")
    return "\n".join(lines)
