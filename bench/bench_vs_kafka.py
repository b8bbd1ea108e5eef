"""Side by side with Kafka: the same groups coordinated by Kafka 4's own group
coordinator and by zkcoord, over the same Kafka cluster, in one run.

The data plane is one KRaft cluster of Kafka 4 (three combined brokers and
controllers, ``__consumer_offsets`` replicated three times, the topics
replicated three times), started through zkcoord.testing.kafka. Only who
coordinates the group differs:

- **Kafka**: the group coordinator inside the brokers, with the classic
  protocol (eager ``range``, and ``cooperative-sticky``) and with the consumer
  protocol (KIP-848, the ``uniform`` server assignor); the members are
  zkcoord.testing.kafka_members, greenlets sending what the Java client sends
  (JoinGroup/SyncGroup/Heartbeat, or ConsumerGroupHeartbeat); and, for the
  formations of up to 100 members and the workloads after them, also the
  reference Java client itself (``org.apache.kafka:kafka-clients``' own
  KafkaConsumer, run by zkcoord.testing.java_members' driver, a hundred to a
  JVM, the leader's assignor Kafka's own RangeAssignor or
  CooperativeStickyAssignor), in rows of their own labelled ``Java client``
  beside the load generator's, so that a reader sees how closely the load
  generator behaves like the client it stands in for (at 100 members, in
  bench/RESULTS.md: it is optimistic, the Java client 1.1 to 3 times as
  long on formation, one join and member failure, its first polls slower
  and its heartbeats out of phase, 7.5 times on KIP-848's formation where
  its members were fenced; on coordinator failure either way);
- **zkcoord**: two ``zkcoord server --no-broker --kafka-bootstrap`` processes
  (one coordinating, one standing by) on a three-node ZooKeeper ensemble,
  learning the topics from Kafka's Metadata; the members are the production
  GroupMembership clients, greenlets too, offering ``sticky``, under the
  servers' incremental handoff.

**Consumed** means the same on both sides: a partition is consumed while
exactly one live member has been told it holds it (the zkcoord member's
Start; the Kafka member's SyncGroup or heartbeat assignment; the Java
client's ``onPartitionsAssigned``, until its ``onPartitionsRevoked`` or
``onPartitionsLost``, as dated by the member driver) and its leader
broker is alive, so that the member's next Fetch would be served. A group is
**whole** when every partition is consumed and every member holds at least
one. Every member's listener reports to one :class:`Ledger` per group, which
dates each change, so both systems are timed by the same code (the Java
client's changes at the time its JVM wrote them, read back every 50 ms; its
workloads timed from the go that releases its members, created and
subscribed beforehand: neither a JVM's start nor the reading is timed). The
members fetch and commit nothing: "records delivered twice" is reported as the
partitions that changed owner during the failure (each such move re-delivers
what its old owner read since its last commit; a partition that stays put
re-delivers nothing).

Workloads, each on every system:

1. formation: N members started at once on a topic of P partitions; from the
   first start until the group is whole;
2. one join into a whole group of N: until whole again, and the
   partition-seconds no member was consuming;
3. coordinator failure: kill -9 of the group's coordinator (Kafka: the broker
   leading the group's ``__consumer_offsets`` partition, which also leads a
   third of the topic's partitions; zkcoord: the coordinating server) while
   the group runs: until whole again (a partition whose leader died is not
   consumed until it has a new one), and the partitions that moved;
4. member failure: kill -9 of one member (its connection closes, no leave):
   until its partitions are consumed again;
5. capacity: GROUPS groups of MEMBERS members on one coordinating process, at
   the heartbeat below: that process's CPU over a window, less its CPU idle.

Settings are the same on both sides where the protocols allow it, and
printed: a 10 s member session, a heartbeat (Kafka) or ping (zkcoord) every
3.33 s, a 1 s initial rebalance delay, a coordinator gone after 4 s of
silence (Kafka: a broker's registration with the controllers; zkcoord: its
ZooKeeper session).

It prints one line per workload and system, then, last, exactly:

    vs kafka: formation Ax; one join Bx; coordinator failure Cx; member failure Dx; capacity Ex

each figure the best Kafka protocol's time (or CPU) divided by zkcoord's, at
the largest size run: above 1, zkcoord is ahead. "Best Kafka" is the best
row of any protocol whatever its members, load generator or Java client: at
the default sizes the largest is 1,000 members, which only the load generator
runs; with ``--formations 100x1000`` the Java rows take part. Before it, each
Java row is printed again beside the load generator's of the same protocol
and workload (``java client beside the load generator: ...``). A wait that
ran out counts its deadline (the line says ``>``). Every phase has a
deadline, and every process started is stopped on exit, on error too.

    python bench/bench_vs_kafka.py            # the sizes of issue 34 (35 minutes on two loaded cores)
    python bench/bench_vs_kafka.py --quick    # a smoke run of a few members (tests/kafka/test_bench_vs_kafka.py)
    python bench/bench_vs_kafka.py --formations 100x1000 --no-capacity   # 100 members, Java client and load generator
"""

from gevent import monkey

monkey.patch_all()

import argparse  # noqa: E402
import dataclasses  # noqa: E402
import os  # noqa: E402
import resource  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Callable, Optional, Sequence  # noqa: E402

import gevent  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import ZK_TICK_MS, raise_fd_limit, run_in_scratch  # noqa: E402
from zkcoord.member.config import MemberConfig  # noqa: E402
from zkcoord.member.membership import GroupMembership  # noqa: E402
from zkcoord.testing import LocalCluster, start_ensemble, wait_until  # noqa: E402
from zkcoord.testing.java_members import JavaMembers  # noqa: E402
from zkcoord.testing.kafka import KRAFT_MODE, KafkaCluster, KafkaSettings  # noqa: E402
from zkcoord.testing.kafka_members import (  # noqa: E402
    CONSUMER_PROTOCOL, COOPERATIVE_STICKY, EAGER_RANGE, KafkaMemberSettings, find_coordinators, new_member,
)
from zkcoord.testing.process import cpu_seconds  # noqa: E402
from zkcoord.testing.waiting import WaitTimeout  # noqa: E402

# The Java client's rebalance timeout is its max.poll.interval.ms, 300 s by
# default; it also bounds how long Kafka stretches a new group's initial
# delay while members keep joining, and a JoinGroup waits that long and 5 s.
# (At 30 s, a thousand eager members on the loaded machine had their
# JoinGroups time out on the client's side, and every retry stretched the round again.)
REBALANCE_TIMEOUT_MS = 300_000
INITIAL_REBALANCE_DELAY_MS = 1000  # zkcoord's default; Kafka's group.initial.rebalance.delay.ms set to it
COORDINATOR_SESSION_MS = 4000  # Kafka: broker.session.timeout.ms; zkcoord: the servers' ZooKeeper session
ZKCOORD_STRATEGY = "sticky"
KAFKA_METADATA_INTERVAL_MS = 2000
LEADER_POLL_S = 0.2
KAFKA_SYSTEMS = (EAGER_RANGE, COOPERATIVE_STICKY, CONSUMER_PROTOCOL)
ZKCOORD = "zkcoord"
SYSTEM_NAMES = {EAGER_RANGE: "kafka classic eager range", COOPERATIVE_STICKY: "kafka classic cooperative-sticky",
                CONSUMER_PROTOCOL: "kafka consumer protocol (KIP-848)", ZKCOORD: "zkcoord"}
# The reference Java client's rows: formations of up to this many members (a
# JVM per hundred KafkaConsumers is what this machine holds beside the cluster);
# the load generator's rows cover the rest.
JAVA_MAX_MEMBERS = 100
JAVA_ASSIGNORS = {EAGER_RANGE: "org.apache.kafka.clients.consumer.RangeAssignor",
                  COOPERATIVE_STICKY: "org.apache.kafka.clients.consumer.CooperativeStickyAssignor"}


def java_name(protocol: str) -> str:
    """A Java client row's system: the load generator's name, so labelled."""
    return f"{SYSTEM_NAMES[protocol]}, Java client"


@dataclasses.dataclass(frozen=True)
class Sizes:
    formations: tuple[tuple[int, int], ...]  # (members, partitions), run in order; the last is the one kept
    capacity_groups: int
    capacity_members: int  # per group
    capacity_partitions: int  # per group's topic
    capacity_ramp_s: float
    capacity_window_s: float
    deadline_s: float  # of each wait for a group to be whole
    kafka_heap_mb: int
    session_timeout_ms: int = 10_000  # every member's
    # The Java client's rows include the coordinator failure (a broker restart, awaited, per protocol).
    java_coordinator_failure: bool = True
    # Kafka's JVMs with the optimising compiler, as a broker runs in
    # production (a smoke run only checks that every path works: it starts
    # them on the client compiler, twice as fast).
    kafka_full_jit: bool = True
    quiet_s: float = 2.0  # no ownership change for this long: the group has stopped moving

    @property
    def heartbeat_ms(self) -> int:
        """zkcoord pings every third of the session; Kafka's members heartbeat as often."""
        return self.session_timeout_ms // 3

    def kafka_properties(self) -> dict[str, str]:
        return {
            "group.initial.rebalance.delay.ms": str(INITIAL_REBALANCE_DELAY_MS),
            "group.min.session.timeout.ms": "1000",
            "group.consumer.session.timeout.ms": str(self.session_timeout_ms),
            "group.consumer.min.session.timeout.ms": "1000",
            "group.consumer.heartbeat.interval.ms": str(self.heartbeat_ms),
            "group.consumer.min.heartbeat.interval.ms": "500",
        }


FULL = Sizes(formations=((100, 1000), (1000, 10_000)), capacity_groups=50, capacity_members=100,
             capacity_partitions=100, capacity_ramp_s=30.0, capacity_window_s=30.0, deadline_s=120.0,
             kafka_heap_mb=1024)
QUICK = Sizes(formations=((4, 12),), capacity_groups=2, capacity_members=5, capacity_partitions=10,
              capacity_ramp_s=0.5, capacity_window_s=2.0, deadline_s=30.0, kafka_heap_mb=384,
              session_timeout_ms=3000, quiet_s=0.5, java_coordinator_failure=False, kafka_full_jit=False)


# -- what "consumed" means, once for every system ----------------------------------------------------------

class Ledger:
    """Who holds which partition of one group's topic, dated: the listener
    of every member of the group reports here (see the module's docstring)."""

    def __init__(self, partitions: int):
        self.partitions = partitions
        self.owners = [0] * partitions
        self.last_owner: list[Optional[int]] = [None] * partitions
        self.single = 0  # partitions held by exactly one member
        self.unowned = partitions
        self.members = 0  # live members
        self.holding = 0  # live members holding something
        self.dead_leaders: set[int] = set()  # partitions whose leader is down (the data plane)
        self.whole_since: Optional[float] = None
        self.last_change = time.monotonic()
        self.paused_s = 0.0  # partition-seconds not consumed since mark()
        self.moves = 0  # partitions started by another member than their last owner, since mark()
        self._integrated_to = time.monotonic()
        self._next_id = 0

    def member(self, at: Optional[float] = None) -> "MemberView":
        self._next_id += 1
        self.members += 1
        self._update(at)
        return MemberView(self, self._next_id)

    def mark(self) -> float:
        now = time.monotonic()
        self._integrate(now)
        self.paused_s = 0.0
        self.moves = 0
        return now

    @property
    def consumed(self) -> int:
        return self.single - sum(1 for p in self.dead_leaders if self.owners[p] == 1)

    @property
    def whole(self) -> bool:
        return self.single == self.partitions and not self.dead_leaders and self.holding == self.members

    def describe(self) -> str:
        return (f"{self.holding} of {self.members} members hold partitions; {self.single} of {self.partitions} "
                f"partitions held once, {self.unowned} by nobody, {len(self.dead_leaders)} without a leader")

    def _integrate(self, now: float) -> None:
        self.paused_s += (self.partitions - self.consumed) * (now - self._integrated_to)
        self._integrated_to = now

    def _at(self, at: Optional[float]) -> float:
        """A change's time: now, or when a member reported it (``at``, on
        time.monotonic()), never before what is already integrated."""
        return time.monotonic() if at is None else max(at, self._integrated_to)

    def _update(self, at: Optional[float] = None) -> None:
        now = self._at(at)
        self.last_change = now
        if self.whole:
            if self.whole_since is None:
                self.whole_since = now
        else:
            self.whole_since = None

    def change(self, view: "MemberView", gained: set[int], lost: set[int], at: Optional[float] = None) -> None:
        at = self._at(at)
        self._integrate(at)
        had = bool(view.held)
        for p in lost:
            self.owners[p] -= 1
            self._count(p, self.owners[p] + 1)
        for p in gained:
            self.owners[p] += 1
            self._count(p, self.owners[p] - 1)
            if self.last_owner[p] not in (None, view.id):
                self.moves += 1
            self.last_owner[p] = view.id
        view.held = (view.held - lost) | gained
        if view.alive:
            self.holding += bool(view.held) - had
        self._update(at)

    def _count(self, p: int, before: int) -> None:
        after = self.owners[p]
        self.single += (after == 1) - (before == 1)
        self.unowned += (after == 0) - (before == 0)

    def died(self, view: "MemberView") -> None:
        """A member killed: it consumes nothing from now on, and is no longer waited for."""
        self.change(view, set(), set(view.held))
        view.alive = False
        self.members -= 1
        self._update()

    def leaders_down(self, partitions: set[int]) -> None:
        self._integrate(time.monotonic())
        self.dead_leaders = set(partitions)
        self._update()


class MemberView:
    """One member's listener (the interface GroupMembership calls, and the
    Kafka members too): Start carries everything held, Stop what is let go."""

    def __init__(self, ledger: Ledger, member_id: int):
        self.ledger = ledger
        self.id = member_id
        self.held: frozenset = frozenset()
        self.alive = True

    def on_start(self, partitions):
        if self.alive:
            now_held = frozenset(p for _, p in partitions)
            self.ledger.change(self, set(now_held - self.held), set(self.held - now_held))

    def on_stop(self, partitions):
        if self.alive:
            self.ledger.change(self, set(), set(self.held & frozenset(p for _, p in partitions)))
        return {}

    def offsets(self):
        return None

    def last_poll_ms_ago(self):
        return 0


@dataclasses.dataclass
class Outcome:
    seconds: float
    finished: bool  # False: the deadline ran out; ``seconds`` is that deadline

    def __str__(self) -> str:
        return f"{self.seconds:.2f} s" if self.finished else f"> {self.seconds:.0f} s (not whole by the deadline)"


def until_whole(ledger: Ledger, since: float, sizes: Sizes, observe_s: float = 0.0) -> Outcome:
    """Wait until the group is whole and has been quiet for ``sizes.quiet_s`` (and at
    least ``observe_s`` has passed since ``since``): the time from ``since``
    until it last became whole."""
    def settled() -> bool:
        now = time.monotonic()
        return ledger.whole and now - ledger.last_change >= sizes.quiet_s and now - since >= observe_s

    try:
        wait_until(settled, sizes.deadline_s, interval=0.05, message="the group to be whole")
    except WaitTimeout:  # said in the outcome; the bench goes on
        print(f"  not whole: {ledger.describe()}", flush=True)
        return Outcome(sizes.deadline_s, False)
    return Outcome(max(0.0, ledger.whole_since - since), True)


# -- the systems --------------------------------------------------------------------------------------

class Group:
    """A running group's members, as a system started them."""

    def __init__(self, name: str, topic: str, ledger: Ledger):
        self.name = name
        self.topic = topic
        self.ledger = ledger
        self.members: list = []  # (handle, view)


class System:
    """What the workloads ask of a system: ``add_members``, ``coordinator_pid``,
    ``kill_coordinator``, ``settings``, and ``end`` (one member gone at once, no leave)."""

    name = ""
    max_members: Optional[int] = None  # larger formations are not run on this system
    kills_coordinator = True  # runs the coordinator failure

    @staticmethod
    def end(member) -> None:
        raise NotImplementedError

    def member_cpu(self, group: "Group", bench_cpu_before: float) -> str:
        """What the members' process (here the bench's own) used since ``bench_cpu_before``."""
        return f"member process CPU {process_cpu_s() - bench_cpu_before:.1f} s"

    def close(self) -> None:
        pass

    def kill_member(self, group: Group, index: int) -> None:
        member, view = group.members.pop(index)
        self.end(member)
        group.ledger.died(view)

    def stop(self, group: Group) -> None:
        for member, _ in group.members:
            self.end(member)
        group.members.clear()


class KafkaSystem(System):
    """Kafka's coordinator with one protocol; its members are kafka_members greenlets."""

    def __init__(self, kafka: KafkaCluster, protocol: str, sizes: Sizes):
        self.kafka = kafka
        self.protocol = protocol
        self.sizes = sizes
        self.name = SYSTEM_NAMES[protocol]
        self._serial = 0

    def group_name(self, label: str) -> str:
        return f"kafka-{self.protocol}-{label}"

    def add_members(self, group: Group, count: int, partitions: int) -> None:
        settings = KafkaMemberSettings(group.name, group.topic, partitions, self.protocol,
                                       self.sizes.session_timeout_ms, self.sizes.heartbeat_ms, REBALANCE_TIMEOUT_MS)
        bootstrap = self.kafka.bootstrap.split(",")
        for _ in range(count):
            self._serial += 1
            view = group.ledger.member()
            member = new_member(bootstrap, settings, view, f"bench-{self._serial}").start()
            group.members.append((member, view))

    @staticmethod
    def end(member) -> None:
        member.kill()

    def coordinator_pid(self, groups: Sequence[str]) -> int:
        found = find_coordinators(self.kafka.bootstrap.split(","), groups)
        nodes = {found[g][0] for g in groups}
        if len(nodes) != 1:
            raise RuntimeError(f"the groups are coordinated by brokers {sorted(nodes)}, not one")
        return self.kafka.brokers[nodes.pop()].pid

    def kill_coordinator(self, group: Group) -> Callable[[], None]:
        """kill -9 of the broker coordinating the group; the partitions it led are
        marked not consumed until they have a live leader again. Returns the restart."""
        node = find_coordinators(self.kafka.bootstrap.split(","), [group.name])[group.name][0]
        self.kafka.brokers[node].kill()
        led = {p for p, info in self._partitions(group.topic).items() if info.leader == node}
        group.ledger.leaders_down(led)

        def watch_leaders():
            while group.ledger.dead_leaders:
                gevent.sleep(LEADER_POLL_S)
                try:
                    partitions = self._partitions(group.topic)
                except Exception:  # no broker answered this time: ask again
                    continue
                group.ledger.leaders_down({p for p in group.ledger.dead_leaders
                                           if partitions[p].leader in (node, -1)})

        gevent.spawn(watch_leaders)
        return lambda: self.kafka.restart(node, timeout=900)  # recovers every log it led: minutes

    def _partitions(self, topic: str) -> dict:
        return self.kafka.metadata(topic, timeout=5.0).topics[topic].partitions

    def settings(self) -> str:
        if self.protocol == CONSUMER_PROTOCOL:
            return (f"group.consumer.session.timeout.ms={self.sizes.session_timeout_ms} "
                    f"group.consumer.heartbeat.interval.ms={self.sizes.heartbeat_ms} assignor uniform (server)")
        return (f"session.timeout.ms={self.sizes.session_timeout_ms} heartbeat.interval.ms={self.sizes.heartbeat_ms} "
                f"rebalance.timeout.ms (max.poll.interval.ms)={REBALANCE_TIMEOUT_MS} group.initial.rebalance.delay.ms="
                f"{INITIAL_REBALANCE_DELAY_MS} assignor {self.protocol} (leader member)")


class JavaDriver:
    """One member driver's JVM in a group, its members created and waiting
    for the go: its JavaMembers, the ledger's view of each member (made at
    the go), and how far its events have been read."""

    def __init__(self, members: JavaMembers, ledger: Ledger):
        self.members = members
        self.ledger = ledger
        self.created: list[int] = []  # members created and subscribed
        self.views: dict[int, MemberView] = {}
        self.read = 0
        self.went: Optional[float] = None  # time.monotonic() of the go: its members' start

    def pump(self) -> None:
        """Tell the ledger what the members reported since the last pump, each at its reported time."""
        events = self.members.events()
        fresh, self.read = events[self.read:], len(events)
        for event in fresh:
            kind = event["event"]
            at = event["ts"] / 1000.0 - (time.time() - time.monotonic())
            if kind == "started":
                self.created.append(event["member"])
            elif kind == "go":
                self.views.update((member, self.ledger.member(at)) for member in self.created)
                self.went = at
            elif kind in ("assigned", "revoked", "lost"):
                view = self.views[event["member"]]
                if not view.alive:
                    continue
                partitions = {p for _, p in event["partitions"]}
                if kind == "assigned":
                    self.ledger.change(view, partitions - view.held, set(), at)
                else:
                    self.ledger.change(view, set(), partitions & view.held, at)
            elif kind == "error":
                print(f"  java member {event.get('member')}: {event['phase']}: {event['class']}: "
                      f"{event['message']}", flush=True)


class JavaKafkaSystem(KafkaSystem):
    """Kafka's coordinator with one protocol; its members are the reference
    Java KafkaConsumer, run by the member driver (zkcoord.testing.java_members).

    A member to be killed alone has a JVM of its own: of ``count`` members
    added at once, the first runs alone (the one the member failure kills)
    and the others share one JVM. Every member is created and subscribed
    first; then the go releases their first polls, JVM after JVM, and a
    workload's clock starts at the first go (so neither a JVM's start nor the
    creation of a hundred consumers is timed, and the members join together,
    as the load generator's do). The driver dates the go and every
    assignment change (its rebalance listener's calls); a greenlet reads them
    every PUMP_S and tells the ledger, at the times the driver wrote, so the
    reading's lag is not timed either."""

    PUMP_S = 0.05
    max_members = JAVA_MAX_MEMBERS

    def __init__(self, kafka: KafkaCluster, protocol: str, sizes: Sizes, work: Path):
        super().__init__(kafka, protocol, sizes)
        self.name = java_name(protocol)
        self.work = work / "java" / protocol
        self.kills_coordinator = sizes.java_coordinator_failure
        self.drivers: dict[str, list[JavaDriver]] = {}  # by group name
        self._pumping = gevent.spawn(self._pump_forever)

    def member_counts(self, count: int) -> list[int]:
        return [1, count - 1] if count > 1 else [count]

    def properties(self, group: str) -> dict[str, str]:
        common = {"bootstrap.servers": self.kafka.bootstrap, "group.id": group}
        if self.protocol == CONSUMER_PROTOCOL:  # the session and heartbeat are the broker's (Sizes.kafka_properties)
            return {**common, "group.protocol": "consumer"}
        return {**common, "group.protocol": "classic", "partition.assignment.strategy": JAVA_ASSIGNORS[self.protocol],
                "session.timeout.ms": str(self.sizes.session_timeout_ms),
                "heartbeat.interval.ms": str(self.sizes.heartbeat_ms),
                "max.poll.interval.ms": str(REBALANCE_TIMEOUT_MS)}

    def add_members(self, group: Group, count: int, partitions: int) -> float:
        drivers = self.drivers.setdefault(group.name, [])
        started = []
        for members in self.member_counts(count):
            self._serial += 1
            driver = JavaDriver(JavaMembers(self.work / f"{group.name}-{self._serial}", [group.topic],
                                            self.properties(group.name), members=members, records="ranges",
                                            name=f"java-members-{self._serial}", start_on_go=True), group.ledger)
            driver.members.start(wait=False)
            started.append(driver)
        for driver in started:
            driver.members.wait_ready(self.sizes.deadline_s)
        for driver in started:  # all at once, then read back
            driver.members.go()
        for driver in started:
            driver.members.wait_for(lambda: driver.members.events("go"), self.sizes.deadline_s, "the go")
            driver.pump()  # the go, and so every member's view, is in
            drivers.append(driver)  # pumped from now on
            group.members.extend((driver, view) for _, view in sorted(driver.views.items()))
        return min(driver.went for driver in started)

    def _pump_forever(self) -> None:
        while True:
            for drivers in list(self.drivers.values()):
                for driver in drivers:
                    driver.pump()
            gevent.sleep(self.PUMP_S)

    def kill_member(self, group: Group, index: int) -> None:
        driver, view = group.members[index]
        if driver.members.members != 1:
            raise RuntimeError("a Java member killed alone must run in a JVM of its own")
        driver.pump()  # what it reported before it died
        super().kill_member(group, index)

    @staticmethod
    def end(driver: JavaDriver) -> None:
        driver.members.kill()

    def stop(self, group: Group) -> None:
        for driver in self.drivers.pop(group.name, []):
            driver.members.kill()
        group.members.clear()

    def member_cpu(self, group: Group, bench_cpu_before: float) -> str:
        """The group's JVMs' CPU since they started (the consumers' creation too)."""
        cpu = sum(cpu_seconds(d.members.process.pid) for d in self.drivers.get(group.name, ())
                  if d.members.process.alive)
        return f"member JVMs CPU {cpu:.1f} s (from their start)"

    def close(self) -> None:
        self._pumping.kill()
        for drivers in self.drivers.values():
            for driver in drivers:
                driver.members.kill()
        self.drivers.clear()

    def group_name(self, label: str) -> str:
        return f"kafka-{self.protocol}-java-{label}"

    def settings(self) -> str:
        shown = {k: v for k, v in self.properties("").items() if k not in ("bootstrap.servers", "group.id")}
        assignor = "uniform (server)" if self.protocol == CONSUMER_PROTOCOL else f"{self.protocol} (leader member)"
        return (f"KafkaConsumer {' '.join(f'{k}={v}' for k, v in shown.items())}, assignor {assignor}; "
                f"the broker's settings as for the load generator's members")


class ZkcoordSystem(System):
    """Two zkcoord servers without brokers beside the Kafka cluster, on a ZooKeeper ensemble."""

    def __init__(self, kafka: KafkaCluster, work: Path, sizes: Sizes):
        self.name = SYSTEM_NAMES[ZKCOORD]
        self.sizes = sizes
        self.ensemble = start_ensemble(work / "zk", nodes=3, tick_ms=ZK_TICK_MS, timeout=120)
        self.cluster = LocalCluster(self.ensemble.connect_string, work / "zkcoord", (
            "--no-broker", "--kafka-bootstrap", kafka.bootstrap,
            "--kafka-metadata-interval-ms", str(KAFKA_METADATA_INTERVAL_MS),
            "--zk-session-timeout-ms", str(COORDINATOR_SESSION_MS),
            "--initial-rebalance-delay-ms", str(INITIAL_REBALANCE_DELAY_MS),
            # Every member runs on this host: one address, past the per-address cap meant for the network.
            "--max-connections-per-address", "1000000"))
        for server_id in (1, 2):
            self.cluster.add_server(server_id)
        self.cluster.wait_for_coordinator(60)

    def group_name(self, label: str) -> str:
        return f"zkcoord-{label}"

    def add_members(self, group: Group, count: int, partitions: int) -> None:
        config = MemberConfig(group=group.name, topics=(group.topic,),
                              session_timeout_ms=self.sizes.session_timeout_ms,
                              assignment_strategies=(ZKCOORD_STRATEGY,))
        for _ in range(count):
            view = group.ledger.member()
            membership = GroupMembership(self.cluster.bootstrap, config, view)
            membership.start()
            group.members.append((membership, view))

    @staticmethod
    def end(membership) -> None:
        membership.abandon()  # the connection closes at once, as the kernel closes a killed process's

    def coordinator_pid(self, groups: Sequence[str]) -> int:
        return self.cluster.servers[self.cluster.coordinator_id()].pid

    def kill_coordinator(self, group: Group) -> Callable[[], None]:
        server = self.cluster.servers[self.cluster.coordinator_id()]
        server.kill()
        return lambda: server.start(timeout=60)

    def settings(self) -> str:
        return (f"session_timeout_ms={self.sizes.session_timeout_ms} (ping every {self.sizes.heartbeat_ms} ms) "
                f"initial rebalance delay {INITIAL_REBALANCE_DELAY_MS} ms, rebalance delay 100 ms, "
                f"ZooKeeper session {COORDINATOR_SESSION_MS} ms, incremental handoff, strategy {ZKCOORD_STRATEGY}")

    def close(self) -> None:
        self.cluster.close()
        self.ensemble.stop()


# -- the workloads ------------------------------------------------------------------------------------

def process_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


class Bench:
    """The workloads, run on one system at a time, and their figures."""

    def __init__(self, kafka: KafkaCluster, sizes: Sizes):
        self.kafka = kafka
        self.sizes = sizes
        # results[workload][system name]: its time, or for capacity its share of a core
        self.results: dict[str, dict[str, Outcome]] = {}
        self.restarts: list[gevent.Greenlet] = []  # of the coordinators killed

    def say(self, workload: str, system, outcome: Outcome, detail: str = "") -> None:
        """One workload's line for one system (and its result kept for the summary)."""
        self.results.setdefault(workload, {})[system.name] = outcome
        print(f"{workload}: {system.name}: {outcome}{'; ' + detail if detail else ''}", flush=True)

    def topic(self, members: int, partitions: int) -> str:
        return f"vs-{members}x{partitions}"

    def formation_and_failures(self, system) -> None:
        formations = [(m, p) for m, p in self.sizes.formations if system.max_members is None or m <= system.max_members]
        last = len(formations) - 1
        for i, (members, partitions) in enumerate(formations):
            label = f"{members}x{partitions}"
            group = Group(system.group_name(label), self.topic(members, partitions), Ledger(partitions))
            cpu = process_cpu_s()
            started = group.ledger.mark()
            # A system whose members report their own start (the Java client's JVMs) times from it.
            started = system.add_members(group, members, partitions) or started
            outcome = until_whole(group.ledger, started, self.sizes)
            self.say(f"formation N={members} P={partitions}", system, outcome, system.member_cpu(group, cpu))
            if i == last and outcome.finished:
                self.failures(system, group, members, partitions)
            system.stop(group)

    def failures(self, system, group: Group, members: int, partitions: int) -> None:
        where = f"N={members} P={partitions}"
        joined = group.ledger.mark()
        joined = system.add_members(group, 1, partitions) or joined
        outcome = until_whole(group.ledger, joined, self.sizes)
        self.say(f"one join {where}", system, outcome,
                 f"{group.ledger.paused_s:.1f} partition-seconds not consumed")

        killed = group.ledger.mark()
        system.kill_member(group, 0)
        self.say(f"member failure {where}", system, until_whole(group.ledger, killed, self.sizes))

        if not system.kills_coordinator:
            return
        failed = group.ledger.mark()
        restart = system.kill_coordinator(group)
        try:
            # Watched for a session past the kill: a member dropped late counts.
            outcome = until_whole(group.ledger, failed, self.sizes,
                                  observe_s=self.sizes.session_timeout_ms / 1000 + self.sizes.quiet_s)
            self.say(f"coordinator failure {where}", system, outcome,
                     f"{group.ledger.moves} partitions moved to another member (records delivered twice: "
                     f"what each had read since its last commit), "
                     f"{group.ledger.paused_s:.1f} partition-seconds not consumed")
        finally:
            # Restarted while the group's run ends; awaited before the next system's.
            self.restarts.append(gevent.spawn(restart))

    def wait_for_restarts(self) -> None:
        gevent.joinall(self.restarts, raise_error=True)
        self.restarts.clear()

    def let_sessions_end(self) -> None:
        """Killed members' sessions end on the coordinator a session later: not during the next system's run."""
        gevent.sleep(self.sizes.session_timeout_ms / 1000 + self.sizes.quiet_s)

    def capacity(self, system) -> None:
        sizes = self.sizes
        topic = self.topic(sizes.capacity_members, sizes.capacity_partitions)
        names = self.capacity_groups(system)
        pid = system.coordinator_pid(names)
        idle_from = cpu_seconds(pid)
        gevent.sleep(sizes.capacity_window_s)
        idle = cpu_seconds(pid) - idle_from
        groups = [Group(name, topic, Ledger(sizes.capacity_partitions)) for name in names]
        pause = sizes.capacity_ramp_s / len(groups)
        for group in groups:
            system.add_members(group, sizes.capacity_members, sizes.capacity_partitions)
            gevent.sleep(pause)
        total = sizes.capacity_groups * sizes.capacity_members
        try:
            # One deadline for all the groups at once, whatever their number.
            deadline = time.monotonic() + sizes.deadline_s
            for group in groups:
                remaining = dataclasses.replace(sizes, deadline_s=max(deadline - time.monotonic(), 0.1))
                if not until_whole(group.ledger, time.monotonic(), remaining).finished:
                    # No CPU figure for a load it did not hold: none kept.
                    print(f"capacity {total} members: {system.name}: group {group.name} not whole by the "
                          f"deadline; no figure", flush=True)
                    return
            loaded_from, member_cpu = cpu_seconds(pid), process_cpu_s()
            gevent.sleep(sizes.capacity_window_s)
            loaded = cpu_seconds(pid) - loaded_from
            member_cpu = process_cpu_s() - member_cpu
        finally:
            for group in groups:
                system.stop(group)
            self.let_sessions_end()
        window = sizes.capacity_window_s
        used = max(loaded - idle, 0.0)
        print(f"capacity {total} members: {system.name}: coordinating process {loaded / window:.1%} of a core "
              f"({idle / window:.1%} idle before the members): {used / window:.1%} for the members; "
              f"member process {member_cpu / window:.1%}", flush=True)
        self.results.setdefault(f"capacity {total} members", {})[system.name] = Outcome(used / window, True)

    def capacity_groups(self, system) -> list[str]:
        """The groups' names: for Kafka, names whose coordinator is one broker (the first name's)."""
        count = self.sizes.capacity_groups
        if not isinstance(system, KafkaSystem):
            return [system.group_name(f"capacity-{i}") for i in range(count)]
        candidates = [system.group_name(f"capacity-{i}") for i in range(count * 8)]
        found = find_coordinators(self.kafka.bootstrap.split(","), candidates)
        node = found[candidates[0]][0]
        chosen = [g for g in candidates if found.get(g, (None,))[0] == node][:count]
        if len(chosen) < count:
            raise RuntimeError(f"only {len(chosen)} of {len(candidates)} group names are coordinated by broker {node}")
        return chosen

    def summary(self) -> str:
        members, partitions = self.sizes.formations[-1]
        where = f"N={members} P={partitions}"
        total = self.sizes.capacity_groups * self.sizes.capacity_members
        workloads = {"formation": f"formation {where}", "one join": f"one join {where}",
                     "coordinator failure": f"coordinator failure {where}",
                     "member failure": f"member failure {where}", "capacity": f"capacity {total} members"}
        parts = []
        for short, key in workloads.items():
            ratio = self.ratio(self.results.get(key, {}))
            parts.append(f"{short} {ratio}")
        return "vs kafka: " + "; ".join(parts)

    def java_beside_load_generator(self) -> None:
        """Each Java client row beside the load generator's for the same protocol and workload."""
        for workload, results in self.results.items():
            for protocol in KAFKA_SYSTEMS:
                java, generated = results.get(java_name(protocol)), results.get(SYSTEM_NAMES[protocol])
                if java is None or generated is None:
                    continue
                ratio = (f"; Java / load generator {java.seconds / generated.seconds:.2f}"
                         if java.finished and generated.finished and generated.seconds > 0 else "")
                print(f"java client beside the load generator: {workload}: {SYSTEM_NAMES[protocol]}: "
                      f"Java {java}, load generator {generated}{ratio}", flush=True)

    @staticmethod
    def ratio(results: dict[str, Outcome]) -> str:
        """Best Kafka figure, whatever its client (load generator or Java), over
        zkcoord's (a floor of 1 ms or 0.1% keeps a zero from dividing)."""
        kafka = [o.seconds for name, o in results.items() if name != SYSTEM_NAMES[ZKCOORD]]
        ours = results.get(SYSTEM_NAMES[ZKCOORD])
        if not kafka or ours is None:
            return "0.00x"  # not measured: no figure to claim
        return f"{max(min(kafka), 0.001) / max(ours.seconds, 0.001):.2f}x"


def warm_up_group_coordinator(kafka: KafkaCluster, timeout: float = 600.0) -> None:
    """Kafka creates ``__consumer_offsets`` at the first FindCoordinator and
    loads its partitions after: minutes under load, which no workload should
    time. Wait until groups spread over every one of its partitions have a coordinator."""
    groups = [f"warm-up-{i}" for i in range(50)]
    wait_until(lambda: len(find_coordinators(kafka.bootstrap.split(","), groups)) == len(groups), timeout,
               interval=0.5, message="Kafka's group coordinator to serve every __consumer_offsets partition")


def run(args, work: Path) -> str:
    sizes = QUICK if args.quick else FULL
    if args.formations:
        sizes = dataclasses.replace(sizes, formations=tuple(args.formations))
    raise_fd_limit()
    print(f"load before the run: {' '.join(f'{x:.2f}' for x in os.getloadavg())} (1, 5, 15 min) on "
          f"{os.cpu_count()} cores", flush=True)
    with KafkaCluster(work / "kafka", KafkaSettings(KRAFT_MODE, heap_mb=sizes.kafka_heap_mb,
                                                    full_jit=sizes.kafka_full_jit,
                                                    session_timeout_ms=COORDINATOR_SESSION_MS,
                                                    properties=sizes.kafka_properties())) as kafka:
        kafka.start(timeout=180)
        print(f"kafka {kafka.version}, KRaft, {len(kafka.brokers)} brokers, __consumer_offsets and topics "
              f"replicated 3 times", flush=True)
        warm_up_group_coordinator(kafka)
        topics = {(m, p) for m, p in sizes.formations} | {(sizes.capacity_members, sizes.capacity_partitions)}
        bench = Bench(kafka, sizes)
        for members, partitions in sorted(topics):
            kafka.create_topic(bench.topic(members, partitions), partitions, timeout=300)
        zkcoord = ZkcoordSystem(kafka, work, sizes)
        systems = []
        try:
            for protocol in KAFKA_SYSTEMS:  # each protocol's Java rows right after its load generator's
                if protocol in args.kafka:
                    systems.append(KafkaSystem(kafka, protocol, sizes))
                if protocol in args.java and any(m <= JAVA_MAX_MEMBERS for m, _ in sizes.formations):
                    systems.append(JavaKafkaSystem(kafka, protocol, sizes, work))
            systems.append(zkcoord)
            for system in systems:
                print(f"settings: {system.name}: {system.settings()}", flush=True)
            for system in systems:
                bench.formation_and_failures(system)
                bench.let_sessions_end()
                bench.wait_for_restarts()  # not during the next system's run
            if not args.no_capacity:
                for system in systems:
                    if not isinstance(system, JavaKafkaSystem):  # thousands of members: the load generator's
                        bench.capacity(system)
        finally:
            for system in systems:
                system.close()
    bench.java_beside_load_generator()
    return bench.summary()


def members_by_partitions(text: str) -> tuple[int, int]:
    try:
        members, partitions = (int(part) for part in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not NxP (members x partitions)") from None
    if not 0 < members < partitions:
        raise argparse.ArgumentTypeError(f"{text!r}: need 0 < members < partitions (one join must get one)")
    return members, partitions


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a few members and partitions: a smoke run")
    parser.add_argument("--kafka", nargs="+", default=list(KAFKA_SYSTEMS), choices=KAFKA_SYSTEMS,
                        help="the Kafka protocols to run (default: all three)")
    parser.add_argument("--formations", nargs="+", type=members_by_partitions, metavar="NxP",
                        help="the groups formed, N members on P partitions each, the last kept for the "
                             "other workloads (default 100x1000 1000x10000; --quick 4x12)")
    parser.add_argument("--java", nargs="+", default=list(KAFKA_SYSTEMS), choices=KAFKA_SYSTEMS,
                        help=f"the Kafka protocols also run with the reference Java KafkaConsumer as members, on "
                             f"the formations of up to {JAVA_MAX_MEMBERS} members (default: all three)")
    parser.add_argument("--no-java", dest="java", action="store_const", const=[],
                        help="no Java client rows: the load generator's only")
    parser.add_argument("--no-capacity", action="store_true", help="skip the capacity workload")
    parser.add_argument("--keep", action="store_true", help="keep the scratch directory")
    return run_in_scratch("bench-vs-kafka-", run, parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
