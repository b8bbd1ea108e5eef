"""Pings alone (core/pings.py): every third of a session timeout, and what their answers say."""

from zkcoord import wire
from zkcoord.coordinator.core.observed import EXPIRED_MAX_POLL

from tests.unit.parts_kit import T_MS, Kit, member

T = T_MS / 1000.0


def admit(kit: Kit, *members):
    for m in members:
        kit.groups.named(m.group).add_member(m)
        kit.requests.connected(m)
        kit.pings.add(m, kit.now)


def test_each_member_is_pinged_every_third_of_its_session_timeout_and_its_offsets_are_taken():
    kit = Kit()
    kit.build_pings()
    a = member("a", running=frozenset({("t", 0)}))
    admit(kit, a)
    kit.advance(T / 3 - 0.01)
    assert not kit.sent["a"]
    kit.advance(0.01)
    (ping, correlation_id), = kit.sent["a"]
    assert isinstance(ping, wire.PingRequest) and a.last_sent == kit.now
    kit.requests.answered(a, wire.PingResponse(last_poll_ms_ago=0, offsets=wire.offset_entries(
        {("t", 0): 4, ("t", 1): 9})), correlation_id, kit.now)  # t-1 is not its own: ignored
    assert kit.offsets.pending["g"] == {("t", 0): 4}
    kit.advance(3 * T, serve=("a",))
    assert len(kit.requests_to("a", wire.PingRequest)) == 10 and kit.metrics.counts["ping"] == 10


def test_a_member_alive_but_not_polling_past_its_max_poll_interval_is_told_and_dropped():
    kit = Kit()
    kit.build_pings()
    a = member("a", max_poll_interval_ms=1500)
    admit(kit, a)
    kit.advance(T / 3)
    (_, correlation_id), = kit.sent["a"]
    kit.requests.answered(a, wire.PingResponse(last_poll_ms_ago=1600), correlation_id, kit.now)
    kit.settle()
    told = kit.sent["a"][-1][0]
    assert told.error_code == wire.ErrorCode.MAX_POLL_INTERVAL_EXCEEDED
    assert kit.dropped == [("a", "has not polled for 1600 ms (max poll interval 1500 ms)")]
    assert kit.metrics.counts[EXPIRED_MAX_POLL] == 1


def test_nothing_is_pinged_while_suspended_so_the_leases_run_out():
    kit = Kit()
    kit.build_pings()
    admit(kit, member("a"))
    kit.office.session_suspended()
    kit.advance(2 * T)
    assert not kit.sent["a"]
