"""The classic protocol's protocol names (broker/groups/protocols.py): which
zkcoord strategy stands in for each name a client offers, and Kafka's rule
on who may join whom, over known names, aliases and names zkcoord does not know."""

from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from zkcoord import wire
from zkcoord.broker.groups import protocols
from zkcoord.broker.groups.protocols import InconsistentProtocols, check_shares_protocol, choose_protocol

KNOWN = ["range", "roundrobin", "sticky", "cooperative-sticky", "RoundRobinAssigner"]
NAMES = st.sampled_from(KNOWN + ["custom", "other", "rack-affinity"])


@pytest.mark.parametrize("offered, chosen, strategies", [
    (["range"], "range", ("range",)),
    (["cooperative-sticky", "range"], "cooperative-sticky", ("sticky", "range")),
    (["custom", "roundrobin"], "roundrobin", ("roundrobin",)),
    (["sticky", "cooperative-sticky"], "sticky", ("sticky",)),
    (["RoundRobinAssigner"], "RoundRobinAssigner", ("roundrobin",)),  # KafkaJS's only assignor
    (["roundrobin", "RoundRobinAssigner"], "roundrobin", ("roundrobin",)),
])
def test_the_first_assignor_zkcoord_stands_in_for_is_chosen(offered, chosen, strategies):
    choice = choose_protocol(offered)
    assert (choice.name, choice.strategies, choice.stand_in) == (chosen, strategies, False)


def test_a_client_offering_only_names_zkcoord_does_not_know_is_served_under_its_first_with_every_strategy():
    choice = choose_protocol(["mine", "theirs"])
    assert choice.name == "mine" and choice.stand_in
    assert choice.strategies[0] == "sticky" and sorted(choice.strategies) == sorted(wire.STRATEGIES)
    assert "eager" in choice.why and "'mine'" in choice.why  # what the broker logs


def test_a_client_offering_nothing_is_refused():
    with pytest.raises(InconsistentProtocols, match="no protocol"):
        choose_protocol([])


def test_only_the_cooperative_name_rebalances_incrementally():
    assert [n for n in KNOWN + ["custom"] if protocols.is_cooperative(n)] == ["cooperative-sticky"]


def test_the_strategies_name_their_kafka_assignor_the_cooperative_one_for_sticky():
    assert protocols.ASSIGNOR_FOR_STRATEGY == {"range": "range", "roundrobin": "roundrobin",
                                               "sticky": "cooperative-sticky"}


@pytest.mark.parametrize("offered, others", [
    (["custom"], []),                                        # the first stock member
    (["RoundRobinAssigner"], [["range", "roundrobin"]]),     # an alias shares its Kafka name's protocol
    (["cooperative-sticky"], [["sticky", "range"]]),         # one strategy stands in for both
    (["custom"], [["custom", "range"], ["custom"]]),         # a name not known shares with itself
    (["range", "custom"], [["custom"], ["range", "custom"]]),
])
def test_a_client_sharing_a_protocol_with_every_other_stock_member_joins(offered, others):
    check_shares_protocol(offered, others)


@pytest.mark.parametrize("offered, others, says", [
    (["custom"], [["range"]], r"offers \['custom'\].*one of \['range'\]"),
    (["RoundRobinAssigner"], [["range", "cooperative-sticky"]], r"one of \['range', 'sticky'\]"),
    (["custom"], [["custom"], ["other"]], "share no protocol among themselves"),
    (["range"], [["range"], ["roundrobin"]], "share no protocol among themselves"),
])
def test_a_client_sharing_no_protocol_with_the_group_is_refused_saying_why(offered, others, says):
    with pytest.raises(InconsistentProtocols, match=says):
        check_shares_protocol(offered, others)


@given(st.lists(NAMES, min_size=1, max_size=4), st.lists(st.lists(NAMES, min_size=1, max_size=4), max_size=4))
def test_kafkas_rule_holds_with_names_one_strategy_stands_in_for_taken_as_one(offered, others):
    """Admitted exactly when one name offered is (or one strategy stands in
    for it and for) a name each other stock member offers."""
    def same(a, b):
        return a == b or protocols.strategy_of(a) is not None and protocols.strategy_of(a) == protocols.strategy_of(b)

    expected = any(all(any(same(mine, theirs) for theirs in names) for names in others) for mine in offered)
    try:
        check_shares_protocol(offered, others)
    except InconsistentProtocols:
        assert not expected
    else:
        assert expected
