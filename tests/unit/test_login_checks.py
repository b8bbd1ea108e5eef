"""LoginChecks over a credential source in memory: what a full queue of
password checks answers, for a known user and an unknown one alike; the
servers' own hosts log in while a guesser elsewhere has used up their user's
allowance."""

from __future__ import annotations

import threading
import time

import gevent
import pytest

from zkcoord.security import scram
from zkcoord.security.checks import ChecksBusy, LoginChecks, LoginRefused
from zkcoord.security.config import SecurityConfig

KNOWN = "alice"


class Users:
    """A CredentialSource of alice's credential, nobody else's."""

    def __init__(self):
        self.stored = {KNOWN: scram.derive(scram.SCRAM_SHA_512, "secret")}

    def credential(self, name, mechanism):
        return self.stored.get(name) if mechanism == scram.SCRAM_SHA_512 else None

    def password_credential(self, name):
        return self.stored.get(name)


def test_a_full_queue_refuses_an_unknown_user_as_busy_as_a_known_one(monkeypatch):
    release = threading.Event()
    derive = scram.password_matches
    monkeypatch.setattr(scram, "password_matches", lambda *args: release.wait(10) and derive(*args))
    checks = LoginChecks(Users(), SecurityConfig(max_queued_login_checks=1), cluster_hosts=frozenset())
    try:
        holder = gevent.spawn(checks.check_password, "10.0.0.1", KNOWN, "secret")
        deadline = time.monotonic() + 5
        while not checks._in_flight:
            assert time.monotonic() < deadline, "the first check never started"
            gevent.sleep(0.01)
        with pytest.raises(ChecksBusy):
            checks.check_password("10.0.0.2", KNOWN, "other")
        with pytest.raises(ChecksBusy):
            checks.check_password("10.0.0.3", "nobody", "other")
        release.set()
        holder.get(timeout=10)  # the held check itself succeeds
    finally:
        release.set()
        checks.close()


def test_the_clusters_own_hosts_log_in_as_a_user_a_guesser_elsewhere_used_up():
    checks = LoginChecks(Users(), SecurityConfig(login_failures_burst=3), cluster_hosts={"10.0.0.1"})
    try:
        for n in range(6):
            with pytest.raises(scram.AuthenticationFailed):
                checks.check_password(f"10.0.0.{7 + n % 2}", KNOWN, f"guess-{n}")
        with pytest.raises(LoginRefused, match=f"too many failed logins for user '{KNOWN}'"):
            checks.check_password("10.0.0.6", KNOWN, "secret")
        checks.check_password("10.0.0.1", KNOWN, "secret")  # a server's own: checked, and accepted
        with pytest.raises(scram.AuthenticationFailed, match="unknown user or wrong password"):
            checks.check_password("10.0.0.1", KNOWN, "guess")  # checked, not waved through
    finally:
        checks.close()
