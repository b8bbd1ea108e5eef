"""The coordinator's decisions, without I/O (seed 001 sections 3 to 7), as parts.

:class:`CoordinatorCore` (coordinator_core.py) composes the parts and routes
each event to the one that owns it; every part owns its own state, writes
its actions into the core's outbox (outbox.py, actions.py), and reads no
clock, socket or ZooKeeper, so each is driven by hand in the unit tests
(tests/unit/core_harness.py, and a test module per part).

From the bottom up (a part uses only those above it in this list; the few
ways back up, dropping a member or emptying a group, are callbacks the core
hands in):

- office.py: the coordinator's state (ACTIVE, SUSPENDED, DEPOSED) and the
  proof of its office, without which nothing is sent, started or written;
- groups.py: the groups by name and the topics' partition counts;
- describe.py: what a member says it is, checked, and a group's members as held now, for operators;
- known_log_ends.py: the partitions' log ends as their leaders last said;
- requests.py: the members on each connection, what each was asked and by when;
- offsets.py: offsets reported, pending and committed, and their writes;
- pings.py: the ping schedule, and what a ping's answer says;
- history.py: each group's last rounds, why and how each went, in a bounded ring;
- rounds.py: rebalance rounds, their retries, the forced resets they carry;
- membership.py: registration, admission, leaving, dropping and fencing members;
- retention.py: forgetting groups empty past their retention;
- resets.py: an operator's offset reset, from request to answer;
- takeover.py: the groups a predecessor left, resumed and fenced;
- lag.py: the consumer lag, and asking the leaders for it now and then;
- observed.py: what the core counts for its watchers, and its census.

The rules the parts keep together (docs/DESIGN.md):
- every request carries the coordinator epoch and the group generation;
- every request to a member is dated (``last_sent``) before it leaves; a
  member dropped without acknowledging that it stopped leaves what it may run
  fenced until its lease has surely ended, on every path (lease.py);
- within a round, every Stop is acknowledged and the offsets it reports are
  written before any Start goes out, and a round ends only once every
  request it sent has been answered or its member dropped: nothing of a
  round runs on into the next;
- while the ZooKeeper connection is suspended nothing is sent, started or
  written; answers are still taken;
- a request goes out only while the coordinator's own office is proven: within
  two thirds of the ZooKeeper session timeout of the start of a fenced round
  trip that succeeded (lease.py's ``office_end``), so none leaves after a
  successor may have been elected;
- the state (ACTIVE, SUSPENDED, DEPOSED) moves only through ``Office.become``.
"""

from zkcoord.coordinator.core.coordinator_core import CoordinatorCore
from zkcoord.coordinator.core.observed import (
    EXPIRED_MAX_POLL, EXPIRED_NO_ANSWER, EXPIRED_STATIC, EXPIRY_REASONS, MEMBER_STATES, NO_METRICS, Census,
    CoreMetrics, RebalanceReport,
)
from zkcoord.coordinator.core.office import CoordinatorState
from zkcoord.coordinator.core.offsets import Suspended
from zkcoord.coordinator.core.pings import PING_TIMER
from zkcoord.coordinator.core.requests import ANSWERS_TIMER, PING_TICK_S

__all__ = [
    "ANSWERS_TIMER", "EXPIRED_MAX_POLL", "EXPIRED_NO_ANSWER", "EXPIRED_STATIC", "EXPIRY_REASONS", "MEMBER_STATES",
    "NO_METRICS", "PING_TICK_S", "PING_TIMER", "Census", "CoordinatorCore", "CoordinatorState", "CoreMetrics",
    "RebalanceReport", "Suspended",
]
