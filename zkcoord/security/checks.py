"""A process's password logins, carried out: the user's stored credential
read, the key derived from the offered password (PBKDF2) in a thread pool
off the event loop, the decisions of zkcoord.security.logins applied.

PBKDF2 takes milliseconds of CPU (hashlib releases the GIL while OpenSSL
runs it), so the loop keeps serving pings while checks run. At most
``max_queued_login_checks`` checks wait for or hold a thread; past that a
login is refused as busy, retriable, instead of queueing without bound.
Logins that offer the same credential while its check runs wait for that
one check, and a successful one is remembered for a while: a failover of
thousands of members with one user costs one derivation.

One :class:`LoginChecks` serves both listeners of a process, so a guesser
has one allowance of failures per address and per user, not one per port.
A login from an address the cluster's own servers or brokers are registered
at (its ``cluster_hosts``) is not refused for its user's failures elsewhere
(zkcoord.security.logins says why).

It reads nothing itself: the process gives it where the users' credentials
are (a :class:`CredentialSource`; the users in ZooKeeper are
zkcoord.zk.security_store.CredentialStore) and where its cluster's hosts are
(zkcoord.zk.cluster_hosts.ClusterHosts), so this layer stays below the one
that reads ZooKeeper.
"""

from __future__ import annotations

import logging
import os
import time
from typing import Callable, Container, Optional, Protocol

import gevent.threadpool

from zkcoord.limits import REFUSED_AUTHENTICATION, abuse_log
from zkcoord.security import scram
from zkcoord.security.config import SecurityConfig
from zkcoord.security.logins import CheckCache, FailureLimiter, check_key

log = logging.getLogger(__name__)


class LoginRefused(scram.AuthenticationFailed):
    """A login refused unchecked: its source address or its user name has
    failed too often lately. The message says which, and when to try again."""


class ChecksBusy(scram.AuthenticationFailed):
    """Too many password checks are waiting already; the same login may succeed a moment later."""

    retriable = True


def unknown_or_wrong(name: str) -> scram.AuthenticationFailed:
    return scram.AuthenticationFailed(f"authentication failed for user {name!r}: unknown user or wrong password")


class CredentialSource(Protocol):
    """Where the users' stored credentials are read, now (a deleted user or a
    changed password counts from the next login). A source that cannot be
    asked raises an AuthenticationFailed that is retriable."""

    def credential(self, name: str, mechanism: str) -> Optional[scram.Credential]:
        """``name``'s credential for the SCRAM ``mechanism``, or None."""

    def password_credential(self, name: str) -> Optional[scram.Credential]:
        """The credential a password of ``name`` is checked against, or None for an unknown user."""


class LoginChecks:
    """``credentials``: where the users' credentials are read;
    ``cluster_hosts``: the addresses of the cluster's own servers and
    brokers; ``metrics``: a zkcoord.metrics.families.LoginMetrics, or None."""

    def __init__(self, credentials: CredentialSource, config: SecurityConfig, cluster_hosts: Container[str],
                 metrics=None, clock: Callable[[], float] = time.monotonic):
        self._credentials = credentials
        self.config = config
        self._metrics = metrics
        self.cluster_hosts = cluster_hosts
        self.limiter = FailureLimiter(config.login_failures_burst, config.login_failure_refill_ms / 1000, clock)
        self.cache = CheckCache(config.login_cache_size, config.login_cache_ms / 1000, clock)
        self._secret = os.urandom(32)  # the cache's keys mean nothing outside this process
        self._pool: Optional[gevent.threadpool.ThreadPool] = None
        self._in_flight: dict = {}  # check key -> the derivation's AsyncResult

    @property
    def failure_delay_s(self) -> float:
        return self.config.failed_authentication_delay_ms / 1000

    def admit(self, address: str, name: Optional[str]) -> None:
        """Raise LoginRefused if ``address`` or ``name`` may not try to log in now."""
        reason = self.limiter.refusal(address, name, own_host=lambda: address in self.cluster_hosts)
        if reason is not None:
            self._count("limited")
            raise LoginRefused(f"login {'as ' + repr(name) + ' ' if name else ''}refused: {reason}")

    def failed(self, address: str, name: Optional[str]) -> None:
        """Count a failed login (a wrong password, an unknown user, a bad SCRAM proof)."""
        self._count("failed")
        for what in self.limiter.failed(address, name):
            abuse_log.log(REFUSED_AUTHENTICATION, logging.WARNING, "too many failed logins %s: refusing "
                          "its logins for now (%d in a row allowed, then one per %g s)", what,
                          self.limiter.burst, self.limiter.refill_s)

    def scram_credential(self, address: str, name: str, mechanism: str) -> Optional[scram.Credential]:
        """``name``'s credential for a SCRAM exchange, once the limiter admits
        the login (SCRAM's server side derives nothing: HMACs only)."""
        self.admit(address, name)
        return self._credentials.credential(name, mechanism)

    def check_password(self, address: str, name: str, password: str) -> None:
        """Raise AuthenticationFailed (LoginRefused, ChecksBusy, CredentialsUnavailable
        among them) unless ``password`` is ``name``'s; blocks this greenlet only."""
        self.admit(address, name)
        stored = self._credentials.password_credential(name)
        key = None if stored is None else check_key(self._secret, name, stored, password)
        if key is not None and self.cache.hit(key):
            self.accepted()
            return
        # An unknown user is refused as busy as a known one would be, so a
        # full queue does not tell who exists.
        self._admit_check(key)
        if key is not None and self._derive(key, stored, password):
            self.cache.add(key)
            self.accepted()
            return
        self.failed(address, name)
        raise unknown_or_wrong(name)

    def _admit_check(self, key: Optional[bytes]) -> None:
        """Raise ChecksBusy unless a check with ``key`` (None: an unknown
        user's) runs already or another may wait for a thread."""
        if key not in self._in_flight and len(self._in_flight) >= self.config.max_queued_login_checks:
            self._count("busy")
            raise ChecksBusy(f"{len(self._in_flight)} password checks are waiting already, the most "
                             f"allowed: try again shortly")

    def _derive(self, key: bytes, stored: scram.Credential, password: str) -> bool:
        pending = self._in_flight.get(key)
        if pending is None:
            if self._pool is None:
                self._pool = gevent.threadpool.ThreadPool(self.config.login_check_threads)
            pending = self._in_flight[key] = self._pool.spawn(scram.password_matches, stored, password)
            pending.rawlink(lambda _: self._in_flight.pop(key, None))
            if self._metrics is not None:
                self._metrics.derived()
        return pending.get()

    def accepted(self) -> None:
        """Count a login that proved its user."""
        self._count("accepted")

    def _count(self, outcome: str) -> None:
        if self._metrics is not None:
            self._metrics.login(outcome)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.kill()
            self._pool = None


class PeerLogins:
    """:class:`LoginChecks` for one connection's source address (what a SASL session asks)."""

    def __init__(self, checks: LoginChecks, address: str):
        self._checks = checks
        self.address = address

    def scram_credential(self, name: str, mechanism: str) -> Optional[scram.Credential]:
        return self._checks.scram_credential(self.address, name, mechanism)

    def check_password(self, name: str, password: str) -> None:
        self._checks.check_password(self.address, name, password)

    def failed(self, name: Optional[str]) -> None:
        self._checks.failed(self.address, name)

    def accepted(self) -> None:
        self._checks.accepted()
