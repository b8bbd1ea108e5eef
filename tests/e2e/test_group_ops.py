"""`zkcoord groups describe` and `zkcoord groups reset-offsets` against real
processes: ZooKeeper, zkcoord servers with their brokers, `zkcoord consume`
members, and the commands run as a user runs them."""

from __future__ import annotations

import json
import subprocess

from confluent_kafka import Producer

from tests.e2e.checks import wait_whole
from tests.e2e.conftest import SERVER_ARGS
from zkcoord.admin.groups import read_history
from zkcoord.admin.topics import create_topic
from zkcoord.testing import partitions_of, wait_until, zkcoord_command
from zkcoord.zk.nodes import read_group_state, read_offsets

SETTLE_S = 30
OLD_MS, NEW_MS = 1_000_000_000_000, 1_700_000_000_000  # 2001 and 2023
BETWEEN = "2010-01-01T00:00:00Z"


def zkcoord(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(zkcoord_command(*args), capture_output=True, text=True, timeout=180)


def describe(zk_connect: str, *extra: str) -> subprocess.CompletedProcess:
    return zkcoord("groups", "describe", "--zookeeper", zk_connect, "--group", "g", *extra)


def described(zk_connect: str) -> dict:
    result = describe(zk_connect, "--output", "json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def produce_at(cluster, topic: str, partitions: int, count: int, timestamp_ms: int) -> None:
    """``count`` records to each partition, all stamped ``timestamp_ms``; every one acknowledged."""
    producer = Producer({"bootstrap.servers": cluster.broker_list, "acks": "all", "log_level": 3})
    failures = []
    for partition in range(partitions):
        for n in range(count):
            producer.produce(topic, value=f"{partition}-{n}".encode(), partition=partition, timestamp=timestamp_ms,
                             on_delivery=lambda err, _msg: err is not None and failures.append(err))
    assert producer.flush(30) == 0 and not failures, failures


def first_offsets(consumer) -> dict:
    """The first offset ``consumer`` delivered of each partition."""
    first = {}
    for record in consumer.records():
        first.setdefault((record["topic"], record["partition"]), record["offset"])
    return first


def test_describe_shows_a_group_its_history_and_empty_after_the_last_member_leaves(cluster_factory, zk, zk_connect):
    cluster = cluster_factory(1)
    create_topic(zk, "t", 4)
    consumer = cluster.add_consumer("g", topics=["t"])
    wait_whole(zk, "g", [consumer], partitions_of(zk, ["t"]), timeout=SETTLE_S)
    produce_at(cluster, "t", 4, 5, NEW_MS)
    wait_until(lambda: len(consumer.records()) >= 20, timeout=SETTLE_S, message="20 deliveries")

    member = consumer.status()["consumer_id"]
    view = wait_until(lambda: (v := described(zk_connect))["state"] == "Stable" and v, timeout=SETTLE_S,
                      message="the group described stable")
    assert [m["consumer_id"] for m in view["members"]] == [member]
    assert view["members"][0]["host"] == "127.0.0.1" and len(view["members"][0]["partitions"]) == 4
    assert {(r["consumer_id"], r["host"]) for r in view["partitions"]} == {(member, "127.0.0.1")}
    assert view["coordinator"]["server"] == str(cluster.coordinator_id()) and view["coordinator"]["slot"] == 0
    table = [line.split() for line in describe(zk_connect).stdout.splitlines()]
    header = table.index(["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID",
                          "HOST", "CLIENT-ID"])
    client_id = view["members"][0]["client_id"]
    assert client_id == "zkcoord-consumer"  # the thin consumer's default, told at registration
    assert ["g", "t", "0", "5", "5", "0", member, "/127.0.0.1", client_id] in table[header + 1:]

    # A member joins, then is killed -9: the history says so, with each round's reason.
    crasher = cluster.add_consumer("g", topics=["t"])
    wait_whole(zk, "g", [consumer, crasher], partitions_of(zk, ["t"]), timeout=SETTLE_S)
    crashed = crasher.status()["consumer_id"]
    joined = wait_until(lambda: next((r for r in read_history(zk, "g") if r["outcome"] == "completed"
                                      and r["trigger"] == f"member {crashed} joined"), None),
                        timeout=SETTLE_S, message="the join's round recorded")
    assert joined["members"] == 2 and joined["moved"] == 2 and joined["paused"] == 2
    crasher.kill()
    wait_whole(zk, "g", [consumer], partitions_of(zk, ["t"]), timeout=SETTLE_S)
    wait_until(lambda: (h := read_history(zk, "g")) and h[-1]["members"] == 1, timeout=SETTLE_S,
               message="the round after the kill recorded")
    history = described(zk_connect)["history"]  # as the command shows it
    assert history[0]["trigger"] == f"member {member} joined" and history[0]["generation"] == 1
    left = next(r for r in history if r["trigger"].startswith(f"member {crashed} left: its connection closed"))
    assert left["generation"] > joined["generation"] and history[-1]["moved"] == 2
    assert all(r["epoch"] == view["coordinator"]["epoch"] for r in history)
    text = describe(zk_connect, "--history").stdout.splitlines()
    header = text.index(next(line for line in text if line.startswith("STARTED ")))
    assert f"member {crashed} left: its connection closed" in text[header + 1]  # newest first
    assert any(f"member {crashed} joined" in line for line in text[header + 1:])

    consumer.terminate()  # a clean leave: its offsets are committed, then it goes
    view = wait_until(lambda: (v := described(zk_connect))["state"] == "Empty" and v, timeout=SETTLE_S,
                      message="the group described empty")
    assert view["members"] == [] and all(r["consumer_id"] is None for r in view["partitions"])
    assert [r["current_offset"] for r in view["partitions"]] == [5, 5, 5, 5]
    text = describe(zk_connect).stdout
    assert "Consumer group 'g' has no active members." in text and member not in text
    state = describe(zk_connect, "--state").stdout.splitlines()
    assert state[-1].split()[-2:] == ["Empty", "0"]
    assert "has no active members" in describe(zk_connect, "--members").stdout


def test_reset_offsets_moves_a_groups_offsets_and_its_next_owner_starts_there(cluster_factory, zk, zk_connect):
    # Retention off: the records are stamped years ago, so the broker's first
    # retention check (a minute in, which a loaded machine reaches before the
    # test ends) would delete them and move the log's start past the offsets
    # the test resets to.
    cluster = cluster_factory(2, server_args=(*SERVER_ARGS, "--retention-ms", "-1"))
    create_topic(zk, "t", 2)
    produce_at(cluster, "t", 2, 30, OLD_MS)  # offsets 0..29 of each partition
    produce_at(cluster, "t", 2, 20, NEW_MS)  # offsets 30..49
    first = cluster.add_consumer("g", topics=["t"])
    wait_until(lambda: len(first.records()) >= 100, timeout=SETTLE_S, message="100 deliveries")
    first.terminate()
    wait_until(lambda: described(zk_connect)["state"] == "Empty", timeout=SETTLE_S, message="the group empty")
    t0, t1 = ("t", 0), ("t", 1)
    assert read_offsets(zk, "g") == {t0: 50, t1: 50}
    bootstrap = ",".join(cluster.bootstrap)

    def reset(*args: str, where=("--zookeeper", zk_connect)) -> subprocess.CompletedProcess:
        return zkcoord("groups", "reset-offsets", *where, "--group", "g", *args)

    # A dry run prints the plan as Kafka's tool does, and changes nothing.
    dry = reset("--all-topics", "--to-earliest")
    assert dry.returncode == 0, dry.stderr
    assert [line.split() for line in dry.stdout.splitlines()] == [
        ["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"], ["g", "t", "0", "0"], ["g", "t", "1", "0"]]
    assert read_offsets(zk, "g") == {t0: 50, t1: 50}

    # Bad arguments: exit 2, a clear message, nothing changed.
    for args, says in [(("--topic", "nope", "--to-earliest", "--execute"), "no topic 'nope'"),
                       (("--topic", "t:2", "--to-earliest", "--execute"), "no partition 2"),
                       (("--topic", "t", "--to-earliest", "--to-latest", "--execute"), "not allowed with"),
                       (("--topic", "t", "--to-datetime", "yesterday", "--execute"), "not a date"),
                       (("--topic", "t", "--by-duration", "3 days", "--execute"), "not a duration")]:
        bad = reset(*args)
        assert bad.returncode == 2 and says in bad.stderr, (args, bad.stderr)
    assert read_offsets(zk, "g") == {t0: 50, t1: 50}

    # Executed, through the coordinator found either way: shift, time, offset.
    shifted = reset("--topic", "t", "--shift-by", "-10", "--execute", where=("--bootstrap", bootstrap))
    assert shifted.returncode == 0, shifted.stderr
    assert read_offsets(zk, "g") == {t0: 40, t1: 40}
    assert reset("--topic", "t", "--to-datetime", BETWEEN, "--execute").returncode == 0
    assert read_offsets(zk, "g") == {t0: 30, t1: 30}  # the first record stamped after it
    assert reset("--topic", "t:0", "--to-offset", "5", "--execute").returncode == 0
    assert read_offsets(zk, "g") == {t0: 5, t1: 30}

    # The next owner starts exactly at the new offsets.
    second = cluster.add_consumer("g", topics=["t"])
    wait_until(lambda: len(second.records()) >= 45 + 20, timeout=SETTLE_S, message="the rest delivered")
    assert first_offsets(second) == {t0: 5, t1: 30}

    # While it is a member: refused, naming it; with --force, carried out on the running member.
    member = second.status()["consumer_id"]
    busy = reset("--topic", "t:1", "--to-offset", "0", "--execute")
    assert busy.returncode == 1 and member in busy.stderr
    wait_until(lambda: read_offsets(zk, "g") == {t0: 50, t1: 50}, timeout=SETTLE_S, message="offsets caught up")
    forced = reset("--topic", "t:1", "--to-offset", "0", "--execute", "--force")
    assert forced.returncode == 0, forced.stderr
    wait_until(lambda: len(second.records()) >= 65 + 50, timeout=SETTLE_S, message="t-1 delivered again")
    again = [r["offset"] for r in second.records()[65:] if r["partition"] == 1]
    assert again == list(range(50)) and second.alive


def test_describe_members_asks_the_coordinator_what_each_member_is_and_how_long_its_lease_runs(
        cluster_factory, zk, zk_connect):
    """A thin consumer and a stock librdkafka member (through the broker's
    bridge) in one group: `--members` shows each one's kind, client id and
    a lease remaining within its session timeout, as the coordinator holds
    them now; the kinds are in the group's state in ZooKeeper too."""
    cluster = cluster_factory(1)
    create_topic(zk, "t", 4)
    thin = cluster.add_consumer("g", topics=["t"], extra=["--client-id", "orders-app"])
    stock = cluster.add_consumer("g", topics=["t"], kafka_brokers=cluster.broker_list)
    wait_whole(zk, "g", [thin, stock], partitions_of(zk, ["t"]), timeout=SETTLE_S)

    def members_json() -> dict:
        result = describe(zk_connect, "--members", "--output", "json")
        assert result.returncode == 0, result.stderr
        return json.loads(result.stdout)

    view = wait_until(lambda: (v := members_json()) and len(v["members"]) == 2 and v, timeout=SETTLE_S,
                      message="both members described by the coordinator")
    assert view["members_from"] == "coordinator" and view["members_unavailable"] is None
    by_kind = {m["kind"]: m for m in view["members"]}
    assert set(by_kind) == {"thin", "classic-eager"}
    assert by_kind["thin"]["consumer_id"] == thin.status()["consumer_id"]
    assert by_kind["thin"]["client_id"] == "orders-app"
    assert by_kind["classic-eager"]["client_id"] == f"zkcoord-consume-{stock.pid}"
    for member in view["members"]:
        assert member["host"] == "127.0.0.1" and member["session_timeout_ms"] == 4000 and member["connected"]
        assert 0 < member["lease_remaining_ms"] < member["session_timeout_ms"], member
    assert sum(len(m["partitions"]) for m in view["members"]) == 4
    recorded = {client.kind for client in read_group_state(zk, "g").clients.values()}
    assert recorded == {"thin", "classic-eager"}

    table = [line.split() for line in describe(zk_connect, "--members").stdout.splitlines()]
    header = next(i for i, row in enumerate(table) if row[:2] == ["GROUP", "CONSUMER-ID"])
    assert table[header][4:7] == ["CLIENT", "STATIC-ID", "LEASE-REMAINING"]
    thin_row = next(row for row in table[header + 1:] if row[1] == by_kind["thin"]["consumer_id"])
    assert thin_row[3:7] == ["orders-app", "thin", "consumer", "-"] and thin_row[8] == "s"  # dynamic: no static id
    assert 0 < float(thin_row[7]) < 4.0
