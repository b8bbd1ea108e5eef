"""Coordinator failover (seed 001 section 8) and fencing, with real processes.

Each test checks the invariants from outside: the group ends whole under a
new coordinator, committed offsets never move backwards, nothing produced is
lost, and a coordinator cut off from ZooKeeper starts no fetcher and writes
no owner.
"""

from __future__ import annotations

import pytest
from kazoo.client import KazooClient

from tests.e2e.checks import delivered_values, produce, wait_whole
from tests.e2e.conftest import SERVER_ARGS
from zkcoord.testing import partitions_of
from zkcoord.zk.nodes import read_offsets, read_owners
from zkcoord.testing import wait_until
from zkcoord.admin.groups import read_history
from zkcoord.admin.topics import create_topic
from zkcoord.zk import layout

FAILOVER_S = 30


def coordinator_id(zk: KazooClient) -> int:
    return int(layout.decode_coordinator(zk.get(layout.COORDINATOR_PATH)[0]))


def epoch(zk: KazooClient) -> int:
    return layout.decode_coordinator_epoch(zk.get(layout.COORDINATOR_EPOCH_PATH)[0])


def _run_group(cluster, zk, messages: int, strategy: str = "range"):
    """Three members of group g consuming topic t; a sticky group's join one
    at a time, so that who owns what depends on the order they came in (not
    what an assignment from scratch would give)."""
    create_topic(zk, "t", 6)
    partitions = partitions_of(zk, ["t"])
    consumers = []
    for _ in range(3):
        consumers.append(cluster.add_consumer("g", topics=["t"], extra=["--strategy", strategy]))
        if strategy == "sticky":
            wait_whole(zk, "g", consumers, partitions, timeout=FAILOVER_S)
    wait_whole(zk, "g", consumers, partitions, timeout=FAILOVER_S)
    produce(cluster, "t", messages)
    wait_until(lambda: len(delivered_values(consumers)) >= messages, timeout=30, message="first deliveries")
    wait_until(lambda: sum(read_offsets(zk, "g").values()) == messages, timeout=15, message="offsets committed")
    return consumers, partitions


def _check_offsets_never_back(before: dict, after: dict) -> None:
    for tp, offset in before.items():
        assert after.get(tp, -1) >= offset, f"offset of {tp} moved back from {offset} to {after.get(tp)}"


def test_kill_9_of_the_coordinator_hands_over_with_nothing_lost(cluster, zk):
    consumers, partitions = _run_group(cluster, zk, 600, strategy="sticky")
    old = coordinator_id(zk)
    old_epoch = epoch(zk)
    committed = read_offsets(zk, "g")
    owners = read_owners(zk, "g")
    cluster.servers[old].kill()
    wait_until(lambda: coordinator_id(zk) != old, timeout=FAILOVER_S, message="a new coordinator")
    wait_until(lambda: epoch(zk) > old_epoch, timeout=FAILOVER_S, message="a new epoch")
    # The partitions served by the dead server's broker are gone with it, so
    # "whole" here is about the coordinator: every member holds its range again.
    wait_whole(zk, "g", consumers, partitions, timeout=FAILOVER_S)
    assert read_owners(zk, "g") == owners  # every member survived: the new coordinator moves nothing
    _check_offsets_never_back(committed, read_offsets(zk, "g"))
    # The successor's rounds are appended to the history its predecessor
    # wrote. Members back with what they kept need no round; one joining
    # asks for one.
    newcomer = cluster.add_consumer("g", topics=["t"], extra=["--strategy", "sticky"])
    joined = wait_until(lambda: (status := newcomer.status()) and status["registered"] and status["consumer_id"],
                        timeout=FAILOVER_S, message="a fourth member registered")
    history = wait_until(lambda: (h := read_history(zk, "g")) and h[-1]["epoch"] > old_epoch
                         and f"member {joined} joined" in h[-1]["trigger"] and h,
                         timeout=FAILOVER_S, message="the successor's round in the history")
    assert [r["epoch"] for r in history if r["epoch"] <= old_epoch], "the predecessor's rounds kept"
    assert history[-1]["outcome"] == "completed"


def test_a_server_restarted_right_after_kill_9_waits_out_its_old_registration(cluster, zk):
    """Restarted at once, as a supervisor restarts a crashed process, a
    server finds its dead self's registration (alive until that session
    expires) and waits it out instead of exiting. A server of its own, with
    a 6 s session, so that the dead session surely outlives the kill and the
    check after it; without a broker, whose own registration would be waited
    out first (broker/zkstate.py)."""
    from zkcoord.testing.cluster import ServerProcess

    live = cluster.servers[1]
    args = (*SERVER_ARGS, "--no-broker", "--zk-session-timeout-ms", "6000")
    server = ServerProcess(4, live.zookeeper, live.directory.parent / "restarted", args).start(timeout=30)
    try:
        path = layout.server_path("4")
        dead_owner = wait_until(lambda: zk.exists(path), timeout=10, message="server 4 registered").ephemeralOwner
        server.kill()
        assert zk.exists(path).ephemeralOwner == dead_owner  # the session outlives the process
        server.start(timeout=30)
        wait_until(lambda: (zk.exists(path) or None) and zk.exists(path).ephemeralOwner != dead_owner, timeout=10,
                   message="the restarted server's own registration")
        assert server.alive
    finally:
        server.kill()


def test_a_second_live_server_with_the_same_id_is_refused_after_waiting(cluster, zk):
    """A registration that outlives the wait belongs to a live server: the
    newcomer exits with the error, and the live one keeps its node."""
    from zkcoord.testing.cluster import ServerProcess

    live = cluster.servers[1]
    owner = zk.exists(layout.server_path("1")).ephemeralOwner
    # Without a broker of its own: an embedded broker would first wait out
    # the broker id's registration, the same way (broker/zkstate.py).
    twin = ServerProcess(1, live.zookeeper, live.directory.parent / "twin", (*SERVER_ARGS, "--no-broker"))
    with pytest.raises(Exception, match="another live server already uses id 1"):
        twin.start(timeout=30)
    assert zk.exists(layout.server_path("1")).ephemeralOwner == owner and live.alive


def test_expired_coordinator_session_hands_over_and_the_old_one_steps_down(cluster, zk):
    consumers, partitions = _run_group(cluster, zk, 300)
    old = coordinator_id(zk)
    old_epoch = epoch(zk)
    committed = read_offsets(zk, "g")
    server = cluster.servers[old]
    server.pause()  # SIGSTOP: its ZooKeeper session (2 s) expires
    try:
        wait_until(lambda: coordinator_id(zk) != old, timeout=FAILOVER_S, message="a new coordinator")
    finally:
        server.resume()
    new = coordinator_id(zk)
    wait_whole(zk, "g", consumers, partitions, timeout=FAILOVER_S)
    assert epoch(zk) > old_epoch
    assert coordinator_id(zk) == new  # the woken server did not take office back
    wait_until(lambda: "resigned as coordinator" in server.log_tail(20000), timeout=FAILOVER_S,
               message="the old coordinator to step down")
    produce(cluster, "t", 300, start=300)
    wait_until(lambda: len(set(delivered_values(consumers))) >= 600, timeout=30, message="all 600 delivered")
    assert set(delivered_values(consumers)) == {f"m-{n}" for n in range(600)}
    _check_offsets_never_back(committed, read_offsets(zk, "g"))


def test_a_coordinator_cut_off_from_zookeeper_starts_nothing_and_writes_nothing(cluster_factory, zk_proxies, zk):
    proxies = zk_proxies
    cut_off = cluster_factory(0, zookeeper=proxies.connect_string)
    cut_off.add_server(1)
    wait_until(lambda: zk.exists(layout.COORDINATOR_PATH), timeout=20, message="server 1 elected")
    assert coordinator_id(zk) == 1
    others = cluster_factory(0)
    others.add_server(2)
    others.add_server(3)
    bootstrap = cut_off.bootstrap + others.bootstrap
    create_topic(zk, "t", 4)
    partitions = partitions_of(zk, ["t"])
    consumers = [others.add_consumer("g", topics=["t"], bootstrap=bootstrap) for _ in range(2)]
    wait_until(lambda: wait_whole(zk, "g", consumers, partitions, timeout=FAILOVER_S) is not None
               and all(len(c.assignment()) == 2 for c in consumers),
               timeout=FAILOVER_S, message="a stable split of the partitions")
    generation_before = {c.status()["generation"] for c in consumers}
    assert len(generation_before) == 1
    old_epoch = epoch(zk)
    owners_stat = zk.exists("/consumers/g/owners/t")

    proxies.cut()
    consumers[0].kill()  # a change the cut-off coordinator would rebalance for
    # Until another server is elected, no member is started by epoch 1.
    wait_until(lambda: coordinator_id(zk) != 1, timeout=FAILOVER_S, message="another coordinator")
    new_epoch = wait_until(lambda: epoch(zk) > old_epoch and epoch(zk), timeout=FAILOVER_S,
                           message="a new epoch")
    for consumer in consumers[1:]:
        status = consumer.status()
        assert status["epoch"] == new_epoch or status["generation"] in generation_before, status
    # Nothing the old coordinator did reached the owners: only the new epoch writes them.
    wait_whole(zk, "g", consumers, partitions, timeout=FAILOVER_S)
    assert consumers[1].status()["epoch"] == new_epoch
    assert zk.exists("/consumers/g/owners/t").czxid == owners_stat.czxid
    proxies.heal()
    server = cut_off.servers[1]
    wait_until(lambda: "resigned as coordinator" in server.log_tail(20000), timeout=FAILOVER_S,
               message="the cut-off coordinator to step down")
    assert coordinator_id(zk) != 1 and read_owners(zk, "g")


def test_members_surviving_a_coordinator_crash_redeliver_nothing(cluster, zk):
    """The killed coordinator hosts none of the topic's partitions, so the
    data stays reachable: then the members' handover of their final offsets
    to the new coordinator makes the failover exactly once."""
    from tests.e2e.test_rebalancing import Production, delivered_exactly_once, more_deliveries

    old = coordinator_id(zk)
    brokers = sorted(s for s in cluster.servers if s != old)
    assignment = layout.TopicAssignment({p: (brokers[p % 2],) for p in range(6)})
    zk.create(layout.topic_path("t"), layout.encode_topic(assignment), makepath=True)
    partitions = partitions_of(zk, ["t"])
    consumers = [cluster.add_consumer("g", topics=["t"]) for _ in range(3)]
    wait_until(lambda: wait_whole(zk, "g", consumers, partitions, timeout=FAILOVER_S) is not None
               and all(c.assignment() for c in consumers), timeout=FAILOVER_S, message="settled")
    production = Production(cluster, "t")
    wait_until(lambda: len(delivered_values(consumers)) > 300, timeout=FAILOVER_S, message="deliveries")
    cluster.servers[old].kill()
    wait_until(lambda: coordinator_id(zk) != old, timeout=FAILOVER_S, message="a new coordinator")
    wait_whole(zk, "g", consumers, partitions, timeout=FAILOVER_S)
    more_deliveries(consumers, 300, FAILOVER_S, "deliveries under the new coordinator")
    delivered_exactly_once(consumers, production.stop(), FAILOVER_S)


# Long enough that a member's lease, which has at least a third of it left
# at any instant, outlasts the dead coordinator's ZooKeeper session (2 s)
# and the successor's election: then the members keep all they run.
KEEPING_SESSION_MS = 15000
# The longest the group may go without delivering anything across the kill,
# watched from a second before it until this long after it (past the dead
# coordinator's session, the election and the members' registrations).
KEEPING_GAP_S = 2.0
KEEPING_WATCHED_S = 6.0


def test_members_keep_consuming_through_a_coordinator_crash(cluster, zk):
    """A member that loses its coordinator keeps running what it holds under
    its lease and registers with the successor saying so: across a kill -9
    of the coordinator nobody stops anything, records keep being delivered,
    each once, and no committed offset moves back."""
    import time

    from tests.e2e.test_rebalancing import Production, delivered_exactly_once, more_deliveries

    old = coordinator_id(zk)
    brokers = sorted(s for s in cluster.servers if s != old)  # the data stays reachable
    assignment = layout.TopicAssignment({p: (brokers[p % 2],) for p in range(6)})
    zk.create(layout.topic_path("t"), layout.encode_topic(assignment), makepath=True)
    partitions = partitions_of(zk, ["t"])
    consumers = [cluster.add_consumer("g", topics=["t"], session_timeout_ms=KEEPING_SESSION_MS,
                                      extra=["--strategy", "sticky"]) for _ in range(3)]
    wait_until(lambda: wait_whole(zk, "g", consumers, partitions, timeout=FAILOVER_S) is not None
               and all(c.assignment() for c in consumers), timeout=FAILOVER_S, message="settled")
    production = Production(cluster, "t")
    wait_until(lambda: len(delivered_values(consumers)) > 300, timeout=FAILOVER_S, message="deliveries")
    revoked = {c.name: c.status()["revoked"] for c in consumers}
    owners = read_owners(zk, "g")
    committed = read_offsets(zk, "g")
    old_epoch = epoch(zk)
    killed_at = time.time()
    cluster.servers[old].kill()
    wait_until(lambda: all(c.status()["registered"] and c.status()["epoch"] > old_epoch for c in consumers),
               timeout=FAILOVER_S, message="every member registered with the successor")
    wait_whole(zk, "g", consumers, partitions, timeout=FAILOVER_S)
    wait_until(lambda: any(r["te"] > killed_at + KEEPING_WATCHED_S for c in consumers for r in c.records()),
               timeout=FAILOVER_S, message="deliveries well past the kill")
    more_deliveries(consumers, 300, FAILOVER_S, "deliveries under the new coordinator")
    delivered_exactly_once(consumers, production.stop(), FAILOVER_S)
    assert {c.name: c.status()["revoked"] for c in consumers} == revoked, "a member stopped partitions"
    assert read_owners(zk, "g") == owners
    _check_offsets_never_back(committed, read_offsets(zk, "g"))
    around = sorted(r["te"] for c in consumers for r in c.records()
                    if killed_at - 1.0 <= r["te"] <= killed_at + KEEPING_WATCHED_S)
    gaps = [b - a for a, b in zip(around, around[1:])]
    assert max(gaps) < KEEPING_GAP_S, f"deliveries paused for {max(gaps):.2f}s across the kill"


def test_a_server_cut_off_from_zookeeper_for_long_comes_back_by_itself(cluster_factory, zk_proxies, zk):
    """Finding 10: kazoo's default policy gives up reconnecting after one failed
    round and closes the client for good; a server must keep trying."""
    import time

    cut_off = cluster_factory(0, zookeeper=zk_proxies.connect_string)
    cut_off.add_server(1)
    wait_until(lambda: zk.exists(layout.COORDINATOR_PATH) and coordinator_id(zk) == 1, timeout=20,
               message="server 1 elected")
    zk_proxies.cut()
    zk_proxies.drop()
    wait_until(lambda: not zk.exists(layout.COORDINATOR_PATH), timeout=FAILOVER_S,
               message="the cut-off server's session to expire")
    # The outage's length is the fault itself: several of kazoo's default
    # reconnect rounds (a connect timeout per node each) fit in it.
    time.sleep(8)
    zk_proxies.heal()
    wait_until(lambda: zk.exists(layout.COORDINATOR_PATH) and coordinator_id(zk) == 1, timeout=FAILOVER_S,
               message="server 1 to reconnect and be elected again")
    create_topic(zk, "t", 2)
    consumer = cut_off.add_consumer("g", topics=["t"])
    wait_whole(zk, "g", [consumer], partitions_of(zk, ["t"]), timeout=FAILOVER_S)
    assert cut_off.servers[1].proc.poll() is None


def test_zookeeper_lost_during_a_takeover_leaves_no_zombie_coordinator(cluster_factory, zk_proxies, zk):
    """Finding 6: a connection loss while a newly elected server loads its
    predecessor's state used to escape the takeover, leaving a server that
    held the election node with no coordinator behind it."""
    import threading

    first = cluster_factory(0)
    first.add_server(1)
    wait_until(lambda: zk.exists(layout.COORDINATOR_PATH), timeout=20, message="server 1 elected")
    successor = cluster_factory(0, zookeeper=zk_proxies.connect_string)
    successor.add_server(2)
    create_topic(zk, "t", 4)
    partitions = partitions_of(zk, ["t"])
    consumers = [first.add_consumer("g", topics=["t"], bootstrap=first.bootstrap + successor.bootstrap)
                 for _ in range(2)]
    wait_whole(zk, "g", consumers, partitions, timeout=FAILOVER_S)
    # Many groups left by a predecessor: loading them takes the successor a
    # while, and the connection drops in the middle of it.
    idle = layout.encode_group_state(layout.GroupState(1, "range", {}))
    for request in [zk.create_async(layout.group_state_path(f"idle-{n}"), idle, makepath=True) for n in range(3000)]:
        request.get()
    claimed = epoch(zk) + 1
    dropped = threading.Event()

    def drop_mid_load():
        zk_proxies.drop()
        zk_proxies.heal()
        dropped.set()

    def on_epoch(data, _stat):
        if data is not None and layout.decode_coordinator_epoch(data) >= claimed and not dropped.is_set():
            # Server 2 has just claimed its epoch: it is loading now. Held
            # (nothing forwarded), its reads cannot finish before the drop,
            # however fast they are.
            zk_proxies.cut()
            threading.Timer(0.3, drop_mid_load).start()
            return False
        return True

    zk.DataWatch(layout.COORDINATOR_EPOCH_PATH, on_epoch)
    first.servers[1].kill()
    wait_until(dropped.is_set, timeout=FAILOVER_S, message="server 2 to claim an epoch")
    server = successor.servers[2]
    wait_until(lambda: "could not take office" in server.log_tail(50000), timeout=FAILOVER_S,
               message="the takeover to fail on the dropped connection")
    # It gives the election up (at once, or in its next round if the
    # connection was still down) and wins it again, with a new epoch.
    wait_until(lambda: epoch(zk) > claimed, timeout=FAILOVER_S, message="a second epoch")
    wait_whole(zk, "g", consumers, partitions, timeout=FAILOVER_S)
    assert coordinator_id(zk) == 2
    assert {c.status()["epoch"] for c in consumers} == {epoch(zk)}


@pytest.mark.parametrize("outage", ["within the session", "past the session"])
def test_a_server_cut_off_from_zookeeper_still_stops_on_sigterm(cluster_factory, zk_proxies, zk, outage):
    """A server whose ZooKeeper is unreachable used to wait for ever in its
    stop, for the answer to deleting its own nodes (kazoo queues a request
    until it reconnects): SIGTERM did nothing and only kill -9 ended it."""
    cut_off = cluster_factory(0, zookeeper=zk_proxies.connect_string)
    server = cut_off.add_server(1)
    create_topic(zk, "t", 2)
    consumer = cut_off.add_consumer("g", topics=["t"])
    wait_whole(zk, "g", [consumer], partitions_of(zk, ["t"]), timeout=FAILOVER_S)
    zk_proxies.cut()
    zk_proxies.drop()
    if outage == "past the session":
        wait_until(lambda: not zk.exists(layout.server_path("1")), timeout=FAILOVER_S,
                   message="the cut-off server's session to expire")
    # terminate() sends SIGTERM, waits, and only then kills -9 (exit code -9).
    assert server.terminate(timeout=20) == 0, server.log_tail(3000)


def test_a_coordinator_whose_zookeeper_link_goes_dark_past_its_office_lapses_and_resumes(cluster_factory,
                                                                                      zk_proxies, zk):
    """A coordinator whose ZooKeeper link is black-holed (no reset: kazoo
    notices only by its own timeout) past its office, but not its session,
    lets the office lapse and sends nothing, then resumes once round trips
    succeed again (two, a quarter session apart, when the first began after
    the lapse: tests/unit), with no failover; its members, whose leases
    outlast the gap, stay put."""
    import time

    session_ms = 6000
    cut_off = cluster_factory(0, zookeeper=zk_proxies.connect_string,
                              server_args=(*SERVER_ARGS, "--zk-session-timeout-ms", str(session_ms)))
    server = cut_off.add_server(1)
    create_topic(zk, "t", 2)
    consumer = cut_off.add_consumer("g", topics=["t"], session_timeout_ms=15000)
    wait_whole(zk, "g", [consumer], partitions_of(zk, ["t"]), timeout=FAILOVER_S)
    zk_proxies.cut()  # black hole: nothing forwarded, nothing closed
    # Past the office (2S/3 = 4 s after the last round trip), within the session.
    time.sleep(session_ms * 0.8 / 1000)  # the fault is the passage of time
    zk_proxies.heal()
    wait_until(lambda: "office lapsed" in server.log_tail(50000), timeout=FAILOVER_S, message="the office to lapse")
    wait_until(lambda: server.log_tail(50000).count("-> active") >= 2, timeout=FAILOVER_S,
               message="the coordinator to resume")
    log = server.log_tail(50000)
    assert log.index("office lapsed") < log.rindex("-> active")
    assert "deposed" not in log and coordinator_id(zk) == 1  # the session survived: no failover
    wait_whole(zk, "g", [consumer], partitions_of(zk, ["t"]), timeout=FAILOVER_S)
    assert log.count(" registered") == 1  # the member never lost its lease
