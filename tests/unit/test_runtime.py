"""The coordinator's executor (coordinator/runtime.py): its ZooKeeper operation queue and its timers.

A fake store whose operations wait until the test lets them finish; gevent
runs unpatched, as the executor needs nothing else from it here.
"""

from __future__ import annotations

import gevent
import gevent.event

from zkcoord.coordinator import actions
from zkcoord.coordinator.config import CoordinatorConfig
from zkcoord.coordinator.runtime import MAX_OPERATIONS, Coordinator
from zkcoord.testing import wait_until as _wait_until


class BlockingStore:
    """Each read of owners, and each proof of office, waits for its event."""

    def __init__(self):
        self.running: set[str] = set()
        self.most_at_once = 0
        self.release: dict[str, gevent.event.Event] = {}

    def _run(self, name: str):
        event = self.release.setdefault(name, gevent.event.Event())
        self.running.add(name)
        self.most_at_once = max(self.most_at_once, len(self.running - {"office"}))
        try:
            event.wait()
        finally:
            self.running.discard(name)
        return {}

    def owners(self, group):
        return self._run(group)

    def prove_office_async(self, settled):
        gevent.spawn(lambda: settled(self._run("office") and None))


def wait_until(predicate, timeout, message):
    return _wait_until(predicate, timeout, interval=0.01, message=message, sleep=gevent.sleep)


def executor(store) -> Coordinator:
    coordinator = Coordinator(store, CoordinatorConfig(), epoch=1, zk_session_timeout_ms=6000, topics=None)
    coordinator.done = []
    coordinator.core.done = lambda token, now, result=None, error=None: coordinator.done.append(token) or []
    return coordinator


def test_operations_beyond_the_limit_wait_their_turn_and_a_proof_of_office_never_waits():
    store = BlockingStore()
    coordinator = executor(store)
    groups = [f"g{i}" for i in range(MAX_OPERATIONS * 2)]
    coordinator._apply([actions.ReadOwners(i, group) for i, group in enumerate(groups)])
    wait_until(lambda: len(store.running) == MAX_OPERATIONS, 5, message="the first operations to start")
    coordinator._apply([actions.ProveOffice(100)])
    wait_until(lambda: "office" in store.running, 5, message="the proof to start beside them")
    store.release["office"].set()
    wait_until(lambda: 100 in coordinator.done, 5, message="the proof to end")
    for group in groups:  # each that ends lets the next in line start
        wait_until(lambda: group in store.release, 5, message=f"{group} to start")
        store.release[group].set()
    wait_until(lambda: len(coordinator.done) == len(groups) + 1, 5, message="every operation to end")
    assert store.most_at_once == MAX_OPERATIONS
    assert coordinator.done[1:] == list(range(len(groups)))  # in the order asked


def test_a_timer_fires_once_unless_cancelled_or_set_again():
    coordinator = executor(BlockingStore())
    fired = []
    coordinator.core.timer_fired = lambda key, now: fired.append(key) or []
    now = coordinator.clock()
    coordinator._apply([actions.SetTimer("once", now + 0.05), actions.SetTimer("cancelled", now + 0.05),
                        actions.SetTimer("moved", now + 0.05), actions.SetTimer("past", now - 1.0)])
    coordinator._apply([actions.CancelTimer("cancelled"), actions.SetTimer("moved", now + 0.3)])
    wait_until(lambda: {"once", "past"} <= set(fired), 5, message="the timers due to fire")
    assert "moved" not in fired
    wait_until(lambda: "moved" in fired, 5, message="the timer set again to fire at its new time")
    coordinator._apply([actions.SetTimer("last", coordinator.clock() + 0.1)])
    wait_until(lambda: "last" in fired, 5, message="a timer set after all the others")
    assert sorted(fired) == ["last", "moved", "once", "past"]  # each once; the cancelled one never
    assert coordinator._timers == {}



def test_a_proof_answered_before_it_is_sent_reaches_the_core_after_the_actions_around_it():
    class ClosedStore(BlockingStore):
        def prove_office_async(self, settled):  # as kazoo does with a closed client: answered at once
            settled(ConnectionError("closed"))

    coordinator = executor(ClosedStore())
    coordinator._apply([actions.ProveOffice(7), actions.CancelTimer("x")])
    assert coordinator.done == []  # not inside _apply, between its actions
    wait_until(lambda: coordinator.done == [7], 5, message="the proof's answer")


def test_the_wall_clock_gaining_on_the_lease_clock_between_events_ends_the_office():
    clocks = {"lease": 100.0, "wall": 5000.0}
    coordinator = Coordinator(BlockingStore(), CoordinatorConfig(), epoch=1, zk_session_timeout_ms=6000,
                              topics=None, clock=lambda: clocks["lease"], wall_clock=lambda: clocks["wall"])
    seen = []
    coordinator.core.machine_paused = lambda gained, now: seen.append((gained, now)) or []
    coordinator._event(lambda now: [])
    clocks["lease"] += 1.0
    clocks["wall"] += 1.0
    coordinator._event(lambda now: [])
    assert seen == []  # both clocks moved alike
    clocks["lease"] += 0.5
    clocks["wall"] += 20.5  # 20 s the lease clock did not count
    coordinator._event(lambda now: [])
    assert seen == [(20.0, 101.5)]
