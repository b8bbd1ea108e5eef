"""A group's members as its coordinator describes them (core/describe.py, on the parts below it):
what each registration said it is, and the live state only memory holds, on a manual clock."""

import pytest

from zkcoord import wire
from zkcoord.coordinator.core.describe import NOT_CONNECTED, Describe
from zkcoord.records import TopicPartition
from zkcoord.security.principal import ANONYMOUS

from tests.unit.parts_kit import T_MS, Kit


def kit_with_describe() -> tuple[Kit, Describe]:
    kit = Kit()
    kit.build_membership()
    return kit, Describe(kit.office, kit.out, kit.groups)


def register(kit: Kit, conn: str, **said) -> None:
    request = wire.RegisterConsumerRequest(group_id="g", consumer_id=conn, topics=("t",), session_timeout_ms=T_MS,
                                           **said)
    kit.membership.register(conn, request, 1, kit.now, f"10.0.0.{len(kit.sent) + 1}", "", ANONYMOUS)
    kit.settle()


def describe(kit: Kit, part: Describe, conn: str, group: str = "g") -> wire.DescribeGroupResponse:
    writes = len(kit.zk.writes)
    part.describe_group(conn, wire.DescribeGroupRequest(group_id=group), 9, kit.now)
    kit.settle()
    (answer, correlation_id), = kit.sent[conn]
    assert correlation_id == 9 and conn in kit.closed  # answered, then closed
    assert len(kit.zk.writes) == writes  # a look writes nothing
    wire.encode(answer, correlation_id)  # as it goes out
    return answer


def test_each_member_is_described_as_it_registered_with_its_lease_from_the_last_request_sent():
    kit, part = kit_with_describe()
    register(kit, "thin-1", client_kind=wire.THIN, client_id="app")
    register(kit, "rd-1", client_kind=wire.CLASSIC_COOPERATIVE, client_id="rdkafka")
    register(kit, "old-1")  # a member of an older version says nothing of itself
    kit.advance(2.0, serve=("thin-1", "rd-1", "old-1"))
    answer = describe(kit, part, "op-1")
    assert answer.error_code == wire.ErrorCode.NONE
    assert (answer.phase, answer.generation, answer.coordinator_epoch) == ("stable", 1, kit.office.epoch)
    by_id = {m.member_id: m for m in answer.members}
    assert [m.member_id for m in answer.members] == sorted(by_id)
    assert (by_id["thin-1"].client_kind, by_id["thin-1"].client_id) == (wire.THIN, "app")
    assert (by_id["rd-1"].client_kind, by_id["rd-1"].client_id) == (wire.CLASSIC_COOPERATIVE, "rdkafka")
    assert (by_id["old-1"].client_kind, by_id["old-1"].client_id) == ("", "")
    assert by_id["thin-1"].host == "10.0.0.1" and by_id["thin-1"].session_timeout_ms == T_MS
    partitions = [p for m in answer.members for p in m.partitions]
    assert sorted(partitions) == [("t", p) for p in range(4)]
    assert all(type(p) is TopicPartition for p in partitions)  # as the wire writes them
    for m in answer.members:
        member = kit.groups.get("g").members[m.member_id]
        assert m.lease_remaining_ms == round((member.last_sent + T_MS / 1000 - kit.now) * 1000)
        assert 0 < m.lease_remaining_ms <= T_MS and m.outstanding == ""


def test_a_member_that_stops_answering_shows_its_ping_outstanding_and_its_lease_running_out():
    kit, part = kit_with_describe()
    register(kit, "a", client_kind=wire.THIN)
    kit.advance(2.0, serve=("a",))
    kit.advance(1.5)  # a ping goes out and is not answered
    member = kit.groups.get("g").members["a"]
    (described,) = describe(kit, part, "op-1").members
    assert described.outstanding == "PingRequest"
    assert described.lease_remaining_ms == round((member.last_sent + T_MS / 1000 - kit.now) * 1000) < T_MS
    kit.advance(T_MS / 1000)  # its lease has run out: dropped, and described no more
    assert describe(kit, part, "op-2").members == ()


def test_a_static_member_away_is_described_without_a_lease():
    kit, part = kit_with_describe()
    register(kit, "s", client_kind=wire.CONSUMER_PROTOCOL, client_id="java", is_static=True)
    kit.advance(2.0, serve=("s",))
    kit.membership.connection_closed("s", kit.now)
    kit.settle()
    (described,) = describe(kit, part, "op-1").members
    assert described.is_static and described.lease_remaining_ms == NOT_CONNECTED


def test_a_group_not_held_here_has_no_members_and_a_bad_name_is_refused():
    kit, part = kit_with_describe()
    answer = describe(kit, part, "op-1", group="nobody")
    assert answer.error_code == wire.ErrorCode.NONE and answer.members == () and answer.phase == "empty"
    assert describe(kit, part, "op-2", group="a/b").error_code == wire.ErrorCode.INVALID_REQUEST


@pytest.mark.parametrize("said,why", [
    (dict(client_kind="mainframe"), "client kind 'mainframe'"),
    (dict(client_id="x" * (wire.MAX_CLIENT_ID_BYTES + 1)), "client id of 256 bytes"),
])
def test_a_registration_that_says_something_unknown_of_itself_is_refused_and_joins_nothing(said, why):
    kit, _ = kit_with_describe()
    register(kit, "a", **said)
    (answer, _), = kit.sent["a"]
    assert answer.error_code == wire.ErrorCode.INVALID_REGISTRATION and why in answer.error_message
    assert kit.groups.get("g") is None or not kit.groups.get("g").members
