"""After a takeover, the first round keeps partitions with the owners that came back.

Every member of the predecessor registers again with empty hands (it stopped
everything when it lost its coordinator): what each owned is known only from
ZooKeeper. A sticky group's first round must start from that, not assign
from scratch, or partitions whose owners survived move (each move redelivers
what its old owner read since its last commit).
"""

from __future__ import annotations

from zkcoord.zk import layout

from tests.unit.core_harness import TAKEOVER, CoreHarness, FakeZooKeeper, proofs

STICKY = ("sticky",)
# Owned in contiguous pairs: not what a sticky assignment from scratch gives
# three members (it deals the partitions out in turn: a gets 0 and 3).
BEFORE = {"a": (("t", 0), ("t", 1)), "b": (("t", 2), ("t", 3)), "c": (("t", 4), ("t", 5))}


def taken_over(assignment=BEFORE) -> CoreHarness:
    owners = {tp: member for member, tps in assignment.items() for tp in tps}
    state = layout.GroupState(4, "sticky", assignment, lease_ms=3000, proofs=proofs(*assignment))
    return CoreHarness(states={"g": state}, zk=FakeZooKeeper(owners={"g": owners}), partitions={"t": 6})


def test_members_back_after_a_takeover_get_back_what_they_owned():
    h = taken_over()
    for member_id in BEFORE:
        h.register(member_id, member_id, assignment_strategies=STICKY)
    h.stable(list(BEFORE))
    for member_id, tps in BEFORE.items():
        assert h.running(member_id) == set(tps), member_id
    assert h.zk.owners["g"] == {tp: m for m, tps in BEFORE.items() for tp in tps}


def test_only_the_partitions_of_a_member_that_did_not_come_back_move():
    h = taken_over()
    for member_id in ("a", "b"):
        h.register(member_id, member_id, assignment_strategies=STICKY)
    h.advance(TAKEOVER + 1.0, serve=("a", "b"))  # c's partitions are free once its lease and return are over
    assert set(BEFORE["a"]) <= h.running("a") and set(BEFORE["b"]) <= h.running("b")
    assert h.running("a") | h.running("b") == {("t", p) for p in range(6)}
    assert len(h.running("a")) == len(h.running("b")) == 3
