"""zkcoord on a secured ZooKeeper, all real: ZooKeeper with SASL (DIGEST-MD5)
or digest users and a TLS-only client port, a `zkcoord server` with its
broker, a `zkcoord consume` member, and the admin commands as a user runs
them. What is checked: the group runs; every node written carries the
policy's ACL; a client without credentials reads what Kafka's tools read and
nothing else, and changes nothing; refused or broken credentials are clear
errors at once."""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path
from typing import Iterator

import pytest
from kazoo.exceptions import NoAuthError
from kazoo.security import ACL, ANYONE_ID_UNSAFE, OPEN_ACL_UNSAFE, Id, Permissions, make_digest_acl

from tests.e2e.checks import assert_nodes_owned_by, run_a_group
from tests.e2e.conftest import SERVER_ARGS
from zkcoord.security.secrets import write_private
from zkcoord.spark.metadata import ClusterView
from zkcoord.spark.options import parse_options
from zkcoord.testing import LocalCluster, wait_until, zkcoord_command
from zkcoord.zk import client as zk_client
from zkcoord.zk import layout
from zkcoord.zk.ensemble import LocalEnsemble
from zkcoord.zk.nodes import read_offsets
from zkcoord.zk.security import command_line


def zkcoord(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(zkcoord_command(*args), capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def sasl_tls(tmp_path_factory) -> Iterator[LocalEnsemble]:
    ensemble = LocalEnsemble.create(tmp_path_factory.mktemp("zk-sasl-tls"), nodes=1, tick_ms=250, auth="sasl",
                                    users=("zkcoord", "other"), tls=True)
    try:
        ensemble.start(timeout=60)
        yield ensemble
    finally:
        ensemble.destroy()


def started(ensemble: LocalEnsemble, **who):
    client = zk_client.open_client(ensemble.connect_string, ensemble.client_security(**who))
    zk_client.start(client, timeout=15)
    return client


def every_node(client) -> list[str]:
    return [path for path in zk_client.walk(client, "/") if path != "/"]


def test_a_group_runs_on_sasl_and_tls_and_what_it_wrote_only_zkcoord_may_change(sasl_tls, tmp_path):
    security = sasl_tls.client_security()
    cluster = LocalCluster(sasl_tls.connect_string, tmp_path / "cluster", SERVER_ARGS, zk_security=security)
    try:
        run_a_group(cluster)
        assert_nodes_owned_by(cluster.zk, ACL(Permissions.ALL, Id("sasl", "zkcoord")),
                              ACL(Permissions.READ, ANYONE_ID_UNSAFE))

        # The Spark source's driver finds the topic with the same settings, given as its options.
        options = parse_options({"zookeeper": sasl_tls.connect_string, "subscribe": "t", "zookeeper.auth": "sasl",
                                 "zookeeper.user": "zkcoord",
                                 "zookeeper.passwordFile": str(security.zk_password_file),
                                 "zookeeper.caFile": str(security.zk_ca_file)}, streaming=False)
        view = ClusterView(options.zookeeper, tls=options.tls, security=options.zk_security)
        try:
            assert view.topics(options) == ["t"]
            assert view.committed("g", view.partitions(["t"])) == {("t", 0): 20, ("t", 1): 20}
        finally:
            view.close()

        # Over TLS but with no credentials: Kafka's nodes read, nothing written, zkcoord's state hidden.
        anonymous = started(sasl_tls, user="")
        other = started(sasl_tls, user="other")  # authenticated, but not zkcoord's principal
        try:
            offset = layout.offset_path("g", "t", 0)
            assert anonymous.get(offset)[0] == b"20"
            assert anonymous.get_children(layout.BROKER_IDS) == ["1"]
            for client in (anonymous, other):
                for refused in (lambda: client.set(offset, b"0"), lambda: client.delete(offset),
                                lambda: client.create(layout.offset_path("g", "t", 9), b"0"),
                                lambda: client.get(layout.group_state_path("g")),
                                lambda: client.set_acls(offset, list(OPEN_ACL_UNSAFE))):
                    with pytest.raises(NoAuthError):
                        refused()
            assert read_offsets(cluster.zk, "g") == {("t", 0): 20, ("t", 1): 20}
            # The admin commands read zkcoord's state too: without its credentials, a named refusal.
            tls_only = command_line(sasl_tls.client_security(user=""))
            for command in (("groups", "list"), ("groups", "describe", "--group", "g", "--state")):
                refused = zkcoord(*command, "--zookeeper", sasl_tls.connect_string, *tls_only)
                assert refused.returncode == 1
                assert ("refused an operation to a client without credentials, which the node's ACL does not "
                        "allow") in refused.stderr, refused.stderr
        finally:
            anonymous.stop()
            other.stop()
    finally:
        cluster.close()


def test_refused_missing_or_broken_credentials_are_clear_errors_at_once(sasl_tls, tmp_path, monkeypatch):
    good = command_line(sasl_tls.client_security())
    assert zkcoord("groups", "list", "--zookeeper", sasl_tls.connect_string, *good).returncode == 0

    wrong = tmp_path / "wrong.password"
    write_private(wrong, "not-the-password\n")
    began = time.monotonic()
    refused = zkcoord("groups", "list", "--zookeeper", sasl_tls.connect_string,
                      *command_line(sasl_tls.client_security(zk_password_file=wrong)))
    assert refused.returncode == 1
    assert "refused sasl (DIGEST-MD5) user 'zkcoord': wrong user or password?" in refused.stderr
    assert time.monotonic() - began < 10  # not the 15 s connection time-out

    garbage = tmp_path / "ca.pem"
    garbage.write_text("not a certificate\n")
    for security, says in [
        (sasl_tls.client_security(zk_password_file=tmp_path / "missing"),
         f"cannot read the ZooKeeper password file {tmp_path / 'missing'}: No such file or directory"),
        (sasl_tls.client_security(zk_ca_file=garbage), f"cannot use the ZooKeeper CA file {garbage}"),
        (sasl_tls.client_security(zk_password_file=None, zk_password_env="ZKCOORD_TEST_UNSET"),
         "the environment variable ZKCOORD_TEST_UNSET (the ZooKeeper password) is empty or unset"),
    ]:
        bad = zkcoord("groups", "list", "--zookeeper", sasl_tls.connect_string, *command_line(security))
        assert bad.returncode == 1 and says in bad.stderr, bad.stderr  # groups' exit for any refusal
    half = zkcoord("groups", "list", "--zookeeper", sasl_tls.connect_string, "--zk-auth", "sasl",
                   "--zk-user", "zkcoord")
    assert half.returncode == 1
    assert "needs the password from exactly one of --zk-password-file and --zk-password-env" in half.stderr

    # A server that authenticates as another principal refuses to run on zkcoord's nodes, saying whose they are.
    # (It reaches ZooKeeper: the group test above or this one's setup wrote /zkcoord.)
    owner = started(sasl_tls)
    try:
        owner.ensure_path(layout.GROUPS)
        owner.ensure_path(layout.BROKER_IDS)
    finally:
        owner.stop()
    server = zkcoord("server", "--id", "7", "--zookeeper", sasl_tls.connect_string, "--no-broker",
                     *command_line(sasl_tls.client_security(user="other")), timeout=60)
    assert server.returncode != 0
    assert ("/zkcoord in ZooKeeper belongs to another principal, not to sasl:other, as which zkcoord "
            "authenticates (sasl user 'other'): wrong user or password?") in server.stderr, server.stderr[-2000:]

    # With digest ZooKeeper takes any password: a wrong one shows when a broker meets the nodes it must write.
    monkeypatch.setenv("ZKCOORD_TEST_WRONG", "not-the-password")
    digest = sasl_tls.client_security(zk_auth="digest", zk_password_file=None, zk_password_env="ZKCOORD_TEST_WRONG")
    broker = zkcoord("broker", "--id", "9", "--zookeeper", sasl_tls.connect_string, "--port", "0",
                     "--data-dir", str(tmp_path / "data"), *command_line(digest), timeout=60)
    assert broker.returncode == 1
    assert ("/brokers/ids in ZooKeeper belongs to another principal (writable by sasl:zkcoord), not to "
            "digest:zkcoord:") in broker.stderr, broker.stderr[-2000:]


def client_settings(up: subprocess.CompletedProcess) -> list[str]:
    line = next(line for line in up.stdout.splitlines() if line.startswith("client settings: "))
    return line.removeprefix("client settings: ").split()


def test_zk_up_with_digest_and_tls_serves_admin_commands_and_zk_secure_takes_an_open_tree(tmp_path):
    directory = tmp_path / "zk"
    up = zkcoord("zk", "up", "--dir", str(directory), "--nodes", "1", "--tick-ms", "250", "--auth", "digest",
                 "--tls")
    try:
        assert up.returncode == 0, up.stderr
        ensemble = LocalEnsemble.load(directory)
        settings = client_settings(up)
        assert settings == command_line(ensemble.client_security())
        assert "--zk-auth digest" in " ".join(settings)
        assert zkcoord("groups", "list", "--zookeeper", ensemble.connect_string, *settings).returncode == 0

        # A tree written with no credentials (over TLS): open to all, as before securing.
        anonymous = started(ensemble, user="")
        offset, state = layout.offset_path("g", "t", 0), layout.group_state_path("g")
        try:
            anonymous.create(offset, b"7", makepath=True)
            anonymous.create(state, b"{}", makepath=True)
            secured = zkcoord("zk", "secure", "--zookeeper", ensemble.connect_string, *settings)
            assert secured.returncode == 0, secured.stderr
            assert "ACLs set on" in secured.stdout
            assert anonymous.get(offset)[0] == b"7"
            with pytest.raises(NoAuthError):
                anonymous.set(offset, b"0")
            with pytest.raises(NoAuthError):
                anonymous.get(state)
            # Securing again, without credentials: refused, and nothing changed.
            again = zkcoord("zk", "secure", "--zookeeper", ensemble.connect_string,
                            *command_line(ensemble.client_security(user="")))
            assert again.returncode == 2 and "zk secure needs credentials" in again.stderr
        finally:
            anonymous.stop()
        owner_client = started(ensemble)
        try:
            # ZooKeeper shows a digest's hash only to those who may administer the node.
            password = Path(ensemble.password_file("zkcoord")).read_text().strip()
            owner = make_digest_acl("zkcoord", password, all=True)
            world_read = ACL(Permissions.READ, ANYONE_ID_UNSAFE)
            for path in every_node(owner_client):
                kafka = not path.startswith(layout.ZKCOORD_ROOT)
                assert sorted(owner_client.get_acls(path)[0]) == sorted([owner, world_read] if kafka else [owner])
            assert owner_client.get(state)[0] == b"{}"
            assert owner_client.get(offset)[0] == b"7"
        finally:
            owner_client.stop()
    finally:
        zkcoord("zk", "down", "--dir", str(directory), "--purge")


def test_a_session_on_a_secured_ensemble_can_still_be_expired_on_purpose(sasl_tls):
    from zkcoord.testing import expire_session

    victim = started(sasl_tls)
    observer = started(sasl_tls)
    try:
        victim.create("/expire-me", b"", ephemeral=True)
        old_session = victim.client_id[0]
        expire_session(victim, sasl_tls.connect_string)
        wait_until(lambda: observer.exists("/expire-me") is None, timeout=10, message="the ephemeral gone")
        wait_until(lambda: victim.connected and victim.client_id[0] != old_session, timeout=15,
                   message="the victim on a new session")
    finally:
        victim.stop()
        observer.stop()


def test_tls_that_does_not_agree_is_named_when_no_session_comes(sasl_tls, tmp_path):
    from zkcoord.security.certs import make_ca
    from zkcoord.zk.security import ZooKeeperTLSError

    stranger = make_ca(tmp_path / "other-ca", common_name="another CA")
    for security, says in [
        (sasl_tls.client_security(zk_ca_file=stranger.cert, zk_cert_file=None, zk_key_file=None),
         f"no TLS with ZooKeeper at 127.0.0.1:{sasl_tls.client_port(1)}: CERTIFICATE_VERIFY_FAILED"),
        (sasl_tls.client_security(zk_ca_file=None, zk_cert_file=None, zk_key_file=None),
         f"ZooKeeper at 127.0.0.1:{sasl_tls.client_port(1)} speaks TLS only: give its CA with --zk-ca-file"),
    ]:
        client = zk_client.open_client(sasl_tls.connect_string, security)
        began = time.monotonic()
        with pytest.raises(ZooKeeperTLSError, match=re.escape(says)):
            zk_client.start(client, timeout=3)
        assert time.monotonic() - began < 8
        client.close()
