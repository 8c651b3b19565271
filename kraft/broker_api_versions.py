"""``kraft broker-api-versions`` (Kafka's kafka-broker-api-versions.sh): asks a broker's
Kafka listener for the cluster's brokers (Metadata), then each broker for the APIs and
versions it serves (ApiVersions), over Kafka's own wire protocol: what a Kafka client sees
before it sends anything else."""
from __future__ import annotations

import asyncio
import ssl
import struct
from typing import Any

from common.host_ports import host_ports

METADATA, API_VERSIONS = 3, 18
MAX_RESPONSE = 64 << 20


class KafkaToolError(Exception):
    """A broker that cannot be reached or answers with an error."""


async def _call(host: str, port: int, api_key: int, version: int, fields: dict[str, Any], timeout: float,
                context: ssl.SSLContext | None) -> Any:
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port, ssl=context), timeout)
    except ssl.SSLError as e:
        raise KafkaToolError(f"TLS handshake with {host}:{port} failed: {e.reason or e}") from None
    except (OSError, asyncio.TimeoutError) as e:
        raise KafkaToolError(f"cannot connect to {host}:{port}: {e or 'timed out'}") from None
    # Kafka's codec (kio) only once a broker answers: importing it costs ~1.2 s of CPU (kio loads
    # hypothesis when installed), which a mistyped or unreachable address need not pay.
    from kio.index import api_key_map

    from brokerd.kafka.codec import build, frame_request, read_response, request_schema
    try:
        request = build(request_schema(api_key, version), fields)
        writer.write(frame_request(api_key, version, 1, "kraft-broker-api-versions", request))
        size = struct.unpack(">i", await asyncio.wait_for(reader.readexactly(4), timeout))[0]
        if not 4 <= size <= MAX_RESPONSE:
            raise KafkaToolError(f"{host}:{port} answered with a size of {size}: is it a Kafka listener?")
        _, response = read_response(await asyncio.wait_for(reader.readexactly(size), timeout), api_key, version)
        return response
    except (OSError, asyncio.IncompleteReadError, asyncio.TimeoutError) as e:
        raise KafkaToolError(f"{host}:{port} did not answer {api_key_map[api_key]} v{version} "
                             f"({type(e).__name__}): is it a Kafka listener?") from None
    finally:
        writer.close()


async def broker_api_versions(bootstrap: str, timeout: float = 10.0, context: ssl.SSLContext | None = None) -> list[str]:
    """The lines kafka-broker-api-versions.sh prints, one block per live broker; over TLS with
    ``context`` (an SSL listener)."""
    try:
        host, port = host_ports(bootstrap)[0].rsplit(":", 1)
    except (ValueError, IndexError):
        raise KafkaToolError(f"bad --bootstrap-server {bootstrap!r}: expected HOST:PORT") from None
    md = await _call(host, int(port), METADATA, 12, {"topics": ()}, timeout, context)
    from kio.index import api_key_map
    lines = []
    for b in sorted(md.brokers, key=lambda b: b.node_id):
        answer = await _call(b.host, b.port, API_VERSIONS, 3, {"client_software_name": "kraft",
                                                                "client_software_version": "1"}, timeout, context)
        if answer.error_code.value:
            raise KafkaToolError(f"{b.host}:{b.port} answered ApiVersions with {answer.error_code.name}")
        lines.append(f"{b.host}:{b.port} (id: {b.node_id} rack: {b.rack}) -> (")
        for v in answer.api_keys:
            name = "".join(w.title() for w in api_key_map.get(v.api_key, f"unknown_{v.api_key}").split("_"))
            lines.append(f"\t{name}({v.api_key}): {v.min_version} to {v.max_version},")
        lines.append(")")
    return lines
