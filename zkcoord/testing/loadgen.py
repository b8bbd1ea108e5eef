"""A load generator: thousands of real group members in one process.

``python -m zkcoord.testing.loadgen`` runs members ``--first`` to ``--last``
(inclusive) of a load, member ``i`` in group ``<prefix>-<i mod groups>``, each
a :class:`~zkcoord.member.membership.GroupMembership` (the production client,
over TCP to the servers) whose network thread is a greenlet. The members
report no offsets and always say they have just polled, so the coordinator
never evicts them for being slow; what they cost the coordinator is what
members cost it: registration, pings, Stops and Starts.

Every ``--report-s`` it prints one JSON line on stdout (see :class:`Load.status`)
with its own CPU time, so whoever runs it can tell which side limits. It stops
by itself when its stdin closes (whoever started it has gone), on SIGTERM or
SIGINT, or after ``--max-s``.
"""

from gevent import monkey

monkey.patch_all()

import argparse  # noqa: E402 - after monkey-patching, as gevent requires
import dataclasses  # noqa: E402
import json  # noqa: E402
import logging  # noqa: E402
import resource  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

import gevent  # noqa: E402
import gevent.event  # noqa: E402
import gevent.os  # noqa: E402

from zkcoord import settings  # noqa: E402
from zkcoord.errors import ConfigError  # noqa: E402
from zkcoord.interrupts import on_stop  # noqa: E402
from zkcoord.member.config import MemberConfig  # noqa: E402
from zkcoord.member.membership import GroupMembership  # noqa: E402

# A member blocked on its connection wakes this often when no request comes:
# the generator never closes members one by one, so it need not notice soon.
CLOSE_CHECK_S = 30.0
NO_EPOCH = -1
# Members not registered that a status names.
WAITING_SHOWN = 5


def group_name(prefix: str, index: int) -> str:
    return f"{prefix}-{index:04d}"


class SilentMember:
    """A listener that holds what it is told and commits nothing, and
    notes when that last changed."""

    __slots__ = ("held", "changed_at")

    def __init__(self):
        self.held: frozenset = frozenset()
        self.changed_at = 0.0  # time.time() of the last Start or Stop

    def on_start(self, partitions):
        self.held = frozenset(partitions)
        self.changed_at = time.time()

    def on_stop(self, partitions):
        self.held = self.held - frozenset(partitions)
        self.changed_at = time.time()
        return {}

    def offsets(self):
        return None

    def last_poll_ms_ago(self):
        return 0


class Load:
    """Members ``first`` to ``last`` of a load spread over ``groups`` groups."""

    def __init__(self, bootstrap, prefix: str, groups: int, first: int, last: int, member: MemberConfig):
        """``member``: every member's settings; each takes its own group's name in place of its group."""
        self.members: list[tuple[str, GroupMembership, SilentMember]] = []
        for i in range(first, last + 1):
            group = group_name(prefix, i % groups)
            listener = SilentMember()
            membership = GroupMembership(bootstrap, dataclasses.replace(member, group=group), listener)
            membership.close_check_s = CLOSE_CHECK_S
            self.members.append((group, membership, listener))

    def start(self, over_s: float = 0.0) -> None:
        """Start every member, all at once or spread evenly over ``over_s`` seconds."""
        pause = over_s / len(self.members)
        for _, membership, _ in self.members:
            membership.start()
            if pause:
                gevent.sleep(pause)

    def status(self) -> dict:
        """``cpu_s``: this process's user+system CPU seconds so far;
        ``registered``: members registered now; ``lost``: registrations lost
        and made again (a member that lost its place and came back counts
        once per loss); ``groups``: per group [members registered, partitions
        held, sum of the partition numbers held, the oldest coordinator epoch
        a registered member is under (-1: none registered), the last time.time()
        a registered member was started or stopped] (a group is whole when the
        count and the sum are those of its topic, each partition once; it
        became whole at that last Start, to the instant, whatever the
        interval between statuses);
        ``waiting``: up to WAITING_SHOWN members not registered, as [consumer
        id, group, protocol state, registrations so far]."""
        usage = resource.getrusage(resource.RUSAGE_SELF)
        groups: dict[str, list[int]] = {}
        registered = lost = 0
        for group, membership, listener in self.members:
            entry = groups.setdefault(group, [0, 0, 0, NO_EPOCH, 0.0])
            lost += max(membership.registrations - 1, 0)
            if membership.registered.is_set():
                registered += 1
                entry[0] += 1
                entry[1] += len(listener.held)
                entry[2] += sum(p for _, p in listener.held)
                entry[3] = membership.epoch if entry[3] == NO_EPOCH else min(entry[3], membership.epoch)
                entry[4] = max(entry[4], listener.changed_at)
        # A few of the members not registered, with their protocol's state,
        # so that a run that never completes says who it waits for.
        waiting = [[membership.consumer_id, group, membership.protocol.state.value, membership.registrations]
                   for group, membership, _ in self.members if not membership.registered.is_set()][:WAITING_SHOWN]
        return {"time": time.time(), "cpu_s": usage.ru_utime + usage.ru_stime, "members": len(self.members),
                "registered": registered, "lost": lost, "groups": groups, "waiting": waiting}


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m zkcoord.testing.loadgen", description=__doc__.split("\n\n")[0])
    p.add_argument("--bootstrap", required=True, help="servers' coordinator-protocol addresses, host:port,...")
    p.add_argument("--topic", required=True, help="the topic every member subscribes to")
    p.add_argument("--groups", type=int, required=True, help="how many groups the whole load spreads over")
    p.add_argument("--first", type=int, required=True, help="the first member this process runs")
    p.add_argument("--last", type=int, required=True, help="the last member this process runs (inclusive)")
    p.add_argument("--prefix", default="load", help="group names are <prefix>-NNNN (default load)")
    settings.add_options(p, MemberConfig, only=("session_timeout_ms", "assignment_strategies"))
    p.add_argument("--start-over-s", type=float, default=0.0,
                   help="start the members evenly over this many seconds (default 0: all at once)")
    p.add_argument("--report-s", type=float, default=1.0, help="seconds between status lines (default 1)")
    p.add_argument("--max-s", type=float, default=600.0, help="stop after this many seconds (default 600)")
    args = p.parse_args(argv)
    if args.groups < 1 or args.first < 0 or args.last < args.first:
        p.error("need --groups >= 1 and 0 <= --first <= --last")
    if args.report_s <= 0 or args.max_s <= 0 or args.start_over_s < 0:
        p.error("--report-s and --max-s must be positive, --start-over-s not negative")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.ERROR, stream=sys.stderr)
    try:
        member = settings.from_args(MemberConfig, args, group=group_name(args.prefix, 0), topics=(args.topic,))
    except ConfigError as exc:
        print(f"loadgen: {exc}", file=sys.stderr)
        return 2
    load = Load(args.bootstrap, args.prefix, args.groups, args.first, args.last, member)
    done = gevent.event.Event()
    on_stop(done.set, greenlet=True)

    def watch_stdin():  # EOF: whoever started us has gone
        while gevent.os.tp_read(sys.stdin.fileno(), 4096):
            pass
        done.set()

    gevent.spawn(watch_stdin)
    deadline = time.monotonic() + args.max_s
    gevent.spawn(load.start, args.start_over_s)
    while not done.wait(args.report_s) and time.monotonic() < deadline:
        print(json.dumps(load.status()), flush=True)
    # No leaves: thousands of them would make the coordinator rebalance as
    # many times. The process's exit closes every connection at once, as a crash would.
    return 0


if __name__ == "__main__":
    sys.exit(main())
