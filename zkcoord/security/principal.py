"""Principals: the identity behind a connection, as Kafka spells it ("User:alice").

Authentication (TLS client certificates, SASL, a RegisterConsumer credential)
produces a :class:`Principal`; authorization (group ACLs, static member
ownership) compares them. A connection nothing authenticated is
:data:`ANONYMOUS`, Kafka's ``User:ANONYMOUS``.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Optional

from zkcoord.errors import ConfigError

USER = "User"


@dataclasses.dataclass(frozen=True, order=True)
class Principal:
    kind: str
    name: str

    def __post_init__(self) -> None:
        if not self.kind or ":" in self.kind:
            raise ConfigError(f"a principal's type must be non-empty and without ':', not {self.kind!r}")
        if not self.name:
            raise ConfigError("a principal's name must not be empty")

    def __str__(self) -> str:
        return f"{self.kind}:{self.name}"

    @classmethod
    def parse(cls, text: str) -> "Principal":
        """``"User:alice"`` -> Principal("User", "alice"); a bare name is a user."""
        kind, sep, name = text.partition(":")
        return cls(kind, name) if sep else cls(USER, text)


ANONYMOUS = Principal(USER, "ANONYMOUS")


def user(name: str) -> Principal:
    return Principal(USER, name)


def from_peer_certificate(peer: Optional[dict[str, Any]]) -> Principal:
    """The principal of a TLS peer from ``SSLSocket.getpeercert()``: the
    subject's common name as a user (Kafka's default mapping takes the whole
    distinguished name; a CN is what operators issue per service), or
    ANONYMOUS when the peer showed no certificate."""
    if not peer:
        return ANONYMOUS
    for rdn in peer.get("subject", ()):
        for key, value in rdn:
            if key == "commonName" and value:
                return user(value)
    return ANONYMOUS
