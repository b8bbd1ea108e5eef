"""Invariant 5 with real processes: a group whose rounds fail past their
retries while ZooKeeper stays connected (NoAuth after an ACL mistake, a
quota) is FAILED, but it keeps being retried: once the fault ends the dead
member's partitions are consumed again, with nothing else changing. It was
retried only on the next change, and could stay unconsumed for good."""

from __future__ import annotations

from kazoo.security import OPEN_ACL_UNSAFE, make_acl

from tests.e2e.checks import wait_whole
from tests.e2e.conftest import SERVER_ARGS
from zkcoord.admin.topics import create_topic
from zkcoord.testing import partitions_of, wait_until
from zkcoord.zk import layout

RETRY_CAP_MS = 2000
SETTLE_S = 30


def test_a_group_failed_by_refused_writes_is_consumed_again_once_they_are_allowed(cluster_factory, zk):
    cluster = cluster_factory(1, server_args=(*SERVER_ARGS, "--max-rebalance-retries", "2",
                                              "--max-rebalance-backoff-ms", str(RETRY_CAP_MS)))
    create_topic(zk, "t", 4)
    partitions = partitions_of(zk, ["t"])
    survivor = cluster.add_consumer("g", topics=["t"])
    doomed = cluster.add_consumer("g", topics=["t"])
    wait_until(lambda: wait_whole(zk, "g", [survivor, doomed], partitions, timeout=SETTLE_S) is not None
               and survivor.assignment() and doomed.assignment(), timeout=SETTLE_S, message="settled")
    state = layout.group_state_path("g")
    # The operator's mistake: nobody may write the group's state (they may still put it right).
    zk.set_acls(state, [make_acl("world", "anyone", read=True, admin=True)])
    try:
        doomed.kill()
        failure = layout.group_failure_path("g")
        wait_until(lambda: zk.exists(failure) is not None, timeout=SETTLE_S, message="the group to be FAILED")
        assert len(survivor.assignment()) < len(partitions)  # the dead member's partitions are unconsumed
    finally:
        zk.set_acls(state, OPEN_ACL_UNSAFE)  # fixed; nothing else changes
    wait_whole(zk, "g", [survivor], partitions, timeout=RETRY_CAP_MS / 1000 + 10)
    assert survivor.assignment() == partitions
    wait_until(lambda: zk.exists(failure) is None, timeout=10, message="the failure record to go")
