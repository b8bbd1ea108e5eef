"""Fetch fences in ZooKeeper (docs/DESIGN.md, "What a stock member is
promised"; the decisions are ``groups/fences.py``'s): the bridging broker
writes one ephemeral node per fenced member under /zkcoord/fetch_fences,
every broker reads them all and refuses what they fence.

The nodes are never changed in place: a changed fence is a new node, written
before the old one is deleted, so a reader never sees a moment without it.
They go with the writer's session: a broker that dies takes its fences with
it (its clients then find the group's new broker, which refuses their old
member, and they let go).

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

from zkcoord.broker.groups.fences import FenceIndex
from zkcoord.errors import ZkcoordError
from zkcoord.zk import layout

log = logging.getLogger(__name__)

RETRY_S = 0.5
# A reader also reads everything this often, should a watch have been lost with a session.
REREAD_S = 5.0


def _failed(what: str, exc: BaseException) -> None:
    log.warning("fetch fences: %s failed (%s); retrying", what, exc)


class FencePublisher:
    """Keeps the fences one bridge wants as nodes in ZooKeeper."""

    def __init__(self, zk) -> None:
        self.zk = zk
        self._wanted: dict = {}
        self._written: dict = {}  # key -> (path, fence)
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
            self._wake.wait()
            self._wake.clear()
            try:
                self._write()
            except (KazooException, ZkcoordError, self.zk.handler.timeout_exception) as exc:
                _failed("writing", exc)
                gevent.sleep(RETRY_S)
                self._wake.set()

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
            if old is not None:
                self._delete(old[0])
        for key in [k for k in self._written if k not in wanted]:
            self._delete(self._written.pop(key)[0])

    def _delete(self, path: str) -> None:
        try:
            self.zk.delete(path)
        except NoNodeError:
            pass


class FenceReader:
    """Every bridge's fences, read from ZooKeeper and kept current."""

    def __init__(self, zk) -> None:
        self.zk = zk
        self.index = FenceIndex()
        self._known: dict = {}  # node name -> FetchFence (nodes never change)
        self._wake = gevent.event.Event()
        zk.add_listener(self._on_state)
        self._greenlet = gevent.spawn(self._run)

    def refused(self, host: str, client_id: Optional[str]) -> frozenset:
        return self.index.refused(host, client_id)

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
            except (KazooException, ZkcoordError, self.zk.handler.timeout_exception) as exc:
                _failed("reading", exc)
                gevent.sleep(RETRY_S)
                continue
            self._wake.wait(timeout=REREAD_S)
            self._wake.clear()

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
