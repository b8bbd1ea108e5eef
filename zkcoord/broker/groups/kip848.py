"""A stock Kafka client in a zkcoord group, as KIP-848's consumer group
protocol (ConsumerGroupHeartbeat) sees it: the decisions, without I/O.

KIP-848 moved assignment to the server, which is what the zkcoord coordinator
does anyway, so the mapping is direct. Every heartbeat may carry the
partitions the client owns; every answer may carry its target assignment
and a new member epoch. A partition the coordinator stops leaves the target
at once and is released (its Stop answered) once the client reports that it
no longer owns it. A partition sent in a target counts as held from then on,
whatever the client reports before it has taken it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from kafka import errors as kafka_errors

from zkcoord import wire

from zkcoord.broker.groups.member import NONE, UNKNOWN_MEMBER_ID, BridgedMember, Phase

FENCED_MEMBER_EPOCH = kafka_errors.FencedMemberEpochError.errno
STALE_MEMBER_EPOCH = kafka_errors.StaleMemberEpochError.errno
UNSUPPORTED_ASSIGNOR = kafka_errors.UnsupportedAssignorError.errno
UNRELEASED_INSTANCE_ID = kafka_errors.UnreleasedInstanceIdError.errno
# MemberEpoch values a client sends: joining (or rejoining after losing
# everything), leaving, and a static member leaving for a while.
JOIN_EPOCH = 0
LEAVE_EPOCH = -1
STATIC_LEAVE_EPOCH = -2


# Kafka's own server-side assignors (its group.consumer.assignors), by the
# zkcoord strategy that assigns alike: a client may name either.
KAFKA_SERVER_ASSIGNORS = {"uniform": "sticky", "range": "range"}


class UnsupportedAssignor(ValueError):
    """A client named a server assignor zkcoord has no strategy for."""


def strategies_for(server_assignor: Optional[str]) -> tuple[str, ...]:
    """The zkcoord strategies a member registers with when its client names
    ``server_assignor`` (group.remote.assignor): the one it names, by
    zkcoord's name or Kafka's; when it names none, any, sticky first, so that
    it always shares one with the group. A name neither knows raises
    UnsupportedAssignor, as Kafka's coordinator refuses it (rather than
    assigning in a way the client did not ask for).

    >>> strategies_for("uniform"), strategies_for("roundrobin"), strategies_for(None)
    (('sticky',), ('roundrobin',), ('sticky', 'range', 'roundrobin'))
    """
    if not server_assignor:
        return ("sticky", *sorted(set(wire.STRATEGIES) - {"sticky"}))
    strategy = server_assignor if server_assignor in wire.STRATEGIES else KAFKA_SERVER_ASSIGNORS.get(server_assignor)
    if strategy is None:
        raise UnsupportedAssignor(f"server assignor {server_assignor!r} is not supported; supported: "
                                  f"{', '.join(sorted({*wire.STRATEGIES, *KAFKA_SERVER_ASSIGNORS}))}")
    return (strategy,)


def keeps_instance_id(holder: BridgedMember) -> bool:
    """Whether ``holder``, the live member under a static instance id, keeps
    it from a KIP-848 client joining under it with another member id. Kafka
    lets the newcomer replace a classic holder, but a KIP-848 holder only
    once it has left (epoch -2 or -1, which drops it here): until then the
    newcomer gets UNRELEASED_INSTANCE_ID."""
    return isinstance(holder, ConsumerMember) and not holder.gone


@dataclass
class ConsumerMember(BridgedMember):
    # The target last sent to the client (None: nothing sent yet).
    delivered: Optional[frozenset] = None

    stale_error = STALE_MEMBER_EPOCH
    client_kind = wire.CONSUMER_PROTOCOL  # what its registration tells the coordinator it is

    def heartbeat(self, epoch: int, owned: Optional[frozenset], now: float,
                  sendable=lambda tp: True) -> tuple[int, Optional[frozenset]]:
        """A heartbeat with the client's member epoch and, if it says, the
        partitions it owns. Returns the error and the assignment to send
        (None: unchanged). The answer's epoch is ``generation``.
        ``sendable(tp)``: whether a partition can be named to the client yet
        (its topic has an id); the others wait in the target until it can."""
        if self.gone:
            return UNKNOWN_MEMBER_ID, None
        self.last_heard = now
        if epoch == JOIN_EPOCH:
            # Joining, or back after being fenced: a client at epoch 0 owns nothing.
            self.holding = frozenset()
            self.delivered = None
        elif epoch not in (self.generation, self.generation - 1):
            # Neither the epoch we sent last nor the one before (an answer may
            # have been lost): the client must drop everything and join again.
            return FENCED_MEMBER_EPOCH, None
        elif owned is not None:
            # It can only give partitions up this way: what it was sent and
            # still has a right to stays held, taken yet or not.
            self.holding = (self.holding & frozenset(owned)) | ((self.delivered or frozenset()) & self.target())
        self._released()
        if not self.revoking:
            self.rejoin_asked_at = None
        self.phase = Phase.STABLE
        target = frozenset(tp for tp in self.target() if sendable(tp))
        if target != self.delivered or epoch != self.generation:
            if target != self.delivered:
                self.generation += 1
            self.delivered = target
            self.holding |= target
            return NONE, target
        return NONE, None

    def needs_rejoin(self) -> bool:
        return self.phase is Phase.STABLE and (bool(self.revoking) or self.delivered != self.target())
