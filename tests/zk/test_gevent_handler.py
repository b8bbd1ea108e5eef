"""kazoo under gevent with thousands of requests in flight (zk/gevent_handler.py), on real ZooKeeper."""

from __future__ import annotations

import gevent
import pytest
from kazoo.client import KazooClient

from zkcoord.zk.gevent_handler import GeventHandler

REQUESTS = 5000


def test_thousands_of_requests_at_once_all_succeed_and_the_client_stays_usable(zk_connect, zk):
    zk.create("/present", b"x")
    client = KazooClient(hosts=zk_connect, handler=GeventHandler())
    client.start(timeout=30)
    try:
        # Far more than the wake-up pair's buffer holds (a few hundred bytes'
        # worth of one-byte writes): kazoo's own handler loses most of these.
        jobs = [gevent.spawn(client.exists, "/present" if i % 2 else f"/absent-{i}") for i in range(REQUESTS)]
        gevent.joinall(jobs, timeout=60, raise_error=True)
        assert all(job.successful() for job in jobs)
        assert sum(job.value is not None for job in jobs) == REQUESTS // 2
        assert client.get("/present")[0] == b"x"  # nothing left queued without its wake-up
    finally:
        client.stop()
        client.close()


def test_every_wake_up_written_is_read_once_however_full_the_pair():
    read_end, write_end = GeventHandler().create_socket_pair()
    try:
        for _ in range(3):
            for _ in range(20_000):  # far past the buffer: most are owed, none refused
                assert write_end.send(b"\0") == 1
            for _ in range(20_000):  # each read makes room for one owed
                assert read_end.recv(1) == b"\0"
            with pytest.raises(BlockingIOError):  # and not one more
                read_end.recv(1)
    finally:
        read_end.close()
        write_end.close()
