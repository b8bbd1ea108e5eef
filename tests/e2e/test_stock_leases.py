"""Stock Kafka clients that lose their group without knowing it: paused past
their session, or cut off from their group's broker while they still reach
the partition leaders. Real servers, real ZooKeeper, real clients, each a
`zkcoord consume --kafka-brokers` process; what they delivered is judged by
the drill's checker (docs/DESIGN.md, "What a stock member is promised").

kafka-python stands in for Java's classic consumer: neither revokes when its
session runs out unheard; both mark the coordinator unknown and fetch on.
"""

from __future__ import annotations

import time

import pytest

from tests.e2e.conftest import SERVER_ARGS
from tests.e2e.test_rebalancing import Production
from zkcoord.admin.groups import group_coordinator
from zkcoord.drill.checker import check
from zkcoord.drill.history import History
from zkcoord.testing import netns, wait_until
from zkcoord.zk import layout

TOPIC = "t"
PARTITIONS = 4
SESSION_MS = 3000
SETTLE_S = 40
KAFKA_PYTHON = ("--kafka-client", "kafka-python")
# A gone member's fence lapses once no broker has refused its client a fetch for this long.
FENCE_IDLE_MS = 3000
SHORT_IDLE_ARGS = (*SERVER_ARGS, "--fetch-fence-idle-ms", str(FENCE_IDLE_MS))


def _stale_polls(cluster, member) -> dict:
    """For each of the checker's episodes of ``member`` delivering a partition
    after another member was started on it (or after its own Stop), how many
    of its polls handed that partition out. The fence refuses every fetch
    from the moment the member is abandoned or warned, so it may hand out
    only what it had been sent before: one fetch answer per partition, in
    one poll (max.poll.records is 500)."""
    history = History.load(cluster.directory)
    verdict = check(history)
    names = _names(member)
    return {(e.tp, e.start): len({d.began for d in history.deliveries
                                  if d.member == e.member and d.tp == e.tp and e.start <= d.began <= e.end})
            for e in verdict.double_ownership + verdict.deliveries_after_stop if e.member in names}


def _names(member) -> set:
    """Every member id the process delivered under."""
    return {r["member"] for r in member.records()}


def _fenced(cluster) -> bool:
    return bool(cluster.zk.exists(layout.FETCH_FENCES) and cluster.zk.get_children(layout.FETCH_FENCES))


def _at_most_one_poll_each(stale: dict) -> bool:
    return all(polls <= 1 for polls in stale.values())


def test_a_stock_member_paused_past_its_session_delivers_nothing_started_elsewhere(cluster_factory):
    """Paused, it is abandoned and fenced; woken, what it asks for is
    refused until it has rejoined. What it had been sent before it may still
    hand out (the bound DESIGN.md states), in one poll: nothing fetched after."""
    cluster = cluster_factory(1, server_args=SERVER_ARGS)
    cluster.create_topic(TOPIC, PARTITIONS)
    paused = cluster.add_consumer("g", topics=[TOPIC], session_timeout_ms=SESSION_MS,
                                  kafka_brokers=cluster.broker_list, extra=KAFKA_PYTHON)
    production = Production(cluster, TOPIC)
    try:
        wait_until(lambda: len(paused.assignment()) == PARTITIONS and len(paused.records()) > 100,
                   timeout=SETTLE_S, message="the member consuming")
        other = cluster.add_consumer("g", topics=[TOPIC], session_timeout_ms=SESSION_MS,
                                     kafka_brokers=cluster.broker_list)
        wait_until(lambda: paused.assignment() and other.assignment(), timeout=SETTLE_S, message="two members")
        paused.pause()
        wait_until(lambda: len(other.assignment()) == PARTITIONS and len(other.records()) > 0,
                   timeout=SETTLE_S, message="its partitions started elsewhere")
        before = len(other.records())
        wait_until(lambda: len(other.records()) > before + 100, timeout=SETTLE_S, message="the other delivering")
        paused.resume()
        # Woken, it learns its member is gone and joins again, owning nothing.
        wait_until(lambda: paused.assignment() and other.assignment() and not _fenced(cluster),
                   timeout=SETTLE_S, message="the woken member back in the group")
    finally:
        production.stop()
    stale = _stale_polls(cluster, paused)
    assert _at_most_one_poll_each(stale), stale


@pytest.mark.skipif(netns.unavailable_reason() is not None, reason=netns.unavailable_reason() or "")
def test_a_stock_member_cut_off_from_its_group_broker_only_fetches_nothing_started_elsewhere(cluster_factory):
    """Cut off from the broker that bridges it, a classic client keeps
    fetching from the other leaders. Its member is abandoned when it has been
    silent for its session, its partitions go to another member after the
    registration's fence, and meanwhile every broker refuses its fetches:
    it hands out at most the answers it had been sent before."""
    cluster = cluster_factory(2, server_args=SHORT_IDLE_ARGS)
    cluster.create_topic(TOPIC, PARTITIONS)
    group_broker = cluster.servers[int(group_coordinator(cluster.zk, "g")[2] or cluster.wait_for_coordinator())]
    namespace = netns.NetworkNamespace(1).create()
    production = Production(cluster, TOPIC)
    try:
        cut = cluster.add_consumer("g", topics=[TOPIC], session_timeout_ms=SESSION_MS, netns=namespace,
                                   kafka_brokers=cluster.broker_list, extra=KAFKA_PYTHON)
        wait_until(lambda: len(cut.assignment()) == PARTITIONS and len(cut.records()) > 100, timeout=SETTLE_S,
                   message="the member consuming")
        namespace.drop_port(group_broker.broker_port)
        other = cluster.add_consumer("g", topics=[TOPIC], session_timeout_ms=SESSION_MS,
                                     kafka_brokers=cluster.broker_list)
        wait_until(lambda: len(other.assignment()) == PARTITIONS and _fenced(cluster), timeout=SETTLE_S,
                   message="its partitions started elsewhere")
        before = len(other.records())
        wait_until(lambda: len(other.records()) > before + 300, timeout=SETTLE_S, message="the other delivering")
        # It fetches on, refused: its fence is kept however long that lasts, past the idle time many times.
        fenced_at = time.monotonic()
        wait_until(lambda: not _fenced(cluster) or time.monotonic() - fenced_at > 3 * FENCE_IDLE_MS / 1000,
                   timeout=SETTLE_S, message="three idle times")
        assert _fenced(cluster)
        namespace.heal()
        wait_until(lambda: cut.assignment() and other.assignment() and not _fenced(cluster), timeout=SETTLE_S,
                   message="the member back in the group")
    finally:
        production.stop()
        namespace.remove()
    stale = _stale_polls(cluster, cut)
    assert _at_most_one_poll_each(stale), stale


def test_a_gone_stock_member_whose_client_never_returns_is_fenced_no_longer_than_the_idle_time(cluster_factory):
    """kill -9 of a stock member holding partitions: the bridge abandons it
    and fences what it held; its client never fetches again, so the fence
    lapses the idle time later instead of lasting as long as the broker."""
    cluster = cluster_factory(1, server_args=SHORT_IDLE_ARGS)
    cluster.create_topic(TOPIC, PARTITIONS)
    production = Production(cluster, TOPIC)
    try:
        dead = cluster.add_consumer("g", topics=[TOPIC], session_timeout_ms=SESSION_MS,
                                    kafka_brokers=cluster.broker_list, extra=KAFKA_PYTHON)
        wait_until(lambda: len(dead.assignment()) == PARTITIONS and len(dead.records()) > 100, timeout=SETTLE_S,
                   message="the member consuming")
        other = cluster.add_consumer("g", topics=[TOPIC], session_timeout_ms=SESSION_MS,
                                     kafka_brokers=cluster.broker_list)
        dead.kill()
        wait_until(lambda: _fenced(cluster), timeout=SETTLE_S, message="the dead member abandoned and fenced")
        fenced_at = time.monotonic()
        wait_until(lambda: not _fenced(cluster), timeout=SETTLE_S, message="its fence lapsed")
        # The idle time, a check interval of the broker's (a quarter of it) and the bridge's tick.
        assert time.monotonic() - fenced_at <= 2 * FENCE_IDLE_MS / 1000 + 1.0
        before = len(other.records())
        wait_until(lambda: len(other.assignment()) == PARTITIONS and len(other.records()) > before + 100,
                   timeout=SETTLE_S, message="the other member consuming everything")
    finally:
        production.stop()
