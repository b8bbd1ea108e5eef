"""SASL on a broker connection: Kafka's SaslHandshake (v0, then raw tokens;
v1, then SaslAuthenticate requests) and the mechanisms PLAIN, SCRAM-SHA-256
and SCRAM-SHA-512. One :class:`SaslSession` per connection decides; the
server does the I/O. Credentials come from ``lookup(user, mechanism)`` (a
stored SCRAM credential or None) and ``check_password(user, password)``
(raises AuthenticationFailed), so nothing here touches ZooKeeper.
"""

from __future__ import annotations

from typing import Callable, NamedTuple, Optional

from zkcoord.security import scram
from zkcoord.security.principal import ANONYMOUS, Principal, user

# Kafka's error codes for SASL.
UNSUPPORTED_SASL_MECHANISM = 33
ILLEGAL_SASL_STATE = 34
SASL_AUTHENTICATION_FAILED = 58
# Kafka's connection.failed.authentication.delay.ms default: how long a refused
# connection stays open after its answer.
FAILED_AUTHENTICATION_DELAY_S = 0.1


class Step(NamedTuple):
    """The outcome of one token: the bytes to answer with, or an error (code,
    message) after which the connection is closed."""

    reply: bytes = b""
    error_code: int = 0
    error_message: Optional[str] = None


class SaslSession:
    """The SASL state of one connection.

    ``principal`` is ANONYMOUS until an exchange succeeds; ``raw`` says that
    the next frame is a bare token (after a version 0 handshake)."""

    def __init__(self, mechanisms, lookup: Callable[[str, str], Optional[scram.Credential]],
                 check_password: Callable[[str, str], None]):
        self.mechanisms = tuple(mechanisms)
        self._lookup = lookup
        self._check_password = check_password
        self.mechanism: Optional[str] = None
        self.principal: Principal = ANONYMOUS
        self.authenticated = False
        self.raw = False
        self._scram: Optional[scram.ScramServer] = None

    def handshake(self, mechanism: str, version: int) -> int:
        """The error code for a SaslHandshake naming ``mechanism``."""
        if self.authenticated or self.mechanism is not None:
            return ILLEGAL_SASL_STATE
        if mechanism not in self.mechanisms:
            return UNSUPPORTED_SASL_MECHANISM
        self.mechanism = mechanism
        self.raw = version == 0
        if mechanism in scram.SCRAM_MECHANISMS:
            self._scram = scram.ScramServer(mechanism, lambda name: self._lookup(name, mechanism))
        return 0

    def authenticate(self, token: bytes) -> Step:
        """One token of the exchange the handshake chose."""
        if self.mechanism is None or self.authenticated:
            return Step(error_code=ILLEGAL_SASL_STATE,
                        error_message="SaslAuthenticate " + ("after authentication succeeded" if self.authenticated
                                                             else "before a SaslHandshake chose a mechanism"))
        try:
            if self._scram is None:
                name, password = scram.parse_plain(token)
                self._check_password(name, password)
                return self._done(name, b"")
            if self._scram.user is None:
                return Step(self._scram.first(token))
            return self._done(self._scram.user, self._scram.final(token))
        except scram.AuthenticationFailed as exc:
            self.mechanism = None  # the connection closes; nothing more is accepted on it
            self.authenticated = False
            return Step(error_code=SASL_AUTHENTICATION_FAILED, error_message=str(exc))

    def _done(self, name: str, reply: bytes) -> Step:
        self.principal = user(name)
        self.authenticated = True
        self.raw = False
        return Step(reply)
