"""A group member's settings: what it subscribes to and its terms with the coordinator.

:class:`MemberConfig` is what the membership sends the coordinator when it
registers; the consumer's :class:`~zkcoord.consumer.config.ConsumerConfig`
adds what only its application side uses. One object travels from the
Consumer (or the broker's bridge) to its membership, so a setting is
defined, checked and documented once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from zkcoord import wire
from zkcoord.errors import ConfigError
from zkcoord.patterns import PatternError, check_pattern
from zkcoord.security.config import TlsConfig
from zkcoord.settings import check, setting


def _fits_client_id(client_id: str) -> None:
    if wire.clipped_client_id(client_id) != client_id:
        raise ConfigError(f"client_id must be at most {wire.MAX_CLIENT_ID_BYTES} bytes of UTF-8")


@dataclass(frozen=True)
class MemberConfig:
    """A member's subscription and its terms with the coordinator (seed 001's RegisterConsumer)."""

    group: str = setting(help="the consumer group's id", non_empty=True)
    topics: tuple[str, ...] = setting((), "a topic to consume (repeatable)", flag="--topic")
    pattern: Optional[str] = setting(None, "a regular expression over topic names to consume", non_empty=True)
    consumer_id: Optional[str] = setting(None, "a fixed member id, which makes the member static: its "
                                               "partitions wait for it through a restart", non_empty=True)
    session_timeout_ms: int = setting(10_000, "how long the coordinator waits for an answer before it "
                                              "drops the member", minimum=1)
    max_poll_interval_ms: int = setting(300_000, "longest the application may go between two poll() calls",
                                        minimum=1)
    auto_commit: bool = setting(True, "report the offsets of records the application has finished with "
                                      "(those of earlier polls), without commit()")
    auto_offset_reset: str = setting(wire.SMALLEST, "where to start a partition that has no committed offset",
                                     choices=wire.OFFSET_RESETS, flag="--offset-reset")
    assignment_strategies: tuple[str, ...] = setting(("range",), "an assignment strategy, in order of "
                                                                "preference (repeatable)", flag="--strategy",
                                                     non_empty=True)
    tls: TlsConfig = setting(help="TLS to the servers and brokers (with a CA to verify them; a certificate "
                                  "of its own for mutual TLS)", factory=TlsConfig, cli=False)
    # A credential for the coordinator (RegisterConsumer version 3), as `zkcoord users` stored it.
    user: Optional[str] = setting(None, "the user to authenticate to the coordinator as", non_empty=True)
    password: Optional[str] = setting(None, "the user's password", non_empty=True, cli=False, secret=True)
    password_without_tls: bool = setting(False, "send the password where there is no TLS to hide it: in "
                                                "RegisterConsumer to the coordinator, and with SASL/PLAIN to a "
                                                "broker that offers nothing stronger (by default refused)")
    client_id: str = setting("zkcoord-consumer", "the client id operators see for this member (Kafka's "
                                                 "client.id), at most 255 bytes", validate=_fits_client_id)
    # What the member is, told to the coordinator for operators (wire.CLIENT_KINDS).
    client_kind: str = setting(wire.THIN, "what kind of client the member is", choices=tuple(wire.CLIENT_KINDS),
                               cli=False)
    on_behalf_of: Optional[str] = setting(None, "the principal a broker registers a stock client for "
                                                "(User:bob); its user must be a super user", non_empty=True,
                                          cli=False)

    def __post_init__(self) -> None:
        check(self)
        if not self.topics and not self.pattern:
            raise ConfigError("subscribe to topics or to a pattern")
        if self.pattern:
            try:
                check_pattern(self.pattern)
            except PatternError as exc:
                raise ConfigError(str(exc)) from None
        if (self.user is None) != (self.password is None):
            raise ConfigError("a credential needs both a user and a password")

    @property
    def is_static(self) -> bool:
        return self.consumer_id is not None
