"""The source's SASL login with the brokers, and the refusals it may meet.

The options name the user and where its password is; the driver reads the
password each time it plans (:meth:`~zkcoord.spark.options.SaslOptions.login`),
and every planned task carries the :class:`Login` to its executor inside the
task's serialized bytes, so executors need neither the password file nor the
variable. The password is never an option, so it shows in no plan, and never
in a repr. Every connection the source opens to a broker, on the driver or
on an executor, is opened here.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass, field
from typing import Optional

from zkcoord.fetch.connection import (
    BrokerAuthenticationError, BrokerConnection, PartitionError, PlainWithoutTlsRefused,
)
from zkcoord.fetch.cluster import TOPIC_AUTHORIZATION_FAILED
from zkcoord.fetch.isolation import READ_UNCOMMITTED
from zkcoord.spark.errors import AuthenticationError, TopicAuthorizationError


@dataclass(frozen=True)
class Login:
    """A user, its password and whether SASL/PLAIN may send it without TLS."""

    user: str
    password: str = field(repr=False)
    plain_without_tls: bool = False


def open_broker(address: str, login: Optional[Login], *, client_id: str, timeout_s: float,
                tls: Optional[ssl.SSLContext], isolation_level: str = READ_UNCOMMITTED) -> BrokerConnection:
    """A connection to ``address``, logged in as ``login`` (None: anonymous),
    that reads at ``isolation_level``. A refused login is an
    AuthenticationError, which no retry helps: the callers retry a
    BrokerConnectionError."""
    if login is None:
        return BrokerConnection(address, client_id=client_id, timeout_s=timeout_s, tls=tls,
                                isolation_level=isolation_level)
    try:
        return BrokerConnection(address, client_id=client_id, timeout_s=timeout_s, tls=tls,
                                credential=(login.user, login.password),
                                plain_without_tls=login.plain_without_tls, isolation_level=isolation_level)
    except PlainWithoutTlsRefused as exc:
        raise AuthenticationError(f"SASL authentication as user {login.user!r}: {exc}; the option "
                                  "ssl.ca.location gives TLS, sasl.passwordWithoutTls=true allows it") from None
    except BrokerAuthenticationError as exc:
        raise AuthenticationError(f"SASL authentication as user {login.user!r} failed: {exc}") from None


def refusal(exc: PartitionError, topic: str, partition: int, login: Optional[Login], operation: str,
            address: str) -> Optional[TopicAuthorizationError]:
    """The error to raise for a partition error that is an ACL's refusal, or None."""
    if exc.code != TOPIC_AUTHORIZATION_FAILED:
        return None
    return topic_refused(f"{topic}-{partition}", topic, login, operation, f"broker {address}")


def topic_refused(what: str, topic: str, login: Optional[Login], operation: str,
                  who_answered: str) -> TopicAuthorizationError:
    """The error for ``topic`` refused to ``login`` (TOPIC_AUTHORIZATION_FAILED)."""
    who = f"User:{login.user}" if login else "the source's principal (no sasl.username: its TLS certificate's, " \
                                           "or User:ANONYMOUS)"
    return TopicAuthorizationError(
        f"{what}: {who} is not authorized to {operation} topic {topic!r} ({who_answered} answered "
        f"TOPIC_AUTHORIZATION_FAILED, Kafka error {TOPIC_AUTHORIZATION_FAILED}); an ACL must allow it")
