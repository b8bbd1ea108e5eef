"""Coordinator slots: which slot a group falls in, and which slots a server seeks (pure).

Seed 001's next step is every server coordinating a share of the groups. The
groups are spread over a fixed number of slots, kept in ZooKeeper; each slot
is elected and fenced on its own, as each partition of Kafka's offsets topic
has its own leader. A dead coordinator moves only its slots, and the others'
groups never pause.

This module decides; the server (coordinator/server.py) carries it out.
"""

from __future__ import annotations

import math
import zlib
from typing import Iterable, Optional

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
