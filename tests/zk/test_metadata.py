"""ClusterMetadata from memory (coordinator/metadata.py), on real ZooKeeper."""

from __future__ import annotations

import pytest
from kazoo.client import KazooClient

from zkcoord import wire
from zkcoord.coordinator.metadata import MetadataView
from zkcoord.testing import wait_until
from zkcoord.testing.faults import expire_session
from zkcoord.zk import layout


@pytest.fixture
def view(zk_connect):
    client = KazooClient(hosts=zk_connect)
    client.start(timeout=15)
    metadata = MetadataView(client)
    metadata.start()
    yield metadata
    metadata.stop()
    client.stop()
    client.close()


def add_server(zk, server_id: int, port: int) -> None:
    zk.create(layout.server_path(str(server_id)),
              layout.encode_server(layout.ServerInfo(str(server_id), "127.0.0.1", port)), makepath=True)


def test_the_answer_follows_elections_and_servers_without_a_read_per_request(zk, view):
    wait_until(lambda: view.answer().error_code == wire.ErrorCode.NONE, message="a first answer")
    assert view.answer().coordinator_id == -1 and view.answer().servers == ()
    add_server(zk, 1, 9001)
    add_server(zk, 2, 9002)
    zk.create(layout.COORDINATOR_EPOCH_PATH, layout.encode_coordinator_epoch(7), makepath=True)
    zk.create(layout.COORDINATOR_PATH, layout.encode_coordinator("2"), makepath=True)
    wait_until(lambda: view.answer().coordinator_id == 2 and len(view.answer().servers) == 2,
               message="the election and both servers")
    answer = view.answer()
    assert answer.coordinator_epoch == 7
    assert answer.servers == (wire.NodeAddress(1, "127.0.0.1", 9001), wire.NodeAddress(2, "127.0.0.1", 9002))
    reads = view.reads
    assert all(view.answer() is answer for _ in range(10_000)) and view.reads == reads

    zk.delete(layout.COORDINATOR_PATH)  # the coordinator died
    zk.delete(layout.server_path("2"))
    wait_until(lambda: view.answer().coordinator_id == -1 and len(view.answer().servers) == 1,
               message="the coordinator and its server gone")
    zk.set(layout.COORDINATOR_EPOCH_PATH, layout.encode_coordinator_epoch(8))
    zk.create(layout.COORDINATOR_PATH, layout.encode_coordinator("1"))
    wait_until(lambda: (view.answer().coordinator_id, view.answer().coordinator_epoch) == (1, 8),
               message="a new election")


def test_watches_are_armed_again_after_the_session_expires(zk, zk_connect, view):
    wait_until(lambda: view.answer().error_code == wire.ErrorCode.NONE, message="a first answer")
    expire_session(view.zk, zk_connect)
    add_server(zk, 3, 9003)
    wait_until(lambda: [s.id for s in view.answer().servers] == [3], timeout=20,
               message="a server registered after the session expired")


def test_each_group_is_answered_with_its_own_slots_coordinator(zk, zk_connect):
    from zkcoord.zk.layout import slot_of

    client = KazooClient(hosts=zk_connect)
    client.start(timeout=15)
    view = MetadataView(client, slots=4)
    view.start()
    try:
        add_server(zk, 1, 9001)
        add_server(zk, 2, 9002)
        for slot, server, epoch in ((0, "1", 3), (2, "2", 9)):
            zk.create(layout.slot_epoch_path(slot), layout.encode_coordinator_epoch(epoch), makepath=True)
            zk.create(layout.slot_coordinator_path(slot), layout.encode_coordinator(server), makepath=True)
        group = {slot: next(f"g{n}" for n in range(1000) if slot_of(f"g{n}", 4) == slot) for slot in range(4)}
        wait_until(lambda: view.answer(group[2]).coordinator_id == 2 and view.answer(group[0]).coordinator_id == 1,
                   message="both elections")
        assert [(a.coordinator_id, a.coordinator_epoch, a.slot, a.slots) for a in map(view.answer, group.values())] \
            == [(1, 3, 0, 4), (-1, -1, 1, 4), (2, 9, 2, 4), (-1, -1, 3, 4)]
        assert view.answer() is view.answer(group[0])  # no group: slot 0, the seed's coordinator
        assert view.holder(2) == 2 and view.holder(3) == -1
        zk.create(layout.slot_coordinator_path(3), layout.encode_coordinator("1"), makepath=True)  # watched while absent
        wait_until(lambda: view.answer(group[3]).coordinator_id == 1, message="slot 3 elected")
    finally:
        view.stop()
        client.stop()
        client.close()


def test_an_answer_asked_for_a_newer_coordinator_comes_the_moment_one_is_elected(zk, view):
    import threading
    import time

    zk.create(layout.COORDINATOR_EPOCH_PATH, layout.encode_coordinator_epoch(4), makepath=True)
    zk.create(layout.COORDINATOR_PATH, layout.encode_coordinator("1"), makepath=True)
    wait_until(lambda: view.answer().coordinator_epoch == 4, message="epoch 4")
    began = time.monotonic()
    assert view.answer_when("", known_epoch=3, timeout=30).coordinator_epoch == 4  # newer already: at once
    assert time.monotonic() - began < 15  # not held for its 30 s (loose: a loaded machine is slow)
    began = time.monotonic()
    assert view.answer_when("", known_epoch=4, timeout=0.3).coordinator_epoch == 4  # none newer: the timeout
    assert time.monotonic() - began >= 0.25  # held until its timeout

    def elect_later():
        time.sleep(0.5)  # the election this test waits for, not a synchronisation of the test
        zk.delete(layout.COORDINATOR_PATH)
        zk.set(layout.COORDINATOR_EPOCH_PATH, layout.encode_coordinator_epoch(5))
        zk.create(layout.COORDINATOR_PATH, layout.encode_coordinator("2"))

    threading.Thread(target=elect_later, daemon=True).start()
    began = time.monotonic()
    answer = view.answer_when("", known_epoch=4, timeout=10)
    assert (answer.coordinator_id, answer.coordinator_epoch) == (2, 5)
    assert time.monotonic() - began < 5  # answered on the election, long before the 10 s


def test_the_answers_follow_a_change_of_the_slot_count(zk, zk_connect):
    from zkcoord.zk.layout import slot_of

    zk.create(layout.SLOTS, layout.encode_slot_count(2), makepath=True)
    client = KazooClient(hosts=zk_connect)
    client.start(timeout=15)
    view = MetadataView(client, slots=2)
    view.start()
    try:
        group = next(f"g{n}" for n in range(1000) if slot_of(f"g{n}", 2) == 1 and slot_of(f"g{n}", 3) == 2)
        zk.create(layout.slot_coordinator_path(2), layout.encode_coordinator("7"), makepath=True)
        wait_until(lambda: view.answer(group).slots == 2, message="a first answer")
        assert (view.answer(group).slot, view.answer(group).coordinator_id) == (1, -1)
        zk.set(layout.SLOTS, layout.encode_slot_count(3))
        wait_until(lambda: view.answer(group).slots == 3, message="the answer of three slots")
        assert (view.answer(group).slot, view.answer(group).coordinator_id) == (2, 7)
        assert view.holder(2) == 7 and view.holder(5) == -1
    finally:
        view.stop()
        client.stop()
        client.close()
