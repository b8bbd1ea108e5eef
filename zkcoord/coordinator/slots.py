"""Coordinator slots: which slot a group falls in, and which slots a server seeks (pure).

Seed 001's next step is every server coordinating a share of the groups. The
groups are spread over a fixed number of slots, kept in ZooKeeper; each slot
is elected and fenced on its own, as each partition of Kafka's offsets topic
has its own leader. A dead coordinator moves only its slots, and the others'
groups never pause.

Changing the count. A group's slot depends on the count, so two coordinators
of two counts may each hold a slot the group falls in, each fenced on its own
epoch, and act for it at once. Fencing every write on the count node's
version would not prevent that: a node deleted and created again starts at
version 0 again, and a fence stops writes, not the pings that renew members'
leases. So the count is watched, and any change of its node (its zxid: a set
or a re-creation both move it) makes every server step down from every slot
it holds, read the count again and stand under the new one; and no server
stands for any slot while an election won before the count was set remains
(:func:`elections_of_an_earlier_count`). A coordinator gives its election
node up only once it has stopped (its offsets flushed, its members' requests
ended), or its session ends and its office ended before that; and every
write it makes checks that node (store.py). So whatever a group's slot under
the new count, its coordinator there is elected after its coordinator under
the old count has stopped for good, as after any failover, and its fences
(the lease rule) cover what that one sent. And every claim takes an epoch
above every slot's (store.py, ``above``): a group that moved to a slot whose
epoch was lower would find its members refusing their new coordinator as
older than the one they knew.

A server whose takeovers of a slot keep failing (a node of the slot that its
ZooKeeper credentials may not write, say) counts in every server's fair share
all the same, so the others, at their share, would never seek that slot: it
would stay vacant for as long as the faulty server runs. So a server that
fails a slot FAILURES_TO_WITHDRAW times in a row withdraws from it for a
while (:class:`Candidacy`) and says so in its registration; a slot's share
counts only the servers standing for it (:func:`slot_share`), so one of the
others seeks it, and keeps it when the withdrawn server stands again.

This module decides; the server (coordinator/server.py) carries it out.
"""

from __future__ import annotations

import collections
import math
from dataclasses import dataclass
from typing import Collection, Iterable, Mapping, Optional

from zkcoord.zk.layout import validate_slot_count

# Takeovers of one slot failing in a row after which a server withdraws from it.
FAILURES_TO_WITHDRAW = 3
# How long a withdrawal lasts; each one that follows without a takeover of
# the slot succeeding in between lasts twice the last, up to the most.
WITHDRAWAL_S = 30.0
MAX_WITHDRAWAL_S = 600.0


def fair_share(slots: int, servers: int) -> int:
    """The most slots one of ``servers`` live servers should hold: enough
    that together they hold every slot."""
    return math.ceil(validate_slot_count(slots) / max(servers, 1))


def slot_share(slot: int, slots: int, servers: int, withdrawn: Optional[Mapping[int, int]] = None) -> int:
    """The most slots a server should hold to seek (or keep) ``slot``: the
    fair share of the servers that stand for it, those of the ``servers``
    live ones that have not withdrawn from it (``withdrawn``: how many have,
    by slot). A server that fails every takeover of a slot is not counted on
    to take it."""
    return fair_share(slots, servers - (withdrawn or {}).get(slot, 0))


def slots_to_seek(held: Iterable[int], vacant: Iterable[int], slots: int, servers: int,
                  withdrawn: Optional[Mapping[int, int]] = None, aside: Collection[int] = ()) -> list[int]:
    """The vacant slots a server holding ``held`` should try to take now, in
    order: each while it holds fewer than the slot's share. Those with fewer
    servers standing for them come first, then the lowest, the same order
    for every server; an election it loses costs one failed create. It
    seeks none of the slots it has withdrawn from (``aside``).

    For example, two servers and two slots, the other server withdrawn from
    slot 1: slot 0's share is 1, slot 1's is 2, so a server holding slot 0
    seeks slot 1, and then gives slot 0 up (:func:`slot_to_release`)."""
    held = set(held)
    candidates = sorted(set(vacant) - set(aside),
                        key=lambda slot: (-slot_share(slot, slots, servers, withdrawn), slot))
    seek: list[int] = []
    for slot in candidates:
        if len(held) + len(seek) < slot_share(slot, slots, servers, withdrawn):
            seek.append(slot)
    return seek


def slot_to_release(held: Iterable[int], slots: int, servers: int,
                    withdrawn: Optional[Mapping[int, int]] = None) -> Optional[int]:
    """A slot to give up gracefully (its offsets flushed first) because this
    server holds more than the slot's share, as after another server joined;
    None if it holds no more than that in any. The highest goes first, so
    that servers agree on what moves; a slot others have withdrawn from has
    a larger share, so it is kept while one with more servers standing for
    it moves."""
    held = sorted(set(held))
    over = [slot for slot in held if len(held) > slot_share(slot, slots, servers, withdrawn)]
    return over[-1] if over else None


def withdrawal_counts(withdrawals: Iterable[Collection[int]]) -> collections.Counter:
    """How many servers have withdrawn from each slot, from each live
    server's withdrawn slots (their registrations)."""
    return collections.Counter(slot for aside in withdrawals for slot in aside)


def awaits_a_taker(slot: int, servers: int, withdrawn: Mapping[int, int]) -> bool:
    """Whether vacant ``slot`` will be taken: some of the ``servers`` live
    ones stand for it (a slot every server has withdrawn from waits for one
    to stand again)."""
    return withdrawn.get(slot, 0) < servers


def slots_at_rest(holders: Mapping[int, Optional[str]], withdrawals: Mapping[str, Collection[int]]) -> bool:
    """Whether no server would take or hand over a slot now, as the
    servers decide it: ``holders`` is each slot's elected server (None:
    vacant), ``withdrawals`` each live server's withdrawn slots. At rest:
    no vacant slot that some server stands for, and no server holding more
    than a slot's share (:func:`slot_to_release`; a hand-over also waits
    for its groups to settle, which this cannot see)."""
    slots, servers = len(holders), len(withdrawals)
    withdrawn = withdrawal_counts(withdrawals.values())
    if any(server is None and awaits_a_taker(slot, servers, withdrawn) for slot, server in holders.items()):
        return False
    held: dict[str, list[int]] = collections.defaultdict(list)
    for slot, server in holders.items():
        if server is not None:
            held[server].append(slot)
    return all(slot_to_release(slots_held, slots, servers, withdrawn) is None for slots_held in held.values())


class Candidacy:
    """The slots a server stands for, as its own takeovers bear out (pure:
    the caller gives the time, on its monotonic clock).

    After FAILURES_TO_WITHDRAW failed takeovers of a slot in a row, the
    server withdraws from the slot for WITHDRAWAL_S, twice as long at each
    withdrawal that follows without a takeover of the slot succeeding in
    between, up to MAX_WITHDRAWAL_S; then it stands again. A withdrawal is
    published (the server's registration) so that the others count the
    server out of the slot's share and one of them takes the slot. When the
    withdrawal ends, the slot is most likely held by another server, which
    keeps it: the server seeks it again only if it falls vacant.
    """

    def __init__(self) -> None:
        self._failures: dict[int, int] = {}  # failed takeovers in a row, by slot
        self._backoff: dict[int, float] = {}  # the last withdrawal's length, by slot
        self._until: dict[int, float] = {}  # when each withdrawal ends, by slot

    def failed(self, slot: int, now: float) -> Optional[float]:
        """A takeover of ``slot`` failed at ``now``: the length of the
        withdrawal from it that begins now, or None if none does."""
        failures = self._failures.get(slot, 0) + 1
        if failures < FAILURES_TO_WITHDRAW:
            self._failures[slot] = failures
            return None
        self._failures[slot] = 0
        last = self._backoff.get(slot)
        self._backoff[slot] = WITHDRAWAL_S if last is None else min(2 * last, MAX_WITHDRAWAL_S)
        self._until[slot] = now + self._backoff[slot]
        return self._backoff[slot]

    def succeeded(self, slot: int) -> None:
        """A takeover of ``slot`` succeeded: its failures are forgotten."""
        for record in (self._failures, self._backoff, self._until):
            record.pop(slot, None)

    def withdrawn(self, now: float) -> frozenset[int]:
        """The slots the server has withdrawn from at ``now``."""
        return frozenset(slot for slot, until in self._until.items() if now < until)

    def next_return(self, now: float) -> Optional[float]:
        """Seconds from ``now`` until the next withdrawal ends; None if none is in force."""
        ends = [until - now for until in self._until.values() if now < until]
        return min(ends) if ends else None


@dataclass(frozen=True)
class SlotCount:
    """The cluster's slot count as read, with the zxid of the write that set
    it: /zkcoord/slots's mzxid, which setting the node and creating it again
    both move, so that any change is seen, even to the same count."""

    slots: int
    zxid: int


def elections_of_an_earlier_count(count: SlotCount, elected_at: Mapping[int, int]) -> list[int]:
    """The slots whose election was won before ``count`` was set, from
    ``elected_at`` (slot -> the zxid that created its election node, for
    every election node present, within the count or beyond it): their
    holders may act under an earlier count. No server stands for a slot
    under ``count`` until there are none: a group may fall in any slot of
    either count, and its coordinator under the new count must not start
    before its coordinator under the old one has stopped. An election won
    after the count was set was won under it: a server checks, once it has
    won, that the count has not changed since it read it, and gives up what
    it won if it has."""
    return sorted(slot for slot, zxid in elected_at.items() if zxid < count.zxid)
