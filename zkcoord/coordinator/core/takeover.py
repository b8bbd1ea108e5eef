"""A takeover: the groups a predecessor left in ZooKeeper, resumed and fenced.

Owns no state: one function that reads the persisted group states into the
group table. Each group's generation continues, and every partition its
members ran or were given stays fenced until those members come back
(proving their incarnation) or their lease has surely run out. A member
back may keep what it alone ran, as those fences say (membership.py).
"""

from __future__ import annotations

import logging
from typing import Callable, Mapping, Optional

from zkcoord import wire
from zkcoord.coordinator.config import CoordinatorConfig
from zkcoord.coordinator.core.groups import GroupTable
from zkcoord.coordinator.group import Group
from zkcoord.coordinator.lease import lease_end
from zkcoord.zk import layout

log = logging.getLogger(__name__)


def resume_groups(table: GroupTable, states: Mapping[str, Optional[layout.GroupState]], config: CoordinatorConfig,
                  now: float, schedule_round: Callable[[Group, float], None],
                  empty: Callable[[Group, float], None], read_owners: Callable[[Group], None]) -> None:
    """Resume the groups of ``states`` (None: a state node that could not be
    read): our predecessor sent nothing after its session ended, which was
    before now. A state that cannot be read (corrupt, or written by a newer
    version) says neither who runs what nor for how long: the whole group is
    fenced for the longest lease a member may hold. ``schedule_round(group,
    at)`` asks for a round once the fences allow it; ``empty(group, now)``
    starts the retention of a group without members; ``read_owners(group)``
    reads the owners recorded of a group whose members may come back
    keeping partitions (membership.py)."""
    longest_lease_ms = config.max_session_timeout_ms
    for name, state in states.items():
        group = table.named(name)
        group.state_exists = True
        if state is None:
            group.persisted_members = None  # rewritten by the group's next round
            until = lease_end(now, longest_lease_ms, config.lease_margin_ms)
            group.fences.fence_whole_group(until)
            schedule_round(group, until)
            log.warning("%s state unreadable: nobody is started on any of its partitions for %d ms (the "
                        "longest session timeout allowed), in case its members still run them",
                        group.describe(), longest_lease_ms)
            continue
        group.generation = state.generation
        group.strategy = state.strategy
        group.resumed = state
        group.persisted_members = frozenset(state.assignment) | frozenset(state.running)
        # A state without a lease (written by an older version) fences
        # for the longest any member may hold, never for the margin alone.
        lease_ms = state.lease_ms or longest_lease_ms
        # Held past the lease for the members, alive, coming back: one may
        # first wait out its registration at the predecessor (a paused
        # one still accepts connections; a member waits a session timeout
        # for an answer), then retry. Those that come back lift their own
        # fences; only a member that does not keeps the group waiting.
        until = lease_end(now, lease_ms, config.lease_margin_ms) + lease_ms / 1000.0 + wire.MEMBER_RETRY_MAX_S
        for holders in (state.assignment, state.running):
            for member_id, partitions in holders.items():
                group.fences.fence(member_id, partitions, until, state.proofs.get(member_id, ""))
        if group.persisted_members:
            # If none of them comes back, a round once their leases have
            # ended writes the group empty; one that comes back asks for
            # an earlier round.
            schedule_round(group, until)
            read_owners(group)
        else:
            empty(group, now)  # its retention runs from now: when it was last seen empty is not kept
        log.info("%s resumed; %d member(s) may still run partitions for up to %d ms",
                 group.describe(), len(group.fences.holders()), lease_ms)
