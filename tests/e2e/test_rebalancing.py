"""Rebalancing beyond the seed, on real processes: incremental handoff, static
members, the max poll interval, and a rolling change of strategy."""

from __future__ import annotations

import threading
import time
from collections import Counter

from tests.e2e.checks import delivered_values, group_is_whole, produce, wait_whole
from zkcoord.testing import partitions_of, wait_until
from zkcoord.admin.topics import create_topic
from zkcoord.consumer.consumer import Consumer
from zkcoord.zk import layout

SETTLE_S = 30
STICKY = ["--strategy", "sticky", "--strategy", "range"]


class Production:
    """Produces m-0, m-1, ... in the background until stopped, then says how many."""

    def __init__(self, cluster, topic: str, batch: int = 50):
        self.cluster, self.topic, self.batch = cluster, topic, batch
        self.count = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set() and self.count < 200_000:  # bounded in count and time
            produce(self.cluster, self.topic, self.batch, start=self.count)
            self.count += self.batch
            self._stop.wait(0.05)

    def stop(self) -> int:
        self._stop.set()
        self._thread.join(60)
        return self.count


def exactly_once(consumers, produced: int) -> None:
    counts = Counter(delivered_values(consumers))
    duplicates = {v: n for v, n in counts.items() if n > 1}
    missing = [n for n in range(produced) if f"m-{n}" not in counts]
    assert not duplicates, f"{len(duplicates)} duplicated, e.g. {list(duplicates.items())[:5]}"
    assert not missing, f"{len(missing)} lost, e.g. {missing[:5]}"


def more_deliveries(consumers, more: int, timeout: float, message: str) -> None:
    """Wait until ``consumers`` have delivered ``more`` records beyond what they have now."""
    mark = len(delivered_values(consumers))
    wait_until(lambda: len(delivered_values(consumers)) > mark + more, timeout=timeout, message=message)


def delivered_exactly_once(consumers, produced: int, timeout: float = SETTLE_S, where: str = "") -> None:
    """Wait until ``consumers`` have delivered ``produced`` records, then check each was delivered once."""
    wait_until(lambda: len(delivered_values(consumers)) >= produced, timeout=timeout,
               message=f"{produced} deliveries{where}")
    exactly_once(consumers, produced)


def test_planned_joins_and_leaves_deliver_every_message_exactly_once(cluster, zk):
    create_topic(zk, "t", 20)
    partitions = partitions_of(zk, ["t"])
    consumers = [cluster.add_consumer("g", topics=["t"], extra=STICKY) for _ in range(10)]
    wait_until(lambda: group_is_whole(zk, "g", consumers, partitions)
               and all(c.assignment() for c in consumers), timeout=SETTLE_S, message="10 members settled")
    production = Production(cluster, "t")
    wait_until(lambda: len(delivered_values(consumers)) > 200, timeout=SETTLE_S, message="deliveries")

    # An 11th member joins while production goes on: only the moving
    # partitions pause; the members that keep theirs are never stopped.
    before = {c.name: c.status()["revoked"] for c in consumers}
    consumers.append(cluster.add_consumer("g", topics=["t"], extra=STICKY))
    wait_until(lambda: group_is_whole(zk, "g", consumers, partitions) and consumers[-1].assignment(),
               timeout=SETTLE_S, message="the 11th member settled")
    revoked = {c.name: c.status()["revoked"] - before[c.name] for c in consumers[:-1]}
    assert sum(revoked.values()) == len(consumers[-1].assignment()) == 1  # 20 over 11: it takes one
    assert sum(1 for n in revoked.values() if n) == 1

    # Clean leaves and more joins, all while producing.
    for leaver in (consumers[0], consumers[3]):
        leaver.terminate()
        wait_whole(zk, "g", consumers, partitions, timeout=SETTLE_S)
    consumers.append(cluster.add_consumer("g", topics=["t"], extra=STICKY))
    wait_until(lambda: group_is_whole(zk, "g", consumers, partitions) and consumers[-1].assignment(),
               timeout=SETTLE_S, message="the last joiner settled")

    delivered_exactly_once(consumers, production.stop())


def test_a_static_member_bounced_five_times_revokes_nothing_from_the_others(cluster, zk):
    create_topic(zk, "t", 6)
    partitions = partitions_of(zk, ["t"])
    static = cluster.add_consumer("g", topics=["t"], consumer_id="static-1", session_timeout_ms=8000,
                                  extra=STICKY)
    others = [cluster.add_consumer("g", topics=["t"], extra=STICKY) for _ in range(2)]
    everyone = [static, *others]
    wait_until(lambda: group_is_whole(zk, "g", everyone, partitions)
               and all(len(c.assignment()) == 2 for c in everyone), timeout=SETTLE_S, message="settled")
    mine = static.assignment()
    before = {c.name: c.status()["revoked"] for c in others}
    generation = {c.name: c.status()["generation"] for c in others}
    for _ in range(5):
        static.terminate()
        static.status_path.unlink()
        static.start()
        wait_until(lambda: static.assignment() == mine, timeout=SETTLE_S, message="static member back")
    assert {c.name: c.status()["revoked"] for c in others} == before
    assert {c.name: c.status()["generation"] for c in others} == generation
    assert group_is_whole(zk, "g", everyone, partitions)


def test_a_member_that_stops_polling_is_removed_after_its_max_poll_interval(cluster, zk):
    create_topic(zk, "t", 4)
    partitions = partitions_of(zk, ["t"])
    active = cluster.add_consumer("g", topics=["t"])
    idle = Consumer(cluster.bootstrap, group="g", topics=["t"], session_timeout_ms=3000,
                    max_poll_interval_ms=2500)
    try:
        idle.poll(0)  # polls once, then never again; its thread keeps answering pings
        wait_until(lambda: len(idle.assignment()) == 2 and len(active.assignment()) == 2,
                   timeout=SETTLE_S, message="both members share the topic")
        started = time.monotonic()
        wait_until(lambda: active.assignment() == partitions, timeout=SETTLE_S,
                   message="the idle member's partitions moving to the active one")
        assert time.monotonic() - started >= 1.0  # not before its max poll interval ran out
        assert not idle.membership.registered.is_set()
        # It stays out while its application does not poll...
        assert not idle.assignment()
        # ...and rejoins once it polls again.
        def polling_and_back() -> bool:
            idle.poll(50)
            return len(idle.assignment()) == 2 and len(active.assignment()) == 2

        wait_until(polling_and_back, timeout=SETTLE_S, message="the member back after polling")
    finally:
        idle.close()


def test_a_rolling_change_from_range_to_sticky_completes_without_failure(cluster, zk):
    create_topic(zk, "t", 6)
    partitions = partitions_of(zk, ["t"])
    consumers = [cluster.add_consumer("g", topics=["t"], consumer_id=f"c-{k}") for k in range(3)]
    wait_whole(zk, "g", consumers, partitions, timeout=SETTLE_S)

    def strategy() -> str:
        return layout.decode_group_state(zk.get(layout.group_state_path("g"))[0]).strategy

    assert strategy() == "range"
    for k, old in enumerate(list(consumers)):
        old.terminate()
        consumers[k] = cluster.add_consumer("g", topics=["t"], consumer_id=f"c-{k}", extra=STICKY)
        wait_whole(zk, "g", consumers, partitions, timeout=SETTLE_S)
        if k < 2:  # some members still speak only range: range it stays
            assert strategy() == "range"
    wait_until(lambda: strategy() == "sticky", timeout=SETTLE_S, message="the group on sticky")
    wait_whole(zk, "g", consumers, partitions, timeout=SETTLE_S)
    logs = "".join(s.log_tail(200_000) for s in cluster.servers.values())
    assert "FAILED" not in logs
