"""The quorum page: the controllers that vote and the nodes that only follow the metadata log,
with their directory ids, and changing the voters while the quorum runs (Kafka's KIP-853): add
an observing controller as a voter, remove a voter after a confirmation. The requests are
``kraft quorum add-controller`` and ``remove-controller``'s (AddRaftVoter, RemoveRaftVoter);
a static quorum (controller.quorum.voters) cannot change, and the page says so instead."""
from __future__ import annotations

from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from metadata.quorum import static_quorum_refusal
from protos import controller_pb2 as pb

from .pages import bad_request, cluster_of, int_param, render, require_writable

#: How long the active controller waits for a controller being added to catch up (kraft
#: quorum add-controller waits 40% of its command timeout; the console's is 30 s).
ADD_TIMEOUT_S = 30.0


def _endpoint(text: str) -> pb.Endpoint:
    """``LISTENER://HOST:PORT``, as DescribeQuorum shows a controller's endpoints."""
    name, sep, address = text.strip().partition("://")
    host, _, port = address.rpartition(":")
    if not sep or not name or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise bad_request(f"endpoint {text.strip()!r}: expected LISTENER://HOST:PORT, e.g. CONTROLLER://host4:9093")
    return pb.Endpoint(name=name, host=host.strip("[]"), port=int(port))


async def quorum_page(request: Request) -> Response:
    q = await cluster_of(request).quorum()
    static = not any(v.directory_id for v in q.voters)
    return render(request, "quorum.html", q=q, static_refusal=str(static_quorum_refusal("add or remove")) if static else None,
                  voters=sorted(q.voters, key=lambda v: v.replica_id),
                  observers=sorted(q.observers, key=lambda o: o.replica_id))


async def controller_add(request: Request) -> Response:
    require_writable(request)
    form = await request.form()
    voter_id = int_param(str(form.get("id", "")), "controller id", 0, minimum=1)
    directory = str(form.get("directory_id", "")).strip()
    endpoint = _endpoint(str(form.get("endpoint", "")))
    cluster = cluster_of(request)
    q = await cluster.quorum()
    await cluster.controller.add_raft_voter(pb.AddRaftVoterRequest(
        cluster_id=q.cluster_id, timeout_ms=int(ADD_TIMEOUT_S * 1000), voter_id=voter_id,
        voter_directory_id=directory, listeners=[endpoint]), timeout=ADD_TIMEOUT_S + 10,
        attempt_timeout=ADD_TIMEOUT_S + 5)
    said = (f"Added controller {voter_id} with directory id {directory} and endpoints: "
            f"{endpoint.name}://{endpoint.host}:{endpoint.port}")
    return RedirectResponse(str(request.url_for("quorum")) + "?" + urlencode({"changed": said}), status_code=303)


async def controller_remove_confirm(request: Request) -> Response:
    require_writable(request)
    voter_id = int_param(request.query_params.get("id"), "controller id", 0, minimum=1)
    return render(request, "quorum_remove.html", voter_id=voter_id,
                  directory_id=request.query_params.get("directory_id", ""))


async def controller_remove(request: Request) -> Response:
    require_writable(request)
    form = await request.form()
    voter_id = int_param(str(form.get("id", "")), "controller id", 0, minimum=1)
    directory = str(form.get("directory_id", "")).strip()
    await cluster_of(request).controller.remove_raft_voter(
        pb.RemoveRaftVoterRequest(voter_id=voter_id, voter_directory_id=directory))
    said = f"Removed KRaft controller {voter_id} with directory id {directory}"
    return RedirectResponse(str(request.url_for("quorum")) + "?" + urlencode({"changed": said}), status_code=303)
