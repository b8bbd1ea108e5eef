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
    assert answer.servers == (wire.Endpoint(1, "127.0.0.1", 9001), wire.Endpoint(2, "127.0.0.1", 9002))
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
