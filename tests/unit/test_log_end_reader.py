"""LogEndReader's choices with fake brokers and a fake ZooKeeper: which
leaders' word counts, and when the brokers' registrations are read again
(tests/broker/test_log_end_reader.py runs it against real brokers)."""

from __future__ import annotations

import threading

from zkcoord.coordinator import log_ends
from zkcoord.coordinator.log_ends import LogEndReader
from zkcoord.records import LogEnd, TopicPartition

TP = TopicPartition("t", 0)


class FakeBroker:
    """A connection to a broker that knows ``leaders`` ({tp: address}),
    answering Metadata once ``ready`` is set."""

    def __init__(self, leaders: dict, ready: threading.Event):
        self.leaders = leaders
        self.ready = ready

    def partitions(self, topics):
        self.ready.wait(10)
        return {tp: leader for tp, leader in self.leaders.items() if tp[0] in topics}

    def log_ends(self, partitions):
        return {tp: LogEnd(7, 0) for tp in partitions}

    def close(self):
        pass

    def abort(self):
        pass


class FakeZooKeeper:
    connected = True


def reader_of(brokers: dict, registrations: list, monkeypatch) -> LogEndReader:
    reads = []

    def broker_addresses(_zk, protocol, watch=None):
        reads.append(watch)
        return list(registrations())

    monkeypatch.setattr(log_ends, "broker_addresses", broker_addresses)
    reader = LogEndReader(FakeZooKeeper(), timeout_s=5.0, connect=lambda address, **_: brokers[address])
    reader.reads = reads
    return reader


def test_a_broker_that_does_not_know_the_topic_yet_does_not_end_the_search_for_its_leader(monkeypatch):
    at_once, later = threading.Event(), threading.Event()
    at_once.set()
    brokers = {"127.0.0.1:1": FakeBroker({}, at_once),  # not told of the topic yet: answers first, knowing nothing
               "127.0.0.1:2": FakeBroker({TP: "127.0.0.1:2"}, later)}
    reader = reader_of(brokers, lambda: list(brokers), monkeypatch)
    threading.Timer(0.2, later.set).start()
    try:
        assert reader.log_ends([TP], timeout_s=5.0) == {TP: LogEnd(7, 0)}
    finally:
        reader.close()


def test_without_zookeeper_the_brokers_last_read_are_asked_and_nothing_waits_for_it(monkeypatch):
    ready = threading.Event()
    ready.set()
    brokers = {"127.0.0.1:1": FakeBroker({TP: "127.0.0.1:1"}, ready)}
    reader = reader_of(brokers, lambda: list(brokers), monkeypatch)
    try:
        assert reader.log_ends([TP], timeout_s=5.0) == {TP: LogEnd(7, 0)}
        reader._registrations_changed()  # the registrations changed ...
        reader._forget_leaders([TP])
        reader._zk.connected = False  # ... and ZooKeeper cannot be asked now (kazoo would hold the read)
        assert reader.log_ends([TP], timeout_s=5.0) == {TP: LogEnd(7, 0)}
        assert len(reader.reads) == 1
    finally:
        reader.close()


def test_registrations_that_change_while_they_are_read_are_read_again(monkeypatch):
    ready = threading.Event()
    ready.set()
    brokers = {"127.0.0.1:1": FakeBroker({TP: "127.0.0.1:1"}, ready)}
    reader = None

    def registrations():
        if len(reader.reads) == 1:
            reader._registrations_changed()  # the watch fires during the first read
        return list(brokers)

    reader = reader_of(brokers, registrations, monkeypatch)
    try:
        reader._brokers()
        reader._brokers()
        assert len(reader.reads) == 2  # the first read was stale when it ended
        reader._brokers()
        assert len(reader.reads) == 2
    finally:
        reader.close()
