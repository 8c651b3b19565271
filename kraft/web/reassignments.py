"""The reassignments page: every partition reassignment in progress, as ``kraft
reassign-partitions --list`` lists them, and for each replica being added how far it is behind
its leader in offsets and bytes, as ``--verify --bootstrap-server`` reports it
(kraft/reassign.py's ``ongoing`` and ``progress``), drawn as a progress bar; and moving a
partition (a review of the current and target replicas first, then ``--execute``'s code, with
an optional throttle), cancelling a move (``--cancel``'s) and removing the throttles."""
from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlencode

from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from common.errors import ErrorCode, KafkaError
from kraft import reassign
from metadata.reassignments import PlanError, plan_json
from protos import controller_pb2 as pb

from .pages import bad_request, cluster_of, int_param, not_found, render, require_writable


@dataclass(frozen=True, slots=True)
class Moving:
    """One replica being added: what the leader holds, how much of it the replica still lacks."""

    broker: int
    offsets_behind: int
    bytes_behind: int
    leader_bytes: int

    @property
    def copied_bytes(self) -> int:
        return max(0, self.leader_bytes - self.bytes_behind)

    @property
    def percent(self) -> int:
        return 100 if self.leader_bytes <= 0 else int(100 * self.copied_bytes / self.leader_bytes)

    @property
    def behind(self) -> str:
        return f"{self.offsets_behind} offsets ({reassign.kib(self.bytes_behind)}) behind"


async def reassignment_list(request: Request) -> Response:
    cluster = cluster_of(request)
    moving = await reassign.ongoing(cluster.controller, None)
    describes = await (await cluster.brokers()).describe_brokers() if moving else {}
    rows = []
    for (topic, partition), o in sorted(moving.items()):
        lead = describes.get(o.leader)
        size = next((s.size_bytes for s in lead.replicas if s.topic == topic and s.partition == partition),
                    0) if lead is not None else 0
        replicas = [Moving(p.broker, p.offsets_behind, p.bytes_behind, size)
                    for p in reassign.progress(describes, topic, partition, o.leader, o.adding_replicas)]
        rows.append({"topic": topic, "partition": partition, "o": o, "moving": replicas})
    return render(request, "reassignments.html", rows=rows)


def _target(form: FormData) -> tuple[str, int, tuple[int, ...], int | None]:
    """The form's partition, its target replicas (``102,103``: the first is the preferred
    leader) and the throttle (B/s, or None), refused in one line when they are not."""
    topic = str(form.get("topic", "")).strip()
    if not topic:
        raise bad_request("give the topic whose partition to move")
    partition = int_param(str(form.get("partition", "")), "partition", 0)
    try:
        replicas = tuple(reassign.parse_broker_list(str(form.get("replicas", ""))))
    except PlanError as e:
        raise bad_request(str(e).replace("--broker-list", "replicas")) from None
    throttle = str(form.get("throttle", "")).strip()
    return topic, partition, replicas, int_param(throttle, "throttle", 0, minimum=1) if throttle else None


async def reassignment_review(request: Request) -> Response:
    """The dry run: the partition's current replicas and the target, as ``--generate`` shows a
    plan, checked against the registered brokers; nothing moves until *Start*."""
    require_writable(request)
    topic, partition, replicas, throttle = _target(await request.form())
    client = cluster_of(request).controller
    current = await reassign.current_assignment(client, [topic])
    if (topic, partition) not in current:
        raise not_found(f"topic {topic} has no partition {partition}")
    registered = {b.id for b in (await client.describe_cluster(pb.DescribeClusterRequest())).brokers}
    unknown = [b for b in replicas if b not in registered]
    if unknown:
        raise KafkaError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                         f"replicas {','.join(map(str, replicas))} name brokers {unknown}, which are not registered")
    key = (topic, partition)
    return render(request, "reassignment_review.html", topic=topic, partition=partition, replicas=replicas,
                  throttle=throttle, current=current[key], current_json=plan_json({key: current[key]}),
                  proposed_json=plan_json({key: replicas}))


async def reassignment_start(request: Request) -> Response:
    """``kraft reassign-partitions --execute`` of the one partition (its checks and answers)."""
    require_writable(request)
    topic, partition, replicas, throttle = _target(await request.form())
    lines = await reassign.execute(cluster_of(request).controller, {(topic, partition): replicas}, throttle)
    return _back(request, lines[-1] + (f" (throttled to {throttle} B/s: remove the throttles once it is done)"
                                       if throttle is not None else ""))


async def reassignment_cancel(request: Request) -> Response:
    """``kraft reassign-partitions --cancel`` of the one partition: its replicas go back."""
    require_writable(request)
    form = await request.form()
    topic = str(form.get("topic", "")).strip()
    partition = int_param(str(form.get("partition", "")), "partition", 0)
    lines = await reassign.cancel(cluster_of(request).controller, {(topic, partition): ()})
    return _back(request, lines[-1])


async def throttles_remove(request: Request) -> Response:
    """Remove both replication throttles from every broker, as ``--verify`` does once nothing moves."""
    require_writable(request)
    client = cluster_of(request).controller
    brokers = sorted(b.id for b in (await client.describe_cluster(pb.DescribeClusterRequest())).brokers)
    await reassign.set_throttle(client, brokers, None)
    return _back(request, f"Clearing broker-level throttles on brokers {','.join(map(str, brokers))}")


def _back(request: Request, said: str) -> Response:
    return RedirectResponse(str(request.url_for("reassignments")) + "?" + urlencode({"done": said}), status_code=303)
