"""The linearizability checker (raft/examples/kv/linearizability.py): hand-written histories it must
accept or reject, agreement with a brute-force checker, randomized histories of a real atomic
register (and corrupted ones), its budget guard, its speed, and the history recorder."""
import asyncio
import math
import random
import threading
import time

import pytest

from raft.examples.kv.linearizability import (CheckResult, HistoryRecorder, Operation, Outcome, Status,
                                          check)

INF = math.inf


def put(client, key, value, call, ret=INF, outcome="ok"):
    return Operation(client, "put", key, (value,), call=call, ret=ret, outcome=outcome)


def get(client, key, result, call, ret=INF, outcome="ok"):
    return Operation(client, "get", key, (), call=call, ret=ret, outcome=outcome, result=result)


def delete(client, key, call, ret=INF, outcome="ok"):
    return Operation(client, "delete", key, (), call=call, ret=ret, outcome=outcome)


def cas(client, key, expected, new, result, call, ret=INF, outcome="ok"):
    return Operation(client, "cas", key, (expected, new), call=call, ret=ret, outcome=outcome,
                     result=result)


def accepted(history) -> CheckResult:
    result = check(history)
    assert result.ok, result.explanation
    assert result.status is Status.LINEARIZABLE and not result.violations
    return result


def rejected(history, key="k") -> CheckResult:
    result = check(history)
    assert result.status is Status.NOT_LINEARIZABLE, result.explanation
    assert not result.ok and not result.inconclusive
    assert [v.key for v in result.violations] == [key]
    assert f"key {key!r}" in result.explanation
    return result


def window_of(result: CheckResult, history) -> list[int]:
    """Positions in ``history`` of the operations the explanation says cannot be ordered."""
    window = result.violations[0].window
    positions = sorted(next(i for i, o in enumerate(history) if o is w) for w in window)
    for i in positions:  # each one is named in the text
        assert f"#{i} " in result.explanation
    return positions


# ---------------------------------------------------------------------- accepted histories


def test_an_empty_history_is_linearizable():
    accepted([])


def test_a_sequential_history_is_linearizable():
    accepted([
        get(1, "k", None, 0, 1),
        put(1, "k", "a", 2, 3),
        get(2, "k", "a", 4, 5),
        cas(1, "k", "a", "b", True, 6, 7),
        cas(2, "k", "a", "c", False, 8, 9),
        get(2, "k", "b", 10, 11),
        delete(1, "k", 12, 13),
        get(2, "k", None, 14, 15),
        cas(1, "k", None, "d", True, 16, 17),
        get(1, "k", "d", 18, 19),
    ])


@pytest.mark.parametrize("seen", ["a", "b"])
def test_a_get_overlapping_a_put_may_see_either_value(seen):
    accepted([put(1, "k", "a", 0, 1), put(2, "k", "b", 2, 5), get(3, "k", seen, 3, 4)])


def test_a_read_may_see_a_write_that_is_linearized_before_one_that_was_called_earlier():
    accepted([put(1, "k", "a", 0, 10), put(2, "k", "b", 1, 2), get(3, "k", "b", 3, 4),
              get(3, "k", "a", 11, 12)])


def test_operations_that_touch_at_one_instant_are_concurrent():
    # the put returns at 1.0 exactly when the get is called: either order is allowed
    accepted([put(1, "k", "a", 0, 1), get(2, "k", None, 1, 2)])


def test_concurrent_cas_success_and_failure():
    accepted([
        put(1, "k", 0, 0, 1),
        cas(2, "k", 0, 1, True, 2, 4),
        cas(3, "k", 0, 2, False, 2, 4),  # lost the race
        get(1, "k", 1, 5, 6),
    ])
    accepted([  # a chain of concurrent successful cas, in the only order that works
        put(1, "k", 0, 0, 1),
        cas(2, "k", 1, 2, True, 2, 6),
        cas(3, "k", 0, 1, True, 3, 5),
        get(1, "k", 2, 7, 8),
    ])


def test_an_unknown_put_may_take_effect_later_than_the_reads_after_its_timeout():
    accepted([
        put(1, "k", "a", 0, 1),
        put(2, "k", "b", 2, outcome="unknown"),
        get(3, "k", "a", 3, 4),  # not applied yet
        get(3, "k", "b", 5, 6),  # applied now
        get(1, "k", "b", 7, 8),
    ])


def test_an_unknown_operation_may_never_take_effect():
    accepted([
        put(1, "k", "a", 0, 1),
        put(2, "k", "b", 2, outcome="unknown"),
        cas(2, "k", "a", "c", None, 3, outcome="unknown"),
        delete(2, "k", 4, outcome="unknown"),
        get(3, "k", "a", 5, 6),
        get(3, "k", "a", 100, 101),
    ])


def test_an_unknown_cas_may_take_effect():
    accepted([put(1, "k", "a", 0, 1), cas(2, "k", "a", "c", None, 2, outcome="unknown"),
              get(3, "k", "a", 3, 4), get(3, "k", "c", 5, 6)])


def test_failed_operations_are_dropped_and_pending_ones_count_as_unknown():
    accepted([put(1, "k", "a", 0, 1, outcome="failed"), get(2, "k", None, 2, 3),
              put(1, "k", "b", 4, outcome="pending"), get(2, "k", "b", 5, 6)])


def test_keys_are_independent():
    result = accepted([put(1, "x", 1, 0, 10), put(2, "y", 2, 1, 2), get(3, "y", 2, 3, 4),
                       get(3, "x", None, 3, 4), get(3, "x", 1, 11, 12), get(2, "y", 2, 13, 14)])
    assert set(result.keys) == {"x", "y"}


# ---------------------------------------------------------------------- rejected histories


def test_a_stale_read_after_a_completed_put_is_rejected():
    history = [put(1, "k", "a", 0, 1), get(2, "k", None, 2, 3)]
    result = rejected(history)
    assert window_of(result, history) == [0, 1]
    assert result.violations[0].culprit is history[1]
    assert "no order explains this result" in result.explanation


def test_a_read_of_a_value_never_written_is_rejected():
    history = [put(1, "k", "a", 0, 1), put(2, "k", "b", 0, 2), get(3, "k", "ghost", 0.5, 3)]
    result = rejected(history)
    assert window_of(result, history) == [2]
    assert "'ghost'" in result.explanation


def test_a_read_of_a_value_written_only_after_it_returned_is_rejected():
    history = [get(1, "k", "late", 0, 1), put(2, "k", "late", 2, 3)]
    result = rejected(history)
    assert window_of(result, history) == [0]


def test_an_unknown_put_cannot_explain_a_read_that_returned_before_its_call():
    history = [get(1, "k", "b", 0, 1), put(2, "k", "b", 2, outcome="unknown")]
    rejected(history)


def test_two_successful_cas_from_the_same_old_value_are_rejected():
    history = [put(1, "k", 0, 0, 1), cas(2, "k", 0, 1, True, 2, 4), cas(3, "k", 0, 2, True, 2, 4)]
    result = rejected(history)
    assert window_of(result, history)[-2:] == [1, 2]


def test_a_lost_acknowledged_put_is_rejected():
    history = [put(1, "k", "a", 0, 1), put(1, "k", "b", 2, 3), get(2, "k", "a", 4, 5)]
    result = rejected(history)
    assert window_of(result, history) == [1, 2]
    assert result.violations[0].start_values == [None, "a"]


def test_a_read_that_goes_back_in_time_is_rejected():
    history = [
        put(1, "k", "a", 0, 1),
        put(2, "k", "b", 2, 10),  # slow: the reads may see it or not, but not undo it
        get(3, "k", "b", 3, 4),
        get(3, "k", "a", 5, 6),
    ]
    result = rejected(history)
    assert window_of(result, history) == [2, 3]


def test_a_violation_is_found_among_many_operations_and_only_on_its_key():
    rng = random.Random(7)
    history, t = [], 0.0
    for n in range(100):  # a long, correct, sequential prefix on two keys
        key = "x" if n % 2 else "y"
        history += [put(1, key, n, t, t + 0.5), get(2, key, n, t + 1, t + 1.5)]
        t += 2
    history += [put(1, "y", "new", t, t + 0.5), get(2, "y", 98, t + 1, t + 1.5)]  # stale
    rng.shuffle(history)
    result = rejected(history, key="y")
    window = result.violations[0].window
    assert [o.args or o.result for o in window] == [("new",), 98]
    assert result.keys["x"].status is Status.LINEARIZABLE


# ------------------------------------------------------------- brute force and randomized


def brute_force(history, initial=None) -> bool:
    """Tries every order (for a few operations): the definition, against which to test."""
    ops = [o for o in history if o.outcome is not Outcome.FAILED]
    known = [o.outcome is Outcome.OK for o in ops]

    def step(o, value, ok):
        if o.kind == "get":
            return (not ok or o.result == value), value
        if o.kind == "put":
            return True, o.args[0]
        if o.kind == "delete":
            return True, None
        hit = value == o.args[0]
        if ok and o.result != hit:
            return False, value
        return True, o.args[1] if hit else value

    def search(done, value):
        if all(d or not k for d, k in zip(done, known, strict=True)):
            return True
        for j, o in enumerate(ops):
            if done[j] or any(not done[i] and known[i] and ops[i].ret < o.call
                              for i in range(len(ops))):
                continue
            possible, after = step(o, value, known[j])
            if possible:
                done[j] = True
                if search(done, after):
                    return True
                done[j] = False
        return False

    return search([False] * len(ops), initial)


def random_small_history(rng: random.Random, n: int) -> list[Operation]:
    """Arbitrary results from a tiny value set, on a coarse clock so that ties are common."""
    values = [None, 1, 2, 3]
    history = []
    for _ in range(n):
        call = float(rng.randrange(10))
        ret = call + rng.choice([0, 1, 2, 3, 5])
        outcome = rng.choices(["ok", "unknown", "failed"], [8, 2, 1])[0]
        kind = rng.choice(["get", "get", "put", "put", "cas", "delete"])
        args = {"get": (), "delete": (), "put": (rng.choice(values[1:]),),
                "cas": (rng.choice(values), rng.choice(values[1:]))}[kind]
        result = {"get": rng.choice(values), "cas": rng.random() < 0.5}.get(kind)
        history.append(Operation(rng.randrange(3), kind, "k", args, call=call,
                                 ret=ret if outcome != "unknown" else INF, outcome=outcome,
                                 result=result))
    return history


def test_the_checker_agrees_with_brute_force_on_small_random_histories():
    verdicts = []
    for seed in range(1500):
        rng = random.Random(seed)
        history = random_small_history(rng, rng.randint(1, 7))
        expected = brute_force(history)
        result = check(history)
        assert result.ok == expected, f"seed {seed}: brute force says {expected}\n{result}"
        verdicts.append(expected)
        if not result.ok:  # the window alone cannot be ordered, from any value it may start at
            violation = result.violations[0]
            assert all(not brute_force(violation.window, v) for v in violation.start_values), seed
    assert 0.3 < sum(verdicts) / len(verdicts) < 0.7  # both verdicts well exercised


def register_history(seed: int, n_ops: int, clients: int, keys=("k",), p_unknown=0.05,
                     p_failed=0.03, values: int | None = None) -> list[Operation]:
    """Clients run operations one after another against a real atomic register per key. Each
    takes effect at a random instant within its interval; an unknown one at a random instant
    after its call (even after the client gave up and moved on), or never; a failed one never.
    Every written value is unique, or drawn from ``values`` distinct ones (harder to check)."""
    rng = random.Random(seed)
    free = [rng.uniform(0, 0.05) for _ in range(clients)]
    written = {k: [None] for k in keys}
    history, effects = [], []
    for n in range(n_ops):
        client = min(range(clients), key=free.__getitem__)
        call = free[client] + rng.uniform(0, 0.02)
        ret = call + rng.uniform(0.005, 0.2)
        key = rng.choice(keys)
        kind = rng.choices(["get", "put", "delete", "cas"], weights=[4, 3, 1, 2])[0]
        value = f"v{n}" if values is None else f"v{rng.randrange(values)}"
        args = {"get": (), "delete": (), "put": (value,),
                "cas": (rng.choice(written[key][-4:]), value)}[kind]
        if kind in ("put", "cas"):
            written[key].append(value)
        draw = rng.random()
        if draw < p_unknown:
            outcome, at = "unknown", None if rng.random() < 0.4 else call + rng.uniform(0, 1.0)
        elif draw < p_unknown + p_failed:
            outcome, at = "failed", None
        else:
            outcome, at = "ok", rng.uniform(call, ret)
        history.append(Operation(client, kind, key, args, call=call,
                                 ret=INF if outcome == "unknown" else ret, outcome=outcome))
        if at is not None:
            effects.append((at, n))
        free[client] = ret
    register: dict[str, object] = {}
    for _, n in sorted(effects):
        op = history[n]
        current = register.get(op.key)
        if op.kind == "get":
            op.result = current
        elif op.kind == "put":
            register[op.key] = op.args[0]
        elif op.kind == "delete":
            register[op.key] = None
        else:
            op.result = current == op.args[0]
            if op.result:
                register[op.key] = op.args[1]
    return history


def random_shape(seed: int) -> dict:
    rng = random.Random(seed)
    return dict(n_ops=rng.randint(20, 150), clients=rng.randint(1, 10),
                keys=("a", "b", "c")[:rng.randint(1, 3)])


def test_histories_of_a_real_atomic_register_always_pass():
    for seed in range(300):
        history = register_history(seed, **random_shape(seed))
        result = check(history)
        assert result.ok, f"seed {seed}:\n{result.explanation}"


def test_corrupting_one_read_is_caught():
    caught, never_written = 0, 0
    trials = 200
    for seed in range(trials):
        history = register_history(seed, **random_shape(seed))
        rng = random.Random(-seed)
        reads = [o for o in history if o.kind == "get" and o.outcome is Outcome.OK]
        if not reads:
            continue
        read = rng.choice(reads)
        others = {o.args[-1] for o in history if o.kind in ("put", "cas") and o.key == read.key}
        others = sorted(others - {read.result}) + ([None] if read.result is not None else [])
        if rng.random() < 0.5 or not others:
            read.result = f"ghost-{seed}"  # never written at all: must be caught
            result = check(history)
            assert result.status is Status.NOT_LINEARIZABLE, f"seed {seed}:\n{result}"
            window = result.violations[0].window
            assert len(window) == 1 and window[0] is read, f"seed {seed}:\n{result}"
            never_written += 1
        else:
            read.result = rng.choice(others)  # another value: wrong unless it was a possible one
            result = check(history)
            assert not result.inconclusive
        caught += result.status is Status.NOT_LINEARIZABLE
    assert never_written > 50
    assert caught / trials > 0.8, f"only {caught}/{trials} corrupted histories were caught"


# ------------------------------------------------------------------ guard and performance


def swinging_cas(pairs: int) -> list[Operation]:
    """A pathological history: the value swings 1 -> 2 -> 1 ... through ``pairs`` pairs of
    concurrent successful cas, so it must end at 1, but a read after them all sees 2. Proving
    that means trying about C(2 * pairs, pairs) interleavings."""
    history = [put(0, "k", 1, 0, 1)]
    for i in range(pairs):
        history += [cas(1 + i, "k", 1, 2, True, 2, 10), cas(100 + i, "k", 2, 1, True, 2, 10)]
    return history + [get(0, "k", 2, 11, 12)]


def test_the_guard_returns_inconclusive_instead_of_running_on():
    assert check(swinging_cas(4)).status is Status.NOT_LINEARIZABLE
    started = time.perf_counter()
    result = check(swinging_cas(12), max_states=20_000)  # ~2.7 million interleavings
    assert time.perf_counter() - started < 5
    assert result.status is Status.INCONCLUSIVE and result.inconclusive and not result.ok
    assert result.states > 20_000 and result.keys["k"].states == result.states
    assert "INCONCLUSIVE" in result.explanation and "max_states=20000" in result.explanation


def test_a_timeout_is_also_inconclusive():
    history = register_history(3, n_ops=2000, clients=8, keys=("a", "b"))
    assert check(history, timeout=0.0).inconclusive


@pytest.mark.parametrize("values", [None, 3], ids=["unique-values", "3-values"])
@pytest.mark.parametrize("seed", range(5))
def test_performance_300_operations_on_one_key_10_clients(seed, values):
    history = register_history(1000 + seed, n_ops=300, clients=10, p_unknown=0.04, values=values)
    unknown = sum(o.outcome is Outcome.UNKNOWN for o in history)
    assert unknown >= 5
    started, cpu = time.perf_counter(), time.process_time()
    result = check(history)
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu
    print(f"\n300 ops, 10 clients, {unknown} unknown, {values or 'unique'} values: "
          f"{result.explanation}; wall {wall:.3f}s, cpu {cpu:.3f}s")
    assert result.ok, result.explanation
    assert cpu < 3.0 and wall < 10.0

    read = next(o for o in reversed(history) if o.kind == "get" and o.outcome is Outcome.OK)
    read.result = "corrupted"  # a violation is found, and explained, in about the same time
    started, cpu = time.perf_counter(), time.process_time()
    result = check(history)
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu
    print(f"the same with one corrupted read: {result.status.value}, {result.states} states, "
          f"wall {wall:.3f}s, cpu {cpu:.3f}s")
    assert result.status is Status.NOT_LINEARIZABLE
    assert cpu < 3.0 and wall < 10.0


# ------------------------------------------------------------------------------ recorder


class Store:
    """An in-memory store whose every operation is atomic (linearizable by construction)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.data: dict[str, object] = {}

    def apply(self, kind: str, key: str, *args):
        with self.lock:
            current = self.data.get(key)
            if kind == "get":
                return current
            if kind == "put":
                self.data[key] = args[0]
            elif kind == "delete":
                self.data.pop(key, None)
            else:
                if current != args[0]:
                    return False
                self.data[key] = args[1]
                return True
            return None


def random_request(rng: random.Random, client: int, n: int):
    key = rng.choice(["a", "b"])
    kind = rng.choice(["get", "put", "delete", "cas"])
    args = {"get": (), "delete": (), "put": (f"{client}-{n}",),
            "cas": (rng.choice([None, f"{client}-{n - 1}"]), f"{client}-{n}")}[kind]
    return kind, key, args


def test_the_recorder_from_threads():
    store, rec = Store(), HistoryRecorder()

    def client(c: int) -> None:
        rng = random.Random(c)
        for n in range(60):
            kind, key, args = random_request(rng, c, n)
            op = rec.invoke(c, kind, key, *args)
            fate = rng.random()
            if fate < 0.05:
                rec.fail(op)  # refused before applying
                continue
            time.sleep(rng.uniform(0, 0.001))
            result = store.apply(kind, key, *args)
            time.sleep(rng.uniform(0, 0.001))
            if fate < 0.1:
                rec.unknown(op)  # applied, but the answer was lost
            else:
                rec.ok(op, result)

    threads = [threading.Thread(target=client, args=(c,)) for c in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    history = rec.history()
    assert len(history) == len(rec) == 480
    assert [op.id for op in history] == list(range(480))
    result = check(history)
    assert result.ok, result.explanation


def test_the_recorder_from_asyncio_catches_stale_follower_reads():
    async def run(stale: bool) -> CheckResult:
        leader, follower, rec = Store(), Store(), HistoryRecorder()
        writes = 0

        def replicate():  # the follower catches up on every 10th write only
            nonlocal writes
            writes += 1
            if writes % 10 == 0:
                follower.data = dict(leader.data)

        async def client(c: int) -> None:
            rng = random.Random(c)
            for n in range(40):
                kind, key, args = random_request(rng, c, n)
                op = rec.invoke(c, kind, key, *args)
                await asyncio.sleep(rng.uniform(0, 0.001))
                if kind == "get" and stale:
                    result = follower.apply(kind, key)  # the bug: reads served by a follower
                else:
                    result = leader.apply(kind, key, *args)
                    replicate()
                await asyncio.sleep(rng.uniform(0, 0.001))
                rec.ok(op, result)

        await asyncio.gather(*(client(c) for c in range(5)))
        return check(rec.history())

    assert asyncio.run(run(stale=False)).ok
    result = asyncio.run(run(stale=True))
    assert result.status is Status.NOT_LINEARIZABLE, result.explanation


def test_the_recorder_records_outcomes_with_its_clock():
    now = [0.0]

    def clock() -> float:
        now[0] += 1.0
        return now[0]

    rec = HistoryRecorder(clock=clock)
    a = rec.invoke("c1", "put", "k", "v")
    b = rec.invoke("c2", "get", "k")
    c = rec.invoke("c3", "cas", "k", "v", "w")
    d = rec.invoke("c4", "delete", "k")
    rec.ok(a)
    rec.ok(b, "v")
    rec.unknown(c)
    rec.fail(d)
    with pytest.raises(ValueError):
        rec.ok(a)
    with pytest.raises(ValueError):
        rec.invoke("c1", "increment", "k")
    with pytest.raises(ValueError):
        rec.invoke("c1", "cas", "k", "only-one-argument")
    e = rec.invoke("c5", "get", "k")  # never finished: checked as unknown
    history = rec.history()
    assert [(o.call, o.ret, o.outcome) for o in history] == [
        (1.0, 5.0, Outcome.OK), (2.0, 6.0, Outcome.OK), (3.0, INF, Outcome.UNKNOWN),
        (4.0, 7.0, Outcome.FAILED), (8.0, INF, Outcome.PENDING)]
    assert history[1].result == "v" and history[0] is not a  # a snapshot
    rec.ok(e, "w")
    assert history[4].outcome is Outcome.PENDING
    assert check(history).ok
    assert check(rec.history()).ok  # the unknown cas took effect before the last read
