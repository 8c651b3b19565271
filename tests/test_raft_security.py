"""Hostile and mistaken peers: every bad request gets a clear gRPC error, is counted in status,
and changes nothing; TLS and mutual TLS between peers and for clients."""
import asyncio
import datetime
import ipaddress
from pathlib import Path

import grpc
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from raft.examples.kv.client import KVClient, KVError
from raft.examples.kv.server import build
from raft.proto import raft_pb2 as pb
from common.tls import TLSConfig
from raft.config import NodeOptions
from raft.messages import Entry, Message, MessageType
from raft.storage import format_storage
from raft.wire import to_pb
from tests.eventually import eventually
from tests.kvcluster import free_ports

FAST = dict(tick_ms=20, heartbeat_interval_ms=40, election_timeout_ms=300)


async def _cluster(tmp_path, n=3, tls=None, **opts):
    ports = free_ports(n)
    voters = ",".join(f"{i + 1}@127.0.0.1:{p}" for i, p in enumerate(ports))
    nodes = []
    for i in range(n):
        d = str(tmp_path / f"n{i + 1}")
        format_storage(d, "sec", i + 1)
        node, _ = build(i + 1, voters, d, options=NodeOptions(tls=tls, **FAST, **opts))
        await node.start()
        nodes.append(node)
    lid = await nodes[0].wait_for_leader()
    return nodes, ports, lid


async def _stop(nodes):
    for n in nodes:
        await n.stop(transfer=False)


def _batch(cluster="sec", frm=2, to=1, msgs=()):
    b = pb.MessageBatch(cluster_id=cluster, to=to)
    setattr(b, "from", frm)
    b.messages.extend(to_pb(m) for m in msgs)
    return b.SerializeToString()


async def _send_raw(port, raw: bytes):
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
        call = ch.stream_unary("/kraft.raft.RaftPeer/Send", response_deserializer=pb.Ack.FromString)(
            iter([raw]), timeout=5)
        try:
            await call
            return grpc.StatusCode.OK, ""
        except grpc.aio.AioRpcError as e:
            return e.code(), e.details()


def test_bad_peer_requests_are_refused_counted_and_harmless(tmp_path):
    async def go():
        nodes, ports, lid = await _cluster(tmp_path, max_message_bytes=64 * 1024)
        target = nodes[0]
        # a node knows the leader before it has the leader's first entry (its no-op): compare
        # logs once every node has committed it, when nothing else writes
        leader = nodes[lid - 1]
        await eventually(lambda: all(n.status().commit_index == leader.status().last_index for n in nodes), 10,
                         what="every node committed the new leader's first entry")
        before = target.status()
        hb = Message(MessageType.HEARTBEAT, 1, 2, 99, commit=10**9)
        cases = [
            (_batch(cluster="other", msgs=[hb]), grpc.StatusCode.FAILED_PRECONDITION, "cluster 'other'", "wrong_cluster"),
            (_batch(frm=42, msgs=[Message(MessageType.HEARTBEAT, 1, 42, 99)]), grpc.StatusCode.PERMISSION_DENIED,
             "node 42 is not a member", "unknown_node"),
            (_batch(to=7, msgs=[hb]), grpc.StatusCode.FAILED_PRECONDITION, "for node 7", "wrong_node"),
            (b"\xff\xfe not protobuf", grpc.StatusCode.INVALID_ARGUMENT, "malformed", "malformed"),
            (_batch(msgs=[Message(MessageType.APPEND, 1, 2, 99, entries=[Entry(1, 1, b"x" * 100_000)])]),
             grpc.StatusCode.RESOURCE_EXHAUSTED, "exceeds the limit", "oversized"),
        ]
        for raw, code, text, reason in cases:
            got, details = await _send_raw(ports[0], raw)
            assert got == code and text in details, (reason, got, details)
            assert target.status().rejected.get(reason) == 1, reason
        bad_type = pb.MessageBatch(cluster_id="sec", to=1)
        setattr(bad_type, "from", 2)
        m = bad_type.messages.add()
        m.type = 77
        got, details = await _send_raw(ports[0], bad_type.SerializeToString())
        assert got == grpc.StatusCode.INVALID_ARGUMENT and "unknown message type 77" in details
        # none of it moved the node: same term, same leader, same log
        after = target.status()
        assert (after.term, after.leader_id, after.last_index) == (before.term, before.leader_id, before.last_index)
        # a stale term from a real member is handled as Raft says (a response of an older term
        # is dropped and counted), not fatal
        if target.status().term < 2:  # a term before the current one must exist
            leader = nodes[lid - 1]
            await leader.transfer_leadership(next(n.id for n in nodes if n.id != lid))
        stale = Message(MessageType.APPEND_RESP, 1, 2, target.status().term - 1, index=1)
        got, _ = await _send_raw(ports[0], _batch(msgs=[stale]))
        assert got == grpc.StatusCode.OK
        await eventually(lambda: target.status().dropped.get("stale_term", 0) >= 1, 5,
                         what="the stale-term message counted as dropped")
        # the cluster still works
        kv = KVClient([f"127.0.0.1:{p}" for p in ports])
        await kv.put(b"still", b"fine")
        assert await kv.get(b"still") == b"fine"
        await kv.close()
        await _stop(nodes)
    asyncio.run(go())


def test_bad_client_requests_get_clear_errors(tmp_path):
    async def go():
        nodes, ports, lid = await _cluster(tmp_path, n=1)
        kv = KVClient([f"127.0.0.1:{ports[0]}"], timeout=2)
        with pytest.raises(KVError, match="keys must be"):
            await kv.put(b"", b"v")
        with pytest.raises(KVError, match="values must be at most"):
            await kv.put(b"k", b"v" * (2 << 20))
        await kv.close()
        await _stop(nodes)
    asyncio.run(go())


# ------------------------------------------------------------------------------------ TLS


def _cert(path, name, key, issuer_name, issuer_key, ca=False):
    now = datetime.datetime.now(datetime.timezone.utc)
    b = (x509.CertificateBuilder()
         .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
         .issuer_name(issuer_name).public_key(key.public_key())
         .serial_number(x509.random_serial_number())
         .not_valid_before(now - datetime.timedelta(minutes=1))
         .not_valid_after(now + datetime.timedelta(days=1))
         .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if not ca:
        b = b.add_extension(x509.SubjectAlternativeName(
            [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
    cert = b.sign(issuer_key, hashes.SHA256())
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return cert


def _pki(d, tag="ca"):
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"test {tag}")])
    _cert(d / f"{tag}.pem", f"test {tag}", ca_key, ca_name, ca_key, ca=True)
    key = ec.generate_private_key(ec.SECP256R1())
    (d / f"{tag}-node.key").write_bytes(key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    _cert(d / f"{tag}-node.pem", "node", key, ca_name, ca_key)
    return TLSConfig(cert=str(d / f"{tag}-node.pem"), key=str(d / f"{tag}-node.key"),
                     ca=str(d / f"{tag}.pem"), require_client_auth=True)


def test_a_cluster_over_mutual_tls_replicates_and_refuses_strangers(tmp_path):
    tls = _pki(tmp_path)
    other = _pki(tmp_path, "rogue")
    ca = Path(tls.ca).read_bytes()

    async def go():
        nodes, ports, lid = await _cluster(tmp_path, tls=tls)
        eps = [f"127.0.0.1:{p}" for p in ports]
        kv = KVClient(eps, tls=tls)
        await kv.put(b"secret", b"42")
        assert await kv.get(b"secret") == b"42"
        await kv.close()
        # plaintext, and a client certificate from another CA, are refused
        plain = KVClient(eps, timeout=1.5, attempt_timeout=0.5)
        rogue = KVClient(eps, timeout=1.5, attempt_timeout=0.5, tls=TLSConfig(
            cert=other.cert, key=other.key, ca=tls.ca))
        for c in (plain, rogue):
            with pytest.raises(KVError):
                await c.get(b"secret")
            await c.close()
        # so is a TLS client that verifies the server but shows no certificate of its own
        creds = grpc.ssl_channel_credentials(root_certificates=ca)
        async with grpc.aio.secure_channel(eps[0], creds) as ch:
            with pytest.raises(grpc.aio.AioRpcError):
                await ch.unary_unary("/kraft.raft.RaftAdmin/Status",
                                     request_serializer=pb.StatusRequest.SerializeToString,
                                     response_deserializer=pb.StatusResponse.FromString)(
                    pb.StatusRequest(), timeout=2)
        await _stop(nodes)
    asyncio.run(go())
