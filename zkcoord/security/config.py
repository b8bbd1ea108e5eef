"""TLS settings, for a listener and for a client: one group, declared once.

One :class:`TlsConfig` describes both ends. A server serves TLS when it has
a certificate (``cert`` and ``key``) and asks clients for one as
``client_auth`` says; a client speaks TLS when it has a CA to verify the
server against (``ca``), and shows a certificate of its own when it has one.
Nothing here imports ssl, so a command declares these options before gevent
patches the process; :mod:`zkcoord.security.tls` builds the contexts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from zkcoord.errors import ConfigError
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


def librdkafka_settings(config: TlsConfig) -> dict[str, str]:
    """The same for a stock client on librdkafka (confluent-kafka): its
    security.protocol and ssl.* properties; nothing for plaintext."""
    if not config.speaks:
        return {}
    settings = {"security.protocol": "SSL", "ssl.ca.location": config.ca,
                "ssl.endpoint.identification.algorithm": "https"}  # the host name checked, as ours check it
    if config.cert is not None:
        settings.update({"ssl.certificate.location": config.cert, "ssl.key.location": config.key})
    return settings



__all__ = ["CLIENT_AUTH", "CLIENT_TLS", "PLAIN", "TlsConfig", "librdkafka_settings"]
