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

This module decides; the server (coordinator/server.py) carries it out.
"""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass
from typing import Iterable, Mapping, Optional

from zkcoord.errors import ConfigError

# Slots a cluster may be created with: enough to spread the groups over
# many servers, few enough that every server watches them all cheaply.
MAX_SLOTS = 1024


def validate_slot_count(slots: int) -> int:
    if not isinstance(slots, int) or isinstance(slots, bool) or not 1 <= slots <= MAX_SLOTS:
        raise ConfigError(f"the slot count must be an integer in [1, {MAX_SLOTS}], not {slots!r}")
    return slots


def slot_of(group_id: str, slots: int) -> int:
    """The slot of ``group_id``: the CRC-32 of its UTF-8 bytes (IEEE 802.3,
    as zlib and every language's standard library compute it) modulo the
    slot count. A client may compute it too; the server never trusts one."""
    return zlib.crc32(group_id.encode("utf-8")) % validate_slot_count(slots)


def fair_share(slots: int, servers: int) -> int:
    """The most slots one of ``servers`` live servers should hold: enough
    that together they hold every slot."""
    return math.ceil(validate_slot_count(slots) / max(servers, 1))


def slots_to_seek(held: Iterable[int], vacant: Iterable[int], slots: int, servers: int) -> list[int]:
    """The vacant slots a server holding ``held`` should try to take now, in
    order: as many as keep it within its fair share. Every server asks for
    the lowest first; an election it loses costs one failed create."""
    room = fair_share(slots, servers) - len(set(held))
    return sorted(set(vacant))[:max(room, 0)]


def slot_to_release(held: Iterable[int], slots: int, servers: int) -> Optional[int]:
    """A slot to give up gracefully (its offsets flushed first) because this
    server holds more than its fair share, as after another server joined;
    None if it holds no more than that. The highest goes first, so that
    servers agree on what moves."""
    held = sorted(set(held))
    return held[-1] if len(held) > fair_share(slots, servers) else None


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
