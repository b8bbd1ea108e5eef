"""The drill's fault kinds and its schedule: which faults, in what order, held
how long. Pure: the same seed, count, kinds and timing give the same schedule.

A kind says what it breaks, whether it needs a cluster the drill started
itself (faults on servers and ZooKeeper), whether it breaks Apache Kafka
(a drill over Kafka only) or needs the embedded brokers (never over Kafka),
and whether it is a *planned* change (a join, a clean leave, partitions
added), after which not one record may be delivered twice.
"""

from __future__ import annotations

import dataclasses
import random
from typing import Iterable, Optional, Sequence

from zkcoord.errors import ConfigError


@dataclasses.dataclass(frozen=True)
class Kind:
    name: str
    help: str
    own_cluster: bool = True   # needs servers or ZooKeeper the drill started
    planned: bool = False
    netns: bool = False        # needs network namespaces (root, ip, iptables)
    kafka: bool = False        # breaks Apache Kafka's brokers: a drill over Kafka only
    # Why it cannot run over Apache Kafka (None: it can).
    not_over_kafka: Optional[str] = None
    # Ends by undoing itself cleanly on odd picks (then a planned change) and by kill -9 on even ones.
    clean_on_odd_picks: bool = False


STOCK_MEMBERS_NEED_OUR_BROKERS = ("stock members join through the embedded brokers' group APIs: over Apache "
                                  "Kafka they need a group gateway")

KINDS: dict[str, Kind] = {k.name: k for k in (
    Kind("coordinator-kill", "kill -9 the group's coordinator; restart it once the group is whole"),
    Kind("standby-kill", "kill -9 a server that does not coordinate the group (the coordinator of other slots, "
         "and its broker); restart it after a while"),
    Kind("consumer-kill", "kill -9 a consumer; restart it once the group is whole", own_cluster=False),
    Kind("consumer-pause-long", "SIGSTOP a consumer past its session timeout, then SIGCONT", own_cluster=False),
    Kind("consumer-pause-short", "SIGSTOP a consumer for a third of its session timeout", own_cluster=False),
    Kind("coordinator-pause-long", "SIGSTOP the coordinator past its ZooKeeper session timeout"),
    Kind("coordinator-pause-short", "SIGSTOP the coordinator for a third of its ZooKeeper session timeout"),
    Kind("coordinator-zk-expiry", "cut the coordinator off from ZooKeeper until its session expires, then heal"),
    Kind("coordinator-zk-blip", "cut the coordinator off from ZooKeeper for a third of its session, then heal"),
    Kind("zk-node-kill", "kill -9 one ZooKeeper node; restart it after a while"),
    Kind("zk-quorum-loss", "kill -9 two of three ZooKeeper nodes; restart them after a while"),
    Kind("consumer-partition", "cut a consumer off the network (its own namespace) past its session timeout, "
         "then heal", netns=True),
    Kind("coordinator-members-partition", "cut the coordinator off from every member (not from ZooKeeper) past "
         "their session timeout, then heal", netns=True),
    Kind("member-to-coordinator-loss", "drop a member's packets to the coordinator on its open connection only "
         "(the coordinator's still reach it) past its session timeout, then heal", netns=True),
    Kind("coordinator-to-member-loss", "drop the coordinator's packets to a member on their open connection only "
         "(the member's still arrive) past its session timeout, then heal", netns=True),
    Kind("stock-member-pause-long", "SIGSTOP a stock member past its session timeout, then SIGCONT",
         own_cluster=False, not_over_kafka=STOCK_MEMBERS_NEED_OUR_BROKERS),
    Kind("stock-member-group-cut", "cut a stock member off from its group's broker only (it still reaches the "
         "partition leaders) past its session timeout, then heal", netns=True,
         not_over_kafka=STOCK_MEMBERS_NEED_OUR_BROKERS),
    Kind("slow-member", "make a member's next Start or Stop outlast the rebalance timeout, then make it rebalance",
         own_cluster=False),
    Kind("member-join", "start one more consumer", own_cluster=False, planned=True),
    Kind("member-leave", "stop a consumer cleanly (SIGTERM)", own_cluster=False, planned=True),
    Kind("add-partitions", "add two partitions to the topic", own_cluster=False, planned=True),
    Kind("big-group", "many more thin members (--big-group-members, from one process) join the group for two "
         "session timeouts, then all crash (kill -9) or, on odd picks, all leave cleanly (planned)",
         own_cluster=False, clean_on_odd_picks=True),
    # Over Apache Kafka only (--kafka), after every other kind, so that
    # drawing from the others gives the schedules it always gave.
    Kind("kafka-leader-kill", "kill -9 the Kafka broker leading one of the topic's partitions; restart it (same "
         "log directory) past its session, once its leaderships moved and the group read on from the new leaders",
         kafka=True),
    Kind("kafka-broker-pause", "SIGSTOP the Kafka broker leading one of the topic's partitions; SIGCONT past its "
         "session, once the group read on from the new leaders", kafka=True),
    Kind("kafka-controller-kill", "kill -9 Kafka's active controller (ZooKeeper mode: the broker registered at "
         "/controller; KRaft: the leader of the controllers' quorum); restart it past its session, once the "
         "group read on from the new leaders", kafka=True),
)}


@dataclasses.dataclass(frozen=True)
class Timing:
    """The timeouts the drill's cluster runs with, from which fault lengths follow."""

    consumer_session_s: float
    zk_session_s: float
    rebalance_timeout_s: float
    kafka_session_s: float = 0.0  # how long a silent Kafka broker stays in its cluster (a drill over Kafka)


@dataclasses.dataclass(frozen=True)
class PlannedFault:
    """One fault of the schedule. ``pick`` chooses the target among the
    candidates alive when the fault comes (``pick % len(candidates)``), so the
    choice is fixed by the seed yet always valid; ``hold_s`` is how long the
    fault lasts before the drill restores; ``settle_s`` the quiet time after."""

    index: int
    kind: str
    pick: int
    hold_s: float
    settle_s: float

    @property
    def clean(self) -> bool:
        """A fault of a kind that ends either way ends cleanly (its pick is odd)."""
        return KINDS[self.kind].clean_on_odd_picks and self.pick % 2 == 1

    @property
    def planned(self) -> bool:
        return KINDS[self.kind].planned or self.clean


def parse_kinds(text: str, over_kafka: bool = False) -> list[str]:
    """``a,b,c`` to known kind names, or ``all`` to every kind the data plane
    can take (over Apache Kafka or not); a ConfigError names any unknown one."""
    if text.strip() == "all":
        return [name for name in KINDS if data_plane_refusal(name, over_kafka) is None]
    return known_kinds(name.strip() for name in text.split(",") if name.strip())


def data_plane_refusal(kind: str, over_kafka: bool) -> Optional[str]:
    """Why ``kind`` cannot run on this data plane (None: it can)."""
    if over_kafka:
        return KINDS[kind].not_over_kafka
    return "it breaks Apache Kafka's brokers: a drill over Kafka only (--kafka)" if KINDS[kind].kafka else None


def left_out_over_kafka() -> dict[str, str]:
    """The kinds a drill over Apache Kafka leaves out of its schedule, and why."""
    return {kind.name: kind.not_over_kafka for kind in KINDS.values() if kind.not_over_kafka}


def known_kinds(names: Iterable[str]) -> list[str]:
    """``names`` without repeats, once each is known to be a kind; a ConfigError names any unknown one."""
    names = list(dict.fromkeys(names))
    unknown = [name for name in names if name not in KINDS]
    if unknown:
        raise ConfigError(f"unknown fault kind(s) {', '.join(unknown)}; known: {', '.join(KINDS)}")
    if not names:
        raise ConfigError("no fault kind given")
    return names


def hold_time(kind: str, timing: Timing, rng: random.Random) -> float:
    """How long a fault of ``kind`` lasts: past a timeout by a margin, or well
    below it, as the kind says; otherwise a few seconds."""
    if kind in ("consumer-pause-long", "consumer-partition", "coordinator-members-partition",
                "member-to-coordinator-loss", "coordinator-to-member-loss", "stock-member-pause-long",
                "stock-member-group-cut"):
        return timing.consumer_session_s + rng.uniform(1.0, 2.5)
    if kind == "big-group":  # long enough for the crowd to join, be given partitions and deliver
        return 2 * timing.consumer_session_s + rng.uniform(1.0, 2.5)
    if kind == "consumer-pause-short":
        return timing.consumer_session_s / 3
    if kind in ("coordinator-pause-long", "coordinator-zk-expiry"):
        return timing.zk_session_s + rng.uniform(1.0, 2.5)
    if kind in ("coordinator-pause-short", "coordinator-zk-blip"):
        return timing.zk_session_s / 3
    if KINDS[kind].kafka:  # past the broker's session, so that its leaderships (or the controller's office) move
        return timing.kafka_session_s + rng.uniform(1.0, 2.5)
    if kind in ("standby-kill", "zk-node-kill", "zk-quorum-loss"):
        return rng.uniform(2.0, 5.0)
    return 0.0


def plan(seed: int, count: int, kinds: Sequence[str], timing: Timing) -> list[PlannedFault]:
    if count <= 0:
        raise ConfigError(f"the number of faults must be positive, not {count}")
    if not kinds:
        raise ConfigError("no fault kind to draw from")
    rng = random.Random(seed)
    schedule = []
    for index in range(1, count + 1):
        kind = rng.choice(list(kinds))
        schedule.append(PlannedFault(index=index, kind=kind, pick=rng.randrange(1 << 30),
                                     hold_s=round(hold_time(kind, timing, rng), 3),
                                     settle_s=round(rng.uniform(0.5, 1.5), 3)))
    return schedule
