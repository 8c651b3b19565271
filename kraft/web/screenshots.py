"""Screenshots of the console's main pages for docs/web.md: ``python -m kraft.web.screenshots
[OUT_DIR]`` (docs/images by default) starts a ``kraft dev-quorum`` of three controllers and
three brokers on free loopback ports, gives it something to show (a topic with JSON messages,
a consumer group behind, a client quota, a throttled reassignment, traffic for the charts),
serves ``kraft web`` over it, and saves each page as the headless chromium the tests use
draws it (PNG, reduced to 256 colours to stay small). Everything it started is stopped after,
and its temporary directory removed."""
from __future__ import annotations

import asyncio
import json
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
#: A chart line of two points or more, not all zero.
MOVING = 'polyline[points*=" "]:not([data-max="0"])'
#: (file name, path of the page, what to wait for on it: a CSS selector that must be there)
PAGES = (
    ("overview", "/", "#brokers .log-dir"),
    ("topics", "/topics", "#topics tr.topic"),
    ("topic", "/topics/orders", "#partitions tr.partition"),
    ("messages", "/topics/orders/partitions/0?format=json&limit=6", "#messages tr.message"),
    ("quotas", "/quotas", "#quotas tr.quota"),
    ("reassignments", "/reassignments", "#reassignments tr.reassignment progress"),
    ("metadata", "/metadata?path=/topics/orders", "#entries tr.entry"),
    ("charts", "/charts", f"#messages-in-topic {MOVING}"),
    ("group", "/groups/billing", f"#lag-chart {MOVING}"),
)
WIDTH, HEIGHT = 1280, 900


def wait(check: Callable[[], object], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise SystemExit(f"Error: not within {timeout:g} s: {what}")
        time.sleep(0.5)


async def seed(bootstrap: str, servers: str) -> None:
    """What the pages show: topic ``orders`` with JSON messages, group ``billing`` behind by
    some, a quota, and a partition being moved slowly (throttled) to show a progress bar."""
    from clients import Consumer, Producer
    from kraft import reassign
    from metadata.client import ControllerClient
    from protos import controller_pb2 as pb
    async with ControllerClient(bootstrap) as c:
        await c.create_topics(pb.CreateTopicsRequest(topics=[
            pb.CreatableTopic(name="orders", num_partitions=3, replication_factor=3),
            pb.CreatableTopic(name="payments", num_partitions=2, replication_factor=2),
            pb.CreatableTopic(name="archive", num_partitions=1, replication_factor=1)]))
        from kraft.client_quotas import alter_request
        await c.alter_client_quotas(alter_request([("user", "alice")], ["producer_byte_rate=1048576"], []))
        await c.alter_client_quotas(alter_request([("client-id", None)], ["consumer_byte_rate=5242880"], []))
    async with Producer(servers, linger_ms=5) as p:
        for i in range(60):
            order = {"order": 1000 + i, "customer": f"c-{i % 7}", "amount": round(9.5 + i * 1.25, 2)}
            await p.send_and_wait("orders", json.dumps(order).encode(), key=f"c-{i % 7}".encode(), partition=i % 3)
        await asyncio.gather(*[await p.send("archive", b"x" * 1000) for _ in range(1500)])
    async with Consumer(servers, group_id="billing", enable_auto_commit=False) as consumer:
        await consumer.assign([("orders", p) for p in range(3)])
        await consumer.commit({("orders", p): 5 * (p + 1) for p in range(3)})
    async with ControllerClient(bootstrap) as c:
        placed = (await c.describe_topics(pb.DescribeTopicsRequest(names=["archive"]))).topics[0].partitions[0]
        target = next(b for b in (101, 102, 103) if b not in placed.replicas)
        await reassign.execute(c, {("archive", 0): (*placed.replicas, target)}, 5_000)  # minutes to copy


async def traffic(servers: str, stop: threading.Event) -> None:
    """Messages in and out until ``stop``, for the charts to have lines (and group billing's
    lag to grow)."""
    from clients import Consumer, Producer
    async with Producer(servers) as p, Consumer(servers, group_id="billing-live") as consumer:
        await consumer.subscribe(["payments"])
        i = 0
        while not stop.is_set():
            await p.send_and_wait("payments", b'{"paid": true}')
            if i % 5 == 0:
                await p.send_and_wait("orders", json.dumps({"order": 2000 + i}).encode(), partition=i % 3)
            await consumer.poll(100)
            i += 1


def shrink(png: Path) -> None:
    """256 colours are plenty for a page of text and tables (a third of the size); Pillow comes
    with matplotlib (the analytics extra), and without it the screenshot stays as it is."""
    try:
        from PIL import Image
    except ImportError:
        return
    Image.open(png).convert("RGB").quantize(256).save(png, optimize=True)


def main(out: Path) -> None:
    from selenium import webdriver
    from selenium.common.exceptions import WebDriverException
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By

    from kraft.dev_quorum import DevQuorum, consecutive_ports

    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="kraft-screenshots-"))
    count = 3 + 2 * 3 + 6 + 1  # the quorum's, every node's metrics, the console's
    base = consecutive_ports(count)
    ports = list(range(base, base + count))
    q = DevQuorum(str(work / "cluster"), ports[0], brokers=3, metrics=True)
    listen = f"127.0.0.1:{ports[15]}"
    driver = None
    stop = threading.Event()
    moving = threading.Thread(target=lambda: asyncio.run(traffic(q.bootstrap_servers, stop)), daemon=True)
    try:
        q.start()
        asyncio.run(q.wait_for_leader())
        asyncio.run(q.wait_for_brokers())
        asyncio.run(seed(q.bootstrap, q.bootstrap_servers))
        q.start_console(listen)
        moving.start()
        options = webdriver.ChromeOptions()
        options.binary_location = CHROMIUM
        for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                    f"--window-size={WIDTH},{HEIGHT}", "--hide-scrollbars"):
            options.add_argument(arg)
        driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
        for name, path, ready in PAGES:
            def shown(path: str = path, ready: str = ready) -> bool:
                try:
                    driver.get(f"http://{listen}{path}")
                except WebDriverException:  # the console is not listening yet
                    return False
                return bool(driver.find_elements(By.CSS_SELECTOR, ready))
            wait(shown, 90, f"{path} showing {ready}")
            png = out / f"console-{name}.png"
            driver.save_screenshot(str(png))
            shrink(png)
            print(f"{png} ({png.stat().st_size // 1024} KiB)")
    finally:
        stop.set()
        if moving.is_alive():
            moving.join(30)
        if driver is not None:
            driver.quit()
        q.stop()  # the console too
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    try:
        main(Path(sys.argv[1] if len(sys.argv) > 1 else "docs/images"))
    except Exception as e:  # noqa: BLE001 (one line, as every tool of the project says what failed)
        raise SystemExit(f"Error: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}") from None
