"""What the coordinator's core asks its executor to do.

The core (core/) never touches a socket, ZooKeeper or a clock: each of its
handlers returns a list of these actions, and the executor (runtime.py)
carries them out in order. ZooKeeper operations carry a token; the executor
reports each one's end to ``CoordinatorCore.done(token, ...)``. Timers are
keyed: setting a key again replaces its timer, and the executor reports a
timer that fires to ``CoordinatorCore.timer_fired(key, ...)``.

Connections are opaque hashable handles chosen by the executor.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Hashable, Mapping, Optional

from zkcoord import wire
from zkcoord.errors import ZkcoordError
from zkcoord.records import TopicPartition
from zkcoord.zk import layout


class Deposed(ZkcoordError):
    """Another coordinator has been elected since this one: its writes are
    refused. The executor reports it as the error of a write."""


@dataclass(frozen=True)
class Send:
    """Write ``message`` on connection ``conn`` (after anything sent to it before)."""

    conn: Hashable
    message: wire.Message
    correlation_id: int


@dataclass(frozen=True)
class Close:
    """Close ``conn`` once what was sent to it before has been written."""

    conn: Hashable


@dataclass(frozen=True)
class SetTimer:
    """Report ``key`` to ``timer_fired`` at time ``at``; replaces a timer of the same key."""

    key: Hashable
    at: float


@dataclass(frozen=True)
class CancelTimer:
    key: Hashable


@dataclass(frozen=True)
class ReadOwners:
    """Read /consumers/<group>/owners; the result is {(topic, partition): member}."""

    token: int
    group: str


@dataclass(frozen=True)
class ReadOffsets:
    """Read the committed offsets of ``partitions`` (None: of every partition
    the group has one for); the result holds those that have one."""

    token: int
    group: str
    partitions: Optional[frozenset[TopicPartition]]


@dataclass(frozen=True)
class WriteGroupState:
    """Write the group's state node; ``exists`` None means "not known, look"."""

    token: int
    group: str
    state: layout.GroupState
    exists: Optional[bool]


@dataclass(frozen=True)
class WriteOffsets:
    """Write committed offsets; ``existing`` names the partitions whose node exists."""

    token: int
    group: str
    offsets: Mapping[TopicPartition, int]
    existing: frozenset[TopicPartition]


@dataclass(frozen=True)
class WriteOwners:
    """Make the owners nodes say ``owners``, given that they said ``previous``."""

    token: int
    group: str
    owners: Mapping[TopicPartition, str]
    previous: Mapping[TopicPartition, str]


@dataclass(frozen=True)
class WriteGroupFailure:
    """Record why the group's rebalance gave up, or clear the record (None)."""

    token: int
    group: str
    failure: Optional[layout.GroupFailure]


@dataclass(frozen=True)
class WriteRebalanceHistory:
    """Append ``records`` to the group's rebalance history node, keeping its
    last ``rounds``. The core's records are dated on its own clock
    (``started_ms``): the executor dates them by the wall clock (:meth:`dated`)."""

    token: int
    group: str
    records: tuple[layout.RebalanceRecord, ...]
    rounds: int

    def dated(self, wall_minus_core_s: float) -> "WriteRebalanceHistory":
        """The records with their start on the wall clock, given how far it is ahead of the core's."""
        shift_ms = round(wall_minus_core_s * 1000)
        return replace(self, records=tuple(replace(r, started_ms=max(0, r.started_ms + shift_ms))
                                           for r in self.records))


@dataclass(frozen=True)
class ProveOffice:
    """A fenced write of nothing: ZooKeeper's leader accepts it only while
    this coordinator's session lives, and refuses it with :class:`Deposed`
    once a newer epoch has been claimed. Its success dates the office."""

    token: int


@dataclass(frozen=True)
class ForgetGroup:
    """Delete what a group without members left in ZooKeeper (its state and
    failure nodes, its owners and offsets directories). Its committed
    offsets only with ``offsets``; without, it fails, deleting nothing, if
    an offset node exists."""

    token: int
    group: str
    offsets: bool = False


@dataclass(frozen=True)
class ReadLogEnds:
    """Ask each partition's leader for its log end offset (ListOffsets,
    latest), within a deadline; the result maps those that answered to
    their LogEnd (zkcoord.records)."""

    token: int
    partitions: frozenset[TopicPartition]


ZooKeeperOperation = (ReadOwners, ReadOffsets, WriteGroupState, WriteOffsets, WriteOwners, WriteGroupFailure,
                      WriteRebalanceHistory, ProveOffice, ForgetGroup)
# Operations on the brokers, ended like ZooKeeper's through ``done(token, ...)``.
BrokerOperation = (ReadLogEnds,)
