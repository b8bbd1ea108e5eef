"""What the console's pages show, read from ZooKeeper through the readers
the CLI uses (zkcoord.admin.groups, zkcoord.zk.nodes): the coordinator
slots and who holds each, the servers and brokers, the groups with their
state, members, lag and owners, and the problems among them, worst first.

The page functions return plain dicts (the JSON API serves them as they
are); :func:`problems` and :class:`LagTrend` decide without I/O. A viewer
that may not see a group or a topic (``sees_group``, ``sees_topic``; the
console's access rules) gets no trace of it.
"""

from __future__ import annotations

import collections
import logging
import re
from functools import partial
from typing import Callable, Optional

from zkcoord.admin.client import slot_count, slot_holder
from zkcoord.admin.groups import PREPARING_REBALANCE, describe_group, list_groups
from zkcoord.admin.live import with_live_members
from zkcoord.errors import ZkcoordError
from zkcoord.zk.nodes import read_brokers, read_owners, read_servers

log = logging.getLogger(__name__)

# Problems, worst first: a failed rebalance stops a group; a vacant slot
# stops every group in it; a rebalance under way pauses partitions; a member
# close to expiry is about to set one off; a lag that keeps growing is a
# group falling behind.
FAILED, VACANT_SLOT, REBALANCING, EXPIRING, LAG_GROWING = (
    "failed", "vacant-slot", "rebalancing", "member-expiring", "lag-growing")
SEVERITY = (FAILED, VACANT_SLOT, REBALANCING, EXPIRING, LAG_GROWING)
# A member is close to expiry when less than this share of its session is
# left of its lease: the coordinator asks every member a third of its
# session after the last request, so a member with less left has let
# (at least) one request go unanswered.
EXPIRING_SHARE = 1 / 3

Ends = Optional[Callable]  # partitions -> {partition: log end offset}, or None: no lag
# group -> its coordinator's DescribeGroupResponse (live.live_members), or None: ZooKeeper's members only
Members = Optional[Callable]


class LagTrend:
    """The total lag of each group as the console saw it over time: a
    group's lag is growing when each of its last ``samples`` readings, taken
    at least ``min_gap_s`` apart (so a page refreshed often does not make a
    trend of noise), is higher than the one before."""

    def __init__(self, clock: Callable[[], float], samples: int = 3, min_gap_s: float = 5.0):
        self._clock = clock
        self.samples = samples
        self.min_gap_s = min_gap_s
        self._readings: dict[str, collections.deque] = {}

    def observe(self, group: str, lag: Optional[int]) -> None:
        if lag is None:
            return
        readings = self._readings.setdefault(group, collections.deque(maxlen=self.samples))
        now = self._clock()
        if readings and now - readings[-1][0] < self.min_gap_s:
            readings[-1] = (readings[-1][0], lag)  # the latest value within the gap stands for it
        else:
            readings.append((now, lag))

    def growing(self, group: str) -> Optional[list[int]]:
        """The readings that show ``group``'s lag growing, oldest first, or None."""
        lags = [lag for _, lag in self._readings.get(group, ())]
        if len(lags) == self.samples and all(a < b for a, b in zip(lags, lags[1:])):
            return lags
        return None

    def forget_all_but(self, groups) -> None:
        for gone in set(self._readings) - set(groups):
            del self._readings[gone]


def _guarded(ends: Ends) -> Ends:
    """``ends``, but a broker that cannot be asked leaves lag unknown
    instead of failing the page: ZooKeeper's half is still worth showing."""
    if ends is None:
        return None

    def asking(partitions):
        try:
            return ends(partitions)
        except (ZkcoordError, OSError) as exc:
            log.warning("log end offsets unavailable: %s", exc)
            return {}

    return asking


def group_view(client, group: str, ends: Ends, sees_topic: Callable[[str], bool],
               members: Members = None) -> dict:
    """``group`` as `zkcoord groups describe --output json` shows it, less
    the topics the viewer may not see, with its total lag, and each
    partition's recorded ``owner`` beside the member the generation assigns
    it to (``consumer_id``, as describe names it): during a rebalance they
    differ for the partitions on the move. With ``members``, the members as
    the group's coordinator holds them now (as `--members` shows them)."""
    view = describe_group(client, group, _guarded(ends))
    if members is not None:
        view = with_live_members(view, partial(members, group))
    recorded = read_owners(client, group)
    view["partitions"] = [{**row, "owner": recorded.get((row["topic"], row["partition"]))}
                          for row in view["partitions"] if sees_topic(row["topic"])]
    for member in view["members"]:
        member["partitions"] = [tp for tp in member["partitions"] if sees_topic(tp["topic"])]
    view["history"] = [hide_topics(record, sees_topic) for record in view["history"]]
    lags = [row["lag"] for row in view["partitions"]]
    view["lag"] = sum(lags) if lags and all(lag is not None for lag in lags) else None
    return view


# How the coordinator names a topic in a round's trigger (coordinator_core.partitions_changed).
_TOPIC_CHANGED = re.compile(r"topic (\S+) now has \d+ partition\(s\)")


def hide_topics(record: dict, sees_topic: Callable[[str], bool]) -> dict:
    """A round of the history with the topics the viewer may not see left unnamed."""
    def named(match: re.Match) -> str:
        return match.group(0) if sees_topic(match.group(1)) else "a topic changed"

    return {**record, "trigger": _TOPIC_CHANGED.sub(named, record["trigger"])}


def slots_view(client) -> list[dict]:
    """Every coordinator slot: the server holding it (None: vacant), its epoch and since when."""
    rows = []
    for slot in range(slot_count(client)):
        server, epoch, since_ms = slot_holder(client, slot)
        rows.append({"slot": slot, "server": server, "epoch": epoch, "since_ms": since_ms})
    return rows


def expiring(members: list[dict]) -> list[dict]:
    """The members whose lease, as their coordinator said it (live members
    only: ZooKeeper's have no lease), has less than EXPIRING_SHARE of its
    session left."""
    return [m for m in members if m.get("lease_remaining_ms") is not None and m.get("session_timeout_ms")
            and m["lease_remaining_ms"] < m["session_timeout_ms"] * EXPIRING_SHARE]


def overview(client, ends: Ends, sees_group: Callable[[str], bool], sees_topic: Callable[[str], bool],
             trend: LagTrend, members: Members = None) -> dict:
    """The cluster at a glance: slots, servers, brokers, the groups the
    viewer may see, and the problems, worst first. With ``members``, each
    group's coordinator is asked for its members' leases (one request per
    group), and those close to expiry are among the problems."""
    slots = slots_view(client)
    servers = read_servers(client)
    holding = collections.defaultdict(list)
    for row in slots:
        if row["server"] is not None:
            holding[row["server"]].append(row["slot"])
    groups = []
    names = [name for name in list_groups(client) if sees_group(name)]
    for name in names:
        view = group_view(client, name, ends, sees_topic, members)
        trend.observe(name, view["lag"])
        groups.append({"group": name, "state": view["state"], "generation": view["generation"],
                       "strategy": view["strategy"], "members": len(view["members"]),
                       "partitions": len(view["partitions"]), "lag": view["lag"],
                       "lag_growing": trend.growing(name), "coordinator": view["coordinator"],
                       "failure": view["failure"],
                       "last_rebalance": view["history"][-1] if view["history"] else None,
                       "expiring": [{"consumer_id": m["consumer_id"], "lease_remaining_ms": m["lease_remaining_ms"],
                                     "session_timeout_ms": m["session_timeout_ms"]}
                                    for m in expiring(view["members"])]})
    trend.forget_all_but(names)
    return {
        "slots": slots,
        "servers": [{"server": sid, "host": info.host, "port": info.port, "slots": holding.get(sid, []),
                     "withdrawn": list(info.withdrawn)} for sid, info in servers.items()],
        "brokers": [{"broker": bid, "host": reg.host, "port": reg.port, "rack": reg.rack,
                     "endpoints": [f"{e.listener_name}://{e.host}:{e.port}" for e in reg.endpoints]} for bid, reg in read_brokers(client).items()],
        "groups": groups,
        "problems": problems(slots, groups),
    }


def problems(slots: list[dict], groups: list[dict]) -> list[dict]:
    """What needs an operator, worst kind first, each with its subject and a sentence."""
    found = []
    for row in slots:
        if row["server"] is None:
            found.append({"kind": VACANT_SLOT, "subject": f"slot {row['slot']}",
                          "text": f"coordinator slot {row['slot']} has no server: its groups are not coordinated"})
    for group in groups:
        failure, name = group["failure"], group["group"]
        if failure is not None:
            found.append({"kind": FAILED, "subject": name, "group": name,
                          "text": f"rebalance FAILED at generation {failure['generation']} after "
                                  f"{failure['attempts']} attempts: {failure['error']}"})
        elif group["state"] == PREPARING_REBALANCE:
            found.append({"kind": REBALANCING, "subject": name, "group": name,
                          "text": f"rebalancing (generation {group['generation']})"})
        for member in group.get("expiring", ()):
            found.append({"kind": EXPIRING, "subject": name, "group": name,
                          "text": f"member {member['consumer_id']}'s lease runs out in "
                                  f"{member['lease_remaining_ms'] / 1000:.1f} s (session "
                                  f"{member['session_timeout_ms'] / 1000:.1f} s): it has not answered its "
                                  f"coordinator"})
        if group["lag_growing"]:
            found.append({"kind": LAG_GROWING, "subject": name, "group": name,
                          "text": "lag growing: " + " \u2192 ".join(str(lag) for lag in group["lag_growing"])})
    return sorted(found, key=lambda p: (SEVERITY.index(p["kind"]), p["subject"]))


def ownership(view: dict) -> dict:
    """The group's recorded owners as the live timeline draws them: partition -> member (None: unowned)."""
    return {f"{row['topic']}-{row['partition']}": row["owner"] for row in view["partitions"]}
