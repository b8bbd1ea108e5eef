"""`zkcoord drill` as a user runs it: a short campaign of random faults on its
own local cluster must pass, bad arguments are refused before anything
starts, and Ctrl-C stops every process the drill started while keeping the
history gathered so far."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from zkcoord.drill.schedule import parse_kinds
from zkcoord.testing import LocalCluster, as_background_job, wait_until

SUMMARY = re.compile(r"faults \d+; lost \d+; duplicates \d+ \(planned \d+\); double ownership \d+ "
                     r"\(max \d+ ms\); offset regressions \d+; max time to whole \d+\.\d s")

# The short drill draws from every kind, the pauses past the session and the
# slow member included (they found double ownership before the lease rule of
# docs/DESIGN.md; that run is in bench/RESULTS.md), with a stock Kafka client
# among its members.
CI_KINDS = ",".join(parse_kinds("all"))  # every kind of the embedded data plane


def drill(*args: str, timeout: float = 60.0) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "zkcoord.cli", "drill", *args], capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)


def processes_under(directory: Path) -> dict[int, str]:
    """Running processes whose command line names ``directory`` (what the
    drill started there), by pid."""
    found = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if str(directory) in cmdline:
                found[int(entry.name)] = cmdline
    return found


def kill_processes_under(directory: Path) -> None:
    """kill -9 whatever a drill that failed left running in ``directory``
    (its servers and ZooKeeper nodes have sessions of their own)."""
    for pid in processes_under(directory):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def assert_a_stock_member_delivered(directory: Path) -> None:
    """The stock member took part: records delivered under a stock client's
    member id, which begins with its client id (zkcoord-consume-PID)."""
    delivered_by = {json.loads(line)["member"] for d in directory.glob("consumer-*")
                    for line in (d / "records.jsonl").read_text().splitlines() if line.endswith("}")}
    assert any(member.startswith("zkcoord-consume-") for member in delivered_by), delivered_by


@pytest.mark.timeout(600)
def test_a_short_drill_of_random_faults_passes(tmp_path):
    directory = tmp_path / "drill"
    result = drill("--faults", "12", "--seed", "20261123", "--kinds", CI_KINDS, "--stock-members", "1",
                   "--dir", str(directory), timeout=540)
    lines = result.stdout.strip().splitlines()
    assert lines and SUMMARY.fullmatch(lines[-1]), result.stdout[-3000:] + result.stderr[-3000:]
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-3000:]
    report = json.loads((directory / "report.json").read_text())
    assert report["ok"] and report["summary"] == lines[-1]
    assert len(report["faults"]) == 12 and report["produced"] > 1000
    assert (directory / "timeline.html").stat().st_size > 1000
    assert "PASS" in (directory / "report.txt").read_text()
    assert_a_stock_member_delivered(directory)
    assert processes_under(directory) == {}


@pytest.mark.timeout(300)
def test_a_big_group_joins_and_goes_without_breaking_an_invariant(tmp_path):
    # Seed 2 draws a crowd that leaves cleanly (a planned change), then one killed with -9.
    directory = tmp_path / "drill"
    result = drill("--faults", "2", "--seed", "2", "--kinds", "big-group", "--big-group-members", "120",
                   "--dir", str(directory), timeout=240)
    lines = result.stdout.strip().splitlines()
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-3000:]
    report = json.loads((directory / "report.json").read_text())
    assert report["ok"] and report["summary"] == lines[-1]
    faults = report["faults"]
    assert [(f["planned"], f["target"].endswith("all left cleanly")) for f in faults] == [(True, True),
                                                                                       (False, False)]
    assert all(f["target"].startswith("120 members from one process (120 registered") for f in faults), faults
    # The crowds' members took partitions and delivered: the checker judged them with the consumers.
    for index in (1, 2):
        crowd = directory / f"consumer-crowd-{index}"
        started = {json.loads(line)["member"] for line in (crowd / "events.jsonl").read_text().splitlines()}
        delivered = {json.loads(line)["member"] for line in (crowd / "records.jsonl").read_text().splitlines()
                     if line.endswith("}")}
        assert started and delivered and delivered <= started
    assert processes_under(directory) == {}


# The secured drill's faults: each one makes processes connect, sign in and
# be authorized again (servers, members, ZooKeeper sessions over TLS). Seed
# 20261141 draws six different ones of them.
SECURED_KINDS = ("coordinator-kill,standby-kill,consumer-kill,consumer-pause-long,coordinator-zk-expiry,"
                 "zk-quorum-loss,member-join,member-leave")


@pytest.mark.timeout(420)
def test_a_short_secured_drill_passes_and_leaves_no_secret_behind(tmp_path):
    directory = tmp_path / "drill"
    result = drill("--secure", "--faults", "6", "--seed", "20261141", "--kinds", SECURED_KINDS,
                   "--stock-members", "1", "--dir", str(directory), timeout=360)
    lines = result.stdout.strip().splitlines()
    assert lines and SUMMARY.fullmatch(lines[-1]), result.stdout[-3000:] + result.stderr[-3000:]
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-3000:]
    report = json.loads((directory / "report.json").read_text())
    assert report["ok"] and report["summary"] == lines[-1]
    assert report["settings"]["security"] != "none"
    faults = [f for f in report["faults"] if not f["note"].startswith("skipped")]
    assert len(faults) == 6 and len({f["kind"] for f in faults}) == 6, report["faults"]
    # Every layer was on: ZooKeeper's client and quorum ports over TLS...
    config = (directory / "zookeeper" / "node-1" / "zoo.cfg").read_text()
    assert "secureClientPort=" in config and "sslQuorum=true" in config
    # ... and every client of the brokers signed in as its own user.
    server_logs = "".join((d / "process.log").read_text() for d in directory.glob("server-*"))
    for user in ("drill-thin", "drill-stock", "drill-producer", "broker"):
        assert f"authenticated as User:{user} with SCRAM" in server_logs, user
    assert_a_stock_member_delivered(directory)
    # Keys and passwords went with the run; the history stays.
    left = [p.name for p in directory.rglob("*") if p.suffix in (".pem", ".password") or p.name == "jaas.conf"]
    assert left == [] and not (directory / "secrets").exists()
    assert processes_under(directory) == {}


@pytest.mark.parametrize("args, message", [
    (["--kinds", "consumer-kill,bogus"], "unknown fault kind"),
    (["--faults", "0"], "--faults must be at least 1"),
    (["--faults", "-2"], "--faults must be at least 1"),
    (["--consumers", "0"], "--consumers must be at least 1"),
    (["--big-group-members", "0"], "--big-group-members must be at least 1"),
    (["--big-group-members", "1001"], "--big-group-members must be at most 1000"),
    (["--consumers", "2", "--stock-members", "3"], "--stock-members (3) cannot exceed --consumers (2)"),
    (["--zookeeper", "127.0.0.1:1"], "both --zookeeper and --bootstrap"),
    (["--zookeeper", "127.0.0.1:1", "--bootstrap", "nonsense"], "not host:port"),
    (["--secure", "--zookeeper", "127.0.0.1:1", "--bootstrap", "127.0.0.1:1"],
     "--secure secures the drill's own cluster"),
])
def test_bad_arguments_are_refused_before_anything_starts(tmp_path, args, message):
    result = drill(*args, "--dir", str(tmp_path / "d"))
    assert result.returncode == 2 and message in result.stderr, result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "d").exists()


def test_an_unreachable_cluster_is_a_clear_error(tmp_path):
    result = drill("--zookeeper", "127.0.0.1:1", "--bootstrap", "127.0.0.1:1", "--kinds", "consumer-kill",
                   "--dir", str(tmp_path / "d"), timeout=120)
    assert result.returncode == 1 and "cannot reach ZooKeeper at 127.0.0.1:1" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr


def test_server_faults_are_skipped_against_a_cluster_the_drill_did_not_start(tmp_path):
    result = drill("--zookeeper", "127.0.0.1:1", "--bootstrap", "127.0.0.1:1", "--kinds", "coordinator-kill",
                   "--dir", str(tmp_path / "d"))
    assert result.returncode == 1
    assert "coordinator-kill: needs the drill's own cluster" in result.stderr, result.stderr


@pytest.mark.timeout(300)
def test_ctrl_c_stops_every_process_and_keeps_the_history(tmp_path):
    # Started as a shell's background job starts it, SIGINT ignored (as under
    # `make test &`): the drill must hear Ctrl-C whatever it inherited.
    directory = tmp_path / "drill"
    out = open(tmp_path / "out.txt", "w")
    proc = subprocess.Popen(as_background_job([sys.executable, "-m", "zkcoord.cli", "drill", "--faults", "50",
                                               "--seed", "5", "--kinds", "member-join,member-leave",
                                               "--dir", str(directory)]),
                            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        wait_until(lambda: "[fault 2/50]" in (tmp_path / "out.txt").read_text(), timeout=180,
                   message="the drill to reach its second fault")
        assert processes_under(directory), "the drill's processes should be running"
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=120) == 130
        text = (tmp_path / "out.txt").read_text()
        assert "interrupted" in text and SUMMARY.fullmatch(text.strip().splitlines()[-1]), text[-3000:]
        assert processes_under(directory) == {}
        assert "INTERRUPTED" in (directory / "report.txt").read_text()
        assert (directory / "produced.jsonl").stat().st_size > 0
        assert json.loads((directory / "report.json").read_text())["interrupted"] is True
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        out.close()
        kill_processes_under(directory)


@pytest.mark.timeout(300)
def test_a_drill_against_an_existing_cluster_breaks_only_its_own_consumers(zk_connect, tmp_path):
    with LocalCluster(zk_connect, tmp_path / "cluster", ("--zk-session-timeout-ms", "3000")) as cluster:
        cluster.start_servers(2)
        cluster.wait_for_coordinator()
        directory = tmp_path / "drill"
        result = drill("--zookeeper", zk_connect, "--bootstrap", ",".join(cluster.bootstrap), "--faults", "4",
                       "--seed", "3", "--consumers", "3", "--kinds", "consumer-kill,member-join,zk-node-kill",
                       "--dir", str(directory), timeout=240)
        lines = result.stdout.strip().splitlines()
        assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-3000:]
        assert "drill: skipping zk-node-kill: needs the drill's own cluster" in result.stdout
        report = json.loads((directory / "report.json").read_text())
        assert report["ok"] and report["summary"] == lines[-1]
        injected = [f for f in report["faults"] if not f["note"].startswith("skipped")]
        assert {f["kind"] for f in injected} <= {"consumer-kill", "member-join"} and injected
        assert all("needs the drill's own cluster" in f["note"] for f in report["faults"] if f not in injected)
        assert all(s.alive for s in cluster.servers.values())  # the drill left the servers alone
        assert processes_under(directory) == {}


@pytest.mark.timeout(300)
def test_a_drill_against_a_cluster_on_a_secured_zookeeper(tmp_path):
    from zkcoord.zk.ensemble import LocalEnsemble
    from zkcoord.zk.security import command_line

    ensemble = LocalEnsemble.create(tmp_path / "zk", nodes=1, tick_ms=250, auth="sasl", tls=True)
    try:
        ensemble.start(timeout=60)
        security = ensemble.client_security()
        with LocalCluster(ensemble.connect_string, tmp_path / "cluster", ("--zk-session-timeout-ms", "3000"),
                          zk_security=security) as cluster:
            cluster.start_servers(1)
            cluster.wait_for_coordinator()
            directory = tmp_path / "drill"
            args = ("--zookeeper", ensemble.connect_string, "--bootstrap", ",".join(cluster.bootstrap),
                    "--faults", "2", "--seed", "5", "--consumers", "2", "--kinds", "consumer-kill",
                    "--dir", str(directory))
            refused = drill(*args)  # without credentials: refused before anything starts
            assert refused.returncode != 0 and not directory.exists(), refused.stdout + refused.stderr
            result = drill(*args, *command_line(security), timeout=240)
            assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-3000:]
            report = json.loads((directory / "report.json").read_text())
            assert report["ok"], report
            assert (directory / "samples.jsonl").stat().st_size > 0  # the sampler read the secured ZooKeeper
            assert processes_under(directory) == {}
    finally:
        ensemble.destroy()
