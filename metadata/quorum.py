"""The controller quorum's voters (KIP-853): the first voters a controller's storage is
formatted with, and the rules for changing them while the quorum runs (AddRaftVoter,
RemoveRaftVoter). The Raft library makes the changes, one at a time, a new voter caught up
first as an observer and then as a learner; this module decides what a request may ask and
answers in Kafka's error codes, each refusal before anything is written.

Voters are named by node id and directory id: a controller whose disk was wiped and formatted
again has a new directory id and is not the voter it was (it forgot its votes), so replacing
it is a ``remove-controller`` of the old pair and an ``add-controller`` of the new one.

A quorum started from ``controller.quorum.voters`` is static, as Kafka's kraft.version 0 is:
its voters have no known directories, so it cannot be changed while it runs (every server's
properties would disagree with the log's voter set, and a wiped voter could not be told from
the one it replaced). One formatted with ``--standalone`` or ``--initial-controllers`` is
dynamic: every voter's directory is known.
"""
from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from dataclasses import dataclass

from common.config_def import ConfigError
from common.server_keys import BOOTSTRAP_SERVERS, VOTERS
from raft.config import UNKNOWN_DIRECTORY, Voter, check_directory_id, new_directory_id, parse_voter_set
from raft.errors import LeftAsLearner, MembershipRefused, NotCaughtUp, NotLeader, ProposalDropped
from raft.messages import Membership

from .config import ServerConfig
from .controller import QuorumController
from common.errors import ErrorCode, KafkaError
from .image import Endpoint

NOTHING_CHANGED = "nothing was changed"


@dataclass(frozen=True, slots=True)
class AddVoter:
    """KIP-853's AddRaftVoter: ``listeners`` are the new controller's (the one named as the
    active controller's listener is used); ``timeout_ms`` how long it may take to catch up."""

    cluster_id: str
    voter_id: int
    directory_id: str
    listeners: tuple[Endpoint, ...]
    timeout_ms: int = 0


@dataclass(frozen=True, slots=True)
class RemoveVoter:
    """KIP-853's RemoveRaftVoter; ``directory_id`` UNKNOWN_DIRECTORY for a voter of unknown directory."""

    cluster_id: str
    voter_id: int
    directory_id: str


def initial_voters(cfg: ServerConfig, *, standalone: bool, initial_controllers: str | None,
                   no_initial_controllers: bool) -> tuple[list[Voter] | None, str | None]:
    """What ``kraft storage format`` writes into the metadata log directory, as Kafka's
    StorageTool decides it: (the initial voter set or None, this directory's id or None for a
    new random one). ConfigError for a combination that makes no sense."""
    chosen = [flag for flag, on in (("--standalone", standalone), ("--initial-controllers", initial_controllers),
                                    ("--no-initial-controllers", no_initial_controllers)) if on]
    if len(chosen) > 1:
        raise ConfigError(f"give only one of --standalone, --initial-controllers and --no-initial-controllers, "
                          f"not {' and '.join(chosen)}")
    if chosen and not cfg.is_controller:
        raise ConfigError(f"{chosen[0]} is for controllers; this server's process.roles has no controller")
    if chosen and chosen[0] != "--no-initial-controllers" and cfg.voters:
        raise ConfigError(f"{chosen[0]} starts a dynamic quorum, but the config sets {VOTERS} (a static one): "
                          f"set {BOOTSTRAP_SERVERS} instead")
    if cfg.is_controller and not cfg.voters and not chosen:
        raise ConfigError(f"because {VOTERS} is not set on this controller, give one of --standalone, "
                          f"--initial-controllers or --no-initial-controllers")
    if standalone:
        directory = new_directory_id()
        return [Voter(cfg.node_id, cfg.controller_address(), directory)], directory
    if not initial_controllers:
        return None, None
    voters = parse_voter_set(initial_controllers)
    mine = next((v for v in voters if v.node_id == cfg.node_id), None)
    if mine is None:  # formatted knowing the voters, it starts as an observer
        return voters, None
    port = cfg.listeners[cfg.controller_listener][1]
    if int(mine.address.rsplit(":", 1)[1]) != port:
        raise ConfigError(f"--initial-controllers gives node {cfg.node_id} the address {mine.address}, but its "
                          f"{cfg.controller_listener} listener is on port {port}")
    return voters, mine.directory_id


def is_static(membership: Membership) -> bool:
    """Whether the voter set came from ``controller.quorum.voters``: no voter's directory is known."""
    return not any(membership.directory(v) for v in membership.voters)


def describe_voter(membership: Membership, node_id: int) -> str:
    return f"{node_id} (directory id {membership.directory(node_id) or UNKNOWN_DIRECTORY})"


async def add_voter(controller: QuorumController, request: AddVoter, listener_name: str) -> None:
    """KIP-853's AddVoter: refuse a request for another cluster, a static quorum or a node id
    already voting; wait (``timeout_ms``) for the controller to be caught up as an observer,
    then make it a learner and, caught up again, a voter. A failure after the first step says
    that the controller stays a learner, and how to finish or undo it."""
    node = controller.node
    nid = request.voter_id
    _check_request(node.cluster_id, request.cluster_id, nid, node.membership, "add")
    directory = _directory(request.directory_id)
    endpoint = next((e for e in request.listeners if e.name.upper() == listener_name), None)
    if endpoint is None or not endpoint.host or not 0 < endpoint.port < 65536:
        raise KafkaError(ErrorCode.INVALID_REQUEST, f"controller {nid} gives no {listener_name} listener "
                       f"(HOST:PORT) for the quorum to reach it; {NOTHING_CHANGED}")
    membership = node.membership
    if nid in membership.voters:
        raise KafkaError(ErrorCode.DUPLICATE_VOTER, f"controller {describe_voter(membership, nid)} is already a voter; "
                       f"to replace it, remove it first; {NOTHING_CHANGED}")
    timeout = max(1.0, request.timeout_ms / 1000) if request.timeout_ms > 0 else 30.0
    with _kafka_errors(controller, f"adding controller {nid}",
                       f"is it running, with {BOOTSTRAP_SERVERS} naming this quorum?",
                       f"run add-controller again once it is caught up, or remove it with remove-controller "
                       f"--controller-id {nid} --controller-directory-id {directory or UNKNOWN_DIRECTORY}"):
        await node.add_voter(nid, f"{endpoint.host}:{endpoint.port}", directory_id=directory,
                             timeout=2 * timeout, observer_timeout=timeout)


async def remove_voter(controller: QuorumController, request: RemoveVoter) -> None:
    """KIP-853's RemoveVoter, for the voter with exactly this (node id, directory id), or the
    learner an add-controller left behind when the new controller died or was formatted again
    before it was made a voter (nothing else removes one). Also refused when it is the last
    voter, when the voters left would not have a live majority (the quorum could commit
    nothing afterwards, not even the change undoing it), or when the current voters have none
    (the removal commits under them, so it never would)."""
    node = controller.node
    nid = request.voter_id
    _check_request(node.cluster_id, request.cluster_id, nid, node.membership, "remove")
    directory = "" if request.directory_id == UNKNOWN_DIRECTORY else _directory(request.directory_id)
    membership = node.membership
    if nid not in membership.members or membership.directory(nid) != directory:
        voters = ", ".join(describe_voter(membership, v) for v in sorted(membership.voters))
        learners = ", ".join(describe_voter(membership, v) for v in sorted(membership.learners))
        raise KafkaError(ErrorCode.VOTER_NOT_FOUND, f"controller {nid} with directory id "
                       f"{directory or UNKNOWN_DIRECTORY} is not a voter; the voters are {voters}"
                       + (f" (and the learners {learners})" if learners else "") + f"; {NOTHING_CHANGED}")
    with _kafka_errors(controller, f"removing controller {nid}"):
        await node.remove_member(nid, directory_id=directory, timeout=30.0)


@contextlib.contextmanager
def _kafka_errors(controller: QuorumController, what: str, not_caught_up: str = "",
                  left_as_learner: str = "") -> Iterator[None]:
    """The library's answers to a membership change, as Kafka's codes. Only a timeout after
    the change was appended leaves its outcome unknown; an add that stopped after making the
    controller a learner says so (``left_as_learner``: what to do about it), never that
    nothing was changed."""
    try:
        yield
    except NotLeader:
        raise controller.not_controller() from None
    except LeftAsLearner as e:
        code = ErrorCode.INVALID_REQUEST if isinstance(e.cause, MembershipRefused) else ErrorCode.REQUEST_TIMED_OUT
        raise KafkaError(code, f"{what}: {e.cause}; controller {e.node_id} was added as a learner and is one still: "
                             f"{left_as_learner}") from None
    except MembershipRefused as e:  # the last voter, no live majority left, another directory
        raise KafkaError(ErrorCode.INVALID_REQUEST, f"{what}: {e}; {NOTHING_CHANGED}") from None
    except ProposalDropped as e:  # another change in flight; REQUEST_TIMED_OUT is Kafka's answer too
        raise KafkaError(ErrorCode.REQUEST_TIMED_OUT, f"{what}: {e}; {NOTHING_CHANGED}") from None
    except NotCaughtUp as e:
        raise KafkaError(ErrorCode.REQUEST_TIMED_OUT, f"{what}: {e}; {not_caught_up}") from None
    except asyncio.TimeoutError:
        raise KafkaError(ErrorCode.REQUEST_TIMED_OUT, f"{what}: the change was appended but did not commit in "
                       f"time; it may or may not take effect (kraft quorum describe --status shows the "
                       f"voters)") from None


def _check_request(cluster_id: str, asked: str, node_id: int, membership: Membership, verb: str) -> None:
    if asked and asked != cluster_id:
        raise KafkaError(ErrorCode.INCONSISTENT_CLUSTER_ID, f"controller {node_id} is formatted for cluster {asked}, "
                       f"but this quorum is cluster {cluster_id}; {NOTHING_CHANGED}")
    if node_id <= 0:
        raise KafkaError(ErrorCode.INVALID_REQUEST, f"bad controller id {node_id}: ids are positive; {NOTHING_CHANGED}")
    if is_static(membership):
        raise static_quorum_refusal(verb)


def static_quorum_refusal(verb: str) -> KafkaError:
    """Why a static quorum refuses to add or remove a controller (``kraft quorum``'s --dry-run
    says it too, instead of a success the real call would not have)."""
    return KafkaError(ErrorCode.UNSUPPORTED_VERSION, f"cannot {verb} a controller: this quorum's voters are static "
                    f"({VOTERS}, Kafka's kraft.version 0); a quorum that changes while it runs is formatted "
                    f"with --standalone or --initial-controllers; {NOTHING_CHANGED}")


def _directory(text: str) -> str:
    try:
        return check_directory_id(text)
    except ConfigError as e:
        raise KafkaError(ErrorCode.INVALID_REQUEST, f"{e}; {NOTHING_CHANGED}") from None
