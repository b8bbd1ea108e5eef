"""Coordinator slots (coordinator/slots.py): a group's slot, a server's share,
its candidacy when takeovers fail, and a change of the slot count."""

from __future__ import annotations

import collections
import zlib

import pytest

from zkcoord.coordinator.election import FAILED_ROUND_S  # how often a server whose takeover failed tries again
from zkcoord.coordinator.slots import (FAILURES_TO_WITHDRAW, MAX_WITHDRAWAL_S, WITHDRAWAL_S, Candidacy, SlotCount,
                                       elections_of_an_earlier_count, fair_share, slot_share, slot_to_release,
                                       slots_at_rest, slots_to_seek)
from zkcoord.errors import ConfigError
from zkcoord.zk.layout import MAX_SLOTS, slot_of, validate_slot_count


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


# -- a slot whose takeovers fail on one server --------------------------------------------


def test_a_server_withdraws_from_a_slot_whose_takeovers_keep_failing_and_stands_again_later():
    candidacy = Candidacy()
    assert [candidacy.failed(3, now) for now in range(FAILURES_TO_WITHDRAW - 1)] == [None] * (FAILURES_TO_WITHDRAW - 1)
    assert candidacy.withdrawn(10.0) == frozenset() and candidacy.next_return(10.0) is None
    assert candidacy.failed(3, 10.0) == WITHDRAWAL_S  # the last of a run: withdrawn
    assert candidacy.withdrawn(10.0) == {3} and candidacy.next_return(12.0) == WITHDRAWAL_S - 2.0
    assert candidacy.withdrawn(10.0 + WITHDRAWAL_S) == frozenset()  # then it stands again
    # Failing on, each withdrawal lasts twice the last, up to the most.
    lengths = []
    for run in range(8):
        lengths.append([candidacy.failed(3, 100.0 * run) for _ in range(FAILURES_TO_WITHDRAW)][-1])
    assert lengths[:3] == [2 * WITHDRAWAL_S, 4 * WITHDRAWAL_S, 8 * WITHDRAWAL_S] and lengths[-1] == MAX_WITHDRAWAL_S
    # A takeover that succeeds forgets the slot's failures; other slots are apart.
    candidacy.succeeded(3)
    assert candidacy.withdrawn(700.0) == frozenset()
    assert [candidacy.failed(3, 800.0) for _ in range(FAILURES_TO_WITHDRAW)][-1] == WITHDRAWAL_S
    assert candidacy.failed(4, 800.0) is None and candidacy.withdrawn(800.0) == {3}


def test_a_server_at_its_share_seeks_a_slot_the_others_have_withdrawn_from_and_hands_another_over():
    # Two servers, two slots; the other server fails slot 1 every time.
    # Counted in slot 1's share, it kept this one, at its share, from seeking it.
    assert slots_to_seek({0}, {1}, 2, 2) == []
    assert slot_share(1, 2, 2, {1: 1}) == 2 and slot_share(0, 2, 2, {1: 1}) == 1
    assert slots_to_seek({0}, {1}, 2, 2, withdrawn={1: 1}) == [1]
    # Holding both, it hands over slot 0, which the other can take, and keeps slot 1.
    assert slot_to_release({0, 1}, 2, 2, withdrawn={1: 1}) == 0
    assert slot_to_release({1}, 2, 2, withdrawn={1: 1}) is None
    # The withdrawn server seeks what it has not withdrawn from.
    assert slots_to_seek(set(), {0, 1}, 2, 2, withdrawn={1: 1}, aside={1}) == [0]
    # Fewer servers standing for a slot: sought first.
    assert slots_to_seek(set(), {0, 1, 2, 3}, 4, 3, withdrawn={3: 2}) == [3, 0]


def settle(slots: int, servers: int, fails: set[tuple[int, int]], held: dict[int, set[int]], now: float,
           candidacies: dict[int, Candidacy], rounds: int) -> tuple[float, int]:
    """Election rounds as the servers run them, every FAILED_ROUND_S, until
    nothing changes for three rounds: each server seeks (with the
    withdrawals published at once), takes what it seeks unless it fails that
    slot (``fails``: (server, slot)), and hands over what it holds beyond a
    slot's share once nothing that can be taken is vacant. The time and the
    rounds it took to settle."""
    quiet = 0
    for done in range(1, rounds + 1):
        before = {s: set(h) for s, h in held.items()}
        for server in range(servers):
            withdrawn = collections.Counter(slot for c in candidacies.values() for slot in c.withdrawn(now))
            vacant = set(range(slots)) - set().union(*held.values())
            seek = slots_to_seek(held[server], vacant, slots, servers, withdrawn,
                                 aside=candidacies[server].withdrawn(now))
            failed = False
            for slot in seek:
                if (server, slot) in fails:
                    candidacies[server].failed(slot, now)
                    failed = True
                else:
                    held[server].add(slot)
                    candidacies[server].succeeded(slot)
            vacant = set(range(slots)) - set().union(*held.values())
            release = slot_to_release(held[server], slots, servers, withdrawn)
            if not failed and release is not None and not [s for s in vacant if withdrawn[s] < servers]:
                held[server].discard(release)
        now += FAILED_ROUND_S
        quiet = quiet + 1 if held == before else 0
        if quiet == 3:
            return now, done
    raise AssertionError(f"not settled after {rounds} rounds: {held}")


@pytest.mark.parametrize("slots, servers, fails, initial", [
    # Server 1, at its share, holds slot 0; slot 1 fell to server 0, which fails it.
    (2, 2, {(0, 1)}, {1: {0}}),
    # Two of three fail slot 3; the third holds its share.
    (4, 3, {(0, 3), (1, 3)}, {0: {2}, 2: {0, 1}}),
    # One server fails everything.
    (3, 3, {(0, 0), (0, 1), (0, 2)}, {}),
    # Slot 4 fails everywhere: the others are served all the same, and handed over.
    (5, 2, {(0, 4), (1, 4), (1, 0)}, {}),
])
def test_every_slot_some_server_can_take_is_served_within_the_bound_and_stays_so(slots, servers, fails, initial):
    held = {server: set(initial.get(server, ())) for server in range(servers)}
    candidacies = {server: Candidacy() for server in range(servers)}
    takeable = {slot for slot in range(slots) if any((s, slot) not in fails for s in range(servers))}
    now, rounds = settle(slots, servers, fails, held, 0.0, candidacies, rounds=50)
    assert set().union(*held.values()) == takeable
    assert not any((server, slot) in fails for server, h in held.items() for slot in h)
    # The bound: a run of failures, then the others' round and the handover.
    assert rounds - 3 <= FAILURES_TO_WITHDRAW + 3, rounds
    # The withdrawals end: the servers stand again, and nothing moves.
    settled = {s: set(h) for s, h in held.items()}
    settle(slots, servers, fails, held, now + MAX_WITHDRAWAL_S, candidacies, rounds=50)
    assert held == settled


def test_no_server_stands_while_an_election_won_under_an_earlier_count_remains():
    count = SlotCount(slots=3, zxid=100)
    assert elections_of_an_earlier_count(count, {}) == []
    assert elections_of_an_earlier_count(count, {0: 101, 2: 140}) == []  # won under this count
    # Slot 1 won before the count was set, slot 3 beyond it (the count was lowered): wait for both.
    assert elections_of_an_earlier_count(count, {0: 101, 1: 42, 3: 7}) == [1, 3]
    # Setting the node again, even to the same count, is a change: it moves the zxid.
    assert SlotCount(3, 100) != SlotCount(3, 180)


def test_slots_are_at_rest_when_every_slot_is_held_within_its_share():
    # Three slots, three servers: one each is at rest; two on one server is
    # a hand-over to come, a vacant slot a takeover to come.
    assert slots_at_rest({0: "1", 1: "2", 2: "3"}, {"1": (), "2": (), "3": ()})
    assert not slots_at_rest({0: "1", 1: "1", 2: "3"}, {"1": (), "2": (), "3": ()})
    assert not slots_at_rest({0: "1", 1: None, 2: "3"}, {"1": (), "2": (), "3": ()})
    # Two servers: one holds two of three slots, its share.
    assert slots_at_rest({0: "1", 1: "1", 2: "2"}, {"1": (), "2": ()})
    # A slot every server has withdrawn from waits vacant; the others are at rest.
    assert slots_at_rest({0: "1", 1: None, 2: "2"}, {"1": (1,), "2": (1,)})
    # Server 3 withdrawn from slot 2: the slot's share is 2, but slot 0's is
    # still 1, so server 1 holding both hands slot 0 over (to server 3).
    assert not slots_at_rest({0: "1", 1: "2", 2: "1"}, {"1": (), "2": (), "3": (2,)})
    assert slots_at_rest({0: "3", 1: "2", 2: "1"}, {"1": (), "2": (), "3": (2,)})
