"""``kraft transactions`` (kafka-transactions.sh): list the transactions the coordinators
keep, describe one, show the producers a partition knows, find hanging transactions (open in
a partition for longer than any transaction may be, with no coordinator state that would ever
end them) and abort one with a marker written to its partition."""
from __future__ import annotations

import time
from typing import Any

import click

from kraft.cli.invocation import command_config_option, command_tls, fail, run

HANGING_HEADER = ["Topic", "Partition", "ProducerId", "ProducerEpoch", "CoordinatorEpoch", "StartOffset",
                  "LastTimestamp", "Duration(min)"]


@click.group("transactions")
@click.option("--bootstrap-server", required=True, help="HOST:PORT[,HOST:PORT] of brokers (gRPC listeners)")
@command_config_option
@click.pass_context
def transactions(ctx: click.Context, bootstrap_server: str) -> None:
    """List, describe, find hanging and abort transactions (kafka-transactions.sh)."""
    ctx.obj = bootstrap_server


def _ask(bootstrap: str, work: Any) -> Any:
    """``work(admin)`` with an Admin of the cluster; a failure is one line."""
    from clients.admin import Admin
    from clients.cluster_view import CLIENT_ERRORS

    async def go() -> Any:
        async with Admin(bootstrap, tls=command_tls()) as admin:
            return await work(admin)
    try:
        return run(go())
    except (*CLIENT_ERRORS, NoOpenTransaction) as e:
        fail(str(e))


def _echo(rows: list[list[Any]]) -> None:
    from clients.consumer_groups import table
    click.echo(table(rows))


@transactions.command("list")
@click.pass_obj
def list_transactions(bootstrap: str) -> None:
    """Every transactional id the coordinators keep, with its coordinator and state."""
    found = _ask(bootstrap, lambda admin: admin.list_transactions())
    _echo([["TransactionalId", "Coordinator", "ProducerId", "TransactionState"]] +
          [[t.transactional_id, bid, t.producer_id, t.state] for bid, t in found])


@transactions.command("describe")
@click.option("--transactional-id", required=True)
@click.pass_obj
def describe(bootstrap: str, transactional_id: str) -> None:
    """One transactional id's state at its coordinator."""
    bid, d = _ask(bootstrap, lambda admin: admin.describe_transaction(transactional_id))
    now = int(time.time() * 1000)
    partitions = ",".join(f"{t.name}-{p}" for t in d.topics for p in t.partitions)
    _echo([["CoordinatorId", "TransactionalId", "ProducerId", "ProducerEpoch", "TransactionState",
            "TransactionTimeoutMs", "CurrentTransactionStartTimeMs", "TransactionDurationMs", "TopicPartitions"],
           [bid, d.transactional_id, d.producer_id, d.producer_epoch, d.state, d.timeout_ms,
            d.start_ms if d.start_ms >= 0 else "None", now - d.start_ms if d.start_ms >= 0 else "None", partitions]])


@transactions.command("describe-producers")
@click.option("--topic", required=True)
@click.option("--partition", type=int, required=True)
@click.pass_obj
def describe_producers(bootstrap: str, topic: str, partition: int) -> None:
    """The producers the partition's leader keeps state for, and where each one's open
    transaction began (-1: none)."""
    found = _ask(bootstrap, lambda admin: admin.describe_producers([(topic, partition)]))
    _echo([["ProducerId", "ProducerEpoch", "LatestCoordinatorEpoch", "LastSequence", "LastTimestamp",
            "CurrentTransactionStartOffset"]] +
          [[p.producer_id, p.producer_epoch, p.coordinator_epoch, p.last_sequence, p.last_timestamp,
            p.current_txn_start_offset] for p in found[(topic, partition)]])


@transactions.command("abort")
@click.option("--topic", required=True)
@click.option("--partition", type=int, required=True)
@click.option("--start-offset", type=int, help="the first offset of the open transaction to abort")
@click.option("--producer-id", type=int)
@click.option("--producer-epoch", type=int)
@click.option("--coordinator-epoch", type=int)
@click.pass_obj
def abort(bootstrap: str, topic: str, partition: int, start_offset: int | None, producer_id: int | None,
          producer_epoch: int | None, coordinator_epoch: int | None) -> None:
    """Abort a hanging transaction in one partition: by its --start-offset (its producer is
    looked up with DescribeProducers), or by --producer-id, --producer-epoch and
    --coordinator-epoch."""
    explicit = [v is not None for v in (producer_id, producer_epoch, coordinator_epoch)]
    by_offset, by_producer = start_offset is not None, all(explicit)
    if by_offset == by_producer or (by_offset and any(explicit)) or (not by_offset and not by_producer):
        fail("give either --start-offset, or --producer-id, --producer-epoch and --coordinator-epoch")

    producer = None
    if producer_id is not None and producer_epoch is not None and coordinator_epoch is not None:
        producer = (producer_id, producer_epoch, coordinator_epoch)
    _ask(bootstrap, lambda admin: abort_transaction(admin, topic, partition, start_offset, producer))


class NoOpenTransaction(LookupError):
    """No open transaction starts at the offset given to abort (it ended, or never began there)."""


async def abort_transaction(admin: Any, topic: str, partition: int, start_offset: int | None,
                            producer: tuple[int, int, int] | None = None) -> tuple[int, int, int]:
    """Write an abort marker for the transaction open in ``topic``-``partition`` from
    ``start_offset`` (its producer looked up with DescribeProducers), or for ``producer`` (id,
    epoch, coordinator epoch); the producer it aborted for. ``abort``'s logic, and the console's."""
    if start_offset is not None:
        producers = (await admin.describe_producers([(topic, partition)]))[(topic, partition)]
        p = next((p for p in producers if p.current_txn_start_offset == start_offset), None)
        if p is None:
            raise NoOpenTransaction(f"Could not find any open transactions starting at offset {start_offset} on "
                                    f"partition {topic}-{partition}")
        producer = (p.producer_id, p.producer_epoch, max(0, p.coordinator_epoch))
    assert producer is not None, "a start offset or a producer"
    await admin.abort_transaction((topic, partition), *producer)
    return producer


async def hanging(admin: Any, max_minutes: int, broker_id: int | None = None) -> list[list[Any]]:
    """Rows of ``HANGING_HEADER``: transactions open in a partition (with a replica on
    ``broker_id``, or any) for longer than ``max_minutes`` whose producer no coordinator has an
    ongoing transaction with that partition for. ``find-hanging``'s logic, and the console's."""
    topics = await admin.topics()
    tps = [(name, p.partition) for name, t in sorted(topics.items()) for p in t.partitions
           if broker_id is None or broker_id in p.replicas]
    now = int(time.time() * 1000)
    old = now - max_minutes * 60_000
    candidates = [(tp, p) for tp, ps in (await admin.describe_producers(tps)).items() for p in ps
                  if p.current_txn_start_offset >= 0 and p.last_timestamp <= old]
    if not candidates:
        return []
    listed = await admin.list_transactions(producer_ids=sorted({p.producer_id for _, p in candidates}))
    ongoing: set[tuple[int, str, int]] = set()
    for _, t in listed:
        _, d = await admin.describe_transaction(t.transactional_id)
        if d.state == "Ongoing":
            ongoing.update((d.producer_id, x.name, i) for x in d.topics for i in x.partitions)
    return [[tp[0], tp[1], p.producer_id, p.producer_epoch, p.coordinator_epoch, p.current_txn_start_offset,
             p.last_timestamp, (now - p.last_timestamp) // 60_000]
            for tp, p in candidates if (p.producer_id, tp[0], tp[1]) not in ongoing]


@transactions.command("find-hanging")
@click.option("--broker-id", type=int, required=True, help="look at the partitions with a replica on this broker")
@click.option("--max-transaction-timeout", type=int, default=15, show_default=True,
              help="minutes: a transaction open longer than this (transaction.max.timeout.ms) may be hanging")
@click.pass_obj
def find_hanging(bootstrap: str, broker_id: int, max_transaction_timeout: int) -> None:
    """Transactions open in a partition for longer than --max-transaction-timeout whose producer
    no coordinator has an ongoing transaction with that partition for: nothing will ever end
    them, and they hold read_committed consumers at their start (abort them with ``abort``)."""
    _echo([HANGING_HEADER] + _ask(bootstrap, lambda admin: hanging(admin, max_transaction_timeout, broker_id)))
