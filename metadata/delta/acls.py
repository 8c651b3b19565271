"""ACL records replayed onto the image's ACLs (Kafka's ``AclsDelta``), keeping the index by
resource pattern in step with the ACLs by id."""
from __future__ import annotations

import uuid

from immutables import Map

from protos import metadata_pb2 as pb

from ..acls import AclOperation, AclPermissionType, AclResourceType, PatternType, ResourcePattern, StandardAcl
from ..image import AclsImage
from ..records import RecordError, uuid_of
from .maps import MapDelta

_EMPTY: Map = Map()


def acl_of_record(r: pb.AccessControlEntryRecord) -> StandardAcl:
    """The ACL a record holds; RecordError for values no controller writes."""
    try:
        acl = StandardAcl(AclResourceType(r.resource_type), r.resource_name, PatternType(r.pattern_type),
                          r.principal, r.host, AclOperation(r.operation), AclPermissionType(r.permission_type))
    except ValueError as e:
        raise RecordError(f"ACL {r.resource_name!r}: {e}") from None
    if (acl.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED)
            or acl.permission_type not in (AclPermissionType.ALLOW, AclPermissionType.DENY)
            or acl.operation in (AclOperation.ANY, AclOperation.UNKNOWN)
            or acl.resource_type in (AclResourceType.ANY, AclResourceType.UNKNOWN)
            or not acl.resource_name or not acl.principal or not acl.host):
        raise RecordError(f"not an ACL: {acl}")
    return acl


class AclsDelta(MapDelta[uuid.UUID, StandardAcl]):
    """ACLs by id, with a second map delta for the index by pattern. An AccessControlEntryRecord
    adds an ACL under a new id; a RemoveAccessControlEntryRecord removes one that exists (Kafka
    refuses either otherwise, as this does)."""

    def __init__(self, image: AclsImage) -> None:
        super().__init__(image.by_id)
        self._patterns: MapDelta[ResourcePattern, Map[uuid.UUID, StandardAcl]] = MapDelta(image.by_pattern)
        self.touched = False  # since the base, for changes()

    def access_control_entry(self, r: pb.AccessControlEntryRecord) -> None:
        acl_id = uuid_of(r.id, "ACL id")
        if acl_id in self.view():
            raise RecordError(f"ACL {acl_id} exists already")
        acl = acl_of_record(r)
        self._write()[acl_id] = acl
        patterns = self._patterns
        patterns._write()[acl.pattern] = patterns.view().get(acl.pattern, _EMPTY).set(acl_id, acl)
        self.touched = True

    def remove_access_control_entry(self, r: pb.RemoveAccessControlEntryRecord) -> None:
        acl_id = uuid_of(r.id, "ACL id")
        acl = self.view().get(acl_id)
        if acl is None:
            raise RecordError(f"no ACL has id {acl_id}")
        del self._write()[acl_id]
        patterns = self._patterns
        rest = patterns.view()[acl.pattern].delete(acl_id)
        if len(rest):
            patterns._write()[acl.pattern] = rest
        else:
            del patterns._write()[acl.pattern]
        self.touched = True

    def image(self, current: AclsImage) -> AclsImage:
        """The next image's ACLs: ``current`` itself when nothing changed."""
        by_id, by_pattern = self.finish(), self._patterns.finish()
        if by_id is current.by_id and by_pattern is current.by_pattern:
            return current
        return AclsImage(by_id, by_pattern)
