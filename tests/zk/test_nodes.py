"""The shared readers of brokers, servers, owners, offsets and the cluster id (zk/nodes.py),
on real ZooKeeper, through a threaded client and a gevent one: a parent not
there yet, a node gone between its listing and its read, names and data
that do not fit the layout, and the watches."""

from __future__ import annotations

import logging

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from zkcoord.records import TopicPartition
from zkcoord.zk import layout
from zkcoord.zk.gevent_handler import GeventHandler
from zkcoord.zk.nodes import broker_ids, cluster_id, read_brokers, read_offsets, read_owners, read_servers

WAIT_S = 10


@pytest.fixture(params=["threads", "gevent"])
def client(request, zk_connect):
    client = KazooClient(hosts=zk_connect, handler=GeventHandler()) if request.param == "gevent" \
        else KazooClient(hosts=zk_connect)
    client.start(timeout=30)
    yield client
    client.stop()
    client.close()


def registration(broker_id: int, port: int = 0) -> layout.BrokerRegistration:
    endpoint = layout.ListenerEndpoint("PLAINTEXT", "PLAINTEXT", "127.0.0.1", port or 9000 + broker_id)
    return layout.BrokerRegistration.for_endpoints(broker_id, [endpoint], timestamp_ms=1)


def add_broker(zk, broker_id: int, port: int = 0) -> None:
    zk.create(layout.broker_path(broker_id), layout.encode_broker(registration(broker_id, port)), makepath=True)


def vanishing_after_listing(monkeypatch, zk, listed: str, gone: str) -> None:
    """Make ``gone`` disappear right after ``listed`` is listed, before any read of it."""
    get_children = zk.get_children

    def listing(path, *args, **kwargs):
        children = get_children(path, *args, **kwargs)
        if path == listed:
            zk.delete(gone)
        return children

    monkeypatch.setattr(zk, "get_children", listing)


def left_out(caplog, *paths: str) -> bool:
    return all(any(path in record.getMessage() for record in caplog.records if record.levelno >= logging.ERROR)
               for path in paths)


# -- brokers --------------------------------------------------------------------------------


def test_brokers_are_read_by_id_in_numeric_order_and_none_before_any_registers(client):
    assert read_brokers(client) == {} and broker_ids(client) == []
    for broker_id in (10, 2, 1):
        add_broker(client, broker_id)
    brokers = read_brokers(client)
    assert list(brokers) == [1, 2, 10] == broker_ids(client)
    assert brokers[10] == registration(10)


def test_a_broker_gone_between_its_listing_and_its_read_is_left_out(client, monkeypatch):
    for broker_id in (1, 2, 3):
        add_broker(client, broker_id)
    vanishing_after_listing(monkeypatch, client, layout.BROKER_IDS, layout.broker_path(2))
    assert list(read_brokers(client)) == [1, 3]


def test_a_bad_registration_or_name_is_logged_and_left_out_and_hides_no_other(client, caplog):
    add_broker(client, 1)
    client.create(layout.broker_path(2), b"garbage")
    nowhere = layout.BrokerRegistration(3, None, -1, ())  # names no endpoint: cannot be reached
    client.create(layout.broker_path(3), layout.encode_broker(nowhere))
    client.create(f"{layout.BROKER_IDS}/04", layout.encode_broker(registration(4)))  # not how Kafka names 4
    client.create(f"{layout.BROKER_IDS}/x", layout.encode_broker(registration(5)))
    add_broker(client, 6)
    assert list(read_brokers(client)) == [1, 6]
    assert left_out(caplog, "/brokers/ids/2", "/brokers/ids/3", "/brokers/ids/04", "/brokers/ids/x")
    assert broker_ids(client) == [1, 2, 3, 6]  # registered, whatever they say


def test_a_watch_on_the_brokers_fires_when_one_comes_or_goes_and_on_a_changed_registration_if_asked(client):
    def watched(**kwargs):
        fired = client.handler.event_object()
        read_brokers(client, watch=lambda _event: fired.set(), **kwargs)
        return fired

    fired = watched()  # no /brokers/ids yet: its creation is watched
    add_broker(client, 1)
    assert fired.wait(WAIT_S)
    fired = watched()
    add_broker(client, 2)
    assert fired.wait(WAIT_S)
    fired = watched()
    client.delete(layout.broker_path(2))
    assert fired.wait(WAIT_S)

    fired = watched()  # the broker's own view: the listing only
    client.set(layout.broker_path(1), layout.encode_broker(registration(1, 7001)))
    assert not fired.wait(1)
    fired = watched(watch_data=True)  # the servers' metadata: each registration too
    client.set(layout.broker_path(1), layout.encode_broker(registration(1, 7002)))
    assert fired.wait(WAIT_S)
    assert read_brokers(client)[1].port == 7002


# -- servers --------------------------------------------------------------------------------


def test_servers_are_read_whole_and_a_bad_one_is_logged_and_left_out(client, caplog):
    assert read_servers(client) == {}
    for server_id in ("1", "2"):
        client.create(layout.server_path(server_id),
                      layout.encode_server(layout.ServerInfo(server_id, "127.0.0.1", 9100 + int(server_id))),
                      makepath=True)
    client.create(layout.server_path("3"), b"{}")
    assert read_servers(client) == {"1": layout.ServerInfo("1", "127.0.0.1", 9101),
                                    "2": layout.ServerInfo("2", "127.0.0.1", 9102)}
    assert left_out(caplog, "/zkcoord/servers/3")


# -- owners and offsets ---------------------------------------------------------------------


def own(zk, group: str, topic: str, partition, owner: bytes) -> None:
    zk.create(f"{layout.owners_path(group)}/{topic}/{partition}", owner, makepath=True)  # any name, as a tool might


def commit(zk, group: str, topic: str, partition, offset: bytes) -> None:
    zk.create(f"{layout.offsets_path(group)}/{topic}/{partition}", offset, makepath=True)


@pytest.mark.parametrize("multi_read", [False, True])
def test_owners_and_offsets_of_a_group_that_has_none_read_as_empty(client, multi_read):
    assert read_owners(client, "g", multi_read=multi_read) == {}
    assert read_offsets(client, "g", multi_read=multi_read) == {}
    assert read_offsets(client, "g", [("t", 0)], multi_read=multi_read) == {}


@pytest.mark.parametrize("multi_read", [False, True])
def test_owners_and_offsets_are_keyed_by_topic_partition(client, multi_read):
    own(client, "g", "t", 0, b"c-1")
    own(client, "g", "u", 3, b"c-2")
    commit(client, "g", "t", 0, b"42")
    commit(client, "g", "t", 1, b"7")
    owners = read_owners(client, "g", multi_read=multi_read)
    assert owners == {("t", 0): "c-1", ("u", 3): "c-2"}  # equal to plain tuples
    assert all(type(tp) is TopicPartition for tp in owners)
    assert read_offsets(client, "g", multi_read=multi_read) == {TopicPartition("t", 0): 42, TopicPartition("t", 1): 7}
    assert read_offsets(client, "g", [("t", 1), ("t", 2)], multi_read=multi_read) == {("t", 1): 7}


@pytest.mark.parametrize("multi_read", [False, True])
def test_an_owner_or_offset_gone_between_its_listing_and_its_read_is_left_out(client, monkeypatch, multi_read):
    for partition in range(3):
        own(client, "g", "t", partition, b"c-1")
        commit(client, "g", "t", partition, b"5")
    vanishing_after_listing(monkeypatch, client, layout.owners_path("g", "t"), layout.owner_path("g", "t", 1))
    assert read_owners(client, "g", multi_read=multi_read) == {("t", 0): "c-1", ("t", 2): "c-1"}
    for strict in (True, False):
        monkeypatch.undo()
        client.ensure_path(layout.offset_path("g", "t", 1))
        vanishing_after_listing(monkeypatch, client, layout.offsets_path("g", "t"), layout.offset_path("g", "t", 1))
        assert read_offsets(client, "g", strict=strict, multi_read=multi_read) == {("t", 0): 5, ("t", 2): 5}


@pytest.mark.parametrize("multi_read", [False, True])
@pytest.mark.parametrize("bad", [
    pytest.param(("t", 1, b"\xff"), id="data"),
    pytest.param(("t", "01", b"c-2"), id="partition-name"),
    pytest.param(("t", "x", b"c-2"), id="not-a-partition"),
    pytest.param(("no such topic!", 0, b"c-2"), id="topic-name"),
])
def test_an_owner_that_does_not_fit_raises_for_tools_and_is_logged_and_left_out_for_the_coordinator(
        client, caplog, bad, multi_read):
    own(client, "g", "t", 0, b"c-1")
    topic, partition, data = bad
    own(client, "g", topic, partition, data)
    path = f"{layout.owners_path('g')}/{topic}"
    with pytest.raises(layout.LayoutError, match=path):
        read_owners(client, "g", multi_read=multi_read)
    assert read_owners(client, "g", strict=False, multi_read=multi_read) == {("t", 0): "c-1"}
    assert left_out(caplog, path)


@pytest.mark.parametrize("multi_read", [False, True])
def test_an_offset_that_cannot_be_read_is_never_taken_for_no_offset_unless_asked(client, caplog, multi_read):
    commit(client, "g", "t", 0, b"10")
    commit(client, "g", "t", 1, b"-1")
    asked = [("t", 0), ("t", 1)]
    for partitions in (None, asked):
        with pytest.raises(layout.LayoutError, match=layout.offset_path("g", "t", 1)):
            read_offsets(client, "g", partitions, multi_read=multi_read)
        assert read_offsets(client, "g", partitions, strict=False, multi_read=multi_read) == {("t", 0): 10}
    assert left_out(caplog, layout.offset_path("g", "t", 1))


# -- /cluster/id ------------------------------------------------------------------------------


def test_the_cluster_id_is_created_once_and_read_alike_by_every_caller(client, zk_connect, monkeypatch):
    assert client.exists(layout.CLUSTER_ID_PATH) is None
    first = cluster_id(client)
    data, _ = client.get(layout.CLUSTER_ID_PATH)
    assert data == b'{"version":"1","id":"%s"}' % first.encode() and len(first) == 22
    assert cluster_id(client) == first
    # a caller that loses the race to create it reads the winner's
    client.delete(layout.CLUSTER_ID_PATH)
    get = client.get
    calls = []

    def racing_get(path, *args, **kwargs):
        if path == layout.CLUSTER_ID_PATH and not calls:
            calls.append(path)
            client.create(path, layout.encode_cluster_id("yWo4yAVpS2W1tqX3fRKbYQ"))
            raise NoNodeError()
        return get(path, *args, **kwargs)

    monkeypatch.setattr(client, "get", racing_get)
    assert cluster_id(client) == "yWo4yAVpS2W1tqX3fRKbYQ"


def test_a_cluster_id_that_does_not_fit_is_a_layout_error_and_is_left_as_it_is(client):
    client.create(layout.CLUSTER_ID_PATH, b'{"version":"1","id":42}', makepath=True)
    with pytest.raises(layout.LayoutError, match="/cluster/id"):
        cluster_id(client)
    assert client.get(layout.CLUSTER_ID_PATH)[0] == b'{"version":"1","id":42}'
