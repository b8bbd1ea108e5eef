"""Where partitions' logs end, asked of their leaders for every coordinator a server runs.

Before a coordinator commits an offset above the last log end it learnt, it
asks the partition's leader where the log ends; a group following the head
asks at every offset flush, and a server runs one coordinator per slot.
:class:`LogEndReader` keeps one connection to each broker for all of them,
opened (TLS, SASL) when first needed and again after it fails, and merges
the questions that arrive while a request is in flight to a broker into
that broker's next ListOffsets.

The brokers' addresses come from their registrations in ZooKeeper, read
again when the registrations change (a one-shot watch) or a connection
fails; beside a KRaft Kafka, which registers nothing there, from Kafka's
Metadata as the server's :class:`KafkaClusterWatch` last read it. Which broker leads a partition is asked of every broker at once
(Metadata; the first answer counts) and kept until its leader fails or
disowns the partition.

Written with ``threading``: a server is monkey-patched, so there its
threads are greenlets, and a test drives it with real threads.
"""

from __future__ import annotations

import logging
import threading
import time
from functools import partial
from typing import Callable, Iterable, Optional

from zkcoord.errors import ZkcoordError
from kafka.errors import UnknownTopicOrPartitionError

from zkcoord.fetch.connection import BrokerConnection, PartitionError
from zkcoord.records import LogEnd, TopicPartition
from zkcoord.zk import layout
from zkcoord.zk.nodes import broker_addresses

log = logging.getLogger(__name__)

__all__ = ["LogEndReader"]


class LinkClosed(ZkcoordError):
    """The reader was closed while a question waited."""


class _Question:
    """Partitions' log ends (``partitions``) or leaders (``topics``) asked
    of one broker; ``answer`` is the answer or the error, once ``done``."""

    def __init__(self, partitions: frozenset = frozenset(), topics: frozenset = frozenset(),
                 settled: Optional[threading.Event] = None):
        self.partitions = partitions
        self.topics = topics
        self.answer = None
        self.done = threading.Event()
        self._settled = settled  # shared by questions of which the first answer counts

    def settle(self, answer) -> None:
        self.answer = answer
        self.done.set()
        if self._settled is not None:
            self._settled.set()


class _Link:
    """The connection to one broker, and the questions waiting for it. One
    thread at a time (``_busy``) serves them, all that have arrived in each
    request, until none is left."""

    def __init__(self, address: str, connect: Callable[[str], BrokerConnection],
                 failed: Callable[[str, BaseException], None]):
        self.address = address
        self._connect = connect
        self._failed = failed
        self._lock = threading.Lock()
        self._waiting: list[_Question] = []
        self._busy = False
        self._closed = False
        self._connection: Optional[BrokerConnection] = None

    def ask(self, question: _Question) -> _Question:
        with self._lock:
            if self._closed:
                question.settle(LinkClosed(f"the connection to broker {self.address} is closed"))
                return question
            self._waiting.append(question)
            if self._busy:  # in the next request of the thread serving
                return question
            self._busy = True
        threading.Thread(target=self._serve, name=f"log ends from {self.address}", daemon=True).start()
        return question

    def _serve(self) -> None:
        while True:
            with self._lock:
                batch, self._waiting = self._waiting, []
                if not batch or self._closed:
                    self._busy = False
                    break
            self._answer(batch)
        for question in batch:  # closed meanwhile
            question.settle(LinkClosed(f"the connection to broker {self.address} is closed"))
        if self._closed:
            self._disconnect()

    def _answer(self, batch: list[_Question]) -> None:
        asked = [q for q in batch if q.partitions]
        looking = [q for q in batch if q.topics]
        try:
            if self._connection is None:
                self._connection = self._connect(self.address)
            if asked:
                ends = self._connection.log_ends(frozenset().union(*(q.partitions for q in asked)))
                for question in asked:
                    question.settle({tp: ends[tp] for tp in question.partitions})
            if looking:
                found = self._connection.partitions(frozenset().union(*(q.topics for q in looking)))
                for question in looking:
                    question.settle(found)
        except Exception as exc:  # cannot connect, log in, or read the answer (or a bug): a new connection next time
            self._disconnect()
            for question in batch:
                if not question.done.is_set():
                    question.settle(exc)
            self._failed(self.address, exc)

    def _disconnect(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            connection.close()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            busy = self._busy
        if busy:  # the serving thread closes it once its request has failed
            connection = self._connection
            if connection is not None:
                connection.abort()
        else:
            self._disconnect()


class LogEndReader:
    """Partitions' log ends, asked of their leaders over one long-lived
    connection per broker registered in ``zk`` (``timeout_s`` to connect and
    for each request; over TLS with ``tls``, a client SSLContext; with SASL
    as ``credential``, (user, password)), at each one's endpoint that speaks
    that (:attr:`protocol`); with ``kafka``, the brokers that its Metadata
    names instead. Close it when done."""

    def __init__(self, zk, timeout_s: float, tls=None, credential=None,
                 connect: Callable[..., BrokerConnection] = BrokerConnection, kafka=None):
        self._zk = zk
        self._kafka = kafka
        if kafka is not None:
            kafka.on_brokers_changed(self._registrations_changed)
        self._connect = partial(connect, client_id="zkcoord-coordinator", timeout_s=timeout_s, tls=tls,
                                credential=credential)
        self.protocol = layout.client_protocol(tls is not None, credential is not None)
        self._lock = threading.Lock()
        self._links: dict[str, _Link] = {}
        self._addresses: Optional[list[str]] = None  # None: read the registrations again
        self._registrations_changes = 0  # how many times the registrations' watch has fired
        self._last_addresses: list[str] = []  # as last read, for when ZooKeeper cannot be asked
        self._leaders: dict[TopicPartition, str] = {}
        self._closed = False

    def log_ends(self, partitions: Iterable[TopicPartition], timeout_s: float) -> dict[TopicPartition, LogEnd]:
        """The log end of each of ``partitions`` whose leader answers within
        ``timeout_s``; one whose leader is unknown, unreachable, slow or
        answers with an error is left out. Each leader is asked at once, so
        one that hangs costs only its own partitions. A partition whose
        leader has moved (a retriable error, a connection that failed) is
        asked once more, of its leader as the brokers say now."""
        deadline = time.monotonic() + timeout_s
        result: dict[TopicPartition, LogEnd] = {}
        wanted = frozenset(TopicPartition(*tp) for tp in partitions)
        for _attempt in range(2):
            wanted = self._ask(wanted, deadline, result)
            if not wanted or time.monotonic() >= deadline:
                break
        return result

    def _ask(self, partitions: frozenset, deadline: float, result: dict) -> frozenset:
        """Ask the leaders of ``partitions``, adding their answers to
        ``result``; returns those whose leader has moved."""
        by_leader: dict[str, set] = {}
        for tp, leader in self._leaders_of(partitions, deadline).items():
            by_leader.setdefault(leader, set()).add(tp)
        questions = [self._link(leader).ask(_Question(partitions=frozenset(tps))) for leader, tps in by_leader.items()]
        moved: set[TopicPartition] = set()
        for question in questions:
            if not question.done.wait(max(deadline - time.monotonic(), 0.0)):
                continue  # that leader is slow: its partitions are left out this time
            if isinstance(question.answer, BaseException):
                self._forget_leaders(question.partitions)
                moved |= question.partitions
                continue
            for tp, answer in question.answer.items():
                if isinstance(answer, PartitionError):
                    log.info("log end of %s-%d not learnt: %s", tp[0], tp[1], answer)
                    if answer.code == UnknownTopicOrPartitionError.errno and self._kafka is not None:
                        self._kafka.refresh()  # a topic deleted, or created and not yet read
                    if answer.retriable:  # leadership moving: ask where it is
                        self._forget_leaders((tp,))
                        moved.add(tp)
                    continue
                result[tp] = answer
        return frozenset(moved)

    def _leaders_of(self, partitions: frozenset, deadline: float) -> dict[TopicPartition, str]:
        """The leaders known of ``partitions``, asking the brokers (all at
        once, the first answer counts) about those not known."""
        unknown = frozenset(tp.topic for tp in partitions if tp not in self._leaders)
        if unknown:
            try:
                addresses = self._brokers()
            except Exception as exc:  # kazoo's errors: no brokers to ask this time
                log.warning("cannot read the brokers' registrations: %s: %s", type(exc).__name__, exc)
                addresses = []
            settled = threading.Event()
            asked = [self._link(address).ask(_Question(topics=unknown, settled=settled)) for address in addresses]
            while asked:
                settled.clear()
                answered = [q for q in asked if q.done.is_set()]
                # A broker that does not know the topics yet (no leader in its answer) says nothing: wait for the others.
                found = next((q.answer for q in answered if not isinstance(q.answer, BaseException)
                              and any(leader is not None for leader in q.answer.values())), None)
                if found is not None:
                    with self._lock:
                        self._leaders.update({TopicPartition(*tp): leader for tp, leader in found.items()
                                              if leader is not None})
                    break
                if len(answered) == len(asked) or not settled.wait(max(deadline - time.monotonic(), 0.0)):
                    break
        leaders = self._leaders
        return {tp: leaders[tp] for tp in partitions if tp in leaders}

    def _brokers(self) -> list[str]:
        addresses = self._addresses
        if addresses is None and self._kafka is not None:
            addresses = self._addresses = self._kafka.addresses()
            self._close_links_but(addresses)
        elif addresses is None:
            if not self._zk.connected:
                # kazoo would hold the read until it reconnects, past the
                # question's deadline: ask the brokers last read, if any.
                return self._last_addresses
            changes = self._registrations_changes
            # One watcher however often they are read (kazoo keeps a set of them until the watch fires):
            # a broker that keeps failing reads them at every question.
            addresses = self._last_addresses = broker_addresses(self._zk, self.protocol,
                                                                watch=self._registrations_changed)
            if changes == self._registrations_changes:  # else they changed while read: read them again next time
                self._addresses = addresses
            self._close_links_but(addresses)
        return addresses

    def _close_links_but(self, addresses: list[str]) -> None:
        with self._lock:  # a broker gone, or registered again elsewhere: its connection with it
            gone = [self._links.pop(address) for address in list(self._links) if address not in addresses]
        for link in gone:
            link.close()

    def _registrations_changed(self, _event=None) -> None:
        self._registrations_changes += 1
        self._addresses = None

    def _link(self, address: str) -> _Link:
        with self._lock:
            link = self._links.get(address)
            if link is None:
                link = self._links[address] = _Link(address, self._connect, self._link_failed)
                if self._closed:
                    link.close()
            return link

    def _link_failed(self, address: str, error: BaseException) -> None:
        log.warning("log ends from broker %s: %s: %s", address, type(error).__name__, error)
        self._addresses = None  # it may have moved, or gone
        if self._kafka is not None:
            self._kafka.refresh()
        with self._lock:
            self._leaders = {tp: leader for tp, leader in self._leaders.items() if leader != address}

    def _forget_leaders(self, partitions: Iterable[TopicPartition]) -> None:
        with self._lock:
            for tp in partitions:
                self._leaders.pop(tp, None)

    def close(self) -> None:
        """Close every connection; questions asked from now on are answered with nothing."""
        with self._lock:
            self._closed = True
            links = list(self._links.values())
        for link in links:
            link.close()
