"""Who may look at the console, and at what.

When the cluster is secured (the console's ZooKeeper session has
credentials or TLS) or the operator asks for it, a viewer logs in as one of
the cluster's users (`zkcoord users`: the SCRAM credentials in ZooKeeper),
checked exactly as the brokers and coordinators check a password
(zkcoord.security.checks.LoginChecks: failed logins limited per address
and per user, key derivation off the event loop). With the authorizer on, a
viewer sees what the cluster's ACLs let its principal describe, as Kafka's
tools over the brokers would show it: a group it may Describe, the topics
it may Describe within it; the drills (files of the console's host, no
cluster resource) to those that may Describe the cluster. Without the
authorizer, as with the brokers, everyone logged in sees everything.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

from zkcoord.errors import ZkcoordError
from zkcoord.security import acl
from zkcoord.security.principal import Principal, user


class LoginEnded(ZkcoordError):
    """The logged-in user is no longer one of the cluster's users."""


@dataclasses.dataclass(frozen=True)
class Viewer:
    """One request's viewer: its principal (None: nobody logged in, on a
    console that asks no login) and the ACLs read for the request (None:
    the authorizer is off)."""

    principal: Optional[Principal]
    address: str
    acls: Optional[acl.Acls] = None
    super_users: frozenset = frozenset()

    def may_describe(self, resource: acl.Resource) -> bool:
        if self.acls is None or self.principal is None:
            return True
        return acl.authorize(self.acls, self.principal, acl.DESCRIBE, resource, self.address, self.super_users)

    def sees_group(self, name: str) -> bool:
        return self.may_describe(acl.group(name))

    def sees_topic(self, name: str) -> bool:
        return self.may_describe(acl.topic(name))

    def sees_drills(self) -> bool:
        return self.may_describe(acl.cluster())


class Access:
    """The console's rule of access: ``login_required``, ``logins`` (a
    LoginChecks, needed when it is), and the authorizer's settings."""

    def __init__(self, zk, login_required: bool, logins=None, authorizing: bool = False,
                 super_users: frozenset = frozenset()):
        if login_required and logins is None:
            raise ValueError("a console that asks for logins needs the checks to make")
        self._zk = zk
        self.login_required = login_required
        self._logins = logins
        self.authorizing = authorizing
        self.super_users = super_users

    @property
    def failure_delay_s(self) -> float:
        """How long a refused login waits for its answer."""
        return self._logins.failure_delay_s if self._logins is not None else 0.0

    def check_password(self, address: str, name: str, password: str) -> None:
        """Raise zkcoord.security.scram.AuthenticationFailed unless ``password`` is ``name``'s."""
        self._logins.check_password(address, name, password)

    def viewer(self, name: Optional[str], address: str) -> Viewer:
        """The viewer logged in as ``name`` (None: nobody), its ACLs read
        now; LoginEnded if ``name``'s credentials have been deleted since."""
        from zkcoord.zk.security_store import password_credential, read_acls

        if self.login_required and name is not None and password_credential(self._zk, name) is None:
            raise LoginEnded(f"user {name!r} is no longer one of the cluster's users")
        principal = user(name) if name is not None else None
        # Read for each request, not kept by zk.security_store.AclCache: that one
        # also deletes expired change notifications, and the console writes nothing.
        acls = read_acls(self._zk) if self.authorizing and principal is not None else None
        return Viewer(principal, address, acls, self.super_users)

    def close(self) -> None:
        if self._logins is not None:
            self._logins.close()
