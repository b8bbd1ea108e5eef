"""The classic group protocol's protocol names (JoinGroup's ``protocols``,
one per assignor a client offers): which zkcoord strategy stands in for
each, which name a client is answered with, and whether a client may join
the stock members its group has. Pure decisions, no I/O.

zkcoord's coordinator assigns every member, so a stock client's assignor
never runs (every client is a follower: classic.COORDINATOR_LEADS). Its
name says only how the client rebalances (eager or cooperative) and which
of zkcoord's strategies assigns as that assignor would:

- Kafka's names (range, roundrobin, sticky, cooperative-sticky) stand in
  for the strategy that assigns alike, and so do other clients' names for
  the same assignors (KafkaJS's RoundRobinAssigner is roundrobin);
- a name zkcoord does not know (a client's own assignor, another client's
  name for one) does not keep the client out: a client offering no name
  zkcoord knows is served as an eager client (it revokes everything before
  it joins again), assigned by whichever strategy its group agrees on (it
  registers with every strategy, sticky first), and the broker logs that
  once per member. Since its style is not known, what its JoinGroup says
  it still owns is believed (classic.ClassicMember.join): an eager client
  owns nothing then, and a cooperative one loses nothing it still fetches.

Kafka's rule stays: a client is refused (INCONSISTENT_GROUP_PROTOCOL) only
when it shares no protocol with the group's other stock members, two names
being one protocol when one strategy stands in for both. Thin members have
strategies, not names: the coordinator refuses a member that shares no
strategy with the whole group (wire.NoCommonStrategy).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Optional, Sequence

from zkcoord import wire

# Kafka's assignor names, by the client's rebalance style, with the zkcoord
# strategy that assigns the same way.
EAGER_PROTOCOLS = {"range": "range", "roundrobin": "roundrobin", "sticky": "sticky"}
COOPERATIVE_PROTOCOLS = {"cooperative-sticky": "sticky"}
# Other clients' names for Kafka's assignors: KafkaJS offers its one
# assignor, a round robin, as RoundRobinAssigner.
ALIASES = {"RoundRobinAssigner": "roundrobin"}
# The other way: the Kafka assignor that assigns like each zkcoord strategy
# (sticky: the cooperative one, which rebalances incrementally as zkcoord does).
ASSIGNOR_FOR_STRATEGY = {strategy: name for name, strategy in {**EAGER_PROTOCOLS, **COOPERATIVE_PROTOCOLS}.items()}
# What a client offering no known name registers with: every strategy, so
# that it shares one with any group; sticky first, the one that moves least
# (an eager client gives everything up at each rebalance, but gets back
# what it held, with the offsets it committed, instead of other partitions).
STAND_IN_STRATEGIES = ("sticky", *sorted(set(wire.STRATEGIES) - {"sticky"}))


class InconsistentProtocols(ValueError):
    """The client cannot join its group: it offers no protocol, or none its
    group's other stock members share (INCONSISTENT_GROUP_PROTOCOL)."""


def kafka_name(name: str) -> str:
    """Kafka's name for the assignor a client names ``name`` (itself when
    it is Kafka's, or not known)."""
    return ALIASES.get(name, name)


def strategy_of(name: str) -> Optional[str]:
    """The zkcoord strategy that stands in for assignor ``name``, or None when zkcoord does not know it."""
    kafka = kafka_name(name)
    return EAGER_PROTOCOLS.get(kafka) or COOPERATIVE_PROTOCOLS.get(kafka)


def is_cooperative(name: str) -> bool:
    """Whether a client answered with protocol ``name`` rebalances
    incrementally (says in its JoinGroup what it still owns). A name not
    known is taken as eager."""
    return kafka_name(name) in COOPERATIVE_PROTOCOLS


def is_known(name: str) -> bool:
    return strategy_of(name) is not None


@dataclass(frozen=True)
class ProtocolChoice:
    """What a client offering some protocols is served with: ``name``, one
    it offered, its JoinGroup and SyncGroup answers name (the client looks
    its assignor up by it); ``strategies``, what its member registers with,
    in its order of preference; ``stand_in``, that it offered no name zkcoord
    knows, so zkcoord chose (``why`` says so for the log)."""

    name: str
    strategies: tuple[str, ...]
    stand_in: bool = False

    @property
    def why(self) -> str:
        if not self.stand_in:
            return f"assignor {self.name!r} is served by zkcoord's {' or '.join(self.strategies)} strategy"
        return (f"none of its assignors is one zkcoord knows; it is served as an eager client under {self.name!r}, "
                f"assigned by its group's strategy (it registers with {', '.join(self.strategies)}, "
                f"preferring {self.strategies[0]})")


def choose_protocol(offered: Sequence[str]) -> ProtocolChoice:
    """How a client offering ``offered`` (in its order of preference) is
    served: by the first name zkcoord knows, registering with the strategies
    of every known name it offers; when it knows none, under the client's
    first name, with STAND_IN_STRATEGIES. Raises InconsistentProtocols when
    nothing is offered.

    >>> choose_protocol(["custom", "roundrobin", "range"])
    ProtocolChoice(name='roundrobin', strategies=('roundrobin', 'range'), stand_in=False)
    >>> choose_protocol(["RoundRobinAssigner"]).strategies
    ('roundrobin',)
    >>> choose_protocol(["custom"])
    ProtocolChoice(name='custom', strategies=('sticky', 'range', 'roundrobin'), stand_in=True)
    """
    if not offered:
        raise InconsistentProtocols("the client offers no protocol")
    known = [name for name in offered if is_known(name)]
    if not known:
        return ProtocolChoice(offered[0], STAND_IN_STRATEGIES, stand_in=True)
    strategies = tuple(dict.fromkeys(strategy_of(name) for name in known))
    return ProtocolChoice(known[0], strategies)


def protocol_of(name: str) -> str:
    """The protocol a name is, as far as who may join whom: the strategy
    that stands in for it, or the name itself when zkcoord knows none (a
    name zkcoord does not know is the same protocol only as itself).
    Every strategy is also Kafka's name for its assignor, so the two kinds never collide."""
    return strategy_of(name) or name


def check_shares_protocol(offered: Sequence[str], others: Iterable[Sequence[str]]) -> None:
    """Kafka's rule for a client joining a group: it must offer a protocol
    every other stock member of the group (``others``: what each offered)
    offers too. Raises InconsistentProtocols saying which protocols the
    group shares otherwise.

    >>> check_shares_protocol(["RoundRobinAssigner"], [["range", "roundrobin"]])  # one is the other's alias
    >>> check_shares_protocol(["custom"], [])  # the group's first stock member
    >>> check_shares_protocol(["custom"], [["range"]])  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    zkcoord.broker.groups.protocols.InconsistentProtocols: it offers ['custom'], ... one of ['range'])
    """
    shared: Optional[set[str]] = None
    for names in others:
        theirs = {protocol_of(name) for name in names}
        shared = theirs if shared is None else shared & theirs
    if shared is None or shared & {protocol_of(name) for name in offered}:
        return
    if not shared:
        raise InconsistentProtocols(f"it offers {list(offered)}, and the group's other stock members share no "
                                    f"protocol among themselves")
    raise InconsistentProtocols(f"it offers {list(offered)}, which the group's other stock members do not share "
                                f"(every one of them offers one of {sorted(shared)})")
