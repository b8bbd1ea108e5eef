"""Checks on the event streams of Kafka's verifiable clients
(``org.apache.kafka.tools.VerifiableProducer`` and ``VerifiableConsumer``),
made as Kafka's own system tests make them (``kafkatest``'s
``VerifiableConsumer`` service and ``OffsetValidationTest``). Pure functions
on the decoded JSON lines; no process is run here.

Each client prints one JSON object a line, with ``name`` and ``timestamp``
(epoch ms). The producer: ``producer_send_success`` (``topic``,
``partition``, ``offset`` of an acknowledged record) and
``producer_send_error``. The consumer: ``partitions_assigned`` and
``partitions_revoked`` (``partitions``: ``[{topic, partition}]``),
``records_consumed`` (``count`` and ``partitions``: ``[{topic, partition,
count, minOffset, maxOffset}]`` per poll), ``offsets_committed``
(``success`` and ``offsets``: ``[{topic, partition, offset}]``, the next
offset to read), ``startup_complete`` and ``shutdown_complete``.

The checks:

- :func:`consumer_violations`, one consumer's own stream as Kafka's event
  handler reads it: records only while joined and of partitions it is
  assigned, each partition read on from where it left off, commits only of
  partitions it holds and not ahead of what it read;
- :func:`group_violations`, the group's streams merged in time, as Kafka's
  service reads them: no batch starts below the group's last successful
  commit of its partition (duplicates only from the last commit), no commit
  ahead of what the group read, and (ours) no successful commit below an
  earlier one of the same partition;
- :func:`lost`: every acknowledged record consumed by some consumer;
- :func:`duplicates`: records consumed again, dated, for the steps a test
  allows none in.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Iterable, Iterator, Mapping, Optional, Sequence

Partition = tuple[str, int]
Offset = tuple[Partition, int]

# Violation kinds, by the rule broken.
NOT_JOINED = "consumed while not joined"
NOT_ASSIGNED = "consumed a partition not assigned"
UNEXPECTED_OFFSET = "consumed from an unexpected offset"
NOT_CONTIGUOUS = "a batch's count does not span its offsets"
COMMITTED_UNHELD = "committed a partition not assigned"
COMMITTED_UNREAD = "committed past the consumer's position"
REVOKED_UNHELD = "revoked a partition not assigned"
BEHIND_COMMITTED = "consumed behind the group's committed offset"
COMMITTED_AHEAD = "committed past the group's position"
COMMITTED_BACKWARDS = "committed below an earlier commit"


@dataclass(frozen=True)
class Violation:
    kind: str
    client: str
    timestamp: int
    detail: str

    def __str__(self) -> str:
        return f"{self.client} at {self.timestamp}: {self.kind}: {self.detail}"


@dataclass(frozen=True)
class Batch:
    """One partition's records of one poll: offsets ``first`` to ``last``."""

    partition: Partition
    first: int
    last: int
    count: int

    @property
    def offsets(self) -> range:
        return range(self.first, self.last + 1)


def _partition(entry: Mapping) -> Partition:
    return entry["topic"], int(entry["partition"])


def batches(event: Mapping) -> list[Batch]:
    """The per-partition batches of a ``records_consumed`` event."""
    return [Batch(_partition(p), int(p["minOffset"]), int(p["maxOffset"]), int(p["count"]))
            for p in event.get("partitions", ())]


def successful_commits(event: Mapping) -> dict[Partition, int]:
    """{partition: next offset} of an ``offsets_committed`` event, none if it failed."""
    if not event.get("success"):
        return {}
    return {_partition(o): int(o["offset"]) for o in event.get("offsets", ()) if not o.get("error")}


def merge(streams: Mapping[str, Sequence[Mapping]]) -> list[tuple[str, Mapping]]:
    """Every client's events as (client, event), in time. The sort is stable:
    a client's events dated the same millisecond keep their order."""
    tagged = [(client, event) for client, events in streams.items() for event in events]
    return sorted(tagged, key=lambda pair: pair[1].get("timestamp", 0))


# -- the producer ---------------------------------------------------------------------------------

def acked(producer_events: Iterable[Mapping]) -> set[Offset]:
    """Every record the producer had acknowledged: (partition, offset)."""
    return {(_partition(e), int(e["offset"])) for e in producer_events if e.get("name") == "producer_send_success"}


# -- one consumer ---------------------------------------------------------------------------------

@dataclass
class ConsumerState:
    """One consumer as its events leave it (kafkatest's ConsumerEventHandler):
    whether it is joined, what it is assigned, where it reads each partition
    on from. ``incremental``: the cooperative protocol, where an assignment
    adds to what is held and a revocation takes only what it names."""

    incremental: bool
    joined: bool = False
    dead: bool = False
    assignment: frozenset = frozenset()
    position: dict = field(default_factory=dict)

    def apply(self, event: Mapping) -> list[tuple[str, str]]:
        """Take ``event`` in; returns the (kind, detail) of each rule it breaks."""
        broken: list[tuple[str, str]] = []
        name = event.get("name")
        if name == "startup_complete":
            self.dead = False
        elif name == "partitions_assigned":
            named = frozenset(_partition(p) for p in event["partitions"])
            self.assignment = self.assignment | named if self.incremental else named
            self.joined = True
        elif name == "partitions_revoked":
            named = frozenset(_partition(p) for p in event["partitions"])
            if self.incremental:
                broken += [(REVOKED_UNHELD, f"{tp} while holding {sorted(self.assignment)}")
                           for tp in sorted(named - self.assignment)]
                self.assignment -= named
            self.joined = False
            self.position = {}
        elif name == "shutdown_complete":
            self.joined, self.dead, self.assignment, self.position = False, True, frozenset(), {}
        elif name == "records_consumed":
            if not self.joined:
                broken.append((NOT_JOINED, f"{event.get('count')} records"))
            for batch in batches(event):
                tp = batch.partition
                if batch.count != len(batch.offsets):
                    broken.append((NOT_CONTIGUOUS, f"{tp}: {batch.count} records in {batch.first}..{batch.last}"))
                if tp not in self.assignment:
                    broken.append((NOT_ASSIGNED, f"{tp} while holding {sorted(self.assignment)}"))
                if tp in self.position and self.position[tp] != batch.first:
                    broken.append((UNEXPECTED_OFFSET, f"{tp}: read from {batch.first}, its position "
                                                      f"{self.position[tp]}"))
                self.position[tp] = batch.last + 1
        elif name == "offsets_committed":
            for tp, offset in successful_commits(event).items():
                if tp not in self.assignment:
                    broken.append((COMMITTED_UNHELD, f"{tp} at {offset} while holding {sorted(self.assignment)}"))
                elif offset > self.position.get(tp, -1):
                    broken.append((COMMITTED_UNREAD, f"{tp} at {offset}, its position {self.position.get(tp)}"))
        return broken


def consumer_state(events: Iterable[Mapping], incremental: bool) -> ConsumerState:
    """Where one consumer's events leave it."""
    state = ConsumerState(incremental)
    for event in events:
        state.apply(event)
    return state


def consumer_violations(client: str, events: Iterable[Mapping], incremental: bool) -> list[Violation]:
    """Kafka's checks of one consumer's stream (kafkatest's
    ConsumerEventHandler, with offsets verified)."""
    state = ConsumerState(incremental)
    return [Violation(kind, client, event.get("timestamp", 0), detail)
            for event in events for kind, detail in state.apply(event)]


# -- the group ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Crash:
    """A kill -9 at ``at`` (epoch ms) that may lose the commits acknowledged
    in the ``window_ms`` before it and the ``after_ms`` after it: those of
    ``clients``, or everyone's (None). zkcoord's broker holds a member's
    commits until the coordinator's next ping of it, and the coordinator
    holds them until its next flush to ZooKeeper (docs/BROKER.md, "the
    uncommitted window of a crash"): the next owner reads on from the last
    commit kept. A commit acknowledged just after a coordinator's kill, by a
    broker that has not yet seen its connection close, is held for a
    coordinator that is gone (``after_ms``). The crash is judged once
    ``after_ms`` has passed: what is read before then is checked against
    every commit still."""

    at: int
    window_ms: int
    clients: Optional[frozenset] = None
    after_ms: int = 0

    @property
    def judged_at(self) -> int:
        return self.at + self.after_ms

    def may_lose(self, client: str, timestamp: int) -> bool:
        return (self.at - self.window_ms <= timestamp <= self.judged_at
                and (self.clients is None or client in self.clients))


def group_violations(merged: Iterable[tuple[str, Mapping]], crashes: Sequence[Crash] = ()) -> list[Violation]:
    """Kafka's checks of the group's streams merged in time (kafkatest's
    VerifiableConsumer service): no batch starts below the partition's last
    successful commit, no commit ahead of the group's position; and no
    successful commit below an earlier one (a commit once acknowledged is
    kept: the next owner reads on from it). From each of ``crashes`` on, the
    commits it may have lost no longer count."""
    committed: dict[Partition, int] = {}
    history: list[tuple[str, int, Partition, int]] = []  # (client, timestamp, partition, offset)
    position: dict[Partition, int] = {}
    pending = sorted(crashes, key=lambda crash: crash.judged_at)
    found: list[Violation] = []
    for client, event in merged:
        name = event.get("name")
        stamp = event.get("timestamp", 0)
        while pending and pending[0].judged_at <= stamp:
            crash = pending.pop(0)
            committed = {}
            for who, when, tp, offset in history:
                if when <= crash.judged_at and not crash.may_lose(who, when):
                    committed[tp] = max(offset, committed.get(tp, -1))
            history = [(who, when, tp, offset) for who, when, tp, offset in history if not crash.may_lose(who, when)]
        if name == "records_consumed":
            for batch in batches(event):
                tp = batch.partition
                if batch.first < committed.get(tp, -1):
                    found.append(Violation(BEHIND_COMMITTED, client, stamp,
                                           f"{tp}: read from {batch.first}, committed {committed[tp]}"))
                position[tp] = batch.last + 1
        elif name == "offsets_committed":
            for tp, offset in successful_commits(event).items():
                if offset > position.get(tp, -1):
                    found.append(Violation(COMMITTED_AHEAD, client, stamp,
                                           f"{tp} at {offset}, the group's position {position.get(tp)}"))
                if offset < committed.get(tp, -1):
                    found.append(Violation(COMMITTED_BACKWARDS, client, stamp,
                                           f"{tp} at {offset}, committed {committed[tp]} before"))
                committed[tp] = max(offset, committed.get(tp, -1))
                history.append((client, stamp, tp, offset))
    return found


def consumed(merged: Iterable[tuple[str, Mapping]]) -> Counter:
    """How often each (partition, offset) was consumed, by anyone."""
    counts: Counter = Counter()
    for _client, event in merged:
        if event.get("name") == "records_consumed":
            for batch in batches(event):
                counts.update((batch.partition, offset) for offset in batch.offsets)
    return counts


def lost(acknowledged: Iterable[Offset], merged: Iterable[tuple[str, Mapping]]) -> list[Offset]:
    """The acknowledged records nobody consumed, in order."""
    return sorted(set(acknowledged) - set(consumed(merged)))


@dataclass(frozen=True)
class Duplicate:
    """A record consumed again, by ``client`` at ``timestamp``."""

    record: Offset
    client: str
    timestamp: int


def duplicates(merged: Iterable[tuple[str, Mapping]]) -> Iterator[Duplicate]:
    """Each consumption of a record consumed before, in time."""
    seen: set[Offset] = set()
    for client, event in merged:
        if event.get("name") != "records_consumed":
            continue
        for batch in batches(event):
            for offset in batch.offsets:
                record = (batch.partition, offset)
                if record in seen:
                    yield Duplicate(record, client, event.get("timestamp", 0))
                seen.add(record)


def last_commits(merged: Iterable[tuple[str, Mapping]]) -> dict[Partition, int]:
    """Each partition's highest successfully committed offset."""
    found: dict[Partition, int] = {}
    for _client, event in merged:
        if event.get("name") == "offsets_committed":
            for tp, offset in successful_commits(event).items():
                found[tp] = max(offset, found.get(tp, -1))
    return found
