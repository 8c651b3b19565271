"""A transactional producer's side of KIP-98 (Kafka's TransactionManager): the producer's
state between ``init_transactions`` and close, and its requests to the transaction
coordinator (found with FindCoordinator key type 1) and, for ``send_offsets_to_transaction``,
to the group coordinator.

A partition joins the open transaction (AddPartitionsToTxn) before its first batch is sent:
the producer holds the partition's batches back until the coordinator has answered. Retriable
coordinator errors (CONCURRENT_TRANSACTIONS, COORDINATOR_LOAD_IN_PROGRESS, NOT_COORDINATOR, ...)
are retried, finding the coordinator again, until ``max.block.ms``. Other errors are Kafka's
two kinds: an abortable error (a batch failed, a topic or group was refused, the group
rebalanced) fails the transaction, which the application aborts before it goes on; a fatal
one (the producer was fenced by a newer one with the same transactional id, an id it may not
use, ...) leaves the producer unusable: every later call raises it, and the application
closes the producer.
"""
from __future__ import annotations

import asyncio
import enum
import logging
import time
from collections.abc import Callable
from typing import Any

import grpc

from protos import broker_pb2 as pb

from common.errors import ErrorCode, KafkaError, RETRIABLE

from .cluster_view import ClientError, ClusterView, Connections, KafkaTimeoutError
from .consumer_coordinator import ConsumerGroupMetadata

log = logging.getLogger("clients.transactions")

COORDINATOR_GROUP, COORDINATOR_TRANSACTION = 0, 1  # FindCoordinator's key types
#: Answers that send the producer to find its coordinator again.
_MOVED = frozenset({ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NETWORK_EXCEPTION,
                    ErrorCode.REQUEST_TIMED_OUT})
_FENCED = frozenset({ErrorCode.PRODUCER_FENCED, ErrorCode.INVALID_PRODUCER_EPOCH})
#: The coordinator no longer knows the producer (its transactional id expired after
#: transactional.id.expiration.ms idle, or its producer state is gone): Kafka's
#: abortableErrorIfPossible. The transaction is aborted (without EndTxn for an id the coordinator
#: does not know) and InitProducerId with the producer's id and epoch (KIP-360) gets it a producer
#: id again, so the application goes on as after any abortable error.
_EPOCH_BUMP = frozenset({ErrorCode.UNKNOWN_PRODUCER_ID, ErrorCode.INVALID_PRODUCER_ID_MAPPING})
#: The coordinator's answers after which the producer cannot go on (Kafka's fatal errors).
_FATAL = _FENCED | {ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                    ErrorCode.INVALID_TXN_STATE, ErrorCode.INVALID_TRANSACTION_TIMEOUT,
                    ErrorCode.CLUSTER_AUTHORIZATION_FAILED, ErrorCode.UNSUPPORTED_VERSION,
                    ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT, ErrorCode.TRANSACTIONAL_ID_NOT_FOUND}


class TransactionAbortableError(KafkaError):
    """Kafka's abortable errors (TransactionAbortableException and the errors it covers): this
    transaction failed; ``abort_transaction()``, then the producer goes on."""


class TransactionFatalError(KafkaError):
    """A fatal error of a transactional producer: it cannot go on and must be closed."""


class ProducerFencedError(TransactionFatalError):
    """Kafka's ProducerFencedException: a newer producer with the same transactional id (or the
    coordinator, for a transaction past its timeout) fenced this one."""


class TransactionAbortedError(ClientError):
    """Kafka's TransactionAbortedException: what a batch not sent before ``abort_transaction``
    fails with."""


class TxnState(enum.Enum):
    UNINITIALIZED = "Uninitialized"
    INITIALIZING = "Initializing"
    READY = "Ready"
    IN_TRANSACTION = "InTransaction"
    COMMITTING = "CommittingTransaction"
    ABORTING = "AbortingTransaction"
    ABORTABLE_ERROR = "AbortableError"
    FATAL_ERROR = "FatalError"


class TransactionManager:
    """One transactional producer's transaction state and coordinator requests."""

    def __init__(self, transactional_id: str, timeout_ms: int, cluster: ClusterView, connections: Connections,
                 *, max_block_ms: int, request_timeout_ms: int, retry_backoff_ms: int) -> None:
        self.transactional_id = transactional_id
        self.timeout_ms = timeout_ms
        self.cluster, self.connections = cluster, connections
        self.max_block_s = max_block_ms / 1000
        self.request_timeout_s = request_timeout_ms / 1000
        self.backoff_s = retry_backoff_ms / 1000
        self.state = TxnState.UNINITIALIZED
        self.producer_id, self.producer_epoch = -1, -1
        self.error: KafkaError | None = None  # the abortable or fatal error of the current state
        #: An _EPOCH_BUMP answer: the abort re-initializes the producer (Kafka's epochBumpRequired).
        self.epoch_bump_required = False
        #: Partitions in the open transaction (the coordinator said so); batches wait for this.
        self.added: set[tuple[str, int]] = set()
        self._pending: set[tuple[str, int]] = set()
        self._offsets_added = False  # AddOffsetsToTxn put a group's offsets in the open transaction
        self._adding: asyncio.Task | None = None
        self._coordinators: dict[tuple[int, str], str] = {}

    # -- state --------------------------------------------------------------------------------------

    def _fail(self, error: KafkaError) -> KafkaError:
        """Enter the error's state (a fatal error stays), and return it to raise."""
        if self.state != TxnState.FATAL_ERROR:
            fatal = isinstance(error, TransactionFatalError)
            self.state = TxnState.FATAL_ERROR if fatal else TxnState.ABORTABLE_ERROR
            self.error = error
        return self.error or error

    def _require(self, *states: TxnState, action: str) -> None:
        if self.state == TxnState.FATAL_ERROR and self.error is not None:
            raise self.error
        if self.state not in states:
            if self.state == TxnState.ABORTABLE_ERROR and self.error is not None:
                raise self.error
            raise ClientError(f"Cannot {action} in state {self.state.value}: the transactional producer must be "
                              f"in {' or '.join(s.value for s in states)}")

    def check_send(self) -> None:
        """A record may be sent only inside a transaction (Kafka's maybeAddPartition checks)."""
        if self.state == TxnState.ABORTABLE_ERROR and self.error is not None:
            raise TransactionAbortableError(self.error.code, f"Cannot perform send because at least one previous "
                                                             f"transactional request has failed: {self.error.message}")
        self._require(TxnState.IN_TRANSACTION, action="send a record")

    def send_failed(self, error: BaseException) -> None:
        """A batch of the open transaction failed: the transaction can only be aborted (a
        PRODUCER_FENCED answer is fatal)."""
        if self.state not in (TxnState.IN_TRANSACTION, TxnState.COMMITTING):
            return
        code = error.code if isinstance(error, KafkaError) else ErrorCode.UNKNOWN_SERVER_ERROR
        message = error.message if isinstance(error, KafkaError) else str(error)
        if code == ErrorCode.PRODUCER_FENCED:
            self._fail(ProducerFencedError(code, message))
        else:
            self._fail(TransactionAbortableError(code, f"a batch of the transaction failed: {message}"))

    # -- the coordinators ---------------------------------------------------------------------------

    async def _find(self, key_type: int, key: str, deadline: float) -> str:
        found = self._coordinators.get((key_type, key))
        while found is None:
            for address in list(self.cluster.brokers.values()) or self.cluster.bootstrap:
                try:
                    r = await self.connections.stub(address).FindCoordinator(
                        pb.FindCoordinatorRequest(key=key, key_type=key_type), timeout=self.request_timeout_s)
                except grpc.aio.AioRpcError:
                    continue
                if r.error_code == 0:
                    found = self._coordinators[(key_type, key)] = f"{r.host}:{r.port}"
                    break
                code = ErrorCode.of(r.error_code)
                if code not in RETRIABLE:
                    raise self._classified(code, r.error_message)
                break  # not available yet (the internal topic may be being created): back off
            if found is None:
                self._check_deadline(deadline, f"finding the coordinator of {key}")
                await asyncio.sleep(self.backoff_s)
        return found

    async def _call(self, key_type: int, key: str, method: str, request: Any, deadline: float,
                    errors: Callable[[Any], tuple[ErrorCode, str]]) -> Any:
        """``method`` to the coordinator of ``key``, retried on retriable answers until
        ``deadline``; raises the answer's error classified (abortable or fatal)."""
        while True:
            address = await self._find(key_type, key, deadline)
            try:
                resp = await getattr(self.connections.stub(address), method)(request, timeout=self.request_timeout_s)
                code, message = errors(resp)
            except grpc.aio.AioRpcError as e:
                code, message = ErrorCode.NETWORK_EXCEPTION, e.details() or e.code().name
            if code == ErrorCode.NONE:
                return resp
            if code not in RETRIABLE and code != ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                raise self._classified(code, message)
            if code in _MOVED:
                self._coordinators.pop((key_type, key), None)
            log.debug("%s for %s: %s, retrying", method, self.transactional_id, code.name)
            self._check_deadline(deadline, f"{method} for transactional id {self.transactional_id} ({code.name})")
            await asyncio.sleep(self.backoff_s)

    def _check_deadline(self, deadline: float, what: str) -> None:
        if time.monotonic() > deadline:
            raise KafkaTimeoutError(f"Timeout expired after {self.max_block_s * 1000:.0f}ms while awaiting {what}")

    def _classified(self, code: ErrorCode, message: str) -> KafkaError:
        if code in _EPOCH_BUMP:
            self.epoch_bump_required = True
            return TransactionAbortableError(code, message or None)
        if code in _FENCED:
            return ProducerFencedError(ErrorCode.PRODUCER_FENCED,
                                       f"There is a newer producer with the same transactionalId which fences the "
                                       f"current one ({code.name}: {message})")
        if code in _FATAL:
            return TransactionFatalError(code, message or None)
        if code in (ErrorCode.TOPIC_AUTHORIZATION_FAILED, ErrorCode.GROUP_AUTHORIZATION_FAILED,
                    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.OPERATION_NOT_ATTEMPTED,
                    ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.ILLEGAL_GENERATION, ErrorCode.FENCED_INSTANCE_ID,
                    ErrorCode.REBALANCE_IN_PROGRESS) or code in RETRIABLE:
            return TransactionAbortableError(code, message or None)
        return TransactionFatalError(code, message or None)

    def _deadline(self) -> float:
        return time.monotonic() + self.max_block_s

    # -- InitProducerId, begin ------------------------------------------------------------------------

    async def init(self, producer_id: int = -1, producer_epoch: int = -1) -> tuple[int, int]:
        """The producer id and epoch (a bumped epoch fences the previous producer of the id,
        and aborts its open transaction); with the producer's own id and epoch (KIP-360), an
        epoch bump after an aborted transaction whose batches failed."""
        req = pb.InitTransactionalProducerRequest(transactional_id=self.transactional_id,
                                                  transaction_timeout_ms=self.timeout_ms,
                                                  producer_id=producer_id, producer_epoch=producer_epoch)
        try:
            r = await self._call(COORDINATOR_TRANSACTION, self.transactional_id, "InitTransactionalProducer", req,
                                 self._deadline(), lambda r: (ErrorCode.of(r.error_code), r.error_message))
        except KafkaError as e:
            raise self._fail(e if isinstance(e, TransactionFatalError) else TransactionFatalError(e.code, e.message)) from None
        self.producer_id, self.producer_epoch = r.producer_id, r.producer_epoch
        self.state, self.error, self.epoch_bump_required = TxnState.READY, None, False
        log.info("transactional id %s: producer id %d, epoch %d", self.transactional_id, r.producer_id,
                 r.producer_epoch)
        return r.producer_id, r.producer_epoch

    def begin(self) -> None:
        self._require(TxnState.READY, action="begin a transaction")
        self.state = TxnState.IN_TRANSACTION

    # -- AddPartitionsToTxn ---------------------------------------------------------------------------

    async def add_partition(self, tp: tuple[str, int]) -> None:
        """Wait until ``tp`` is in the open transaction; the partitions asked for meanwhile go
        in one request."""
        while tp not in self.added:
            self._pending.add(tp)
            if self._adding is None or self._adding.done():
                self._adding = asyncio.get_running_loop().create_task(self._add_pending())
            adding = self._adding
            await asyncio.shield(adding)

    async def _add_pending(self) -> None:
        wanted, self._pending = sorted(self._pending - self.added), set()
        if not wanted:
            return
        req = pb.AddPartitionsToTxnRequest(transactional_id=self.transactional_id, producer_id=self.producer_id,
                                           producer_epoch=self.producer_epoch)
        by_topic: dict[str, pb.WritableTxnMarkerTopic] = {}
        for topic, index in wanted:
            (by_topic.get(topic) or by_topic.setdefault(topic, req.topics.add(name=topic))).partitions.append(index)
        try:
            await self._call(COORDINATOR_TRANSACTION, self.transactional_id, "AddPartitionsToTxn", req,
                             self._deadline(), _partition_error)
        except KafkaError as e:
            raise self._fail(e) from None
        self.added.update(wanted)

    # -- offsets (consume-transform-produce) ------------------------------------------------------------

    async def send_offsets(self, offsets: dict[tuple[str, int], int], group: ConsumerGroupMetadata) -> None:
        """The group's offsets committed with the transaction: AddOffsetsToTxn to the
        transaction coordinator, then TxnOffsetCommit to the group coordinator."""
        self._require(TxnState.IN_TRANSACTION, action="send offsets to a transaction")
        deadline = self._deadline()
        try:
            # The group's coordinator first: finding it has __consumer_offsets created, which
            # AddOffsetsToTxn needs (the partition it adds is the group's).
            await self._find(COORDINATOR_GROUP, group.group_id, deadline)
            await self._call(COORDINATOR_TRANSACTION, self.transactional_id, "AddOffsetsToTxn",
                             pb.AddOffsetsToTxnRequest(transactional_id=self.transactional_id,
                                                       producer_id=self.producer_id, producer_epoch=self.producer_epoch,
                                                       group_id=group.group_id),
                             deadline, lambda r: (ErrorCode.of(r.error_code), r.error_message))
            self._offsets_added = True
            commit = pb.OffsetCommitRequest(group_id=group.group_id, generation_id=group.generation_id,
                                            member_id=group.member_id)
            if group.group_instance_id is not None:
                commit.group_instance_id = group.group_instance_id
            by_topic: dict[str, pb.OffsetCommitTopic] = {}
            for (topic, index), offset in sorted(offsets.items()):
                t = by_topic.get(topic) or by_topic.setdefault(topic, commit.topics.add(name=topic))
                t.partitions.add(partition=index, offset=offset, leader_epoch=-1)
            await self._call(COORDINATOR_GROUP, group.group_id, "TxnOffsetCommit",
                             pb.TxnOffsetCommitRequest(transactional_id=self.transactional_id,
                                                       producer_id=self.producer_id,
                                                       producer_epoch=self.producer_epoch, offsets=commit),
                             deadline, _partition_error)
        except KafkaTimeoutError:
            raise
        except KafkaError as e:
            raise self._fail(e) from None

    # -- EndTxn --------------------------------------------------------------------------------------

    def begin_commit(self) -> None:
        self._require(TxnState.IN_TRANSACTION, action="commit a transaction")
        self.state = TxnState.COMMITTING

    def begin_abort(self) -> None:
        self._require(TxnState.IN_TRANSACTION, TxnState.ABORTABLE_ERROR, TxnState.ABORTING, action="abort a transaction")
        self.state = TxnState.ABORTING

    async def end(self, commit: bool) -> None:
        """EndTxn (when a partition or a group's offsets joined the transaction), then ready
        for the next one."""
        if commit and self.state in (TxnState.ABORTABLE_ERROR, TxnState.FATAL_ERROR) and self.error is not None:
            raise self.error  # a batch failed while the commit waited for the answers
        unknown = self.error is not None and self.error.code == ErrorCode.INVALID_PRODUCER_ID_MAPPING
        if (self.added or self._offsets_added) and not (unknown and not commit):
            try:
                await self._call(COORDINATOR_TRANSACTION, self.transactional_id, "EndTxn",
                                 pb.EndTxnRequest(transactional_id=self.transactional_id, producer_id=self.producer_id,
                                                  producer_epoch=self.producer_epoch, committed=commit),
                                 self._deadline(), lambda r: (ErrorCode.of(r.error_code), r.error_message))
            except KafkaTimeoutError:
                raise
            except KafkaError as e:
                raise self._fail(e) from None
        self.added.clear()
        self._offsets_added = False
        self.state, self.error = TxnState.READY, None


def _partition_error(resp: Any) -> tuple[ErrorCode, str]:
    """The first error of a per-partition answer (AddPartitionsToTxn, TxnOffsetCommit):
    OPERATION_NOT_ATTEMPTED only says another partition failed, so the other one counts."""
    codes = [(ErrorCode.of(x.error_code), getattr(x, "error_message", "") or f"{getattr(x, 'topic', '')}")
             for x in getattr(resp, "results", ())]
    codes += [(ErrorCode.of(x.error_code), x.error_message) for t in getattr(resp, "topics", ()) for x in t.partitions]
    failed = [c for c in codes if c[0] != ErrorCode.NONE]
    real = [c for c in failed if c[0] != ErrorCode.OPERATION_NOT_ATTEMPTED]
    return (real or failed or [(ErrorCode.NONE, "")])[0]
