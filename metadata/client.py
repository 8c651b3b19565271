"""A client of the controller quorum that finds the active controller from any bootstrap
address; used by the CLI, the tools and the brokers.

What it retries follows ``raft.client``: NOT_CONTROLLER and THROTTLING_QUOTA_EXCEEDED (the
controller wrote nothing) and a connection that never opened, always; REQUEST_TIMED_OUT and a
call that broke midway (the outcome is unknown) only for requests that are safe to repeat
(reads, heartbeats, registration with the same incarnation). For the others, a create or a
delete, the caller gets REQUEST_TIMED_OUT saying the outcome is unknown, instead of a second
attempt that would answer TOPIC_ALREADY_EXISTS for their own topic."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import grpc

from common.host_ports import host_ports
from protos import controller_pb2_grpc
from raft.client import LeaderClient, Retry, describe
from common.tls import TLSConfig, tls_failure

from .errors import ErrorCode

if TYPE_CHECKING:  # metadata.principal reads certificates (cryptography): a tool's call needs none of it
    from .principal import Session

#: Answers that prove the controller wrote nothing.
NOT_APPLIED = {ErrorCode.NOT_CONTROLLER, ErrorCode.THROTTLING_QUOTA_EXCEEDED}
#: Requests whose repetition changes nothing more than the first attempt did (CreateAcls: an
#: ACL that exists is answered as created, writing nothing; DeleteAcls is not here, since a
#: repetition would answer that it deleted nothing).
SAFE_TO_REPEAT = frozenset({
    "DescribeTopics", "DescribeCluster", "DescribeConfigs", "DescribeQuorum", "FetchMetadata",
    "FetchSnapshot", "BrokerHeartbeat", "BrokerRegistration", "AlterPartition", "AllocateProducerIds",
    "CreateAcls", "DescribeAcls",
})


class ControllerError(Exception):
    """A request failed: ``code`` is Kafka's error code, the message one line."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        self.code = code
        self.message = message
        super().__init__(f"{code.name}: {message}" if message else code.name)


def error_code(value: int) -> ErrorCode:
    try:
        return ErrorCode(value)
    except ValueError:
        return ErrorCode.UNKNOWN_SERVER_ERROR


class QuorumUnreachable(ControllerError):
    def __init__(self, message: str) -> None:
        super().__init__(ErrorCode.REQUEST_TIMED_OUT, message)


def parse_bootstrap(text: str) -> list[str]:
    try:
        out = host_ports(text)
    except ValueError as e:
        raise ControllerError(ErrorCode.INVALID_REQUEST, f"bad bootstrap address {str(e)!r}: expected HOST:PORT") from None
    if not out:
        raise ControllerError(ErrorCode.INVALID_REQUEST, "no bootstrap controller given: expected HOST:PORT[,HOST:PORT]")
    return out


class ControllerClient(LeaderClient):
    def __init__(self, bootstrap: list[str] | str, *, timeout: float = 15.0, attempt_timeout: float = 5.0,
                 tls: TLSConfig | None = None, give_up_unconnectable: bool = False) -> None:
        """``tls``: how to dial the controller listener (None: plaintext);
        ``give_up_unconnectable``: a tool's fail-fast on addresses where nothing accepts a
        connection (raft.client.LeaderClient)."""
        addresses = parse_bootstrap(bootstrap) if isinstance(bootstrap, str) else list(bootstrap)
        super().__init__(addresses, timeout=timeout, attempt_timeout=attempt_timeout, tls=tls,
                         give_up_unconnectable=give_up_unconnectable)
        self.bootstrap = self.endpoints
        self.last_controller_id = -1

    def unreachable(self, message: str) -> Exception:
        return QuorumUnreachable(f"the controller quorum at {','.join(self.bootstrap)} did not answer {message}")

    def outcome_unknown(self, message: str) -> Exception:
        return ControllerError(ErrorCode.REQUEST_TIMED_OUT, message)

    def unconnectable(self, message: str) -> Exception:
        return ControllerError(ErrorCode.NETWORK_EXCEPTION, f"no controller accepted a connection: {message}")

    def failed(self, address: str, error: grpc.aio.AioRpcError) -> Exception:
        if error.code() == grpc.StatusCode.UNIMPLEMENTED:  # a gRPC server without the Controller service
            return ControllerError(ErrorCode.INVALID_REQUEST, f"{address} is not a controller listener (it does not "
                                   f"serve the controller API; a broker's?): give --bootstrap-controller the "
                                   f"controllers' listener, as in controller.quorum.voters")
        code = ErrorCode.NETWORK_EXCEPTION if tls_failure(error.details() or "") else ErrorCode.INVALID_REQUEST
        return ControllerError(code, f"{address}: {describe(error)}")

    async def call(self, method: str, request: Any, *, timeout: float | None = None,
                   attempt_timeout: float | None = None, on_behalf_of: Session | None = None) -> Any:
        """Send ``request`` to the active controller; returns the response once its status is
        NONE. Raises ControllerError for a final status (REQUEST_TIMED_OUT when the outcome
        of a write is unknown), QuorumUnreachable when no controller answered in time.
        ``on_behalf_of``: the client a broker forwards the request for, whose principal the
        controller authorizes (Kafka's EnvelopeRequest)."""
        idempotent = method in SAFE_TO_REPEAT
        metadata = None
        if on_behalf_of is not None:
            from .principal import FORWARDED_HOST, FORWARDED_PRINCIPAL
            metadata = ((FORWARDED_PRINCIPAL, on_behalf_of.principal.encode()),
                        (FORWARDED_HOST, on_behalf_of.host.encode()))

        def check(address: str, resp: Any) -> Any:
            code = error_code(resp.status.error_code)
            if code == ErrorCode.NONE:
                self.last_controller_id = resp.status.controller_id
                return resp
            if code in NOT_APPLIED or (idempotent and code == ErrorCode.REQUEST_TIMED_OUT):
                raise Retry(f"{code.name}: {resp.status.error_message}", resp.status.controller_endpoint or None)
            raise ControllerError(code, resp.status.error_message)

        return await super().call(
            lambda ch, t: getattr(controller_pb2_grpc.ControllerStub(ch), method)(request, timeout=t, metadata=metadata),
            idempotent=idempotent, check=check, timeout=timeout, attempt_timeout=attempt_timeout)

    async def __aenter__(self) -> "ControllerClient":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
