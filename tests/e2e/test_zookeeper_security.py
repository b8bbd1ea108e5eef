"""zkcoord on a secured ZooKeeper, all real: ZooKeeper with SASL (DIGEST-MD5)
or digest users and a TLS-only client port, a `zkcoord server` with its
broker, a `zkcoord consume` member, and the admin commands as a user runs
them. What is checked: the group runs; every node written carries the
policy's ACL; a client without credentials gets no session, and another
principal reads Kafka's nodes only where the operator opened them to lag
monitors, and changes nothing; nobody but zkcoord's principal makes a node
at the root, and a node others may change is refused rather than used;
refused or broken credentials are clear errors at once; what ZooKeeper and
the server keep on disk is their owner's alone."""

from __future__ import annotations

import os
import re
import stat
import subprocess
import time
from pathlib import Path
from typing import Iterator

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError, SessionClosedRequireSaslError
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
from zkcoord.zk.probes import four_letter_word
from zkcoord.zk.nodes import read_offsets
from zkcoord.zk.security import ZooKeeperAuthError, ZooKeeperNodeOpen, command_line


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
    # A data directory another user could read, as an operator may have made it: the server closes it.
    data_dir = tmp_path / "cluster" / "server-1" / "data"
    data_dir.mkdir(parents=True)
    data_dir.chmod(0o755)
    try:
        run_a_group(cluster)
        owner = ACL(Permissions.ALL, Id("sasl", "zkcoord"))
        assert_nodes_owned_by(cluster.zk, owner)  # Kafka's nodes too: no lag monitor was let in
        assert mode(data_dir) == 0o700 and any(data_dir.iterdir())  # the partition logs are in it
        assert f"{data_dir} holds the broker's partition logs and was open to others (mode 0755): now its " \
               f"owner's alone (0700)" in cluster.servers[1].log_tail(100_000)

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

        # Over TLS but with no credentials: no session at all.
        with pytest.raises(ZooKeeperAuthError, match="requires every session to authenticate"):
            started(sasl_tls, user="")
        # The admin commands say so too.
        tls_only = command_line(sasl_tls.client_security(user=""))
        for command in (("groups", "list"), ("groups", "describe", "--group", "g", "--state")):
            refused = zkcoord(*command, "--zookeeper", sasl_tls.connect_string, *tls_only)
            assert refused.returncode == 1
            assert "requires every session to authenticate, and this one has no credentials" in refused.stderr, \
                refused.stderr

        # Authenticated, but not zkcoord's principal: a group's offsets and owners are not its to read
        # (the broker describes them only to a principal with Describe on the group), nor anything its to change.
        other = started(sasl_tls, user="other")
        try:
            offset = layout.offset_path("g", "t", 0)
            for refused in (lambda: other.get(offset), lambda: other.get_children(layout.offsets_path("g")),
                            lambda: other.get_children(layout.owners_path("g")),
                            lambda: other.get_children(layout.BROKER_IDS)):
                with pytest.raises(NoAuthError):
                    refused()
            assert_changes_nothing(other, offset)

            # An operator who runs a lag monitor that reads ZooKeeper opens Kafka's nodes to readers, knowingly.
            opened = zkcoord("zk", "secure", "--zookeeper", sasl_tls.connect_string, *command_line(security),
                             "--zk-kafka-readable")
            assert opened.returncode == 0, opened.stderr
            assert other.get(offset)[0] == b"20"
            assert other.get_children(layout.BROKER_IDS) == ["1"]
            assert_changes_nothing(other, offset)
            # What that opened: Kafka's nodes, and nothing of zkcoord's own nor anyone's credentials.
            assert_nodes_owned_by(cluster.zk, owner, kafka_readers=[ACL(Permissions.READ, ANYONE_ID_UNSAFE)])
        finally:
            other.stop()
            closed = zkcoord("zk", "secure", "--zookeeper", sasl_tls.connect_string, *command_line(security))
            assert closed.returncode == 0, closed.stderr
        assert read_offsets(cluster.zk, "g") == {("t", 0): 20, ("t", 1): 20}
    finally:
        cluster.close()


def assert_changes_nothing(client, offset: str) -> None:
    """``client`` may not change a group's offset, make a node in its place or at the root, read zkcoord's
    state, or re-ACL any of it."""
    for refused in (lambda: client.set(offset, b"0"), lambda: client.delete(offset),
                    lambda: client.create(layout.offset_path("g", "t", 9), b"0"),
                    lambda: client.create("/planted", b""), lambda: client.delete(layout.ZKCOORD_ROOT),
                    lambda: client.get(layout.group_state_path("g")),
                    lambda: client.set_acls(offset, list(OPEN_ACL_UNSAFE)),
                    lambda: client.set_acls("/", list(OPEN_ACL_UNSAFE))):
        with pytest.raises(NoAuthError):
            refused()


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


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

    # Credentials of a scheme this ZooKeeper does not take (it requires SASL): the session closes, said so.
    monkeypatch.setenv("ZKCOORD_TEST_DIGEST", "zkcoord-digest")
    digest = sasl_tls.client_security(zk_auth="digest", zk_password_file=None, zk_password_env="ZKCOORD_TEST_DIGEST")
    broker = zkcoord("broker", "--id", "9", "--zookeeper", sasl_tls.connect_string, "--port", "0",
                     "--data-dir", str(tmp_path / "data"), *command_line(digest), timeout=60)
    assert broker.returncode == 1
    assert ("ZooKeeper closed the session: it requires every session to authenticate, and it takes no digest "
            "credentials") in broker.stderr, broker.stderr[-2000:]


def client_settings(up: subprocess.CompletedProcess) -> list[str]:
    line = next(line for line in up.stdout.splitlines() if line.startswith("client settings: "))
    return line.removeprefix("client settings: ").split()


def test_zk_up_with_digest_and_tls_serves_admin_commands_and_zk_secure_takes_an_open_tree(tmp_path, monkeypatch):
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

        # A tree zkcoord wrote before it had credentials: nodes open to all, as ZooKeeper makes them.
        security = ensemble.client_security()
        owner_client = started(ensemble)
        offset, state = layout.offset_path("g", "t", 0), layout.group_state_path("g")
        try:
            owner_client.create(offset, b"7", makepath=True, acl=list(OPEN_ACL_UNSAFE))
            owner_client.create(state, b"{}", makepath=True, acl=list(OPEN_ACL_UNSAFE))
            with pytest.raises(ZooKeeperNodeOpen, match="/zkcoord in ZooKeeper is not digest:zkcoord:"):
                zk_client.check_adopted_nodes(owner_client, security)  # a server would not start on it
            secured = zkcoord("zk", "secure", "--zookeeper", ensemble.connect_string, *settings)
            assert secured.returncode == 0, secured.stderr
            assert "ACLs set on" in secured.stdout
            zk_client.check_adopted_nodes(owner_client, security)
            # ZooKeeper shows a digest's hash only to those who may administer the node.
            password = Path(ensemble.password_file("zkcoord")).read_text().strip()
            owner = make_digest_acl("zkcoord", password, all=True)
            world_read = ACL(Permissions.READ, ANYONE_ID_UNSAFE)
            assert sorted(owner_client.get_acls("/")[0]) == sorted([owner, world_read])
            for path in every_node(owner_client):
                assert owner_client.get_acls(path)[0] == [owner], path
            assert owner_client.get(state)[0] == b"{}"
            assert owner_client.get(offset)[0] == b"7"
        finally:
            owner_client.stop()

        # ZooKeeper takes any digest credential: a stranger who makes one up has a session, and the ACLs alone
        # stop it.
        monkeypatch.setenv("ZKCOORD_TEST_MADE_UP", "made-up")
        stranger = zk_client.open_client(ensemble.connect_string, ensemble.client_security(
            zk_user="mallory", zk_password_file=None, zk_password_env="ZKCOORD_TEST_MADE_UP"))
        try:
            zk_client.start(stranger, timeout=15)
            for refused in (lambda: stranger.get(offset), lambda: stranger.set(offset, b"0"),
                            lambda: stranger.get(state), lambda: stranger.create("/planted", b"")):
                with pytest.raises(NoAuthError):
                    refused()
        finally:
            stranger.stop()
            stranger.close()

        # With digest ZooKeeper takes any password: a wrong one shows when a broker meets the nodes it must write.
        monkeypatch.setenv("ZKCOORD_TEST_WRONG", "not-the-password")
        wrong = ensemble.client_security(zk_password_file=None, zk_password_env="ZKCOORD_TEST_WRONG")
        broker = zkcoord("broker", "--id", "9", "--zookeeper", ensemble.connect_string, "--port", "0",
                         "--data-dir", str(tmp_path / "data"), *command_line(wrong), timeout=60)
        assert broker.returncode == 1
        assert "/zkcoord in ZooKeeper belongs to another principal, not to digest:zkcoord:" in broker.stderr, \
            broker.stderr[-2000:]

        # Securing again, without credentials: refused, and nothing changed.
        again = zkcoord("zk", "secure", "--zookeeper", ensemble.connect_string,
                        *command_line(ensemble.client_security(user="")))
        assert again.returncode == 2 and "zk secure needs credentials" in again.stderr
    finally:
        zkcoord("zk", "down", "--dir", str(directory), "--purge")


def test_zk_up_with_sasl_and_tls_admits_only_authenticated_sessions_and_keeps_its_data_private(tmp_path):
    """Review findings: the README's `zk up --auth sasl --tls`
    gave a session to a client with no credentials, whose nodes at the root
    a broker then took as its own; its directories and ZooKeeper's
    transaction log, which holds the users' SCRAM credentials, were readable
    by every local user; and it answered every four-letter word."""
    directory = tmp_path / "zk"
    up = zkcoord("zk", "up", "--dir", str(directory), "--nodes", "1", "--tick-ms", "250", "--auth", "sasl",
                 "--user", "zkcoord", "--user", "other", "--tls")
    try:
        assert up.returncode == 0, up.stderr
        ensemble = LocalEnsemble.load(directory)
        assert (f"data: in {directory}, this user's alone (directories 0700, ZooKeeper's files 0600)"
                in up.stdout), up.stdout
        tls_dir = ensemble.tls_dir
        ca = str(tls_dir / "ca.pem")
        certificate = {"certfile": str(tls_dir / "client.pem"), "keyfile": str(tls_dir / "client-key.pem")}

        # No credentials, with or without the ensemble's client certificate: the first request ends the session.
        for shown in ({}, certificate):
            anonymous = KazooClient(hosts=ensemble.connect_string, use_ssl=True, ca=ca, verify_certs=True, **shown)
            try:
                anonymous.start(timeout=15)
                with pytest.raises(SessionClosedRequireSaslError):
                    anonymous.create("/latest_producer_id_block", b"")
            finally:
                anonymous.stop()
                anonymous.close()

        owner = started(ensemble)
        other = started(ensemble, user="other")
        try:
            assert owner.exists("/latest_producer_id_block") is None
            # Another user of the ensemble, authenticated: it lists the root, and neither makes a node there (nor
            # in ZooKeeper's own, open to all as ZooKeeper makes them) nor removes one zkcoord made.
            owner.ensure_path(layout.CONSUMERS)
            assert sorted(other.get_children("/")) == ["consumers", "zookeeper"]
            for refused in (lambda: other.create("/latest_producer_id_block", b""),
                            lambda: other.create("/zookeeper/quota/consumers", b""),
                            lambda: other.delete(layout.CONSUMERS), lambda: other.set_acls("/", list(OPEN_ACL_UNSAFE))):
                with pytest.raises(NoAuthError):
                    refused()
            assert owner.exists(layout.CONSUMERS) is not None

            # What ZooKeeper keeps, a user's SCRAM credential among it, is this user's alone.
            password = tmp_path / "alice.password"
            write_private(password, "alice-secret\n")
            added = zkcoord("users", "add", "--zookeeper", ensemble.connect_string, *client_settings(up),
                            "--user", "alice", "--password-file", str(password))
            assert added.returncode == 0, added.stderr
        finally:
            owner.stop()
            other.stop()
        transaction_logs = list((ensemble.data_dir(1) / "version-2").glob("log.*"))
        assert any(b"stored_key" in log.read_bytes() for log in transaction_logs)
        for place, directories, files in os.walk(directory):
            for name in directories:
                assert mode(Path(place) / name) == 0o700, Path(place) / name
        assert mode(directory) == 0o700
        for private in [*(ensemble.data_dir(1) / "version-2").iterdir(), ensemble.log_path(1)]:
            assert mode(private) == 0o600, private

        # The four-letter words: those zkcoord's own checks send, and no others.
        port, tls = ensemble.client_port(1), ensemble._client_tls_context()
        for word in ("dump", "envi", "srst", "cons", "wchc", "mntr", "stat"):
            assert four_letter_word(port, word, tls=tls) == f"{word} is not executed because it is not in the " \
                                                             f"whitelist.\n"
        assert [s.mode for s in ensemble.status()] == ["standalone"]  # srvr and conf still answer
        assert zkcoord("zk", "status", "--dir", str(directory)).returncode == 0
    finally:
        zkcoord("zk", "down", "--dir", str(directory), "--purge")


def test_a_broker_refuses_nodes_others_may_change_and_leaves_them_as_they_are(sasl_tls, tmp_path):
    """Review finding: a broker adopted a /latest_producer_id_block
    an anonymous client had made, open to all, and wrote its blocks into it,
    so anyone could rewind it and have producer ids handed out twice. A node
    zkcoord would use that others may change, or a root others may make
    nodes in, is refused by name, and left as it is."""
    security = sasl_tls.client_security()
    owner = started(sasl_tls)
    rewound = layout.encode_producer_id_block(layout.ProducerIdBlock(0, 0, layout.PRODUCER_ID_BLOCK_SIZE - 1))

    def broker() -> subprocess.CompletedProcess:
        return zkcoord("broker", "--id", "9", "--zookeeper", sasl_tls.connect_string, "--port", "0",
                       "--data-dir", str(tmp_path / "data"), *command_line(security), timeout=30)

    try:
        # As a stranger leaves it where the root lets anyone make nodes (made here by zkcoord's principal,
        # the only one the root lets: the ACL is what counts).
        owner.create(layout.PRODUCER_ID_BLOCK_PATH, rewound, acl=list(OPEN_ACL_UNSAFE))
        refused = broker()
        assert refused.returncode == 1
        assert ("/latest_producer_id_block in ZooKeeper is not sasl:zkcoord's alone (world:anyone may write, "
                "create, delete, admin): what it holds may be anyone's, so zkcoord will not use it, and leaves it "
                "as it is") in refused.stderr, refused.stderr[-2000:]
        assert owner.get(layout.PRODUCER_ID_BLOCK_PATH)[0] == rewound
        assert owner.get_acls(layout.PRODUCER_ID_BLOCK_PATH)[0] == list(OPEN_ACL_UNSAFE)
        owner.delete(layout.PRODUCER_ID_BLOCK_PATH)

        # A root anyone may make nodes in: whatever zkcoord finds at the top could be planted.
        owner.set_acls("/", list(OPEN_ACL_UNSAFE))
        refused = broker()
        assert refused.returncode == 1
        assert ("the root of zkcoord's tree in ZooKeeper (its chroot, or / without one) is not sasl:zkcoord's "
                "alone (world:anyone may write, create, delete, admin)") in refused.stderr, refused.stderr[-2000:]
        secured = zkcoord("zk", "secure", "--zookeeper", sasl_tls.connect_string, *command_line(security))
        assert secured.returncode == 0, secured.stderr
        zk_client.check_adopted_nodes(owner, security)  # what a broker checks before it uses anything
    finally:
        owner.set_acls("/", owner.acl_for("/"))
        if owner.exists(layout.PRODUCER_ID_BLOCK_PATH) is not None:
            owner.delete(layout.PRODUCER_ID_BLOCK_PATH)
        owner.stop()


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
