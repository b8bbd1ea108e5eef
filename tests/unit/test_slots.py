"""Coordinator slots (coordinator/slots.py): a group's slot, a server's share,
and a change of the slot count."""

from __future__ import annotations

import collections
import zlib

import pytest

from zkcoord.coordinator.slots import (MAX_SLOTS, SlotCount, elections_of_an_earlier_count, fair_share, slot_of,
                                       slot_to_release, slots_to_seek, validate_slot_count)
from zkcoord.errors import ConfigError


def test_a_groups_slot_is_the_crc32_of_its_utf8_bytes_modulo_the_count():
    # Vectors a client in another language can check itself against.
    assert zlib.crc32(b"orders") == 0xE52FFDEE
    assert slot_of("orders", 16) == 0xE52FFDEE % 16 == 14
    assert slot_of("orders", 1) == 0
    assert slot_of("grüße", 7) == zlib.crc32("grüße".encode("utf-8")) % 7


def test_groups_spread_evenly_over_the_slots():
    counts = collections.Counter(slot_of(f"group-{i}", 16) for i in range(16_000))
    assert set(counts) == set(range(16))
    assert max(counts.values()) < 1.15 * 1000 and min(counts.values()) > 0.85 * 1000


@pytest.mark.parametrize("count", [0, -1, MAX_SLOTS + 1, 1.5, True, "4"])
def test_a_bad_slot_count_is_a_config_error(count):
    with pytest.raises(ConfigError):
        validate_slot_count(count)


def test_servers_seeking_their_share_together_hold_every_slot():
    for slots in (1, 3, 16, 17):
        for servers in (1, 2, 3, 5):
            held: dict[int, set[int]] = {s: set() for s in range(servers)}
            for _ in range(slots):  # rounds: each server in turn takes what it seeks, if still vacant
                for server in range(servers):
                    vacant = set(range(slots)) - set().union(*held.values())
                    for slot in slots_to_seek(held[server], vacant, slots, servers)[:1]:
                        held[server].add(slot)
            assert set().union(*held.values()) == set(range(slots))
            assert all(len(h) <= fair_share(slots, servers) for h in held.values())


def test_a_server_over_its_share_releases_its_highest_slot_and_one_within_it_keeps_all():
    assert fair_share(16, 3) == 6
    assert slot_to_release({0, 1, 2, 3, 4, 5, 6, 7}, 16, 3) == 7
    assert slot_to_release({0, 1, 2, 3, 4, 5}, 16, 3) is None
    assert slots_to_seek({0, 1, 2, 3, 4, 5}, {9, 10}, 16, 3) == []
    assert slots_to_seek({0}, {12, 9, 10}, 16, 4) == [9, 10, 12]


def test_no_server_stands_while_an_election_won_under_an_earlier_count_remains():
    count = SlotCount(slots=3, zxid=100)
    assert elections_of_an_earlier_count(count, {}) == []
    assert elections_of_an_earlier_count(count, {0: 101, 2: 140}) == []  # won under this count
    # Slot 1 won before the count was set, slot 3 beyond it (the count was lowered): wait for both.
    assert elections_of_an_earlier_count(count, {0: 101, 1: 42, 3: 7}) == [1, 3]
    # Setting the node again, even to the same count, is a change: it moves the zxid.
    assert SlotCount(3, 100) != SlotCount(3, 180)
