"""Fetch fences: which partitions the brokers refuse to a stock client's
fetches, and why (pure; docs/DESIGN.md, "What a stock member is promised").

A thin consumer stops handing records out when its lease ends. A stock
client's lease is its registration's, held by the broker that bridges it,
and the client knows nothing of it: cut off from that broker, or paused past
its session, it may go on fetching partitions the coordinator has since
started elsewhere. What the brokers can do is refuse it what they serve.

A Fetch names no group and no member, and a client's fetches and its group
requests travel on different connections (Java and librdkafka keep one
connection to the group coordinator apart from those to the partition
leaders). So a client is recognised by what all its connections share: the
address they come from and the client id they send, its :class:`Tie`. That
is sound where each consuming process on a host sends a client id of its
own; a tie two processes share is told apart only within one group (below).

:class:`BridgeFences` is the bridging broker's half: the fence each of its
members needs now. A member is fenced on what its client may be fetching

- from the moment the client is warned that the registration's lease runs
  low (the client is being asked to let everything go) until a request
  renews the lease;
- from the moment the bridge abandons the member (silent for its session,
  or keeping a revoked partition past its rebalance timeout) until the client
  shows that it let go: it joins the group again (a client that lost its
  member joins afresh owning nothing), or says in a join or heartbeat that
  it no longer owns the partitions.

Either comes before the coordinator may start anyone else on the partitions:
the first at least a sixth of the session before the registration's lease
ends, the second while the registration's lease still runs.

A member of the same group with the same tie that is given a fenced
partition lifts the fence on it: the broker cannot tell their fetches apart,
and refusing the owner is worse than letting the stale one through.

A gone member's client may never show anything again (it died, its host
went): its fence lapses once no broker has refused the client a fetch for
the idle time (``--fetch-fence-idle-ms``; :meth:`BridgeFences.idle`). Every
refusal is news that the client still fetches (fence_store.py carries it to
:meth:`BridgeFences.fetched`), so a client cut off from its group's broker
that fetches on is refused for as long as it does.

:class:`FenceIndex` is every broker's half: the fences of all bridges, as
what to refuse to a Fetch from a tie.
"""

from __future__ import annotations

import time
from typing import Callable, Iterable, NamedTuple, Optional

from zkcoord.zk.layout import FetchFence


class Tie(NamedTuple):
    """What all connections of one client share: the address they come from and the client id they send."""

    host: str
    client_id: str


def tie_of(member) -> Tie:
    return Tie(member.client_host, member.client_id)


class BridgeFences:
    """The fences one bridge's members need, by (group, member id)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._fences: dict[tuple[str, str], FetchFence] = {}
        # When each fence was last set or changed, or its client last seen fetching.
        self._active: dict[tuple[str, str], float] = {}

    def fences(self) -> dict[tuple[str, str], FetchFence]:
        return dict(self._fences)

    def fenced(self, group: str, member_id: str) -> frozenset:
        fence = self._fences.get((group, member_id))
        return fence.partitions if fence is not None else frozenset()

    def set(self, group: str, member_id: str, tie: Tie, partitions: Iterable) -> bool:
        """Fence exactly ``partitions`` of this member (none: no fence).
        Returns whether anything changed."""
        partitions = frozenset(partitions)
        key = (group, member_id)
        old = self._fences.get(key)
        if not partitions:
            self._active.pop(key, None)
            return self._fences.pop(key, None) is not None
        fence = FetchFence(group, member_id, tie.host, tie.client_id, partitions)
        if old == fence:
            return False
        self._fences[key] = fence
        self._active[key] = self.clock()
        return True

    def lift(self, group: str, member_id: str) -> bool:
        """No fence for this member any more. Returns whether it had one."""
        self._active.pop((group, member_id), None)
        return self._fences.pop((group, member_id), None) is not None

    def fetched(self, group: str, member_id: str) -> None:
        """A broker refused this member's client a fetch lately: it still fetches."""
        if (group, member_id) in self._fences:
            self._active[(group, member_id)] = self.clock()

    def idle(self, idle_s: float) -> list[tuple[str, str]]:
        """The fences set, changed or fetched against no later than ``idle_s`` ago."""
        now = self.clock()
        return [key for key, at in self._active.items() if now - at >= idle_s]

    def narrow(self, group: str, member_id: str, still_held: Iterable) -> bool:
        """The member's client showed it holds no more than ``still_held``:
        its fence keeps only those. Returns whether anything changed."""
        return self.set(group, member_id, self._tie(group, member_id), self.fenced(group, member_id)
                        & frozenset(still_held)) if (group, member_id) in self._fences else False

    def joined(self, group: str, member_id: str, tie: Tie, owned: Optional[Iterable] = None) -> bool:
        """A client of ``tie`` joined ``group`` as ``member_id`` owning
        ``owned`` (None: nothing; a client that lost its member owns
        nothing). The tie's other fences in the group keep only what it still
        owns. Returns whether anything changed."""
        owned = frozenset(owned or ())
        changed = False
        for (g, m), fence in list(self._fences.items()):
            if g == group and m != member_id and Tie(fence.host, fence.client_id) == tie:
                changed |= self.set(g, m, tie, fence.partitions & owned)
        return changed

    def granted(self, group: str, member_id: str, tie: Tie, partitions: Iterable) -> bool:
        """``member_id`` (of ``tie``) was given ``partitions``: no other
        member's fence of the same tie in the group may refuse them to it.
        Returns whether anything changed."""
        partitions = frozenset(partitions)
        changed = False
        for (g, m), fence in list(self._fences.items()):
            if g == group and m != member_id and Tie(fence.host, fence.client_id) == tie \
                    and fence.partitions & partitions:
                changed |= self.set(g, m, tie, fence.partitions - partitions)
        return changed

    def _tie(self, group: str, member_id: str) -> Tie:
        fence = self._fences[(group, member_id)]
        return Tie(fence.host, fence.client_id)


class FenceIndex:
    """Every bridge's fences, as what a Fetch from each tie is refused."""

    def __init__(self, fences: Iterable[FetchFence] = ()) -> None:
        refused: dict[Tie, frozenset] = {}
        for fence in fences:
            tie = Tie(fence.host, fence.client_id)
            refused[tie] = refused.get(tie, frozenset()) | fence.partitions
        self._refused = refused

    def refused(self, host: str, client_id: Optional[str]) -> frozenset:
        """The partitions a Fetch from ``host`` with ``client_id`` may not have."""
        return self._refused.get(Tie(host, client_id or ""), frozenset())

    def __bool__(self) -> bool:
        return bool(self._refused)
