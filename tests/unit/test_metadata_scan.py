"""A Metadata answer scanned for its brokers, topics and leaders reads as kafka-python decodes it whole.

Answers encoded by kafka-python at every flexible version, with what varies
in the wild: racks or none, a cluster id or none, topics in error, partitions
without a leader, replica lists long enough for a two-byte length, offline
replicas.
"""

from __future__ import annotations

import random
import uuid

import pytest
from kafka.protocol.metadata import MetadataResponse

from zkcoord.fetch.metadata_scan import FIRST_FLEXIBLE_VERSION, ScanError, scan

Broker = MetadataResponse.MetadataResponseBroker
Topic = MetadataResponse.MetadataResponseTopic
Partition = Topic.MetadataResponsePartition
VERSIONS = range(FIRST_FLEXIBLE_VERSION, 13)
UNKNOWN_TOPIC, LEADER_NOT_AVAILABLE = 3, 5


def answer(version: int, seed: int) -> MetadataResponse:
    rng = random.Random(seed)
    brokers = [Broker(node_id=n, host=f"kafka-{n}.example", port=9090 + n, rack=rng.choice([None, f"rack-{n}"]))
               for n in range(1, rng.randint(1, 5) + 1)]
    topics = []
    for t in range(rng.randint(0, 6)):
        if rng.random() < 0.2:
            topics.append(Topic(error_code=UNKNOWN_TOPIC, name=f"gone-{t}", topic_id=uuid.UUID(int=0),
                                is_internal=False, partitions=[]))
            continue
        partitions = []
        for p in range(rng.randint(0, 40)):
            replicas = [rng.randint(1, 300) for _ in range(rng.choice([0, 1, 3, 130]))]  # 130: a 2-byte length
            led = rng.random() > 0.1
            partitions.append(Partition(
                error_code=0 if led else LEADER_NOT_AVAILABLE, partition_index=p, leader_id=replicas[0]
                if led and replicas else -1, leader_epoch=rng.randint(-1, 50), replica_nodes=replicas,
                isr_nodes=replicas[:rng.randint(0, len(replicas))], offline_replicas=replicas[:rng.choice([0, 1])]))
        rng.shuffle(partitions)
        topics.append(Topic(error_code=0, name=f"topic-{t}", topic_id=uuid.UUID(int=rng.getrandbits(128)),
                            is_internal=rng.random() < 0.1, partitions=partitions))
    return MetadataResponse(version=version, throttle_time_ms=rng.randint(0, 10), brokers=brokers,
                            cluster_id=rng.choice([None, "cluster-a"]), controller_id=rng.choice([-1, 1]),
                            topics=topics)


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("seed", range(20))
def test_a_scan_reads_what_a_whole_decode_reads(version, seed):
    body = answer(version, seed).encode(version=version)
    whole = MetadataResponse.decode(body, version=version)
    scanned = scan(body, version)
    assert scanned.brokers == {b.node_id: (b.host, b.port) for b in whole.brokers}
    assert [(t.error_code, t.name, t.partitions) for t in scanned.topics] == [
        (t.error_code, t.name, [(p.error_code, p.partition_index, p.leader_id) for p in t.partitions])
        for t in whole.topics]
    assert [t.topic_id for t in scanned.topics] == [  # kafka-python decodes the zero Uuid as None
        (t.topic_id.bytes if t.topic_id else bytes(16)) if version >= 10 else None for t in whole.topics]


@pytest.mark.parametrize("version", VERSIONS)
def test_bytes_that_are_not_a_whole_answer_are_a_scan_error(version):
    body = answer(version, seed=7).encode(version=version)
    for cut in (1, len(body) // 2, len(body) - 1):
        with pytest.raises(ScanError):
            scan(body[:cut], version)
    with pytest.raises(ScanError, match="left over"):
        scan(body + b"\0", version)


def test_a_version_before_the_flexible_ones_is_not_scanned():
    with pytest.raises(ScanError, match="not a flexible one"):
        scan(answer(8, seed=1).encode(version=8), 8)
