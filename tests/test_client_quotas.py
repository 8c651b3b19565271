"""Client quotas (issue 29 item 3, KIP-546): ClientQuotaRecord in the image, delta, snapshots and
metadata-shell; AlterClientQuotas/DescribeClientQuotas with Kafka's rules and ACLs, on the
controller, on the brokers' Kafka listener (APIs 48 and 49, forwarded) and through
`kraft configs --entity-type users|clients|ips`. Byte-rate quotas on the brokers: Kafka's
precedence, rate and throttle time, a throttled fetch answered empty, and two librdkafka
producers, one held to its quota and told so, the other unaffected."""
from __future__ import annotations

import asyncio
import dataclasses
import socket
import struct
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from click.testing import CliRunner, Result

from common.errors import ErrorCode, KafkaError
from kraft.cli import main as kraft
from metadata.acls import CLUSTER_NAME, AclOperation, AclPermissionType, AclResourceType, PatternType, StandardAcl
from metadata.authorizer import Access, StandardAuthorizer
from metadata.client_quotas import (MATCH_ANY, MATCH_DEFAULT, MATCH_EXACT, QuotaAlteration, QuotaFilterComponent,
                                    QuotaOp, alter_quotas, describe_quotas)
from metadata.delta import MetadataDelta
from brokerd.kafka.throttling import KafkaThrottling
from brokerd.quotas import ClientQuotaManager, ClientQuotas, QuotaWindow
from metadata.image import ClientQuotasImage, MetadataImage
from metadata.operations import ControllerOperations
from metadata.principal import Session
from metadata.records import access_control_entry
from metadata.shell.tree import File, metadata_tree
from metadata.snapshot import image_records
from tests.brokercluster import BrokerCluster, running_cluster
from protos import controller_pb2 as cpb
from tests.controllers import InProcessQuorum
from tests.eventually import eventually

ALICE = (("user", "alice"),)
ALICE_ANY_CLIENT = (("user", "alice"), ("client-id", None))


def image_with(records: list, base: MetadataImage | None = None) -> MetadataImage:
    base = base or MetadataImage.empty("c")
    d = MetadataDelta(base)
    d.replay_batch(records, base.offset + 1, 1)
    return d.apply()


def alteration(entity: tuple, **ops: float | None) -> QuotaAlteration:
    return QuotaAlteration(entity, tuple(QuotaOp(k, v or 0.0, v is None) for k, v in ops.items()))


def test_quotas_are_records_in_the_image_snapshot_and_shell():
    recs, results = alter_quotas({}, [alteration(ALICE, producer_byte_rate=1048576, request_percentage=50.5),
                                      alteration((("client-id", None),), consumer_byte_rate=2048),
                                      alteration((("ip", "10.0.0.1"),), connection_creation_rate=10)])
    assert [r.error for r in results] == [None, None, None] and len(recs) == 4
    image = image_with(recs)
    assert dict(image.client_quotas.of(ALICE)) == {"producer_byte_rate": 1048576.0, "request_percentage": 50.5}
    assert dict(image.client_quotas.of((("client-id", None),))) == {"consumer_byte_rate": 2048.0}
    # a snapshot carries them, and reading it gives the same quotas
    assert image_with(list(image_records(image))).client_quotas == image.client_quotas
    tree = metadata_tree(image, lambda: None).children()["clientQuotas"].children()
    assert sorted(tree) == ["client-id=<default>", "ip=10.0.0.1", "user=alice"]
    leaf = tree["user=alice"].children()["producer_byte_rate"]
    assert isinstance(leaf, File) and leaf.value == 1048576.0
    # removing one key keeps the other; removing the last drops the entity; removing a key not set writes nothing
    recs, _ = alter_quotas(image.client_quotas.entities, [alteration(ALICE, producer_byte_rate=None),
                                                          alteration((("client-id", None),), consumer_byte_rate=None),
                                                          alteration((("client-id", "x"),), consumer_byte_rate=None)])
    assert len(recs) == 2
    after = image_with(recs, image)
    assert dict(after.client_quotas.of(ALICE)) == {"request_percentage": 50.5}
    assert (("client-id", None),) not in after.client_quotas.entities


def test_kafkas_rules_for_altering_quotas():
    bad = {
        "empty entity": alteration((), producer_byte_rate=1),
        "unknown entity type": alteration((("group", "g"),), producer_byte_rate=1),
        "a type twice": alteration((("user", "a"), ("user", "b")), producer_byte_rate=1),
        "ip with a user": alteration((("user", "a"), ("ip", "1.2.3.4")), connection_creation_rate=1),
        "not an ip": alteration((("ip", "not-an-ip"),), connection_creation_rate=1),
        "unknown key": alteration(ALICE, producer_byte_rates=1),
        "an ip key on a user": alteration(ALICE, connection_creation_rate=1),
        "a user key on an ip": alteration((("ip", "1.2.3.4"),), producer_byte_rate=1),
        "fractional byte rate": alteration(ALICE, producer_byte_rate=1.5),
        "negative": alteration(ALICE, request_percentage=-1),
        "removing an unknown key": QuotaAlteration(ALICE, (QuotaOp("nope", 0, True),)),
    }
    for name, a in bad.items():
        records, [result] = alter_quotas({}, [a])
        assert records == [] and result.error is not None, name
        assert result.error.code == ErrorCode.INVALID_REQUEST, (name, result.error)
    # one entry's refusal leaves the others' changes in
    records, results = alter_quotas({}, [bad["unknown key"], alteration(ALICE_ANY_CLIENT, producer_byte_rate=10)])
    assert [r.error is None for r in results] == [False, True] and len(records) == 1


def test_describe_matches_exact_default_and_any_names_strictly_or_not():
    recs, _ = alter_quotas({}, [alteration(ALICE, producer_byte_rate=1),
                                alteration(ALICE_ANY_CLIENT, producer_byte_rate=2),
                                alteration((("user", None),), producer_byte_rate=3),
                                alteration((("user", "bob"), ("client-id", "app")), producer_byte_rate=4),
                                alteration((("ip", "10.0.0.1"),), connection_creation_rate=5)])
    quotas = image_with(recs).client_quotas.entities

    def rates(components: list[QuotaFilterComponent], strict: bool) -> list[float]:
        return sorted(next(iter(v.values())) for _, v in describe_quotas(quotas, components, strict))

    user = "user"
    assert rates([QuotaFilterComponent(user, MATCH_EXACT, "alice")], False) == [1, 2]
    assert rates([QuotaFilterComponent(user, MATCH_EXACT, "alice")], True) == [1]
    assert rates([QuotaFilterComponent(user, MATCH_DEFAULT)], False) == [3]
    assert rates([QuotaFilterComponent(user, MATCH_ANY)], False) == [1, 2, 4]
    assert rates([QuotaFilterComponent(user, MATCH_ANY), QuotaFilterComponent("client-id", MATCH_DEFAULT)],
                 True) == [2]
    assert rates([QuotaFilterComponent("ip", MATCH_ANY)], True) == [5]
    assert rates([], False) == [1, 2, 3, 4, 5]
    assert rates([], True) == []
    for components in ([QuotaFilterComponent(user, MATCH_EXACT, None)], [QuotaFilterComponent(user, MATCH_DEFAULT, "a")],
                       [QuotaFilterComponent(user, 7)], [QuotaFilterComponent("group", MATCH_ANY)],
                       [QuotaFilterComponent(user, MATCH_ANY), QuotaFilterComponent(user, MATCH_DEFAULT)],
                       [QuotaFilterComponent(user, MATCH_ANY), QuotaFilterComponent("ip", MATCH_ANY)]):
        with pytest.raises(KafkaError) as e:
            describe_quotas(quotas, components, False)
        assert e.value.code == ErrorCode.INVALID_REQUEST, components


def test_the_operations_need_alter_configs_and_describe_configs_on_the_cluster(tmp_path):
    async def go() -> None:
        q = InProcessQuorum(tmp_path, n=1)
        await q.start()
        try:
            server = await q.active()
            authorizer = StandardAuthorizer(lambda: server.sm.image.acls, frozenset({"User:admin"}))
            ops = ControllerOperations(server.controller, authorizer)
            admin, alice = Access(authorizer, Session("User:admin", "h")), Access(authorizer, Session("User:alice", "h"))
            [checked] = await ops.alter_client_quotas(admin, [alteration(ALICE, producer_byte_rate=10)],
                                                      validate_only=True)
            assert checked.error is None and await ops.describe_client_quotas(admin, [], False) == []
            [ok] = await ops.alter_client_quotas(admin, [alteration(ALICE, producer_byte_rate=10)])
            assert ok.error is None
            for call in (ops.alter_client_quotas(alice, [alteration(ALICE, producer_byte_rate=1)]),
                         ops.describe_client_quotas(alice, [], False)):
                with pytest.raises(KafkaError) as e:
                    await call
                assert e.value.code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
            describe = StandardAcl(AclResourceType.CLUSTER, CLUSTER_NAME, PatternType.LITERAL, "User:alice", "*",
                                   AclOperation.DESCRIBE_CONFIGS, AclPermissionType.ALLOW)
            await server.controller.write(lambda view: ([access_control_entry(uuid.uuid4(), describe)], None))
            assert await ops.describe_client_quotas(alice, [], False) == [(ALICE, {"producer_byte_rate": 10.0})]
        finally:
            await q.stop()
    asyncio.run(go())


# -- the Kafka listener and the CLI, against brokers -------------------------------------------------

# -- byte-rate quotas on the broker -----------------------------------------------------------------

def quotas_of(*alterations: QuotaAlteration) -> ClientQuotasImage:
    return image_with(alter_quotas({}, list(alterations))[0]).client_quotas


def test_kafkas_eight_levels_of_precedence_and_who_shares_a_rate():
    levels = [((("user", "u"), ("client-id", "c")), 1), ((("user", "u"), ("client-id", None)), 2),
              ((("user", "u"),), 3), ((("user", None), ("client-id", "c")), 4),
              ((("user", None), ("client-id", None)), 5), ((("user", None),), 6), ((("client-id", "c"),), 7),
              ((("client-id", None),), 8)]
    # each level wins over every later one; the measured group is the entity with defaults filled in
    groups = {1: ("u", "c"), 2: ("u", "c"), 3: ("u", ""), 4: ("u", "c"), 5: ("u", "c"), 6: ("u", ""), 7: ("", "c"),
              8: ("", "c")}
    for i, (_, rate) in enumerate(levels):
        image = quotas_of(*(alteration(e, producer_byte_rate=r) for e, r in levels[i:]))
        m = ClientQuotaManager("producer_byte_rate", lambda image=image: image)
        assert m.quota("u", "c") == (groups[rate], float(rate)), rate
    image = quotas_of(alteration((("user", "u"),), producer_byte_rate=10))
    m = ClientQuotaManager("producer_byte_rate", lambda: image)
    assert m.quota("u", "other") == (("u", ""), 10.0) and m.quota("v", "c") is None
    assert ClientQuotaManager("consumer_byte_rate", lambda: image).quota("u", "c") is None


def test_rate_over_the_samples_throttle_time_and_a_quota_change_at_once():
    now = [100.0]
    image = [quotas_of(alteration((("client-id", "c"),), producer_byte_rate=100))]
    m = ClientQuotaManager("producer_byte_rate", lambda: image[0], QuotaWindow(11, 1.0), lambda: now[0])
    # a new client's rate is taken over (samples - 1) windows: 1000 bytes at once is 100/s, its quota
    assert m.record("", "c", 1000) == 0
    # 100 more: 110/s over 10 s, 10% over: (110 - 100) / 100 * 10 s = 1 s
    assert m.record("", "c", 100) == 1000
    # twenty seconds later the samples have expired
    now[0] += 20
    assert m.record("", "c", 500) == 0
    # a quota changed by a metadata delta applies to the next request
    image[0] = quotas_of(alteration((("client-id", "c"),), producer_byte_rate=10))
    assert m.record("", "c", 100) == round((60 - 10) / 10 * 10 * 1000)
    assert m.max_in_window("", "c") == 100 and m.max_in_window("", "d") is None


def simulated_client(m: ClientQuotaManager, now: list[float], fetching: bool, seconds: float = 100.0,
                     size: int = 16384, in_flight: int = 5, service: float = 0.002,
                     latency: float = 0.0005) -> list[tuple[float, int]]:
    """A librdkafka client wanting more than its quota, against the broker's accounting on a
    fake clock: up to ``in_flight`` requests of ``size`` bytes (a producer's batch, or what a
    fetch is answered with), none sent while a throttle it was told lasts; the broker handles
    them in turn and reads nothing from a connection it throttled until the throttle ends
    (KIP-219). A throttled fetch is answered empty, its bytes taken back (as
    ``throttling.after``). The bytes each answer carried, by when it arrived."""
    import heapq
    moved: list[tuple[float, int]] = []
    events = [(0.0, i) for i in range(in_flight)]  # (time, slot): when the client may send on a slot
    broker_free = throttled_until = 0.0
    while events:
        t, slot = heapq.heappop(events)
        if t > seconds:
            break
        if t < throttled_until:  # librdkafka holds requests to a broker back while it is throttled
            heapq.heappush(events, (throttled_until, slot))
            continue
        handled = max(t + latency, broker_free)
        now[0] = handled + service
        throttle = m.record("", "c", size)
        if throttle and fetching:
            m.unrecord("", "c", size)
        answered = now[0] + latency
        broker_free = now[0] + throttle / 1000  # muted
        if not (throttle and fetching):
            moved.append((answered, size))
        throttled_until = max(throttled_until, answered + throttle / 1000)
        heapq.heappush(events, (answered, slot))
    return moved


@pytest.mark.parametrize("key", ["producer_byte_rate", "consumer_byte_rate"])
def test_a_client_over_its_quota_is_held_within_10_percent_over_any_30_s(key):
    """Issue 29: a client with a byte-rate quota, wanting more, moves within 10% of its quota
    over any 30 s once its first allowance is spent, with Kafka's default windows (11 of 1 s).
    Kafka's windowed Rate lets the (samples - 1) windows' worth a client sent at once go again
    when that sample expires, every ~11 s: a 30 s span held two or three such bursts (0.73 to
    1.11 of the quota; Kafka 3.8's Rate swings alike)."""
    quota, now = 1_000_000, [0.0]
    image = quotas_of(alteration((("client-id", "c"),), **{key: quota}))
    m = ClientQuotaManager(key, lambda: image, QuotaWindow(), lambda: now[0])
    moved = simulated_client(m, now, fetching=key == "consumer_byte_rate")
    spans = {start: sum(n for t, n in moved if start <= t < start + 30) / 30 / quota for start in range(12, 71)}
    worst = max(spans.items(), key=lambda s: abs(s[1] - 1))
    print(f"{key}: worst {worst[1]:.3f} of the quota over the 30 s from {worst[0]} s")
    assert abs(worst[1] - 1) <= 0.10, f"{worst[1]:.3f} of the quota over the 30 s from {worst[0]} s"


def test_the_rate_kept_incrementally_measures_as_summing_every_sample_does():
    """Rate keeps its sum and oldest start instead of walking the samples on every request;
    what it measures is what summing them afresh gives (Kafka's SampledStat), at every step of
    records spread over windows, gaps longer than all of them, and bytes taken back."""
    import random
    from brokerd.quotas import Rate
    window, rnd, now = QuotaWindow(4, 1.0), random.Random(29), 0.0
    rate, starts, values, current = Rate(window, now), [now], [0.0], 0
    for step in range(3000):
        now += rnd.choice([0.0, 0.01, 0.3, 0.9, 1.0, 2.5, 9.0]) if step % 50 else 30.0
        value = rnd.choice([1.0, 100.0, 16384.0, -100.0])
        if now - starts[current] >= window.size_s:  # the reference: every sample walked, every time
            current = (current + 1) % window.samples
            if current == len(starts):
                starts.append(now)
                values.append(0.0)
            else:
                starts[current], values[current] = now, 0.0
        values[current] += value
        rate.record(value, now)
        for i, start in enumerate(starts):
            if now - start >= window.size_s * window.samples:
                starts[i], values[i] = now, 0.0
        elapsed = now - min(starts)
        if int(elapsed // window.size_s) < window.samples - 1:
            elapsed += (window.samples - 1 - int(elapsed // window.size_s)) * window.size_s
        elapsed = max(elapsed, 1e-3)
        assert rate.measure(now) == pytest.approx((sum(values) / elapsed, elapsed)), step


def test_a_produce_request_is_accounted_with_one_clock_read():
    """The accounting every request pays (issue 29: at most 5% of an unthrottled producer's
    rate): a produce timed for request_percentage and counted for producer_byte_rate reads the
    clock once, its response's encoding charged without another read, and its throttle time is
    the rates' as before."""
    from brokerd.kafka.throttling import HandlerTime
    reads = [0]
    image = quotas_of(alteration((("client-id", None),), producer_byte_rate=1000, request_percentage=1))

    def clock() -> float:
        reads[0] += 1
        return 0.0

    throttling = KafkaThrottling(ClientQuotas(lambda: image, QuotaWindow(4, 1.0), clock))
    session = Session("User:alice", "127.0.0.1")

    @dataclasses.dataclass(frozen=True)
    class Partition:
        records: bytes = b"x" * 1000

    @dataclasses.dataclass(frozen=True)
    class Topic:
        partition_data: tuple = (Partition(),) * 3

    @dataclasses.dataclass(frozen=True)
    class Produce:  # the field the throttling reads of kio's ProduceRequest
        topic_data: tuple = (Topic(),)

    async def handler() -> dict:
        return {"responses": []}

    async def produce() -> dict:
        timer = throttling.timed(0, session, "app", handler())
        assert isinstance(timer, HandlerTime)
        answer = await timer
        timer.spent = 0.01
        throttling.after(0, Produce(), answer, session, "app", MetadataImage.empty(), timer)
        throttling.charge(timer, 0.01)
        return answer

    first = asyncio.run(produce())  # 3,000 bytes of 3 windows' 3,000; 10 ms (+10 encoding) of 30 ms
    reads[0] = 0
    second = asyncio.run(produce())  # 6,000 bytes over 3 s: twice the quota, 3 s (request time: at most 1 s)
    assert "throttle_time" not in first and second["throttle_time"] == 3000
    assert reads[0] == 1, f"the clock was read {reads[0]} times for one request"


def test_the_grpc_request_time_interceptor_wraps_a_method_once_and_times_every_call():
    """gRPC runs a server's interceptors on every call: RequestTimeQuotas makes a method's timed
    handler at its first call and hands out the same one after (a new one only if the service
    answers the method with another handler), and still counts each call's handler time for
    the request's client."""
    import grpc
    from brokerd.grpc_throttling import RequestTimeQuotas
    from metadata.principal import PrincipalMapper
    from protos import broker_pb2 as pb

    image = quotas_of(alteration((("client-id", "busy"),), request_percentage=1))
    quotas = ClientQuotas(lambda: image, QuotaWindow(4, 1.0), clock=lambda: 0.0)
    interceptor = RequestTimeQuotas(quotas, PrincipalMapper())

    async def produce(request: pb.ProduceRequest, context: Any) -> pb.ProduceResponse:
        sum(range(10_000))  # some time on the loop to count
        return pb.ProduceResponse()

    class Details:
        method = "/kraft.broker.Broker/Produce"

    class Context:
        def auth_context(self) -> dict:
            return {}

        def peer(self) -> str:
            return "ipv4:127.0.0.1:5555"

    handler = grpc.unary_unary_rpc_method_handler(produce)
    another = grpc.unary_unary_rpc_method_handler(produce)

    async def go() -> list[float]:
        async def continuation(details: Any) -> Any:
            return handler

        async def replaced(details: Any) -> Any:
            return another

        timed = await interceptor.intercept_service(continuation, Details())
        assert await interceptor.intercept_service(continuation, Details()) is timed
        assert await interceptor.intercept_service(replaced, Details()) is not timed
        sensor = quotas.request.sensor("", "busy")
        assert sensor is not None
        counted = []
        for _ in range(2):
            await timed.unary_unary(pb.ProduceRequest(client_id="busy"), Context())
            counted.append(sensor.rate.measure(0.0)[0])
        return counted

    once, twice = asyncio.run(go())
    assert 0 < once < twice


def test_a_throttled_fetch_is_answered_empty_and_its_bytes_taken_back():
    image = quotas_of(alteration((("client-id", "reader"),), consumer_byte_rate=100))
    throttling = KafkaThrottling(ClientQuotas(lambda: image, QuotaWindow(2, 1.0)))
    session = Session("User:ANONYMOUS", "127.0.0.1")

    @dataclasses.dataclass(frozen=True)
    class Fetch:  # the field the throttling reads of kio's FetchRequest
        max_bytes: int = 1 << 20

    asked = throttling.before(1, Fetch(), session, "reader")
    # at most the quota's window of bytes is asked for; other clients are left alone
    assert asked.max_bytes == 100 and throttling.before(1, Fetch(), session, "x").max_bytes == 1 << 20

    def answer() -> dict:
        return {"responses": [{"topic": "t", "partitions": [{"records": b"x" * 90}]}]}

    first, second = answer(), answer()
    throttling.after(1, asked, first, session, "reader", MetadataImage.empty())
    assert "throttle_time" not in first and len(first["responses"]) == 1
    throttling.after(1, asked, second, session, "reader", MetadataImage.empty())
    assert second["throttle_time"] > 0 and second["responses"] == []
    assert throttling.quotas.fetch.record("", "reader", 0) == 0  # the 90 bytes not sent were taken back


def test_request_time_counts_the_handlers_own_steps_and_throttles_at_most_a_window():
    """request_percentage (KIP-124): the handler's time on the loop, not the time it waits, as a
    percent of one thread's time; a throttle is at most one window (Kafka's request quota)."""
    from brokerd.kafka.throttling import HandlerTime

    def busy(seconds: float) -> None:
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            pass

    async def handler() -> str:
        busy(0.02)
        await asyncio.sleep(0.2)
        busy(0.02)
        return "answer"

    async def timed() -> tuple[str, float]:
        timer = HandlerTime(handler())
        return await timer, timer.spent

    started = time.perf_counter()
    answer, spent = asyncio.run(timed())
    elapsed = time.perf_counter() - started
    # both steps' 40 ms, and nothing of the 200 ms wait between them (a bound by the run's own
    # time: on a loaded machine a step also holds the time it waited for a CPU, as in Kafka)
    assert answer == "answer" and 0.04 <= spent <= elapsed - 0.2, (spent, elapsed)
    now = [0.0]
    image = quotas_of(alteration((("client-id", "busy"),), request_percentage=1))
    throttling = KafkaThrottling(ClientQuotas(lambda: image, QuotaWindow(4, 1.0), lambda: now[0]))
    session = Session("User:ANONYMOUS", "127.0.0.1")
    work = handler()
    assert throttling.timed(3, session, "other", work) is None  # no quota: not timed
    assert throttling.timed(27, session, "busy", work) is None  # WriteTxnMarkers: inter-broker, exempt
    timer = throttling.timed(3, session, "busy", work)
    assert isinstance(timer, HandlerTime)
    work.close()
    timer.spent, first = 0.02, {}  # 20 ms of 30 (1% of 3 windows): within the quota
    throttling.after(3, None, first, session, "busy", MetadataImage.empty(), timer)
    timer.spent, second = 0.02, {}  # 40 ms over 3 s: 33% over, 1 s; at most one window
    throttling.after(3, None, second, session, "busy", MetadataImage.empty(), timer)
    assert "throttle_time" not in first and second["throttle_time"] == 1000
    fetched = {"responses": [{"topic": "t", "partitions": [{"records": b"x"}]}]}
    throttling.after(1, None, fetched, session, "busy", MetadataImage.empty(), timer)
    assert fetched["responses"] == [] and fetched["throttle_time"] == 1000  # a fetch throttled so: empty


def test_the_mutation_bucket_lets_a_request_into_debt_then_refuses_until_it_is_paid():
    now = [0.0]
    image = quotas_of(alteration((("client-id", "m"),), controller_mutation_rate=1))
    throttling = KafkaThrottling(ClientQuotas(lambda: image, QuotaWindow(4, 1.0), lambda: now[0]))
    session = Session("User:ANONYMOUS", "127.0.0.1")

    @dataclasses.dataclass(frozen=True)
    class Topic:
        name: str

    @dataclasses.dataclass(frozen=True)
    class Create:  # the fields the throttling reads of kio's CreateTopicsRequest
        topics: tuple = (Topic("t"),)
        validate_only: bool = False

    assert throttling.refusal(19, 7, Create(), session, "m") is None
    answer = {"topics": [{"name": "t", "error_code": 0, "num_partitions": 6}]}
    throttling.after(19, Create(), answer, session, "m", MetadataImage.empty())
    assert answer["throttle_time"] == 2000  # a bucket of 4, 6 taken: 2 partitions at 1/s
    refused = throttling.refusal(19, 7, Create(), session, "m")
    assert refused is not None and refused["topics"][0]["error_code"] == ErrorCode.THROTTLING_QUOTA_EXCEEDED
    assert throttling.refusal(19, 5, Create(), session, "m") is None  # before KIP-599: let through
    assert throttling.refusal(19, 7, Create(), session, "other") is None
    now[0] += 2.0
    assert throttling.refusal(19, 7, Create(), session, "m") is None


def test_connection_limits_per_address_with_overrides_and_in_all():
    from brokerd.connection_quotas import ConnectionQuotas, parse_overrides
    q = ConnectionQuotas(max_connections=5, max_per_ip=2, overrides=parse_overrides("10.0.0.9:3, ::1:0"))
    assert [q.admit("10.0.0.1") for _ in range(3)] == [True, True, False]
    assert [q.admit("10.0.0.9") for _ in range(4)] == [True, True, True, False]
    assert not q.admit("::1") and not q.admit("10.0.0.2")  # override 0; then 5 in all
    q.release("10.0.0.1")
    assert q.admit("10.0.0.2") and (q.total, q.by_ip["10.0.0.1"]) == (5, 1)
    with pytest.raises(Exception, match="is not IP:COUNT"):
        parse_overrides("nohost")


def test_connection_creation_rate_of_an_ip_holds_connections_over_it_uncounted():
    from brokerd.connection_quotas import ConnectionQuotas
    image = quotas_of(alteration((("ip", "10.0.0.1"),), connection_creation_rate=2),
                      alteration((("ip", None),), connection_creation_rate=4))
    q = ConnectionQuotas(100, 100, quotas=lambda: image, window=QuotaWindow(2, 1.0))
    # a new address may open a window's worth at once (2 and 4), then waits the time that brings it back
    assert [q.creation_throttle_ms("10.0.0.1") > 0 for _ in range(4)] == [False, False, True, True]
    assert [q.creation_throttle_ms("10.0.0.2") > 0 for _ in range(5)] == [False] * 4 + [True]
    assert 0 < q.creation_throttle_ms("10.0.0.1") <= 1000  # refused ones were not counted: (3 - 2) / 2 * 1 s
    assert ConnectionQuotas(1, 1).creation_throttle_ms("10.0.0.1") == 0  # no quotas: nothing counted


def test_connection_creation_rates_of_the_broker_and_of_a_listener_delay_serving():
    """KIP-612's max.connection.creation.rate (the broker's, over every Kafka listener) and
    listener.name.<l>.max.connection.creation.rate (one listener's): 15 connections opened at
    once on real sockets are all served, the first (samples - 1) windows' allowance at once and
    the others held, unread, at about the rate (5/s: the last 2 s later); a listener without a
    limit of its own serves its 15 at once, until the broker's limit covers it too."""
    from brokerd.connection_quotas import ConnectionQuotas
    from brokerd.kafka.apis import api_version_list
    from brokerd.kafka.codec import build, frame_request, request_schema, response_schema
    from brokerd.kafka.listener import KafkaListener

    class Apis:  # what the listener asks of KafkaApis to answer ApiVersions
        def session(self, writer: Any) -> Session:
            return Session("User:ANONYMOUS", "127.0.0.1")

        async def handle(self, header: Any, request: Any, session: Session) -> Any:
            return build(response_schema(18, header.api_version), {"error_code": 0, "api_keys": api_version_list()})

    hello = frame_request(18, 3, 1, "burst", build(request_schema(18, 3), {
        "client_software_name": "pytest", "client_software_version": "1"}))

    async def spread(port: int) -> float:
        """Seconds from the first of 15 connections (opened at once) answered to the last."""
        async def one() -> float:
            r, w = await asyncio.open_connection("127.0.0.1", port)
            w.write(hello)
            assert len(await asyncio.wait_for(r.readexactly(4), 20)) == 4  # served, never closed
            w.close()
            return time.monotonic()
        answered = await asyncio.gather(*(one() for _ in range(15)))
        return max(answered) - min(answered)

    async def go(quotas: ConnectionQuotas) -> tuple[float, float]:
        listeners = [KafkaListener(name, "127.0.0.1", 0, Apis(), 1 << 20, connections=quotas)  # type: ignore[arg-type]
                     for name in ("SLOW", "FAST")]
        for listener in listeners:
            await listener.bind()
            await listener.start()
        try:
            ports = [listener._server.sockets[0].getsockname()[1] for listener in listeners]  # type: ignore[union-attr]
            return await spread(ports[0]), await spread(ports[1])
        finally:
            for listener in listeners:
                await listener.stop()

    window = QuotaWindow(2, 1.0)  # an allowance of one window: 5 connections at once
    slow, fast = asyncio.run(go(ConnectionQuotas(1000, 1000, window=window, listener_creation_rates={"SLOW": 5})))
    print(f"listener SLOW (5/s): 15 served over {slow:.2f} s; FAST (no limit): over {fast:.2f} s")
    assert 1.2 <= slow <= 4 and fast < 1.0  # (15 - 5) / 5 s = 2 s
    slow, fast = asyncio.run(go(ConnectionQuotas(1000, 1000, window=window, max_creation_rate=5)))
    print(f"the broker's 5/s: SLOW's 15 served over {slow:.2f} s, then FAST's over {fast:.2f} s")
    assert slow >= 1.2 and fast >= 1.2  # FAST's come after SLOW's 15 were counted: all held


def test_connection_creation_rate_keys_are_read_per_broker_and_per_kafka_listener():
    from brokerd.config import BrokerConfig
    from common.config_def import ConfigError
    from metadata.config import from_properties
    props = {"node.id": "1", "process.roles": "broker", "controller.quorum.voters": "9@127.0.0.1:9093",
             "listeners": "PLAINTEXT://127.0.0.1:9092,KAFKA://127.0.0.1:9094", "log.dirs": "/tmp/x",
             "max.connection.creation.rate": "100", "listener.name.kafka.max.connection.creation.rate": "7"}
    b = BrokerConfig.from_server(from_properties(props))
    assert (b.max_connection_creation_rate, b.listener_connection_creation_rates) == (100, {"KAFKA": 7})
    with pytest.raises(ConfigError, match=r"Invalid value 0 .*\(listener.name.kafka.max.connection.creation.rate\)"):
        BrokerConfig.from_server(from_properties({**props, "listener.name.kafka.max.connection.creation.rate": "0"}))


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Iterator[BrokerCluster]:
    # quota windows of 4 samples of 1 s (Kafka: 11) keep the producers' test short
    with running_cluster(tmp_path_factory.mktemp("quotas"), {"quota.window.num": "4", "max.connections.per.ip": "100",
                                                             "max.connections.per.ip.overrides": "127.0.0.1:1000"},
                         brokers=1) as c:
        yield c


def kafka_call(c: BrokerCluster, api_key: int, version: int, fields: dict[str, Any], client_id: str = "pytest") -> Any:
    """One request on the broker's Kafka listener, its response read with kio's schema."""
    from brokerd.kafka.codec import build, frame_request, read_response, request_schema
    with socket.create_connection(("127.0.0.1", c.kafka_ports[c.ids[0]]), 5) as s:
        s.settimeout(20)
        s.sendall(frame_request(api_key, version, 7, client_id, build(request_schema(api_key, version), fields)))
        size = struct.unpack(">i", s.recv(4, socket.MSG_WAITALL))[0]
        return read_response(s.recv(size, socket.MSG_WAITALL), api_key, version)[1]


def test_alter_and_describe_client_quotas_on_the_kafka_listener(cluster):
    for version in (0, 1):
        entry = {"entity": [{"entity_type": "user", "entity_name": f"kio-{version}"},
                            {"entity_type": "client-id", "entity_name": None}],
                 "ops": [{"key": "producer_byte_rate", "value": 4096.0, "remove": False}]}
        bad = {"entity": [{"entity_type": "user", "entity_name": "x"}],
               "ops": [{"key": "no_such_quota", "value": 1.0, "remove": False}]}
        checked = kafka_call(cluster, 49, version, {"entries": [entry], "validate_only": True})
        assert [e.error_code for e in checked.entries] == [0]
        r = kafka_call(cluster, 49, version, {"entries": [entry, bad], "validate_only": False})
        assert [int(e.error_code) for e in r.entries] == [0, int(ErrorCode.INVALID_REQUEST)]
        assert r.entries[1].error_message == "Invalid configuration key no_such_quota"
        assert [(p.entity_type, p.entity_name) for p in r.entries[0].entity] == [("user", f"kio-{version}"),
                                                                                 ("client-id", None)]
        d = kafka_call(cluster, 48, version, {"strict": False, "components": [
            {"entity_type": "user", "match_type": 0, "match": f"kio-{version}"}]})
        assert d.error_code == 0
        assert [({(p.entity_type, p.entity_name) for p in e.entity}, [(v.key, v.value) for v in e.values])
                for e in d.entries] == [({("user", f"kio-{version}"), ("client-id", None)},
                                         [("producer_byte_rate", 4096.0)])]
    refused = kafka_call(cluster, 48, 1, {"strict": False, "components": [
        {"entity_type": "user", "match_type": 0, "match": None}]})
    assert refused.error_code == ErrorCode.INVALID_REQUEST and refused.entries is None


def cli(*args: str) -> Result:
    result = CliRunner().invoke(kraft, list(args))
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    assert "Traceback" not in result.output
    return result


def test_kraft_configs_sets_describes_and_deletes_quotas(cluster):
    b = ["configs", "--bootstrap-controller", cluster.quorum.bootstrap]
    r = cli(*b, "--alter", "--entity-type", "users", "--entity-name", "carol", "--entity-type", "clients",
            "--entity-default", "--add-config", "producer_byte_rate=1048576,consumer_byte_rate=2097152")
    assert r.exit_code == 0 and r.output == ("Completed updating quotas for user-principal 'carol', the default "
                                             "client-id.\n"), r.output
    r = cli(*b, "--alter", "--entity-type", "clients", "--entity-default", "--add-config", "request_percentage=25")
    assert r.exit_code == 0, r.output
    out = cli(*b, "--describe", "--entity-type", "users", "--entity-name", "carol", "--entity-type", "clients",
              "--entity-default").output
    assert out == ("Quota configs for user-principal 'carol', the default client-id are "
                   "consumer_byte_rate=2097152.0, producer_byte_rate=1048576.0\n")
    assert cli(*b, "--describe", "--entity-type", "clients").output == (
        "Quota configs for the default client-id are request_percentage=25.0\n")
    # enforced now: the module's other clients must not be held to it
    assert cli(*b, "--alter", "--entity-type", "clients", "--entity-default", "--delete-config",
               "request_percentage").exit_code == 0
    # a user with quotas and no SCRAM credential: its quotas, and no error
    r = cli(*b, "--alter", "--entity-type", "users", "--entity-name", "dave", "--add-config",
            "controller_mutation_rate=5")
    assert r.exit_code == 0, r.output
    r = cli(*b, "--describe", "--entity-type", "users", "--entity-name", "dave")
    assert (r.exit_code, r.output) == (0, "Quota configs for user-principal 'dave' are controller_mutation_rate=5.0\n")
    r = cli(*b, "--alter", "--entity-type", "users", "--entity-name", "dave", "--delete-config",
            "controller_mutation_rate")
    assert r.exit_code == 0, r.output
    r = cli(*b, "--describe", "--entity-type", "users", "--entity-name", "dave")
    assert r.exit_code == 1 and "RESOURCE_NOT_FOUND" in r.output  # neither quotas nor credentials left
    r = cli(*b, "--alter", "--entity-type", "ips", "--entity-name", "10.1.1.1", "--add-config", "producer_byte_rate=1")
    assert (r.exit_code, r.output) == (1, "Error: INVALID_REQUEST: Invalid configuration key producer_byte_rate\n")
    r = cli(*b, "--alter", "--entity-type", "users", "--entity-name", "carol", "--add-config", "producer_byte_rate=x")
    assert r.exit_code == 1 and r.output.startswith("Error: 'producer_byte_rate=x': a quota is KEY=NUMBER"), r.output
    r = cli(*b, "--alter", "--entity-type", "users", "--entity-type", "clients", "--entity-name", "a",
            "--add-config", "producer_byte_rate=1")
    assert r.exit_code == 1 and "--entity-name or --entity-default" in r.output


async def set_client_quota(c: BrokerCluster, client_id: str, key: str, rate: float, entity_type: str = "client-id",
                           remove: bool = False) -> None:
    async with c.controller() as ctl:
        r = await ctl.alter_client_quotas(cpb.AlterClientQuotasRequest(entries=[cpb.QuotaAlteration(
            entity=[cpb.QuotaEntityPart(entity_type=entity_type, entity_name=client_id)],
            ops=[cpb.QuotaOp(key=key, value=rate, remove=remove)])]))
        assert r.results[0].error_code == 0, r.results[0].error_message


class PacedProducer:
    """A librdkafka producer sending 1,000-byte values at up to ``rate`` bytes/s from its own
    thread, keeping when each delivery was acknowledged and the throttle times it was told."""

    def __init__(self, c: BrokerCluster, client_id: str, topic: str, rate: float) -> None:
        from confluent_kafka import Producer
        self.delivered: list[tuple[float, int]] = []
        self.throttles: list[float] = []
        self.producer: Any = Producer({"bootstrap.servers": c.kafka_bootstrap_servers, "client.id": client_id,
                                  "acks": 1, "linger.ms": 5, "batch.size": 16384,
                                  "throttle_cb": lambda e: self.throttles.append(e.throttle_time)})
        self.topic, self.rate = topic, rate
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _delivered(self, err: Any, msg: Any) -> None:
        if err is None:
            self.delivered.append((time.monotonic(), len(msg.value())))

    def _run(self) -> None:
        value, start, sent = b"v" * 1000, time.monotonic(), 0
        while not self.stop.is_set():
            if sent < self.rate * (time.monotonic() - start):
                try:
                    self.producer.produce(self.topic, value, on_delivery=self._delivered)
                    sent += len(value)
                    continue
                except BufferError:
                    pass
            self.producer.poll(0.01)
        self.producer.purge(in_queue=True, in_flight=True)  # what a throttled producer still holds: not waited for
        self.producer.flush(10)

    def rate_between(self, t0: float, t1: float) -> float:
        return sum(n for t, n in self.delivered if t0 <= t < t1) / (t1 - t0)


class ReadingConsumer:
    """A librdkafka consumer reading a partition from its start in its own thread, in fetches
    of at most ``fetch_bytes``, keeping when each record arrived and the throttle times it was told."""

    def __init__(self, c: BrokerCluster, client_id: str, topic: str, fetch_bytes: int = 16384) -> None:
        from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
        self.read: list[tuple[float, int]] = []
        self.throttles: list[float] = []
        self.consumer: Any = Consumer({"bootstrap.servers": c.kafka_bootstrap_servers, "client.id": client_id,
                                       "group.id": client_id, "enable.auto.commit": False,
                                       "max.partition.fetch.bytes": fetch_bytes,
                                       "throttle_cb": lambda e: self.throttles.append(e.throttle_time)})
        self.consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop.is_set():
            for m in self.consumer.consume(100, 0.1):
                if m.error() is None:
                    self.read.append((time.monotonic(), len(m.value())))
        self.consumer.close()

    def rate_between(self, t0: float, t1: float) -> float:
        return sum(n for t, n in self.read if t0 <= t < t1) / (t1 - t0)


@pytest.mark.parametrize("seconds, tolerance", [(8, 0.12), pytest.param(30, 0.10, marks=pytest.mark.slow)])
def test_a_producer_and_a_consumer_over_their_quotas_are_held_to_them_while_another_is_unaffected(
        cluster, seconds: int, tolerance: float):
    """Issue 29: librdkafka clients: "slow" with producer_byte_rate 100 kB/s (offering 400 kB/s)
    and "reader" with consumer_byte_rate 100 kB/s (reading what the producers wrote) each move
    their quota over ``seconds`` once their allowance is spent, and see throttle_time_ms; "fast"
    (no quota, 300 kB/s) gets all it offers and no throttle; raising slow's quota applies within
    seconds. The issue's 30 s within 10% is marked slow; ``make test`` measures 8 s, within 12%
    (the values are 98.6% of the batches' bytes the broker counts, and on a loaded machine 8 s
    held 0.92 to 1.0 of the quota)."""
    topic, quota = f"quota-t-{seconds}", 100_000
    slow_id, fast_id, reader_id = f"slow-{seconds}", f"fast-{seconds}", f"reader-{seconds}"
    asyncio.run(cluster.create_topic(topic, 1, rf=1))

    def set_quota(client_id: str, key: str, rate: int) -> None:
        asyncio.run(set_client_quota(cluster, client_id, key, rate))

    set_quota(slow_id, "producer_byte_rate", quota)
    set_quota(reader_id, "consumer_byte_rate", quota)
    slow, fast = PacedProducer(cluster, slow_id, topic, 4 * quota), PacedProducer(cluster, fast_id, topic, 3 * quota)
    reader = ReadingConsumer(cluster, reader_id, topic)
    start = time.monotonic()
    for p in (slow, fast, reader):
        p.thread.start()
    try:
        # after the first allowance ((samples - 1) windows, 3 s of the quota here), each is held to its quota
        measured_from = start + 4
        while time.monotonic() < measured_from + seconds:
            time.sleep(0.2)
        span = (measured_from, measured_from + seconds)
        written, offered, read = slow.rate_between(*span), fast.rate_between(*span), reader.rate_between(*span)
        print(f"over {seconds} s: slow {written:.0f} B/s, reader {read:.0f} B/s (quotas {quota}), "
              f"fast {offered:.0f} B/s; throttles: slow {slow.throttles[:3]}, reader {reader.throttles[:3]}")
        assert abs(written - quota) <= tolerance * quota, f"slow: {written:.0f} B/s for a quota of {quota}"
        assert abs(read - quota) <= tolerance * quota, f"reader: {read:.0f} B/s for a quota of {quota}"
        assert offered >= 0.9 * 3 * quota, f"fast: {offered:.0f} B/s of the {3 * quota} it offered"
        assert slow.throttles and max(slow.throttles) > 0 and not fast.throttles
        assert reader.throttles and max(reader.throttles) > 0
        set_quota(slow_id, "producer_byte_rate", 4 * quota)
        changed = time.monotonic()
        while time.monotonic() < changed + 6:
            time.sleep(0.2)
        raised = slow.rate_between(changed + 2, changed + 6)
        print(f"slow after the quota was raised to {4 * quota}: {raised:.0f} B/s")
        assert raised >= 1.5 * quota, f"the raised quota did not apply: {raised:.0f} B/s"  # held at 1.0 before
    finally:
        for p in (slow, fast, reader):
            p.stop.set()
        for p in (slow, fast, reader):
            p.thread.join(20)
        slow.producer = fast.producer = reader.consumer = None  # destroyed now: not left reconnecting to the stopped cluster


def test_our_clients_over_grpc_are_held_to_their_quotas(cluster):
    """The gRPC listener counts the same bytes; our producer and consumer hold back for the
    throttle_time_ms they are answered with, so neither moves more than its quota."""
    from clients import Consumer, Producer
    quota = 100_000

    async def go() -> None:
        await cluster.create_topic("quota-grpc", 1, rf=1)
        await set_client_quota(cluster, "grpc-writer", "producer_byte_rate", quota)
        await set_client_quota(cluster, "grpc-reader", "consumer_byte_rate", quota)
        acked: list[tuple[float, int]] = []
        async with Producer(cluster.bootstrap_servers, client_id="grpc-writer", acks=1, linger_ms=5) as p:
            start = loop.time()
            pending = set()
            while loop.time() < start + 11:  # offering about 5x the quota
                if len(pending) < 200:
                    f = await p.send("quota-grpc", b"v" * 1000)
                    f.add_done_callback(lambda f: f.exception() or acked.append((loop.time(), 1000)))
                    pending.add(f)
                    f.add_done_callback(pending.discard)
                else:
                    await asyncio.sleep(0.01)
            written = sum(n for t, n in acked if start + 3 <= t < start + 11) / 8
            print(f"our producer: {written:.0f} B/s for a quota of {quota}, throttled up to "
                  f"{p.metrics['produce-throttle-time-max']} ms")
            assert abs(written - quota) <= 0.15 * quota and p.metrics["produce-throttle-time-max"] > 0
        read: list[tuple[float, int]] = []
        # fetches of 20 kB: a fetch of a whole quota window at once is answered, and the next is throttled
        # for as long as that window took (Kafka's consumers see the same with their 11 s windows)
        async with Consumer(cluster.bootstrap_servers, client_id="grpc-reader", auto_offset_reset="earliest",
                            fetch_max_bytes=20_000, max_partition_fetch_bytes=20_000) as c:
            await c.assign([("quota-grpc", 0)])
            start = loop.time()
            while loop.time() < start + 8:
                read += [(loop.time(), len(r.value)) for r in await c.poll(200)]
            got = sum(n for t, n in read if start + 3 <= t < start + 8) / 5
            print(f"our consumer: {got:.0f} B/s for a quota of {quota}, last throttle {c.throttle_time_ms} ms")
            # held to its quota; under it by the time its fetches take on a loaded machine
            assert 0.5 * quota <= got <= 1.15 * quota and c.throttle_time_ms > 0

    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(go())
    finally:
        loop.close()


def test_over_grpc_request_percentage_holds_our_producer_back_and_empties_a_fetch(cluster):
    """request_percentage on the gRPC listener: the time of each call's handler counts for the
    request's client id. Our producer as "grpc-busy" (request_percentage=0.1) and as "grpc-calm"
    (no quota), each producing as fast as it can at the same time: busy is answered
    throttle_time_ms and holds back, so far fewer of its records are acknowledged. Busy's fetch
    while it floods is answered empty with the throttle time, calm's is never throttled.

    Timing: busy is held to 1 ms of the broker's time a second, a few requests (a throttle is at
    most one window), whatever the machine's load; a request carries one record, so that records
    count requests; calm's rate is the machine's. (Before: batches of up to 50 records and a
    quota of 1%: at a load of 12 on 2 cores, busy 300 records a second, calm 350.) The fetches
    are made during the flood: once busy stops, its rate falls under the quota within the
    window's samples, and a fetch after that is rightly served (on a loaded machine, the
    consumer's start-up alone took that long)."""
    from clients import Consumer, Producer

    async def go() -> None:
        await cluster.create_topic("quota-grpc-time", 1, rf=1)
        await set_client_quota(cluster, "grpc-busy", "request_percentage", 0.1)
        acked: dict[str, list[float]] = {"grpc-busy": [], "grpc-calm": []}
        producers: dict[str, Producer] = {}
        throttled = asyncio.Event()  # busy's fetch was throttled: the floods may end
        start = loop.time()

        async def flood(client_id: str) -> int:
            async with Producer(cluster.bootstrap_servers, client_id=client_id, acks=1, linger_ms=0,
                                batch_size=1) as p:  # a record a request: a request's time, a record
                producers[client_id] = p
                pending: set[asyncio.Future] = set()
                while loop.time() < start + 5 or not throttled.is_set():
                    if len(pending) < 50:
                        f = await p.send("quota-grpc-time", b"v" * 100)
                        f.add_done_callback(lambda f: f.exception() or acked[client_id].append(loop.time()))
                        pending.add(f)
                        f.add_done_callback(pending.discard)
                    else:
                        await asyncio.sleep(0.005)
                await p.close(0)  # not waited for: what busy still holds, a record a throttle
                return p.metrics["produce-throttle-time-max"]

        async def fetch(client_id: str) -> int:
            """The throttle time the consumer was told once it was throttled (busy) or has records."""
            await eventually(lambda: "grpc-busy" in producers and producers["grpc-busy"].metrics[
                "produce-throttle-time-max"] > 0, 30, what="busy's producer throttled")
            async with Consumer(cluster.bootstrap_servers, client_id=client_id, auto_offset_reset="earliest") as c:
                await c.assign([("quota-grpc-time", 0)])
                records: list = []

                async def read() -> bool:
                    records.extend(await c.poll(200))
                    if client_id == "grpc-calm":
                        return bool(records)
                    if c.throttle_time_ms > 0:
                        throttled.set()
                    return c.throttle_time_ms > 0
                await eventually(read, 30, what=f"{client_id}'s fetch throttled" if client_id == "grpc-busy"
                                 else f"{client_id}'s records")
                return c.throttle_time_ms

        async def fetch_both() -> list[int]:
            try:
                return await asyncio.gather(fetch("grpc-busy"), fetch("grpc-calm"))
            finally:
                throttled.set()  # (on a failure too: the floods end)

        busy_max, calm_max, (busy_fetch, calm_fetch) = await asyncio.gather(
            flood("grpc-busy"), flood("grpc-calm"), fetch_both())
        busy, calm = (sum(1 for t in acked[c] if start + 3 <= t < start + 5) for c in ("grpc-busy", "grpc-calm"))
        print(f"from 3 s to 5 s: busy {busy} acknowledged (throttled up to {busy_max} ms), calm {calm}")
        assert busy_max > 0 and calm_max == 0
        assert busy * 2 < calm, (busy, calm)
        assert busy_fetch > 0 and calm_fetch == 0

    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(go())
    finally:
        loop.close()


def test_topic_mutations_over_controller_mutation_rate_are_refused_then_let_through(cluster):
    """KIP-599: controller_mutation_rate 1 partition/s is a bucket of 4 (4 windows of 1 s here);
    a 6-partition topic empties it, so the next CreateTopics v7, DeleteTopics v6 and
    CreatePartitions v3 are refused THROTTLING_QUOTA_EXCEEDED with the time to wait, an older
    CreateTopics (v5) is let through and throttled, and another client id is not limited."""
    asyncio.run(set_client_quota(cluster, "mutator", "controller_mutation_rate", 1))

    def create(name: str, version: int, client_id: str = "mutator", partitions: int = 1) -> Any:
        return kafka_call(cluster, 19, version, {"timeout": 30000, "validate_only": False, "topics": [
            {"name": name, "num_partitions": partitions, "replication_factor": 1, "assignments": [], "configs": []}]},
            client_id)

    first = create("mutated-1", 7, partitions=6)
    assert first.topics[0].error_code == 0 and first.throttle_time.total_seconds() > 1  # 6 of 4: 2 s in debt
    refused = create("mutated-2", 7)
    assert refused.topics[0].error_code == ErrorCode.THROTTLING_QUOTA_EXCEEDED
    assert refused.topics[0].error_message == "The throttling quota has been exceeded."
    assert 0 < refused.throttle_time.total_seconds() <= 2
    deleted = kafka_call(cluster, 20, 6, {"timeout": 30000, "topics": [{"name": "mutated-1", "topic_id": b""}]},
                         "mutator")
    assert deleted.responses[0].error_code == ErrorCode.THROTTLING_QUOTA_EXCEEDED
    grown = kafka_call(cluster, 37, 3, {"timeout": 30000, "validate_only": False, "topics": [
        {"name": "mutated-1", "count": 8, "assignments": None}]}, "mutator")
    assert grown.results[0].error_code == ErrorCode.THROTTLING_QUOTA_EXCEEDED
    old = create("mutated-3", 5)  # before KIP-599's error: accepted, and throttled
    assert old.topics[0].error_code == 0 and old.throttle_time.total_seconds() > 0
    assert create("other-client", 7, client_id="someone-else").topics[0].error_code == 0


def test_a_client_flooding_cheap_requests_over_request_percentage_is_throttled_another_is_not(cluster):
    """request_percentage=0.1 for client id "busy": Metadata requests back to back on one
    connection are answered throttle_time_ms > 0 and muted, so busy gets far fewer answered than
    "calm" (no quota) flooding the same way at the same time, which is never throttled. Busy is
    held to 1 ms of the broker's time a second, about ten of these requests; calm's rate is the
    machine's (at a load of 11 on 2 cores, 150 a second: a quota of 1%, 80 for busy, was too
    close to it)."""
    asyncio.run(set_client_quota(cluster, "busy", "request_percentage", 0.1))
    from brokerd.kafka.codec import build, frame_request, read_response, request_schema
    body = build(request_schema(3, 12), {"topics": None, "allow_auto_topic_creation": False,
                                         "include_topic_authorized_operations": False})
    results: dict[str, list[tuple[float, float]]] = {}  # client id -> (when answered, throttle s)
    start = time.monotonic()

    def flood(client_id: str) -> None:
        answers = results[client_id] = []
        with socket.create_connection(("127.0.0.1", cluster.kafka_ports[cluster.ids[0]]), 5) as s:
            s.settimeout(20)
            while time.monotonic() < start + 6:
                s.sendall(frame_request(3, 12, len(answers), client_id, body))
                size = struct.unpack(">i", s.recv(4, socket.MSG_WAITALL))[0]
                r = read_response(s.recv(size, socket.MSG_WAITALL), 3, 12)[1]
                answers.append((time.monotonic(), r.throttle_time.total_seconds()))

    threads = [threading.Thread(target=flood, args=(c,)) for c in ("busy", "calm")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    # after the first (samples - 1) windows' allowance, busy is held to 1 ms of the broker's time a second
    busy, calm = ([a for a in results[c] if a[0] >= start + 3] for c in ("busy", "calm"))
    print(f"from 3 s to 6 s: busy {len(busy)} answered, throttled up to {max(t for _, t in busy):.3f} s; "
          f"calm {len(calm)} answered")
    assert max(t for _, t in busy) > 0 and not any(t for _, t in results["calm"])
    assert len(busy) * 2 < len(calm), (len(busy), len(calm))  # without the quota: about the same


def rss_kib(pid: int) -> int:
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def test_a_connection_flood_from_one_address_leaves_the_broker_serving_others(cluster):
    """max.connections.per.ip=100: 2,000 connection attempts from 127.0.0.2 keep at most 100
    open, the others closed as accepted; meanwhile librdkafka from 127.0.0.1 (its override:
    1000) produces and consumes, and the broker's memory stays bounded."""
    from confluent_kafka import Consumer, Producer, TopicPartition
    port, pid = cluster.kafka_ports[cluster.ids[0]], cluster.procs[cluster.ids[0]].pid
    asyncio.run(cluster.create_topic("flooded", 1, rf=1))
    before = rss_kib(pid)

    async def flood() -> tuple[int, int, list]:
        kept: list = []
        refused = 0
        gate = asyncio.Semaphore(200)  # attempts at once (file descriptors, on both sides)

        async def attempt() -> None:
            nonlocal refused
            async with gate:
                try:
                    r, w = await asyncio.open_connection("127.0.0.1", port, local_addr=("127.0.0.2", 0))
                except OSError:
                    refused += 1
                    return
                try:  # the broker closes a refused connection at once; one it keeps stays silent
                    closed = await asyncio.wait_for(r.read(1), 2) == b""
                except TimeoutError:
                    closed = False
                except ConnectionError:  # reset: refused too
                    closed = True
                if closed:
                    refused += 1
                    w.close()
                else:
                    kept.append(w)

        await asyncio.gather(*(attempt() for _ in range(2000)))
        return len(kept), refused, kept

    def round_trip() -> bytes:
        p = Producer({"bootstrap.servers": cluster.kafka_bootstrap_servers})
        p.produce("flooded", b"during the flood")
        assert p.flush(30) == 0
        c = Consumer({"bootstrap.servers": cluster.kafka_bootstrap_servers, "group.id": "flood-check",
                      "auto.offset.reset": "earliest"})
        c.assign([TopicPartition("flooded", 0, 0)])
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and not m.error():
                c.close()
                return m.value()
        c.close()
        raise AssertionError("nothing consumed during the flood")

    async def both() -> tuple[int, int, bytes]:
        flooding = asyncio.ensure_future(flood())
        value = await asyncio.to_thread(round_trip)
        kept, refused, writers = await flooding
        for w in writers:
            w.close()
        return kept, refused, value

    kept, refused, value = asyncio.run(both())
    after = rss_kib(pid)
    print(f"kept {kept}, refused {refused}, RSS {before} -> {after} KiB")
    assert kept <= 100 and kept + refused == 2000 and refused >= 1900
    assert value == b"during the flood"
    assert after - before < 64 * 1024, f"the broker grew by {(after - before) // 1024} MiB"


def test_a_burst_of_connections_over_connection_creation_rate_is_held_then_closed(cluster):
    """KIP-612: connection_creation_rate=5 for 127.0.0.2 (a window of 3 samples' allowance, 15
    at once): of 40 connections opened at once from there, about 15 are served and the others
    are held unanswered and closed; 127.0.0.1, without a quota, has all of its 40 served."""
    port = cluster.kafka_ports[cluster.ids[0]]
    from brokerd.kafka.codec import build, frame_request, request_schema
    hello = frame_request(18, 3, 1, "burst", build(request_schema(18, 3), {
        "client_software_name": "pytest", "client_software_version": "1"}))

    async def burst(address: str) -> tuple[int, float]:
        async def one() -> tuple[bool, float]:
            opened = time.monotonic()
            r, w = await asyncio.open_connection("127.0.0.1", port, local_addr=(address, 0))
            try:
                w.write(hello)
                answered = len(await asyncio.wait_for(r.read(4), 20)) == 4
            except ConnectionError:
                answered = False
            w.close()
            return answered, time.monotonic() - opened

        done = await asyncio.gather(*(one() for _ in range(40)))
        return sum(a for a, _ in done), max(t for a, t in done if not a) if not all(a for a, _ in done) else 0.0

    asyncio.run(set_client_quota(cluster, "127.0.0.2", "connection_creation_rate", 5, "ip"))
    asyncio.run(cluster.create_topic("after-the-ip-quota", 1, rf=1))  # the broker has the quota's delta now
    try:
        served, held = asyncio.run(burst("127.0.0.2"))
        print(f"127.0.0.2: {served} of 40 served, the others held up to {held:.2f} s")
        assert 10 <= served <= 20 and held >= 0.15  # (16 / 3 - 5) / 5 * 3 s = 0.2 s
        assert asyncio.run(burst("127.0.0.1"))[0] == 40
    finally:
        asyncio.run(set_client_quota(cluster, "127.0.0.2", "connection_creation_rate", 0, "ip", remove=True))
