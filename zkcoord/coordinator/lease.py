"""Fences: partitions a member may still be fetching although the coordinator no longer counts on it.

The coordinator's half of the lease rule (docs/DESIGN.md). A member may
deliver until ``T`` (its session timeout) after it sent the answer before
the last request it obeyed; every request the coordinator sends leaves after
that answer arrived. So from the coordinator's last send to a member,
``T + margin`` later the member's lease has surely ended, whatever became of
the request on its way. Whenever the coordinator drops a member without an
acknowledgement that it stopped (no answer, a connection that only this
side saw close, eviction, a static member gone, a failover), the partitions
it may be running are fenced until then: nobody is started on them before.

A fence lifts early when its holder registers again (a member stops
everything before it registers) or acknowledges a Stop of the partition.

A fence that lapses still leaves a trace: until someone is sent a Start of
the partition, its holder was the last to run it, so the final offsets it
hands over when it registers again are exact, however late it comes back.

The coordinator holds a lease of its own, on its office: it may send a
request only while its ZooKeeper session is provably alive, so that every
request it sends precedes the election of a successor (``office_end``).

Pure state; times are plain floats from the caller's clock.
"""

from __future__ import annotations

from typing import Iterable, Optional

from zkcoord.records import TopicPartition


def lease_end(last_sent: float, session_timeout_ms: int, margin_ms: int) -> float:
    """When a member last sent a request at ``last_sent`` surely holds no lease any more."""
    return last_sent + (session_timeout_ms + margin_ms) / 1000.0


# The share of its ZooKeeper session timeout for which a successful round
# trip keeps the coordinator in office. ZooKeeper expires a session only
# after hearing nothing from it for the whole timeout S, and a round trip
# begun at t was heard after t. The third held back covers the clocks'
# rates and the network; kazoo itself gives a connection up after 2S/3 of
# silence. (What it does not cover is in docs/DESIGN.md: a follower passes
# the heartbeat on to the leader up to half a tick late.)
OFFICE_SHARE = 2 / 3
# How often the office is renewed, as a share of the session timeout: a
# renewal that fails still leaves 2S/3 - S/4 of office for the next one.
OFFICE_RENEWAL_SHARE = 1 / 4


def office_end(proven_at: float, session_timeout_ms: int) -> float:
    """Until when a coordinator whose ZooKeeper round trip began at
    ``proven_at`` and succeeded may send requests."""
    return proven_at + session_timeout_ms * OFFICE_SHARE / 1000.0


class Fences:
    """Per partition, the members that may still fetch it, and until when."""

    def __init__(self) -> None:
        self._until: dict[TopicPartition, dict[str, float]] = {}
        # Per partition, the holders fenced on it since anyone was last started on it.
        self._last_ran: dict[TopicPartition, set[str]] = {}

    def fence(self, holder: str, partitions: Iterable[TopicPartition], until: float) -> None:
        for tp in partitions:
            holders = self._until.setdefault(tp, {})
            holders[holder] = max(until, holders.get(holder, until))
            self._last_ran.setdefault(tp, set()).add(holder)

    def release(self, holder: str, partitions: Optional[Iterable[TopicPartition]] = None) -> None:
        """``holder`` has stopped ``partitions`` (all it held if None), and
        handed over or reported what it had consumed of them."""
        for tp in (set(self._until) | set(self._last_ran)) if partitions is None else partitions:
            holders = self._until.get(tp)
            if holders is not None:
                holders.pop(holder, None)
                if not holders:
                    del self._until[tp]
            ran = self._last_ran.get(tp)
            if ran is not None:
                ran.discard(holder)
                if not ran:
                    del self._last_ran[tp]

    def claimed(self, partitions: Iterable[TopicPartition]) -> None:
        """Someone is sent a Start of ``partitions`` (it may begin at once, from
        the committed offsets): what their earlier holders would hand over
        for them is stale from now on."""
        for tp in partitions:
            self._last_ran.pop(tp, None)

    def last_ran_by(self, holder: str) -> frozenset[TopicPartition]:
        """Partitions ``holder`` was fenced on, nobody having been started on
        them since (whether or not its fence still holds): it ran them last."""
        return frozenset(tp for tp, holders in self._last_ran.items() if holder in holders)

    def until(self, now: float, partitions: Optional[Iterable[TopicPartition]] = None) -> Optional[float]:
        """The instant all of ``partitions`` (all fenced ones if None) are free,
        or None if they are free at ``now``. Forgets fences that have lapsed."""
        for tp in list(self._until):
            holders = self._until[tp]
            for holder in [h for h, t in holders.items() if t <= now]:
                del holders[holder]
            if not holders:
                del self._until[tp]
        wanted = self._until if partitions is None else [tp for tp in partitions if tp in self._until]
        return max((max(self._until[tp].values()) for tp in wanted), default=None)

    def holders(self) -> frozenset[str]:
        return frozenset(h for holders in self._until.values() for h in holders)

    def __bool__(self) -> bool:
        return bool(self._until)
