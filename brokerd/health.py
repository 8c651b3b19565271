"""What `kraft health` checks for the broker role: the broker answers on its own listener, is
registered, and is unfenced (caught up with the metadata log)."""
from __future__ import annotations

import grpc

from metadata.config import ServerConfig
from protos import broker_pb2 as pb
from protos import broker_pb2_grpc
from raft.client import describe
from common.channels import dial

from .config import BrokerConfig


async def broker_problems(cfg: ServerConfig) -> list[str]:
    """Asked on the inter-broker listener (a gRPC one), with the broker's own TLS for it."""
    config = BrokerConfig.from_server(cfg)
    host, port = cfg.advertised[config.listener]
    bind_host = cfg.listeners[config.listener][0]
    address = f"{'127.0.0.1' if bind_host in ('', '0.0.0.0') else host}:{port}"
    try:
        async with dial(address, config.inter_broker_tls, []) as ch:
            r = await broker_pb2_grpc.BrokerStub(ch).DescribeBroker(pb.DescribeBrokerRequest(), timeout=3)
    except grpc.aio.AioRpcError as e:
        return [f"broker {cfg.node_id} does not answer on {address}: {describe(e)}"]
    if r.broker_epoch <= 0:
        return [f"broker {cfg.node_id} is not registered yet"]
    if r.fenced:
        return [f"broker {cfg.node_id} is fenced (metadata offset {r.metadata_offset})"]
    return []
