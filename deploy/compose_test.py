"""``make compose-test``: the docker compose quorum, tested for real.

Builds the image (offline: wheels from the host, a local base image when python:3.11-slim is
not available), brings three controllers and three brokers up, waits for their health
checks, creates a topic with replication factor 3 and produces to it with acks=all from
inside a container, checks every replica is in sync with the followers fetching over Kafka's
protocol from the REPLICATION listeners (advertised by container name), scrapes every node's
Prometheus metrics and has the compose Prometheus (the `monitoring` profile) scrape them too,
stops the active controller and checks a new one answers with the topics intact, stops a broker that leads partitions and checks every acknowledged message is still
consumed, starts both again and checks they catch up, then tears everything down. Then the TLS
variant (docker-compose.tls.yml: mutual TLS on every listener, certificates from
deploy/make_certs.py, the authorizer on): health checks, the tools with --command-config,
acks=all produce and consume, a client without ACLs refused and then allowed by `kraft acls`,
confluent-kafka on the host with its certificate, plaintext clients refused. Prints its
timings. Exits 0 with one line saying why when no Docker engine is reachable.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
COMPOSE_FILE = REPO / "deploy" / "docker-compose.yml"
TLS_FILE = REPO / "deploy" / "docker-compose.tls.yml"  # the TLS variant, over the plain file
CERTS = REPO / "deploy" / "certs"
CONTAINER_CERTS = "/etc/kraft/certs"
PROJECT = "kraftci"
BOOTSTRAP = "controller-1:9093,controller-2:9093,controller-3:9093"
SERVERS = "broker-4:9092,broker-5:9092,broker-6:9092"
KAFKA_SERVERS = "127.0.0.1:29094,127.0.0.1:29095,127.0.0.1:29096"  # the brokers' published Kafka listeners
METRICS_PORT = 29400  # node N's /metrics is published at 127.0.0.1:29400+N
PROMETHEUS = "http://127.0.0.1:29090"
CONSOLE = "http://127.0.0.1:28080"  # the console service (kraft web)
LOCAL_BASE = "pykraft-base:bookworm"
MESSAGES = 300
T0 = time.monotonic()
timings: list[tuple[str, float]] = []


def log(msg: str) -> None:
    print(f"[compose-test {time.monotonic() - T0:6.1f}s] {msg}", flush=True)


def sh(*cmd: str, check: bool = True, timeout: float = 600, input: str | None = None) -> subprocess.CompletedProcess:
    p = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=timeout, input=input)
    if check and p.returncode != 0:
        raise SystemExit(f"compose-test: `{' '.join(cmd)}` failed ({p.returncode}): "
                         f"{(p.stderr or p.stdout).strip()[-1500:]}")
    return p


def compose_cmd() -> list[str]:
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    return ["docker", "compose"]


FILES = [COMPOSE_FILE]  # the TLS phase adds TLS_FILE
PROFILES = ["monitoring"]


def compose(*args: str, **kw) -> subprocess.CompletedProcess:
    files = [a for f in FILES for a in ("-f", str(f))]
    profiles = [a for p in PROFILES for a in ("--profile", p)]
    return sh(*compose_cmd(), *files, "-p", PROJECT, *profiles, *args, **kw)


def exec_in(service: str, *cmd: str, **kw) -> subprocess.CompletedProcess:
    return compose("exec", "-T", service, *cmd, **kw)


def step(name: str):
    class Timer:
        def __enter__(self) -> None:
            self.t = time.monotonic()
            log(f"{name} ...")

        def __exit__(self, *exc: object) -> None:
            took = time.monotonic() - self.t
            timings.append((name, took))
            if exc[0] is None:
                log(f"{name}: {took:.1f}s")
    return Timer()


def engine_problem() -> str | None:
    if not shutil.which("docker"):
        return "no docker client installed"
    p = subprocess.run(["docker", "info", "--format", "{{.ServerVersion}}"], capture_output=True, text=True)
    if p.returncode != 0:
        return "no Docker engine reachable (" + (p.stderr.strip().splitlines() or ["docker info failed"])[-1] + ")"
    if not shutil.which("docker-compose") and subprocess.run(["docker", "compose", "version"],
                                                           capture_output=True).returncode != 0:
        return "neither docker-compose nor `docker compose` is installed"
    return None


def image_exists(tag: str) -> bool:
    return subprocess.run(["docker", "image", "inspect", tag], capture_output=True).returncode == 0


def build_image(prometheus: bool = True) -> None:
    base = os.environ.get("BASE_IMAGE")
    if not base:
        base = "python:3.11-slim" if image_exists("python:3.11-slim") else LOCAL_BASE
    if base == LOCAL_BASE and not image_exists(LOCAL_BASE):
        with step("build the local base image (debootstrap)"):
            sh(str(REPO / "deploy" / "build-base-image.sh"), LOCAL_BASE, timeout=900)
    with step("build wheels on the host"):
        sh(str(REPO / "deploy" / "build-wheels.sh"))
    with step(f"build the image on {base}"):
        docker = "/usr/bin/docker" if Path("/usr/bin/docker").exists() else "docker"
        env = dict(os.environ, DOCKER_BUILDKIT="1")
        p = subprocess.run([docker, "build", "-q", "-f", "deploy/Dockerfile", "--build-arg", f"BASE_IMAGE={base}",
                            "-t", "pykraft:latest", "."], cwd=REPO, capture_output=True, text=True, env=env)
        if p.returncode != 0:  # an older client without BuildKit: the classic builder
            sh("docker", "build", "-q", "-f", "deploy/Dockerfile", "--build-arg", f"BASE_IMAGE={base}",
               "-t", "pykraft:latest", ".", timeout=900)
    if not prometheus:
        return
    with step(f"build the Prometheus image on {base} (Debian's package)"):
        sh("docker", "build", "-q", "-f", "deploy/prometheus.Dockerfile", "--build-arg", f"BASE_IMAGE={base}",
           "-t", "pykraft-prometheus:latest", ".", timeout=900)


def http_get(url: str) -> str:
    import urllib.request
    with urllib.request.urlopen(url, timeout=5) as r:
        return r.read().decode()


def node_metrics(node_id: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Node N's samples, from its published /metrics, parsed by prometheus_client."""
    from prometheus_client.parser import text_string_to_metric_families
    text = http_get(f"http://127.0.0.1:{METRICS_PORT + node_id}/metrics")
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for f in text_string_to_metric_families(text) for s in f.samples}


def check_metrics(controllers: list[str], brokers: list[str]) -> None:
    """Every node serves its metrics; one controller is active; the brokers counted the
    console producer's messages; Prometheus scrapes every node and sees the same."""
    def total(samples: dict, name: str, **labels: str) -> float:
        return sum(v for (n, ls), v in samples.items() if n == name and set(labels.items()) <= set(ls))
    ids = {s: int(s.rsplit("-", 1)[1]) for s in controllers + brokers}
    scraped = {s: node_metrics(i) for s, i in ids.items()}
    active = sum(total(scraped[c], "kafka_controller_kafkacontroller_activecontrollercount") for c in controllers)
    if active != 1:
        raise SystemExit(f"compose-test: ActiveControllerCount sums to {active} over the controllers, not 1")
    if brokers:
        messages = sum(total(scraped[b], "kafka_server_brokertopicmetrics_messagesin_total", topic="orders")
                       for b in brokers)
        if messages != MESSAGES:
            raise SystemExit(f"compose-test: the brokers count {messages} messages in for orders, not {MESSAGES}")
    log(f"metrics: {len(scraped)} nodes serve /metrics ({sum(map(len, scraped.values()))} samples)")
    deadline = time.monotonic() + 60
    while True:
        try:
            up = json.loads(http_get(f"{PROMETHEUS}/api/v1/query?query=up"))["data"]["result"]
            targets = {r["metric"]["instance"] for r in up if r["value"][1] == "1"}
        except OSError:
            targets = set()
        if targets == {f"{s}:9404" for s in ids}:
            break
        if time.monotonic() > deadline:
            raise SystemExit(f"compose-test: Prometheus does not scrape every node within 60s (up: {sorted(targets)})")
        time.sleep(1)
    log(f"Prometheus at {PROMETHEUS} scrapes all {len(targets)} nodes")


def check_console(brokers: list[str]) -> None:
    """The console answers on its published port with the cluster it reads: the topic
    created above, and every broker on the overview."""
    deadline = time.monotonic() + 60
    while True:
        try:
            topics, overview = http_get(f"{CONSOLE}/topics"), http_get(f"{CONSOLE}/")
            if "orders" in topics and all(f">{b.rsplit('-', 1)[1]}<" in overview for b in brokers):
                break
            problem = "the topic or a broker is not shown yet"
        except OSError as e:
            problem = str(e)
        if time.monotonic() > deadline:
            raise SystemExit(f"compose-test: the console at {CONSOLE} did not show the cluster within 60s: {problem}")
        time.sleep(1)
    log(f"console: {CONSOLE} lists orders and brokers {', '.join(brokers)}")


def wait_healthy(services: list[str], timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        states = {}
        for s in services:
            cid = compose("ps", "-q", s).stdout.strip()
            if cid:
                states[s] = sh("docker", "inspect", "--format", "{{.State.Health.Status}}", cid,
                               check=False).stdout.strip()
        if all(states.get(s) == "healthy" for s in services):
            return
        time.sleep(1)
    raise SystemExit(f"compose-test: not healthy within {timeout:.0f}s: {states}")


def describe_quorum(service: str) -> dict[str, str]:
    out = exec_in(service, "kraft", "quorum", "--bootstrap-controller", BOOTSTRAP, "describe", "--status").stdout
    return {k.strip(): v.strip() for k, v in (line.split(":", 1) for line in out.splitlines() if ":" in line)}


def kafka_client_round_trip(messages: int = 200, security: dict[str, str] | None = None,
                            topic: str = "kafka-orders") -> None:
    """librdkafka through the brokers' published Kafka listeners, with nothing but
    bootstrap.servers (and ``security``, for TLS): admin create, idempotent acks=all produce, a
    group consumer."""
    from confluent_kafka import Consumer, Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    conf = {"bootstrap.servers": KAFKA_SERVERS, **(security or {})}
    admin = AdminClient(conf)
    admin.create_topics([NewTopic(topic, 3, 3)])[topic].result(60)
    p = Producer({**conf, "acks": "all", "enable.idempotence": True, "compression.type": "zstd"})
    sent = {f"k{i}".encode() for i in range(messages)}
    for key in sent:
        p.produce(topic, b"value-" + key, key)
    if p.flush(60):
        raise SystemExit("compose-test: the Kafka producer did not deliver everything within 60s")
    c = Consumer({**conf, "group.id": "compose", "auto.offset.reset": "earliest"})
    c.subscribe([topic])
    got: set[bytes] = set()
    deadline = time.monotonic() + 60
    while got != sent and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and not m.error():
            got.add(m.key())
    c.close()
    if got != sent:
        raise SystemExit(f"compose-test: the Kafka consumer read {len(got)} of {len(sent)} messages")
    log(f"confluent-kafka on the host: {len(sent)} messages of {topic} produced and consumed via {KAFKA_SERVERS}")


def check_replication(brokers: list[str], topic: str, admin: tuple[str, ...] = ()) -> None:
    """Followers fetch over Kafka's protocol from the leaders' REPLICATION listener (advertised
    by container name, replica.fetch.listener.name), and every replica of ``topic`` is in sync."""
    deadline = time.monotonic() + 60
    while True:
        desc = exec_in("controller-1", "kraft", "topics", "--bootstrap-controller", BOOTSTRAP, *admin, "describe",
                       "--topic", topic).stdout
        rows = re.findall(r"Replicas: ([\d,]+)\tIsr: ([\d,]*)", desc)
        if rows and all(sorted(r.split(",")) == sorted(i.split(",")) for r, i in rows):
            break
        if time.monotonic() > deadline:
            raise SystemExit(f"compose-test: the replicas of {topic} are not all in sync within 60s:\n{desc}")
        time.sleep(1)
    logs = compose("logs", "--no-color", *brokers).stdout
    over = set(re.findall(r"following broker \d+ at epoch \d+ \(log end \d+\) over (.+?) at (\S+)", logs))
    if not over or any(how != "Kafka's protocol" or not address.startswith("broker-") for how, address in over):
        raise SystemExit(f"compose-test: followers do not fetch over the REPLICATION listeners: {sorted(over)}")
    log(f"{topic}: every replica in sync; followers fetch over Kafka's protocol at "
        f"{', '.join(sorted({a for _, a in over}))}")


def make_certs(services: list[str]) -> None:
    """A test CA, a certificate per node and one for the admin (deploy/make_certs.py), readable
    by the image's uid 1000; the admin's client properties, as seen inside the containers."""
    ca_dir = REPO / "deploy" / "ca"  # the CA's key stays here, mounted into no container
    for d in (CERTS, ca_dir):
        shutil.rmtree(d, ignore_errors=True)
    make = [sys.executable, str(REPO / "deploy" / "make_certs.py"), "--ca-dir", str(ca_dir)]
    sh(*make, "--out", str(CERTS), *services)
    sh(*make, "--out", str(CERTS / "clients"), "admin", "alice")
    shutil.copy(ca_dir / "ca.crt", CERTS / "ca.crt")
    for user in ("admin", "alice"):
        (CERTS / "clients" / f"{user}.properties").write_text(
            f"security.protocol=SSL\nssl.truststore.location={CONTAINER_CERTS}/ca.crt\n"
            f"ssl.keystore.location={CONTAINER_CERTS}/clients/{user}.keystore.pem\n")
    for path in [CERTS, *CERTS.rglob("*")]:
        os.chown(path, 1000, 1000)


def tls_phase(controllers: list[str], brokers: list[str]) -> None:
    """The TLS variant (docker-compose.tls.yml): mutual TLS on every listener and the authorizer
    on. The tools work with --command-config, replication and health checks run over TLS, a
    client without ACLs is refused until an ACL allows it, a Kafka client on the host produces
    and consumes with its certificate, and plaintext clients are refused."""
    admin = f"{CONTAINER_CERTS}/clients/admin.properties"
    with step("TLS: certificates, compose up with docker-compose.tls.yml, every health check (over TLS)"):
        make_certs(controllers + brokers)
        FILES.append(TLS_FILE)
        compose("up", "-d", timeout=600)
        wait_healthy(controllers + brokers)
    with step("TLS: create a topic and produce/consume with acks=all through the tools"):
        exec_in("controller-1", "kraft", "topics", "--bootstrap-controller", BOOTSTRAP, "--command-config", admin,
                "create", "--topic", "secure-orders", "--partitions", "3", "--replication-factor", "3")
        lines = [f"s{i}" for i in range(MESSAGES)]
        exec_in(brokers[0], "kraft", "console-producer", "--bootstrap-server", SERVERS, "--topic", "secure-orders",
                "--acks", "all", "--producer.config", admin, input="\n".join(lines) + "\n")
        out = exec_in(brokers[1], "kraft", "console-consumer", "--bootstrap-server", SERVERS, "--topic",
                      "secure-orders", "--from-beginning", "--max-messages", str(MESSAGES), "--timeout-ms", "30000",
                      "--consumer.config", admin).stdout.split()
        if sorted(out) != sorted(lines):
            raise SystemExit(f"compose-test: over TLS {len(set(lines) - set(out))} of {MESSAGES} messages are missing")
        check_replication(brokers, "secure-orders", ("--command-config", admin))
    with step("TLS: the authorizer refuses User:alice until kraft acls --add allows her"):
        alice = f"{CONTAINER_CERTS}/clients/alice.properties"

        def alice_produces() -> subprocess.CompletedProcess:
            return exec_in(brokers[0], "kraft", "console-producer", "--bootstrap-server", SERVERS, "--topic",
                           "secure-orders", "--producer.config", alice, "--max-block-ms", "10000",
                           input="from-alice\n", check=False)
        p = alice_produces()
        if p.returncode != 1 or "TOPIC_AUTHORIZATION_FAILED" not in p.stderr or len(p.stderr.splitlines()) != 1:
            raise SystemExit(f"compose-test: User:alice without ACLs was not refused with one line: {p.stderr!r}")
        exec_in("controller-1", "kraft", "acls", "--bootstrap-controller", BOOTSTRAP, "--command-config", admin,
                "--add", "--allow-principal", "User:alice", "--operation", "Write", "--topic", "secure-orders")
        deadline = time.monotonic() + 30  # until the brokers have applied the ACL record
        while (p := alice_produces()).returncode != 0:
            if time.monotonic() > deadline:
                raise SystemExit(f"compose-test: User:alice still refused after kraft acls --add: {p.stderr!r}")
            time.sleep(0.5)
        log("User:alice refused with TOPIC_AUTHORIZATION_FAILED, then allowed by an ACL")
    with step("TLS: a Kafka client on the host with its certificate; plaintext clients refused"):
        clients = CERTS / "clients"
        kafka_client_round_trip(100, {"security.protocol": "ssl", "ssl.ca.location": str(CERTS / "ca.crt"),
                                      "ssl.certificate.location": str(clients / "admin.crt"),
                                      "ssl.key.location": str(clients / "admin.key")}, topic="kafka-secure")
        from confluent_kafka import KafkaException
        from confluent_kafka.admin import AdminClient
        try:
            AdminClient({"bootstrap.servers": KAFKA_SERVERS, "log_level": 0}).list_topics(timeout=5)
            raise SystemExit("compose-test: a plaintext Kafka client was answered by a TLS listener")
        except KafkaException:
            pass
        p = exec_in("controller-1", "kraft", "topics", "--bootstrap-controller", BOOTSTRAP, "--command-timeout", "3",
                    "list", check=False)
        if p.returncode != 1 or len(p.stderr.strip().splitlines()) != 1:
            raise SystemExit(f"compose-test: a plaintext kraft tool was not refused with one line: {p.stderr!r}")
        log(f"plaintext refused: {p.stderr.strip()[:160]}...")


def main() -> int:
    problem = engine_problem()
    if problem:
        if os.environ.get("KRAFT_SKIP_COMPOSE") == "1":  # a deliberate opt-out, said out loud
            print(f"compose-test: SKIPPED because KRAFT_SKIP_COMPOSE=1 ({problem})", flush=True)
            return 0
        print(f"compose-test: FAILED: {problem}; run deploy/ensure-docker.sh to start one, or set "
              f"KRAFT_SKIP_COMPOSE=1 to skip this test on purpose", flush=True)
        return 1
    compose("down", "-v", "--remove-orphans", check=False)
    try:
        build_image()
        controllers = ["controller-1", "controller-2", "controller-3"]
        brokers = [s for s in compose("config", "--services").stdout.split() if s.startswith("broker")]
        with step("compose up and wait for every health check"):
            compose("up", "-d", timeout=600)
            wait_healthy(controllers + brokers)
        q = describe_quorum("controller-1")
        leader = int(q["LeaderId"])
        log(f"quorum: leader {leader}, voters {q['CurrentVoters']}, observers {q['CurrentObservers']}")

        with step("create a topic with replication factor 3"):
            rf = "3" if len(brokers) >= 3 else "1"
            exec_in("controller-1", "kraft", "topics", "--bootstrap-controller", BOOTSTRAP, "create",
                    "--topic", "orders", "--partitions", "3", "--replication-factor", rf)
        produced = []
        if brokers:
            with step(f"produce {MESSAGES} messages with acks=all from inside a container"):
                produced = [f"m{i}" for i in range(MESSAGES)]
                exec_in(brokers[0], "kraft", "console-producer", "--bootstrap-server", SERVERS, "--topic",
                        "orders", "--acks", "all", input="\n".join(produced) + "\n")
            if len(brokers) >= 3:
                with step("followers replicate over the REPLICATION listeners (Kafka's protocol)"):
                    check_replication(brokers, "orders")

        if brokers:
            with step("a Kafka client on the host (confluent-kafka) creates, produces and consumes"):
                kafka_client_round_trip()

        with step("every node's metrics, and Prometheus scraping them"):
            check_metrics(controllers, brokers)

        with step("the web console (the console service) lists the topic and its brokers"):
            check_console(brokers)

        with step(f"stop the active controller (controller-{leader}); a new one answers"):
            compose("stop", f"controller-{leader}")
            others = [c for c in controllers if c != f"controller-{leader}"]
            deadline = time.monotonic() + 30
            while True:
                q2 = describe_quorum(others[0])
                if q2.get("LeaderId") and int(q2["LeaderId"]) != leader:
                    break
                if time.monotonic() > deadline:
                    raise SystemExit("compose-test: no new active controller within 30s")
                time.sleep(0.5)
            exec_in(others[0], "kraft", "topics", "--bootstrap-controller", BOOTSTRAP, "create",
                    "--topic", "after-failover", "--partitions", "1", "--replication-factor", "1")
            listed = exec_in(others[0], "kraft", "topics", "--bootstrap-controller", BOOTSTRAP, "list").stdout.split()
            if "orders" not in listed or "after-failover" not in listed:
                raise SystemExit(f"compose-test: topics lost across the failover: {listed}")
            log(f"new active controller: {q2['LeaderId']}; topics intact: {listed}")

        if brokers:
            desc = exec_in(others[0], "kraft", "topics", "--bootstrap-controller", BOOTSTRAP, "describe",
                           "--topic", "orders").stdout
            leaders = [int(m) for m in re.findall(r"Leader: (\d+)", desc)]
            victim = f"broker-{leaders[0]}"
            with step(f"stop {victim}, which leads partitions; every acknowledged message is consumed"):
                compose("stop", victim)
                reader = next(b for b in brokers if b != victim)
                out = exec_in(reader, "kraft", "console-consumer", "--bootstrap-server", SERVERS, "--topic",
                              "orders", "--from-beginning", "--max-messages", str(MESSAGES), "--timeout-ms",
                              "30000").stdout.split()
                missing = set(produced) - set(out)
                if missing:
                    raise SystemExit(f"compose-test: {len(missing)} acknowledged messages lost, e.g. {sorted(missing)[:5]}")
                log(f"consumed all {len(out)} messages with {victim} down")

        with step("start them again; they catch up"):
            compose("start", f"controller-{leader}", *([victim] if brokers else []))
            wait_healthy(controllers + brokers)
            deadline = time.monotonic() + 60
            while True:
                rep = exec_in("controller-1", "kraft", "quorum", "--bootstrap-controller", BOOTSTRAP, "describe",
                              "--replication").stdout
                header, *rows = [line.split("\t") for line in rep.strip().splitlines()]
                lag = header.index("Lag")
                if len(rows) == len(controllers) + len(brokers) and all(r[lag] == "0" for r in rows):
                    break
                if time.monotonic() > deadline:
                    raise SystemExit(f"compose-test: the restarted nodes did not catch up:\n{rep}")
                time.sleep(1)
            log("replication (every node caught up):\n" + rep.strip())
        if len(brokers) >= 3:
            with step("compose down -v before the TLS variant"):
                compose("down", "-v", "--remove-orphans")
            tls_phase(controllers, brokers)
    finally:
        with step("compose down -v"):
            compose("down", "-v", "--remove-orphans", check=False)
    total = time.monotonic() - T0
    print(json.dumps({"bench": "compose-test", "seconds": round(total, 1),
                      "steps": {n: round(t, 1) for n, t in timings}}), flush=True)
    log(f"passed in {total:.0f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
