"""SCRAM credential records replayed onto the image (Kafka's ``ScramDelta``)."""
from __future__ import annotations

from immutables import Map

from protos import metadata_pb2 as pb

from ..image import ScramImage
from ..records import RecordError
from ..scram import ScramCredential, ScramMechanism
from .maps import MapDelta

_EMPTY: Map = Map()


def _mechanism(value: int) -> ScramMechanism:
    try:
        return ScramMechanism(value)
    except ValueError:
        raise RecordError(f"unknown SCRAM mechanism {value}") from None


class ScramDelta(MapDelta[str, Map[ScramMechanism, ScramCredential]]):
    """A UserScramCredentialRecord sets (or replaces) a user's credential for one mechanism; a
    RemoveUserScramCredentialRecord removes one that exists (Kafka refuses it otherwise)."""

    def __init__(self, image: ScramImage) -> None:
        super().__init__(image.users)

    def user_scram_credential(self, r: pb.UserScramCredentialRecord) -> None:
        if not r.name or not r.salt or not r.stored_key or not r.server_key or r.iterations <= 0:
            raise RecordError(f"SCRAM credential of {r.name!r} lacks a user, salt, keys or iterations")
        mechanism = _mechanism(r.mechanism)
        users = self._write()
        users[r.name] = users.get(r.name, _EMPTY).set(
            mechanism, ScramCredential(r.salt, r.stored_key, r.server_key, r.iterations))

    def remove_user_scram_credential(self, r: pb.RemoveUserScramCredentialRecord) -> None:
        mechanism = _mechanism(r.mechanism)
        mine = self.view().get(r.name, _EMPTY)
        if mechanism not in mine:
            raise RecordError(f"user {r.name!r} has no {mechanism.mechanism_name} credential to remove")
        rest = mine.delete(mechanism)
        if len(rest):
            self._write()[r.name] = rest
        else:
            del self._write()[r.name]

    def image(self, current: ScramImage) -> ScramImage:
        users = self.finish()
        return current if users is current.users else ScramImage(users)
