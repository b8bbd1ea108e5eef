"""Users' SCRAM credentials and ACLs in ZooKeeper: reading, writing (with
Kafka's change notifications), the credentials as the login checks read
them (:class:`CredentialStore`) and a cache of the ACLs that follows their
changes and, as Kafka's brokers do, deletes the notifications that have
expired. The bytes are zkcoord.zk.layout.security's; the decisions are
zkcoord.security.acl's and zkcoord.security.scram's.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Callable, Iterable, Optional

from kazoo.exceptions import BadVersionError, KazooException, NodeExistsError, NoNodeError

from zkcoord.errors import ZkcoordError
from zkcoord.security import scram
from zkcoord.security.acl import RESOURCE_TYPES, AclEntry, Resource
from zkcoord.zk.layout import security as sec

log = logging.getLogger(__name__)


class UnknownUser(ZkcoordError):
    """No credentials are stored for the user named."""


class CredentialsUnavailable(scram.AuthenticationFailed):
    """ZooKeeper could not be asked for the user's credentials: the user is
    not authenticated now, and may be once ZooKeeper answers again."""

    retriable = True


# -- users -------------------------------------------------------------------

def _read_user(zk, name: str) -> tuple[Optional[dict], Optional[dict], int]:
    try:
        data, stat = zk.get(sec.user_path(name))
    except NoNodeError:
        return None, None, -1
    credentials, other = sec.decode_user(name, data)
    return credentials, other, stat.version


def _notify_user(zk, name: str) -> None:
    zk.ensure_path(sec.CONFIG_CHANGES)
    zk.create(sec.CONFIG_CHANGE_PREFIX, sec.user_change(name), sequence=True)


def set_user(zk, name: str, password: str, mechanisms: Iterable[str] = scram.SCRAM_MECHANISMS,
             iterations: int = scram.DEFAULT_ITERATIONS) -> None:
    """Store (or replace) ``name``'s credentials for ``mechanisms``, keeping
    those of other mechanisms and the node's other config entries."""
    path = sec.user_path(name)
    fresh = {m: scram.derive(m, password, iterations) for m in mechanisms}  # checks before any write
    while True:
        credentials, other, version = _read_user(zk, name)
        data = sec.encode_user({**(credentials or {}), **fresh}, other)
        try:
            if version < 0:
                zk.create(path, data, makepath=True)
            else:
                zk.set(path, data, version=version)
            break
        except (NodeExistsError, BadVersionError, NoNodeError):
            continue  # another writer got there between our read and write: read again
    _notify_user(zk, name)


def delete_user(zk, name: str, mechanisms: Iterable[str] = scram.SCRAM_MECHANISMS) -> None:
    """Remove ``name``'s credentials for ``mechanisms``; the node goes when nothing is left in it."""
    path = sec.user_path(name)
    mechanisms = set(mechanisms)
    while True:
        credentials, other, version = _read_user(zk, name)
        if credentials is None or not mechanisms & credentials.keys():
            raise UnknownUser(f"user {name!r} has no {'/'.join(sorted(mechanisms))} credentials to delete")
        left = {m: c for m, c in credentials.items() if m not in mechanisms}
        try:
            if left or other:
                zk.set(path, sec.encode_user(left, other), version=version)
            else:
                zk.delete(path, version=version)
            break
        except (BadVersionError, NoNodeError):
            continue
    _notify_user(zk, name)


def list_users(zk) -> dict[str, list[str]]:
    """Each user with credentials, and their mechanisms."""
    try:
        names = zk.get_children(sec.CONFIG_USERS)
    except NoNodeError:
        return {}
    out = {}
    for name in sorted(names):
        try:
            credentials, _, _ = _read_user(zk, name)
        except ZkcoordError as exc:
            log.warning("skipping %s: %s", name, exc)
            continue
        if credentials:
            out[name] = sorted(credentials)
    return out


def credentials(zk, name: str) -> dict[str, scram.Credential]:
    """``name``'s stored credentials by mechanism, read now: a deleted user
    or a changed password counts from the next login."""
    try:
        stored, _, _ = _read_user(zk, name)
    except sec.InvalidUserName:
        return {}
    except ZkcoordError as exc:
        log.warning("credentials of %r unreadable: %s", name, exc)
        return {}
    except (KazooException, zk.handler.timeout_exception) as exc:  # ZooKeeper unreachable, or too slow
        raise CredentialsUnavailable(f"the credentials of user {name!r} cannot be read from ZooKeeper now: "
                                     f"{type(exc).__name__}") from None
    return stored or {}


def credential(zk, name: str, mechanism: str) -> Optional[scram.Credential]:
    """``name``'s stored credential for ``mechanism`` (SCRAM), or None."""
    return credentials(zk, name).get(mechanism)


def password_credential(zk, name: str) -> Optional[scram.Credential]:
    """The credential a password of ``name`` is checked against (PLAIN, and
    the coordinator's RegisterConsumer credential): the stored SCRAM-SHA-512
    one, else SCRAM-SHA-256's; None for an unknown user."""
    stored = credentials(zk, name)
    return next((stored[m] for m in reversed(scram.SCRAM_MECHANISMS) if m in stored), None)


class CredentialStore:
    """The users' credentials in ZooKeeper, as a process's login checks read
    them (a zkcoord.security.checks.CredentialSource)."""

    def __init__(self, zk):
        self._zk = zk

    def credential(self, name: str, mechanism: str) -> Optional[scram.Credential]:
        return credential(self._zk, name, mechanism)

    def password_credential(self, name: str) -> Optional[scram.Credential]:
        return password_credential(self._zk, name)


# -- ACLs ----------------------------------------------------------------------

def _read_resource(zk, resource: Resource) -> tuple[frozenset, int]:
    try:
        data, stat = zk.get(sec.resource_path(resource))
    except NoNodeError:
        return frozenset(), -1
    return sec.decode_acls(resource, data), stat.version


def _change_acls(zk, resource: Resource, change) -> frozenset:
    path = sec.resource_path(resource)
    while True:
        entries, version = _read_resource(zk, resource)
        new = frozenset(change(entries))
        if new == entries:
            return new
        try:
            if version < 0:
                zk.create(path, sec.encode_acls(new), makepath=True)
            elif new:
                zk.set(path, sec.encode_acls(new), version=version)
            else:
                zk.delete(path, version=version)
            break
        except (NodeExistsError, BadVersionError, NoNodeError):
            continue
    zk.ensure_path(sec.ACL_CHANGES)
    zk.create(sec.ACL_CHANGE_PREFIX, sec.acl_change(resource), sequence=True)
    return new


def add_acls(zk, resource: Resource, entries: Iterable[AclEntry]) -> frozenset:
    entries = frozenset(entries)
    return _change_acls(zk, resource, lambda old: old | entries)


def remove_acls(zk, resource: Resource, entries: Optional[Iterable[AclEntry]] = None) -> frozenset:
    """Remove ``entries`` (all of the resource's, if None)."""
    entries = None if entries is None else frozenset(entries)
    return _change_acls(zk, resource, lambda old: frozenset() if entries is None else old - entries)


def read_acls(zk) -> dict[Resource, frozenset]:
    out = {}
    for kind in RESOURCE_TYPES:
        try:
            names = zk.get_children(f"{sec.ACLS}/{kind}")
        except NoNodeError:
            continue
        for name in names:
            resource = Resource(kind, name)
            try:
                entries, _ = _read_resource(zk, resource)
            except ZkcoordError as exc:
                log.warning("ignoring the ACLs of %s: %s", resource, exc)
                continue
            if entries:
                out[resource] = entries
    return out


def expired_changes(created_ms: dict[str, int], now_ms: float, expiration_ms: int) -> list[str]:
    """The change notifications (name: creation time) older than
    ``expiration_ms`` at ``now_ms``, oldest first."""
    return sorted(name for name, ctime in created_ms.items() if now_ms - ctime > expiration_ms)


def purge_acl_changes(zk, now_ms: float, expiration_ms: int) -> list[str]:
    """Delete the ACL change notifications that have expired (as Kafka's
    ZkNodeChangeNotificationListener does after reading them); what another
    process deleted first is skipped. Returns the names deleted here."""
    created = {}
    for name in zk.get_children(sec.ACL_CHANGES):
        stat = zk.exists(f"{sec.ACL_CHANGES}/{name}")
        if stat is not None:  # None: gone already
            created[name] = stat.ctime
    deleted = []
    for name in expired_changes(created, now_ms, expiration_ms):
        try:
            zk.delete(f"{sec.ACL_CHANGES}/{name}")
            deleted.append(name)
        except NoNodeError:
            pass
    return deleted


class AclCache:
    """The ACLs of ZooKeeper, read again whenever a change notification
    appears (and at start); the notifications older than
    ``change_expiration_ms`` are then deleted. ``acls`` is a consistent
    snapshot to decide with.

    One reload runs at a time, and a notification that arrives during one
    makes it read once more when it ends: two reloads at once could end in
    the wrong order, and the older snapshot, missing the newer change, would
    stay until some later change (a grant not seen, for minutes)."""

    def __init__(self, zk, change_expiration_ms: int, clock: Callable[[], float] = time.time):
        self._zk = zk
        self._lock = threading.Lock()
        self.acls: dict[Resource, frozenset] = {}
        self._stopped = False
        self._change_expiration_ms = change_expiration_ms
        self._clock = clock
        self._reloading = False  # a reload greenlet is running
        self._changed = False  # a notification it has not read yet

    def start(self) -> "AclCache":
        self._zk.ensure_path(sec.ACL_CHANGES)
        self._reload()  # before the first request is decided
        self._zk.ChildrenWatch(sec.ACL_CHANGES, self._on_change, send_event=False)
        return self

    def _on_change(self, _children) -> bool:
        if self._stopped:
            return False
        with self._lock:
            self._changed = True
            if self._reloading:
                return True  # the running reload reads again when it ends
            self._reloading = True
        try:
            # Read off the watch's callback, which must not block on ZooKeeper.
            self._zk.handler.spawn(self._reload_while_changed)
        except BaseException:
            self._reload_ended()  # else no notification would start a reload again
            raise
        return True

    def _reload_while_changed(self) -> None:
        try:
            while True:
                with self._lock:
                    if not self._changed or self._stopped:
                        self._reloading = False
                        return
                    self._changed = False
                try:
                    self._reload()
                except Exception as exc:  # keep the old snapshot; the next notification retries
                    log.warning("could not reload ACLs: %s", exc)
        except BaseException:  # killed (the process stopping): the next notification starts another
            self._reload_ended()
            raise

    def _reload_ended(self) -> None:
        with self._lock:
            self._reloading = False

    def _reload(self) -> None:
        now_ms = self._clock() * 1000  # before reading: what is purged has been read
        acls = read_acls(self._zk)
        with self._lock:
            self.acls = acls
        deleted = purge_acl_changes(self._zk, now_ms, self._change_expiration_ms)
        if deleted:
            log.debug("deleted %d expired ACL change notifications", len(deleted))

    def stop(self) -> None:
        self._stopped = True
