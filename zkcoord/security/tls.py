"""TLS: the contexts built from its settings (:mod:`zkcoord.security.config`),
and the handshakes.

:func:`server_context` and :func:`client_context` are the only places an
``ssl.SSLContext`` is built; :func:`accept` and :func:`connect` the only
handshakes, each bounded as a whole, and each failure a :class:`TlsError`
saying what was refused and why.
"""

from __future__ import annotations

import os
import socket
import ssl
from typing import Optional

from zkcoord.errors import ConfigError, TlsError
from zkcoord.security.config import CLIENT_AUTH, CLIENT_TLS, PLAIN, TlsConfig, librdkafka_settings
from zkcoord.security.principal import ANONYMOUS, Principal, from_peer_certificate
from zkcoord.security.secrets import check_private

_VERIFY_MODES = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}
# TLS 1.2 is the oldest Kafka's clients still negotiate by default.
MINIMUM_VERSION = ssl.TLSVersion.TLSv1_2


def _load(context: ssl.SSLContext, config: TlsConfig) -> ssl.SSLContext:
    context.minimum_version = MINIMUM_VERSION
    if config.key is not None:
        check_private(config.key, "--tls-key")
    try:
        if config.ca is not None:
            context.load_verify_locations(cafile=config.ca)
        if config.cert is not None:
            context.load_cert_chain(config.cert, config.key)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"cannot load the TLS files (cert {config.cert}, key {config.key}, ca {config.ca}): "
                          f"{exc}") from None
    return context


def server_context(config: TlsConfig) -> Optional[ssl.SSLContext]:
    """The context a listener wraps its connections in (None: plaintext)."""
    if not config.serves:
        return None
    context = _load(ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER), config)
    context.verify_mode = _VERIFY_MODES[config.client_auth]
    return context


def client_context(config: TlsConfig) -> Optional[ssl.SSLContext]:
    """The context a client connects with (None: plaintext): the server's
    certificate must chain to ``ca`` and name the host connected to."""
    if not config.speaks:
        return None
    context = _load(ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT), config)
    context.check_hostname = True
    context.verify_mode = ssl.CERT_REQUIRED
    return context


def describe(exc: BaseException) -> str:
    """An SSL error in words an operator can act on."""
    reason = getattr(exc, "reason", None)
    text = getattr(exc, "verify_message", None) or str(exc)
    if reason in ("WRONG_VERSION_NUMBER", "HTTP_REQUEST", "RECORD_LAYER_FAILURE", "PACKET_LENGTH_TOO_LONG"):
        return f"the peer does not speak TLS ({text})"
    if reason in ("TLSV13_ALERT_CERTIFICATE_REQUIRED", "PEER_DID_NOT_RETURN_A_CERTIFICATE"):
        return f"a client certificate is required and none was shown ({text})"
    if isinstance(exc, ssl.SSLEOFError):
        return f"the peer closed the connection in the handshake; does it speak TLS? ({text})"
    return text


def refusal(exc: BaseException, peer: str) -> TlsError:
    """The TlsError for an SSL error on a connection with ``peer``. A
    refusal (a certificate, a protocol) is for good; an end of stream in the
    middle of a handshake may be a server going away, and retriable."""
    error = TlsError(f"TLS with {peer} failed: {describe(exc)}")
    error.retriable = isinstance(exc, (ssl.SSLEOFError, ssl.SSLZeroReturnError, socket.timeout))
    return error


def connect(sock: socket.socket, context: ssl.SSLContext, host: str, timeout_s: float) -> ssl.SSLSocket:
    """``sock`` (connected to ``host``) wrapped in TLS, handshake done
    within ``timeout_s`` (a client's socket timeout bounds each read, and the
    handshake is a few round trips). Raises TlsError; closes ``sock`` then."""
    peer = "%s:%s" % sock.getpeername()[:2]
    sock.settimeout(timeout_s)
    try:
        wrapped = context.wrap_socket(sock, server_hostname=host)
    except (ssl.SSLError, socket.timeout, ssl.CertificateError) as exc:
        sock.close()
        raise refusal(exc, peer) from None
    except OSError as exc:  # reset mid-handshake: a server going away, or a plaintext one closing on it
        sock.close()
        error = TlsError(f"TLS with {peer} failed: the connection broke during the handshake ({exc}); "
                         "does the server speak TLS?")
        error.retriable = True
        raise error from None
    return wrapped


def accept(sock: socket.socket, context: ssl.SSLContext, timeout_s: float) -> ssl.SSLSocket:
    """A server's side of the handshake on an accepted (gevent) socket,
    within ``timeout_s`` in all (not per read: a client trickling bytes does
    not stretch it). Raises TlsError, having closed the connection."""
    import gevent

    try:
        peer = "%s:%s" % sock.getpeername()[:2]
    except OSError:
        peer = "?"
    sock.settimeout(timeout_s)  # each read too, where no gevent hub runs the deadline
    wrapped = context.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
    try:
        with gevent.Timeout(timeout_s, False):
            wrapped.do_handshake()
            return wrapped
        error = TlsError(f"TLS with {peer} failed: no handshake within {timeout_s:g} s")
    except (ssl.SSLError, socket.timeout) as exc:
        error = refusal(exc, peer)
    except OSError as exc:
        error = TlsError(f"TLS with {peer} failed: the connection broke during the handshake ({exc})")
    wrapped.close()
    raise error


def alert_behind(sock: socket.socket) -> Optional[ssl.SSLError]:
    """After a write on a TLS socket failed (the peer closed): the alert the
    peer sent before it closed, if one waits to be read, else None. TLS 1.3
    refuses a client's certificate after the client's side of the handshake
    is done, so the client may learn why only from this."""
    try:
        sock.settimeout(0.0)
        sock.recv(1)
    except (ssl.SSLEOFError, ssl.SSLZeroReturnError, ssl.SSLWantReadError, ssl.SSLWantWriteError):
        return None
    except ssl.SSLError as alert:
        return alert
    except OSError:
        return None
    return None


def shutdown(sock: socket.socket, how: int) -> None:
    """shutdown(2) on a socket, TLS or not, its TLS left in place: an
    SSLSocket's own shutdown() drops TLS, and what is sent after it would
    leave in clear. Raises OSError as shutdown does."""
    twin = socket.socket(fileno=os.dup(sock.fileno()))  # the same connection; shutdown acts on it, not the fd
    try:
        twin.shutdown(how)
    finally:
        twin.close()


def principal_of(sock: socket.socket) -> Principal:
    """Who the peer of a TLS socket proved to be (ANONYMOUS without a certificate or TLS)."""
    getpeercert = getattr(sock, "getpeercert", None)
    if getpeercert is None:
        return ANONYMOUS
    return from_peer_certificate(getpeercert())


__all__ = ["CLIENT_AUTH", "CLIENT_TLS", "PLAIN", "TlsConfig", "accept", "client_context", "connect", "describe",
           "librdkafka_settings", "principal_of", "refusal", "server_context", "shutdown", "alert_behind"]
