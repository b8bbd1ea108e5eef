"""zkcoord on a ZooKeeper that authenticates with Kerberos (SASL GSSAPI), all
real: an MIT KDC of the ensemble's own, ZooKeeper logged in from its service
keytab, a `zkcoord server` with its broker and a `zkcoord consume` member
logged in from zkcoord's keytab, and the admin commands as a user runs them.
What is checked: the group runs; every node written belongs to zkcoord's
principal as ZooKeeper names it; a client without credentials gets no
session, another principal changes nothing; a wrong keytab, a principal the
KDC does not know, or no ticket at all is a clear error at once.

This process logs in once (GSSAPI's configuration is process-wide), as
zkcoord; every other identity is a `zkcoord` command of its own."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import time
from pathlib import Path
from typing import Iterator

import pytest
from kazoo.security import ACL, Id, Permissions

from tests.e2e.checks import assert_nodes_owned_by, run_a_group
from tests.e2e.conftest import SERVER_ARGS
from zkcoord.testing import LocalCluster, wait_until, zkcoord_command
from zkcoord.zk import client as zk_client
from zkcoord.zk import layout
from zkcoord.zk.ensemble import LocalEnsemble
from zkcoord.zk.kerberos import LocalRealm
from zkcoord.zk.nodes import read_offsets
from zkcoord.zk.security import ZooKeeperAuthError, command_line

FAST_S = 10  # a refusal comes well before the 15 s connection time-out


def zkcoord(*args: str, env: dict | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    """A `zkcoord` command with only the Kerberos environment given: not the keytab this process logged in with."""
    own = {name: value for name, value in os.environ.items() if not name.startswith("KRB5")}
    return subprocess.run(zkcoord_command(*args), capture_output=True, text=True, timeout=timeout,
                          env={**own, **(env or {})})


@pytest.fixture(scope="module")
def kerberos(tmp_path_factory) -> Iterator[LocalEnsemble]:
    ensemble = LocalEnsemble.create(tmp_path_factory.mktemp("zk-kerberos"), nodes=1, tick_ms=250, auth="sasl",
                                    sasl_mechanism="GSSAPI", users=("zkcoord", "other"))
    try:
        ensemble.start(timeout=60)
        yield ensemble
    finally:
        ensemble.destroy()


def test_a_group_runs_on_kerberos_and_what_it_wrote_only_its_principal_may_change(kerberos, tmp_path):
    security = kerberos.client_security()
    assert security.zk_user == "zkcoord@ZKCOORD.TEST"
    cluster = LocalCluster(kerberos.connect_string, tmp_path / "cluster", SERVER_ARGS, zk_security=security)
    try:
        run_a_group(cluster)
        # ZooKeeper's default names a Kerberos principal in full, realm and all.
        assert_nodes_owned_by(cluster.zk, ACL(Permissions.ALL, Id("sasl", "zkcoord@ZKCOORD.TEST")))

        # Without credentials: no session.
        anonymous = zk_client.open_client(kerberos.connect_string, kerberos.client_security(user=""))
        with pytest.raises(ZooKeeperAuthError, match="requires every session to authenticate"):
            zk_client.start(anonymous, timeout=15)
        anonymous.close()

        # Another principal of the realm, logged in as well, may not take zkcoord's nodes either.
        other = command_line(kerberos.client_security(user="other"))
        taken = zkcoord("zk", "secure", "--zookeeper", kerberos.connect_string, "--path", layout.ZKCOORD_ROOT,
                        *other)
        assert taken.returncode == 1
        assert ("ZooKeeper refused to set the ACLs of /zkcoord: sasl:other@ZKCOORD.TEST may not administer "
                "it") in taken.stderr, taken.stderr
        server = zkcoord("server", "--id", "7", "--zookeeper", kerberos.connect_string, "--no-broker", *other)
        assert server.returncode != 0
        assert ("/zkcoord in ZooKeeper belongs to another principal, not to sasl:other@ZKCOORD.TEST"
                in server.stderr), server.stderr[-2000:]
        assert read_offsets(cluster.zk, "g") == {("t", 0): 20, ("t", 1): 20}
    finally:
        cluster.close()


def test_a_ticket_the_operator_got_with_kinit_serves_without_a_keytab(kerberos, tmp_path):
    realm = kerberos.realm
    cache = f"FILE:{tmp_path / 'ccache'}"
    kinit = subprocess.run(["kinit", "-kt", str(kerberos.keytab("zkcoord")), "-c", cache, "zkcoord@ZKCOORD.TEST"],
                           env=realm.env(), capture_output=True, text=True, timeout=30)
    assert kinit.returncode == 0, kinit.stderr
    from_cache = command_line(kerberos.client_security(zk_keytab=None))
    assert "--zk-keytab" not in from_cache
    listed = zkcoord("groups", "list", "--zookeeper", kerberos.connect_string, *from_cache,
                     env={"KRB5CCNAME": cache})
    assert listed.returncode == 0, listed.stderr


def test_wrong_unknown_or_missing_kerberos_credentials_are_clear_errors_at_once(kerberos, tmp_path):
    realm = kerberos.realm
    good = kerberos.client_security()
    realm.add_principal("gone")
    realm.remove_principal("gone")  # its keytab outlives it
    empty_cache = {"KRB5CCNAME": f"FILE:{tmp_path / 'no-ccache'}"}
    who = "no Kerberos ticket for ZooKeeper at 127.0.0.1 (zookeeper/127.0.0.1) as"
    for security, says in [
        (dataclasses.replace(good, zk_keytab=kerberos.keytab("other")),
         f"{who} zkcoord@ZKCOORD.TEST from the keytab {kerberos.keytab('other')} (does it hold the principal's "
         f"key?): Can't find client principal zkcoord@ZKCOORD.TEST"),
        (dataclasses.replace(good, zk_user="gone@ZKCOORD.TEST", zk_keytab=realm.keytab("gone")),
         f"{who} gone@ZKCOORD.TEST from the keytab {realm.keytab('gone')} (does it hold the principal's key?): "
         f"Client 'gone@ZKCOORD.TEST' not found in Kerberos database"),
        (dataclasses.replace(good, zk_keytab=None),
         f"{who} zkcoord@ZKCOORD.TEST from the ticket cache (run kinit, or give --zk-keytab)"),
        (dataclasses.replace(good, zk_keytab=tmp_path / "missing.keytab"),
         f"cannot read the keytab {tmp_path / 'missing.keytab'}: No such file or directory"),
        (dataclasses.replace(good, zk_krb5_conf=tmp_path / "missing.conf"),
         f"cannot read the Kerberos configuration {tmp_path / 'missing.conf'}: No such file or directory"),
    ]:
        began = time.monotonic()
        bad = zkcoord("groups", "list", "--zookeeper", kerberos.connect_string, *command_line(security),
                      env=empty_cache)
        assert bad.returncode == 1 and says in bad.stderr, bad.stderr
        assert "Traceback" not in bad.stderr
        assert time.monotonic() - began < FAST_S


def client_settings(up: subprocess.CompletedProcess) -> list[str]:
    line = next(line for line in up.stdout.splitlines() if line.startswith("client settings: "))
    return line.removeprefix("client settings: ").split()


def running(pid: int, program: bytes) -> bool:
    try:
        return program in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def test_zk_up_with_gssapi_brings_its_own_kdc_and_zk_down_stops_it(tmp_path):
    directory = tmp_path / "zk"
    up = zkcoord("zk", "up", "--dir", str(directory), "--nodes", "1", "--tick-ms", "250", "--auth", "sasl",
                 "--sasl-mechanism", "GSSAPI")
    try:
        assert up.returncode == 0, up.stderr
        ensemble = LocalEnsemble.load(directory)
        kdc = ensemble.realm.pid()
        assert kdc is not None and running(kdc, b"krb5kdc")
        settings = client_settings(up)
        assert settings == command_line(ensemble.client_security())
        assert "--zk-sasl-mechanism GSSAPI" in " ".join(settings)

        # Every session authenticates, and the root is zkcoord's principal's (zk secure finds it so).
        anonymous = zk_client.open_client(ensemble.connect_string, ensemble.client_security(user=""))
        with pytest.raises(ZooKeeperAuthError, match="requires every session to authenticate"):
            zk_client.start(anonymous, timeout=15)
        anonymous.close()
        secured = zkcoord("zk", "secure", "--zookeeper", ensemble.connect_string, *settings)
        assert secured.returncode == 0 and "ACLs set on 1 node(s) under /" in secured.stdout, secured.stderr
    finally:
        down = zkcoord("zk", "down", "--dir", str(directory), "--purge")
    assert down.returncode == 0, down.stderr
    assert not directory.exists()
    wait_until(lambda: not running(kdc, b"krb5kdc"), timeout=10, message="the KDC stopped")


def test_a_realm_refuses_a_principal_name_it_cannot_pass_to_kadmin(tmp_path):
    from zkcoord.errors import ConfigError

    realm = LocalRealm.create(tmp_path / "realm")
    with pytest.raises(ConfigError, match="without the realm"):
        realm.add_principal("zkcoord@ELSEWHERE")
