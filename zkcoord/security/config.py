"""Security settings, each group declared once: TLS (:class:`TlsConfig`) and
authentication and authorization (:class:`SecurityConfig`).

One :class:`TlsConfig` describes both ends. A server serves TLS when it has
a certificate (``cert`` and ``key``) and asks clients for one as
``client_auth`` says; a client speaks TLS when it has a CA to verify the
server against (``ca``), and shows a certificate of its own when it has one.
Nothing here imports ssl, so a command declares these options before gevent
patches the process; :mod:`zkcoord.security.tls` builds the contexts.

:class:`SecurityConfig` holds what a server (its coordinator and its broker)
and a standalone broker share: the SASL mechanisms, whether authentication is
required, the authorizer and its super users, and the bridge's credential.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from zkcoord.errors import ConfigError
from zkcoord.security import scram
from zkcoord.security.principal import Principal
from zkcoord.settings import check, setting

CLIENT_AUTH = ("none", "requested", "required")
# The settings a client has (the rest are a server's).
CLIENT_TLS = ("cert", "key", "ca")


@dataclass(frozen=True)
class TlsConfig:
    """TLS for a listener (with ``cert``) or a client (with ``ca``)."""

    cert: Optional[str] = setting(None, "certificate chain (PEM) this end shows; a server serves TLS with it",
                                  flag="--tls-cert", non_empty=True)
    key: Optional[str] = setting(None, "private key (unencrypted PEM) of --tls-cert", flag="--tls-key",
                                 non_empty=True)
    ca: Optional[str] = setting(None, "CA certificates (PEM) the other end's certificate must chain to; "
                                      "a client speaks TLS with it", flag="--tls-ca", non_empty=True)
    client_auth: str = setting("none", "a server's demand for client certificates: none, requested (checked "
                                       "when shown) or required", choices=CLIENT_AUTH, flag="--tls-client-auth")
    handshake_timeout_ms: int = setting(10_000, "longest a TLS handshake may take, from connection to done",
                                        minimum=1, flag="--tls-handshake-timeout-ms")

    def __post_init__(self) -> None:
        check(self)
        if (self.cert is None) != (self.key is None):
            raise ConfigError("--tls-cert and --tls-key go together: a certificate is of no use without its key")
        if self.client_auth != "none" and self.ca is None:
            raise ConfigError(f"--tls-client-auth {self.client_auth} needs --tls-ca to check client certificates "
                              "against")

    @property
    def serves(self) -> bool:
        """Whether a server with these settings listens with TLS."""
        return self.cert is not None

    @property
    def speaks(self) -> bool:
        """Whether a client with these settings connects with TLS."""
        return self.ca is not None

    @property
    def handshake_timeout_s(self) -> float:
        return self.handshake_timeout_ms / 1000.0


PLAIN = TlsConfig()


# What a stock client on librdkafka logs in with: the strongest mechanism a broker offers.
LIBRDKAFKA_SASL_MECHANISM = scram.SCRAM_SHA_512


def librdkafka_settings(config: TlsConfig, user: Optional[str] = None,
                        password: Optional[str] = None) -> dict[str, str]:
    """The same for a stock client on librdkafka (confluent-kafka): its
    security.protocol, ssl.* and (with a credential) sasl.* properties;
    nothing for plaintext without a credential."""
    if (user is None) != (password is None):
        raise ConfigError("a credential needs both a user and a password")
    settings: dict[str, str] = {}
    if config.speaks:
        settings = {"security.protocol": "SSL", "ssl.ca.location": config.ca,
                    "ssl.endpoint.identification.algorithm": "https"}  # the host name checked, as ours check it
        if config.cert is not None:
            settings.update({"ssl.certificate.location": config.cert, "ssl.key.location": config.key})
    if user is not None:
        settings.update({"security.protocol": "SASL_SSL" if config.speaks else "SASL_PLAINTEXT",
                         "sasl.mechanism": LIBRDKAFKA_SASL_MECHANISM, "sasl.username": user,
                         "sasl.password": password})
    return settings



def _principals(values) -> None:
    for value in values:
        if ":" not in value:
            raise ConfigError(f"super_users: {value!r} is not TYPE:NAME (User:admin)")
        Principal.parse(value)


@dataclass(frozen=True)
class SecurityConfig:
    sasl_mechanisms: tuple[str, ...] = setting((), "a SASL mechanism the broker offers (repeatable; "
                                                   "none: no SASL, or all when authentication is "
                                                   "required)",
                                               choices=scram.MECHANISMS, flag="--sasl-mechanism")
    authentication_required: bool = setting(False, "refuse every request of a client that has not "
                                                   "authenticated (broker: SASL; coordinator: a credential "
                                                   "in RegisterConsumer)")
    authorizer: str = setting("off", "off: everyone may do everything; on: only what an ACL in "
                                     "ZooKeeper (zkcoord acls) allows, or a super user",
                              choices=("off", "on"))
    super_users: tuple[str, ...] = setting((), "a principal (User:admin) the authorizer lets do anything "
                                               "(repeatable)", flag="--super-user", validate=_principals)
    # Kafka's ZkNodeChangeNotificationListener's changeExpirationMs.
    acl_change_expiration_ms: int = setting(15 * 60 * 1000, "with the authorizer on: ACL change notifications "
                                                            "older than this are deleted when changes are read",
                                            minimum=1)

    # The broker's own credential with the coordinators: it registers each stock
    # client's member on behalf of the principal that client authenticated as.
    bridge_user: Optional[str] = setting(None, "the server's own user (a super user): its broker registers "
                                               "stock clients' members with it, on their behalf, and its "
                                               "coordinators ask brokers for log ends with it", non_empty=True)
    bridge_password: Optional[str] = setting(None, "bridge_user's password", non_empty=True, cli=False,
                                             secret=True)
    bridge_password_without_tls: bool = setting(False, "let bridge_user's password cross connections without "
                                                       "TLS: the bridge's registrations at the coordinators "
                                                       "carry it (by default it needs --tls-ca)")

    # Logins (zkcoord.security.logins decides, zkcoord.security.checks acts).
    # Kafka's connection.failed.authentication.delay.ms.
    failed_authentication_delay_ms: int = setting(
        100, "a refused login is answered this long after it was decided, so that a password guesser cannot "
             "probe fast", minimum=0)
    login_failures_burst: int = setting(
        10, "failed logins one source address, and one user name, may have in a row; then its logins are "
            "refused unchecked until its allowance refills", minimum=1)
    login_failure_refill_ms: int = setting(1000, "after the burst, one more failed login is allowed every "
                                                 "this long", minimum=1)
    login_check_threads: int = setting(2, "threads that derive keys from offered passwords (PBKDF2), off the "
                                          "event loop", minimum=1)
    max_queued_login_checks: int = setting(
        64, "password checks waiting for or in a thread at most; more are refused as busy (retriable)",
        minimum=1)
    login_cache_ms: int = setting(
        30_000, "a successful password check is remembered this long (keyed by the stored credential and a "
                "keyed hash of the password, never the password), so that many logins with one credential "
                "cost one key derivation (0: not remembered)", minimum=0)
    login_cache_size: int = setting(4096, "successful password checks remembered at most", minimum=1)

    def __post_init__(self) -> None:
        check(self)
        if (self.bridge_user is None) != (self.bridge_password is None):
            raise ConfigError("the bridge's credential needs both a user and a password")
        if self.authentication_required and self.sasl_mechanisms == ():
            # Only the broker reads sasl_mechanisms; the coordinator checks its
            # credential whatever they are, so this is no refusal but a default.
            object.__setattr__(self, "sasl_mechanisms", scram.MECHANISMS)

    @property
    def own_credential(self) -> Optional[tuple[str, str]]:
        """(user, password) the server speaks to brokers and coordinators with
        (the bridge's user: its broker's stock members, its coordinators'
        questions of log ends), or None: anonymous."""
        return (self.bridge_user, self.bridge_password) if self.bridge_user else None

    def refuse_bridge_password_without_tls(self, tls: TlsConfig) -> None:
        """Raise PasswordWithoutTls if the bridge's registrations, under these
        client TLS settings, would carry its password readable unallowed."""
        from zkcoord.security.secrets import refuse_password_without_tls

        refuse_password_without_tls(self.bridge_user, tls.speaks, self.bridge_password_without_tls,
                                    "the bridge's connections to the coordinators", "--bridge-password-without-tls")

    @property
    def authorizing(self) -> bool:
        return self.authorizer == "on"

    @property
    def super_principals(self) -> frozenset:
        return frozenset(Principal.parse(p) for p in self.super_users)


def add_options(parser) -> None:
    """The security options of a command that runs a broker or a server."""
    from zkcoord import settings

    settings.add_options(parser, SecurityConfig)
    parser.add_argument("--bridge-password-file", default=None, metavar="PATH",
                        help="file whose first line is --bridge-user's password "
                             "(default: $ZKCOORD_BRIDGE_PASSWORD)")


def from_args(args) -> SecurityConfig:
    from zkcoord import settings
    from zkcoord.security.secrets import BRIDGE_PASSWORD_ENV, password_for

    password = password_for(getattr(args, "SecurityConfig.bridge_user", None), args.bridge_password_file,
                            "--bridge-user", "--bridge-password-file", BRIDGE_PASSWORD_ENV)
    return settings.from_args(SecurityConfig, args, bridge_password=password)
