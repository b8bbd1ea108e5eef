"""The local ensemble and the fault injection that later tiers rely on, on real ZooKeeper."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import uuid

import pytest
from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import SessionExpiredError

from zkcoord.testing import expire_session
from zkcoord.testing import wait_until
from zkcoord.errors import ConfigError, EnsembleError
from zkcoord.zk.ensemble import LocalEnsemble


def _client(hosts: str, **kwargs) -> KazooClient:
    client = KazooClient(hosts=hosts, **kwargs)
    client.start(timeout=15)
    return client


def test_shared_ensemble_has_one_leader_and_two_followers(zk_ensemble):
    modes = sorted(s.mode for s in zk_ensemble.status())
    assert modes == ["follower", "follower", "leader"]


def test_writes_through_one_node_are_read_through_every_other(zk_ensemble, zk_connect):
    chroot = zk_connect[zk_connect.index("/"):]
    first = _client(f"127.0.0.1:{zk_ensemble.client_port(1)}{chroot}")
    try:
        first.create("/written", b"through node 1")
    finally:
        first.stop()
    for node in (2, 3):
        reader = _client(f"127.0.0.1:{zk_ensemble.client_port(node)}{chroot}")
        try:
            reader.sync("/written")
            assert reader.get("/written")[0] == b"through node 1"
        finally:
            reader.stop()


def test_each_test_gets_an_empty_chroot(zk):
    assert zk.get_children("/") == []
    zk.create("/mine", b"x")
    assert zk.get_children("/") == ["mine"]


@pytest.mark.destructive
def test_killing_one_node_keeps_quorum_and_the_node_rejoins(own_ensemble):
    client = _client(own_ensemble.connect_string)
    try:
        client.create("/before", b"1")
        own_ensemble.kill_node(1)
        assert own_ensemble.status()[0].mode is None
        own_ensemble.wait_for_quorum(timeout=30)
        client.retry(client.create, "/during", b"2")
        own_ensemble.start_node(1)
        own_ensemble.wait_until_whole(timeout=30)
        rejoined = _client(f"127.0.0.1:{own_ensemble.client_port(1)}")
        try:
            rejoined.sync("/during")
            assert rejoined.get("/before")[0] == b"1"
            assert rejoined.get("/during")[0] == b"2"
        finally:
            rejoined.stop()
    finally:
        client.stop()


@pytest.mark.destructive
def test_losing_quorum_stops_writes_and_regaining_it_keeps_the_data(own_ensemble):
    client = _client(own_ensemble.connect_string, timeout=4.0)
    states = []
    client.add_listener(states.append)
    try:
        client.create("/kept", b"v")
        own_ensemble.kill_node(1)
        own_ensemble.kill_node(2)
        wait_until(lambda: not own_ensemble.has_quorum(), timeout=10, message="quorum lost")
        wait_until(lambda: KazooState.SUSPENDED in states, timeout=15, message="client suspended")
        # No quorum: the write cannot be acknowledged. (ZAB may still commit it
        # once the quorum is back, if the old leader had logged the proposal,
        # so its later presence is not checked: only that it did not succeed now.)
        pending = client.create_async("/unacknowledged", b"x")
        with pytest.raises(Exception):
            pending.get(timeout=3)
        own_ensemble.start_node(1)
        own_ensemble.start_node(2)
        own_ensemble.wait_until_whole(timeout=30)
        check = _client(own_ensemble.connect_string)
        try:
            assert check.get("/kept")[0] == b"v"
            check.create("/after", b"w")
        finally:
            check.stop()
    finally:
        client.stop()


def test_expire_session_really_expires_it(zk_connect):
    client = _client(zk_connect)
    lost = threading.Event()
    client.add_listener(lambda state: lost.set() if state == KazooState.LOST else None)
    try:
        client.create("/ephemeral", b"", ephemeral=True)
        old_session = client.client_id[0]
        expire_session(client, zk_connect)
        observer = _client(zk_connect)
        try:
            wait_until(lambda: observer.exists("/ephemeral") is None, timeout=10, message="ephemeral gone")
        finally:
            observer.stop()
        # kazoo learns of the expiry when it next talks to the server
        wait_until(lambda: lost.is_set() or _touch_fails(client), timeout=15, message="client sees expiry")
        wait_until(lambda: client.connected and client.client_id[0] != old_session, timeout=15,
                   message="client on a new session")
    finally:
        client.stop()


def _touch_fails(client: KazooClient) -> bool:
    try:
        client.exists("/")
        return False
    except SessionExpiredError:
        return True


def _recording_client(hosts: str, timeout: float) -> tuple[KazooClient, list]:
    client = KazooClient(hosts=hosts, timeout=timeout)
    states: list = []
    client.add_listener(states.append)
    client.start(timeout=15)
    return client, states


def test_dropped_connection_reconnects_with_the_same_session(zk_proxies):
    proxies = zk_proxies
    client, states = _recording_client(proxies.connect_string, timeout=10.0)
    try:
        client.create("/mine", b"", ephemeral=True)
        session = client.client_id[0]
        proxies.drop()
        wait_until(lambda: KazooState.SUSPENDED in states, timeout=10, message="client suspended")
        wait_until(lambda: client.connected, timeout=15, message="client reconnected")
        assert client.client_id[0] == session
        assert client.exists("/mine") is not None
        assert KazooState.LOST not in states
    finally:
        client.stop()


def test_partition_longer_than_the_session_timeout_expires_the_session(zk_proxies, zk_connect):
    proxies = zk_proxies
    client, states = _recording_client(proxies.connect_string, timeout=2.0)
    observer = _client(zk_connect)
    try:
        client.create("/mine", b"", ephemeral=True)
        proxies.cut()
        wait_until(lambda: KazooState.SUSPENDED in states, timeout=10, message="client suspended")
        wait_until(lambda: observer.exists("/mine") is None, timeout=15, message="server expired the session")
        proxies.heal()
        wait_until(lambda: KazooState.LOST in states, timeout=20, message="client told its session is lost")
    finally:
        observer.stop()
        client.stop()


def test_bad_sizes_and_ports_are_config_errors(tmp_path):
    with pytest.raises(ConfigError):
        LocalEnsemble.create(tmp_path / "a", nodes=2)
    with pytest.raises(ConfigError):
        LocalEnsemble.create(tmp_path / "b", nodes=3, base_port=80)
    with pytest.raises(EnsembleError):
        LocalEnsemble.load(tmp_path / "nothing-here")
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "ensemble.json").write_text("{not json")
    with pytest.raises(EnsembleError):
        LocalEnsemble.load(tmp_path / "c")


def _zkcoord(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "zkcoord.cli", *args], capture_output=True, text=True, timeout=120)


def test_cli_up_status_kill_start_down(tmp_path):
    directory = str(tmp_path / "ens")
    up = _zkcoord("zk", "up", "--nodes", "3", "--dir", directory)
    assert up.returncode == 0, up.stderr
    connect = up.stdout.strip().splitlines()[-1]
    ensemble = LocalEnsemble.load(directory)
    try:
        assert connect == ensemble.connect_string
        assert sorted(s.mode for s in ensemble.status()) == ["follower", "follower", "leader"]
        killed = _zkcoord("zk", "kill", "--dir", directory, "--node", "2")
        assert killed.returncode == 0, killed.stderr
        assert LocalEnsemble.load(directory).status()[1].mode is None
        started = _zkcoord("zk", "start", "--dir", directory, "--node", "2")
        assert started.returncode == 0, started.stderr
        wait_until(LocalEnsemble.load(directory).is_whole, timeout=30, message="node 2 back")
        again = _zkcoord("zk", "up", "--nodes", "3", "--dir", directory)
        assert again.returncode == 1 and "already holds a running ensemble" in again.stderr
    finally:
        down = _zkcoord("zk", "down", "--dir", directory)
    assert down.returncode == 0, down.stderr
    assert LocalEnsemble.load(directory).running_nodes() == []


def _holds(connect: str, path: str) -> bool:
    client = _client(connect)
    try:
        return client.exists(path) is not None
    finally:
        client.stop()


def _apart(first: str, second: str) -> bool:
    """Whether two connect strings reach two different ensembles: a node
    written through one is absent from the other."""
    path = f"/written-{uuid.uuid4().hex[:8]}"
    client = _client(first)
    try:
        client.create(path, b"")
    finally:
        client.stop()
    return not _holds(second, path)


def test_two_ensembles_started_at_once_come_up_on_ports_of_their_own(tmp_path):
    directories = [tmp_path / "a", tmp_path / "b"]
    ups = [subprocess.Popen([sys.executable, "-m", "zkcoord.cli", "zk", "up", "--nodes", "1", "--tick-ms", "250",
                             "--dir", str(d)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
           for d in directories]
    try:
        outputs = [up.communicate(timeout=120) for up in ups]
        assert [up.returncode for up in ups] == [0, 0], outputs
        connects = [out.strip().splitlines()[-1] for out, _ in outputs]
        assert connects == [LocalEnsemble.load(d).connect_string for d in directories]
        assert connects[0] != connects[1]
        assert _apart(*connects) and _apart(*reversed(connects))
    finally:
        for up in ups:
            if up.poll() is None:
                up.kill()
                up.communicate()
        for directory in directories:
            if (directory / "ensemble.json").exists():
                LocalEnsemble.load(directory).stop()


def test_a_node_whose_client_port_another_zookeeper_holds_is_never_reported_ready(tmp_path):
    other = LocalEnsemble.create(tmp_path / "other", nodes=1, tick_ms=250)
    try:
        other.start(timeout=60)
        port = other.client_port(1)
        up = _zkcoord("zk", "up", "--nodes", "1", "--tick-ms", "250", "--base-port", str(port),
                      "--dir", str(tmp_path / "mine"))
        assert up.returncode == 1, up.stdout + up.stderr
        assert f"node 1 of the ensemble in {tmp_path / 'mine'} could not bind 127.0.0.1:{port}: another " \
               f"process holds it" in up.stderr
        assert f"127.0.0.1:{port}" not in up.stdout
        mine = LocalEnsemble.load(tmp_path / "mine")
        assert mine.running_nodes() == []
        assert [(s.mode, s.foreign) for s in mine.status()] == [(None, True)]  # the answer there is not its own
        assert not mine.is_whole()
    finally:
        other.stop()
        if (tmp_path / "mine" / "ensemble.json").exists():
            LocalEnsemble.load(tmp_path / "mine").stop()


def test_an_ensemble_whose_chosen_ports_were_taken_before_it_started_moves_to_free_ones(tmp_path):
    mine = LocalEnsemble.create(tmp_path / "mine", nodes=1, tick_ms=250)
    chosen = mine.base_port
    # Another ensemble takes the block between the choice and the start, as a
    # second `zk up` choosing at the same moment would.
    other = LocalEnsemble.create(tmp_path / "other", nodes=1, tick_ms=250, base_port=chosen)
    try:
        other.start(timeout=60)
        mine.start(timeout=60)
        assert mine.base_port != chosen
        assert LocalEnsemble.load(tmp_path / "mine").connect_string == mine.connect_string
        assert [s.mode for s in mine.status()] == ["standalone"]
        assert _apart(mine.connect_string, other.connect_string)
        assert _apart(other.connect_string, mine.connect_string)
    finally:
        mine.stop()
        other.stop()


def test_a_node_that_cannot_bind_its_election_port_is_not_counted_as_serving(tmp_path):
    # Such a node does not exit at once: it retries for seconds, long enough
    # to be elected into a quorum that then loses it.
    ensemble = LocalEnsemble.create(tmp_path / "zk", nodes=3, tick_ms=250)
    chosen, election_port = ensemble.base_port, ensemble.node_ports(3)[2]
    try:
        with socket.create_server(("127.0.0.1", election_port)):
            ensemble.start(timeout=60)
            assert ensemble.base_port != chosen
            assert election_port not in [port for node in ensemble.node_ids for port in ensemble.node_ports(node)]
            assert sorted(s.mode for s in ensemble.status()) == ["follower", "follower", "leader"]
    finally:
        ensemble.stop()


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["zk", "up", "--nodes", "4", "--dir", "x"], "invalid choice"),
        (["zk", "up", "--nodes", "three", "--dir", "x"], "invalid int value"),
        (["zk", "up", "--nodes", "3"], "--dir"),
        (["zk", "kill", "--dir", "x"], "--node"),
        (["zk", "up", "--dir", "x", "--base-port", "70000"], "base port"),
        (["zk", "frobnicate"], "invalid choice"),
    ],
)
def test_cli_rejects_bad_arguments(args, fragment, tmp_path):
    args = [str(tmp_path / a) if a == "x" else a for a in args]
    result = _zkcoord(*args)
    assert result.returncode == 2
    assert fragment in result.stderr


def test_cli_kill_of_a_node_outside_the_ensemble_is_refused(tmp_path):
    LocalEnsemble.create(tmp_path / "e", nodes=1)
    result = _zkcoord("zk", "kill", "--dir", str(tmp_path / "e"), "--node", "4")
    assert result.returncode == 2 and "not in this 1-node ensemble" in result.stderr


def test_a_tls_ensemble_serves_tls_only_and_its_nodes_talk_tls_among_themselves(tmp_path):
    import ssl

    from zkcoord.zk import client as zk_client
    from zkcoord.zk.probes import four_letter_word

    ensemble = LocalEnsemble.create(tmp_path / "zk", nodes=3, tick_ms=250, tls=True)
    try:
        ensemble.start(timeout=60)
        assert sorted(s.mode for s in ensemble.status()) == ["follower", "follower", "leader"]  # asked over TLS
        assert not (four_letter_word(ensemble.client_port(1), "srvr") or "").startswith("Zookeeper version")
        # With no users, the certificate is what admits a client: without one, not even a four-letter word.
        no_certificate = ssl.create_default_context(cafile=str(ensemble.client_security().zk_ca_file))
        no_certificate.check_hostname = False
        assert four_letter_word(ensemble.client_port(1), "srvr", tls=no_certificate) is None
        written = zk_client.open_client(f"127.0.0.1:{ensemble.client_port(1)}", ensemble.client_security())
        zk_client.start(written, timeout=15)
        read = zk_client.open_client(f"127.0.0.1:{ensemble.client_port(3)}", ensemble.client_security())
        zk_client.start(read, timeout=15)
        try:
            written.create("/over-tls", b"1")
            read.sync("/over-tls")
            assert read.get("/over-tls")[0] == b"1"
        finally:
            written.stop()
            read.stop()
        for node in ensemble.node_ids:
            assert "Using TLS encrypted quorum communication" in ensemble.log_path(node).read_text()
    finally:
        ensemble.destroy()


def test_a_secured_ensemble_is_laid_out_with_private_credentials_and_remembered(tmp_path):
    import stat

    ensemble = LocalEnsemble.create(tmp_path / "zk", nodes=3, auth="sasl", users=("zkcoord", "ops"), tls=True)
    config = ensemble.config_path(2).read_text().splitlines()
    assert f"secureClientPort={ensemble.client_port(2)}" in config
    assert not any(line.startswith("clientPort=") for line in config)  # nothing left in plaintext
    assert "authProvider.1=org.apache.zookeeper.server.auth.SASLAuthenticationProvider" in config
    assert {"enforce.auth.enabled=true", "enforce.auth.schemes=sasl", "ssl.clientAuth=want",
            "4lw.commands.whitelist=srvr,conf"} <= set(config)  # each session authenticates, by SASL
    assert "sslQuorum=true" in config
    jaas = ensemble.jaas_path.read_text()
    for user in ("zkcoord", "ops"):
        password = ensemble.password_file(user).read_text().strip()
        assert len(password) >= 20 and f'user_{user}="{password}"' in jaas
        assert stat.S_IMODE(ensemble.password_file(user).stat().st_mode) == 0o600
    assert stat.S_IMODE(ensemble.jaas_path.stat().st_mode) == 0o600
    assert f"-Djava.security.auth.login.config={ensemble.jaas_path}" in ensemble._java_command(1)

    again = LocalEnsemble.load(tmp_path / "zk")
    assert (again.auth, again.users, again.tls) == ("sasl", ("zkcoord", "ops"), True)
    assert again.client_security("ops").zk_user == "ops"
    with pytest.raises(ConfigError, match="user 'nobody' is not one of this ensemble's"):
        again.client_security("nobody")
    with pytest.raises(ConfigError, match="a user name is 1 to 64 letters"):
        LocalEnsemble.create(tmp_path / "bad", nodes=1, auth="sasl", users=('x" y',))

    plain = LocalEnsemble.create(tmp_path / "plain", nodes=1)
    assert (plain.auth, plain.users, plain.tls) == ("none", (), False)
    assert f"clientPort={plain.client_port(1)}" in plain.config_path(1).read_text().splitlines()


def test_a_node_s_heap_is_set_and_remembered(tmp_path):
    # The tests' ensembles are small; a benchmark of a big group asks for
    # ZooKeeper's own default, which it needs (bench/bench_big_group.py).
    assert "-Xmx256m" in LocalEnsemble.create(tmp_path / "small", nodes=1)._java_command(1)
    LocalEnsemble.create(tmp_path / "big", nodes=1, heap_mb=1000)
    assert "-Xmx1000m" in LocalEnsemble.load(tmp_path / "big")._java_command(1)
    with pytest.raises(ConfigError):
        LocalEnsemble.create(tmp_path / "tiny", nodes=1, heap_mb=16)
