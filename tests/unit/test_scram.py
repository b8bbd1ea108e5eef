"""SCRAM and PLAIN, server side, against RFC 7677's published exchange and
Kafka's stored-credential form."""

from __future__ import annotations

import base64
import hashlib

import pytest

from zkcoord.security import scram
from zkcoord.security.scram import AuthenticationFailed, Credential, CredentialError, ScramServer

# RFC 7677 section 3: user "user", password "pencil".
SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
CLIENT_FIRST = b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
SERVER_NONCE = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
SERVER_FIRST = b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
CLIENT_FINAL = (b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
SERVER_FINAL = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="


def rfc_server(password="pencil"):
    credential = scram.derive(scram.SCRAM_SHA_256, password, 4096, SALT)
    return ScramServer(scram.SCRAM_SHA_256, {"user": credential}.get, nonce=lambda: SERVER_NONCE)


def test_rfc7677_exchange():
    server = rfc_server()
    assert server.first(CLIENT_FIRST) == SERVER_FIRST
    assert server.final(CLIENT_FINAL) == SERVER_FINAL
    assert server.user == "user" and server.done


def test_wrong_password_fails_with_the_user_named():
    server = rfc_server("not-pencil")
    server.first(CLIENT_FIRST)
    with pytest.raises(AuthenticationFailed, match="user 'user'.*wrong password"):
        server.final(CLIENT_FINAL)


def test_unknown_user_answers_like_a_known_one_then_fails():
    server = ScramServer(scram.SCRAM_SHA_256, {}.get, nonce=lambda: SERVER_NONCE)
    assert server.first(CLIENT_FIRST).startswith(b"r=rOprNGfwEbeRWgbNEkqO%hvY")
    with pytest.raises(AuthenticationFailed, match="unknown user or wrong password"):
        server.final(CLIENT_FINAL)


@pytest.mark.parametrize("message", [b"", b"p=tls-unique,,n=user,r=x", b"n,,r=abc", b"n,,n=user,r=",
                                     b"n,,n=us=er,r=abc", b"\xff\xfe", b"n,a=other,n=user,r=abc"])
def test_malformed_client_first_refused(message):
    with pytest.raises(AuthenticationFailed):
        rfc_server().first(message)


def test_tampered_final_refused():
    server = rfc_server()
    server.first(CLIENT_FIRST)
    with pytest.raises(AuthenticationFailed, match="nonce"):
        server.final(CLIENT_FINAL.replace(b"r=rOpr", b"r=XOpr"))
    with pytest.raises(AuthenticationFailed, match="out of order"):
        server.final(CLIENT_FINAL)


def test_kafka_form_round_trips_and_checks_passwords():
    for mechanism in scram.SCRAM_MECHANISMS:
        credential = scram.derive(mechanism, "s3cret")
        text = credential.to_kafka()
        assert text.startswith("salt=") and text.endswith(",iterations=4096")
        again = Credential.from_kafka(mechanism, text)
        assert again == credential
        assert scram.password_matches(again, "s3cret")
        assert not scram.password_matches(again, "s3cret!")


@pytest.mark.parametrize("text", ["salt=AA==", "garbage", "salt=!!,stored_key=AA==,server_key=AA==,iterations=4096",
                                  "salt=AA==,stored_key=AA==,server_key=AA==,iterations=4096"])
def test_bad_stored_credentials_refused(text):
    with pytest.raises(CredentialError):
        Credential.from_kafka(scram.SCRAM_SHA_256, text)


def test_derive_refuses_bad_input():
    with pytest.raises(CredentialError, match="empty"):
        scram.derive(scram.SCRAM_SHA_256, "")
    with pytest.raises(CredentialError, match="iterations"):
        scram.derive(scram.SCRAM_SHA_256, "x", iterations=10)
    with pytest.raises(CredentialError, match="within 4096..16384"):
        scram.derive(scram.SCRAM_SHA_256, "x", iterations=16385)
    with pytest.raises(CredentialError, match="unknown SCRAM mechanism"):
        scram.derive("SCRAM-MD5", "x")


def test_plain_messages():
    assert scram.parse_plain(b"\0alice\0pw") == ("alice", "pw")
    assert scram.parse_plain(b"alice\0alice\0pw") == ("alice", "pw")
    for bad in (b"alice\0pw", b"\0\0pw", b"bob\0alice\0pw", b"\0alice\0"):
        with pytest.raises(AuthenticationFailed):
            scram.parse_plain(bad)


def test_our_client_and_server_agree_and_neither_believes_a_stranger():
    for mechanism in scram.SCRAM_MECHANISMS:
        stored = scram.derive(mechanism, "pw")
        server = scram.ScramServer(mechanism, lambda user: stored if user == "a,b=c" else None)
        client = scram.ScramClient(mechanism, "a,b=c", "pw")  # a name RFC 5802 escapes
        client.verify(server.final(client.final(server.first(client.first()))))
        assert server.done and server.user == "a,b=c"

        wrong = scram.ScramClient(mechanism, "a,b=c", "not-pw")
        server = scram.ScramServer(mechanism, lambda user: stored)
        with pytest.raises(scram.AuthenticationFailed, match="wrong password"):
            server.final(wrong.final(server.first(wrong.first())))

        # A server that does not know the password cannot forge its signature.
        impostor = scram.ScramServer(mechanism, lambda user: scram.derive(mechanism, "guess", salt=stored.salt))
        client = scram.ScramClient(mechanism, "a,b=c", "pw")
        client.final(impostor.first(client.first()))
        forged = b"v=" + base64.b64encode(scram.derive(mechanism, "guess", salt=stored.salt).server_key)
        with pytest.raises(scram.AuthenticationFailed, match="does not know this credential"):
            client.verify(forged)
        with pytest.raises(scram.AuthenticationFailed, match="refuses or is malformed"):
            client.verify(b"e=invalid-proof")



def test_the_nonce_librdkafka_before_2_6_1_sends_is_taken_and_no_other():
    stored = scram.derive(scram.SCRAM_SHA_512, "pw")
    client_nonce = "c" * 32
    client_first_bare = f"n=u,r={client_nonce}"

    def final_with(server_first: str, nonce: str) -> bytes:
        """A client-final message naming ``nonce``, its proof computed over it as a client would."""
        attrs = dict(part.split("=", 1) for part in server_first.split(","))
        client_key, stored_key, _ = scram._keys(scram.SCRAM_SHA_512, "pw", base64.b64decode(attrs["s"]),
                                                int(attrs["i"]))
        without_proof = f"c=biws,r={nonce}"
        signature = scram._hmac("sha512", stored_key,
                                f"{client_first_bare},{server_first},{without_proof}".encode())
        proof = bytes(a ^ b for a, b in zip(client_key, signature))
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()

    for accepted, nonce_of in ((True, lambda full: full), (True, lambda full: client_nonce + full),
                               (False, lambda full: "x" + full), (False, lambda full: full + "x"),
                               (False, lambda full: client_nonce)):
        server = scram.ScramServer(scram.SCRAM_SHA_512, lambda user: stored)
        server_first = server.first(f"n,,{client_first_bare}".encode()).decode()
        full = server_first.split(",")[0][2:]
        message = final_with(server_first, nonce_of(full))
        if accepted:
            assert server.final(message).startswith(b"v=")
        else:
            with pytest.raises(scram.AuthenticationFailed, match="nonce does not match"):
                server.final(message)


def test_an_unknown_users_salt_is_steady_but_not_computable_from_the_name():
    def salt_of(answer: bytes) -> bytes:
        return base64.b64decode(dict(part.split("=", 1) for part in answer.decode().split(","))["s"])

    salts = [salt_of(ScramServer(scram.SCRAM_SHA_256, {}.get).first(CLIENT_FIRST)) for _ in range(2)]
    assert salts[0] == salts[1]  # asked again, answered alike, as a known user is
    assert salts[0] != hashlib.sha256(b"zkcoord" + b"user").digest()
    assert len(salts[0]) == 32
