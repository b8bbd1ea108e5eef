"""Every metric a zkcoord process exposes, declared once: name, help, labels, buckets.

Each process has a registry of its own (:func:`new_registry`), never
prometheus_client's global one, so that two servers in one process count
apart. Events are counted where they happen: the coordinator's core through
:class:`CoordinatorMetrics` (its ``CoreMetrics``), the broker's request loop
through :class:`BrokerMetrics`, ZooKeeper requests in the one handler every
client of ours uses (zk/gevent_handler.py). State (groups and members by
state, slots held, connections open) is not counted but read at each scrape
(:class:`CoordinatorCollector`, gauge functions), so it cannot drift from
what it describes.

On hot paths (a fetch, a produce, a ping) counting is an increment of a
child counter looked up once per label value; nothing is done per record.
docs/METRICS.md lists every name.
"""

from __future__ import annotations

import time
from typing import Callable, Iterable, Iterator, Mapping

import kafka.errors
from kafka.protocol.api_key import ApiKey
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, ProcessCollector
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily


PREFIX = "zkcoord_"
# ZooKeeper round trips and offset writes: a fraction of a millisecond on a
# quiet local ensemble, seconds when it is in trouble.
ZOOKEEPER_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
# Rebalances: tens of milliseconds (nothing moves) to the rebalance timeout and beyond (a member slow to stop).
REBALANCE_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)


def new_registry() -> CollectorRegistry:
    """A process's own registry, with the process's CPU, memory and open files."""
    registry = CollectorRegistry()
    ProcessCollector(registry=registry)
    return registry


# -- ZooKeeper -----------------------------------------------------------------------------------


class ZooKeeperMetrics:
    """The process's ZooKeeper client: request latency and whether it is connected."""

    def __init__(self, registry: CollectorRegistry):
        self._latency = Histogram(PREFIX + "zookeeper_request_duration_seconds",
                                  "ZooKeeper requests, from asking to the answer (queueing in the client included)",
                                  buckets=ZOOKEEPER_BUCKETS, registry=registry)
        self._connected = Gauge(PREFIX + "zookeeper_connected", "1 while the ZooKeeper client is connected, else 0",
                                registry=registry)
        # What the client's handler calls with each request's seconds.
        self.observe: Callable[[float], None] = self._latency.observe

    def watch(self, connected: Callable[[], bool]) -> None:
        """Read the connection's state from ``connected`` at each scrape."""
        self._connected.set_function(lambda: 1.0 if connected() else 0.0)


# -- the listeners -------------------------------------------------------------------------------


class ListenerMetrics:
    """What the process's listeners refused (zkcoord.limits): by listener
    (coordinator, broker) and kind (malformed, frame_deadline, per_address, buffer_cap, tls_handshake,
    authentication_deadline)."""

    def __init__(self, registry: CollectorRegistry):
        self._refused = Counter(PREFIX + "listener_refusals_total",
                                "Connections and frames a listener refused and closed, by listener and why: "
                                "malformed (not a valid frame), frame_deadline (not whole within the frame "
                                "timeout), per_address (over the connections one address may hold), buffer_cap "
                                "(over the bytes the process keeps for partial frames), tls_handshake (a TLS "
                                "handshake refused or not done within its timeout), authentication_deadline "
                                "(where authentication is required, not done within its timeout)",
                                ["listener", "kind"], registry=registry)

    def refused(self, listener: str, kind: str) -> None:
        self._refused.labels(listener, kind).inc()


class LoginMetrics:
    """The process's password and SCRAM logins (zkcoord.security.checks), by
    outcome, and the key derivations (PBKDF2) they cost."""

    def __init__(self, registry: CollectorRegistry):
        self._logins = Counter(PREFIX + "logins_total",
                               "Logins decided, by outcome: accepted (a password or SCRAM proof that matched), "
                               "failed (a wrong password or proof, an unknown user), limited (refused unchecked: "
                               "its address or user failed too often), busy (refused: too many checks waiting)",
                               ["outcome"], registry=registry)
        self._derivations = Counter(PREFIX + "password_derivations_total",
                                    "Keys derived from offered passwords (PBKDF2, in the login threads); a login "
                                    "that a remembered or running check answered derives none",
                                    registry=registry)

    def login(self, outcome: str) -> None:
        self._logins.labels(outcome).inc()

    def derived(self) -> None:
        self._derivations.inc()


# -- the coordinator -------------------------------------------------------------------------------


class CoordinatorMetrics:
    """What the cores of a server's coordinators count, over every slot and
    epoch this process has held: the core's metrics interface (``CoreMetrics``
    in zkcoord/coordinator/core/observed.py), filled here without this
    package knowing the core. ``expiry_reasons``: the reasons a member may be
    dropped for, each shown at 0 before it first happens."""

    def __init__(self, registry: CollectorRegistry, expiry_reasons: Iterable[str] = ()):
        # A ping is the hottest path here: counted in a plain int, read at each scrape.
        self.pings_sent = 0
        registry.register(_CountCollector(PREFIX + "pings_sent", "Pings sent to members", lambda: self.pings_sent))
        expiries = Counter(PREFIX + "member_expiries_total",
                           "Members dropped without leaving, by why: no_answer (a request unanswered within its "
                           "timeout), max_poll_interval (alive but not polling), static_timeout (a static member "
                           "not back within its session timeout)", ["reason"], registry=registry)
        self._expiries = expiries
        self._expired = {reason: expiries.labels(reason) for reason in expiry_reasons}
        self._rebalances = Counter(PREFIX + "rebalances_total", "Rebalances completed (the group stable again)",
                                   registry=registry)
        self._rebalance_seconds = Histogram(PREFIX + "rebalance_duration_seconds",
                                            "Completed rebalances, from the round's start to its owners written",
                                            buckets=REBALANCE_BUCKETS, registry=registry)
        failures = Counter(PREFIX + "rebalance_failures_total",
                           "Rebalance attempts that failed (retried after a backoff, up to the retries allowed)",
                           registry=registry)
        self._flushes = Counter(PREFIX + "offset_flushes_total", "Offset flushes to ZooKeeper that ended, failed or not",
                                registry=registry)
        self._flush_failures = Counter(PREFIX + "offset_flush_failures_total",
                                       "Offset flushes that failed (the offsets stay pending and are written later)",
                                       registry=registry)
        self._flush_seconds = Histogram(PREFIX + "offset_flush_duration_seconds",
                                        "Offset flushes, from the write asked for to its answer",
                                        buckets=ZOOKEEPER_BUCKETS, registry=registry)
        self.rebalance_failed = failures.inc

    def ping_sent(self) -> None:
        self.pings_sent += 1

    def member_expired(self, reason: str) -> None:
        child = self._expired.get(reason)
        if child is None:
            child = self._expired[reason] = self._expiries.labels(reason)
        child.inc()

    def rebalanced(self, report) -> None:
        """``report``: the core's RebalanceReport (its ``seconds``)."""
        self._rebalances.inc()
        self._rebalance_seconds.observe(report.seconds)

    def offsets_flushed(self, seconds: float, failed: bool) -> None:
        self._flushes.inc()
        self._flush_seconds.observe(seconds)
        if failed:
            self._flush_failures.inc()


class _CountCollector:
    """A counter kept by its owner as a plain int, exposed at each scrape as
    prometheus_client's Counter exposes one (``<name>_total`` and ``<name>_created``):
    an increment costs an attribute add instead of a locked call."""

    def __init__(self, name: str, documentation: str, count: Callable[[], int]):
        self._name = name
        self._documentation = documentation
        self._count = count
        self._created = time.time()

    def collect(self) -> Iterator[CounterMetricFamily]:
        family = CounterMetricFamily(self._name, self._documentation)
        family.add_metric([], self._count(), created=self._created)
        yield family

    def describe(self) -> Iterator[CounterMetricFamily]:
        return self.collect()


class CoordinatorCollector:
    """Groups, members and coordinator slots, read from the cores at each scrape.

    ``cores`` gives the core of each slot this server holds now (its
    ``census()``, ``state`` and ``epoch``); ``slot_count`` the cluster's number
    of slots. ``group_states``, ``member_states`` and ``slot_states`` are every
    state a group, a member and a slot's coordinator may be in: each is shown,
    at 0 when nothing is in it."""

    def __init__(self, cores: Callable[[], Mapping[int, object]], slot_count: Callable[[], int],
                 group_states: Iterable[str] = (), member_states: Iterable[str] = (),
                 slot_states: Iterable[str] = ()):
        self._cores = cores
        self._slot_count = slot_count
        self._states = (tuple(group_states), tuple(member_states), tuple(slot_states))

    def collect(self) -> Iterator[GaugeMetricFamily]:
        groups = GaugeMetricFamily(PREFIX + "groups", "Groups this server coordinates, by phase", labels=["state"])
        members = GaugeMetricFamily(PREFIX + "members", "Members of the groups this server coordinates, by state",
                                    labels=["state"])
        slots = GaugeMetricFamily(PREFIX + "coordinator_slots", "Coordinator slots this server holds, by the state "
                                  "of its coordinator in each", labels=["state"])
        epochs = GaugeMetricFamily(PREFIX + "coordinator_epoch", "The coordinator epoch of each slot this server "
                                   "holds", labels=["slot"])
        group_counts, member_counts, slot_counts = (dict.fromkeys(states, 0) for states in self._states)
        for slot, core in sorted(self._cores().items()):
            census = core.census()
            for counts, found in ((group_counts, census.groups), (member_counts, census.members)):
                for state, n in found.items():
                    counts[state] = counts.get(state, 0) + n
            slot_counts[core.state.value] = slot_counts.get(core.state.value, 0) + 1
            epochs.add_metric([str(slot)], core.epoch)
        for family, counts in ((groups, group_counts), (members, member_counts), (slots, slot_counts)):
            for state, n in counts.items():
                family.add_metric([state], n)
        yield from (groups, members, slots, epochs, self._lag())
        yield GaugeMetricFamily(PREFIX + "coordinator_slot_count", "Coordinator slots in the cluster",
                                value=self._slot_count())

    def _lag(self) -> GaugeMetricFamily:
        # By group and topic, not by partition: a group may hold thousands of
        # partitions, and a series each would cost Prometheus more than the
        # rest of a server's metrics together.
        lag = GaugeMetricFamily(PREFIX + "consumer_lag", "Messages the committed offsets of a group's partitions "
                                "of a topic are behind the ends of their logs, as the group's coordinator last "
                                "learnt them", labels=["group", "topic"])
        for core in self._cores().values():
            for (group, topic), value in sorted(core.lag_by_topic().items()):
                lag.add_metric([group, topic], value)
        return lag

    def describe(self) -> Iterator[GaugeMetricFamily]:
        return self.collect()


# -- the fetcher (a consumer's) ------------------------------------------------------------------


class FetcherMetrics:
    """What a consumer's fetcher met on the brokers, by topic: logs
    truncated under it (a leader elected without records it had read;
    zkcoord.fetch.recovery)."""

    def __init__(self, registry: CollectorRegistry):
        self._truncations = Counter(PREFIX + "fetch_log_truncations_total",
                                    "Partitions whose log was truncated under the fetcher (a leader elected "
                                    "without records it had read): it fetched again from the divergence point",
                                    ["topic"], registry=registry)

    def truncated(self, topic: str) -> None:
        self._truncations.labels(topic=topic).inc()

    def truncations(self) -> int:
        """How many, over every topic."""
        return int(sum(sample.value for metric in self._truncations.collect() for sample in metric.samples
                       if sample.name.endswith("_total")))


# -- the broker ------------------------------------------------------------------------------------


def api_name(api_key: int) -> str:
    """Kafka's name of an API (``Fetch``), as kafka-python's table of API keys has it, else its key."""
    try:
        return ApiKey(api_key).name
    except ValueError:
        return str(api_key)


def error_name(code: int) -> str:
    error = kafka.errors.kafka_errors.get(code)
    return error.message if error is not None else str(code)


_NESTED: dict[type, tuple[str, ...]] = {}


def _nested_fields(cls: type) -> tuple[str, ...]:
    """The fields of a kafka-python message class that hold messages (structs, arrays of them)."""
    names = _NESTED.get(cls)
    if names is None:
        fields = cls._struct.fields.items() if getattr(cls, "_struct", None) is not None else ()
        names = _NESTED[cls] = tuple(name for name, f in fields if f.is_struct() or f.is_struct_array())
    return names


def error_codes(message) -> Iterator[int]:
    """Every error code other than 0 in a Kafka response, at any depth."""
    code = getattr(message, "error_code", 0)
    if code:
        yield code
    for name in _nested_fields(type(message)):
        value = getattr(message, name, None)
        if isinstance(value, list):
            for item in value:
                yield from error_codes(item)
        elif value is not None:
            yield from error_codes(value)


class _TopicTraffic:
    """One topic's four counters (children looked up once)."""

    __slots__ = ("produce_bytes", "produce_records", "fetch_bytes", "fetch_records")

    def __init__(self, metrics: "BrokerMetrics", topic: str):
        self.produce_bytes = metrics._produce_bytes.labels(topic)
        self.produce_records = metrics._produce_records.labels(topic)
        self.fetch_bytes = metrics._fetch_bytes.labels(topic)
        self.fetch_records = metrics._fetch_records.labels(topic)


class BrokerMetrics:
    """The broker's traffic per topic (not per partition: a label value per
    topic is all a scrape should carry), its requests and the errors it answered."""

    def __init__(self, registry: CollectorRegistry):
        def traffic(name: str, help: str) -> Counter:
            return Counter(PREFIX + "broker_" + name, help, ["topic"], registry=registry)

        self._produce_bytes = traffic("produce_bytes_total", "Bytes of record batches appended (Produce), by topic")
        self._produce_records = traffic("produce_records_total", "Records appended (Produce), by topic")
        self._fetch_bytes = traffic("fetch_bytes_total", "Bytes of record batches sent in Fetch answers, by topic")
        self._fetch_records = traffic("fetch_records_total", "Records sent in Fetch answers, counted as the offsets "
                                      "they move a fetcher past, by topic")
        self._requests = Counter(PREFIX + "broker_requests_total", "Kafka requests decoded, by API", ["api"],
                                 registry=registry)
        self._errors = Counter(PREFIX + "broker_errors_total", "Error codes in the broker's answers (one per "
                               "partition, topic or request that carries one), by API and Kafka error code",
                               ["api", "code", "error"], registry=registry)
        self._connections = Gauge(PREFIX + "broker_connections", "Kafka-protocol connections open",
                                  registry=registry)
        self._topics: dict[str, _TopicTraffic] = {}
        self._requests_by_key: dict[int, object] = {}
        self._errors_by_key: dict[tuple[int, int], object] = {}

    def watch_connections(self, count: Callable[[], int]) -> None:
        """Read the number of open connections from ``count`` at each scrape."""
        self._connections.set_function(count)

    def _topic(self, topic: str) -> _TopicTraffic:
        counters = self._topics.get(topic)
        if counters is None:
            counters = self._topics[topic] = _TopicTraffic(self, topic)
        return counters

    def produced(self, topic: str, size: int, records: int) -> None:
        counters = self._topic(topic)
        counters.produce_bytes.inc(size)
        counters.produce_records.inc(records)

    def fetched(self, served: Iterable[tuple[str, int, int]]) -> None:
        """A Fetch answer sent: (topic, bytes, records) of each partition that had data."""
        for topic, size, records in served:
            counters = self._topic(topic)
            counters.fetch_bytes.inc(size)
            counters.fetch_records.inc(records)

    def request(self, api_key: int) -> None:
        counter = self._requests_by_key.get(api_key)
        if counter is None:
            counter = self._requests_by_key[api_key] = self._requests.labels(api_name(api_key))
        counter.inc()

    def answered(self, api_key: int, response) -> None:
        """Count the error codes in ``response`` (an answer to ``api_key``)."""
        for code in error_codes(response):
            counter = self._errors_by_key.get((api_key, code))
            if counter is None:
                counter = self._errors_by_key[api_key, code] = self._errors.labels(
                    api_name(api_key), str(code), error_name(code))
            counter.inc()
