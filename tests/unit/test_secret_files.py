"""A password or private key file that users other than its owner can read
is refused, by every command that reads one, with the file, its mode and
the way out; an owner-only file passes; ``write_private`` makes them so."""

from __future__ import annotations

import logging
import os
import stat
import subprocess
import sys

import pytest

from zkcoord.errors import ConfigError
from zkcoord.security import certs, tls
from zkcoord.security.config import TlsConfig
from zkcoord.security.secrets import (ALLOW_READABLE_ENV, ReadableSecret, check_private, password_for, read_password,
                                      write_private)


def secret_file(directory, mode: int, text: str = "s3cret\n"):
    path = directory / "secret"
    path.write_text(text)
    os.chmod(path, mode)
    return path


@pytest.fixture(autouse=True)
def strict(monkeypatch):
    monkeypatch.delenv(ALLOW_READABLE_ENV, raising=False)


@pytest.mark.parametrize("mode, readers", [(0o644, "its group and every other user"), (0o640, "its group"),
                                           (0o604, "every other user"), (0o444, "its group and every other user")])
def test_a_password_file_others_can_read_is_refused_naming_the_file_and_its_mode(tmp_path, mode, readers):
    path = secret_file(tmp_path, mode)
    with pytest.raises(ReadableSecret) as refused:
        read_password(str(path), "--bridge-password-file")
    assert str(refused.value) == (
        f"--bridge-password-file {path} can be read by {readers} (mode {mode:04o}), and whoever reads it can use "
        f"it: refused. Make it its owner's alone (chmod 600 {path}), or set ZKCOORD_ALLOW_READABLE_SECRETS=1 to "
        f"use it anyway")
    assert isinstance(refused.value, ConfigError)  # a command exits 2 with it


@pytest.mark.parametrize("mode", [0o600, 0o400, 0o620, 0o602])  # written by others is not read by them
def test_an_owner_only_password_file_passes(tmp_path, mode):
    assert read_password(str(secret_file(tmp_path, mode))) == "s3cret"


def test_every_way_to_a_password_file_goes_through_the_check(tmp_path):
    path = str(secret_file(tmp_path, 0o644))
    with pytest.raises(ReadableSecret, match="^sasl.passwordFile "):
        password_for("alice", path, "sasl.username", "sasl.passwordFile")


def test_the_check_may_be_waived_and_says_so(tmp_path, monkeypatch, caplog):
    path = secret_file(tmp_path, 0o644)
    monkeypatch.setenv(ALLOW_READABLE_ENV, "1")
    with caplog.at_level(logging.WARNING, logger="zkcoord.security.secrets"):
        assert read_password(str(path)) == "s3cret"
    assert f"--password-file {path} can be read by its group and every other user (mode 0644): used anyway, " \
           f"as ZKCOORD_ALLOW_READABLE_SECRETS=1 allows" in caplog.text


def test_a_pipe_or_a_missing_file_is_left_to_its_reader(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo, 0o644)
    check_private(fifo, "--password-file")  # nothing on disk: standard input, a shell's <(...)
    check_private(tmp_path / "missing", "--password-file")
    with pytest.raises(ConfigError, match="cannot read the password"):
        read_password(str(tmp_path / "missing"))


def test_a_tls_key_others_can_read_is_refused(tmp_path):
    ca = certs.make_ca(tmp_path)
    server = certs.issue(ca, tmp_path, "server")
    assert stat.S_IMODE(server.key.stat().st_mode) == 0o600  # as made
    config = TlsConfig(cert=str(server.cert), key=str(server.key), ca=str(ca.cert))
    assert tls.server_context(config) is not None
    os.chmod(server.key, 0o644)
    with pytest.raises(ReadableSecret, match=rf"^--tls-key {server.key} can be read by .* \(mode 0644\)"):
        tls.server_context(config)
    with pytest.raises(ReadableSecret):
        tls.client_context(config)  # a client's key (mutual TLS) alike


def test_write_private_is_owner_only_whatever_the_umask_and_the_file_before(tmp_path):
    path = secret_file(tmp_path, 0o666, "old\n")
    old = os.umask(0)
    try:
        write_private(path, "new\n")
        write_private(tmp_path / "fresh", b"bytes\n")
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and path.read_text() == "new\n"
    assert stat.S_IMODE((tmp_path / "fresh").stat().st_mode) == 0o600


def test_a_server_refuses_to_start_with_a_world_readable_bridge_password(tmp_path):
    """The README's recipe wrote the servers' own (super user's) password
    with the default umask: every user of the machine could read it."""
    path = secret_file(tmp_path, 0o644, "broker-pw\n")
    env = {k: v for k, v in os.environ.items() if k != ALLOW_READABLE_ENV}
    done = subprocess.run([sys.executable, "-m", "zkcoord.cli", "server", "--id", "1", "--zookeeper", "127.0.0.1:1",
                           "--data-dir", str(tmp_path / "data"), "--bridge-user", "broker",
                           "--bridge-password-file", str(path), "--bridge-password-without-tls"],
                          capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 2, done.stderr
    assert f"--bridge-password-file {path} can be read by its group and every other user (mode 0644)" \
        in done.stderr, done.stderr
