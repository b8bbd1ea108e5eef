"""The elector of every coordinator slot a server stands for.

One greenlet runs the rounds: each reads the slot count and the slots'
election nodes, seeks vacant slots up to the server's fair share and hands
over what it holds beyond it (coordinator/slots.py decides which), stands
for the slots it seeks, and for each it wins claims a new epoch of the slot
and takes office with a :class:`~zkcoord.coordinator.runtime.Coordinator`.
It resigns a slot by deleting its election node once its coordinator has
stopped, and withdraws from a slot whose takeovers keep failing.

A part of :class:`~zkcoord.coordinator.server.Server`, whose ZooKeeper
session, slots and coordinators it drives.
"""

from __future__ import annotations

import logging
import time
from typing import Optional

import gevent
from kazoo.client import KazooState
from kazoo.exceptions import ConnectionClosedError, ConnectionLoss, SessionExpiredError

from zkcoord.coordinator.runtime import Coordinator
from zkcoord.coordinator.slots import (
    FAILURES_TO_WITHDRAW, SlotCount, awaits_a_taker, elections_of_an_earlier_count, slot_to_release, slots_to_seek,
    withdrawal_counts,
)
from zkcoord.coordinator.store import CoordinatorStore
from zkcoord.errors import ZkcoordError, describe
from zkcoord.zk import layout
from zkcoord.zk.nodes import read_servers, read_slot_epochs, slots_with_nodes
from zkcoord.zk.session import STOPPING_DELETE_TIMEOUT_S, delete_if_owned

log = logging.getLogger(__name__)

# The elector looks again at least this often while it holds a slot (a
# coordinator deposed by a newer epoch gives its node up within this).
HELD_CHECK_S = 1.0
# ... and otherwise (watches wake it at once; this only bounds a lost one).
IDLE_CHECK_S = 5.0
# After handing a slot over, before the next: one slot at a time moves.
RELEASE_PAUSE_S = 0.2
# After a round, or a takeover in it, failed: before the next.
FAILED_ROUND_S = 0.5


class SlotCountChanged(ZkcoordError):
    """An election was won under a slot count that has changed since it was read."""

    retriable = True  # under the new count


# Errors that fail a takeover through no fault of its slot (the connection,
# the count): they do not count towards withdrawing from it (slots.Candidacy).
NOT_THE_SLOTS_FAULT = (ConnectionLoss, ConnectionClosedError, SessionExpiredError, SlotCountChanged)


class SlotElector:
    """The server's election rounds over the coordinator slots."""

    def _wake_elector(self, _event=None) -> None:
        self._election_wanted.set()

    def _elect_forever(self) -> None:
        """Election rounds, each when something changed (a watch, the
        session) or a bounded while after the last."""
        while self._running:
            try:
                wait = self._elect_round()
            except Exception as exc:  # connection trouble: kazoo raises its own errors; never give up
                log.warning("election round failed: %s", describe(exc))
                wait = FAILED_ROUND_S
            self._election_wanted.wait(wait)

    def _elect_round(self) -> float:
        """One round: give up slots whose epoch a newer coordinator took,
        step down from every slot if the slot count changed, register this
        server again if its node is missing, give up a node of ours with no
        coordinator (a takeover that failed half way), take vacant slots up
        to their share (none while an election of an earlier count remains),
        and hand one over if it holds more (another server joined). Returns
        how long to wait for a change before the next round."""
        self._election_wanted.clear()  # first: a watch that fires from here on is another round
        for slot, coordinator in list(self.coordinators.items()):
            if coordinator.deposed:
                # Before any read: its members go looking for the new one at
                # once, even while ZooKeeper is out of reach.
                self._resign(slot)
        count = self._read_slot_count()
        if count != self._count:
            self._follow_count(count)
            return 0.0
        if count is None:
            return IDLE_CHECK_S  # the node's creation wakes the elector
        servers = read_servers(self.zk, watch=self._wake_elector, watch_data=True)
        me = servers.get(str(self.config.server_id))
        if me is None:
            # Its registration failed on a new session (the connection
            # flapping as it was made): members could not find this server,
            # and the others would count it out of the fair share.
            self._register()
            return 0.0
        published = self._publish_candidacy(me.withdrawn)  # a withdrawal may have ended
        withdrawn = withdrawal_counts(info.withdrawn for info in servers.values())
        nodes = self._election_nodes(count)
        session = self.zk.client_id[0]
        for slot in list(self.coordinators):
            stat = nodes.get(slot)
            if stat is None or stat.ephemeralOwner != session:
                # A coordinator runs only while its election is ours (a
                # takeover that outlived its session, a node deleted by hand):
                # step down; the slot is elected again like any other.
                log.warning("server %d no longer holds the election of slot %d: stepping down in it",
                            self.config.server_id, slot)
                self._resign(slot)
        for slot, stat in nodes.items():
            if stat is not None and stat.ephemeralOwner == session and slot not in self.coordinators:
                # Ours without a coordinator: a takeover failed after its
                # claim and could not give the node up then. Give it up now;
                # the slot is elected again like any vacant one.
                log.warning("server %d holds the election of slot %d without a coordinator; giving it up",
                            self.config.server_id, slot)
                self._give_up_election(slot)
        earlier = elections_of_an_earlier_count(count, {slot: stat.czxid for slot, stat in nodes.items()
                                                        if stat is not None})
        if earlier:
            if self._waiting_logged != count.zxid:
                self._waiting_logged = count.zxid
                log.info("server %d stands for no slot of %d until the elections won under an earlier count end "
                         "(slots %s)", self.config.server_id, count.slots, earlier)
            return HELD_CHECK_S  # their nodes are watched: their end wakes the elector
        vacant = [slot for slot in range(count.slots) if nodes.get(slot) is None]
        seek = slots_to_seek(self.coordinators, vacant, count.slots, len(servers), withdrawn,
                             aside=self.candidacy.withdrawn(time.monotonic()))
        won, failed = self._stand_for(seek, session)
        if won:
            log.info("server %d won the election of slot(s) %s", self.config.server_id, [w.slot for w in won])
        outcomes = self._take_offices(won)
        for slot, error in outcomes.items():
            if error is None:
                self.candidacy.succeeded(slot)
            elif self._counts_against_slot(error, session):
                failed.add(slot)
        for slot in sorted(failed):
            withdrawal = self.candidacy.failed(slot, time.monotonic())
            if withdrawal is not None:
                log.warning("server %d withdraws from slot %d for %.0f s: its last %d takeovers of it failed",
                            self.config.server_id, slot, withdrawal, FAILURES_TO_WITHDRAW)
        if failed or any(error is not None for error in outcomes.values()):
            self._publish_candidacy(published)
            return FAILED_ROUND_S
        release = slot_to_release(self.coordinators, count.slots, len(servers), withdrawn)
        # Hand over only once the last vacant slot has been taken (a slot
        # every server has withdrawn from waits for one to stand again).
        # And only once its groups are at rest: a slot just taken over still
        # waits out its predecessor's leases, and a second takeover would
        # make its groups wait them out again.
        if (release is not None and not [slot for slot in vacant if awaits_a_taker(slot, len(servers), withdrawn)]
                and self.coordinators[release].settled()):
            log.info("server %d hands slot %d over: it holds %d of %d slots with %d servers up",
                     self.config.server_id, release, len(self.coordinators), count.slots, len(servers))
            self._resign(release)
            return RELEASE_PAUSE_S
        wait = HELD_CHECK_S if self.coordinators else IDLE_CHECK_S
        back = self.candidacy.next_return(time.monotonic())  # a withdrawal's end is a change too
        return wait if back is None else min(wait, back)

    def _election_nodes(self, count: SlotCount) -> dict:
        """The stat of every slot's election node (None: vacant), watched,
        asked at once: the slots of ``count``, and those beyond it that have
        nodes (a lowered count's: their holders may act under the old one)."""
        slots = sorted(set(range(count.slots)) | set(slots_with_nodes(self.zk, watch=self._wake_elector)))
        asked = {slot: self.zk.exists_async(layout.slot_coordinator_path(slot), watch=self._wake_elector)
                 for slot in slots}
        return {slot: answer.get() for slot, answer in asked.items()}

    def _counts_against_slot(self, error: BaseException, session: int) -> bool:
        """Whether a failed takeover counts towards withdrawing from its slot:
        not if the connection failed it, which would fail any slot."""
        return not (isinstance(error, NOT_THE_SLOTS_FAULT + (self.zk.handler.timeout_exception,))
                    or self.zk.state != KazooState.CONNECTED or self.zk.client_id[0] != session)

    def _stand_for(self, seek: list[int], session: int) -> tuple[list[CoordinatorStore], set[int]]:
        """Stand for each slot of ``seek``: the stores of the elections won,
        and the slots whose claim failed (connection trouble is raised)."""
        if not seek:
            return [], set()
        # Above every slot's epoch, whichever it holds now: a group that came
        # from another slot when the count changed has members who have seen
        # that slot's epochs, and they would refuse a lower one as stale.
        # One listing and a few multiReads for a cluster's every slot.
        above = max(read_slot_epochs(self.zk).values(), default=0)
        won: list[CoordinatorStore] = []
        failed: set[int] = set()
        for slot in seek:
            try:
                store = self._stand(slot, above)
            except Exception as exc:
                if not self._counts_against_slot(exc, session):
                    raise
                log.error("server %d could not stand for slot %d: %s", self.config.server_id, slot, describe(exc))
                failed.add(slot)
                continue
            if store is not None:
                won.append(store)
        return won, failed

    def _stand(self, slot: int, above: int) -> Optional[CoordinatorStore]:
        """Try to win ``slot``'s election: its election node created and its
        epoch claimed at once, above ``above`` (store.claim_epoch); the store
        that holds the new epoch, or None if another server won."""
        store = CoordinatorStore(self.zk, self.config.server_id, slot, self.slots)
        if store.claim_epoch(elected_as=layout.encode_coordinator(str(self.config.server_id)), above=above) is None:
            return None
        return store

    def _take_offices(self, won: list[CoordinatorStore]) -> dict[int, Optional[Exception]]:
        """Take office in the slots ``won`` side by side (after a failover
        each loads its own groups, and the members of the last should not
        wait for the first); by slot, None or why it failed."""
        takeovers = {store.slot: gevent.spawn(self._take_office, store) for store in won}
        try:
            gevent.joinall(list(takeovers.values()))
        except BaseException:  # the elector killed (the server stopping): its takeovers with it
            gevent.killall(list(takeovers.values()))
            raise
        return {slot: takeover.value for slot, takeover in takeovers.items()}

    def _take_office(self, store: CoordinatorStore) -> Optional[Exception]:
        """Start the coordinator of the slot ``store`` won; if that fails,
        why, and then the election is given up, so that the slot is elected
        again (by this server or another) with a new epoch."""
        try:
            # The count read again after winning, before anything starts: an
            # election won after the count changed was won under the old one,
            # and the servers of the new count do not wait for it
            # (slots.elections_of_an_earlier_count).
            count = self._read_slot_count()
            if count != self._count:
                raise SlotCountChanged(f"the slot count changed to {count.slots if count else 'unreadable'} "
                                       f"after slot {store.slot} of {self.slots} was won")
            self._become_coordinator(store)
        except Exception as exc:  # kazoo's connection errors too: never a zombie in office
            log.error("could not take office in slot %d: %s: %s", store.slot, type(exc).__name__, exc)
            self._give_up_election(store.slot)
            return exc
        return None

    def _become_coordinator(self, store: CoordinatorStore) -> None:
        """Start the coordinator of the slot ``store`` won, at its epoch; on
        any failure, nothing is left running."""
        slot = store.slot
        coordinator = Coordinator(store, self.config.coordinator, store.epoch.number, self.zk_session_timeout_ms,
                                  self.topics, metrics=self.core_metrics, log_ends=self.log_ends.log_ends)
        # Published before it starts, so that a suspension meanwhile reaches it.
        if self.zk.state != KazooState.CONNECTED:
            coordinator.session_changed(connected=False)
        self.coordinators[slot] = coordinator
        began = time.monotonic()
        try:
            coordinator.start()
        except BaseException:
            if self.coordinators.get(slot) is coordinator:
                del self.coordinators[slot]
            coordinator.stop()
            raise
        log.info("server %d is the coordinator of slot %d, epoch %d (loaded in %.0f ms)",
                 self.config.server_id, slot, store.epoch.number, 1000 * (time.monotonic() - began))

    def _give_up_election(self, slot: int) -> None:
        """Delete ``slot``'s election node, if it is still ours."""
        self._delete_if_owned(layout.slot_coordinator_path(slot))

    def _delete_if_owned(self, path: str) -> None:
        """Best effort, and bounded: with no connection the node stays, and
        goes when this session ends."""
        try:
            delete_if_owned(self.zk, path, timeout=STOPPING_DELETE_TIMEOUT_S)
        except (Exception, self.zk.handler.timeout_exception) as exc:  # kazoo's connection errors, or no answer
            log.info("could not delete %s: %s", path, describe(exc))

    def _resign(self, slot: int) -> None:
        """Step down in ``slot`` (its offsets flushed first) and give its election up."""
        coordinator = self.coordinators.pop(slot, None)
        if coordinator is None:
            return
        coordinator.stop()
        self._give_up_election(slot)
        log.info("server %d resigned as coordinator of slot %d (epoch %d)",
                 self.config.server_id, slot, coordinator.epoch)

    def _resign_all(self) -> None:
        """Step down in every slot at once: each waits up to its final flush
        (runtime.FINAL_FLUSH_S), and a server stopping without ZooKeeper
        should not wait that long once per slot."""
        gevent.joinall([gevent.spawn(self._resign, slot) for slot in sorted(self.coordinators)])

    def _step_down_all(self, lost: dict) -> None:
        """Stop the coordinators of a session that has ended, at once. Their
        election nodes went with the session; whatever holds those paths now
        is another session's and is left alone."""
        gevent.joinall([gevent.spawn(coordinator.stop) for coordinator in lost.values()])
        for slot, coordinator in sorted(lost.items()):
            log.info("server %d resigned as coordinator of slot %d (epoch %d): its ZooKeeper session ended",
                     self.config.server_id, slot, coordinator.epoch)
