"""Fetch fences in ZooKeeper (docs/DESIGN.md, "What a stock member is
promised"; the decisions are ``groups/fences.py``'s): the bridging broker
writes one ephemeral node per fenced member under /zkcoord/fetch_fences,
every broker reads them all and refuses what they fence.

The nodes are never changed in place: a changed fence is a new node, written
before the old one is deleted, so a reader never sees a moment without it.
They go with the writer's session: a broker that dies takes its fences with
it (its clients then find the group's new broker, which refuses their old
member, and they let go).

A client that shows at one broker that it let go (it joins a group afresh,
or is given partitions, as the bridge's ``joined`` and ``granted`` rules
say) shows it for the fences other brokers wrote for the same client in the
same group too: its old broker cannot see it (the client followed its group
to a new coordinator, and its old member is abandoned there once silent).
That broker's reader deletes those other nodes (:meth:`FenceReader.lift`),
and its bridge asks again while a client it serves is refused a partition
it holds; their writer, finding a node of its own gone, drops that fence
for good (it is not written again after a lost session).

A broker that refused a fenced client's fetch lately writes the client's
nodes again, the same bytes, at most once per check interval: a node's
version moving is how the writer learns that the client still fetches
somewhere, and a gone member's fence lapses once it has not moved for the
idle time (groups/fences.py).

Runs on gevent, like the broker: each side is one greenlet that a watch or a
change only wakes, and that reads or writes whole on each wake-up.
"""

from __future__ import annotations

import logging
from typing import Optional

import gevent
import gevent.event
from kazoo.exceptions import KazooException, NoNodeError
from kazoo.protocol.states import KazooState

from zkcoord.broker.groups.fences import FenceIndex, Tie
from zkcoord.errors import ZkcoordError
from zkcoord.zk import layout

log = logging.getLogger(__name__)

RETRY_S = 0.5
# A reader also reads everything this often, should a watch have been lost with a session.
REREAD_S = 5.0


def check_interval(idle_ms: int) -> float:
    """How often a reader says which fenced clients it refused, and a writer
    looks: a few times within the idle time, and at least every REREAD_S."""
    return min(REREAD_S, idle_ms / 1000.0 / 4)


def _failed(what: str, exc: BaseException) -> None:
    log.warning("fetch fences: %s failed (%s); retrying", what, exc)


class FencePublisher:
    """Keeps the fences one bridge wants as nodes in ZooKeeper, and calls
    ``on_fetched(key)`` when a reader says the fence's client still fetches."""

    def __init__(self, zk, idle_ms: int, on_fetched=lambda key: None, on_lifted=lambda key: None) -> None:
        self.zk = zk
        self.on_fetched = on_fetched
        self.on_lifted = on_lifted
        self._check_s = check_interval(idle_ms)
        self._wanted: dict = {}
        self._written: dict = {}  # key -> (path, fence)
        self._versions: dict = {}  # key -> its node's version when last looked at
        self._wake = gevent.event.Event()
        self._session_lost = False
        zk.add_listener(self._on_state)
        self._greenlet = gevent.spawn(self._run)

    def want(self, fences: dict) -> None:
        """Make the nodes say exactly ``fences`` ({key: FetchFence}), soon."""
        self._wanted = dict(fences)
        self._wake.set()

    def close(self) -> None:
        self._greenlet.kill(block=False)
        self.zk.remove_listener(self._on_state)

    def _on_state(self, state) -> None:
        # Called on kazoo's thread: only flags. Ephemeral nodes end with their session.
        if state == KazooState.LOST:
            self._session_lost = True
        self._wake.set()

    def _run(self) -> None:
        while True:
            self._wake.wait(timeout=self._check_s if self._written else None)
            self._wake.clear()
            try:
                self._write()
                self._look_for_fetches()
            except (KazooException, ZkcoordError, self.zk.handler.timeout_exception) as exc:
                _failed("writing", exc)
                gevent.sleep(RETRY_S)
                self._wake.set()

    def _look_for_fetches(self) -> None:
        """Each node a reader wrote again since the last look: its client
        still fetches. Each node gone that this publisher did not delete:
        another broker lifted it (its client let go there), so the fence is
        not to be written again, after a lost session say."""
        for key, (path, _) in list(self._written.items()):
            stat = self.zk.exists(path)
            if stat is None and not self._session_lost:
                del self._written[key]
                self._versions.pop(key, None)
                self._wanted.pop(key, None)
                self.on_lifted(key)
            elif stat is not None and stat.version != self._versions.get(key):
                self._versions[key] = stat.version
                self.on_fetched(key)

    def _write(self) -> None:
        if self._session_lost:
            self._session_lost = False
            self._written.clear()
        wanted = self._wanted
        if wanted:
            self.zk.ensure_path(layout.FETCH_FENCES)
        for key, fence in wanted.items():
            old = self._written.get(key)
            if old is not None and old[1] == fence:
                continue
            path = self.zk.create(layout.FETCH_FENCE_PREFIX, layout.encode_fetch_fence(fence), ephemeral=True,
                                  sequence=True)
            self._written[key] = (path, fence)
            self._versions[key] = 0  # as created
            if old is not None:
                self._delete(old[0])
        for key in [k for k in self._written if k not in wanted]:
            self._versions.pop(key, None)
            self._delete(self._written.pop(key)[0])

    def _delete(self, path: str) -> None:
        try:
            self.zk.delete(path)
        except NoNodeError:
            pass


class FenceReader:
    """Every bridge's fences, read from ZooKeeper and kept current; the
    clients it refused, told to their fences' writers."""

    def __init__(self, zk, idle_ms: int) -> None:
        self.zk = zk
        self.index = FenceIndex()
        self._check_s = check_interval(idle_ms)
        self._known: dict = {}  # node name -> FetchFence (nodes never change)
        self._refused: set[Tie] = set()  # ties refused a fetch since the writers were last told
        # (group, tie): fences other brokers wrote, to delete.
        self._lifts: set[tuple[str, Tie]] = set()
        self._wake = gevent.event.Event()
        zk.add_listener(self._on_state)
        self._greenlet = gevent.spawn(self._run)

    def refused(self, host: str, client_id: Optional[str]) -> frozenset:
        refused = self.index.refused(host, client_id)
        if refused:
            self._refused.add(Tie(host, client_id or ""))
        return refused

    def lift(self, group: str, tie: Tie) -> None:
        """The client of ``tie`` showed it let go of what it held in
        ``group`` before: soon, delete every fence node of that client in that
        group that another broker wrote (this broker's own bridge narrows its
        own by its rules)."""
        self._lifts.add((group, tie))
        self._wake.set()

    def refusing(self, tie: Tie) -> frozenset:
        """What the fences refuse ``tie`` now (nothing recorded: a question, not a fetch)."""
        return self.index.refused(tie.host, tie.client_id)

    def close(self) -> None:
        self._greenlet.kill(block=False)
        self.zk.remove_listener(self._on_state)

    def _on_state(self, state) -> None:
        if state == KazooState.CONNECTED:
            self._wake.set()  # watches set on a lost session are gone

    def _watch(self, _event=None) -> None:
        self._wake.set()

    def _run(self) -> None:
        while True:
            try:
                self._read()
                self._lift()
                self._tell_writers()
            except (KazooException, ZkcoordError, self.zk.handler.timeout_exception) as exc:
                _failed("reading", exc)
                gevent.sleep(RETRY_S)
                continue
            self._wake.wait(timeout=self._check_s)
            self._wake.clear()

    def _lift(self) -> None:
        own_session = self.zk.client_id[0] if self.zk.client_id else None
        for group, tie in list(self._lifts):
            for name, fence in self._known.items():
                if fence.group != group or Tie(fence.host, fence.client_id) != tie:
                    continue
                path = f"{layout.FETCH_FENCES}/{name}"
                stat = self.zk.exists(path)
                if stat is None or stat.ephemeralOwner == own_session:
                    continue  # gone already, or this broker's own
                log.info("fetches from %s with client id %r: the fence of member %s of group %s is lifted: "
                         "the client showed another broker that it let go", fence.host, fence.client_id,
                         fence.member, fence.group)
                try:
                    self.zk.delete(path)
                except NoNodeError:
                    pass
            self._lifts.discard((group, tie))  # only once done: a failure keeps it for the next round

    def _tell_writers(self) -> None:
        """Write the nodes of every client refused since last time again, unchanged."""
        refused, self._refused = self._refused, set()
        for name, fence in self._known.items():
            if Tie(fence.host, fence.client_id) in refused:
                try:
                    self.zk.set(f"{layout.FETCH_FENCES}/{name}", layout.encode_fetch_fence(fence))
                except NoNodeError:
                    pass  # lifted meanwhile

    def _read(self) -> None:
        try:
            children = self.zk.get_children(layout.FETCH_FENCES, watch=self._watch)
        except NoNodeError:
            # None written yet: watch for the directory's creation.
            if self.zk.exists(layout.FETCH_FENCES, watch=self._watch) is not None:
                self._wake.set()
            children = []
        known = {}
        for name in children:
            if name in self._known:
                known[name] = self._known[name]
                continue
            path = f"{layout.FETCH_FENCES}/{name}"
            try:
                data, _ = self.zk.get(path)
                known[name] = layout.decode_fetch_fence(data, path)
            except NoNodeError:
                continue
            except layout.LayoutError as exc:
                log.warning("fetch fences: ignoring %s", exc)
                continue
            fence = known[name]
            log.info("fetches from %s with client id %r are refused %s: member %s of group %s may still be "
                     "fetching them without holding them", fence.host, fence.client_id,
                     ", ".join(f"{t}-{p}" for t, p in sorted(fence.partitions)), fence.member, fence.group)
        self._known = known
        self.index = FenceIndex(known.values())
