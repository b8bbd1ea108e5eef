"""The drill's slow member (``zkcoord consume --slow-ms``): SIGUSR1 makes the
next Start or Stop outlast the rebalance timeout, SIGUSR2 takes that back.
An arming the fault's rebalances leave unused must not bite a later fault,
whose planned change would then be blamed for the slow member's duplicates."""

from __future__ import annotations

import signal

import pytest

from tests.e2e.conftest import SERVER_ARGS
from zkcoord.testing import wait_until

TOPIC = "t"
PARTITIONS = 4
# A Stop slower than the rebalance timeout gets the member removed for not answering.
SLOW_ARGS = (*SERVER_ARGS, "--rebalance-timeout-ms", "1500")
SLOW_MS = "3000"


@pytest.mark.parametrize("disarmed", [False, True], ids=["armed", "disarmed"])
def test_an_armed_member_is_slow_on_its_next_stop_unless_disarmed(cluster_factory, disarmed):
    cluster = cluster_factory(1, server_args=SLOW_ARGS)
    cluster.create_topic(TOPIC, PARTITIONS)
    slow = cluster.add_consumer("g", topics=[TOPIC], extra=("--slow-ms", SLOW_MS))
    wait_until(lambda: len(slow.assignment()) == PARTITIONS, timeout=30, message="the first member holding all")
    slow.signal(signal.SIGUSR1)
    if disarmed:
        slow.signal(signal.SIGUSR2)  # handled after SIGUSR1 even if both are pending: lower numbers first
    other = cluster.add_consumer("g", topics=[TOPIC])
    wait_until(lambda: slow.assignment() and other.assignment() and not slow.assignment() & other.assignment()
               and len(slow.assignment() | other.assignment()) == PARTITIONS,
               timeout=30, message="the partitions shared")
    assert slow.alive
    server_log = cluster.servers[1].log_path.read_text()
    removed = f"member {slow.status()['consumer_id']} removed: no answer to StopRequest" in server_log
    assert removed is not disarmed, server_log[-3000:]
