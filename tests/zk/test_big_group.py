"""A group whose state no longer fits one ZooKeeper node (issue 31, item 8):
the coordinator's core on the unit tests' manual clock, its ZooKeeper
operations carried out by the real store on a real ZooKeeper, so that what
ZooKeeper refuses is refused here too. Its state as one node would pass the
1 MB ZooKeeper takes in one request; every round then failed at persisting
and the group stayed FAILED, its members' partitions unassigned."""

from __future__ import annotations

import random
import uuid

import pytest

from zkcoord.coordinator import actions
from zkcoord.coordinator.group import GroupPhase
from zkcoord.coordinator.runtime import carry_out
from zkcoord.coordinator.store import MAX_NODE_BYTES, CoordinatorStore
from zkcoord.zk import layout

from tests.unit.core_harness import TAKEOVER, CoreHarness, FakeZooKeeper

# About 250 bytes each as one node (an id as librdkafka draws one, where it
# connected from, the proof of its incarnation, its partition): 1.1 MB.
MEMBERS = 4_500
TOPIC = "events"


class StoredZooKeeper(FakeZooKeeper):
    """The harness's ZooKeeper, but the core's operations are carried out
    by ``store`` on a real ZooKeeper (the office's round trips and the
    brokers' log ends stay the fake's); the states written are kept in
    ``states`` as well, for the test to look at."""

    def __init__(self, store: CoordinatorStore):
        super().__init__()
        self.store = store

    def answer(self, op):
        if isinstance(op, (actions.ProveOffice, actions.ReadLogEnds)):
            return super().answer(op)
        try:
            result = carry_out(self.store, op)
        except Exception as exc:  # as the runtime hands errors to the core
            return None, exc
        if isinstance(op, actions.WriteGroupState):
            self.states[op.group] = op.state
        return result, None


def member_id(n: int) -> str:
    return f"rdkafka-{uuid.UUID(int=random.Random(n).getrandbits(128))}"


def register_all(h: CoreHarness, members: range) -> list[str]:
    conns = [f"c{n}" for n in members]
    for n, conn in zip(members, conns):
        h.register(conn, member_id(n), topics=(TOPIC,), host=f"10.0.{n // 250}.{n % 250}")
    return conns


@pytest.fixture
def store(zk) -> CoordinatorStore:
    store = CoordinatorStore(zk, server_id=1)
    store.claim_epoch()
    return store


def test_a_group_too_big_for_one_node_persists_takes_over_and_rebalances(store, zk):
    h = CoreHarness(zk=StoredZooKeeper(store), partitions={TOPIC: MEMBERS})
    conns = register_all(h, range(MEMBERS))
    h.stable(conns)
    group = h.core.groups["g"]
    assert group.phase is GroupPhase.STABLE and zk.exists(layout.group_failure_path("g")) is None
    state = h.zk.states["g"]
    assert len(layout.encode_group_state(state)) > MAX_NODE_BYTES  # as one node, refused
    assert sorted(tp for tps in state.assignment.values() for tp in tps) == [(TOPIC, p) for p in range(MEMBERS)]
    assert store.owners("g") == {tp: m for m, tps in state.assignment.items() for tp in tps}
    assert store.group_states()["g"] == state  # read back whole, from its chunks

    # A successor takes over: the whole state fences every member's partitions.
    successor = CoordinatorStore(zk, server_id=2)
    successor.claim_epoch()
    loaded = successor.group_states()
    assert loaded["g"] == state
    h2 = CoreHarness(zk=StoredZooKeeper(successor), states=loaded, partitions={TOPIC: MEMBERS})
    assert h2.core.groups["g"].fences.holders() == set(state.assignment)

    # Its members come back (the same processes), a hundred of them do not:
    # once their leases have ended, their partitions go to the others.
    back = register_all(h2, range(100, MEMBERS))
    h2.advance(TAKEOVER + 1.0, serve=tuple(back))
    rebalanced = h2.zk.states["g"]
    assert h2.core.groups["g"].phase is GroupPhase.STABLE and rebalanced.generation > state.generation
    assert set(rebalanced.assignment) == {member_id(n) for n in range(100, MEMBERS)}
    assert successor.group_states()["g"] == rebalanced
    assert successor.owners("g") == {tp: m for m, tps in rebalanced.assignment.items() for tp in tps}
    assert len(successor.owners("g")) == MEMBERS
    # Nothing is left of the chunks the previous generations named.
    manifest = layout.decode_group_state_node(zk.get(layout.group_state_path("g"))[0])
    assert sorted(zk.get_children(layout.group_state_chunks_path("g"))) == sorted(manifest.chunks)
