"""What the broker answers to each request: a pure mapping from a decoded
request and the broker's state (hosted logs, the cluster as ZooKeeper shows
it) to a response object. Sockets, waiting and ZooKeeper live elsewhere; the
only I/O here is reading and appending the partition logs.
"""

from __future__ import annotations

import logging
import os
import time
import uuid
from dataclasses import dataclass, field
from typing import Callable, NamedTuple, Optional

from kafka.protocol.consumer import FetchResponse, ListOffsetsResponse
from kafka.protocol.metadata import MetadataResponse
from kafka.protocol.producer import InitProducerIdResponse, ProduceResponse

from zkcoord.batch_format import CorruptBatchError, UnsupportedMagicError
from zkcoord.broker import legacy, protocol
from zkcoord.broker.log import (
    InvalidProducerEpochError, OutOfOrderSequenceError, PartitionLog, ReadSlice, RecordTooLargeError,
)
from zkcoord.errors import OffsetOutOfRangeError, ZkcoordError
from zkcoord.limits import REFUSED_PRODUCE, abuse_log
from zkcoord.zk import layout

log = logging.getLogger(__name__)

# Kafka error codes the broker returns.
NONE = 0
OFFSET_OUT_OF_RANGE = 1
CORRUPT_MESSAGE = 2
UNKNOWN_TOPIC_OR_PARTITION = 3
COORDINATOR_NOT_AVAILABLE = 15
TOPIC_AUTHORIZATION_FAILED = 29
CLUSTER_AUTHORIZATION_FAILED = 31
UNKNOWN_TOPIC_ID = 100
LEADER_NOT_AVAILABLE = 5
NOT_LEADER_OR_FOLLOWER = 6
REQUEST_TIMED_OUT = 7
INVALID_TOPIC_EXCEPTION = 17
RECORD_LIST_TOO_LARGE = 18
TOPIC_ALREADY_EXISTS = 36
INVALID_PARTITIONS = 37
INVALID_REPLICATION_FACTOR = 38
INVALID_REPLICA_ASSIGNMENT = 39
INVALID_CONFIG = 40
NOT_CONTROLLER = 41
INVALID_REQUEST = 42
OUT_OF_ORDER_SEQUENCE_NUMBER = 45
INVALID_PRODUCER_EPOCH = 47
INVALID_TXN_STATE = 48
TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
UNSUPPORTED_COMPRESSION_TYPE = 76
INVALID_RECORD = 87
MISMATCHED_ENDPOINT_TYPE = 114
UNSUPPORTED_ENDPOINT_TYPE = 115
UNKNOWN_SERVER_ERROR = -1

# ListOffsets' special timestamps
LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
MAX_TIMESTAMP = -3  # the record with the largest timestamp
EARLIEST_LOCAL_TIMESTAMP = -4  # no tiered storage: the log start

_APPEND_ERRORS = (
    (UnsupportedMagicError, INVALID_RECORD),
    (legacy.UnsupportedCompressionError, UNSUPPORTED_COMPRESSION_TYPE),
    (CorruptBatchError, CORRUPT_MESSAGE),
    (RecordTooLargeError, RECORD_LIST_TOO_LARGE),
    (OutOfOrderSequenceError, OUT_OF_ORDER_SEQUENCE_NUMBER),
    (InvalidProducerEpochError, INVALID_PRODUCER_EPOCH),
)


class BrokerAddress(NamedTuple):
    host: str
    port: int
    rack: Optional[str]


class PartitionInfo(NamedTuple):
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]


@dataclass
class MetadataCache:
    """The cluster as the broker last read it from ZooKeeper: what its
    Metadata answers say (Kafka's name for a broker's copy of it)."""

    brokers: dict[int, BrokerAddress] = field(default_factory=dict)
    topics: dict[str, dict[int, PartitionInfo]] = field(default_factory=dict)
    # Kafka Uuid strings of the topics that have one (Kafka 2.8's topic ids).
    topic_ids: dict[str, str] = field(default_factory=dict)
    cluster_id: Optional[str] = None
    # Kafka's controller, named by a gateway (None: zkcoord's brokers, which run none).
    controller: Optional[int] = None

    def controller_id(self, own_id: int) -> int:
        """The broker named as controller. Among zkcoord's brokers no
        controller runs and any broker carries out what clients send a
        controller (creating topics), so every broker names the same one, the
        lowest live id (itself while it knows of no other)."""
        if self.controller is not None:
            return self.controller
        return min(self.brokers, default=own_id)


class FetchOutcome(NamedTuple):
    """A fetch answer; the caller owns (and must close) the descriptors in
    ``slices``. ``served``: (topic, bytes, records) of each partition with
    data, records counted as the offsets the answer moves the fetcher past."""

    response: FetchResponse
    slices: dict[bytes, ReadSlice]
    bytes_ready: int
    has_error: bool
    served: tuple = ()


def lists_every_topic(request) -> bool:
    """Whether a Metadata request asks for every topic rather than naming
    some (no list from v1 on; an empty one in v0)."""
    return request.topics is None or (request.API_VERSION == 0 and not request.topics)


def _ignore_append(topic: str, size: int, records: int) -> None:
    pass


class Handlers:
    """Answers requests for one broker. ``logs`` holds the partitions this
    broker leads; ``metadata_cache`` everything else it knows about the cluster."""

    def __init__(self, broker_id: int, metadata_cache: MetadataCache, logs: dict[tuple[str, int], PartitionLog],
                 allocate_producer_id: Callable[[], int], sendfile_threshold: int,
                 clock: Callable[[], float] = time.time,
                 on_append: Callable[[str, int, int], None] = _ignore_append):
        """``on_append(topic, bytes, records)`` is told of every append (the broker's metrics)."""
        self.broker_id = broker_id
        self._on_append = on_append
        self.metadata_cache = metadata_cache
        self.logs = logs
        self._allocate_producer_id = allocate_producer_id
        self._sendfile_threshold = sendfile_threshold
        self._clock = clock

    def _missing_error(self, topic: str, partition: int) -> int:
        """Why this broker has no log for the partition."""
        partitions = self.metadata_cache.topics.get(topic)
        if partitions is None or partition not in partitions:
            return UNKNOWN_TOPIC_OR_PARTITION
        return NOT_LEADER_OR_FOLLOWER

    # -- ApiVersions, Metadata, InitProducerId ----------------------------

    def api_versions(self, request):
        return protocol.api_versions_response(request.API_VERSION)

    def metadata(self, request, describable: Callable[[str], bool] = lambda _topic: True,
                 cluster_operations: Callable[[], frozenset] = frozenset,
                 topic_operations: Callable[[str], frozenset] = lambda _topic: frozenset()):
        """``describable(topic)``: whether the client may know of the topic (the
        authorizer's Describe); a listing leaves the others out, as Kafka does.
        ``cluster_operations()`` and ``topic_operations(topic)``: Kafka's codes
        of what the client may do to them, sent (v8+) when asked for."""
        version = request.API_VERSION
        brokers = [
            MetadataResponse.MetadataResponseBroker(node_id=node, host=addr.host, port=addr.port,
                                                    rack=addr.rack)
            for node, addr in sorted(self.metadata_cache.brokers.items())
        ]
        if lists_every_topic(request):
            topics = [self._topic_metadata(name) for name in sorted(self.metadata_cache.topics) if describable(name)]
        else:
            # v10+ may name a topic by its id alone (KIP-848 clients do).
            by_id = {layout.parse_kafka_uuid(i): t for t, i in self.metadata_cache.topic_ids.items()}
            topics = [self._named_topic(t.name, describable) if t.name is not None
                      else self._topic_by_id(t.topic_id, by_id, describable) for t in request.topics]
        if getattr(request, "include_topic_authorized_operations", False):
            for t in topics:
                if t.error_code == NONE:
                    t.authorized_operations = set(topic_operations(t.name))
        return MetadataResponse(version=version, throttle_time_ms=0, brokers=brokers,
                                cluster_id=self.metadata_cache.cluster_id,
                                controller_id=self.metadata_cache.controller_id(self.broker_id), topics=topics,
                                authorized_operations=set(cluster_operations())
                                if getattr(request, "include_cluster_authorized_operations", False) else None)

    def _named_topic(self, name: str, describable: Callable[[str], bool]):
        """A topic asked for by name: refused before it is looked up, as
        Kafka refuses it (and with no id), so that the answer never tells
        whether a topic the client may not Describe exists."""
        if not describable(name):
            return MetadataResponse.MetadataResponseTopic(
                error_code=TOPIC_AUTHORIZATION_FAILED, name=name, topic_id=uuid.UUID(int=0), is_internal=False,
                partitions=[])
        return self._topic_metadata(name)

    def _topic_by_id(self, topic_id, by_id, describable: Callable[[str], bool]):
        """A topic asked for by id: refused without its name when the client
        may not Describe it (Kafka holds ids no secret, names it does)."""
        name = by_id.get(topic_id)
        if name is None:
            return MetadataResponse.MetadataResponseTopic(error_code=UNKNOWN_TOPIC_ID, name=None, topic_id=topic_id,
                                                          is_internal=False, partitions=[])
        if not describable(name):
            return MetadataResponse.MetadataResponseTopic(
                error_code=TOPIC_AUTHORIZATION_FAILED, name=None, topic_id=topic_id, is_internal=False,
                partitions=[])
        return self._topic_metadata(name)

    def _topic_metadata(self, name):
        Topic = MetadataResponse.MetadataResponseTopic
        partitions = self.metadata_cache.topics.get(name)
        if partitions is None:
            return Topic(error_code=UNKNOWN_TOPIC_OR_PARTITION, name=name, is_internal=False,
                         partitions=[])
        topic_id = self.metadata_cache.topic_ids.get(name)
        out = []
        for index, info in sorted(partitions.items()):
            alive = info.leader in self.metadata_cache.brokers
            out.append(Topic.MetadataResponsePartition(
                error_code=NONE if alive else LEADER_NOT_AVAILABLE,
                partition_index=index,
                leader_id=info.leader if alive else -1,
                leader_epoch=info.leader_epoch,
                replica_nodes=list(info.replicas),
                isr_nodes=list(info.isr),
                offline_replicas=[r for r in info.replicas if r not in self.metadata_cache.brokers]))
        return Topic(error_code=NONE, name=name, is_internal=False, partitions=out,
                     topic_id=layout.parse_kafka_uuid(topic_id) if topic_id else uuid.UUID(int=0))

    def init_producer_id(self, request, idempotent_allowed: Callable[[], bool] = lambda: True):
        """An idempotent producer's id. ``idempotent_allowed()``: the
        authorizer's IdempotentWrite on the cluster, or Write on any topic."""
        def answer(error: int, producer_id: int = -1, epoch: int = -1):
            return InitProducerIdResponse(version=request.API_VERSION, throttle_time_ms=0, error_code=error,
                                          producer_id=producer_id, producer_epoch=epoch)

        if request.transactional_id is not None:
            # Transactions are not offered; only idempotent producers are.
            return answer(TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
        if not idempotent_allowed():
            return answer(CLUSTER_AUTHORIZATION_FAILED)
        try:
            return answer(NONE, self._allocate_producer_id(), 0)
        except ZkcoordError as exc:  # ZooKeeper unreachable: the client asks again
            log.warning("no producer id to hand out: %s", exc)
            return answer(COORDINATOR_NOT_AVAILABLE)

    # -- Produce -----------------------------------------------------------

    def produce(self, request, writable: Callable[[str], bool] = lambda _topic: True):
        """Append every partition's batches; None when acks=0 (no response).
        ``writable(topic)``: the authorizer's Write."""
        Topic = ProduceResponse.TopicProduceResponse
        Partition = Topic.PartitionProduceResponse
        topics = []
        for topic in request.topic_data:
            partitions = []
            for data in topic.partition_data:
                error, base, start, message = NONE, -1, -1, None
                plog = self.logs.get((topic.name, data.index))
                if not writable(topic.name):
                    error = TOPIC_AUTHORIZATION_FAILED
                elif plog is None:
                    error = self._missing_error(topic.name, data.index)
                elif request.transactional_id is not None:
                    error = INVALID_TXN_STATE
                else:
                    try:
                        result = plog.append(legacy.to_batches(data.records or b"", request.API_VERSION))
                        base, start = result.base_offset, result.log_start_offset
                        self._on_append(topic.name, len(data.records), result.last_offset - base + 1)
                    except tuple(cls for cls, _ in _APPEND_ERRORS) as exc:
                        error = next(code for cls, code in _APPEND_ERRORS if isinstance(exc, cls))
                        message = str(exc)
                        # Rate-limited: any client can send corrupt batches as fast as it likes.
                        abuse_log.log(REFUSED_PRODUCE, logging.INFO, "produce to %s-%d refused: %s", topic.name,
                                      data.index, exc)
                partitions.append(Partition(index=data.index, error_code=error, base_offset=base,
                                            log_append_time_ms=-1, log_start_offset=start,
                                            record_errors=[], error_message=message))
            topics.append(Topic(name=topic.name, partition_responses=partitions))
        if request.acks == 0:
            return None
        return ProduceResponse(version=request.API_VERSION, responses=topics, throttle_time_ms=0)

    # -- ListOffsets ---------------------------------------------------------

    def list_offsets(self, request, describable: Callable[[str], bool] = lambda _topic: True):
        """``describable(topic)``: the authorizer's Describe."""
        if request.API_VERSION == 0:
            return self._list_offsets_v0(request, describable)
        Topic = ListOffsetsResponse.ListOffsetsTopicResponse
        Partition = Topic.ListOffsetsPartitionResponse
        topics = []
        for topic in request.topics:
            partitions = []
            for part in topic.partitions:
                error, offset, timestamp = NONE, -1, -1
                plog = self.logs.get((topic.name, part.partition_index))
                if not describable(topic.name):
                    error, plog = TOPIC_AUTHORIZATION_FAILED, None
                elif plog is None:
                    error = self._missing_error(topic.name, part.partition_index)
                elif part.timestamp in (EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP):
                    offset = plog.log_start_offset
                elif part.timestamp == LATEST_TIMESTAMP:
                    offset = plog.log_end_offset
                elif part.timestamp >= 0 or part.timestamp == MAX_TIMESTAMP:
                    target = plog.max_timestamp if part.timestamp == MAX_TIMESTAMP else part.timestamp
                    found = plog.offset_for_timestamp(target) if target >= 0 else None
                    if found is not None:
                        offset, timestamp = found
                else:
                    error = protocol.UNSUPPORTED_VERSION
                partitions.append(Partition(partition_index=part.partition_index, error_code=error,
                                            timestamp=timestamp, offset=offset,
                                            leader_epoch=plog.leader_epoch if plog else -1))
            topics.append(Topic(name=topic.name, partitions=partitions))
        return ListOffsetsResponse(version=request.API_VERSION, throttle_time_ms=0, topics=topics)

    def _list_offsets_v0(self, request, describable: Callable[[str], bool]):
        """Version 0: up to max_num_offsets offsets at segment boundaries
        (legacy.offsets_before), largest first."""
        Topic = ListOffsetsResponse.ListOffsetsTopicResponse
        Partition = Topic.ListOffsetsPartitionResponse
        now_ms = int(self._clock() * 1000)
        topics = []
        for topic in request.topics:
            partitions = []
            for part in topic.partitions:
                error, offsets = NONE, []
                plog = self.logs.get((topic.name, part.partition_index))
                if not describable(topic.name):
                    error = TOPIC_AUTHORIZATION_FAILED
                elif plog is None:
                    error = self._missing_error(topic.name, part.partition_index)
                else:
                    segments = [legacy.SegmentTime(*entry) for entry in plog.segment_times()]
                    offsets = legacy.offsets_before(
                        segments, plog.log_start_offset, plog.log_end_offset,
                        plog.segments[-1].size == 0, part.timestamp, part.max_num_offsets, now_ms)
                partitions.append(Partition(partition_index=part.partition_index, error_code=error,
                                            old_style_offsets=offsets))
            topics.append(Topic(name=topic.name, partitions=partitions))
        return ListOffsetsResponse(version=0, topics=topics)

    # -- Fetch -------------------------------------------------------------

    def fetch(self, request, readable: Callable[[str], bool] = lambda _topic: True,
              refused: frozenset = frozenset()) -> FetchOutcome:
        """Read what is there now. The caller waits and asks again while
        ``bytes_ready`` is below min_bytes and max_wait has not passed.
        ``readable(topic)``: whether the client may read it (the authorizer's Read).
        ``refused``: partitions fenced from this client (groups/fences.py):
        NOT_LEADER_OR_FOLLOWER, on which Java, librdkafka and kafka-python
        deliver nothing of the partition, refresh their metadata and ask again."""
        Topic = FetchResponse.FetchableTopicResponse
        Partition = Topic.PartitionData
        budget = request.max_bytes if request.max_bytes > 0 else 2**31 - 1
        slices: dict[bytes, ReadSlice] = {}
        served = []
        total = 0
        has_error = False
        topics = []
        for topic in request.topics:
            partitions = []
            for part in topic.partitions:
                error, hw, start, records = NONE, -1, -1, b""
                plog = self.logs.get((topic.topic, part.partition))
                if not readable(topic.topic):
                    error = TOPIC_AUTHORIZATION_FAILED
                elif plog is None:
                    error = self._missing_error(topic.topic, part.partition)
                elif (topic.topic, part.partition) in refused:
                    error = NOT_LEADER_OR_FOLLOWER
                else:
                    hw, start = plog.log_end_offset, plog.log_start_offset
                    # KIP-74: the first batch goes out even when larger than
                    # the limits, so a consumer can always make progress.
                    limit = min(part.partition_max_bytes, budget) if total else part.partition_max_bytes
                    try:
                        region = plog.read(part.fetch_offset, max(limit, 1))
                        if region is not None and total and region.length > limit:
                            region = None
                    except OffsetOutOfRangeError:
                        error = OFFSET_OUT_OF_RANGE
                        region = None
                    if region is not None:
                        served.append((topic.topic, region.length, region.next_offset - part.fetch_offset))
                    if region is not None and request.API_VERSION <= legacy.LAST_LEGACY_FETCH:
                        # Old clients read old formats only: converted in memory, no sendfile.
                        try:
                            records = legacy.down_convert(region.read(), legacy.fetch_magic(request.API_VERSION),
                                                          part.fetch_offset, limit)
                        except CorruptBatchError as exc:
                            log.error("%s-%d: cannot down-convert from offset %d: %s",
                                      topic.topic, part.partition, part.fetch_offset, exc)
                            error = CORRUPT_MESSAGE
                        total += len(records)
                        budget -= len(records)
                    elif region is not None:
                        total += region.length
                        budget -= region.length
                        if region.length >= self._sendfile_threshold:
                            # Our own descriptor: retention may close the
                            # segment's before the bytes are sent.
                            records = protocol.new_marker()
                            slices[records] = region._replace(fd=os.dup(region.fd))
                        else:
                            records = region.read()
                has_error = has_error or error != NONE
                partitions.append(Partition(
                    partition_index=part.partition, error_code=error, high_watermark=hw,
                    last_stable_offset=hw, log_start_offset=start, aborted_transactions=[],
                    preferred_read_replica=-1, records=records))
            topics.append(Topic(topic=topic.topic, partitions=partitions))
        response = FetchResponse(version=request.API_VERSION, throttle_time_ms=0, error_code=NONE,
                                 session_id=0, responses=topics)
        return FetchOutcome(response, slices, total, has_error, tuple(served))
