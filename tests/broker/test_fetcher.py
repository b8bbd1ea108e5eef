"""The consumers' fetcher against a real broker: explicit offsets,
EARLIEST/LATEST, revocation, re-assignment, errors, chunks of columns."""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka import Producer

from zkcoord.testing import wait_until
from zkcoord.fetch.columnar import EARLIEST, LATEST, ColumnarFetcher
from zkcoord.errors import OffsetOutOfRangeError, UnknownPartitionError
from zkcoord.fetch.errors import FETCHER_ERRORS, FetchError, FetcherClosedError
from zkcoord.records import Record


def produce(bootstrap, topic, per_partition: dict[int, int], tag: str = "v"):
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    sent = {}
    for partition, count in per_partition.items():
        sent[partition] = [f"{tag}-{partition}-{i}".encode() for i in range(count)]
        for value in sent[partition]:
            producer.produce(topic, value=value, key=b"k", partition=partition, timestamp=1_700_000_000_000)
    assert producer.flush(20) == 0
    return sent


def drain(fetcher, count, timeout=20.0):
    got: list[Record] = []

    def enough():
        got.extend(fetcher.fetch(10_000, 0.1))
        return len(got) >= count
    wait_until(enough, timeout=timeout, interval=0, message=f"{count} records")
    return got


def first_error(fetcher, timeout=15.0) -> Exception:
    """Fetch until the fetcher raises; return what it raised."""
    caught = []

    def raised():
        try:
            fetcher.fetch(10, 0.2)
        except FETCHER_ERRORS as exc:
            caught.append(exc)
        return caught
    wait_until(raised, timeout=timeout, interval=0, message="the fetcher to raise")
    return caught[0]


@pytest.fixture
def topic(shared_cluster):
    name = f"fetch-{uuid.uuid4().hex[:8]}"
    shared_cluster.create_topic(name, 3)
    return name


@pytest.fixture
def fetcher(shared_cluster):
    f = ColumnarFetcher(shared_cluster.brokers[0].bootstrap, client_id=f"t-{uuid.uuid4().hex[:6]}")
    yield f
    f.close()


def test_fetch_from_explicit_offsets(shared_cluster, topic, fetcher):
    sent = produce(shared_cluster.brokers[0].bootstrap, topic, {0: 300, 1: 200, 2: 100})
    fetcher.assign({(topic, 0): 0, (topic, 1): 150, (topic, 2): EARLIEST})
    assert fetcher.assignment() == {(topic, 0), (topic, 1), (topic, 2)}
    got = drain(fetcher, 300 + 50 + 100)
    by_partition = {p: [r for r in got if r.partition == p] for p in range(3)}
    assert [r.value for r in by_partition[0]] == sent[0]
    assert [r.value for r in by_partition[1]] == sent[1][150:]
    assert [r.offset for r in by_partition[1]] == list(range(150, 200))
    assert [r.value for r in by_partition[2]] == sent[2]
    first = by_partition[0][0]
    assert (first.topic, first.key, first.timestamp) == (topic, b"k", 1_700_000_000_000)
    assert fetcher.fetch(100, 0.3) == []


def test_latest_sees_only_new_records(shared_cluster, topic, fetcher):
    bootstrap = shared_cluster.brokers[0].bootstrap
    produce(bootstrap, topic, {0: 50}, tag="old")
    fetcher.assign({(topic, 0): LATEST})
    # give the client time to resolve LATEST before producing more
    assert fetcher.fetch(100, 1.0) == []
    new = produce(bootstrap, topic, {0: 20}, tag="new")
    got = drain(fetcher, 20)
    assert [r.value for r in got] == new[0]
    assert got[0].offset == 50


def test_revoke_drops_everything_of_the_partition(shared_cluster, topic, fetcher):
    bootstrap = shared_cluster.brokers[0].bootstrap
    produce(bootstrap, topic, {0: 5000, 1: 5000})
    fetcher.assign({(topic, 0): 0, (topic, 1): 0})
    first = fetcher.fetch(10, 5.0)
    assert first
    fetcher.revoke([(topic, 1)])
    assert fetcher.assignment() == {(topic, 0)}
    rest = drain(fetcher, 5000 - sum(1 for r in first if r.partition == 0))
    assert all(r.partition == 0 for r in rest)
    produce(bootstrap, topic, {1: 10}, tag="after")
    assert all(r.partition == 0 for r in fetcher.fetch(10_000, 0.5))


def test_reassign_to_a_later_offset_never_goes_back(shared_cluster, topic, fetcher):
    produce(shared_cluster.brokers[0].bootstrap, topic, {2: 2000})
    fetcher.assign({(topic, 2): 0})
    head = fetcher.fetch(100, 5.0)
    assert head and head[0].offset == 0
    fetcher.assign({(topic, 2): 1500})
    got = drain(fetcher, 500)
    assert [r.offset for r in got] == list(range(1500, 2000))


def test_out_of_range_with_reset_error(shared_cluster, topic):
    produce(shared_cluster.brokers[0].bootstrap, topic, {0: 5})
    f = ColumnarFetcher(shared_cluster.brokers[0].bootstrap, client_id="oor", offset_reset="error")
    try:
        f.assign({(topic, 0): 1000})
        assert isinstance(first_error(f), OffsetOutOfRangeError)
    finally:
        f.close()


def test_unknown_partition_is_a_typed_error(shared_cluster, fetcher):
    fetcher.assign({("no-such-topic-here", 0): 0})
    assert isinstance(first_error(fetcher), UnknownPartitionError)


def test_misuse(shared_cluster):
    f = ColumnarFetcher(shared_cluster.brokers[0].bootstrap, client_id="misuse")
    with pytest.raises(FetchError):
        f.assign({("t", 0): -7})
    with pytest.raises(FetchError):
        f.fetch(0, 0.1)
    f.close()
    with pytest.raises(FetcherClosedError):
        f.fetch(10, 0.1)
    with pytest.raises(FetchError):
        ColumnarFetcher("127.0.0.1:1", client_id="x", offset_reset="smallest")
    with pytest.raises(FetchError):
        ColumnarFetcher(" , ", client_id="x")


def test_revoke_from_another_thread(shared_cluster, topic, fetcher):
    import threading
    import time
    produce(shared_cluster.brokers[0].bootstrap, topic, {0: 20_000, 1: 20_000})
    fetcher.assign({(topic, 0): 0, (topic, 1): 0})
    calls = []  # (started, records) for every fetch call
    stop = threading.Event()

    def loop():
        while not stop.is_set():
            started = time.monotonic()
            calls.append((started, fetcher.fetch(500, 0.05)))

    thread = threading.Thread(target=loop)
    thread.start()
    wait_until(lambda: any(r.partition == 1 for _, batch in calls for r in batch), timeout=10,
               message="records of partition 1")
    fetcher.revoke([(topic, 1)])
    revoked_at = time.monotonic()
    wait_until(lambda: any(started > revoked_at for started, _ in calls), timeout=10,
               message="a fetch after the revoke")
    stop.set()
    thread.join(timeout=10)
    after = [r for started, batch in calls if started > revoked_at for r in batch]
    assert all(r.partition == 0 for r in after)


def test_out_of_range_resets_to_the_log_start_by_default(shared_cluster, topic, fetcher):
    sent = produce(shared_cluster.brokers[0].bootstrap, topic, {0: 30})
    fetcher.assign({(topic, 0): 1000})
    got = drain(fetcher, 30)
    assert [r.value for r in got] == sent[0]


def test_chunks_are_the_records_in_columns(shared_cluster, topic, fetcher):
    sent = produce(shared_cluster.brokers[0].bootstrap, topic, {0: 700, 1: 300})
    fetcher.assign({(topic, 0): 100, (topic, 1): 0})
    chunks = []
    wait_until(lambda: chunks.extend(fetcher.fetch_chunks(250, 0.1)) or sum(map(len, chunks)) >= 900,
               timeout=20, interval=0, message="900 records")
    assert all(len(c) <= 250 for c in chunks)
    values = {p: [v for c in chunks if c.partition == p for v in c.to_arrow().column("value").to_pylist()]
              for p in (0, 1)}
    assert values == {0: sent[0][100:], 1: sent[1]}
    assert [r.offset for c in chunks if c.partition == 0 for r in c.records()] == list(range(100, 700))
    assert fetcher.position((topic, 0)) == 700 and fetcher.position((topic, 1)) == 300


def test_an_undecodable_batch_is_an_error_of_its_partition_alone(shared_cluster, topic, fetcher):
    from crc32c import crc32c

    from tests.broker.batches import make_batch
    from tests.broker.test_protocol import Raw, produce as produce_raw

    batch = bytearray(make_batch([b"a", b"b"]))
    batch[22] = (batch[22] & ~0x07) | 4  # claims zstd, is not compressed; the CRC still holds
    batch[17:21] = crc32c(bytes(batch[21:])).to_bytes(4, "big")
    raw = Raw(shared_cluster.brokers[0].port)
    try:
        assert produce_raw(raw, topic, 0, bytes(batch)).error_code == 0
    finally:
        raw.close()
    sent = produce(shared_cluster.brokers[0].bootstrap, topic, {1: 200})
    fetcher.assign({(topic, 0): 0, (topic, 1): 0})
    error = first_error(fetcher)
    assert isinstance(error, FetchError) and "cannot decompress zstd" in str(error)
    # The other partition, and one assigned later, go on being fetched.
    assert [r.value for r in drain(fetcher, 200)] == sent[1]
    more = produce(shared_cluster.brokers[0].bootstrap, topic, {2: 50})
    fetcher.assign({(topic, 2): 0})
    assert [r.value for r in drain(fetcher, 50)] == more[2]


def test_no_partition_starves_behind_the_requests_byte_limit(shared_cluster, fetcher, monkeypatch):
    from zkcoord.fetch import columnar

    # Room in one request for 8 partitions' worth of 4 KiB; 12 have a long backlog
    # of small batches. A request that always began with the same partitions would
    # reach partition 8 only once partitions 0-7 were drained (16,000 records).
    monkeypatch.setattr(columnar, "PARTITION_FETCH_BYTES", 4096)
    monkeypatch.setattr(columnar, "FETCH_BYTES", 8 * 4096)
    # Fetch little ahead of the application: with everything prefetched, records
    # are handed out a partition's whole backlog at a time (seed 003's greedy
    # turns), and the order would show nothing of how requests were filled.
    monkeypatch.setattr(columnar, "PREFETCH_RECORDS", 200)
    name = f"starve-{uuid.uuid4().hex[:8]}"
    shared_cluster.create_topic(name, 12)
    producer = Producer({"bootstrap.servers": shared_cluster.brokers[0].bootstrap, "linger.ms": 5,
                         "batch.num.messages": 50})
    for i in range(2000):
        for partition in range(12):
            producer.produce(name, value=b"x" * 30, partition=partition)
    assert producer.flush(30) == 0
    fetcher.assign({(name, p): 0 for p in range(12)})
    first_seen: dict[int, int] = {}
    handed_out = 0

    def every_partition_seen():
        nonlocal handed_out
        for record in fetcher.fetch(100, 0.1):
            first_seen.setdefault(record.partition, handed_out)
            handed_out += 1
        return len(first_seen) == 12
    wait_until(every_partition_seen, timeout=30, interval=0, message="a record of every partition")
    assert max(first_seen.values()) < 4000, first_seen


def test_a_hung_broker_holds_up_only_its_own_partitions(cluster):
    from zkcoord.fetch.connection import BrokerConnection

    brokers = [cluster.start_broker(0), cluster.start_broker(1)]
    cluster.create_topic("hang", 4)
    with BrokerConnection(brokers[0].bootstrap) as probe:
        leaders = probe.leaders([("hang", p) for p in range(4)])
    by_broker = {b.bootstrap: [p for (_, p), leader in leaders.items() if leader == b.bootstrap] for b in brokers}
    assert all(by_broker.values()), by_broker  # each broker leads some partition
    hung, healthy = brokers
    f = ColumnarFetcher(cluster.broker_list, client_id="hang")
    try:
        f.assign({("hang", p): 0 for p in range(4)})
        produce(healthy.bootstrap, "hang", {p: 5 for p in by_broker[healthy.bootstrap]}, tag="before")
        drain(f, 5 * len(by_broker[healthy.bootstrap]))
        hung.pause()  # SIGSTOP: its connections stay open and silent
        try:
            sent = produce(healthy.bootstrap, "hang", {p: 20 for p in by_broker[healthy.bootstrap]}, tag="after")
            # Well inside the 10 s a request to the hung broker waits before giving up.
            got = drain(f, 20 * len(by_broker[healthy.bootstrap]), timeout=5.0)
            assert sorted(r.value for r in got) == sorted(v for values in sent.values() for v in values)
        finally:
            hung.resume()
    finally:
        f.close()


def test_a_credential_is_not_asked_of_a_broker_that_authenticates_nobody(shared_cluster, topic):
    # A thin consumer hands its fetcher the credential it logs in to the
    # coordinator with; a broker offering no SASL at all serves it as anyone
    # (it was refused for good: "offers no SASL mechanism").
    sent = produce(shared_cluster.brokers[0].bootstrap, topic, {0: 20})
    fetcher = ColumnarFetcher(shared_cluster.brokers[0].bootstrap, client_id="with-a-login",
                              credential=("alice", "alice-pw"), plain_without_tls=True)
    try:
        fetcher.assign({(topic, 0): 0})
        assert [r.value for r in drain(fetcher, 20)] == sent[0]
    finally:
        fetcher.close()


def test_a_metadata_answer_the_same_as_the_last_is_not_decoded_again(shared_cluster, topic):
    from zkcoord.fetch.connection import BrokerConnection

    with BrokerConnection(shared_cluster.brokers[0].bootstrap) as connection:
        first = connection.cluster()
        assert first.topics[topic].partition_count == 3 and first.raw
        assert connection.cluster(previous=first) is first  # the same bytes: the same value, undecoded
        grown = f"{topic}-more"
        shared_cluster.create_topic(grown, 2)
        wait_until(lambda: grown in connection.cluster(previous=first).topics, timeout=15, message="the new topic")
        assert connection.cluster(previous=first).topics[grown].partition_count == 2
