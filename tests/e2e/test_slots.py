"""Several coordinators sharing the groups (coordinator slots), with real processes.

Each slot is elected on its own: the servers share the slots fairly, hand
some over when a server joins, and a kill -9 moves only the dead server's
slots, while the groups of the others go on without a Stop or a Start. A
consumer that reaches a server not holding its group's slot is redirected.
A change of the slot count moves every group to one coordinator of the new
count, and a slot whose seeker keeps failing its takeover is served by
another server.
"""

from __future__ import annotations

import itertools
import json
import time

from kazoo.security import ACL, ANYONE_ID_UNSAFE, Id, Permissions

from tests.e2e.checks import delivered_values, wait_whole
from tests.e2e.conftest import SERVER_ARGS
from tests.e2e.test_rebalancing import Production, delivered_exactly_once, more_deliveries
from zkcoord import wire
from zkcoord.admin.topics import create_topic
from zkcoord.channel import Channel
from zkcoord.coordinator.election import FAILED_ROUND_S
from zkcoord.coordinator.slots import FAILURES_TO_WITHDRAW
from zkcoord.zk.layout import slot_of
from zkcoord.testing import ClusterError, ProxiedEnsemble, group_is_whole, partitions_of, wait_until
from zkcoord.zk import layout

SETTLE_S = 30
IO_TIMEOUT_S = 5.0
# A slot whose only seeker fails it is served again within: the seeker's
# failed takeovers, FAILED_ROUND_S apart, then a round of another server
# and its takeover (docs/DESIGN.md, invariant 5), with room for a machine
# shared with other tests.
BOUND_S = FAILURES_TO_WITHDRAW * FAILED_ROUND_S + 5.0


def slot_args(slots: int) -> tuple[str, ...]:
    return (*SERVER_ARGS, "--coordinator-slots", str(slots))


def holders(zk, slots: int) -> dict[int, int]:
    """Slot -> the server id elected in it, for the slots that have one."""
    held = {}
    for slot in range(slots):
        path = layout.slot_coordinator_path(slot)
        if zk.exists(path):
            try:
                held[slot] = int(layout.decode_coordinator(zk.get(path)[0], path))
            except Exception:  # gone between the two reads
                pass
    return held


def slot_epoch(zk, slot: int) -> int:
    path = layout.slot_epoch_path(slot)
    return layout.decode_coordinator_epoch(zk.get(path)[0], path)


def shared_fairly(zk, slots: int, servers: set[int]) -> dict[int, int]:
    """Once every slot is held, each of ``servers`` holding its fair share, the holders."""
    share = -(-slots // len(servers))

    def settled():
        held = holders(zk, slots)
        counts = [list(held.values()).count(s) for s in servers]
        return held if len(held) == slots and set(held.values()) <= servers and max(counts) <= share else None

    return wait_until(settled, timeout=SETTLE_S, message=f"{slots} slots shared by servers {sorted(servers)}")


def group_in_slot(slot: int, slots: int, prefix: str = "g") -> str:
    return next(f"{prefix}{n}" for n in itertools.count() if slot_of(f"{prefix}{n}", slots) == slot)


def events(consumer) -> list[dict]:
    try:
        return [json.loads(line) for line in consumer.events_path.read_text().splitlines() if line.strip()]
    except OSError:
        return []


def test_a_kill_9_moves_only_the_dead_servers_slots_and_the_other_groups_never_pause(cluster_factory, zk):
    slots = 6
    cluster = cluster_factory(3, server_args=slot_args(slots))
    held = shared_fairly(zk, slots, {1, 2, 3})
    victim = held[0]
    survivors = sorted({1, 2, 3} - {victim})
    # One group in a slot of each server; the topic lives on the survivors'
    # brokers, so that the data outlives the kill and nothing may be lost.
    groups = {server: group_in_slot(min(s for s, h in held.items() if h == server), slots)
              for server in (victim, *survivors)}
    assignment = layout.TopicAssignment({p: (survivors[p % 2],) for p in range(4)})
    zk.create(layout.topic_path("t"), layout.encode_topic(assignment), makepath=True)
    partitions = partitions_of(zk, ["t"])
    members = {group: [cluster.add_consumer(group, topics=["t"]) for _ in range(2)] for group in groups.values()}
    for group, consumers in members.items():
        wait_whole(zk, group, consumers, partitions, timeout=SETTLE_S)
    production = Production(cluster, "t")
    try:
        _kill_and_check(cluster, zk, slots, held, victim, groups, members, partitions, production)
    finally:
        production.stop()


def _kill_and_check(cluster, zk, slots, held, victim, groups, members, partitions, production) -> None:
    wait_until(lambda: all(len(delivered_values(c)) > 200 for c in members.values()), timeout=SETTLE_S,
               message="every group delivering")

    calm = [g for s, g in groups.items() if s != victim]
    before = {g: [len(events(c)) for c in members[g]] for g in calm}
    epochs = {slot: slot_epoch(zk, slot) for slot in range(slots)}
    cluster.servers[victim].kill()

    moved = [slot for slot, server in held.items() if server == victim]
    now = shared_fairly(zk, slots, set(cluster.servers) - {victim})
    assert all(now[slot] == held[slot] for slot in held if slot not in moved), "a survivor's slot moved"
    wait_until(lambda: all(slot_epoch(zk, slot) > epochs[slot] for slot in moved), timeout=SETTLE_S,
               message="a new epoch in every slot that moved")  # claimed just after the election
    wait_whole(zk, groups[victim], members[groups[victim]], partitions, timeout=SETTLE_S)
    mark = {g: len(delivered_values(c)) for g, c in members.items()}
    wait_until(lambda: all(len(delivered_values(c)) > mark[g] + 100 for g, c in members.items()),
               timeout=SETTLE_S, message="every group delivering after the kill")
    produced = production.stop()
    for group, consumers in members.items():
        delivered_exactly_once(consumers, produced, SETTLE_S, where=f" in {group}")
    assert all(slot_epoch(zk, slot) == epochs[slot] for slot in held if slot not in moved)
    for group in calm:  # not one Stop or Start, nor a new registration, in the survivors' slots
        assert [len(events(c)) for c in members[group]] == before[group], group
        assert [c.log_tail(1_000_000).count(f"registered in group {group} ") for c in members[group]] == [1, 1]


def test_servers_share_the_slots_and_a_consumer_at_the_wrong_one_is_redirected(cluster_factory, zk):
    slots = 4
    cluster = cluster_factory(1, server_args=slot_args(slots))
    assert shared_fairly(zk, slots, {1}) == dict.fromkeys(range(slots), 1)
    cluster.start_servers(1, first_id=2)  # a server joins: the first hands half its slots over
    held = shared_fairly(zk, slots, {1, 2})
    assert sorted(held.values()) == [1, 1, 2, 2]

    slot = next(s for s, server in held.items() if server == 1)
    group = group_in_slot(slot, slots)
    wrong = cluster.servers[2]
    channel = Channel.connect("127.0.0.1", wrong.port, IO_TIMEOUT_S)
    try:
        answer = channel.request(wire.RegisterConsumerRequest(group_id=group, consumer_id="c", topics=("t",)),
                                 timeout=IO_TIMEOUT_S)
    finally:
        channel.close()
    assert answer.error_code == wire.ErrorCode.NOT_COORDINATOR
    assert f"slot {slot} of {slots}" in answer.error_message and "server 1" in answer.error_message

    channel = Channel.connect("127.0.0.1", wrong.port, IO_TIMEOUT_S)
    try:
        metadata = channel.request(wire.ClusterMetadataRequest(group_id=group), timeout=IO_TIMEOUT_S)
        # A client of version 1 asks for slot 0 and is answered in version 1.
        channel.level = 1
        channel.send(wire.ClusterMetadataRequest(), 99)
        old = channel.receive(timeout=IO_TIMEOUT_S)
    finally:
        channel.close()
    assert (metadata.coordinator_id, metadata.slot, metadata.slots) == (1, slot, slots)
    assert metadata.coordinator_epoch == slot_epoch(zk, slot)
    assert (old.version, old.correlation_id, old.message.coordinator_id) == (1, 99, held[0])

    # A consumer told only of the wrong server finds its coordinator through it.
    create_topic(zk, "t", 4)
    consumers = [cluster.add_consumer(group, topics=["t"], bootstrap=[wrong.address]) for _ in range(2)]
    wait_whole(zk, group, consumers, partitions_of(zk, ["t"]), timeout=SETTLE_S)


def test_a_server_told_another_slot_count_refuses_to_start(cluster_factory, zk):
    cluster = cluster_factory(1, server_args=slot_args(4))
    shared_fairly(zk, 4, {1})
    odd = cluster.add_server(2, start=False, extra=("--coordinator-slots", "3"))
    try:
        odd.start(timeout=20)
    except ClusterError:
        pass
    else:
        raise AssertionError("a server told 3 slots started in a cluster of 4")
    assert "spread over 4 coordinator slots, not 3" in odd.log_tail(5000)
    assert layout.decode_slot_count(zk.get(layout.SLOTS)[0]) == 4


def test_a_coordinator_whose_election_node_is_gone_steps_down_and_the_slot_is_elected_again(cluster_factory, zk):
    cluster = cluster_factory(1, server_args=slot_args(2))
    shared_fairly(zk, 2, {1})
    before = slot_epoch(zk, 1)
    zk.delete(layout.slot_coordinator_path(1))  # as a session's end would, with the coordinator still running
    wait_until(lambda: holders(zk, 2).get(1) == 1 and slot_epoch(zk, 1) > before, timeout=SETTLE_S,
               message="slot 1 elected again under a new epoch")
    log = cluster.servers[1].log_tail(100_000)
    assert "no longer holds the election of slot 1: stepping down" in log
    assert "resigned as coordinator of slot 1" in log and "resigned as coordinator of slot 0" not in log


def registered_with(consumer, group: str) -> str:
    """The coordinator, slot and count of ``consumer``'s last registration in ``group``, as it logged them."""
    lines = [line for line in consumer.log_tail(1_000_000).splitlines() if f"registered in group {group} " in line]
    return lines[-1].partition(" with coordinator ")[2].partition(", epoch")[0] if lines else ""


def test_a_changed_slot_count_gives_each_group_one_coordinator_once_the_old_ones_have_stopped(cluster_factory, zk):
    zk.create(layout.SLOTS, layout.encode_slot_count(2), makepath=True)
    cluster = cluster_factory(2)
    held = shared_fairly(zk, 2, {1, 2})
    # In slot 1 of 2, and in slot 2 of 3, which nobody holds: a server that
    # reads the new count would take it at once.
    group = next(f"g{n}" for n in itertools.count() if slot_of(f"g{n}", 2) == 1 and slot_of(f"g{n}", 3) == 2)
    create_topic(zk, "t", 4)
    partitions = partitions_of(zk, ["t"])
    members = [cluster.add_consumer(group, topics=["t"]) for _ in range(2)]
    wait_whole(zk, group, members, partitions, timeout=SETTLE_S)
    production = Production(cluster, "t")
    try:
        wait_until(lambda: len(delivered_values(members)) > 200, timeout=SETTLE_S, message="deliveries")
        old_epochs = max(slot_epoch(zk, slot) for slot in range(2))
        zk.set(layout.SLOTS, layout.encode_slot_count(3))
        changed = zk.exists(layout.SLOTS).mzxid
        # A server started now reads three slots, and a member that asks it
        # is told its group is in slot 2.
        cluster.add_server(3)
        members.append(cluster.add_consumer(group, topics=["t"], bootstrap=[cluster.servers[3].address]))
        now = shared_fairly(zk, 3, {1, 2, 3})
        # Each member holding some of the four partitions, none held twice (that raises).
        wait_until(lambda: group_is_whole(zk, group, members, partitions, every_member_holds=True),
                   timeout=SETTLE_S, message="the three members sharing the partitions")
        for slot in range(3):  # every slot elected under the new count, each above every epoch of the old
            assert zk.exists(layout.slot_coordinator_path(slot)).czxid > changed, slot
            assert slot_epoch(zk, slot) > old_epochs, slot
        more_deliveries(members, 100, SETTLE_S, "deliveries under the new count")
    finally:
        produced = production.stop()
    delivered_exactly_once(members, produced, SETTLE_S)  # never two coordinators handing out one partition
    for server in (1, 2):  # each stepped down from what it held under two slots
        log = cluster.servers[server].log_tail(1_000_000)
        assert "the cluster's slot count changed to 3 (was 2)" in log
        for slot in (s for s, holder in held.items() if holder == server):
            assert f"resigned as coordinator of slot {slot} " in log, (server, slot)
    # The group has one coordinator: every member registered last with the holder of its slot of three.
    assert {registered_with(member, group) for member in members} == {f"{now[2]} (slot 2 of 3"}


def test_a_slot_whose_only_seeker_fails_its_takeovers_is_taken_by_a_healthy_server_within_the_bound(
        cluster_factory, zk, zk_ensemble, zk_connect):
    """Server 1 may not write slot 1's epoch node (a ZooKeeper ACL grants it
    to clients connecting from 127.0.0.1 only, and server 1's connections
    come from 127.0.0.2), so each of its takeovers of slot 1 fails. Server 2,
    at its share with slot 0, takes slot 1 back once server 1 has withdrawn
    from it. (Two principals would do as well, but a server with credentials
    refuses a tree another principal may change.)"""
    # Everything open, as servers without credentials write it, but slot 1's epoch.
    for path in (layout.SERVERS, layout.GROUPS, layout.CONSUMERS, f"{layout.SLOTS}/1"):
        zk.ensure_path(path)
    zk.set(layout.SLOTS, layout.encode_slot_count(2))
    zk.create(layout.COORDINATOR_EPOCH_PATH, layout.encode_coordinator_epoch(0))
    zk.create(layout.slot_epoch_path(1), layout.encode_coordinator_epoch(0),
              acl=[ACL(Permissions.ALL, Id("ip", "127.0.0.1")), ACL(Permissions.READ, ANYONE_ID_UNSAFE)])
    elsewhere = ProxiedEnsemble([zk_ensemble.client_port(k) for k in zk_ensemble.node_ids],
                                zk_connect[zk_connect.index("/"):], source_host="127.0.0.2")
    cluster = cluster_factory(0)
    try:
        _slot_1_taken_back(cluster, zk, faulty_zookeeper=elsewhere.connect_string)
    finally:
        cluster.close()
        elsewhere.close()


def _slot_1_taken_back(cluster, zk, faulty_zookeeper: str) -> None:
    cluster.add_broker(101)
    wait_until(lambda: zk.exists(layout.broker_path(101)), timeout=SETTLE_S, message="the broker registered")
    create_topic(zk, "t", 2)
    partitions = partitions_of(zk, ["t"])
    cluster.add_server(2, extra=("--no-broker",))
    assert shared_fairly(zk, 2, {2}) == {0: 2, 1: 2}
    group = group_in_slot(1, 2)
    members = [cluster.add_consumer(group, topics=["t"]) for _ in range(2)]
    wait_whole(zk, group, members, partitions, timeout=SETTLE_S)
    epoch = slot_epoch(zk, 1)

    # Server 2 hands slot 1 over to it: it held two of two.
    cluster.add_server(1, zookeeper=faulty_zookeeper, extra=("--no-broker",))
    joined = time.monotonic()
    wait_until(lambda: holders(zk, 2).get(1) == 2 and slot_epoch(zk, 1) > epoch, timeout=SETTLE_S,
               message="slot 1 taken back by server 2")
    served_after = time.monotonic() - joined
    assert served_after < BOUND_S, f"slot 1 served again {served_after:.1f} s after server 1 joined"
    log = cluster.servers[1].log_tail(1_000_000)
    assert log.count("could not stand for slot 1") == FAILURES_TO_WITHDRAW and "withdraws from slot 1" in log
    assert layout.decode_server("1", zk.get(layout.server_path("1"))[0]).withdrawn == (1,)
    # Then server 2 hands slot 0 over, which server 1 can take: shared fairly.
    assert shared_fairly(zk, 2, {1, 2}) == {0: 1, 1: 2}
    wait_whole(zk, group, members, partitions, timeout=SETTLE_S)
    assert {registered_with(member, group) for member in members} == {"2 (slot 1 of 2"}
