"""The ACL cache's reloads, decided without ZooKeeper: one runs at a time,
and a notification that arrives while one reads makes it read again, so the
snapshot kept is never older than the last notification (two reloads at once
could end in the wrong order and keep the older one)."""

from __future__ import annotations

import pytest

from zkcoord.security import acl
from zkcoord.zk import security_store as store


class Handler:
    """Keeps what was spawned, to be run when the test says."""

    def __init__(self):
        self.spawned = []

    def spawn(self, function, *args):
        self.spawned.append((function, args))

    def run_spawned(self):
        while self.spawned:
            function, args = self.spawned.pop(0)
            function(*args)


class FakeZk:
    def __init__(self):
        self.handler = Handler()


def snapshot(name: str) -> dict:
    return {acl.group(name): frozenset({acl.AclEntry("User:alice", acl.ALLOW, acl.READ)})}


@pytest.fixture
def cache(monkeypatch):
    monkeypatch.setattr(store, "purge_acl_changes", lambda *_: [])
    return store.AclCache(FakeZk(), 60_000, clock=lambda: 0.0)


def test_notifications_during_a_reload_are_read_by_it_afterwards(cache, monkeypatch):
    reads = []

    def read_acls(_zk):
        reads.append(len(reads))
        if len(reads) == 1:  # two more changes land while the first read is in flight
            assert cache._on_change([]) and cache._on_change([])
        return snapshot(f"read-{len(reads)}")

    monkeypatch.setattr(store, "read_acls", read_acls)
    assert cache._on_change([])
    assert cache._on_change([])  # before the reload began: the same reload reads it
    assert len(cache._zk.handler.spawned) == 1
    cache._zk.handler.run_spawned()
    # One read for the first two notifications, one for the two during it.
    assert reads == [0, 1] and cache.acls == snapshot("read-2")
    assert cache._zk.handler.spawned == []


def test_a_reload_that_failed_leaves_the_snapshot_and_the_next_notification_reads(cache, monkeypatch, caplog):
    cache.acls = before = snapshot("before")

    def broken(_zk):
        raise RuntimeError("connection lost")

    monkeypatch.setattr(store, "read_acls", broken)
    cache._on_change([])
    cache._zk.handler.run_spawned()
    assert cache.acls == before and "could not reload ACLs: connection lost" in caplog.text
    monkeypatch.setattr(store, "read_acls", lambda _zk: snapshot("after"))
    cache._on_change([])
    assert len(cache._zk.handler.spawned) == 1  # not held back by the failed one
    cache._zk.handler.run_spawned()
    assert cache.acls == snapshot("after")


def test_a_stopped_cache_reads_no_more(cache, monkeypatch):
    monkeypatch.setattr(store, "read_acls", lambda _zk: pytest.fail("read after stop"))
    cache._on_change([])
    cache.stop()
    cache._zk.handler.run_spawned()
    assert cache._on_change([]) is False and cache._zk.handler.spawned == []


def test_a_reload_killed_midway_lets_the_next_notification_start_another(cache, monkeypatch):
    from gevent import GreenletExit

    def killed(_zk):
        raise GreenletExit()  # the process stopping under it

    monkeypatch.setattr(store, "read_acls", killed)
    cache._on_change([])
    with pytest.raises(GreenletExit):
        cache._zk.handler.run_spawned()
    monkeypatch.setattr(store, "read_acls", lambda _zk: snapshot("after"))
    cache._on_change([])
    cache._zk.handler.run_spawned()
    assert cache.acls == snapshot("after")


def test_a_reload_that_could_not_be_started_lets_the_next_notification_try(cache, monkeypatch):
    monkeypatch.setattr(store, "read_acls", lambda _zk: snapshot("after"))
    handler = cache._zk.handler

    def no_thread(*_):
        raise RuntimeError("can't start new thread")

    handler.spawn = no_thread
    with pytest.raises(RuntimeError):
        cache._on_change([])
    del handler.spawn  # spawning works again
    cache._on_change([])
    handler.run_spawned()
    assert cache.acls == snapshot("after")
