"""Principals as Kafka spells them, and the one a TLS peer certificate names."""

import ssl
import socket
import threading

import pytest

from zkcoord.errors import ConfigError
from zkcoord.security import certs
from zkcoord.security.principal import ANONYMOUS, Principal, from_peer_certificate, user


def test_parse_and_print():
    assert Principal.parse("User:alice") == user("alice")
    assert Principal.parse("bob") == user("bob")
    assert str(Principal.parse("Group:ops")) == "Group:ops"
    for bad in ("User:", ":alice"):
        with pytest.raises(ConfigError):
            Principal.parse(bad)


def test_a_client_certificate_names_its_common_name_over_a_real_handshake(tmp_path):
    ca = certs.make_ca(tmp_path)
    server, client = certs.issue(ca, tmp_path, "server"), certs.issue(ca, tmp_path, "alice")
    server_side = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(ca.cert))
    server_side.load_cert_chain(server.cert, server.key)
    server_side.verify_mode = ssl.CERT_REQUIRED
    client_side = ssl.create_default_context(cafile=str(ca.cert))
    client_side.load_cert_chain(client.cert, client.key)
    listener = socket.create_server(("127.0.0.1", 0))
    seen = {}

    def accept():
        conn, _ = listener.accept()
        with server_side.wrap_socket(conn, server_side=True) as tls:
            seen["principal"] = from_peer_certificate(tls.getpeercert())
            tls.sendall(b"k")

    thread = threading.Thread(target=accept)
    thread.start()
    with client_side.wrap_socket(socket.create_connection(listener.getsockname()),
                                 server_hostname="127.0.0.1") as tls:
        assert tls.recv(1) == b"k"
    thread.join(10)
    listener.close()
    assert seen["principal"] == user("alice")
    assert from_peer_certificate(None) == ANONYMOUS
