"""TLS settings, contexts and handshakes, on real sockets over loopback with
certificates made here (zkcoord.security.certs)."""

from __future__ import annotations

import select
import socket
import threading
import time

import pytest

from zkcoord import wire
from zkcoord.channel import Channel
from zkcoord.cli import build_parser
from zkcoord.consumer.cli import config_from as consumer_config_from
from zkcoord.coordinator.cli import config_from as server_config_from
from zkcoord.errors import ConfigError, TlsError
from zkcoord.security import certs, tls
from zkcoord.security.config import TlsConfig, librdkafka_settings
from zkcoord.security.principal import ANONYMOUS, user


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    directory = tmp_path_factory.mktemp("pki")
    ca = certs.make_ca(directory)
    return {"ca": ca, "server": certs.issue(ca, directory, "server"), "alice": certs.issue(ca, directory, "alice"),
            "elsewhere": certs.issue(ca, directory, "elsewhere", hosts=("example.org",))}


def server_config(pki, client_auth="none", who="server", timeout_ms=10_000) -> TlsConfig:
    files = pki[who]
    return TlsConfig(cert=str(files.cert), key=str(files.key), ca=str(pki["ca"].cert), client_auth=client_auth,
                     handshake_timeout_ms=timeout_ms)


def client_config(pki, who=None) -> TlsConfig:
    if who is None:
        return TlsConfig(ca=str(pki["ca"].cert))
    return TlsConfig(ca=str(pki["ca"].cert), cert=str(pki[who].cert), key=str(pki[who].key))


class Listener:
    """A loopback listener whose one accepted connection goes through tls.accept on a thread."""

    def __init__(self, config: TlsConfig):
        self.config = config
        self.context = tls.server_context(config)
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.result = None
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self):
        conn, _ = self.sock.accept()
        try:
            wrapped = tls.accept(conn, self.context, self.config.handshake_timeout_s)
        except TlsError as exc:
            self.result = exc
            return
        self.result = wrapped

    def wait(self):
        self.thread.join(15)
        assert not self.thread.is_alive()
        return self.result

    def close(self):
        self.sock.close()


def test_a_certificate_goes_with_its_key_and_client_auth_needs_a_ca():
    with pytest.raises(ConfigError, match="--tls-cert and --tls-key go together"):
        TlsConfig(cert="server.pem")
    with pytest.raises(ConfigError, match="--tls-client-auth required needs --tls-ca"):
        TlsConfig(cert="server.pem", key="server-key.pem", client_auth="required")
    with pytest.raises(ConfigError, match="client_auth must be one of"):
        TlsConfig(client_auth="sometimes")
    assert not TlsConfig().serves and not TlsConfig().speaks
    assert tls.server_context(TlsConfig()) is None and tls.client_context(TlsConfig()) is None


def test_files_that_cannot_be_loaded_are_refused_naming_them(pki, tmp_path):
    missing = tmp_path / "missing.pem"
    with pytest.raises(ConfigError, match="cannot load the TLS files.*missing.pem"):
        tls.server_context(TlsConfig(cert=str(missing), key=str(pki["server"].key)))
    with pytest.raises(ConfigError, match="cannot load the TLS files"):
        tls.client_context(TlsConfig(ca=str(pki["server"].key)))  # a key is no CA


def test_one_set_of_flags_reaches_both_listeners_of_a_server_and_a_consumer():
    flags = ("--tls-cert", "s.pem", "--tls-key", "s-key.pem", "--tls-ca", "ca.pem", "--tls-client-auth", "required",
             "--tls-handshake-timeout-ms", "500")
    config = server_config_from(build_parser().parse_args(
        ["server", "--id", "1", "--zookeeper", "zk", "--data-dir", "d", *flags]))
    expected = TlsConfig(cert="s.pem", key="s-key.pem", ca="ca.pem", client_auth="required", handshake_timeout_ms=500)
    assert config.tls == expected and config.broker.tls == expected
    consumer = consumer_config_from(build_parser().parse_args(
        ["consume", "--bootstrap", "h:1", "--group", "g", "--topic", "t", "--tls-ca", "ca.pem"]))
    assert consumer.tls == TlsConfig(ca="ca.pem")
    with pytest.raises(SystemExit):  # a server's settings are not a client's
        build_parser().parse_args(["consume", "--bootstrap", "h:1", "--group", "g", "--topic", "t",
                                   "--tls-client-auth", "required"])
    with pytest.raises(ConfigError, match="needs --tls-ca too"):
        server_config_from(build_parser().parse_args(
            ["server", "--id", "1", "--zookeeper", "zk", "--no-broker", "--tls-cert", "s.pem", "--tls-key", "k.pem"]))


def test_librdkafka_is_told_the_same():
    assert librdkafka_settings(TlsConfig()) == {}
    assert librdkafka_settings(TlsConfig(ca="ca.pem", cert="a.pem", key="a-key.pem")) == {
        "security.protocol": "SSL", "ssl.ca.location": "ca.pem", "ssl.endpoint.identification.algorithm": "https",
        "ssl.certificate.location": "a.pem", "ssl.key.location": "a-key.pem"}


def test_librdkafka_is_given_a_credential_with_scram():
    sasl = {"sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "alice", "sasl.password": "pw"}
    assert librdkafka_settings(TlsConfig(), "alice", "pw") == {"security.protocol": "SASL_PLAINTEXT", **sasl}
    assert librdkafka_settings(TlsConfig(ca="ca.pem"), "alice", "pw") == {
        "security.protocol": "SASL_SSL", "ssl.ca.location": "ca.pem",
        "ssl.endpoint.identification.algorithm": "https", **sasl}
    with pytest.raises(ConfigError, match="both a user and a password"):
        librdkafka_settings(TlsConfig(), "alice")


@pytest.mark.parametrize("client_auth", ["requested", "required"])
def test_the_principal_is_the_client_certificates_common_name(pki, client_auth):
    listener = Listener(server_config(pki, client_auth))
    try:
        channel = Channel.connect("127.0.0.1", listener.port, 10, tls=tls.client_context(client_config(pki, "alice")))
        served = listener.wait()
        assert tls.principal_of(served) == user("alice")
        # And frames cross it both ways.
        channel.send(wire.ClusterMetadataRequest(group_id="g"))
        server_side = Channel(served)
        assert isinstance(server_side.receive(5).message, wire.ClusterMetadataRequest)
        channel.close()
        server_side.close()
    finally:
        listener.close()


def test_without_a_certificate_a_client_is_anonymous_where_one_is_only_requested(pki):
    listener = Listener(server_config(pki, "requested"))
    try:
        Channel.connect("127.0.0.1", listener.port, 10, tls=tls.client_context(client_config(pki))).close()
        assert tls.principal_of(listener.wait()) == ANONYMOUS
    finally:
        listener.close()


def test_without_a_certificate_a_client_is_refused_where_one_is_required(pki):
    listener = Listener(server_config(pki, "required"))
    try:
        channel = Channel.connect("127.0.0.1", listener.port, 10, tls=tls.client_context(client_config(pki)))
        refused = listener.wait()
        assert isinstance(refused, TlsError) and not refused.retriable
        # TLS 1.3: the client hears of it once it uses the connection, as a
        # refusal saying why (its request may or may not have gone out first).
        with pytest.raises(TlsError, match=f"127.0.0.1:{listener.port}.*certificate is required") as caught:
            channel.send(wire.ClusterMetadataRequest(group_id="g"))
            channel.receive(5)
        assert not caught.value.retriable
    finally:
        listener.close()


def test_a_server_whose_certificate_names_another_host_is_refused(pki):
    listener = Listener(server_config(pki, "none", who="elsewhere"))
    try:
        with pytest.raises(TlsError, match="127.0.0.1") as caught:
            Channel.connect("127.0.0.1", listener.port, 10, tls=tls.client_context(client_config(pki)))
        assert not caught.value.retriable
    finally:
        listener.close()


def test_a_silent_client_is_cut_off_at_the_handshake_deadline(pki):
    listener = Listener(server_config(pki, timeout_ms=300))
    try:
        silent = socket.create_connection(("127.0.0.1", listener.port))
        started = time.monotonic()
        assert isinstance(listener.wait(), TlsError)
        assert time.monotonic() - started < 5
        silent.settimeout(5)
        assert silent.recv(1) == b""  # closed by the server
        silent.close()
    finally:
        listener.close()


def test_a_non_blocking_tls_channel_reads_what_has_arrived_and_waits_for_the_rest(pki):
    listener = Listener(server_config(pki))
    try:
        channel = Channel.connect("127.0.0.1", listener.port, 10, tls=tls.client_context(client_config(pki)))
        served = Channel(listener.wait())
        served.sock.settimeout(0.0)
        assert served.read_available() == [] and not served.peer_gone  # nothing yet: not an end
        big = wire.ClusterMetadataRequest(group_id="g" * 30_000)  # more than one TLS record
        for _ in range(3):
            channel.send(big)
        frames = []
        deadline = time.monotonic() + 10
        while len(frames) < 3 and time.monotonic() < deadline:
            select.select([served.sock], [], [], 1)
            frames += served.read_available()
        assert [f.message.group_id for f in frames] == [big.group_id] * 3
        channel.close()
        served.close()
    finally:
        listener.close()


def test_shutting_a_tls_connections_reading_side_keeps_what_is_sent_after_encrypted(pki):
    # A stopping broker shuts its connections' reading side and lets answers
    # in flight go out: over TLS still (an SSLSocket's own shutdown drops TLS).
    listener = Listener(server_config(pki))
    try:
        channel = Channel.connect("127.0.0.1", listener.port, 10, tls=tls.client_context(client_config(pki)))
        served = listener.wait()
        tls.shutdown(served, socket.SHUT_RD)
        message = wire.ClusterMetadataRequest(group_id="after")
        served.sendall(wire.encode(message, 7, message.version_for(None)))
        frame = channel.receive(5)
        assert frame.correlation_id == 7 and frame.message.group_id == "after"
        channel.close()
        served.close()
    finally:
        listener.close()
