"""Decisions about password logins, without I/O: a limit on failed logins
per source address and per user name (:class:`FailureLimiter`), and a short
memory of successful password checks (:class:`CheckCache`) keyed by
:func:`check_key`. zkcoord.security.checks carries them out.

A failed login costs its sender a token of a bucket, one for its address and
one for the user it named; a bucket refills one token per interval up to its
burst, and while either of a login's buckets is empty the login is refused
without a check. A login from the cluster's own hosts is refused for its
address's bucket only: there the servers log in as their own user (a
broker's bridge registering stock members, a coordinator asking for log
ends), and a guesser elsewhere who empties that user's bucket must not lock
them out. A successful check is remembered under a keyed hash of the user,
the stored credential it matched and the password offered, so a changed or
deleted credential is never matched again and no password is kept.
"""

from __future__ import annotations

import hashlib
import hmac
from collections import OrderedDict
from typing import Callable, Optional

from zkcoord.security.scram import Credential

# Buckets kept at most (the source addresses and user names with recent
# failures); beyond it the oldest are forgotten, so names made up by the
# million cost memory in proportion to this, not to them.
MAX_TRACKED = 100_000
# The longest user name a bucket is kept under: a valid name has at most 255
# characters (zkcoord.zk.layout.security), so a longer one is cut to this
# length and stays distinct from every valid name; the buckets then cost at
# most MAX_TRACKED names of this length, not whatever a login frame can carry.
MAX_NAME = 256


class FailureLimiter:
    """Token buckets of failed logins: ``burst`` failures in a row per
    address and per user name, then one more per ``refill_s``."""

    def __init__(self, burst: int, refill_s: float, clock: Callable[[], float]):
        self.burst = burst
        self.refill_s = refill_s
        self._clock = clock
        # ("address"|"user", name) -> (tokens, when counted); oldest change first
        self._buckets: OrderedDict[tuple[str, str], tuple[float, float]] = OrderedDict()

    def _tokens(self, key: tuple[str, str], now: float) -> float:
        tokens, at = self._buckets.get(key, (self.burst, now))
        return min(float(self.burst), tokens + (now - at) / self.refill_s)

    def refusal(self, address: str, user: Optional[str],
                own_host: Callable[[], bool] = lambda: False) -> Optional[str]:
        """Why a login from ``address`` as ``user`` is refused now, or None: it may be checked.

        ``own_host`` says (asked only when ``user``'s bucket is empty) whether
        ``address`` is one of the cluster's own servers or brokers: then the
        user's failures elsewhere do not refuse it, its address's own do.
        Whether a login is waived so depends on where it comes from, never on
        the password it offers: accepting a good password before the limit
        would tell a limited guesser which of its guesses is right, and so
        unlimit the guessing of exactly the credentials in use, the servers'
        own (a super user's) first. A guesser on a server's host is limited
        by that address's allowance, as any one address is."""
        now = self._clock()
        for key in self._keys(address, user):
            tokens = self._tokens(key, now)
            if tokens < 1:
                if key[0] == "user" and own_host():
                    continue
                wait = (1 - tokens) * self.refill_s
                return (f"too many failed logins {_describe(key)} ({self.burst} allowed in a row, then one "
                        f"per {self.refill_s:g} s): try again in {wait:.1f} s")
        return None

    def failed(self, address: str, user: Optional[str]) -> list[str]:
        """Count a failed login; what it has just used up (described: 'from address 10.0.0.7')."""
        now = self._clock()
        exhausted = []
        for key in self._keys(address, user):
            # Failures of logins admitted at once (checked only after all were
            # admitted) go below zero, but not far: a user locked out by a
            # stranger's burst gets in again within burst + 1 refills.
            tokens = max(self._tokens(key, now) - 1, -float(self.burst))
            self._buckets[key] = (tokens, now)
            self._buckets.move_to_end(key)
            if tokens < 1 <= tokens + 1:
                exhausted.append(_describe(key))
        while len(self._buckets) > MAX_TRACKED:
            self._buckets.popitem(last=False)
        return exhausted

    def tracked(self) -> int:
        return len(self._buckets)

    @staticmethod
    def _keys(address: str, user: Optional[str]) -> list[tuple[str, str]]:
        return [("address", address)] + ([("user", user[:MAX_NAME])] if user else [])


def _describe(key: tuple[str, str]) -> str:
    kind, name = key
    return f"from address {name}" if kind == "address" else f"for user {name!r}"


def check_key(secret: bytes, user: str, credential: Credential, password: str) -> bytes:
    """What a successful check of ``password`` against ``user``'s stored
    ``credential`` is remembered by: an HMAC under the process's ``secret``
    of all of them, so it changes with the credential and reveals no password."""
    mac = hmac.new(secret, digestmod=hashlib.sha256)
    for part in (user.encode("utf-8"), credential.mechanism.encode("ascii"), credential.salt,
                 str(credential.iterations).encode("ascii"), credential.stored_key, password.encode("utf-8")):
        mac.update(len(part).to_bytes(4, "big"))
        mac.update(part)
    return mac.digest()


class CheckCache:
    """Successful checks, by :func:`check_key`, each for ``ttl_s`` from when
    it was made; at most ``size`` of them (the least recently used go)."""

    def __init__(self, size: int, ttl_s: float, clock: Callable[[], float]):
        self.size = size
        self.ttl_s = ttl_s
        self._clock = clock
        self._expiry: OrderedDict[bytes, float] = OrderedDict()

    def hit(self, key: bytes) -> bool:
        expires = self._expiry.get(key)
        if expires is None:
            return False
        if self._clock() >= expires:
            del self._expiry[key]
            return False
        self._expiry.move_to_end(key)
        return True

    def add(self, key: bytes) -> None:
        if self.ttl_s <= 0:
            return
        self._expiry[key] = self._clock() + self.ttl_s
        self._expiry.move_to_end(key)
        while len(self._expiry) > self.size:
            self._expiry.popitem(last=False)

    def __len__(self) -> int:
        return len(self._expiry)
