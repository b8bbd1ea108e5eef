"""A drill's history directory, written in the drill's own line formats
(zkcoord.drill.history) by hand: member A keeps delivering orders-0 after
B was started on it, a double ownership the checker must find."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from zkcoord.drill.checker import check
from zkcoord.drill.history import FAULTS, PRODUCED, SAMPLES, FaultRecord, History, append_lines, sample_to_json
from zkcoord.drill.report import write_reports
from zkcoord.testing import ConsumerProcess

T0 = 1_700_000_000.0
A, B = "host-aaaaaa111111", "host-bbbbbb222222"


def write_drill(directory: Path, reports: bool = True) -> Path:
    """The history in ``directory``; with ``reports``, the drill's reports beside it, as a finished drill leaves them."""
    directory.mkdir(parents=True)
    records = {A: [("orders", 0, o, 1 + o) for o in range(6)] + [("orders", 1, o, 2 + o) for o in range(3)],
               B: [("orders", 0, o, 4.5 + o) for o in range(3, 6)]}
    events = {A: [(0, "start", [0, 1]), (9, "stop", [1])], B: [(4, "start", [0])]}
    for index, member in enumerate((A, B), start=1):
        consumer = directory / f"{ConsumerProcess.DIRECTORY_PREFIX}{index}"
        consumer.mkdir()
        append_lines(consumer / ConsumerProcess.RECORDS,
                     ({"member": member, "topic": t, "partition": p, "offset": o, "ts": T0 + at, "te": T0 + at + 0.05}
                      for t, p, o, at in records[member]))
        append_lines(consumer / ConsumerProcess.EVENTS,
                     ({"member": member, "ts": T0 + at, "event": event, "partitions": [["orders", p] for p in ps]}
                      for at, event, ps in events[member]))
    produced = sorted({(t, p, o) for rows in records.values() for t, p, o, _ in rows})
    append_lines(directory / PRODUCED, ({"topic": t, "partition": p, "offset": o, "seq": n, "ts": T0 + n * 0.01}
                                        for n, (t, p, o) in enumerate(produced)))
    append_lines(directory / SAMPLES, [sample_to_json(T0 + at, {("orders", 0): owner, ("orders", 1): A},
                                                      {("orders", 0): first, ("orders", 1): second})
                                       for at, owner, first, second in ((2, A, 1, 0), (8, B, 6, 3))])
    fault = FaultRecord(1, "consumer-pause-long", "consumer 1", planned=False, injected=T0 + 3, restored=T0 + 6,
                        recovery_from=T0 + 3, whole_at=T0 + 5, bound_s=10.0, rejoined_at=T0 + 7)
    append_lines(directory / FAULTS, [dataclasses.asdict(fault)])
    if reports:
        history = History.load(directory)
        write_reports(directory, history, check(history), {"seed": 7}, {})
    return directory
