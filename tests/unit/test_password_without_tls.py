"""A password never crosses a connection without TLS unless the client was
told it may: RegisterConsumer and ResetOffsets carry it as SASL/PLAIN does.
Each client refuses before it connects, with what to do about it."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from zkcoord.coordinator.config import ServerConfig
from zkcoord.member.config import MemberConfig
from zkcoord.member.membership import GroupMembership
from zkcoord.security import certs
from zkcoord.security.config import SecurityConfig, TlsConfig
from zkcoord.security.secrets import PasswordWithoutTls, refuse_password_without_tls, write_private


def member(**settings) -> GroupMembership:
    config = MemberConfig(group="g", topics=("t",), user="alice", password="alice-pw", **settings)
    return GroupMembership(["127.0.0.1:1"], config, listener=None)


def test_the_rule_names_the_user_the_connection_and_the_way_out():
    with pytest.raises(PasswordWithoutTls, match=r"^user 'alice''s password would cross the coordinator "
                                                 r"readable, without TLS: refused \(give a CA to speak TLS, or "
                                                 r"allow it with --allow\)$"):
        refuse_password_without_tls("alice", tls=False, allowed=False, where="the coordinator", allow="--allow")
    refuse_password_without_tls("alice", tls=True, allowed=False, where="x", allow="y")
    refuse_password_without_tls("alice", tls=False, allowed=True, where="x", allow="y")
    refuse_password_without_tls(None, tls=False, allowed=False, where="x", allow="y")  # nothing to send


def test_a_thin_member_with_a_credential_and_no_tls_is_refused_when_made(tmp_path):
    with pytest.raises(PasswordWithoutTls, match="--password-without-tls"):
        member()
    assert member(password_without_tls=True).tls is None
    ca = certs.make_ca(tmp_path)
    assert member(tls=TlsConfig(ca=str(ca.cert))).tls is not None
    anonymous = GroupMembership(["127.0.0.1:1"], MemberConfig(group="g", topics=("t",)), listener=None)
    assert anonymous.tls is None


def test_a_server_whose_bridge_would_send_its_password_without_tls_does_not_start(tmp_path):
    security = SecurityConfig(bridge_user="broker", bridge_password="broker-pw")
    with pytest.raises(PasswordWithoutTls, match="--bridge-password-without-tls"):
        ServerConfig(server_id=1, zookeeper="127.0.0.1:2181", security=security)
    allowed = SecurityConfig(bridge_user="broker", bridge_password="broker-pw", bridge_password_without_tls=True)
    ServerConfig(server_id=1, zookeeper="127.0.0.1:2181", security=allowed)
    ca = certs.make_ca(tmp_path)
    ServerConfig(server_id=1, zookeeper="127.0.0.1:2181", security=security, tls=TlsConfig(ca=str(ca.cert)))


@pytest.mark.parametrize("command", [["consume", "--topic", "t"], ["groups", "reset-offsets", "--topic", "t",
                                                                   "--to-earliest"]])
def test_the_commands_refuse_before_they_connect(tmp_path, command):
    secret = tmp_path / "pw"
    write_private(secret, "alice-pw\n")
    done = subprocess.run([sys.executable, "-m", "zkcoord.cli", *command, "--bootstrap", "127.0.0.1:1",
                           "--group", "g", "--user", "alice", "--password-file", str(secret)],
                          capture_output=True, text=True, timeout=60, env=dict(os.environ))
    assert done.returncode == 2, done.stderr
    assert "password would cross the coordinator connection" in done.stderr
    assert "allow it with --password-without-tls" in done.stderr
