"""Members trickling into a group: how many rounds they make and what each round pauses.

A group whose members register one by one after its first round (past the
initial rebalance delay's cap, as 5,000 members registering from one busy
process did in bench_vs_kafka's capacity workload) goes through a round per
join or so. These pin down that this is all it costs: joins that come during
a round make one round after it, not one each, and each round moves only
what the newcomers take (no partition goes from one member that stays to
another), so what a round pauses is what the group's growth must move.
"""

import dataclasses

from tests.unit.core_harness import CONFIG, CoreHarness

PARTITIONS = 100
STICKY = ("sticky",)  # as bench_vs_kafka's members ask: the range assignor moves partitions by its nature


def running_of(h: CoreHarness, members) -> dict:
    return {m: h.running(m) for m in members}


def test_each_late_join_moves_only_what_the_newcomer_takes():
    h = CoreHarness(partitions={"t": PARTITIONS})
    members = []
    for i in range(10):
        members.append(f"m{i}")
        h.register(members[-1], members[-1], assignment_strategies=STICKY)
    h.stable(members)
    rounds = h.core.groups["g"].generation
    for i in range(10, 60):  # one at a time, each after the group settled
        before = running_of(h, members)
        members.append(f"m{i}")
        h.register(members[-1], members[-1], assignment_strategies=STICKY)
        h.stable(members, seconds=0.5)
        after = running_of(h, members)
        taken = after[members[-1]]
        assert taken, f"{members[-1]} was given nothing"
        # The old members only give up partitions, and only to the newcomer.
        assert all(after[m] <= before[m] for m in before)
        assert sum(len(before[m] - after[m]) for m in before) == len(taken)
        assert h.core.last_rebalance.paused == len(taken)
        assert max(map(len, after.values())) - min(map(len, after.values())) <= 1  # balanced
    assert h.core.groups["g"].generation == rounds + 50  # a round each: every join is a change


def test_joins_during_a_round_make_one_round_after_it():
    h = CoreHarness(dataclasses.replace(CONFIG, rebalance_timeout_ms=5000), partitions={"t": PARTITIONS})
    members = [f"m{i}" for i in range(10)]
    for member in members:
        h.register(member, member, assignment_strategies=STICKY)
    h.stable(members)
    generation = h.core.groups["g"].generation
    h.register("n0", "n0", assignment_strategies=STICKY)
    h.advance(0.15, serve=())  # its round began: the donors' Stops go unanswered for now
    assert h.core.groups["g"].generation == generation + 1
    newcomers = [f"n{i}" for i in range(1, 6)]
    for member in newcomers:  # five more join while that round waits
        h.register(member, member, assignment_strategies=STICKY)
        h.advance(0.1, serve=())
    everyone = members + ["n0"] + newcomers
    h.stable(everyone, seconds=1.0)
    assert h.core.groups["g"].generation == generation + 2  # not + 6
    assert all(h.running(m) for m in everyone)
    assert sum(len(h.running(m)) for m in everyone) == PARTITIONS
