"""The broker's per-connection SASL decisions, without a socket."""

from __future__ import annotations

import base64

import pytest

from zkcoord.broker import sasl
from zkcoord.broker.sasl import SaslSession
from zkcoord.security import scram
from zkcoord.security.principal import ANONYMOUS, user

CREDENTIALS = {m: scram.derive(m, "pw") for m in scram.SCRAM_MECHANISMS}


class Logins:
    """alice's credentials; failures recorded."""

    def __init__(self):
        self.failures = []

    def scram_credential(self, name, mechanism):
        return CREDENTIALS[mechanism] if name == "alice" else None

    def check_password(self, name, password):
        if name != "alice" or not scram.password_matches(CREDENTIALS[scram.SCRAM_SHA_256], password):
            self.failed(name)
            raise scram.AuthenticationFailed(f"authentication failed for user {name!r}")

    def failed(self, name):
        self.failures.append(name)

    def accepted(self):
        pass


def session(mechanisms=scram.MECHANISMS, logins=None):
    return SaslSession(mechanisms, logins or Logins())


def test_plain_after_a_version_1_handshake():
    s = session()
    assert s.handshake("PLAIN", 1) == 0 and not s.raw
    assert s.authenticate(b"\0alice\0pw") == sasl.Step(b"")
    assert s.authenticated and s.principal == user("alice")


def test_a_version_0_handshake_means_bare_tokens_until_done():
    s = session()
    assert s.handshake("PLAIN", 0) == 0 and s.raw
    s.authenticate(b"\0alice\0pw")
    assert not s.raw and s.principal == user("alice")


def test_wrong_password_fails_and_nothing_more_is_accepted():
    s = session()
    s.handshake("PLAIN", 1)
    step = s.authenticate(b"\0alice\0nope")
    assert step.error_code == sasl.SASL_AUTHENTICATION_FAILED and "user 'alice'" in step.error_message
    assert s.principal == ANONYMOUS and not s.authenticated
    assert s.authenticate(b"\0alice\0pw").error_code == sasl.ILLEGAL_SASL_STATE


@pytest.mark.parametrize("mechanism", scram.SCRAM_MECHANISMS)
def test_scram_takes_two_tokens(mechanism):
    import base64
    import hashlib
    import hmac

    s = session()
    assert s.handshake(mechanism, 1) == 0
    first = s.authenticate(b"n,,n=alice,r=abc")
    assert first.error_code == 0
    attrs = dict(part.split("=", 1) for part in first.reply.decode().split(","))
    name = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}[mechanism]
    salted = hashlib.pbkdf2_hmac(name, b"pw", base64.b64decode(attrs["s"]), int(attrs["i"]))
    client_key = hmac.new(salted, b"Client Key", name).digest()
    without_proof = f"c=biws,r={attrs['r']}"
    auth = f"n=alice,r=abc,{first.reply.decode()},{without_proof}".encode()
    signature = hmac.new(hashlib.new(name, client_key).digest(), auth, name).digest()
    proof = base64.b64encode(bytes(a ^ b for a, b in zip(client_key, signature))).decode()
    final = s.authenticate(f"{without_proof},p={proof}".encode())
    assert final.error_code == 0 and final.reply.startswith(b"v=")
    assert s.principal == user("alice")


def test_handshake_refusals():
    s = session(("SCRAM-SHA-512",))
    assert s.handshake("PLAIN", 1) == sasl.UNSUPPORTED_SASL_MECHANISM
    assert s.handshake("SCRAM-SHA-512", 1) == 0
    assert s.handshake("SCRAM-SHA-512", 1) == sasl.ILLEGAL_SASL_STATE
    assert session().authenticate(b"x").error_code == sasl.ILLEGAL_SASL_STATE


def test_a_failed_scram_proof_counts_as_a_failed_login_of_its_user():
    logins = Logins()
    s = session(logins=logins)
    s.handshake("SCRAM-SHA-256", 1)
    first = s.authenticate(b"n,,n=alice,r=abc")
    nonce = dict(part.split("=", 1) for part in first.reply.decode().split(","))["r"]
    proof = base64.b64encode(bytes(32)).decode()
    step = s.authenticate(f"c=biws,r={nonce},p={proof}".encode())
    assert step.error_code == sasl.SASL_AUTHENTICATION_FAILED and "user 'alice'" in step.error_message
    assert logins.failures == ["alice"]
