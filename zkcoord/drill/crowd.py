"""A crowd: many thin members of one group in one process, for the drill's
``big-group`` fault.

``python -m zkcoord.drill.crowd --bootstrap ... --group G --topic T
--members N --directory D`` runs N :class:`~zkcoord.consumer.consumer.Consumer`
objects (the production client) joined to group G, each with a greenlet of
its own as its application. What they deliver and every Start and Stop they
obey go to ``D/records.jsonl`` and ``D/events.jsonl``, in the lines `zkcoord
consume` writes, so the drill's checker judges them as it judges the group's
regular members: a crowd member delivering a partition while a regular
member also does is double ownership like any other. Most members of a crowd
hold nothing (a drill's topic has a dozen partitions); they cost the
coordinator what members cost it: registrations, pings and rebalances.

Every ``REPORT_S`` it prints one JSON line of status on stdout. SIGTERM or
SIGINT: every member leaves cleanly at once (the leaves fall within one
rebalance delay, so the group rebalances a few times, not N); kill -9 is the
crash of all of them. It stops by itself after ``--max-s``, as a crash would:
a crowd outliving its drill leaves nothing behind to clean.
"""

from gevent import monkey

monkey.patch_all()

import argparse  # noqa: E402 - after monkey-patching, as gevent requires
import json  # noqa: E402
import os  # noqa: E402
import resource  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import gevent  # noqa: E402
import gevent.event  # noqa: E402

from zkcoord.consumer import cli as consume  # noqa: E402
from zkcoord.consumer.consumer import Consumer  # noqa: E402
from zkcoord.drill.config import BIG_GROUP_MAX_MEMBERS  # noqa: E402
from zkcoord.errors import ConfigError, ZkcoordError  # noqa: E402
from zkcoord.interrupts import on_stop  # noqa: E402

RECORDS = "records.jsonl"
EVENTS = "events.jsonl"
# Each member polls without waiting, then sleeps this long. A poll() that
# waits for records holds its Consumer's lock meanwhile, and under gevent a
# greenlet that takes a lock again as soon as it let it go starves the
# others waiting for it: the member's network greenlet would never answer a
# ping, and the coordinator would drop every member that holds a partition.
BETWEEN_POLLS_S = 0.1
REPORT_S = 1.0
CLOSE_S = 10.0  # longest a clean leave may take


class Crowd:
    """``count`` members of the group ``config`` names, writing under ``directory``."""

    def __init__(self, bootstrap: list[str], config, count: int, directory: Path):
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.events_path = self.directory / EVENTS
        self.out = consume.open_for_append(self.directory / RECORDS)
        self.stopping = gevent.event.Event()
        self.members: list[Consumer] = []
        for _ in range(count):
            self.members.append(self._member(bootstrap, config))
        self._loops = [gevent.spawn(self._application, member) for member in self.members]

    def _member(self, bootstrap: list[str], config) -> Consumer:
        holder: list[Consumer] = []

        def observe(event: str, partitions) -> None:  # inside the member's poll(), as in `zkcoord consume`
            member = holder[0]
            consume.append_event(self.events_path, member.consumer_id, event, partitions,
                                 member.membership.epoch, member.membership.generation)

        member = Consumer(bootstrap, config, on_assign=lambda ps: observe("start", ps),
                          on_revoke=lambda ps: observe("stop", ps))
        holder.append(member)
        return member

    def _application(self, member: Consumer) -> None:
        """One member's application: deliver until told to stop, then leave cleanly."""
        name = member.consumer_id

        def poll():
            return [(r.topic, r.partition, r.offset, r.value, name) for r in member.poll(0)]

        try:
            consume.deliver(self.out, self.stopping, 0, poll, None, between_polls_s=BETWEEN_POLLS_S)
        except ZkcoordError as exc:  # the membership ended (refused, say): this member is out, the rest go on
            print(f"crowd: member {name}: {exc}", file=sys.stderr, flush=True)
        finally:
            member.close()

    def leave(self) -> None:
        """Every member leaves cleanly, all at once."""
        self.stopping.set()
        gevent.joinall(self._loops, timeout=CLOSE_S)
        self.out.flush()

    def status(self) -> dict:
        """How many members are registered and how many of those were told
        they hold partitions (one that missed its coordinator's pings was
        dropped unaware, and still counts until its lease stops it), and the
        process's CPU seconds so far."""
        usage = resource.getrusage(resource.RUSAGE_SELF)
        registered = [m for m in self.members if m.membership.registered.is_set()]
        return {"time": time.time(), "cpu_s": round(usage.ru_utime + usage.ru_stime, 2),
                "members": len(self.members), "registered": len(registered),
                "holding": sum(1 for m in registered if m.assignment())}


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m zkcoord.drill.crowd", description=__doc__.split("\n\n")[0])
    p.add_argument("--bootstrap", required=True, help="zkcoord servers, host:port[,host:port...]")
    consume.add_member_options(p)
    p.add_argument("--members", type=int, required=True,
                   help=f"how many members (1 to {BIG_GROUP_MAX_MEMBERS})")
    p.add_argument("--directory", type=Path, required=True, help="where the records and events go")
    p.add_argument("--max-s", type=float, default=300.0, help="exit after this many seconds (default 300)")
    args = p.parse_args(argv)
    if not 1 <= args.members <= BIG_GROUP_MAX_MEMBERS:
        p.error(f"--members must be from 1 to {BIG_GROUP_MAX_MEMBERS}, not {args.members}")
    if args.max_s <= 0:
        p.error("--max-s must be positive")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    try:
        config = consume.config_from(args)
    except ConfigError as exc:
        print(f"crowd: {exc}", file=sys.stderr)
        return 2
    done = gevent.event.Event()
    on_stop(done.set, greenlet=True)
    crowd = Crowd(args.bootstrap.split(","), config, args.members, args.directory)
    deadline = time.monotonic() + args.max_s
    while not done.wait(REPORT_S):
        print(json.dumps(crowd.status()), flush=True)
        if time.monotonic() >= deadline:
            print("crowd: --max-s reached; exiting without leaving", file=sys.stderr, flush=True)
            os._exit(1)  # as a crash: the drill that started it is gone or stuck
    crowd.leave()
    print(json.dumps(crowd.status()), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
