"""The office alone (core/office.py): the coordinator's state and the proof of its office, on a manual clock."""

import pytest
from kazoo.exceptions import ConnectionLoss

from zkcoord.coordinator.core.office import CoordinatorState, Office
from zkcoord.coordinator.core.outbox import Outbox
from zkcoord.coordinator.group import IllegalTransition
from zkcoord.coordinator.lease import office_end

from tests.unit.parts_kit import Kit
from tests.unit.core_harness import ZK_SESSION_MS

OFFICE = office_end(0.0, ZK_SESSION_MS)  # how long a round trip begun at 0 proves the office
RENEWAL = ZK_SESSION_MS / 4000.0


def test_it_starts_active_only_if_a_round_trip_proved_the_office():
    proven = Kit()
    assert proven.office.active
    unproven = Office(1, ZK_SESSION_MS, Outbox(), on_active=lambda now: None)
    unproven.start(0.0)
    assert unproven.state is CoordinatorState.SUSPENDED


def fail_round_trips(kit: Kit) -> None:
    """The office round trips in flight end in a lost connection."""
    for token in sorted(kit.pending):
        kit.pending.pop(token)
        kit.out.ended(token)(None, ConnectionLoss(), kit.now)


def test_renewed_round_trips_keep_it_active_and_a_silent_zookeeper_suspends_it_when_the_office_ends():
    kit = Kit()
    kit.advance(10 * OFFICE)
    assert kit.office.active and kit.office.until > kit.now
    kit.prove_office = False  # ZooKeeper stops answering while the connection looks fine
    silent_from = kit.now
    kit.advance(OFFICE + 1.0)
    kit.office.check(kit.now)
    assert kit.office.state is CoordinatorState.SUSPENDED
    assert kit.office.until <= silent_from + OFFICE


def test_after_a_lapse_only_a_second_round_trip_begun_a_renewal_after_the_first_brings_it_back():
    kit = Kit()
    kit.prove_office = False
    kit.advance(OFFICE + 0.1)
    kit.office.check(kit.now)
    assert kit.office.state is CoordinatorState.SUSPENDED
    fail_round_trips(kit)  # those begun before the lapse; the one wanted meanwhile begins now
    kit.prove_office = True
    kit.settle()  # the first round trip after the lapse
    assert kit.office.state is CoordinatorState.SUSPENDED and ("second-proof",) in kit.timers
    kit.advance(RENEWAL / 2)  # a renewal begun too soon after the first does not count
    assert kit.office.state is CoordinatorState.SUSPENDED and not kit.activated
    kit.advance(RENEWAL)
    assert kit.office.active and kit.activated


def test_a_smaller_session_timeout_granted_on_reconnection_shortens_the_office_at_once():
    kit = Kit()
    before = kit.office.until
    kit.office.session_suspended()
    assert kit.office.state is CoordinatorState.SUSPENDED
    kit.office.session_resumed(kit.now, granted_ms=ZK_SESSION_MS // 2)
    assert kit.office.until == office_end(0.0, ZK_SESSION_MS // 2) < before


def test_a_pause_voids_every_round_trip_begun_before_it_was_seen():
    kit = Kit()
    kit.prove_office = False
    kit.advance(0.4)
    kit.office.prove(kit.now)  # a round trip in flight while the machine pauses
    kit.advance(0.1)
    kit.office.machine_paused(30.0, kit.now)
    assert kit.office.state is CoordinatorState.SUSPENDED
    kit.prove_office = True
    kit.settle()  # that round trip answered: it proves nothing
    assert kit.office.state is CoordinatorState.SUSPENDED
    kit.advance(2 * RENEWAL)  # two begun after the pause do
    assert kit.office.active


def test_illegal_moves_raise_and_a_deposed_office_asks_nothing_more():
    kit = Kit()
    kit.office.become(CoordinatorState.DEPOSED)
    with pytest.raises(IllegalTransition):
        kit.office.become(CoordinatorState.ACTIVE)
    kit.office.prove(kit.now)
    assert not kit.settle()
