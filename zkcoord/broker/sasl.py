"""SASL on a broker connection: Kafka's SaslHandshake (v0, then raw tokens;
v1, then SaslAuthenticate requests) and the mechanisms PLAIN, SCRAM-SHA-256
and SCRAM-SHA-512. One :class:`SaslSession` per connection decides; the
server does the I/O. Credentials come from a :class:`Logins` (the process's
checks for the connection's address), so nothing here touches ZooKeeper.
"""

from __future__ import annotations

from typing import NamedTuple, Optional, Protocol

from zkcoord.security import scram
from zkcoord.security.principal import ANONYMOUS, Principal, user

# Kafka's error codes for SASL.
UNSUPPORTED_SASL_MECHANISM = 33
ILLEGAL_SASL_STATE = 34
SASL_AUTHENTICATION_FAILED = 58


class Logins(Protocol):
    """What a session asks of the process's login checks (zkcoord.security.checks.PeerLogins)."""

    def scram_credential(self, name: str, mechanism: str) -> Optional[scram.Credential]:
        """The stored credential (None: unknown user); raises AuthenticationFailed when the login may not try."""

    def check_password(self, name: str, password: str) -> None:
        """Raises AuthenticationFailed unless ``password`` is ``name``'s."""

    def failed(self, name: Optional[str]) -> None:
        """Count a failed login of ``name``."""

    def accepted(self) -> None:
        """Count a SCRAM login that proved its user (a password check counts its own)."""


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

    def __init__(self, mechanisms, logins: Logins):
        self.mechanisms = tuple(mechanisms)
        self._logins = logins
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
            self._scram = scram.ScramServer(mechanism, lambda name: self._logins.scram_credential(name, mechanism))
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
                self._logins.check_password(name, password)  # counts its own failures
                return self._done(name, b"")
            if self._scram.user is None:
                return Step(self._scram.first(token))
            try:
                reply = self._scram.final(token)
            except scram.AuthenticationFailed:
                self._logins.failed(self._scram.user)
                raise
            self._logins.accepted()
            return self._done(self._scram.user, reply)
        except scram.AuthenticationFailed as exc:
            self.mechanism = None  # the connection closes; nothing more is accepted on it
            self.authenticated = False
            return Step(error_code=SASL_AUTHENTICATION_FAILED, error_message=str(exc))

    def _done(self, name: str, reply: bytes) -> Step:
        self.principal = user(name)
        self.authenticated = True
        self.raw = False
        return Step(reply)
