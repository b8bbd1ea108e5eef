"""``format("zkcoord")``: the PySpark data source, batch and streaming.

The driver plans from ZooKeeper and the brokers' offset bounds; executors
read each planned range straight from the partition's broker
(:mod:`zkcoord.spark.reader`). A streaming query with the option ``group``
is a member of that consumer group (:mod:`zkcoord.spark.group`) and plans
only the partitions the coordinator grants it.

Spark builds readers in several Python processes and pickles them to
executors, so every connection here is opened lazily and dropped from the
pickled state. Spark ends the streaming reader's process without calling its
``stop()`` (:mod:`zkcoord.spark.worker`): a group member leaves on SIGTERM.
"""

from __future__ import annotations

import logging
import threading
from typing import Iterator, Optional

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from zkcoord.records import TopicPartition
from zkcoord.spark import worker
from zkcoord.spark.metadata import ClusterView
from zkcoord.spark.offsets import (
    OffsetRange,
    PartitionOffsets,
    StreamOffset,
    batch_ranges,
    limit_offsets,
    split_ranges,
)
from zkcoord.spark.options import EARLIEST, LATEST, SourceOptions, login, parse_options
from zkcoord.spark.plan import check_range, resolve
from zkcoord.spark.reader import SCHEMA_DDL, ReadTask, read_task

log = logging.getLogger(__name__)


class RangePartition(InputPartition):
    """One Spark task: a range of one partition and its broker."""

    def __init__(self, task: ReadTask):
        super().__init__(task)
        self.task = task


def _read(partition: InputPartition) -> Iterator:
    # Spark hands an empty plan a placeholder partition of None.
    if isinstance(partition, RangePartition):
        yield from read_task(partition.task)


def _view(options: SourceOptions) -> ClusterView:
    return ClusterView(options.zookeeper, tls=options.tls, security=options.zk_security, sasl=options.sasl,
                       isolation_level=options.isolation_level, kafka_bootstrap=options.kafka_bootstrap)


def _tasks(view: ClusterView, options: SourceOptions, ranges: list[OffsetRange]) -> list[RangePartition]:
    ranges = split_ranges(ranges, options.min_partitions)
    leaders = view.leaders(sorted({(r.topic, r.partition) for r in ranges}))
    brokers = tuple(sorted(view.brokers().values()))  # where a retried task looks for a new leader
    # Read each plan: a password file may have changed. The tasks carry it to the executors.
    credential = login(options.sasl)
    return [RangePartition(ReadTask(r, leaders[(r.topic, r.partition)], options.poll_timeout_ms,
                                    options.fail_on_data_loss, brokers, options.tls, credential,
                                    options.isolation_level)) for r in ranges]


class ZkcoordDataSource(DataSource):
    """Register with ``spark.dataSource.register(ZkcoordDataSource)``."""

    @classmethod
    def name(cls) -> str:
        return "zkcoord"

    def schema(self) -> str:
        return SCHEMA_DDL

    def reader(self, schema) -> "BatchReader":
        return BatchReader(parse_options(self.options, streaming=False))

    def streamReader(self, schema) -> "StreamReader":
        return StreamReader(parse_options(self.options, streaming=True))


def named(name: str) -> type[ZkcoordDataSource]:
    """The same source under another name (format(name))."""
    return type(f"ZkcoordDataSource_{name.replace('-', '_')}", (ZkcoordDataSource,),
                {"name": classmethod(lambda cls: name)})


class BatchReader(DataSourceReader):
    def __init__(self, options: SourceOptions):
        self.options = options

    def partitions(self) -> list[RangePartition]:
        view = _view(self.options)
        try:
            partitions = view.partitions(view.topics(self.options))
            bounds = view.bounds(partitions)
            committed = view.committed(self.options.group, partitions) if self.options.group else {}
            starts = resolve(self.options.starting, partitions, bounds, default=EARLIEST,
                             committed=committed, fail_on_data_loss=self.options.fail_on_data_loss,
                             what="startingOffsets")
            ends = resolve(self.options.ending, partitions, bounds, default=LATEST,
                           committed=committed, what="endingOffsets")
            check_range(starts, ends)
            ranges = [OffsetRange(t, p, starts[(t, p)], ends[(t, p)]) for t, p in partitions]
            return _tasks(view, self.options, ranges)
        finally:
            view.close()

    def read(self, partition: InputPartition) -> Iterator:
        return _read(partition)


class StreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batches over the subscribed partitions (all of them, or those
    the group coordinator grants). Offsets are :class:`StreamOffset` dicts."""

    def __init__(self, options: SourceOptions):
        self.options = options
        self._init_state()

    def _init_state(self) -> None:
        self._view = _view(self.options)
        self._group = None
        self._target: Optional[PartitionOffsets] = None  # Trigger.AvailableNow's end
        self._lock = threading.Lock()
        # stop() runs in the main thread (the runner's) and on SIGTERM in another: once.
        self._stop_lock = threading.Lock()

    # Only the options travel; the driver and executors rebuild the rest.
    def __getstate__(self):
        return {"options": self.options}

    def __setstate__(self, state):
        self.options = state["options"]
        self._init_state()

    def _members(self):
        with self._lock:
            if self.options.group and self._group is None:
                from zkcoord.spark.group import QueryMember

                self._group = QueryMember(self.options, self._view)
                self._group.start()
                worker.leave_before_terminating(self.stop)
            return self._group

    # -- offsets -----------------------------------------------------------------------------

    def initialOffset(self) -> dict:
        if self.options.group:
            self._members()
            # A member's partitions, and where they begin, come with the grants.
            return StreamOffset({}).to_dict()
        partitions = self._view.partitions(self._view.topics(self.options))
        bounds = self._view.bounds(partitions)
        starts = resolve(self.options.starting, partitions, bounds, default=LATEST,
                         fail_on_data_loss=self.options.fail_on_data_loss, what="startingOffsets")
        return StreamOffset(starts).to_dict()

    def getDefaultReadLimit(self):
        if self.options.max_offsets_per_trigger:
            return ReadMaxRows(self.options.max_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        group = self._members()
        if group is not None:
            group.wait_for_assignment(self.options.session_timeout_ms / 1000.0)
            partitions = sorted(group.granted())
        else:
            partitions = self._view.partitions(self._view.topics(self.options))
        self._target = {tp: high for tp, (_, high) in self._view.bounds(partitions).items()}

    def latestOffset(self, start: dict, limit) -> dict:
        begin_at = StreamOffset.from_dict(start)
        group = self._members()
        if group is not None:
            with group.planning() as plan:
                end = self._next_end(begin_at, plan.owned(begin_at), limit)
                plan.planned(end, reading={r.topic_partition for r in batch_ranges(begin_at, end)})
        else:
            end = self._next_end(begin_at, self._discover(begin_at.next), limit)
        if end.next == begin_at.next and not end.starts:
            return start  # the very same text: Spark sees no new data
        return end.to_dict()

    def _discover(self, current: PartitionOffsets) -> dict[TopicPartition, Optional[int]]:
        """Every subscribed partition; one not seen before begins at its earliest offset."""
        partitions = self._view.partitions(self._view.topics(self.options))
        fresh = [tp for tp in partitions if tp not in current]
        lows = {tp: low for tp, (low, _) in self._view.bounds(fresh, skip_unavailable=True).items()}
        # A new partition no broker answers for yet waits for a later trigger.
        return {tp: lows.get(tp) for tp in partitions if tp in current or tp in lows}

    def _next_end(self, start: StreamOffset, owned: dict[TopicPartition, Optional[int]], limit) -> StreamOffset:
        """``owned`` maps each partition to plan to where it begins: None to
        continue from ``start``, or an offset (new to this query, or handed
        over by the group)."""
        bounds = self._view.bounds(sorted(owned), skip_unavailable=True)
        # A partition no broker answers for now waits for a later plan (one
        # just granted keeps its handed-over offset until then).
        owned = {tp: b for tp, b in owned.items() if tp in bounds}
        begins = {}
        for tp, begin in owned.items():
            low, high = bounds[tp]
            if begin is not None:
                # The group's offset, unless this query's checkpoint is further:
                # committed offsets never move back, so a lower one only means
                # the query's last batches were not reported before it stopped.
                begins[tp] = min(max(begin, start.next.get(tp, begin), low), high)
            elif tp in start.next:
                begins[tp] = start.next[tp]
            elif start.next:
                # A partition with no committed offset granted once the query
                # runs is new to the group: read it all, as Spark's Kafka source does.
                begins[tp] = low
            else:  # the query's first partitions: startingOffsets decides
                position = self.options.starting
                if isinstance(position, dict):
                    position = {k: v for k, v in position.items() if k == tp}
                begins[tp] = resolve(position, [tp], {tp: bounds[tp]}, default=LATEST,
                                     fail_on_data_loss=False, what="startingOffsets")[tp]
        latest = {tp: max(begins[tp], bounds[tp][1]) for tp in owned}
        if self._target is not None:
            latest = {tp: max(begins[tp], min(latest[tp], self._target.get(tp, begins[tp]))) for tp in latest}
        if isinstance(limit, ReadMaxRows):
            latest = limit_offsets(begins, latest, limit.max_rows)
        starts = {tp: b for tp, b in begins.items() if start.next.get(tp) != b}
        # Partitions not planned now (not granted, or no broker answers) keep
        # their place: the offsets remember where this query left each one.
        for tp, offset in start.next.items():
            latest.setdefault(tp, offset)
        return StreamOffset(dict(sorted(latest.items())), dict(sorted(starts.items())))

    def partitions(self, start: dict, end: dict) -> list[RangePartition]:
        ranges = batch_ranges(StreamOffset.from_dict(start), StreamOffset.from_dict(end))
        return _tasks(self._view, self.options, ranges)

    def read(self, partition: InputPartition) -> Iterator:
        return _read(partition)

    def commit(self, end: dict) -> None:
        if self._group is not None:
            self._group.committed(StreamOffset.from_dict(end).next)

    def stop(self) -> None:
        with self._stop_lock:
            if self._group is not None:
                self._group.close()
                self._group = None
                worker.forget(self.stop)
            self._view.close()
