"""ZooKeeper security settings and the ACL policy: pure decisions, no ZooKeeper
(tests/e2e/test_zookeeper_security.py runs them against a real one)."""

from __future__ import annotations

import argparse
import dataclasses
import os
import pickle
import sys
from pathlib import Path

import pytest
from kazoo.security import ACL, ANYONE_ID_UNSAFE, OPEN_ACL_UNSAFE, Id, Permissions, make_digest_acl

from zkcoord import settings
from zkcoord.errors import ConfigError
from zkcoord.security import certs
from zkcoord.security.secrets import ALLOW_READABLE_ENV, ReadableSecret, write_private
from zkcoord.spark.errors import SourceOptionError
from zkcoord.spark.metadata import ClusterView
from zkcoord.spark.options import parse_options, zookeeper_options
from zkcoord.zk import security as zk_security
from zkcoord.zk.security import ZkSecurity, acl_policy, client_options, command_line


def password_file(tmp_path, text="s3cret\n"):
    path = tmp_path / "zk.password"
    write_private(path, text)
    return path


@pytest.mark.parametrize("given, says", [
    ({"zk_user": "u"}, "zk_user given but zk_auth is none"),
    ({"zk_auth": "digest"}, "zk_auth digest needs zk_user"),
    ({"zk_auth": "sasl", "zk_user": "u"}, "needs the password from exactly one of"),
    ({"zk_auth": "sasl", "zk_user": "u", "zk_password_env": "A", "zk_password_file": "/p"}, "not 2"),
    ({"zk_auth": "sasl", "zk_user": "u", "zk_sasl_mechanism": "GSSAPI", "zk_password_env": "A"},
     "GSSAPI takes no password"),
    ({"zk_auth": "digest", "zk_user": "a:b", "zk_password_env": "A"}, "without ':'"),
    ({"zk_auth": "kerberos"}, "zk_auth must be one of"),
    ({"zk_auth": "sasl", "zk_user": "u", "zk_password_env": "A", "zk_keytab": "/k"},
     "zk_keytab only go with Kerberos .* not zk_auth sasl"),
    ({"zk_krb5_conf": "/krb5.conf"}, "zk_krb5_conf only go with Kerberos"),
    ({"zk_cert_file": "/c.pem"}, "zk_cert_file and zk_key_file go together"),
    ({"zk_cert_file": "/c.pem", "zk_key_file": "/k.pem"}, "needs zk_ca_file"),
])
def test_incomplete_or_contradictory_settings_are_refused(given, says):
    given = {k: Path(v) if k.endswith(("_file", "_keytab", "_conf")) else v for k, v in given.items()}
    with pytest.raises(ConfigError, match=says):
        ZkSecurity(**given)


def test_the_password_comes_from_a_file_or_the_environment_and_never_empty(tmp_path, monkeypatch):
    assert ZkSecurity(zk_auth="digest", zk_user="u", zk_password_file=password_file(tmp_path)).password() == "s3cret"
    monkeypatch.setenv("ZK_PW", "from-env")
    assert ZkSecurity(zk_auth="sasl", zk_user="u", zk_password_env="ZK_PW").password() == "from-env"
    empty = ZkSecurity(zk_auth="digest", zk_user="u", zk_password_file=password_file(tmp_path, "\n"))
    with pytest.raises(ConfigError, match="is empty or unset"):
        empty.password()
    missing = ZkSecurity(zk_auth="digest", zk_user="u", zk_password_file=tmp_path / "nope")
    with pytest.raises(ConfigError, match="cannot read the ZooKeeper password file .*nope: No such file"):
        client_options(missing)


def test_zookeepers_password_key_and_keytab_files_others_can_read_are_refused(tmp_path, fresh_kerberos_login,
                                                                              monkeypatch):
    monkeypatch.delenv(ALLOW_READABLE_ENV, raising=False)
    readable = password_file(tmp_path)
    os.chmod(readable, 0o644)
    with pytest.raises(ReadableSecret, match=rf"^--zk-password-file {readable} can be read by its group and every "
                                             rf"other user \(mode 0644\)"):
        client_options(ZkSecurity(zk_auth="digest", zk_user="u", zk_password_file=readable))
    ca = certs.make_ca(tmp_path)
    client = certs.issue(ca, tmp_path, "zkcoord")
    os.chmod(client.key, 0o640)
    with pytest.raises(ReadableSecret, match=rf"^--zk-key-file {client.key} can be read by its group \(mode 0640\)"):
        client_options(ZkSecurity(zk_ca_file=ca.cert, zk_cert_file=client.cert, zk_key_file=client.key))
    security = kerberos_security(tmp_path)
    os.chmod(security.zk_keytab, 0o604)
    with pytest.raises(ReadableSecret, match=r"^--zk-keytab .*zkcoord.keytab can be read by every other user"):
        client_options(security)


def test_without_credentials_every_node_is_open_as_before():
    policy = acl_policy(ZkSecurity())
    for path in ("/consumers/g/offsets/t/0", "/zkcoord/groups/g/state", "/brokers/ids/1", "/elsewhere"):
        assert policy(path) == list(OPEN_ACL_UNSAFE)
    assert set(client_options(ZkSecurity())) == {"acl_for"}  # no auth, no TLS: kazoo's plain client


def test_the_policy_keeps_every_node_to_zkcoord_and_opens_kafkas_to_readers_only_when_asked(tmp_path):
    security = ZkSecurity(zk_auth="digest", zk_user="zk", zk_password_file=password_file(tmp_path))
    owner = make_digest_acl("zk", "s3cret", all=True)
    world_read = ACL(Permissions.READ, ANYONE_ID_UNSAFE)
    kafkas = ("/consumers", "/consumers/g/offsets/t/0", "/consumers/g/owners/t/0", "/brokers/ids/1",
              "/brokers/topics/t/partitions/0/state", "/cluster/id", "/config/topics/t")
    zkcoords = ("/zkcoord", "/zkcoord/groups/g/state", "/zkcoord/servers/1", "/consumersX", "/brokersX/ids")
    secrets = ("/config/users", "/config/users/alice")  # users' SCRAM credentials: never world-readable
    policy = acl_policy(security)
    for path in kafkas + zkcoords + secrets:  # by default: a group's offsets are no stranger's business
        assert policy(path) == [owner], path
    # The root: anyone lists it, only zkcoord creates or deletes in it.
    assert policy("/") == [owner, world_read]
    for_lag_monitors = acl_policy(dataclasses.replace(security, zk_kafka_readable=True))
    for path in kafkas:
        assert for_lag_monitors(path) == [owner, world_read], path
    for path in zkcoords + secrets:
        assert for_lag_monitors(path) == [owner], path
    opened = acl_policy(ZkSecurity(zk_auth="sasl", zk_user="zk", zk_password_env="X", zk_state_readable=True))
    sasl_owner = ACL(Permissions.ALL, Id("sasl", "zk"))
    assert opened("/zkcoord/groups/g/state") == [sasl_owner, world_read]
    assert opened("/consumers/g/offsets/t/0") == [sasl_owner]
    assert opened("/config/users/alice") == [sasl_owner]


def test_a_security_passes_to_a_command_as_the_options_it_came_from(tmp_path):
    parser = argparse.ArgumentParser()
    settings.add_options(parser, ZkSecurity)
    security = ZkSecurity(zk_auth="sasl", zk_user="zk", zk_password_file=password_file(tmp_path),
                          zk_ca_file=tmp_path / "ca.pem", zk_state_readable=True, zk_kafka_readable=True)
    args = command_line(security)
    assert "s3cret" not in " ".join(args)  # a file's name, never the password, is on a command line
    assert settings.from_args(ZkSecurity, parser.parse_args(args)) == security
    assert command_line(ZkSecurity()) == []


def kerberos_security(tmp_path, keytab="zkcoord.keytab") -> ZkSecurity:
    write_private(tmp_path / keytab, b"\x05\x02")
    (tmp_path / "krb5.conf").write_text("[libdefaults]\n")
    return ZkSecurity(zk_auth="sasl", zk_sasl_mechanism="GSSAPI", zk_user="zkcoord@EXAMPLE.COM",
                      zk_keytab=tmp_path / keytab, zk_krb5_conf=tmp_path / "krb5.conf")


@pytest.fixture
def fresh_kerberos_login(monkeypatch):
    """As in a process that has not logged in to Kerberos yet; put back afterwards."""
    monkeypatch.setattr(zk_security, "_kerberos_environment", {})
    for name in ("KRB5_CONFIG", "KRB5_CLIENT_KTNAME", "KRB5CCNAME"):
        monkeypatch.delenv(name, raising=False)


def test_kerberos_logs_in_from_the_keytab_given_and_keeps_its_tickets_in_memory(tmp_path, fresh_kerberos_login):
    security = kerberos_security(tmp_path)
    args = command_line(security)
    assert args[args.index("--zk-keytab") + 1] == str(tmp_path / "zkcoord.keytab")
    parser = argparse.ArgumentParser()
    settings.add_options(parser, ZkSecurity)
    assert settings.from_args(ZkSecurity, parser.parse_args(args)) == security
    assert client_options(security)["sasl_options"] == {"mechanism": "GSSAPI", "principal": "zkcoord@EXAMPLE.COM"}
    assert os.environ["KRB5_CLIENT_KTNAME"] == f"FILE:{tmp_path / 'zkcoord.keytab'}"
    assert os.environ["KRB5_CONFIG"] == str(tmp_path / "krb5.conf")
    assert os.environ["KRB5CCNAME"].startswith("MEMORY:")
    client_options(security)  # the same login again is no change
    with pytest.raises(ConfigError, match="one Kerberos login per process: KRB5_CLIENT_KTNAME is FILE:.*zkcoord"
                                          ".keytab already, not FILE:.*other.keytab"):
        client_options(kerberos_security(tmp_path, keytab="other.keytab"))


def test_kerberos_without_its_python_library_is_a_clear_error(tmp_path, fresh_kerberos_login, monkeypatch):
    monkeypatch.setitem(sys.modules, "kerberos", None)  # as if not installed: importing it fails
    with pytest.raises(ConfigError, match=r"SASL GSSAPI needs the Python package 'kerberos' \(pip install "
                                          r"'zkcoord\[kerberos\]'"):
        client_options(kerberos_security(tmp_path))
    assert "KRB5_CLIENT_KTNAME" not in os.environ


def test_the_spark_source_takes_the_same_settings_as_options_and_never_ships_a_password(tmp_path):
    options = parse_options({"zookeeper": "h:2181", "subscribe": "t", "zookeeper.auth": "sasl",
                             "zookeeper.user": "zk", "zookeeper.passwordFile": str(password_file(tmp_path)),
                             "zookeeper.caFile": "/ca.pem", "zookeeper.stateReadable": "true"}, streaming=True)
    assert options.zk_security == ZkSecurity(zk_auth="sasl", zk_user="zk", zk_password_file=password_file(tmp_path),
                                             zk_ca_file=Path("/ca.pem"), zk_state_readable=True)
    with pytest.raises(SourceOptionError, match="zookeeper.auth sasl needs zookeeper.user"):
        parse_options({"zookeeper": "h", "subscribe": "t", "zookeeper.auth": "sasl"}, streaming=True)
    view = ClusterView("h:2181", security=options.zk_security)
    shipped = pickle.dumps(view)
    assert b"s3cret" not in shipped
    assert pickle.loads(shipped).security == options.zk_security


def test_a_security_passes_to_the_spark_source_as_the_options_it_came_from(tmp_path):
    security = ZkSecurity(zk_auth="digest", zk_user="zk", zk_password_env="ZK_PW", zk_ca_file=tmp_path / "ca.pem",
                          zk_kafka_readable=True)
    options = zookeeper_options(security)
    assert options == {"zookeeper.auth": "digest", "zookeeper.user": "zk", "zookeeper.passwordEnv": "ZK_PW",
                       "zookeeper.caFile": str(tmp_path / "ca.pem"), "zookeeper.kafkaReadable": "true"}
    assert parse_options({"zookeeper": "h", "subscribe": "t", **options}, streaming=True).zk_security == security
    assert zookeeper_options(ZkSecurity()) == {}
