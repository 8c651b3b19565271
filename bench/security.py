"""TLS and the authorizer, measured: what mutual TLS on every listener and the StandardAuthorizer
cost topic creation and acks=all produce, beside the same cluster in plaintext, in one run.

    python -m bench.security --seconds 10 --topics 300

Three controllers and three brokers (``kraft.dev_quorum``) are started three times, one after
the other, on this machine:
- ``plaintext``: no TLS, no authorizer (what the rest of bench/ measures);
- ``tls``: every listener SSL with ``ssl.client.auth=required`` (the controllers' Raft traffic,
  the brokers' gRPC and Kafka listeners, replication), certificates from deploy/make_certs.py;
- ``sasl_ssl``: as ``tls``, with the Kafka listeners SASL_SSL (PLAIN, users in the listener's
  JAAS config): librdkafka logs in as ``bench`` on each connection, after the TLS handshake;
- ``tls+acls``: the same as ``tls`` with ``authorizer.class.name`` set. The nodes and the admin are super
  users; the benchmark's client (``User:bench``) is not: ACLs allow it CREATE and
  IDEMPOTENT_WRITE on the cluster and WRITE on the topics prefixed ``bench``, so every request
  it makes is checked against the ACL index.

In each, JSON lines (``bench`` = ``security``, ``mode`` as above):
- ``create_topics``: ``--topics`` CreateTopics requests (one topic, one partition, replication
  factor 3, each), ``--clients`` at a time, through the controllers' client: ops/s, p50/p99 ms;
- ``produce``: our idempotent producer (gRPC), acks=all, ``--value``-byte records, flat out for
  ``--seconds`` into a 6-partition topic, with bench.kafka_clients' workload and settings (4 MiB
  buffer, linger.ms 5): msgs/s, MB/s, and p50/p99 ms from a record queued to its acknowledgement;
- ``produce_kafka``: the same with confluent-kafka (librdkafka) through the Kafka listener;
- ``consume_kafka``: librdkafka reading those records back through the Kafka listener.
Each mode runs ``--rounds`` times, in order and then in reverse (A B C C B A), and the
``relative`` rows give each workload's mean throughput in the other modes over ``plaintext``'s
(the issue's target: ``tls+acls`` at least 0.85), and ``sasl_ssl``'s over ``tls``'s (issue 29:
at least 0.9).

    python -m bench.security --modes tls,sasl_ssl --seconds 5 --topics 50 --rounds 2

Every process (six servers, the client, this one) shares this machine's cores; the three modes
run back to back so that the ratios compare like with like (``load_average`` is in every row).
"""
from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from clients.security import client_tls
from kraft.dev_quorum import DevQuorum
from metadata.client import ControllerClient
from protos import controller_pb2 as cpb
from common.tls import TLSConfig

from .common import REPO, emit, free_ports
from .kafka_clients import confluent_consume, confluent_produce, pykraft_produce

PARTITIONS = 6
NODES = ("controller-1", "controller-2", "controller-3", "broker-101", "broker-102", "broker-103")
RULE = "RULE:^CN=([^,]+).*$/$1/,DEFAULT"  # User:<CN>, as deploy/docker-compose.tls.yml maps them
JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="bench" password="bench-secret" '
        'user_bench="bench-secret";')


@dataclass(frozen=True)
class Mode:
    """One cluster's security: TLS on every listener or none, the authorizer on or off."""

    name: str
    tls: bool
    acls: bool
    sasl: bool = False  # the Kafka listeners SASL_SSL (PLAIN) rather than SSL

    def _props(self, certs: Path, protocols: str) -> dict[str, str]:
        props: dict[str, str] = {}
        if self.tls:
            props |= {"listener.security.protocol.map": protocols, "ssl.client.auth": "required",
                      "ssl.truststore.location": str(certs / "ca.crt"), "ssl.principal.mapping.rules": RULE}
        if self.acls:
            props |= {"authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                      "super.users": ";".join(f"User:{n}" for n in (*NODES, "admin"))}
        return props

    def controller_props(self, certs: Path) -> dict[str, str]:
        return self._props(certs, "CONTROLLER:SSL")

    def broker_props(self, certs: Path) -> dict[str, str]:
        if self.sasl:
            return {**self._props(certs, "CONTROLLER:SSL,PLAINTEXT:SSL,KAFKA:SASL_SSL"),
                    "sasl.enabled.mechanisms": "PLAIN", "listener.name.kafka.plain.sasl.jaas.config": JAAS}
        return self._props(certs, "CONTROLLER:SSL,PLAINTEXT:SSL,KAFKA:SSL")

    def node_props(self, certs: Path) -> dict[int, dict[str, str]]:
        if not self.tls:
            return {}
        return {int(n.split("-")[1]): {"ssl.keystore.location": str(certs / f"{n}.keystore.pem")} for n in NODES}

    def client_props(self, certs: Path, name: str) -> dict[str, str]:
        if not self.tls:
            return {}
        return {"security.protocol": "SSL", "ssl.truststore.location": str(certs / "ca.crt"),
                "ssl.keystore.location": str(certs / f"{name}.keystore.pem")}

    def client_tls(self, certs: Path, name: str = "bench") -> TLSConfig | None:
        return client_tls(self.client_props(certs, name))

    def librdkafka(self, certs: Path) -> dict[str, str]:
        if not self.tls:
            return {}
        tls = {"ssl.ca.location": str(certs / "ca.crt"), "ssl.certificate.location": str(certs / "bench.crt"),
               "ssl.key.location": str(certs / "bench.key")}
        if self.sasl:
            return {"security.protocol": "sasl_ssl", "sasl.mechanism": "PLAIN", "sasl.username": "bench",
                    "sasl.password": "bench-secret", **tls}
        return {"security.protocol": "ssl", **tls}

    def grant(self, q: DevQuorum, certs: Path) -> None:
        """The benchmark's client is no super user: ACLs allow it what it does."""
        if not self.acls:
            return
        admin = q.base_dir / "admin.properties"
        admin.write_text("".join(f"{k}={v}\n" for k, v in self.client_props(certs, "admin").items()))
        for what in (["--operation", "Create", "--operation", "IdempotentWrite", "--cluster"],
                     ["--operation", "Write", "--topic", "bench", "--resource-pattern-type", "prefixed"]):
            subprocess.run([sys.executable, "-m", "kraft.cli", "acls", "--bootstrap-controller", q.bootstrap,
                            "--command-config", str(admin), "--add", "--allow-principal", "User:bench", *what],
                           cwd=REPO, check=True, capture_output=True)


MODES = (Mode("plaintext", False, False), Mode("tls", True, False), Mode("sasl_ssl", True, False, sasl=True),
         Mode("tls+acls", True, True))
#: What each mode is compared with beside plaintext: SASL_SSL with SSL (issue 29's target, 0.9).
ALSO_OVER = {"sasl_ssl": "tls"}


def _pct(xs: list[float], q: float) -> float | None:
    if not xs:
        return None
    xs = sorted(xs)
    return round(xs[min(len(xs) - 1, int(len(xs) * q))] * 1000, 2)


def _row(mode: str, phase: str, **fields: object) -> dict:
    return {"bench": "security", "mode": mode, "phase": phase, **fields,
            "load_average": round(os.getloadavg()[0], 1)}


async def create_topics(bootstrap: str, tls: TLSConfig | None, count: int, clients: int, prefix: str) -> dict:
    latencies: list[float] = []
    names = iter(range(count))

    async def worker() -> None:
        async with ControllerClient(bootstrap, timeout=60, tls=tls) as c:
            for i in names:
                t = time.perf_counter()
                r = await c.create_topics(cpb.CreateTopicsRequest(topics=[cpb.CreatableTopic(
                    name=f"{prefix}-{i}", num_partitions=1, replication_factor=3)]))
                latencies.append(time.perf_counter() - t)
                if r.topics[0].error_code:
                    raise SystemExit(f"bench.security: CreateTopics failed: {r.topics[0].error_message}")
    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(clients)))
    elapsed = time.perf_counter() - start
    return {"topics": count, "clients": clients, "ops_per_s": round(count / elapsed, 1),
            "p50_ms": _pct(latencies, 0.5), "p99_ms": _pct(latencies, 0.99)}


def _produced(row: dict) -> dict:
    """What bench.kafka_clients' producers report that this benchmark compares."""
    return {k: row[k] for k in ("messages", "failed", "msgs_per_s", "MBps", "p50_ms", "p99_ms") if k in row}


async def run_mode(mode: Mode, args: argparse.Namespace, certs: Path, base: Path) -> list[dict]:
    q = DevQuorum(str(base), free_ports(9)[0], brokers=3, session_timeout_ms=9000,
                  extra=mode.controller_props(certs), broker_extra=mode.broker_props(certs),
                  node_extra=mode.node_props(certs), client_tls=mode.client_tls(certs, "admin"))
    q.start()
    rows = []
    try:
        await q.wait_for_brokers(timeout=90)
        mode.grant(q, certs)
        tls = mode.client_tls(certs)
        async with ControllerClient(q.bootstrap, timeout=60, tls=tls) as c:
            await c.create_topics(cpb.CreateTopicsRequest(topics=[cpb.CreatableTopic(
                name=t, num_partitions=PARTITIONS, replication_factor=3) for t in ("bench-grpc", "bench-kafka")]))
        rows.append(_row(mode.name, "create_topics",
                         **await create_topics(q.bootstrap, tls, args.topics, args.clients, "bench-t")))
        workload = argparse.Namespace(seconds=args.seconds, messages=0, value=args.value, partitions=PARTITIONS)
        rows.append(_row(mode.name, "produce", value_bytes=args.value, partitions=PARTITIONS,
                         **_produced(await pykraft_produce(q.bootstrap_servers, "bench-grpc", workload, tls))))
        rows.append(_row(mode.name, "produce_kafka", value_bytes=args.value, partitions=PARTITIONS,
                         **_produced(await asyncio.to_thread(confluent_produce, q.kafka_bootstrap_servers,
                                                            "bench-kafka", workload, mode.librdkafka(certs)))))
        consumed = await asyncio.to_thread(confluent_consume, q.kafka_bootstrap_servers, "bench-kafka",
                                           rows[-1]["messages"], args.value, mode.librdkafka(certs))
        rows.append(_row(mode.name, "consume_kafka", value_bytes=args.value, **{
            k: consumed[k] for k in ("messages", "msgs_per_s", "MBps", "complete", "errors") if k in consumed}))
    finally:
        q.stop()
    for row in rows:
        emit(row)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=10, help="each produce phase")
    ap.add_argument("--topics", type=int, default=300, help="CreateTopics requests per mode")
    ap.add_argument("--clients", type=int, default=8, help="CreateTopics requests in flight")
    ap.add_argument("--value", type=int, default=256)
    ap.add_argument("--modes", default=",".join(m.name for m in MODES), help="which modes, in order")
    ap.add_argument("--rounds", type=int, default=2,
                    help="runs of every mode, in order then in reverse (A B C C B A ...), so that a machine "
                         "warming up or slowing down weighs on every mode alike; the ratios are of the means")
    args = ap.parse_args()
    base = Path(tempfile.mkdtemp(prefix="securitybench"))
    certs = base / "certs"
    subprocess.run([sys.executable, str(REPO / "deploy" / "make_certs.py"), "--out", str(certs), "controller-1",
                    "controller-2", "controller-3", "broker-101", "broker-102", "broker-103", "admin", "bench"],
                   check=True, capture_output=True)
    modes = [m for m in MODES if m.name in args.modes.split(",")]
    results: dict[tuple[str, str], list[float]] = {}  # (mode, workload) -> throughput of each run
    try:
        for r in range(args.rounds):
            for i, mode in enumerate(modes if r % 2 == 0 else modes[::-1]):
                for row in asyncio.run(run_mode(mode, args, certs, base / f"{r}-{i}")):
                    key = "ops_per_s" if row["phase"] == "create_topics" else "msgs_per_s"
                    results.setdefault((mode.name, row["phase"]), []).append(row[key])
    finally:
        shutil.rmtree(base, ignore_errors=True)
    for (name, workload), runs in results.items():
        for other in ("plaintext", ALSO_OVER.get(name)):
            base_runs = results.get((other, workload)) if other else None
            if name == other or not base_runs:
                continue
            mean, base_mean = sum(runs) / len(runs), sum(base_runs) / len(base_runs)
            emit(_row(name, "relative", workload=workload, over=other,
                      of="ops_per_s" if workload == "create_topics" else "msgs_per_s", mean=round(mean, 1),
                      **{f"{other}_mean": round(base_mean, 1)}, runs=len(runs),
                      ratio=round(mean / base_mean, 3) if base_mean else None))


if __name__ == "__main__":
    main()
