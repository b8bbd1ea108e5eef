"""SCRAM credentials and the server side of SASL PLAIN and SCRAM (RFC 5802,
RFC 7677): pure code, no I/O.

A user's password is never kept: only Kafka's SCRAM credential for each
mechanism (salt, StoredKey, ServerKey, iteration count), in the string form
ZooKeeper-mode Kafka stores under /config/users/<user>. PLAIN is checked by
deriving the StoredKey from the password offered and comparing it with the
stored one in constant time, so one credential serves both mechanisms.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import hashlib
import hmac
import os
from typing import Callable, Optional

from zkcoord.errors import ZkcoordError

SCRAM_SHA_256 = "SCRAM-SHA-256"
SCRAM_SHA_512 = "SCRAM-SHA-512"
PLAIN = "PLAIN"
SCRAM_MECHANISMS = (SCRAM_SHA_256, SCRAM_SHA_512)
MECHANISMS = (PLAIN, *SCRAM_MECHANISMS)
_HASHES = {SCRAM_SHA_256: "sha256", SCRAM_SHA_512: "sha512"}
# Kafka's bounds (ScramMechanism's minIterations and maxIterations) and
# kafka-configs' default. The bound matters: a login's key derivation runs on
# the server's event loop (about 1 ms at 4096 iterations of SHA-256, 2 ms of
# SHA-512; 4 times that at the most).
MIN_ITERATIONS = 4096
DEFAULT_ITERATIONS = 4096
MAX_ITERATIONS = 16384
# The key of an unknown user's made-up salt, made at random when the process
# starts: a salt computable from the name alone (as it was, a hash of it)
# told anyone who computed it that the user does not exist.
_UNKNOWN_SALT_KEY = os.urandom(32)


class AuthenticationFailed(ZkcoordError):
    """A credential did not prove the user (unknown user, wrong password, a
    malformed or out-of-order SASL message). The message says what failed,
    never which secret was expected."""


class CredentialError(ZkcoordError, ValueError):
    """A stored SCRAM credential that cannot be read, or one that cannot be made."""


@dataclasses.dataclass(frozen=True)
class Credential:
    mechanism: str
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    def to_kafka(self) -> str:
        """Kafka's form: ``salt=<b64>,stored_key=<b64>,server_key=<b64>,iterations=<n>``."""
        b64 = lambda data: base64.b64encode(data).decode("ascii")  # noqa: E731
        return (f"salt={b64(self.salt)},stored_key={b64(self.stored_key)},"
                f"server_key={b64(self.server_key)},iterations={self.iterations}")

    @classmethod
    def from_kafka(cls, mechanism: str, text: str) -> "Credential":
        if mechanism not in _HASHES:
            raise CredentialError(f"unknown SCRAM mechanism {mechanism!r} (known: {', '.join(SCRAM_MECHANISMS)})")
        fields = {}
        for part in str(text).split(","):
            key, sep, value = part.partition("=")
            if not sep:
                raise CredentialError(f"{mechanism} credential has a part without '=': {part!r}")
            fields[key] = value
        try:
            salt, stored, server = (base64.b64decode(fields[k], validate=True)
                                    for k in ("salt", "stored_key", "server_key"))
            iterations = int(fields["iterations"])
        except KeyError as exc:
            raise CredentialError(f"{mechanism} credential lacks {exc.args[0]}") from None
        except (ValueError, binascii.Error) as exc:
            raise CredentialError(f"{mechanism} credential is malformed: {exc}") from None
        size = hashlib.new(_HASHES[mechanism]).digest_size
        if len(stored) != size or len(server) != size or not salt:
            raise CredentialError(f"{mechanism} credential has keys of the wrong size or no salt")
        if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
            raise CredentialError(f"{mechanism} credential's iterations {iterations} are outside "
                                  f"{MIN_ITERATIONS}..{MAX_ITERATIONS}")
        return cls(mechanism, salt, stored, server, iterations)


def _hash(mechanism: str) -> str:
    try:
        return _HASHES[mechanism]
    except KeyError:
        raise CredentialError(f"unknown SCRAM mechanism {mechanism!r} "
                              f"(known: {', '.join(SCRAM_MECHANISMS)})") from None


def _hmac(name: str, key: bytes, msg: bytes) -> bytes:
    return hmac.new(key, msg, name).digest()


def _keys(mechanism: str, password: str, salt: bytes, iterations: int) -> tuple[bytes, bytes, bytes]:
    """(ClientKey, StoredKey, ServerKey) of RFC 5802 section 3."""
    name = _hash(mechanism)
    salted = hashlib.pbkdf2_hmac(name, password.encode("utf-8"), salt, iterations)
    client_key = _hmac(name, salted, b"Client Key")
    return client_key, hashlib.new(name, client_key).digest(), _hmac(name, salted, b"Server Key")


def derive(mechanism: str, password: str, iterations: int = DEFAULT_ITERATIONS,
           salt: Optional[bytes] = None) -> Credential:
    """The credential to store for ``password`` (a random salt unless given)."""
    if not password:
        raise CredentialError("a password must not be empty")
    if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
        raise CredentialError(f"iterations must be within {MIN_ITERATIONS}..{MAX_ITERATIONS}, not {iterations}")
    salt = os.urandom(32) if salt is None else salt
    _, stored, server = _keys(mechanism, password, salt, iterations)
    return Credential(mechanism, salt, stored, server, iterations)


def password_matches(credential: Credential, password: str) -> bool:
    """Whether ``password`` is the one ``credential`` was derived from
    (compared in constant time)."""
    _, stored, _ = _keys(credential.mechanism, password, credential.salt, credential.iterations)
    return hmac.compare_digest(stored, credential.stored_key)


def parse_plain(message: bytes) -> tuple[str, str]:
    """(user, password) of a SASL PLAIN message ``[authzid] NUL authcid NUL passwd``
    (RFC 4616); an authzid other than the user itself is refused, as Kafka refuses it."""
    try:
        authzid, user, password = message.decode("utf-8").split("\0")
    except (UnicodeDecodeError, ValueError):
        raise AuthenticationFailed("malformed SASL/PLAIN message: expected authzid, user and password "
                                   "separated by NUL") from None
    if not user or not password:
        raise AuthenticationFailed("SASL/PLAIN message without a user or a password")
    if authzid and authzid != user:
        raise AuthenticationFailed(f"SASL/PLAIN: user {user!r} may not act as {authzid!r}")
    return user, password


# -- SCRAM server ----------------------------------------------------------

def _attributes(text: str, what: str) -> list[tuple[str, str]]:
    out = []
    for part in text.split(","):
        if len(part) < 2 or part[1] != "=":
            raise AuthenticationFailed(f"malformed SCRAM {what}: attribute {part[:20]!r}")
        out.append((part[0], part[2:]))
    return out


def _unescape_name(name: str) -> str:
    # RFC 5802 5.1: ',' and '=' in a name are sent as =2C and =3D; any other '=' is an error.
    if "=" in name.replace("=2C", "").replace("=3D", ""):
        raise AuthenticationFailed("malformed SCRAM user name")
    return name.replace("=2C", ",").replace("=3D", "=")


def _unknown_salt(user: str) -> bytes:
    """The salt an unknown user is answered with: the same for the name each
    time in this process, and not computable without the process's key."""
    return hmac.new(_UNKNOWN_SALT_KEY, user.encode("utf-8"), hashlib.sha256).digest()


class ScramServer:
    """One SCRAM exchange, server side: :meth:`first` answers the client-first
    message, :meth:`final` checks the client's proof and answers with the
    server signature. ``lookup(user)`` gives the user's credential for this
    mechanism, or None. Channel binding is not offered ("n" or "y" only)."""

    def __init__(self, mechanism: str, lookup: Callable[[str], Optional[Credential]],
                 nonce: Callable[[], str] = lambda: os.urandom(24).hex()):
        # A nonce of letters and digits only, as Kafka's: librdkafka 2.0
        # (Debian 12's, under kcat) garbles one with base64's '+' and '/'.
        self.mechanism = mechanism
        self._hash = _hash(mechanism)
        self._lookup = lookup
        self._nonce = nonce
        self.user: Optional[str] = None
        self._credential: Optional[Credential] = None
        self._state = "first"

    def _step(self, expected: str, following: str, message: bytes, what: str) -> str:
        """The text of the client's ``what`` message, due in state ``expected``."""
        if self._state != expected:
            raise AuthenticationFailed(f"SCRAM {what} message out of order")
        self._state = following
        try:
            return message.decode("utf-8")
        except UnicodeDecodeError:
            raise AuthenticationFailed(f"SCRAM {what} message is not UTF-8") from None

    def first(self, message: bytes) -> bytes:
        text = self._step("first", "final", message, "client-first")
        gs2, sep, bare = text.partition(",")
        authzid, sep2, bare = bare.partition(",")
        if not sep or not sep2 or gs2 not in ("n", "y") or (authzid and not authzid.startswith("a=")):
            raise AuthenticationFailed("malformed SCRAM client-first message (channel binding is not offered)")
        attrs = dict(_attributes(bare, "client-first message"))
        if "n" not in attrs or "r" not in attrs or not attrs["r"] or "m" in attrs:
            raise AuthenticationFailed("SCRAM client-first message lacks the user or the nonce")
        user = _unescape_name(attrs["n"])
        if authzid and _unescape_name(authzid[2:]) != user:
            raise AuthenticationFailed(f"SCRAM: user {user!r} may not act as {authzid[2:]!r}")
        credential = self._lookup(user)
        self.user = user
        self._credential = credential
        # An unknown user gets a made-up salt, so the answer does not say who exists.
        salt = credential.salt if credential else _unknown_salt(user)
        iterations = credential.iterations if credential else DEFAULT_ITERATIONS
        self._client_first_bare = bare
        self._gs2 = f"{gs2},{authzid},"
        self._client_nonce = attrs["r"]
        self._nonce_full = attrs["r"] + self._nonce()
        self._server_first = (f"r={self._nonce_full},s={base64.b64encode(salt).decode('ascii')},"
                              f"i={iterations}")
        return self._server_first.encode("utf-8")

    def final(self, message: bytes) -> bytes:
        text = self._step("final", "done", message, "client-final")
        without_proof, sep, proof_part = text.rpartition(",p=")
        if not sep:
            raise AuthenticationFailed("SCRAM client-final message has no proof")
        attrs = dict(_attributes(without_proof, "client-final message"))
        try:
            binding = base64.b64decode(attrs.get("c", ""), validate=True)
            proof = base64.b64decode(proof_part, validate=True)
        except binascii.Error:
            raise AuthenticationFailed("SCRAM client-final message is not valid base64") from None
        if binding != self._gs2.encode("utf-8"):
            raise AuthenticationFailed("SCRAM channel binding does not match the client-first message")
        # librdkafka before 2.6.1 sends its own nonce again in front of the
        # full one (librdkafka#4895); Kafka 3.8.1 to 3.9 accept that, and the
        # stock clients of Debian 12 (kcat, on librdkafka 2.0.2) need it. The
        # server's fresh part must be there either way.
        if attrs.get("r") not in (self._nonce_full, self._client_nonce + self._nonce_full):
            raise AuthenticationFailed("SCRAM nonce does not match")
        credential = self._credential
        if credential is None:
            raise AuthenticationFailed(f"authentication failed for user {self.user!r} with {self.mechanism}: "
                                       "unknown user or wrong password")
        auth_message = f"{self._client_first_bare},{self._server_first},{without_proof}".encode("utf-8")
        signature = _hmac(self._hash, credential.stored_key, auth_message)
        if len(proof) != len(signature):
            raise AuthenticationFailed("SCRAM proof has the wrong length")
        client_key = bytes(a ^ b for a, b in zip(proof, signature))
        if not hmac.compare_digest(hashlib.new(self._hash, client_key).digest(), credential.stored_key):
            raise AuthenticationFailed(f"authentication failed for user {self.user!r} with {self.mechanism}: "
                                       "unknown user or wrong password")
        server_signature = _hmac(self._hash, credential.server_key, auth_message)
        return b"v=" + base64.b64encode(server_signature)

    @property
    def done(self) -> bool:
        return self._state == "done"


# -- SCRAM client ----------------------------------------------------------

def _escape_name(name: str) -> str:
    return name.replace("=", "=3D").replace(",", "=2C")


class ScramClient:
    """One SCRAM exchange, client side (what zkcoord's own clients speak to a
    broker): :meth:`first` is the client-first message, :meth:`final` answers
    the server-first message with the proof, :meth:`verify` checks the
    server's signature, so a server that does not know the password is not
    believed either. No channel binding ("n,,")."""

    def __init__(self, mechanism: str, user: str, password: str,
                 nonce: Callable[[], str] = lambda: os.urandom(24).hex()):
        self.mechanism = mechanism
        self._hash = _hash(mechanism)
        self._password = password
        self._nonce = nonce()
        self._client_first_bare = f"n={_escape_name(user)},r={self._nonce}"
        self._server_signature: Optional[bytes] = None

    def first(self) -> bytes:
        return f"n,,{self._client_first_bare}".encode("utf-8")

    def final(self, server_first: bytes) -> bytes:
        try:
            text = server_first.decode("utf-8")
            attrs = dict(_attributes(text, "server-first message"))
            salt = base64.b64decode(attrs["s"], validate=True)
            iterations = int(attrs["i"])
            nonce = attrs["r"]
        except (UnicodeDecodeError, KeyError, ValueError, binascii.Error):
            raise AuthenticationFailed("malformed SCRAM server-first message") from None
        if not nonce.startswith(self._nonce) or nonce == self._nonce:
            raise AuthenticationFailed("SCRAM server nonce does not extend ours")
        if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
            raise AuthenticationFailed(f"SCRAM server asks for {iterations} iterations, outside "
                                       f"{MIN_ITERATIONS}..{MAX_ITERATIONS}")
        client_key, stored_key, server_key = _keys(self.mechanism, self._password, salt, iterations)
        without_proof = f"c={base64.b64encode(b'n,,').decode('ascii')},r={nonce}"
        auth_message = f"{self._client_first_bare},{text},{without_proof}".encode("utf-8")
        signature = _hmac(self._hash, stored_key, auth_message)
        proof = bytes(a ^ b for a, b in zip(client_key, signature))
        self._server_signature = _hmac(self._hash, server_key, auth_message)
        return f"{without_proof},p={base64.b64encode(proof).decode('ascii')}".encode("utf-8")

    def verify(self, server_final: bytes) -> None:
        """Raise AuthenticationFailed unless ``server_final`` proves the server knew our credential."""
        text = server_final.decode("utf-8", "replace")
        if not text.startswith("v=") or self._server_signature is None:
            raise AuthenticationFailed(f"SCRAM server-final message refuses or is malformed: {text[:80]!r}")
        try:
            signature = base64.b64decode(text[2:], validate=True)
        except binascii.Error:
            raise AuthenticationFailed("SCRAM server signature is not valid base64") from None
        if not hmac.compare_digest(signature, self._server_signature):
            raise AuthenticationFailed("SCRAM server signature does not match: the server does not know "
                                       "this credential")
