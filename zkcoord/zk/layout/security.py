"""The nodes of users' SCRAM credentials and of ACLs, as ZooKeeper-mode Kafka
writes them, so that kafka-configs and kafka-acls read what zkcoord wrote:

- ``/config/users/<user>``: ``{"version":1,"config":{"SCRAM-SHA-256":"salt=...,
  stored_key=...,server_key=...,iterations=4096"}}``, with a change notification
  ``/config/changes/config_change_<seq>`` = ``{"version":2,"entity_path":"users/<user>"}``;
- ``/kafka-acl/<Group|Topic>/<name>``: ``{"version":1,"acls":[{"principal":
  "User:alice","permissionType":"Allow","operation":"Read","host":"*"}]}``, with a
  change notification ``/kafka-acl-changes/acl_changes_<seq>`` = ``Group:<name>``.

Pure: paths and bytes only.
"""

from __future__ import annotations

import json
import re

from zkcoord.security.acl import AclEntry, AclError, Resource
from zkcoord.security.scram import SCRAM_MECHANISMS, Credential, CredentialError
from zkcoord.zk.layout.json_codec import encode_json
from zkcoord.zk.layout.names import InvalidName, LayoutError, _validate_segment

CONFIG_USERS = "/config/users"
CONFIG_CHANGES = "/config/changes"
CONFIG_CHANGE_PREFIX = f"{CONFIG_CHANGES}/config_change_"
ACLS = "/kafka-acl"
ACL_CHANGES = "/kafka-acl-changes"
ACL_CHANGE_PREFIX = f"{ACL_CHANGES}/acl_changes_"

# Kafka stores a user under its URL-encoded name; these characters encode to
# themselves, so the node's name is the user's.
_USER_NAME = re.compile(r"[A-Za-z0-9._-]{1,255}")


class InvalidUserName(InvalidName):
    """A user name that cannot name a credential node."""


def validate_user(name: object) -> str:
    if not isinstance(name, str) or not _USER_NAME.fullmatch(name) or name in (".", ".."):
        raise InvalidUserName(f"user name {name!r} must be 1 to 255 ASCII letters, digits, '.', '_' or '-'")
    return name


def user_path(name: str) -> str:
    return f"{CONFIG_USERS}/{validate_user(name)}"


def user_change(name: str) -> bytes:
    """The content of the change notification for ``name``'s node."""
    return encode_json({"version": 2, "entity_path": f"users/{validate_user(name)}"})


def encode_user(credentials: dict[str, Credential], other: dict | None = None) -> bytes:
    """The user's node: its SCRAM credentials, keeping ``other`` config entries
    (quotas that kafka-configs may have set) as they were."""
    config = {k: v for k, v in (other or {}).items() if k not in SCRAM_MECHANISMS}
    config.update({mechanism: credentials[mechanism].to_kafka() for mechanism in sorted(credentials)})
    return encode_json({"version": 1, "config": config})


def decode_user(name: str, data: bytes) -> tuple[dict[str, Credential], dict]:
    """(SCRAM credentials by mechanism, the node's other config entries)."""
    where = user_path(name)
    try:
        obj = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise LayoutError(f"{where}: not JSON: {exc}") from None
    if not isinstance(obj, dict) or not isinstance(obj.get("config"), dict):
        raise LayoutError(f"{where}: expected an object with a 'config' object")
    credentials, other = {}, {}
    for key, value in obj["config"].items():
        if key in SCRAM_MECHANISMS:
            try:
                credentials[key] = Credential.from_kafka(key, value)
            except CredentialError as exc:
                raise LayoutError(f"{where}: {exc}") from None
        else:
            other[key] = value
    return credentials, other


def resource_path(resource: Resource) -> str:
    name = _validate_segment(resource.name, f"{resource.kind} name", InvalidName)
    return f"{ACLS}/{resource.kind}/{name}"


def acl_change(resource: Resource) -> bytes:
    return str(resource).encode("utf-8")


def encode_acls(entries) -> bytes:
    return encode_json({"version": 1, "acls": [
        {"principal": e.principal, "permissionType": e.permission, "operation": e.operation, "host": e.host}
        for e in sorted(set(entries))]})


def decode_acls(resource: Resource, data: bytes) -> frozenset[AclEntry]:
    where = resource_path(resource)
    try:
        obj = json.loads(data) if data else {"acls": []}
        items = obj["acls"]
        if not isinstance(items, list):
            raise TypeError("'acls' is not a list")
        return frozenset(AclEntry(i["principal"], i["permissionType"], i["operation"], i.get("host", "*"))
                         for i in items)
    except (ValueError, UnicodeDecodeError, KeyError, TypeError) as exc:
        raise LayoutError(f"{where}: not an ACL list: {exc!r}") from None
    except AclError as exc:
        raise LayoutError(f"{where}: {exc}") from None
