"""A concurrent client history under real faults, checked for linearizability: several
clients do put, get and compare-and-set on a few keys while the leader is killed, paused and
cut off; every acknowledged operation must fit one sequential order, and no write the client
reported as not applied may be seen."""
import asyncio
import itertools
import random
import signal

from raft.examples.kv.client import KVError, OutcomeUnknown
from raft.examples.kv.linearizability import HistoryRecorder, check
from tests.eventually import eventually


async def _client(kv, rec, cid, keys, stop, rng):
    values = (f"c{cid}-{n}".encode() for n in itertools.count())
    while not stop.is_set():
        key = rng.choice(keys)
        kind = rng.choice(["put", "get", "get", "cas"])
        if kind == "put":
            v = next(values)
            op = rec.invoke(cid, "put", key, v)
            call = kv.put(key, v)
        elif kind == "get":
            op = rec.invoke(cid, "get", key)
            call = kv.get(key)
        else:
            # expect what we last read, or absence, so some succeed and some fail
            recent = [op.args[0] for op in rec.history()[-20:] if op.kind == "put" and op.key == key]
            expected, new = rng.choice([None, *recent]), next(values)
            op = rec.invoke(cid, "cas", key, expected, new)
            call = kv.cas(key, expected, new)
        try:
            result = await call
        except OutcomeUnknown:
            rec.unknown(op)
            continue
        except KVError:
            # the client gives up without "unknown" only when no attempt was applied: the
            # checker then takes the operation as never having happened
            rec.fail(op)
            continue
        if kind == "put":
            rec.ok(op, None)
        elif kind == "get":
            rec.ok(op, result)
        else:
            rec.ok(op, result[0])
        await asyncio.sleep(rng.random() * 0.01)


async def _history(c, faults) -> None:
    """Run five clients, their requests multiplexed on one KVClient's streams, while
    ``faults(leader, term, progress)`` runs; then check what they saw. ``progress(n)`` waits
    until the clients complete ``n`` more operations, so each phase (after a restart, a
    resume, a heal) is exercised rather than slept through."""
    rec = HistoryRecorder()

    def completed() -> int:
        return sum(1 for op in rec.history() if op.outcome.name == "OK")

    async def progress(n: int = 20) -> None:
        target = completed() + n
        await eventually(lambda: completed() >= target, 30, what=f"{n} more operations")

    keys = [b"x", b"y", b"z"]
    stop = asyncio.Event()
    lid, term = await c.wait_leader()
    kv = c.client(timeout=3.0, attempt_timeout=1.0)
    clients = [asyncio.create_task(_client(kv, rec, i, keys, stop, random.Random(i))) for i in range(5)]
    try:
        await progress(50)
        await faults(lid, term, progress)
    finally:
        stop.set()
        await asyncio.gather(*clients)
        await kv.close()
    history = rec.history()
    done = [op for op in history if op.outcome.name == "OK"]
    assert len(done) > 100, f"only {len(done)} operations completed"
    assert any(op.kind == "cas" and op.result is True for op in done)
    result = check(history)
    assert result.ok, str(result)


def test_client_history_through_kills_pauses_and_cuts_is_linearizable(kv_cluster):
    c = kv_cluster(3)
    c.start_all()

    async def faults(lid, term, progress):
        # 1: kill -9 the leader, restart it
        c.kill(lid)
        lid2, term = await c.wait_leader([n for n in c.ids if n != lid], not_term=term)
        await progress()
        c.start(lid)
        await progress()
        # 2: pause the leader past the election timeout, resume it
        c.signal(lid2, signal.SIGSTOP)
        lid3, term = await c.wait_leader([n for n in c.ids if n != lid2], not_term=term)
        await progress()
        c.signal(lid2, signal.SIGCONT)
        await progress()
        # 3: cut the leader off the network, heal
        c.isolate(lid3)
        await c.wait_leader([n for n in c.ids if n != lid3], not_term=term)
        await progress()
        c.heal()
        await progress()
    asyncio.run(_history(c, faults))


def test_client_history_through_one_way_cuts_with_snapshots_is_linearizable(kv_cluster):
    """Snapshots every 100 entries, so nodes that fall behind catch up by snapshot, and
    one-way cuts around the leader (a proxy per directed link): its followers' answers
    vanish; its own appends vanish; and a crossed cut where each side hears only one other."""
    c = kv_cluster(3, args=("--snapshot-entries", "100", "--snapshot-trailing-entries", "10"))
    c.start_all()

    async def faults(lid, term, progress):
        # 100 operations per phase: about half are writes, so snapshots (every 100 entries)
        # are taken and sent to the nodes the cuts left behind
        others = [n for n in c.ids if n != lid]
        for o in others:  # its appends arrive, their answers do not
            c.stall(o, lid)
        lid, term = await c.wait_leader(others, not_term=term)
        await progress(100)
        c.heal()
        await progress(100)
        others = [n for n in c.ids if n != lid]
        for o in others:  # the leader's appends and heartbeats vanish
            c.stall(lid, o)
        lid, term = await c.wait_leader(others, not_term=term)
        await progress(100)
        c.heal()
        await progress(100)
        a, b = [n for n in c.ids if n != lid]
        c.stall(lid, a)
        c.stall(b, lid)
        await asyncio.sleep(1.5)  # how long the crossed cut lasts (it may or may not stall writes)
        c.heal()
        await progress(100)
        statuses = await c.statuses()
        assert any(s.snapshot_index > 0 for s in statuses.values()), "no snapshot was taken"
    asyncio.run(_history(c, faults))
