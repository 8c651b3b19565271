"""The transaction coordinator (Kafka's TransactionCoordinator, KIP-98), on the broker that
leads the transactional id's partition of ``__transaction_state``.

A transactional id lives on partition ``abs(javaHash(id)) % transaction.state.log.num.partitions``
of the internal, compacted topic ``__transaction_state``, which the first FindCoordinator for a
transactional id has the controller create (as ``__consumer_offsets`` is). Every change of a
transaction (``transaction_state``) is written there with acks=all before it is answered, so a
new leader of the partition replays it (COORDINATOR_LOAD_IN_PROGRESS meanwhile) and finishes
what was being finished: a transaction found in PrepareCommit or PrepareAbort gets its markers
again.

- InitProducerId: a new producer id (from the controller's blocks, ``producer_ids``) with
  epoch 0 for a new transactional id; a known one gets its epoch bumped, which fences the
  previous producer (PRODUCER_FENCED on its next request); an open transaction of the
  previous producer is aborted first (its markers carry the new epoch) while the new one is
  told CONCURRENT_TRANSACTIONS and retries.
- AddPartitionsToTxn: the transaction is Ongoing with those partitions.
- AddOffsetsToTxn: the group's partition of __consumer_offsets joins the transaction (its
  TxnOffsetCommit goes to the group coordinator, which keeps the offsets pending until the
  marker reaches that partition).
- EndTxn: PrepareCommit or PrepareAbort is written and answered; the markers then go to every
  partition's leader (``transaction_markers``), after which CompleteCommit or CompleteAbort is
  written. Meanwhile the id answers CONCURRENT_TRANSACTIONS (retriable).
- Expiration: a transactional id with no transaction open (Empty, CompleteCommit,
  CompleteAbort) and no update for ``transactional.id.expiration.ms`` is forgotten: a
  tombstone in its partition, so a new leader does not load it and compaction removes it.
"""
from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Coroutine
from typing import Any

from common.errors import KafkaError, ErrorCode
from clients.records import build_batch, records_of
from clients.topics import OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC

from .config import BrokerConfig
from .coordinator_partitions import CoordinatorPartitions
from .group_coordinator import partition_for
from .group_requests import FindCoordinatorResponse
from .partition import Partition, replay_batches
from .producer_ids import ProducerIdManager
from .replica_manager import ReplicaManager
from .transaction_markers import MarkerListener, MarkerSender
from .transaction_requests import (AddOffsetsToTxnRequest, AddOffsetsToTxnResponse, AddPartitionsToTxnRequest,
                                   AddPartitionsToTxnResponse, EndTxnRequest, EndTxnResponse,
                                   InitTransactionalProducerRequest, InitTransactionalProducerResponse,
                                   TxnPartitionResult, VerifyTxnPartitionsRequest, VerifyTxnPartitionsResponse,
                                   WritableTxnMarkerTopic, ListTransactionsRequest, ListTransactionsResponse,
                                   ListedTransaction, DescribedTransaction)
from .transaction_state import TransactionMetadata, TxnState, txn_partition_for

log = logging.getLogger("brokerd.transactions")

WRITE_TIMEOUT_S = 30.0
MAX_EPOCH = 32767 - 1  # an epoch is an int16; the last one is kept for a bump on abort


def _now_ms() -> int:
    return int(time.time() * 1000)


class TransactionCoordinator:
    def __init__(self, rm: ReplicaManager, config: BrokerConfig, producer_ids: ProducerIdManager,
                 create_state_topic: Callable[[int, int], Coroutine[Any, Any, None]],
                 markers_written: MarkerListener | None = None) -> None:
        """``markers_written``: told of each marker this broker writes itself (the group
        coordinator, for transactional offsets)."""
        self.rm = rm
        self.config = config
        self.producer_ids = producer_ids
        self.create_state_topic = create_state_topic
        self.markers = MarkerSender(rm, markers_written)
        self.txns: dict[str, TransactionMetadata] = {}
        self._partitions = CoordinatorPartitions(rm, TRANSACTION_STATE_TOPIC, self._load)
        self._creating: asyncio.Task | None = None
        self._completing: dict[str, asyncio.Task] = {}  # markers being written, by transactional id
        self._locks: dict[str, asyncio.Lock] = {}
        self._task: asyncio.Task | None = None
        self._expiry: asyncio.Task | None = None

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._task = loop.create_task(self._abort_timed_out_forever(), name="transaction-timeouts")
        self._expiry = loop.create_task(self._expire_forever(), name="transactional-id-expiration")

    async def stop(self) -> None:
        tasks = [t for t in [self._task, self._expiry, self._creating, *self._partitions.loading.values(), *self._completing.values()] if t is not None]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self.markers.close()

    # -- finding the coordinator -----------------------------------------------------------------

    def _state_partitions(self) -> int:
        t = self.rm.image.topics_by_name.get(TRANSACTION_STATE_TOPIC)
        return len(t.partitions) if t is not None else 0

    async def find_coordinator(self, transactional_id: str, listener: str) -> FindCoordinatorResponse:
        if not transactional_id:
            return FindCoordinatorResponse(error_code=int(ErrorCode.INVALID_REQUEST), node_id=-1, port=-1,
                                           error_message="the transactional id is empty")
        n = self._state_partitions()
        if not n:
            if self._creating is None or self._creating.done():
                live = sum(1 for b in self.rm.image.brokers.values() if not b.fenced)
                rf = max(1, min(self.config.transaction_state_replication_factor, live))
                self._creating = asyncio.get_running_loop().create_task(
                    self.create_state_topic(self.config.transaction_state_num_partitions, rf))
            return _not_found(f"the internal topic {TRANSACTION_STATE_TOPIC} is being created")
        index = txn_partition_for(transactional_id, n)
        reg = self.rm.image.topics_by_name[TRANSACTION_STATE_TOPIC].partitions.get(index)
        broker = self.rm.image.brokers.get(reg.leader) if reg is not None else None
        endpoint = next((e for e in broker.endpoints if e.name == listener), None) if broker else None
        if endpoint is None or broker is None or broker.fenced:
            return _not_found(f"partition {index} of {TRANSACTION_STATE_TOPIC} has no leader")
        return FindCoordinatorResponse(node_id=broker.id, host=endpoint.host, port=endpoint.port)

    def _coordinator(self, transactional_id: str) -> Partition:
        """The partition of ``__transaction_state`` holding the id, which this broker must lead
        and have loaded; KafkaError otherwise."""
        if not transactional_id:
            raise KafkaError(ErrorCode.INVALID_REQUEST, "the transactional id is empty")
        n = self._state_partitions()
        if not n:
            raise KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE)
        return self._partitions.require(txn_partition_for(transactional_id, n),
                                        f"broker {self.rm.broker_id} is not the transaction coordinator of "
                                        f"{transactional_id}")

    # -- loading and writing the partition ---------------------------------------------------------

    async def _load(self, p: Partition, epoch: int) -> None:
        """Replay one partition of __transaction_state (a new leader does this first), then
        finish the transactions it finds half-ended."""
        try:
            self._unload(p.index)
            found: dict[str, TransactionMetadata] = {}
            async for b, offset in replay_batches(p):
                for r in records_of(b, TRANSACTION_STATE_TOPIC, p.index, offset):
                    if r.key is None:
                        continue
                    if r.value is None:
                        found.pop(r.key.decode(), None)
                    else:
                        m = TransactionMetadata.decode(r.key, r.value)
                        found[m.transactional_id] = m
            if not p.is_leader or p.leader_epoch != epoch:
                return
            self.txns.update(found)
            self._partitions.loaded[p.index] = epoch
            log.info("%s-%d: loaded %d transactional ids", TRANSACTION_STATE_TOPIC, p.index, len(found))
            for m in found.values():
                if m.state.preparing:
                    self._complete_in_background(p, m)
        finally:
            self._partitions.loading.pop(p.index, None)

    def _unload(self, index: int) -> None:
        self._partitions.loaded.pop(index, None)
        n = self._state_partitions()
        for tid in [tid for tid in self.txns if n and txn_partition_for(tid, n) == index]:
            del self.txns[tid]
            task = self._completing.pop(tid, None)
            if task is not None:
                task.cancel()

    async def _write(self, p: Partition, m: TransactionMetadata) -> TransactionMetadata:
        """Persist ``m`` with acks=all, then adopt it; Kafka's coordinator error mapping."""
        await self._append(p, [m.encode()], m.last_update_ms)
        self.txns[m.transactional_id] = m
        return m

    @staticmethod
    async def _append(p: Partition, records: list[tuple[bytes, bytes | None]], ts: int) -> None:
        """Records (a None value: a tombstone) with acks=all; Kafka's coordinator error mapping."""
        try:
            info = await p.append_as_leader(build_batch([(k, v, ts, ()) for k, v in records]), -1)
            await p.wait_for_replication(info.last_offset + 1, WRITE_TIMEOUT_S)
        except KafkaError as e:
            if e.code == ErrorCode.NOT_LEADER_OR_FOLLOWER:
                raise KafkaError(ErrorCode.NOT_COORDINATOR, e.message) from None
            raise KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE, e.message) from None

    def _lock(self, transactional_id: str) -> asyncio.Lock:
        return self._locks.setdefault(transactional_id, asyncio.Lock())

    # -- transaction.timeout.ms ------------------------------------------------------------------------

    async def _abort_timed_out_forever(self) -> None:
        while True:
            await asyncio.sleep(self.config.transaction_abort_interval_ms / 1000)
            await self.abort_timed_out()

    async def abort_timed_out(self) -> None:
        """Abort every transaction open for longer than its timeout (Kafka's
        abortTimedOutTransactions), under a bumped epoch so that its producer is fenced; the
        epoch it had stays usable for its InitProducerId (KIP-588)."""
        now = _now_ms()
        for m in [m for m in self.txns.values() if m.state == TxnState.ONGOING and now - m.start_ms > m.timeout_ms]:
            try:
                async with self._lock(m.transactional_id):
                    p = self._coordinator(m.transactional_id)
                    current = self.txns.get(m.transactional_id)
                    if current is None or current.state != TxnState.ONGOING or current.start_ms != m.start_ms:
                        continue  # it ended meanwhile
                    log.info("aborting the transaction of %s (producer %d epoch %d): open for %d ms, past its "
                             "transaction.timeout.ms of %d", m.transactional_id, m.producer_id, m.producer_epoch,
                             now - m.start_ms, m.timeout_ms)
                    await self._end(p, self._bumped(current).but(last_producer_epoch=current.producer_epoch),
                                    commit=False)
            except KafkaError as e:
                if e.code in (ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS):
                    continue  # no longer ours (or not yet loaded): its coordinator sees to it
                log.info("could not abort the timed-out transaction of %s: %s", m.transactional_id, e)

    # -- transactional.id.expiration.ms ----------------------------------------------------------------

    async def _expire_forever(self) -> None:
        while True:
            await asyncio.sleep(self.config.transaction_expire_interval_ms / 1000)
            await self.expire_transactional_ids()

    async def expire_transactional_ids(self) -> None:
        """Forget the ids of this broker's partitions idle for ``transactional.id.expiration.ms``
        with no transaction open (Kafka's removeExpiredTransactionalIds): a tombstone, written
        with acks=all, then the id is gone (its next InitProducerId gets a new producer id)."""
        idle = (TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)
        now = _now_ms()
        for m in [m for m in self._coordinated() if m.state in idle
                  and now - m.last_update_ms >= self.config.transactional_id_expiration_ms]:
            try:
                async with self._lock(m.transactional_id):
                    p = self._coordinator(m.transactional_id)
                    if self.txns.get(m.transactional_id) is not m:
                        continue  # it changed meanwhile
                    await self._append(p, [(m.transactional_id.encode(), None)], now)
                    del self.txns[m.transactional_id]
                log.info("transactional id %s expired: idle for %d ms (transactional.id.expiration.ms)",
                         m.transactional_id, now - m.last_update_ms)
            except KafkaError as e:
                log.info("could not expire transactional id %s: %s", m.transactional_id, e)

    # -- InitProducerId ------------------------------------------------------------------------------

    async def init_producer_id(self, req: InitTransactionalProducerRequest) -> InitTransactionalProducerResponse:
        try:
            if not 0 < req.transaction_timeout_ms <= self.config.transaction_max_timeout_ms:
                raise KafkaError(ErrorCode.INVALID_TRANSACTION_TIMEOUT,
                                  f"transaction.timeout.ms={req.transaction_timeout_ms} is not in 1.."
                                  f"{self.config.transaction_max_timeout_ms} (transaction.max.timeout.ms)")
            async with self._lock(req.transactional_id):
                p = self._coordinator(req.transactional_id)
                m = await self._init(p, req)
            return InitTransactionalProducerResponse(producer_id=m.producer_id, producer_epoch=m.producer_epoch)
        except KafkaError as e:
            return InitTransactionalProducerResponse(error_code=int(e.code), error_message=e.message)

    async def _init(self, p: Partition, req: InitTransactionalProducerRequest) -> TransactionMetadata:
        now = _now_ms()
        m = self.txns.get(req.transactional_id)
        if m is None:
            return await self._write(p, TransactionMetadata(req.transactional_id, await self.producer_ids.next_id(),
                                                            0, req.transaction_timeout_ms, last_update_ms=now))
        if m.state.preparing:
            raise KafkaError(ErrorCode.CONCURRENT_TRANSACTIONS,
                              f"the last transaction of {m.transactional_id} is still being completed")
        if req.producer_id >= 0 and (req.producer_id != m.producer_id or
                                     req.producer_epoch not in (m.producer_epoch, m.last_producer_epoch)):
            raise KafkaError(ErrorCode.PRODUCER_FENCED,
                              f"producer {req.producer_id} epoch {req.producer_epoch} is not the current producer "
                              f"of {m.transactional_id}")
        if m.state == TxnState.ONGOING:
            # The previous producer's transaction is aborted under a new epoch, fencing it; the
            # new producer retries (as Kafka's does) until the markers are written.
            await self._end(p, self._bumped(m), commit=False)
            raise KafkaError(ErrorCode.CONCURRENT_TRANSACTIONS,
                              f"aborting the open transaction of {m.transactional_id}'s previous producer")
        ready = m.but(state=TxnState.EMPTY, partitions=frozenset(), last_update_ms=now,
                      timeout_ms=req.transaction_timeout_ms)
        if req.producer_id >= 0 and req.producer_epoch != m.producer_epoch:
            # Kafka's prepareIncrementProducerEpoch: the epoch it had before the last bump is a
            # retry of that bump whose answer was lost (or the producer the coordinator fenced
            # on its timeout, KIP-588): it gets the current epoch, not another bump.
            return await self._write(p, ready)
        # A returning producer (KIP-360) keeps its epoch as the last one, for such a retry; a
        # new producer (no epoch given) fences every earlier one.
        return await self._write(p, self._bumped(ready).but(
            last_producer_epoch=m.producer_epoch if req.producer_id >= 0 else -1))

    def _bumped(self, m: TransactionMetadata) -> TransactionMetadata:
        """The next epoch; a new producer id would be needed past the last (not reached here:
        MAX_EPOCH bumps of one id)."""
        if m.producer_epoch >= MAX_EPOCH:
            raise KafkaError(ErrorCode.INVALID_PRODUCER_EPOCH, f"the epochs of producer {m.producer_id} are used up")
        return m.but(producer_epoch=m.producer_epoch + 1)

    def _check_producer(self, transactional_id: str, producer_id: int, epoch: int) -> TransactionMetadata:
        m = self.txns.get(transactional_id)
        if m is None or m.producer_id != producer_id:
            raise KafkaError(ErrorCode.INVALID_PRODUCER_ID_MAPPING,
                              f"producer {producer_id} is not the producer of transactional id {transactional_id}")
        if epoch != m.producer_epoch:
            raise KafkaError(ErrorCode.PRODUCER_FENCED,
                              f"producer {producer_id} has epoch {epoch}, but transactional id {transactional_id} "
                              f"is at epoch {m.producer_epoch}: a newer producer fenced it")
        if m.state.preparing:
            raise KafkaError(ErrorCode.CONCURRENT_TRANSACTIONS,
                              f"the last transaction of {transactional_id} is still being completed")
        return m

    # -- AddPartitionsToTxn ------------------------------------------------------------------------

    async def add_partitions(self, req: AddPartitionsToTxnRequest) -> AddPartitionsToTxnResponse:
        wanted = list(dict.fromkeys(req.partitions))
        unknown = {tp for tp in wanted if not self._exists(*tp)}
        if unknown:
            return _results(wanted, lambda tp: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if tp in unknown
                            else ErrorCode.OPERATION_NOT_ATTEMPTED)
        try:
            async with self._lock(req.transactional_id):
                p = self._coordinator(req.transactional_id)
                m = self._check_producer(req.transactional_id, req.producer_id, req.producer_epoch)
                now = _now_ms()
                if m.state == TxnState.ONGOING:
                    if not set(wanted) <= m.partitions:
                        await self._write(p, m.but(partitions=m.partitions | set(wanted), last_update_ms=now))
                else:
                    await self._write(p, m.but(state=TxnState.ONGOING, partitions=frozenset(wanted),
                                               last_update_ms=now, start_ms=now))
        except KafkaError as e:
            code = e.code
            return _results(wanted, lambda tp: code)
        return _results(wanted, lambda tp: ErrorCode.NONE)

    def _exists(self, topic: str, index: int) -> bool:
        t = self.rm.image.topics_by_name.get(topic)
        return t is not None and index in t.partitions

    # -- AddOffsetsToTxn (consume-transform-produce) -------------------------------------------------

    async def add_offsets(self, req: AddOffsetsToTxnRequest) -> AddOffsetsToTxnResponse:
        """The group's partition of __consumer_offsets joins the transaction, so that its
        TxnOffsetCommit is committed or dropped by the transaction's marker."""
        t = self.rm.image.topics_by_name.get(OFFSETS_TOPIC)
        if t is None or not t.partitions or not req.group_id:
            return AddOffsetsToTxnResponse(error_code=int(ErrorCode.COORDINATOR_NOT_AVAILABLE),
                                           error_message=f"{OFFSETS_TOPIC} does not exist yet")
        r = await self.add_partitions(AddPartitionsToTxnRequest(
            transactional_id=req.transactional_id, producer_id=req.producer_id, producer_epoch=req.producer_epoch,
            partitions=[(OFFSETS_TOPIC, partition_for(req.group_id, len(t.partitions)))]))
        return AddOffsetsToTxnResponse(error_code=r.results[0].error_code)

    # -- KIP-890 part 1: verifying a partition leader's first transactional batch -----------------------

    def verify(self, req: VerifyTxnPartitionsRequest) -> VerifyTxnPartitionsResponse:
        """Which of the partitions are not in the producer's ongoing transaction."""
        try:
            self._coordinator(req.transactional_id)
            m = self.txns.get(req.transactional_id)
            if m is None or m.producer_id != req.producer_id:
                raise KafkaError(ErrorCode.INVALID_PRODUCER_ID_MAPPING,
                                  f"producer {req.producer_id} is not the producer of {req.transactional_id}")
            if req.producer_epoch != m.producer_epoch:
                raise KafkaError(ErrorCode.INVALID_PRODUCER_EPOCH,
                                  f"producer {req.producer_id} has epoch {req.producer_epoch}, but "
                                  f"{req.transactional_id} is at epoch {m.producer_epoch}")
        except KafkaError as e:
            return VerifyTxnPartitionsResponse(error_code=int(e.code), error_message=e.message)
        ongoing = m.partitions if m.state == TxnState.ONGOING else frozenset()
        missing = [WritableTxnMarkerTopic(name=t.name, partitions=[i for i in t.partitions if (t.name, i) not in ongoing])
                   for t in req.topics]
        return VerifyTxnPartitionsResponse(not_added=[t for t in missing if t.partitions])

    # -- ListTransactions and DescribeTransactions (kafka-transactions.sh) -----------------------------

    def list_transactions(self, req: ListTransactionsRequest) -> ListTransactionsResponse:
        """The transactions this broker coordinates (Kafka's: an admin client asks every broker)."""
        known = {s.value for s in TxnState}
        resp = ListTransactionsResponse(unknown_states=[s for s in req.states if s not in known])
        now = _now_ms()
        for m in self._coordinated():
            if req.states and m.state.value not in req.states:
                continue
            if req.producer_ids and m.producer_id not in req.producer_ids:
                continue
            if req.min_duration_ms >= 0 and not (m.state == TxnState.ONGOING and now - m.start_ms >= req.min_duration_ms):
                continue
            resp.transactions.append(ListedTransaction(transactional_id=m.transactional_id, producer_id=m.producer_id,
                                                       state=m.state.value))
        return resp

    def describe_transaction(self, transactional_id: str) -> DescribedTransaction:
        try:
            self._coordinator(transactional_id)
        except KafkaError as e:
            return DescribedTransaction(transactional_id=transactional_id, error_code=int(e.code))
        m = self.txns.get(transactional_id)
        if m is None:
            return DescribedTransaction(transactional_id=transactional_id,
                                        error_code=int(ErrorCode.TRANSACTIONAL_ID_NOT_FOUND))
        return DescribedTransaction(transactional_id=transactional_id, state=m.state.value, timeout_ms=m.timeout_ms,
                                    start_ms=m.start_ms if m.state == TxnState.ONGOING else -1,
                                    producer_id=m.producer_id, producer_epoch=m.producer_epoch,
                                    partitions=sorted(m.partitions))

    def count_by_state(self) -> dict[TxnState, int]:
        """How many of the transactional ids this broker coordinates are in each state (every
        state, zeros too, so that a chart of one starts at 0): the metrics' view. Called from
        the metrics' HTTP thread, so the dicts the event loop changes are copied first."""
        counts = dict.fromkeys(TxnState, 0)
        for m in self._coordinated(dict(self._partitions.loaded), list(self.txns.values())):
            counts[m.state] += 1
        return counts

    def _coordinated(self, loaded: dict[int, int] | None = None,
                     txns: list[TransactionMetadata] | None = None) -> list[TransactionMetadata]:
        n = self._state_partitions()
        led = {index for index, epoch in (self._partitions.loaded if loaded is None else loaded).items()
               if self._partitions.serves(index, epoch)}
        return [m for m in (self.txns.values() if txns is None else txns)
                if n and txn_partition_for(m.transactional_id, n) in led]

    # -- EndTxn ----------------------------------------------------------------------------------

    async def end_txn(self, req: EndTxnRequest) -> EndTxnResponse:
        try:
            async with self._lock(req.transactional_id):
                p = self._coordinator(req.transactional_id)
                m = self._check_producer(req.transactional_id, req.producer_id, req.producer_epoch)
                done = TxnState.COMPLETE_COMMIT if req.committed else TxnState.COMPLETE_ABORT
                if m.state == done:
                    return EndTxnResponse()  # a retry of the EndTxn that completed it
                if m.state != TxnState.ONGOING:
                    raise KafkaError(ErrorCode.INVALID_TXN_STATE,
                                      f"transactional id {m.transactional_id} is {m.state.value}: there is no "
                                      f"transaction to {'commit' if req.committed else 'abort'}")
                await self._end(p, m, commit=req.committed)
            return EndTxnResponse()
        except KafkaError as e:
            return EndTxnResponse(error_code=int(e.code), error_message=e.message)

    async def _end(self, p: Partition, m: TransactionMetadata, *, commit: bool) -> TransactionMetadata:
        """Write PrepareCommit or PrepareAbort, then have the markers written in the background."""
        prepared = await self._write(p, m.but(state=TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT,
                                              last_update_ms=_now_ms()))
        self._complete_in_background(p, prepared)
        return prepared

    def _complete_in_background(self, p: Partition, m: TransactionMetadata) -> None:
        task = asyncio.get_running_loop().create_task(self._complete(p, m), name=f"txn-markers-{m.transactional_id}")
        self._completing[m.transactional_id] = task
        task.add_done_callback(lambda t: self._completing.pop(m.transactional_id, None)
                               if self._completing.get(m.transactional_id) is t else None)

    async def _complete(self, p: Partition, m: TransactionMetadata) -> None:
        commit = m.state == TxnState.PREPARE_COMMIT
        await self.markers.complete(m.producer_id, m.producer_epoch, commit, p.leader_epoch, m.partitions)
        if self.txns.get(m.transactional_id) is not m:
            return
        try:
            await self._write(p, m.but(state=TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT,
                                       partitions=frozenset(), last_update_ms=_now_ms()))
        except KafkaError as e:
            # The next leader of the partition finds it prepared and writes the markers again.
            log.info("transaction of %s: could not record its completion: %s", m.transactional_id, e)
            return
        log.debug("transaction of %s %s on %d partitions", m.transactional_id,
                  "committed" if commit else "aborted", len(m.partitions))


def _not_found(message: str) -> FindCoordinatorResponse:
    return FindCoordinatorResponse(error_code=int(ErrorCode.COORDINATOR_NOT_AVAILABLE), error_message=message,
                                   node_id=-1, port=-1)


def _results(partitions: list[tuple[str, int]], code: Callable[[tuple[str, int]], ErrorCode]
             ) -> AddPartitionsToTxnResponse:
    return AddPartitionsToTxnResponse(results=[TxnPartitionResult(topic=t, partition=i, error_code=int(code((t, i))))
                                               for t, i in partitions])
