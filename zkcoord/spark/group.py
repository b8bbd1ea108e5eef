"""A streaming query's driver as a member of a consumer group: the
consistent region (consumer groups inside a checkpointing stream processor)
on Spark.

:class:`QueryMember` is the :class:`MembershipListener` of the query's
:class:`GroupMembership`. The coordinator grants partitions (Start) and takes
them away (Stop); the query plans micro-batches only over what is granted.

What counts as committed: Spark asks for the next batch's end
(``latestOffset(start, ...)``) only once the previous batch is in the
query's commit log, so the ``start`` of that call is the end of the last
committed batch. (Spark's ``commit(end)`` comes a batch late, when the next
batch is planned, so it cannot serve.) These offsets are reported to the
coordinator on every ping, so group tools see the query's progress and lag.

The handoff: on Stop, the partitions leave the plan at once; if a batch in
flight reads them, the Stop waits (at most ``handoffTimeoutMs``) until that
batch is committed, then answers with the offsets of the last committed
batch, where the next owner starts.

A refusal (a wrong credential, no ACL for the group or a topic) ends the
membership; the next planning call raises it, so the query fails with the
coordinator's words instead of waiting for partitions that never come.

The end: when the query stops, :meth:`QueryMember.close` leaves the group
with the offsets of the last committed batch in its LeaveGroupRequest, which
the coordinator commits before it answers. Spark calls the source no more by
then, so a batch in flight is not waited for: it never commits.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from typing import Iterator, Optional

from zkcoord import wire
from zkcoord.member.config import MemberConfig
from zkcoord.member.membership import GroupMembership
from zkcoord.member.protocol import NO_OFFSET
from zkcoord.records import TopicPartition
from zkcoord.security.secrets import refuse_password_without_tls
from zkcoord.spark.errors import SparkSourceError
from zkcoord.spark.metadata import ClusterView
from zkcoord.spark.offsets import PartitionOffsets, StreamOffset
from zkcoord.spark.options import EARLIEST, SourceOptions, login

log = logging.getLogger(__name__)

REFUSAL_CHECK_S = 0.1  # how often a wait for partitions looks for a refusal


class QueryMember:
    """The query's driver as one member of its group: what the coordinator
    granted, what Spark has committed, and the batch in flight."""

    def __init__(self, options: SourceOptions, view: ClusterView):
        self.options = options
        self.view = view
        self._cond = threading.Condition()
        self._granted: set[TopicPartition] = set()
        self._fresh: dict[TopicPartition, int] = {}  # granted, not yet planned: coordinator's offset
        self._committed: PartitionOffsets = {}
        self._in_flight: Optional[frozenset[TopicPartition]] = None  # read by the batch in flight
        self._closing = False  # Spark has stopped the query: nothing in flight will commit
        self._last_plan = time.monotonic()
        self._membership: Optional[GroupMembership] = None

    def start(self) -> None:
        servers = list(self.options.servers) or self.view.servers()
        if not servers:
            raise SparkSourceError("no zkcoord server is registered under /zkcoord/servers; "
                                   "give the option 'servers'")
        # The brokers' login is the coordinator's credential too, as a thin consumer's.
        credential = login(self.options.sasl)
        # Registration carries the password itself: refused without TLS unless allowed, named as Spark's option.
        refuse_password_without_tls(credential.user if credential else None, self.options.tls.speaks,
                                    bool(credential and credential.plain_without_tls),
                                    "the coordinator connections", "the option sasl.passwordWithoutTls=true")
        self._membership = GroupMembership(servers, MemberConfig(
            group=self.options.group, topics=self.options.topics, pattern=self.options.pattern,
            session_timeout_ms=self.options.session_timeout_ms,
            auto_offset_reset=wire.SMALLEST if self.options.starting == EARLIEST else wire.LARGEST,
            tls=self.options.tls,
            user=credential.user if credential else None, password=credential.password if credential else None,
            password_without_tls=bool(credential and credential.plain_without_tls),
            client_kind=wire.SPARK, client_id="zkcoord-spark",
        ), self, keep_on_loss=False)  # its batches are planned without a look at the lease: it stops at once
        self._membership.start()
        log.info("[group %s] streaming query joins as %s", self.options.group, self._membership.consumer_id)

    def close(self) -> None:
        """Leave the group; the leave hands over the last committed batch's end."""
        if self._membership is None:
            return
        with self._cond:
            self._closing = True
            self._cond.notify_all()  # a Stop waiting for the batch in flight answers now
        self._membership.close()
        self._membership = None

    # -- what the query's planning sees ------------------------------------------------------

    def granted(self) -> set[TopicPartition]:
        with self._cond:
            return set(self._granted)

    def wait_for_assignment(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        with self._cond:
            # A refusal notifies nobody: look for it between short waits.
            while not self._granted and time.monotonic() < deadline:
                self._raise_refusal()
                self._cond.wait(min(REFUSAL_CHECK_S, max(0.0, deadline - time.monotonic())))
            self._raise_refusal()
            return bool(self._granted)

    def _raise_refusal(self) -> None:
        """The error that ended the membership (a refused credential or ACL), raised."""
        membership = self._membership
        if membership is not None and membership.error is not None:
            raise membership.error

    @contextlib.contextmanager
    def planning(self) -> Iterator["_Plan"]:
        """Hold the plan steady while the next batch's end is chosen."""
        self._raise_refusal()
        with self._cond:
            yield _Plan(self)
            self._last_plan = time.monotonic()

    def committed(self, offsets: PartitionOffsets) -> None:
        """Spark's (late) commit: never moves anything backwards."""
        with self._cond:
            for tp, offset in offsets.items():
                if offset > self._committed.get(tp, -1):
                    self._committed[tp] = offset
            self._cond.notify_all()

    # -- MembershipListener (the membership's network thread) ---------------------------------

    def on_start(self, partitions: dict[TopicPartition, int]) -> None:
        with self._cond:
            for tp, offset in partitions.items():
                if tp not in self._granted:
                    self._fresh[tp] = offset
            self._granted = set(partitions)
            log.info("[group %s] query granted %s", self.options.group, sorted(partitions))
            self._cond.notify_all()

    def on_stop(self, partitions: frozenset[TopicPartition]) -> dict[TopicPartition, int]:
        began = time.monotonic()
        deadline = began + self.options.handoff_timeout_ms / 1000.0
        with self._cond:
            self._granted -= partitions
            fresh = {tp: self._fresh.pop(tp) for tp in partitions if tp in self._fresh}

            def settled() -> bool:
                return self._closing or self._in_flight is None or not (partitions & self._in_flight)

            if not self._cond.wait_for(settled, max(0.0, deadline - time.monotonic())):
                log.warning("[group %s] batch in flight not committed within %d ms; handing over "
                            "%s at the last committed offsets", self.options.group,
                            self.options.handoff_timeout_ms, sorted(partitions))
            # Granted but never planned: hand back what the coordinator gave.
            final = {tp: o for tp, o in fresh.items() if o != NO_OFFSET}
            final.update({tp: self._committed[tp] for tp in partitions
                          if tp in self._committed and tp not in fresh})
            for tp in partitions:
                self._committed.pop(tp, None)
            log.info("[group %s] query hands over %s after %.0f ms", self.options.group,
                        sorted(final.items()), (time.monotonic() - began) * 1000)
            return final

    def offsets(self) -> Optional[PartitionOffsets]:
        with self._cond:
            return {tp: o for tp, o in self._committed.items() if tp in self._granted} or None

    def last_poll_ms_ago(self) -> int:
        return int((time.monotonic() - self._last_plan) * 1000)


class _Plan:
    """The member's state as one ``latestOffset`` call sees it (lock held)."""

    def __init__(self, member: QueryMember):
        self.member = member

    def owned(self, start: StreamOffset) -> dict[TopicPartition, Optional[int]]:
        """Granted partitions -> where they begin (None: where ``start`` left
        them, or per startingOffsets if it has none). Marks ``start`` as
        committed: Spark plans the next batch only after committing this one."""
        m = self.member
        m._in_flight = None
        for tp, offset in start.next.items():
            if offset > m._committed.get(tp, -1):
                m._committed[tp] = offset
        m._cond.notify_all()
        owned: dict[TopicPartition, Optional[int]] = {}
        for tp in sorted(m._granted):
            offset = m._fresh.get(tp, NO_OFFSET)
            owned[tp] = None if offset == NO_OFFSET else offset
        return owned

    def planned(self, end: StreamOffset, *, reading: set[TopicPartition]) -> None:
        """``end`` is the next batch's end; ``reading`` the partitions it reads."""
        m = self.member
        m._fresh = {tp: o for tp, o in m._fresh.items() if tp not in end.starts and tp not in reading
                    and end.next.get(tp) != o}
        m._in_flight = frozenset(reading) or None
