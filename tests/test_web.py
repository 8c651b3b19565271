"""``kraft web`` (issue 30, first slice): the console's pages in a real headless browser
(Debian's chromium driven by selenium, no browser download) against a cluster of real
processes, its answers to bad input over plain HTTP, and 10,000 topics listed in under a
second (an in-memory cluster: a real one that large takes too long to build here)."""
from __future__ import annotations

import asyncio
import contextlib
import html
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from protos import controller_pb2 as cpb
from tests.brokercluster import REPO, BrokerCluster, running_cluster
from tests.eventually import eventually
from tests.kvcluster import free_ports
from tests.logs import assert_no_tracebacks
from tests.test_consumer_groups import GROUP_PROPS

CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"


def kraft(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kraft.cli", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=60)


class Console:
    """A ``kraft web`` process and the cluster it shows."""

    def __init__(self, cluster: BrokerCluster, log_dir: Path, *options: str) -> None:
        self.cluster = cluster
        self.listen = f"127.0.0.1:{free_ports(1)[0]}"
        self.url = f"http://{self.listen}"
        self.args = ["web", "--bootstrap-controller", cluster.quorum.bootstrap,
                     "--bootstrap-server", cluster.bootstrap_servers, "--listen", self.listen, *options]
        self.log = log_dir / f"web{''.join(options)}.log"
        self.proc = subprocess.Popen([sys.executable, "-m", "kraft.cli", *self.args], cwd=REPO,
                                     stdout=open(self.log, "w"), stderr=subprocess.STDOUT)

    def get(self, path: str) -> tuple[int, str]:
        return self.request(path)

    def request(self, path: str, form: dict[str, str] | None = None,
                headers: dict[str, str] | None = None) -> tuple[int, str]:
        data = urllib.parse.urlencode(form).encode() if form is not None else None
        req = urllib.request.Request(self.url + path, data=data, headers=headers or {})
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                return r.status, html.unescape(r.read().decode())
        except urllib.error.HTTPError as e:
            return e.code, html.unescape(e.read().decode())

    def wait_up(self) -> None:
        async def up() -> bool:
            try:
                return self.get("/")[0] == 200
            except OSError:
                return False
        asyncio.run(eventually(up, 30, interval=0.2, what=f"the console answers (see {self.log})"))

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(15)


@pytest.fixture(scope="module")
def console(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Console]:
    base = tmp_path_factory.mktemp("web")
    with running_cluster(base, GROUP_PROPS) as cluster:
        c = Console(cluster, base)
        try:
            c.wait_up()
            yield c
        finally:
            c.close()
    assert_no_tracebacks(base)


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    missing = [p for p in (CHROMIUM, CHROMEDRIVER) if not os.path.exists(p)]
    assert not missing, f"no {' or '.join(missing)}: install Debian's chromium and chromium-driver (make venv does)"
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                "--window-size=1280,900"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()


def texts(driver: object, css: str) -> list[str]:
    from selenium.webdriver.common.by import By
    return [e.text for e in driver.find_elements(By.CSS_SELECTOR, css)]  # type: ignore[attr-defined]


@contextlib.contextmanager
def navigating(driver: object) -> Iterator[None]:
    """Until the page the block leaves is gone (a click returns before the next page is there)."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.ui import WebDriverWait
    page = driver.find_element(By.TAG_NAME, "html")  # type: ignore[attr-defined]
    yield
    WebDriverWait(driver, 30).until(expected_conditions.staleness_of(page))


def fill(driver: object, values: dict[str, str]) -> None:
    """Type into each field; a value ending in a newline submits its form (and waits for the answer)."""
    from selenium.webdriver.common.by import By
    for element_id, value in values.items():
        field = driver.find_element(By.ID, element_id)  # type: ignore[attr-defined]
        field.clear()
        if value.endswith("\n"):
            with navigating(driver):
                field.send_keys(value)
        else:
            field.send_keys(value)


def click(driver: object, element_id: str) -> None:
    """Click a link or a submit button, and wait for the page it leads to."""
    from selenium.webdriver.common.by import By
    with navigating(driver):
        driver.find_element(By.ID, element_id).click()  # type: ignore[attr-defined]


def test_the_overview_shows_three_controllers_the_leader_and_the_brokers(console: Console, browser):
    browser.get(console.url + "/")
    rows = texts(browser, "#controllers tr.controller")
    assert len(rows) == 3
    leader = texts(browser, "#leader")[0]
    assert [r for r in rows if "leader" in r] and [r for r in rows if "leader" in r][0].startswith(leader)
    assert sum("follower" in r for r in rows) == 2
    brokers = texts(browser, "#brokers tr.broker")
    assert [b.split()[:2] for b in brokers] == [["101", "active"], ["102", "active"], ["103", "active"]]
    assert console.cluster.quorum.cluster_id in texts(browser, "#cluster-id")[0]
    assert "0 offline partitions" in texts(browser, "#health")[0]


def test_a_killed_broker_shows_fenced_and_its_partitions_under_replicated_with_links(console: Console, browser):
    cluster = console.cluster
    asyncio.run(cluster.create_topic("web-health", partitions=1, rf=3))
    cluster.kill(103)
    try:
        def findings() -> list[str] | None:
            browser.get(console.url + "/")
            states = {row.split()[0]: row.split()[1] for row in texts(browser, "#brokers tr.broker")}
            health = texts(browser, "#health li")
            return health if states.get("103") == "fenced" and "web-health-0" in health[1] else None
        health = asyncio.run(eventually(findings, 30, interval=0.5, what="broker 103 fenced, web-health-0 under-replicated"))
        assert health[0].startswith("0 offline partitions")
        assert health[1].split(":")[0].endswith("under-replicated partitions")
        from selenium.webdriver.common.by import By
        with navigating(browser):
            browser.find_element(By.LINK_TEXT, "web-health-0").click()
        assert texts(browser, "#topic-name") == ["web-health"]
        assert "103" not in texts(browser, "#partitions tr.partition")[0].split()[3]  # the ISR column
    finally:
        cluster.start_broker(103)
        asyncio.run(cluster.wait_unfenced(timeout=60))
        asyncio.run(cluster.wait_topic("web-health", 1, timeout=60))


def test_a_topic_created_through_the_form_is_listed_by_kraft_and_deleted_after_confirmation(console: Console, browser):
    browser.get(console.url + "/topics")
    click(browser, "create-topic")
    fill(browser, {"name": "web-orders", "partitions": "3", "replication_factor": "2",
                   "configs": "retention.ms=3600000"})
    click(browser, "submit")
    assert texts(browser, "#topic-name") == ["web-orders"]
    assert len(texts(browser, "#partitions tr.partition")) == 3
    assert "retention.ms 3600000" in texts(browser, "#configs")[0]
    listed = kraft("topics", "--bootstrap-controller", console.cluster.quorum.bootstrap, "list")
    assert "web-orders" in listed.stdout.split()

    # the cluster's refusal is one line on the page, in Kafka's words
    browser.get(console.url + "/topics/new")
    fill(browser, {"name": "web-orders", "partitions": "1"})
    click(browser, "submit")
    assert texts(browser, "#error")[0].startswith("TOPIC_ALREADY_EXISTS")

    browser.get(console.url + "/topics/web-orders")
    click(browser, "delete")
    fill(browser, {"confirm": "web-order"})  # a typo deletes nothing
    click(browser, "submit")
    assert "type the topic's name" in texts(browser, "#error")[0]
    browser.get(console.url + "/topics/web-orders/delete")
    fill(browser, {"confirm": "web-orders"})
    click(browser, "submit")
    assert texts(browser, "#notice") == ["Deleted topic web-orders."]
    listed = kraft("topics", "--bootstrap-controller", console.cluster.quorum.bootstrap, "list")
    assert "web-orders" not in listed.stdout.split()


def test_the_topic_list_is_searched_and_paged_by_100(console: Console, browser):
    async def create() -> None:
        async with console.cluster.controller() as c:
            topics = [cpb.CreatableTopic(name=f"paged-{i:03d}", num_partitions=1, replication_factor=1)
                      for i in range(105)]
            r = await c.create_topics(cpb.CreateTopicsRequest(topics=topics))
            assert all(t.error_code == 0 for t in r.topics)
    asyncio.run(create())
    browser.get(console.url + "/topics?q=paged-")
    assert texts(browser, "#count")[0].startswith("105 topics matching")
    assert "page 1 of 2" in texts(browser, "#count")[0]
    assert len(texts(browser, "#topics tr.topic")) == 100
    click(browser, "next")
    assert [t.split()[0] for t in texts(browser, "#topics tr.topic")] == [f"paged-{i}" for i in range(100, 105)]
    browser.get(console.url + "/topics")
    fill(browser, {"search": "paged-04\n"})  # Enter submits the search
    assert len(texts(browser, "#topics tr.topic")) == 10


def test_a_produced_message_is_found_by_offset_as_text_json_and_hex(console: Console, browser):
    asyncio.run(console.cluster.create_topic("web-messages", partitions=2, rf=3))
    browser.get(console.url + "/topics/web-messages/partitions/1")
    assert "holds no records" not in browser.page_source
    for i in range(3):
        fill(browser, {"key": f"k{i}", "value": json.dumps({"n": i, "word": "hello"})})
        click(browser, "send")
    # the form's answer is the partition from the new record's offset
    assert texts(browser, "#messages .offset") == ["2"]
    browser.get(console.url + "/topics/web-messages/partitions/1?offset=1")
    assert texts(browser, "#messages .offset") == ["1", "2"]
    assert texts(browser, "#messages .key") == ["k1", "k2"]
    assert texts(browser, "#messages .value")[0] == '{"n": 1, "word": "hello"}'
    browser.get(console.url + "/topics/web-messages/partitions/1?offset=0&format=json")
    assert texts(browser, "#messages .value")[0] == '{\n  "n": 0,\n  "word": "hello"\n}'
    browser.get(console.url + "/topics/web-messages/partitions/1?offset=2&format=hex")
    assert texts(browser, "#messages .key") == ["6b 32"]

    # by time: the first record at or after the time shown for offset 2
    browser.get(console.url + "/topics/web-messages/partitions/1?offset=0")
    shown = [row.split()[:2] for row in texts(browser, "#messages tr.message")]
    at = dict(shown)["2"]
    browser.get(console.url + "/topics/web-messages/partitions/1")
    fill(browser, {"time": at + "\n"})
    assert texts(browser, "#messages .offset")[0] == next(o for o, t in shown if t >= at)
    browser.get(console.url + "/topics/web-messages/partitions/1?time=2999-01-01T00:00:00Z")
    assert "No records at or after 2999-01-01T00:00:00Z." in texts(browser, "#messages")[0]
    got = kraft("get-offsets", "--bootstrap-server", console.cluster.bootstrap_servers, "--topic", "web-messages")
    assert got.stdout == "web-messages:0:0\nweb-messages:1:3\n"


def test_a_groups_lag_per_partition_shows_and_drops_to_0_after_consuming(console: Console, browser):
    from clients import Consumer, Producer
    bs = console.cluster.bootstrap_servers
    tps = [("web-lag", 0), ("web-lag", 1)]

    async def commit_start_then(consume: bool) -> None:
        async with Consumer(bs, group_id="web-group", enable_auto_commit=False) as c:
            await c.assign(tps)
            if not consume:
                await c.commit({tp: 0 for tp in tps})
                return
            c.seek_to_beginning()
            got: list = []
            await eventually(lambda: _extend(got, c), 30, what="10 records consumed")
            await c.commit()

    async def setup() -> None:
        await console.cluster.create_topic("web-lag", partitions=2, rf=3)
        async with Producer(bs) as p:
            for i in range(10):
                await p.send_and_wait("web-lag", b"v%d" % i, partition=i % 2)
        await commit_start_then(consume=False)
    asyncio.run(setup())
    browser.get(console.url + "/groups")
    assert "web-group" in [g.split()[0] for g in texts(browser, "#groups tr.group")]
    browser.get(console.url + "/groups/web-group")
    assert texts(browser, "#lag .lag") == ["5", "5"]
    assert texts(browser, "#total-lag") == ["10"]
    assert "No active members." in texts(browser, "#members")[0]

    asyncio.run(commit_start_then(consume=True))
    browser.get(console.url + "/groups/web-group")
    assert texts(browser, "#lag .lag") == ["0", "0"]
    assert texts(browser, "#total-lag") == ["0"]


async def _extend(got: list, consumer: object) -> bool:
    """One poll's records added to ``got``; whether all 10 are there."""
    got += await consumer.poll(200)  # type: ignore[attr-defined]
    return len(got) >= 10


def test_bad_input_answers_400_or_404_in_one_line(console: Console):
    asyncio.run(console.cluster.create_topic("web-bad", partitions=1, rf=1))
    cases = {
        "/topics?page=x": (400, "page must be a whole number, not 'x'"),
        "/topics?page=0": (400, "page must be at least 1, not 0"),
        "/topics?page=99999999999999999999": (404, "page 99999999999999999999 does not exist"),
        "/topics/no-such-topic": (404, "UNKNOWN_TOPIC_OR_PARTITION"),
        "/topics/no-such-topic/partitions/0": (404, "UNKNOWN_TOPIC_OR_PARTITION"),
        "/topics/web-bad/partitions/7": (404, "topic web-bad has no partition 7 (it has 1)"),
        "/topics/web-bad/partitions/x": (400, "partition must be a whole number, not 'x'"),
        "/topics/web-bad/partitions/0?offset=-1": (400, "offset must be at least 0, not -1"),
        "/topics/web-bad/partitions/0?offset=5": (400, "offset 5: web-bad-0 holds no records"),
        "/topics/web-bad/partitions/0?format=xml": (400, "format must be one of text, json, hex, not 'xml'"),
        "/topics/web-bad/partitions/0?limit=100000": (400, "limit must be from 1 to 500, not 100000"),
        "/topics/web-bad/partitions/0?time=yesterday": (400, "time must be milliseconds since the epoch or an "
                                                            "ISO 8601 time such as 2026-01-31T12:00:00Z, not 'yesterday'"),
        "/groups/no-such-group": (404, "GROUP_ID_NOT_FOUND"),
        "/nowhere": (404, "Not Found"),
    }
    for path, (status, line) in cases.items():
        got, body = console.get(path)
        assert (got, line in body) == (status, True), (path, got, body[-400:])
        assert "Traceback" not in body
    # a form posted from another site is refused (CSRF); the topic is not created
    status, body = console.request("/topics", {"name": "csrf", "partitions": "1"},
                                   headers={"Origin": "http://evil.example"})
    assert status == 403 and "not from this console" in body
    assert console.get("/topics/csrf")[0] == 404
    status, body = console.request("/topics", {"name": "bad-config", "configs": "retention.ms"})
    assert (status, "bad config 'retention.ms': expected KEY=VALUE" in body) == (400, True)


def test_read_only_mode_hides_every_form_and_refuses_every_change(console: Console, browser, tmp_path: Path):
    from selenium.webdriver.common.by import By
    asyncio.run(console.cluster.create_topic("web-ro", partitions=1, rf=1))
    ro = Console(console.cluster, tmp_path, "--read-only")
    try:
        ro.wait_up()
        for path in ("/", "/topics", "/topics/web-ro", "/topics/web-ro/partitions/0", "/groups"):
            browser.get(ro.url + path)
            assert texts(browser, "#read-only") == ["read-only"], path
            assert browser.find_elements(By.CSS_SELECTOR, "form[method=post], #create-topic, #delete") == [], path
            assert browser.find_elements(By.CSS_SELECTOR, "form[method=get]") or path in ("/", "/topics/web-ro",
                                                                                          "/groups"), path
        refusal = "this console is read-only (kraft web --read-only): it changes nothing"
        for path, form in [("/topics/new", None), ("/topics", {"name": "ro-created", "partitions": "1"}),
                           ("/topics/web-ro/delete", None), ("/topics/web-ro/delete", {"confirm": "web-ro"}),
                           ("/topics/web-ro/partitions/0", {"key": "k", "value": "v"})]:
            status, body = ro.request(path, form)
            assert (status, refusal in body) == (403, True), (path, status, body[-300:])
        assert console.get("/topics/ro-created")[0] == 404
        assert console.get("/topics/web-ro")[0] == 200
        assert "holds no records" in console.get("/topics/web-ro/partitions/0?offset=1")[1]
    finally:
        ro.close()
    assert_no_tracebacks(tmp_path)


def test_a_second_console_on_the_same_address_stops_with_one_line(console: Console):
    r = kraft(*console.args)
    assert r.returncode == 1
    assert r.stderr == f"Error: cannot listen on {console.listen}: the address is already in use\n"


# ------------------------------------------------------------------------------ without a cluster

@pytest.mark.parametrize("listen, line", [
    ("127.0.0.1:99999", "--listen '127.0.0.1:99999': expected HOST:PORT with a port from 0 to 65535, e.g. 127.0.0.1:8080"),
    ("nope", "--listen 'nope': expected HOST:PORT with a port from 0 to 65535, e.g. 127.0.0.1:8080"),
    ("999.1.1.1:80", "cannot listen on 999.1.1.1:80: "),  # then the resolver's words
])
def test_a_bad_listen_address_is_one_line(listen: str, line: str):
    r = kraft("web", "--bootstrap-controller", "127.0.0.1:1", "--bootstrap-server", "127.0.0.1:2", "--listen", listen)
    assert r.returncode == 1 and r.stderr.startswith(f"Error: {line}") and r.stderr.count("\n") == 1, r.stderr


def test_a_console_whose_cluster_is_unreachable_answers_503_at_once_in_one_line(tmp_path: Path):
    nothing = free_ports(2)  # nothing listens on these
    listen = f"127.0.0.1:{free_ports(1, set(nothing))[0]}"
    log = tmp_path / "web.log"
    proc = subprocess.Popen([sys.executable, "-m", "kraft.cli", "web", "--bootstrap-controller",
                             f"127.0.0.1:{nothing[0]}", "--bootstrap-server", f"127.0.0.1:{nothing[1]}",
                             "--listen", listen], cwd=REPO, stdout=open(log, "w"), stderr=subprocess.STDOUT)
    try:
        def answer() -> tuple[int, str, float] | None:
            began = time.monotonic()
            try:
                urllib.request.urlopen(f"http://{listen}/", timeout=30)
            except urllib.error.HTTPError as e:
                return e.code, html.unescape(e.read().decode()), time.monotonic() - began
            except OSError:
                return None  # not listening yet
            return None
        status, body, took = asyncio.run(eventually(answer, 30, interval=0.2, what="the console answers"))
        assert status == 503 and took < 5, (status, took)
        assert f"NETWORK_EXCEPTION: no controller accepted a connection: 127.0.0.1:{nothing[0]}: connection refused" \
            in body
    finally:
        proc.terminate()
        proc.wait(15)
    assert_no_tracebacks(tmp_path)


class _Partition:
    partition, leader, leader_epoch, replicas, isr = 0, 1, 0, [1], [1]


class _Topic:
    def __init__(self, name: str) -> None:
        self.name, self.partitions, self.configs = name, [_Partition()], {}


class _InMemoryCluster:
    """As many topics as asked, as kraft.web.cluster.Cluster answers DescribeTopics."""

    def __init__(self, n: int) -> None:
        self.all = [_Topic(f"topic-{i:05d}") for i in range(n)]

    async def start(self) -> None: ...
    async def close(self) -> None: ...

    async def topics(self, names: list[str] | None = None) -> list[_Topic]:
        return self.all


def test_ten_thousand_topics_list_in_under_a_second():
    from starlette.testclient import TestClient

    from kraft.web.app import create_app
    with TestClient(create_app(_InMemoryCluster(10_000))) as client:  # type: ignore[arg-type]
        for query in ("/topics", "/topics?page=100", "/topics?q=topic-09"):
            began = time.perf_counter()
            r = client.get(query)
            took = time.perf_counter() - began
            assert r.status_code == 200, r.text
            assert took < 1.0, f"{query} took {took:.2f}s"
        assert "10000 topics" in client.get("/topics").text
        assert client.get("/topics?page=101").status_code == 404


class _BrokenCluster(_InMemoryCluster):
    async def topics(self, names: list[str] | None = None) -> list[_Topic]:
        raise ValueError("boom")


def test_a_failure_nothing_expected_is_one_line_on_the_page_and_in_the_log(caplog: pytest.LogCaptureFixture):
    from starlette.testclient import TestClient

    from kraft.web.app import create_app
    with TestClient(create_app(_BrokenCluster(0)), raise_server_exceptions=False) as client:  # type: ignore[arg-type]
        r = client.get("/topics")
    line = "unexpected ValueError: boom (a bug: please report it with what you did)"
    assert r.status_code == 500 and f'<p class="error" id="error">{line}</p>' in r.text
    assert [rec.getMessage() for rec in caplog.records if rec.name == "kraft.web"] == [f"GET /topics: {line}"]
    assert not [rec for rec in caplog.records if rec.exc_info]
