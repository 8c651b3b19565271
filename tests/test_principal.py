"""Principals from TLS client certificates: Kafka's ssl.principal.mapping.rules (the cases of
Kafka's SslPrincipalMapperTest), and the principal of a real gRPC call and of a real asyncio
TLS connection, with certificates made here."""
from __future__ import annotations

import asyncio
import ssl
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest

from metadata.principal import (ANONYMOUS, PrincipalError, PrincipalMapper, client_address, grpc_session,
                                mapper_from_config, stream_session)
from common.config_def import ConfigError
from tests.pki import CertificateAuthority, name

# -- the mapping rules -----------------------------------------------------------------------------

KAFKA_RULES = ("RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L,"
               "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/U, DEFAULT")


@pytest.mark.parametrize("dn, name", [
    ("CN=kafka1,OU=ServiceUsers,O=Org,C=US", "kafka1"),
    ("CN=Duke,OU=JavaSoft,O=Sun Microsystems,L=Mountain View,ST=CA,C=US", "duke@javasoft"),
    ("cn=duke,ou=JavaSoft,o=Sun Microsystems", "DUKE"),
    ("OU=JavaSoft,O=Sun Microsystems,C=US", "OU=JavaSoft,O=Sun Microsystems,C=US"),  # DEFAULT
])
def test_the_first_rule_that_matches_names_the_principal(dn: str, name: str) -> None:
    assert PrincipalMapper(KAFKA_RULES).name(dn) == name


@pytest.mark.parametrize("rules, dn, name", [
    ("RULE:^CN=([^,]+).*$/$1/", "CN=alice,O=example", "alice"),
    ("RULE:^CN=(.*)$/$1@$2/", "CN=bob", "bob@$2"),             # a group the pattern lacks stays literal
    ("RULE:^CN=(.)(.)(.)(.)(.)(.)(.)(.)(.)(.)(.*)$/$11/", "CN=abcdefghijkl", "kl"),
    ("RULE:^CN=(.*)$/$12/", "CN=x", "x2"),                       # $12 without 12 groups is $1, then 2
    ("RULE:^CN=([^,]+).*$/\\$$1/", "CN=carol", "$carol"),        # an escaped $ is literal
    ("RULE:^CN=(.*)$/$1/L", "CN=LOUD", "loud"),
    ("  DEFAULT  ", "CN=x,O=y", "CN=x,O=y"),
    (None, "CN=x,O=y", "CN=x,O=y"),                             # unset: DEFAULT
])
def test_rules_replace_as_kafka_does(rules: str | None, dn: str, name: str) -> None:
    assert PrincipalMapper(rules).name(dn) == name


@pytest.mark.parametrize("rules", ["garbage", "RULE:abc/def/Lxyz", "RULE:^(.*$/$1/", "DEFAULT,RULE:a"])
def test_bad_rules_are_one_line_config_errors(rules: str) -> None:
    with pytest.raises(ConfigError) as e:
        mapper_from_config({"ssl.principal.mapping.rules": rules})
    assert str(e.value).startswith("ssl.principal.mapping.rules: ") and "\n" not in str(e.value)


def test_a_name_no_rule_maps_is_refused() -> None:
    with pytest.raises(PrincipalError, match=r"no rule of ssl.principal.mapping.rules .* applies to .*'O=x'"):
        PrincipalMapper("RULE:^CN=(.*)$/$1/").name("O=x")
    with pytest.raises(PrincipalError):
        PrincipalMapper("").name("CN=x")  # no rules at all map nothing


@pytest.mark.parametrize("peer, host", [("ipv4:127.0.0.1:5000", "127.0.0.1"), ("ipv6:[::1]:5000", "::1"),
                                        ("ipv6:%5B::1%5D:5000", "::1"), ("ipv6:[fe80::1%25eth0]:1", "fe80::1")])
def test_client_addresses_from_grpc_peers(peer: str, host: str) -> None:
    assert client_address(peer) == host


# -- certificates ------------------------------------------------------------------------------------

@dataclass
class Pki:
    ca: bytes
    server_key: bytes
    server_cert: bytes
    client_key: bytes
    client_cert: bytes
    dir: Path


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    authority = CertificateAuthority()
    d = tmp_path_factory.mktemp("pki")
    server_cert, server_key = authority.issue(name(("CN", "localhost")))
    client_cert, client_key = authority.issue(name(("O", "example"), ("OU", "ops"), ("CN", "alice")))
    p = Pki(authority.cert, server_key, server_cert, client_key, client_cert, d)
    for field in ("ca", "server_key", "server_cert", "client_key", "client_cert"):
        (d / f"{field}.pem").write_bytes(getattr(p, field))
    return p


# -- a gRPC server -------------------------------------------------------------------------------------

async def _who(mapper: PrincipalMapper, server_creds: grpc.ServerCredentials | None,
               channel_creds: grpc.ChannelCredentials | None) -> tuple[str, str] | grpc.aio.AioRpcError:
    """The session a bare gRPC server sees for one call, as 'principal|host'."""
    async def who(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        try:
            s = grpc_session(context, mapper)
        except PrincipalError as e:
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, str(e))
        return f"{s.principal}|{s.host}".encode()

    server = grpc.aio.server()
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(
        "test.Principal", {"Who": grpc.unary_unary_rpc_method_handler(who)}),))
    port = server.add_secure_port("127.0.0.1:0", server_creds) if server_creds else \
        server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        target = f"localhost:{port}"
        async with (grpc.aio.secure_channel(target, channel_creds) if channel_creds else
                    grpc.aio.insecure_channel(target)) as ch:
            try:
                answer = await ch.unary_unary("/test.Principal/Who")(b"", timeout=10)
            except grpc.aio.AioRpcError as e:
                return e
        principal, host = answer.decode().split("|")
        return principal, host
    finally:
        await server.stop(None)


def _server_creds(p: Pki, require_client_auth: bool = True) -> grpc.ServerCredentials:
    return grpc.ssl_server_credentials([(p.server_key, p.server_cert)], root_certificates=p.ca,
                                       require_client_auth=require_client_auth)


def test_grpc_call_with_a_client_certificate(pki: Pki) -> None:
    async def go(p: Pki) -> None:
        client = grpc.ssl_channel_credentials(root_certificates=p.ca, private_key=p.client_key,
                                              certificate_chain=p.client_cert)
        assert await _who(PrincipalMapper("RULE:^CN=([^,]+),.*$/$1/"), _server_creds(p), client) == \
            ("User:alice", "127.0.0.1")
        assert await _who(PrincipalMapper(), _server_creds(p), client) == \
            ("User:CN=alice,OU=ops,O=example", "127.0.0.1")
        refused = await _who(PrincipalMapper("RULE:^CN=bob,.*$/bob/"), _server_creds(p), client)
        assert isinstance(refused, grpc.aio.AioRpcError) and refused.code() == grpc.StatusCode.UNAUTHENTICATED
        assert "no rule of ssl.principal.mapping.rules" in (refused.details() or "")
    asyncio.run(go(pki))


def test_grpc_call_without_a_client_certificate_or_tls_is_anonymous(pki: Pki) -> None:
    async def go(p: Pki) -> None:
        server_only = grpc.ssl_channel_credentials(root_certificates=p.ca)
        assert await _who(PrincipalMapper(), _server_creds(p, require_client_auth=False), server_only) == \
            (ANONYMOUS, "127.0.0.1")
        assert await _who(PrincipalMapper(), None, None) == (ANONYMOUS, "127.0.0.1")
    asyncio.run(go(pki))


# -- an asyncio TLS server (the Kafka listener's kind) ----------------------------------------------------

def test_asyncio_tls_connection_principal(pki: Pki) -> None:
    async def go(p: Pki) -> None:
        mapper = PrincipalMapper("RULE:^CN=([^,]+),.*$/$1/L")
        seen: list[object] = []

        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                seen.append(stream_session(writer, mapper))
            except PrincipalError as e:
                seen.append(e)
            writer.close()

        server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(p.dir / "ca.pem"))
        server_ctx.load_cert_chain(p.dir / "server_cert.pem", p.dir / "server_key.pem")
        server_ctx.verify_mode = ssl.CERT_OPTIONAL
        server = await asyncio.start_server(serve, "127.0.0.1", 0, ssl=server_ctx)
        port = server.sockets[0].getsockname()[1]

        async def connect(with_cert: bool) -> None:
            ctx = ssl.create_default_context(cafile=str(p.dir / "ca.pem"))
            if with_cert:
                ctx.load_cert_chain(p.dir / "client_cert.pem", p.dir / "client_key.pem")
            reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=ctx, server_hostname="localhost")
            await reader.read()
            writer.close()

        async with server:
            await connect(True)
            await connect(False)
            mapper.rules.clear()  # now no rule maps anything
            mapper.principal_of_certificate.cache_clear()
            await connect(True)
        assert [(s.principal, s.host) for s in seen[:2]] == [("User:alice", "127.0.0.1"), (ANONYMOUS, "127.0.0.1")]
        assert isinstance(seen[2], PrincipalError)
    asyncio.run(go(pki))
