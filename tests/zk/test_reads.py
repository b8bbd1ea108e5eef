"""Reading many nodes at once (zk/reads.py), on real ZooKeeper: multiRead and one request per node agree."""

from __future__ import annotations

import pytest
from kazoo.client import KazooClient

from zkcoord.zk import reads
from zkcoord.zk.gevent_handler import GeventHandler
from zkcoord.zk.layout import LayoutError
from zkcoord.zk.reads import KEEP, READ_BATCH, read_nodes

NODES = READ_BATCH * 2 + 50  # three batches, the last one short


def decode(key: int, data: bytes) -> int:
    if data == b"garbage":
        raise LayoutError(f"node {key} holds garbage")
    return int(data)


@pytest.fixture
def client(zk_connect):
    client = KazooClient(hosts=zk_connect, handler=GeventHandler())  # a chroot: multiRead's paths must carry it
    client.start(timeout=30)
    yield client
    client.stop()
    client.close()


def test_multi_read_gives_what_one_read_per_node_gives_missing_and_unreadable_nodes_included(client):
    for i in range(NODES):
        if i % 7 == 3:
            continue  # absent
        client.create(f"/n/{i}", b"garbage" if i % 11 == 5 else str(i * 10).encode(), makepath=True)
    paths = {i: f"/n/{i}" for i in range(NODES)}
    calls = []
    real_call = client._call
    client._call = lambda request, answer: calls.append(type(request).__name__) or real_call(request, answer)

    together = read_nodes(client, paths, decode, "test node", small=True, unreadable=KEEP)
    assert calls == ["MultiRead"] * 3  # one request per batch
    one_each = read_nodes(client, paths, decode, "test node", unreadable=KEEP)
    assert together == one_each
    assert together[0] == 0 and together[12] == 120 and 3 not in together and together[5] is None
    assert len(together) == NODES - len([i for i in range(NODES) if i % 7 == 3])


def test_the_zookeeper_under_test_is_known_to_have_multi_read_and_an_older_one_is_refused(client, monkeypatch):
    assert reads.zookeeper_version(client) >= reads.MULTI_READ_SINCE
    reads.check_multi_read(client)
    monkeypatch.setattr(client, "command", lambda cmd: "Zookeeper version: 3.5.9-83df9301aa5c, built on 01/06/2021\n")
    with pytest.raises(reads.ZooKeeperTooOld, match="3.5 has no multiRead"):
        reads.check_multi_read(client)
    monkeypatch.setattr(client, "command", lambda cmd: "srvr is not executed because it is not in the whitelist.\n")
    assert reads.zookeeper_version(client) is None
    reads.check_multi_read(client)  # cannot tell: let it try
