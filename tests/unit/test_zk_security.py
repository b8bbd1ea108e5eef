"""ZooKeeper security settings and the ACL policy: pure decisions, no ZooKeeper
(tests/e2e/test_zookeeper_security.py runs them against a real one)."""

from __future__ import annotations

import argparse
import pickle
from pathlib import Path

import pytest
from kazoo.security import ACL, ANYONE_ID_UNSAFE, OPEN_ACL_UNSAFE, Id, Permissions, make_digest_acl

from zkcoord import settings
from zkcoord.errors import ConfigError
from zkcoord.spark.errors import SourceOptionError
from zkcoord.spark.metadata import ClusterView
from zkcoord.spark.options import parse_options, zookeeper_options
from zkcoord.zk.security import ZkSecurity, acl_policy, client_options, command_line


def password_file(tmp_path, text="s3cret\n"):
    path = tmp_path / "zk.password"
    path.write_text(text)
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
    ({"zk_cert_file": "/c.pem"}, "zk_cert_file and zk_key_file go together"),
    ({"zk_cert_file": "/c.pem", "zk_key_file": "/k.pem"}, "needs zk_ca_file"),
])
def test_incomplete_or_contradictory_settings_are_refused(given, says):
    given = {k: Path(v) if k.endswith("_file") else v for k, v in given.items()}
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


def test_without_credentials_every_node_is_open_as_before():
    policy = acl_policy(ZkSecurity())
    for path in ("/consumers/g/offsets/t/0", "/zkcoord/groups/g/state", "/brokers/ids/1", "/elsewhere"):
        assert policy(path) == list(OPEN_ACL_UNSAFE)
    assert set(client_options(ZkSecurity())) == {"acl_for"}  # no auth, no TLS: kazoo's plain client


def test_the_policy_opens_kafkas_nodes_to_readers_and_keeps_zkcoords_own(tmp_path):
    security = ZkSecurity(zk_auth="digest", zk_user="zk", zk_password_file=password_file(tmp_path))
    owner = make_digest_acl("zk", "s3cret", all=True)
    world_read = ACL(Permissions.READ, ANYONE_ID_UNSAFE)
    policy = acl_policy(security)
    for path in ("/consumers", "/consumers/g/offsets/t/0", "/consumers/g/owners/t/0", "/brokers/ids/1",
                 "/brokers/topics/t/partitions/0/state", "/cluster/id", "/config/topics/t"):
        assert policy(path) == [owner, world_read], path
    for path in ("/zkcoord", "/zkcoord/groups/g/state", "/zkcoord/servers/1", "/consumersX", "/brokersX/ids",
                 "/config/users", "/config/users/alice"):  # users' SCRAM credentials: never world-readable
        assert policy(path) == [owner], path
    opened = acl_policy(ZkSecurity(zk_auth="sasl", zk_user="zk", zk_password_env="X", zk_state_readable=True,
                                   zk_kafka_readable=False))
    sasl_owner = ACL(Permissions.ALL, Id("sasl", "zk"))
    assert opened("/zkcoord/groups/g/state") == [sasl_owner, world_read]
    assert opened("/consumers/g/offsets/t/0") == [sasl_owner]
    assert opened("/config/users/alice") == [sasl_owner]


def test_a_security_passes_to_a_command_as_the_options_it_came_from(tmp_path):
    parser = argparse.ArgumentParser()
    settings.add_options(parser, ZkSecurity)
    security = ZkSecurity(zk_auth="sasl", zk_user="zk", zk_password_file=password_file(tmp_path),
                          zk_ca_file=tmp_path / "ca.pem", zk_state_readable=True, zk_kafka_readable=False)
    args = command_line(security)
    assert "s3cret" not in " ".join(args)  # a file's name, never the password, is on a command line
    assert settings.from_args(ZkSecurity, parser.parse_args(args)) == security
    assert command_line(ZkSecurity()) == []


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
                          zk_kafka_readable=False)
    options = zookeeper_options(security)
    assert options == {"zookeeper.auth": "digest", "zookeeper.user": "zk", "zookeeper.passwordEnv": "ZK_PW",
                       "zookeeper.caFile": str(tmp_path / "ca.pem"), "zookeeper.kafkaReadable": "false"}
    assert parse_options({"zookeeper": "h", "subscribe": "t", **options}, streaming=True).zk_security == security
    assert zookeeper_options(ZkSecurity()) == {}
