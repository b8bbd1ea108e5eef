"""Invariant 5: once faults stop, a group reaches a stable assignment without
waiting for some unrelated change. A FAILED group keeps being retried with a
capped backoff; an owner node nobody can decode is replaced, not kept."""

from __future__ import annotations

from zkcoord import wire
from zkcoord.coordinator import actions
from zkcoord.coordinator.group import GroupPhase
from zkcoord.zk import layout

from tests.unit.core_harness import CONFIG, MARGIN, P, T, CoreHarness, FakeZooKeeper

CAP = CONFIG.max_rebalance_backoff_ms / 1000.0


class NoAuth(Exception):
    """As ZooKeeper refuses a write after an ACL mistake."""


def b_dies_while_zookeeper_refuses_writes(error: Exception, seconds: float) -> CoreHarness:
    """a and b stable; then every write fails with ``error`` while b is dead, for ``seconds``."""
    h = CoreHarness()
    h.register("a", "a")
    h.register("b", "b")
    h.stable(["a", "b"])
    h.zk.refuse_writes = error
    h.advance(seconds, serve=("a",))
    return h


def test_a_failed_group_is_retried_until_the_fault_ends_without_any_change():
    # b dies; every round fails at its first write, well past the retries
    h = b_dies_while_zookeeper_refuses_writes(NoAuth("not authorized"), 11.0 + T)
    group = h.core.groups["g"]
    assert group.phase is GroupPhase.FAILED and "b" not in group.members
    assert h.running("a") == {P[0], P[1]}  # b's partitions unconsumed
    h.zk.refuse_writes = None  # the operator fixes the ACL; nothing else changes
    h.advance(CAP + 1.0, serve=("a",))
    assert group.phase is GroupPhase.STABLE and h.running("a") == set(P)
    assert h.zk.failures.get("g") is None


def test_a_failed_group_writes_its_failure_only_when_the_failure_changes():
    # Only the group's state is refused (a quota on its node): every retry
    # fails the same way, and the failure node, which can be written, says so once.
    h = CoreHarness()
    h.register("a", "a")
    h.register("b", "b")
    h.stable(["a", "b"])
    h.zk.refused_kinds = (actions.WriteGroupState,)
    h.zk.refuse_writes = NoAuth("quota exceeded")

    def failures_written() -> list:
        return [op.failure for op in h.zk.writes if isinstance(op, actions.WriteGroupFailure)]

    h.advance(11.0 + T + 4 * CAP, serve=("a",))  # b dies; FAILED, then four more retries at the cap
    group = h.core.groups["g"]
    assert group.phase is GroupPhase.FAILED and group.attempts >= CONFIG.max_rebalance_retries + 4
    assert len(failures_written()) == 1 and "quota exceeded" in failures_written()[0].error
    h.zk.refuse_writes = NoAuth("not authorized")  # another fault: the failure changes, and is written
    h.advance(2 * CAP, serve=("a",))
    assert [f.error.rsplit(": ", 1)[-1] for f in failures_written()] == ["quota exceeded", "not authorized"]
    h.zk.refuse_writes = None
    h.advance(CAP + 1.0, serve=("a",))
    assert group.phase is GroupPhase.STABLE and failures_written()[-1] is None and len(failures_written()) == 3
    h.zk.refuse_writes = NoAuth("quota exceeded")  # one failed round, short of giving up, then success
    h.register("c", "c")
    h.advance(0.3, serve=("a", "c"))
    h.zk.refuse_writes = None
    h.advance(CAP, serve=("a", "c"))
    assert group.phase is GroupPhase.STABLE and len(failures_written()) == 3  # nothing recorded, nothing to clear


def test_retries_back_off_up_to_the_cap():
    h = CoreHarness()
    h.register("a", "a")
    h.zk.refuse_writes = NoAuth("not authorized")
    h.advance(600.0, serve=("a",))
    attempts = h.core.groups["g"].attempts
    # 0.1 s doubling to a 30 s cap: about 8 tries to reach it, then one per 30 s.
    assert 20 <= attempts <= 8 + 600.0 / CAP + 1
    assert h.core.groups["g"].phase is GroupPhase.FAILED


def test_an_owner_node_that_does_not_decode_is_rewritten_by_the_next_round():
    # None: what the store reads for a node it cannot decode.
    zk = FakeZooKeeper(owners={"g": {P[0]: None, ("gone", 0): None}})
    h = CoreHarness(zk=zk)
    h.register("a", "a")
    h.stable(["a"])
    assert h.zk.owners["g"] == {tp: "a" for tp in P}  # t-0 rewritten, the gone topic's node deleted


def test_a_failure_records_only_what_its_decoder_reads_back():
    for failure in (layout.GroupFailure.of(3, 2 ** 40, "x" * 100_000), layout.GroupFailure.of(0, 1, "bad \ud800")):
        again = layout.decode_group_failure(layout.encode_group_failure(failure))
        assert again == failure and failure.attempts <= 2 ** 31 - 1 and len(failure.error) <= 2000
    for bad in ((-1, 1, "x"), (1, 2 ** 31, "x"), (1, 1, "\ud800"), (1, 1, None)):
        try:
            layout.GroupFailure(*bad)
        except layout.LayoutError:
            continue
        raise AssertionError(f"GroupFailure{bad} was made")


def test_the_dead_members_partitions_run_again_within_the_cap_once_writes_are_back():
    h = b_dies_while_zookeeper_refuses_writes(NoAuth("quota exceeded"), 3600.0)  # an hour of failure
    h.zk.refuse_writes = None
    fixed_at = h.now
    h.advance(CAP + 1.0, serve=("a",))
    started = [t for t, c, m in h.log if c == "a" and isinstance(m, wire.StartRequest) and t >= fixed_at]
    assert started and started[0] - fixed_at <= CAP + MARGIN


def test_a_backoff_of_zero_still_waits_between_failed_rounds():
    # From review: doubling a zero backoff retried a failing write without
    # pause, for ever (one ZooKeeper write per round trip, per group).
    import dataclasses

    h = CoreHarness(dataclasses.replace(CONFIG, rebalance_backoff_ms=0))
    h.register("a", "a")
    h.zk.refuse_writes = NoAuth("not authorized")
    h.advance(10.0, serve=("a",))
    assert h.core.groups["g"].attempts <= 10.0 / 0.1 + 1
