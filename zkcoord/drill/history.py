"""A drill's history: what every process did and when, as files in the drill's
directory, and the values the checker reads from them.

Every line is JSON with wall-clock times (``time.time()``; every process of a
local drill shares one clock):

- ``produced.jsonl``: each record the broker acknowledged (partition, offset,
  the sequence number it carries);
- ``consumer-K/records.jsonl``: each record a member delivered to its
  application, with the member and the poll() that returned it (``ts`` when it
  began, ``te`` when it returned);
- ``consumer-K/events.jsonl``: each Start and Stop a member obeyed;
- ``consumer-crowd-F/``: the same two files for the members of the big group
  of fault F, all in one process (:mod:`~zkcoord.drill.crowd`);
- ``samples.jsonl``: the owners and committed offsets in ZooKeeper, every ~200 ms;
- ``faults.jsonl``: each fault, when it was injected and restored, and when
  the group was whole again.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Iterable, Optional

from zkcoord.records import TopicPartition
from zkcoord.testing.cluster import ConsumerProcess, read_json_lines

PRODUCED = "produced.jsonl"
SAMPLES = "samples.jsonl"
FAULTS = "faults.jsonl"


@dataclasses.dataclass(frozen=True)
class Produced:
    topic: str
    partition: int
    offset: int
    seq: int
    ts: float


@dataclasses.dataclass(frozen=True)
class Delivery:
    """One record handed to an application by poll(), which ran from ``began`` to ``returned``."""

    member: str
    topic: str
    partition: int
    offset: int
    began: float
    returned: float

    @property
    def tp(self) -> TopicPartition:
        return (self.topic, self.partition)


@dataclasses.dataclass(frozen=True)
class OwnershipEvent:
    """A Start (``started`` True) or a Stop a member obeyed, at ``ts``."""

    member: str
    ts: float
    started: bool
    partitions: tuple[TopicPartition, ...]
    epoch: int = -1
    generation: int = -1


@dataclasses.dataclass(frozen=True)
class Sample:
    """Owners and committed offsets in ZooKeeper at ``ts``."""

    ts: float
    owners: dict[TopicPartition, str]
    offsets: dict[TopicPartition, int]


@dataclasses.dataclass
class FaultRecord:
    """One fault as the drill carried it out.

    ``whole_at`` is when the group was whole again after the fault took hold
    (None: not within the wait), counted from ``recovery_from`` to compare
    with ``bound_s``: from the injection when the system must route around
    the fault (a kill, a pause or a cut past a session timeout), from the
    restore otherwise. ``rejoined_at`` is when the group was whole again
    after the drill restored what it broke (restarted, resumed, healed;
    None: not within the wait)."""

    index: int
    kind: str
    target: str
    planned: bool
    injected: float
    restored: float
    recovery_from: float
    whole_at: Optional[float]
    bound_s: float
    rejoined_at: Optional[float] = None
    note: str = ""

    @property
    def time_to_whole(self) -> Optional[float]:
        return None if self.whole_at is None else max(0.0, self.whole_at - self.recovery_from)

    @property
    def window_end(self) -> float:
        return max(self.restored, self.whole_at or self.restored, self.rejoined_at or self.restored)

    def targets(self, process: Optional[str]) -> bool:
        """Whether the fault broke ``process`` (a consumer's name, "consumer 3") itself."""
        return process is not None and (self.target == process or self.target.startswith(process + " "))


@dataclasses.dataclass
class History:
    produced: list[Produced]
    deliveries: list[Delivery]
    events: list[OwnershipEvent]
    samples: list[Sample]
    faults: list[FaultRecord]
    started: float = 0.0
    ended: float = 0.0
    # Which consumer process ("consumer 3") delivered under each member id.
    processes: dict[str, str] = dataclasses.field(default_factory=dict)

    @classmethod
    def load(cls, directory: Path) -> "History":
        directory = Path(directory)
        deliveries: list[Delivery] = []
        events: list[OwnershipEvent] = []
        processes: dict[str, str] = {}
        for consumer_dir in sorted(directory.glob(f"**/{ConsumerProcess.DIRECTORY_PREFIX}*")):
            delivered = [delivery_from_json(d) for d in read_json_lines(consumer_dir / ConsumerProcess.RECORDS)]
            processes.update({d.member: consumer_dir.name.replace("-", " ", 1) for d in delivered})
            deliveries += delivered
            events += [event_from_json(e) for e in read_json_lines(consumer_dir / ConsumerProcess.EVENTS)]
        history = cls(
            produced=[Produced(**p) for p in read_json_lines(directory / PRODUCED)],
            deliveries=deliveries,
            events=sorted(events, key=lambda e: e.ts),
            samples=[sample_from_json(s) for s in read_json_lines(directory / SAMPLES)],
            faults=[FaultRecord(**f) for f in read_json_lines(directory / FAULTS)],
            processes=processes,
        )
        times = [p.ts for p in history.produced] + [d.began for d in deliveries] + [e.ts for e in events]
        history.started, history.ended = (min(times), max(times)) if times else (0.0, 0.0)
        return history


# -- the line formats ------------------------------------------------------------------------------


def append_lines(path: Path, items: Iterable[dict]) -> None:
    with open(path, "a") as out:
        for item in items:
            out.write(json.dumps(item, sort_keys=True) + "\n")


def delivery_from_json(line: dict) -> Delivery:
    return Delivery(member=line["member"], topic=line["topic"], partition=int(line["partition"]),
                    offset=int(line["offset"]), began=float(line["ts"]), returned=float(line["te"]))


def event_from_json(line: dict) -> OwnershipEvent:
    return OwnershipEvent(member=line["member"], ts=float(line["ts"]), started=line["event"] == "start",
                          partitions=tuple((t, int(p)) for t, p in line["partitions"]),
                          epoch=int(line.get("epoch", -1)), generation=int(line.get("generation", -1)))


def tp_key(tp: TopicPartition) -> str:
    return f"{tp[0]}:{tp[1]}"


def tp_of(key: str) -> TopicPartition:
    topic, _, partition = key.rpartition(":")
    return (topic, int(partition))


def sample_to_json(ts: float, owners: dict[TopicPartition, str], offsets: dict[TopicPartition, int]) -> dict:
    return {"ts": ts, "owners": {tp_key(tp): m for tp, m in owners.items()},
            "offsets": {tp_key(tp): o for tp, o in offsets.items()}}


def sample_from_json(line: dict) -> Sample:
    return Sample(ts=float(line["ts"]), owners={tp_of(k): v for k, v in line["owners"].items()},
                  offsets={tp_of(k): int(v) for k, v in line["offsets"].items()})
