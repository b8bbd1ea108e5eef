"""What a member reports as consumed, on real processes: the records its
application has finished with (it polled again), not those it is still
working on, so that a crash in the middle of a batch skips nothing."""

from __future__ import annotations

from tests.e2e.checks import produce
from tests.e2e.conftest import SERVER_ARGS
from zkcoord.testing import wait_until

SETTLE_S = 30
RECORDS = 20
BATCH = 5


def test_a_consumer_killed_in_the_middle_of_a_batch_leaves_the_batch_to_the_next_owner(cluster_factory):
    cluster = cluster_factory(servers=1, server_args=(*SERVER_ARGS, "--metrics-port", "0"))
    server = cluster.servers[1]
    cluster.create_topic("t", 1)
    produce(cluster, "t", RECORDS)
    # Its application writes a batch down, then works on it for ten minutes.
    first = cluster.add_consumer("g", topics=["t"], extra=("--max-poll-records", str(BATCH),
                                                           "--process-ms", "600000"))
    wait_until(lambda: len(first.records()) == BATCH, SETTLE_S, message="the first batch handed out")
    # The group's only member is pinged every third of its session timeout;
    # a ping goes out only once the one before was answered, so two more sent
    # than now means one was answered in the middle of the batch.
    pinged = server.scrape().value("zkcoord_pings_sent_total")
    wait_until(lambda: server.scrape().value("zkcoord_pings_sent_total") >= pinged + 2, SETTLE_S,
               message="a ping answered while the application held its batch")
    first.kill()

    second = cluster.add_consumer("g", topics=["t"])
    wait_until(lambda: any(r["offset"] == RECORDS - 1 for r in second.records()), SETTLE_S,
               message="the next owner at the end of the partition")
    assert [r["offset"] for r in first.records()] == list(range(BATCH))
    assert [r["offset"] for r in second.records()] == list(range(RECORDS)), "the batch the crash cut short was skipped"
