"""kazoo under gevent with thousands of requests in flight (zk/gevent_handler.py), on real ZooKeeper."""

from __future__ import annotations

import gevent
import gevent.event
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


def test_zookeeper_answers_jump_the_hubs_callback_queue_where_a_plain_gevent_wake_up_waits_behind_it(zk_connect):
    """A coordinator's path to ZooKeeper under a join storm: its answers
    (taken at once, or by a greenlet waiting in get()) must not wait behind a
    crowd of other wake-ups, as a greenlet woken the ordinary gevent way does."""
    client = KazooClient(hosts=zk_connect, handler=GeventHandler())
    client.start(timeout=30)
    try:
        order: list[str] = []
        crowd = 20_000
        plain = gevent.event.AsyncResult()  # set at the same moment as the first answer

        def busy():  # one wake-up of the crowd: about 20 µs of work, so a few hundred per turn
            sum(range(1000))
            order.append("crowd")

        def waiter(result, name):
            result.get()
            order.append(name)

        def taken(result):
            order.append("at once")
            plain.set(True)

        first, second = client.exists_async("/"), client.exists_async("/")
        first.at_once(taken)
        greenlets = [gevent.spawn(waiter, second, "get"), gevent.spawn(waiter, plain, "plain")]
        gevent.sleep(0)  # both greenlets now block in get()
        loop = gevent.get_hub().loop
        for _ in range(crowd):
            loop.run_callback(busy)
        gevent.joinall(greenlets, timeout=60)
        assert order.count("crowd") == crowd and {"at once", "get", "plain"} <= set(order)
        # The answers arrive within a few turns of the hub (each runs about
        # 5 ms of callbacks); the plain wake-up only after the whole crowd.
        assert order.index("at once") < crowd // 4
        assert order.index("get") < crowd // 4
        assert order.index("plain") > crowd - 100
    finally:
        client.stop()
        client.close()


def test_get_with_a_timeout_times_out_and_a_later_answer_is_kept():
    from zkcoord.zk.gevent_handler import Result

    result = Result()
    with pytest.raises(gevent.Timeout):
        result.get(timeout=0.05)
    result.set(3)
    assert result.get() == 3


def test_at_once_on_a_result_already_set_calls_now_and_a_failing_receiver_is_contained():
    from zkcoord.zk.gevent_handler import Result

    result, seen = Result(), []
    result.set(5)
    result.at_once(lambda r: seen.append(r.get(block=False)))
    assert seen == [5]
    failing = Result()
    failing.at_once(lambda r: 1 / 0)
    failing.set_exception(KeyError("x"))  # the receiver's error is logged, not raised into kazoo
    assert isinstance(failing.exception, KeyError)


def test_a_waiting_greenlet_and_a_receiver_both_hear_the_answer():
    from zkcoord.zk.gevent_handler import Result

    result, heard = Result(), []
    waiting = gevent.spawn(result.get, timeout=5)
    gevent.sleep(0)  # the greenlet is waiting in get()
    result.at_once(lambda r: heard.append(("first", r.get(block=False))))
    result.at_once(lambda r: heard.append(("second", r.get(block=False))))
    result.set(42)
    assert waiting.get(timeout=2) == 42
    assert heard == [("first", 42), ("second", 42)]
