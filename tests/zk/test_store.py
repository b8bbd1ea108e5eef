"""The coordinator's ZooKeeper writes at scale (coordinator/store.py), on real ZooKeeper."""

from __future__ import annotations

import dataclasses

import pytest

from zkcoord.admin.groups import group_state
from zkcoord.coordinator import store as store_module
from zkcoord.coordinator.actions import Deposed
from zkcoord.coordinator.store import (
    MAX_MULTI_BYTES, MAX_NODE_BYTES, STATE_CHUNK_BYTES, CoordinatorStore, NodeTooLarge, split_operations,
)
from zkcoord.testing import wait_until
from zkcoord.zk import layout
from zkcoord.zk.nodes import read_group_state

PARTITIONS = 20_000
MEMBERS = 100


@pytest.fixture
def store(zk) -> CoordinatorStore:
    store = CoordinatorStore(zk, server_id=1)
    store.claim_epoch()
    return store


def test_a_20000_partition_group_is_written_although_one_request_could_not_hold_it(store):
    # ZooKeeper refuses requests over 1 MB; these writes are several times that.
    partitions = [("events", p) for p in range(PARTITIONS)]
    owners = {tp: f"member-{tp[1] % MEMBERS:04d}" for tp in partitions}
    store.write_owners("big", owners, recorded={})
    assert store.owners("big") == owners
    moved = {tp: f"member-{(tp[1] + 1) % MEMBERS:04d}" for tp in partitions[: PARTITIONS // 2]}
    store.write_owners("big", moved, recorded=owners)  # half move, half are deleted
    assert store.owners("big") == moved
    offsets = {tp: 1_000_000 + tp[1] for tp in partitions}
    store.write_offsets("big", offsets, existing=set())
    store.write_offsets("big", {tp: o + 1 for tp, o in offsets.items()}, existing=set(offsets))
    assert store.offsets("big", partitions) == {tp: o + 1 for tp, o in offsets.items()}
    # The state as the core writes it: who is assigned what, and who runs what.
    assignment = {m: tuple(sorted(tp for tp, o in owners.items() if o == m)) for m in set(owners.values())}
    state = layout.GroupState(3, "range", assignment, lease_ms=10_000, running=assignment)
    store.write_group_state("big", state, exists=False)
    assert store.group_states()["big"] == state


def test_a_member_whose_partitions_alone_are_too_big_for_one_request_is_refused_before_it_is_sent(store, zk):
    # A state is split between members, never within one; sent, the node
    # would cost the connection. One member, a topic each with a long name.
    partitions = tuple((f"a-topic-with-a-rather-long-name-{p:05d}", 0) for p in range(30_000))
    state = layout.GroupState(3, "range", {"m": partitions}, lease_ms=10_000)
    with pytest.raises(NodeTooLarge, match="more than ZooKeeper takes"):
        store.write_group_state("huge", state, exists=False)
    assert zk.connected and not zk.exists(layout.group_state_path("huge"))
    assert not zk.exists(layout.group_state_chunks_path("huge"))


def huge_group(members: int = PARTITIONS, generation: int = 3) -> layout.GroupState:
    """A group of ``members`` thin consumers, one partition of 20,000 each,
    with what the core persists of each: where it connected from, the proof
    of its incarnation."""
    ids = [f"host-{n % 97:02d}-{n * 7919 % 16**12:012x}" for n in range(members)]
    assignment = {m: (("events", n),) for n, m in enumerate(ids)}
    return layout.GroupState(generation, "sticky", assignment, lease_ms=10_000, running=assignment,
                             clients={m: layout.MemberClient(f"10.1.{n // 250}.{n % 250}") for n, m in enumerate(ids)},
                             proofs={m: f"{n:064x}" for n, m in enumerate(ids)})


def chunks_of(zk, group: str) -> set[str]:
    return set(zk.get_children(layout.group_state_chunks_path(group)))


def test_a_group_of_20000_members_is_written_in_chunks_and_read_back_whole(store, zk):
    state = huge_group()
    assert len(layout.encode_group_state(state)) > 3 * MAX_NODE_BYTES  # as one node: refused
    store.write_group_state("big", state, exists=False)
    manifest = layout.decode_group_state_node(zk.get(layout.group_state_path("big"))[0])
    assert isinstance(manifest, layout.GroupStateManifest) and manifest.generation == 3
    assert chunks_of(zk, "big") == set(manifest.chunks)
    sizes = [zk.exists(layout.group_state_chunk_path("big", name)).dataLength for name in manifest.chunks]
    assert max(sizes) <= STATE_CHUNK_BYTES and sum(sizes) > 3 * MAX_NODE_BYTES
    assert store.group_states()["big"] == state
    assert group_state(zk, "big") == ("PreparingRebalance", state)  # what `zkcoord groups describe` reads
    # A successor reads it whole.
    successor = CoordinatorStore(zk, server_id=2)
    successor.claim_epoch()
    assert successor.group_states() == {"big": state}
    # The next generation: a member leaves, its partition goes to another.
    gone, heir = sorted(state.assignment)[:2]
    assignment = {**state.assignment, heir: state.assignment[gone] + state.assignment[heir]}
    del assignment[gone]
    proofs, clients = dict(state.proofs), dict(state.clients)
    del proofs[gone], clients[gone]
    after = dataclasses.replace(state, generation=4, assignment=assignment, running=assignment, proofs=proofs,
                                clients=clients)
    written = []
    fenced = successor._fenced
    successor._fenced = lambda chunk: (written.extend(chunk), fenced(chunk))
    successor.write_group_state("big", after, exists=True)
    assert successor.group_states()["big"] == after
    # Only the chunks of those two members are written again; those the
    # previous generation alone named are gone.
    manifest = layout.decode_group_state_node(zk.get(layout.group_state_path("big"))[0])
    assert chunks_of(zk, "big") == set(manifest.chunks)
    creates = [path for op, path, _ in written if op == "create"]
    assert 1 <= len(creates) <= 2 and len([op for op, _, _ in written if op == "delete"]) == len(creates)


def test_a_state_written_half_way_leaves_the_previous_one_whole_for_a_successor(store, zk):
    before = huge_group(generation=3)
    store.write_group_state("big", before, exists=False)
    named = chunks_of(zk, "big")
    # Every member's partition moves, so that every chunk is new; a
    # successor is elected once the first multi-operation is through.
    ids = sorted(before.assignment)
    moved = {m: before.assignment[ids[(n + 1) % len(ids)]] for n, m in enumerate(ids)}
    after = dataclasses.replace(before, generation=4, assignment=moved, running=before.assignment)
    elect_a_successor_after_the_first_multi(store, zk)
    with pytest.raises(Deposed):
        store.write_group_state("big", after, exists=True)
    left = chunks_of(zk, "big") - named
    assert left and named <= chunks_of(zk, "big")  # chunks of the new state, named by no manifest
    successor = CoordinatorStore(zk, server_id=3)
    successor.claim_epoch()
    assert successor.group_states()["big"] == before  # whole, as it was
    # The successor's own write of the same members takes the chunks left
    # over as they are (their names say their bytes) and deletes the rest.
    successor.write_group_state("big", dataclasses.replace(after, generation=5), exists=True)
    manifest = layout.decode_group_state_node(zk.get(layout.group_state_path("big"))[0])
    assert successor.group_states()["big"] == dataclasses.replace(after, generation=5)
    assert left <= chunks_of(zk, "big") == set(manifest.chunks) and not chunks_of(zk, "big") & named


def test_a_successor_fences_a_group_whose_chunks_do_not_add_up(store, zk):
    store.write_group_state("big", huge_group(members=8000), exists=False)
    store.write_group_state("small", layout.GroupState(2, "range", {"a": (("t", 0),)}), exists=False)
    first, second = sorted(chunks_of(zk, "big"))[:2]
    zk.delete(layout.group_state_chunk_path("big", first))
    assert store.group_states() == {"big": None, "small": layout.GroupState(2, "range", {"a": (("t", 0),)})}
    with pytest.raises(layout.LayoutError, match=f"chunk {first} is missing"):
        read_group_state(zk, "big")  # tools are told why
    # Bytes that are not those the chunk was named by: the same.
    zk.create(layout.group_state_chunk_path("big", first), zk.get(layout.group_state_chunk_path("big", second))[0])
    assert store.group_states()["big"] is None
    # core.load fences a group read as None whole: nobody is started on any
    # of its partitions for the longest session timeout (test_core_takeover_fences.py).


def test_forgetting_a_split_group_deletes_its_chunks(store, zk):
    store.write_group_state("big", huge_group(members=8000), exists=False)
    store.forget_group("big")
    assert not zk.exists(layout.group_state_path("big").rsplit("/", 1)[0]) and "big" not in store.group_states()


def test_old_single_nodes_are_read_and_replaced_by_the_first_write(store, zk):
    v1 = (b'{"version":1,"generation":7,"strategy":"range","assignment":{"c-1":[["t",0],["t",1]]},'
          b'"lease_ms":6000,"running":{"c-1":[["t",0],["t",1]]}}')
    v2 = b'{"version":2,"generation":7,"strategy":"range","assignment":{"c-1":{"t":[0,1]}},"lease_ms":6000,"running":{}}'
    expected = layout.GroupState(7, "range", {"c-1": (("t", 0), ("t", 1))}, lease_ms=6000,
                                 running={"c-1": (("t", 0), ("t", 1))})
    for group, data in (("one", v1), ("two", v2)):
        zk.create(layout.group_state_path(group), data, makepath=True)
    assert store.group_states() == {"one": expected, "two": expected}
    # Grown past one node: the manifest takes the old node's place.
    store.write_group_state("two", huge_group(members=8000, generation=8), exists=True)
    assert store.group_states()["two"] == huge_group(members=8000, generation=8)
    assert chunks_of(zk, "two")
    # Shrunk back: one node of version 2 again, and no chunk left.
    small = layout.GroupState(9, "range", {"c-1": (("t", 0),)}, lease_ms=6000)
    store.write_group_state("two", small, exists=True)
    assert zk.get(layout.group_state_path("two"))[0] == layout.encode_group_state(small)
    assert store.group_states()["two"] == small and not chunks_of(zk, "two")


def elect_a_successor_after_the_first_multi(store, zk) -> list:
    """Make ``store``'s next split write elect a successor once its first
    multi-operation is through; returns the multis, as they are tried."""
    multis = []
    fenced = store._fenced

    def successor_elected_after_the_first_multi(chunk):
        multis.append(chunk)
        if len(multis) == 2:
            CoordinatorStore(zk, server_id=2).claim_epoch()
        fenced(chunk)

    store._fenced = successor_elected_after_the_first_multi
    return multis


def test_every_part_of_a_split_write_is_fenced(store, zk):
    offsets = {("events", p): 5 for p in range(PARTITIONS)}
    chunks = elect_a_successor_after_the_first_multi(store, zk)
    with pytest.raises(Deposed):
        store.write_offsets("big", offsets, existing=set())
    first, second = chunks
    assert zk.exists(first[-1][1]) and not zk.exists(second[0][1])


def test_operations_are_split_in_order_under_the_limit():
    operations = [("create", f"/consumers/g/offsets/t/{n}", b"x" * 100) for n in range(20_000)]
    chunks = split_operations(operations)
    assert len(chunks) > 1 and [op for chunk in chunks for op in chunk] == operations
    assert all(sum(len(p) + len(d) for _, p, d in chunk) < MAX_MULTI_BYTES for chunk in chunks)
    huge = ("set", "/big", b"x" * (MAX_MULTI_BYTES + 1))
    assert split_operations([huge, operations[0]]) == [[huge], [operations[0]]]
    assert split_operations([]) == [[]]


def test_each_slot_is_fenced_on_its_own_epoch_and_loads_only_its_groups(zk):
    from zkcoord.zk.layout import slot_of

    groups = [f"g{i}" for i in range(12)]
    mine = {0: [g for g in groups if slot_of(g, 2) == 0], 1: [g for g in groups if slot_of(g, 2) == 1]}
    assert mine[0] and mine[1]
    slot0, slot1 = CoordinatorStore(zk, 1, slot=0, slots=2), CoordinatorStore(zk, 1, slot=1, slots=2)
    assert (slot0.claim_epoch().number, slot1.claim_epoch().number) == (1, 1)
    assert slot1.epoch_path == layout.slot_epoch_path(1) != layout.COORDINATOR_EPOCH_PATH == slot0.epoch_path
    state = layout.GroupState(1, "range", {})
    for slot, store in ((0, slot0), (1, slot1)):
        for group in mine[slot]:
            store.write_group_state(group, state, exists=False)
    assert set(slot0.group_states()) == set(mine[0]) and set(slot1.group_states()) == set(mine[1])
    assert set(CoordinatorStore(zk, 1).group_states()) == set(groups)  # one slot: every group
    # A successor in slot 1 deposes slot 1's coordinator only.
    assert CoordinatorStore(zk, 2, slot=1, slots=2).claim_epoch().number == 2
    with pytest.raises(Deposed, match="of slot 1"):
        slot1.write_group_state(mine[1][0], state, exists=True)
    slot0.write_group_state(mine[0][0], layout.GroupState(2, "range", {}), exists=True)
    assert slot0.group_states()[mine[0][0]].generation == 2


def test_a_slot_outside_the_count_is_refused(zk):
    from zkcoord.errors import ConfigError

    with pytest.raises(ValueError):
        CoordinatorStore(zk, 1, slot=2, slots=2)
    with pytest.raises(ConfigError):
        CoordinatorStore(zk, 1, slot=0, slots=0)


def test_the_election_is_won_and_the_epoch_claimed_together_or_not_at_all(zk, zk_connect):
    from kazoo.client import KazooClient

    election = layout.slot_coordinator_path(1)
    rival = KazooClient(hosts=zk_connect)
    rival.start(timeout=15)
    try:
        won = CoordinatorStore(zk, 1, slot=1, slots=2).claim_epoch(elected_as=b"1")
        assert won.number == 1
        data, stat = zk.get(election)
        assert data == b"1" and stat.ephemeralOwner == zk.client_id[0]
        # Another session finds the election held: no epoch claimed, so the
        # holder is not fenced out (a takeover whose session ended while it
        # ran, its claim sent on a new session, is this case too).
        loser = CoordinatorStore(rival, 2, slot=1, slots=2)
        assert loser.claim_epoch(elected_as=b"2") is None and loser.epoch is None
        assert layout.decode_coordinator_epoch(zk.get(layout.slot_epoch_path(1))[0]) == 1
        # The holder gone, the next claim wins both.
        zk.delete(election)
        assert loser.claim_epoch(elected_as=b"2").number == 2
        assert rival.get(election)[1].ephemeralOwner == rival.client_id[0]
    finally:
        rival.stop()
        rival.close()


def test_the_office_is_proven_only_on_the_session_that_claimed_the_epoch(store, monkeypatch):
    store.prove_office()  # the claiming session: proven
    # A later session of the same client: the epoch node is unchanged, so the
    # epoch check alone would pass, but the election node went with the first.
    later = store.epoch.session_id + 1
    monkeypatch.setattr(store_module, "session_id", lambda zk: later)
    with pytest.raises(Deposed, match="has ended"):
        store.prove_office()
    answers = []
    store.prove_office_async(answers.append)
    wait_until(lambda: answers, 10, message="the proof's answer")
    assert isinstance(answers[0], Deposed)


def test_a_node_it_could_not_read_or_that_changed_under_it_is_written_all_the_same(store, zk):
    # An owner node with undecodable data is read as owned by None (an
    # offset node's is left out), so the core rewrites it; as new, once,
    # that create failed with NodeExistsError on every rebalance and commit, for good.
    owner, offset = layout.owner_path("g", "t", 0), layout.offset_path("g", "t", 0)
    zk.create(owner, b"\xff\xfe not an owner", makepath=True)
    zk.create(offset, b"not an offset", makepath=True)
    assert store.owners("g") == {("t", 0): None} and store.offsets("g", [("t", 0)]) == {}
    store.write_owners("g", {("t", 0): "m-1", ("t", 1): "m-1"}, recorded={})
    store.write_offsets("g", {("t", 0): 42}, existing=set())
    assert store.owners("g") == {("t", 0): "m-1", ("t", 1): "m-1"}
    assert store.offsets("g", [("t", 0)]) == {("t", 0): 42}
    # Removed by someone else since it was read: a set becomes a create, a delete nothing.
    zk.delete(owner)
    zk.delete(layout.owner_path("g", "t", 1))
    store.write_owners("g", {("t", 0): "m-2"}, recorded={("t", 0): "m-1", ("t", 1): "m-1"})
    assert store.owners("g") == {("t", 0): "m-2"}


def test_an_owner_node_that_does_not_decode_is_deleted_once_nobody_owns_its_partition(store, zk):
    # It was left out of what the store read, so no round ever deleted it:
    # `groups describe` showed a stale owner for good.
    zk.create(layout.owner_path("g", "t", 3), b"\xff\xfe not an owner", makepath=True)
    store.write_owners("g", {("t", 0): "m-1"}, recorded=store.owners("g"))
    assert store.owners("g") == {("t", 0): "m-1"}
    assert zk.exists(layout.owner_path("g", "t", 3)) is None


def _written_group(store, group: str) -> None:
    """A group as an empty round leaves it: its state, a failure record, an
    owners directory emptied, and offsets."""
    state = layout.GroupState(2, "range", {}, lease_ms=3000)
    store.write_group_state(group, state, exists=False)
    store.write_group_failure(group, layout.GroupFailure(2, 5, "gave up"))
    store.write_owners(group, {("t", 0): "m"}, recorded={})
    store.write_owners(group, {}, recorded={("t", 0): "m"})
    store.write_offsets(group, {("t", 0): 4, ("u", 1): 9}, existing=set())


def test_forgetting_a_group_keeps_its_offsets_unless_they_expire(store, zk):
    from zkcoord.coordinator.store import GroupHasOffsets

    _written_group(store, "g")
    zk.ensure_path(layout.group_path("g") + "/ids")  # a Kafka 0.8 consumer's: not ours to delete
    with pytest.raises(GroupHasOffsets, match="committed offsets"):
        store.forget_group("g")
    assert store.offsets("g", [("t", 0), ("u", 1)]) == {("t", 0): 4, ("u", 1): 9}
    assert "g" in store.group_states() and zk.exists(layout.group_failure_path("g"))
    store.forget_group("g", offsets=True)
    assert "g" not in store.group_states() and not zk.exists(layout.group_state_path("g").rsplit("/", 1)[0])
    assert zk.get_children(layout.group_path("g")) == ["ids"]
    zk.delete(layout.group_path("g") + "/ids")
    store.write_group_state("h", layout.GroupState(1, "range", {}, lease_ms=0), exists=False)
    store.forget_group("h")  # no offsets: everything of it goes
    assert not zk.exists(layout.group_path("h")) and "h" not in store.group_states()


def test_a_deposed_coordinator_forgets_nothing(store, zk):
    _written_group(store, "g")
    successor = CoordinatorStore(zk, server_id=2)
    successor.claim_epoch()
    with pytest.raises(Deposed):
        store.forget_group("g", offsets=True)
    assert "g" in successor.group_states() and successor.offsets("g", [("t", 0)]) == {("t", 0): 4}


def test_a_coordinator_whose_election_node_was_deleted_by_hand_can_neither_prove_its_office_nor_write(zk):
    # Its session lives, so the node was not taken by ZooKeeper: without a
    # check of it, the proof would keep its office (and its pings going)
    # until a successor's claim, and so would its writes.
    from zkcoord.zk.layout import slot_of

    store = CoordinatorStore(zk, 1, slot=1, slots=2)
    store.claim_epoch(elected_as=b"1")
    store.prove_office()
    group = next(f"g{n}" for n in range(100) if slot_of(f"g{n}", 2) == 1)
    store.write_group_state(group, layout.GroupState(1, "range", {}), exists=False)
    zk.delete(layout.slot_coordinator_path(1))
    with pytest.raises(Deposed, match="election node"):
        store.prove_office()
    answers = []
    store.prove_office_async(answers.append)
    wait_until(lambda: answers, 10, message="the proof's answer")
    assert isinstance(answers[0], Deposed)
    with pytest.raises(Deposed, match="election node"):
        store.write_group_state(group, layout.GroupState(2, "range", {}), exists=True)
    assert store.group_states()[group].generation == 1


def test_a_claim_takes_an_epoch_above_every_slots_when_asked(zk):
    from zkcoord.zk.nodes import read_slot_epochs

    # Epochs of slot 0, of slot 1, and of slot 5, beyond a count since lowered to 2.
    for slot, epoch in ((0, 4), (1, 2), (5, 9)):
        zk.create(layout.slot_epoch_path(slot), layout.encode_coordinator_epoch(epoch), makepath=True)
    assert read_slot_epochs(zk) == {0: 4, 1: 2, 5: 9}
    # A group of slot 5 now falls in slot 1: its members have seen epoch 9.
    store = CoordinatorStore(zk, 1, slot=1, slots=2)
    assert store.claim_epoch(elected_as=b"1", above=max(read_slot_epochs(zk).values())).number == 10
    assert CoordinatorStore(zk, 2, slot=0, slots=2).claim_epoch(above=3).number == 5  # its own is higher


def test_the_rebalance_history_is_appended_bounded_fenced_and_replaced_when_unreadable(store, zk):
    def rounds(*generations):
        return [layout.RebalanceRecord(n, store.epoch.number, 1000 * n, 5, f"member m-{n} joined",
                                       "no ownership recorded", 1, 1, 0, 0, layout.COMPLETED) for n in generations]

    store.append_rebalance_history("g", rounds(1, 2), rounds=3)
    store.append_rebalance_history("g", rounds(3, 4), rounds=3)  # a successor appends, the oldest goes
    path = layout.group_history_path("g")
    assert layout.decode_history(zk.get(path)[0]) == rounds(2, 3, 4)
    zk.set(path, b"not a history")
    store.append_rebalance_history("g", rounds(5), rounds=3)
    assert layout.decode_history(zk.get(path)[0]) == rounds(5)
    successor = CoordinatorStore(zk, server_id=2)
    successor.claim_epoch()  # this store is deposed
    with pytest.raises(Deposed):
        store.append_rebalance_history("g", rounds(6), rounds=3)
    assert layout.decode_history(zk.get(path)[0]) == rounds(5)
    successor.forget_group("g")  # and it goes with its group
    assert zk.exists(path) is None
