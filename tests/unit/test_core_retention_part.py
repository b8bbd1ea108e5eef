"""Retention alone (core/retention.py): empty groups forgotten past their retention, with or without their offsets."""

from dataclasses import replace

import pytest

from zkcoord.coordinator import actions
from zkcoord.coordinator.core.retention import Retention
from zkcoord.zk import layout

from tests.unit.core_harness import CONFIG
from tests.unit.parts_kit import Kit

RETENTION_S = 5.0


def kit_with_retention(**config) -> tuple[Kit, Retention]:
    kit = Kit(replace(CONFIG, group_retention_ms=int(RETENTION_S * 1000), **config))
    membership = kit.build_membership()
    retention = Retention(kit.config, kit.office, kit.out, kit.groups, kit.offsets, kit.rounds,
                          membership.registering_in)
    kit.routes["forget"] = lambda key, now: retention.due(key[1], now)
    return kit, retention


def test_an_empty_group_without_offsets_is_forgotten_once_its_retention_has_passed():
    kit, retention = kit_with_retention()
    group = kit.groups.named("g")
    kit.zk.states["g"] = layout.GroupState(3, "range", {})
    retention.empty(group, kit.now)
    kit.advance(RETENTION_S - 0.1)
    assert kit.groups.get("g") is group
    kit.advance(0.1)
    assert kit.groups.get("g") is None and "g" not in kit.zk.states


@pytest.mark.parametrize("expire_offsets", [False, True])
def test_a_group_with_committed_offsets_is_kept_unless_they_expire(expire_offsets):
    kit, retention = kit_with_retention(expire_offsets=expire_offsets)
    group = kit.groups.named("g")
    kit.zk.offsets["g"][("t", 0)] = 42
    retention.empty(group, kit.now)
    kit.advance(RETENTION_S)
    assert (kit.groups.get("g") is None) == expire_offsets
    assert (not kit.zk.offsets.get("g")) == expire_offsets
    if not expire_offsets:
        assert kit.offsets.committed["g"] == {("t", 0): 42}


def test_a_group_still_fenced_is_looked_at_again_later_and_forgotten_once_free():
    kit, retention = kit_with_retention()
    group = kit.groups.named("g")
    group.fences.fence("gone", [("t", 0)], until=RETENTION_S + 1.0)
    retention.empty(group, kit.now)
    kit.advance(RETENTION_S)
    assert kit.groups.get("g") is group and kit.timers[("forget", "g")] == 2 * RETENTION_S
    kit.advance(RETENTION_S)
    assert kit.groups.get("g") is None
    assert any(isinstance(w, actions.ForgetGroup) for w in kit.zk.writes)
