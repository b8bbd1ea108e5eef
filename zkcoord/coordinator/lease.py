"""Fences: partitions a member may still be fetching although the coordinator no longer counts on it.

The coordinator's half of the lease rule (docs/DESIGN.md). A member may
deliver until ``T`` (its session timeout) after it sent the answer before
the last request it obeyed; every request the coordinator sends leaves after
that answer arrived. So from the coordinator's last send to a member,
``T + margin`` later the member's lease has surely ended, whatever became of
the request on its way. Whenever the coordinator drops a member without an
acknowledgement that it stopped (no answer, a connection that only this
side saw close, eviction, a static member gone, a failover), the partitions
it may be running are fenced until then: nobody is started on them before.

A fence lifts early when its holder registers again (a member stops
everything before it registers, but what it says it keeps, which it may
keep only while it alone may be running it: ``keepable``) or acknowledges a
Stop of the partition.
Registering again lifts it only with proof that it is the same process: the
incarnation secret that process registered with (wire/README.md,
RegisterConsumerRequest version 4). Member ids are no secret (operators list
them; KIP-848 clients choose their own), so anyone else registering under a
fenced id waits for the fence like everybody else.

A fence may hold a whole group: a successor that cannot read what its
predecessor persisted of a group (a state node that does not decode) knows
neither who may be fetching nor what, and fences everything the group has
for the longest lease any member may hold.

A fence that lapses still leaves a trace: until someone is sent a Start of
the partition, its holder was the last to run it, so the final offsets it
hands over when it registers again are exact, however late it comes back.

The coordinator holds a lease of its own, on its office: it may send a
request only while its ZooKeeper session is provably alive, so that every
request it sends precedes the election of a successor (``office_end``).

Pure state; times are plain floats from the caller's clock.
"""

from __future__ import annotations

import hashlib
from typing import Iterable, Optional

from zkcoord.records import TopicPartition

# The holder named for a fence on a whole group (holders(), in logs): no
# member id, which never holds "<".
WHOLE_GROUP = "<unknown members of an unreadable state>"


def incarnation_proof(incarnation: str, principal: object) -> str:
    """What the coordinator keeps (and persists) of a member's incarnation
    secret: a digest of it and of the principal that registered it, so that
    ZooKeeper and memory never hold the secret itself, and a secret replayed
    by another principal (captured on a link without TLS, say) proves
    nothing. "" for no incarnation: nothing then proves it."""
    if not incarnation:
        return ""
    return hashlib.sha256(b"zkcoord incarnation\0" + str(principal).encode("utf-8") + b"\0"
                          + incarnation.encode("utf-8")).hexdigest()


def lease_end(last_sent: float, session_timeout_ms: int, margin_ms: int) -> float:
    """When a member last sent a request at ``last_sent`` surely holds no lease any more."""
    return last_sent + (session_timeout_ms + margin_ms) / 1000.0


# The share of its ZooKeeper session timeout for which a successful round
# trip keeps the coordinator in office. ZooKeeper expires a session only
# after hearing nothing from it for the whole timeout S, and a round trip
# begun at t was heard after t. The third held back covers the clocks'
# rates and the network; kazoo itself gives a connection up after 2S/3 of
# silence. (What it does not cover is in docs/DESIGN.md: a follower passes
# the heartbeat on to the leader up to half a tick late.)
OFFICE_SHARE = 2 / 3
# How often the office is renewed, as a share of the session timeout: a
# renewal that fails still leaves 2S/3 - S/4 of office for the next one.
OFFICE_RENEWAL_SHARE = 1 / 4


def office_end(proven_at: float, session_timeout_ms: int) -> float:
    """Until when a coordinator whose ZooKeeper round trip began at
    ``proven_at`` and succeeded may send requests."""
    return proven_at + session_timeout_ms * OFFICE_SHARE / 1000.0


class Fences:
    """Per partition, the members that may still fetch it, and until when."""

    def __init__(self) -> None:
        self._until: dict[TopicPartition, dict[str, float]] = {}
        # Per partition, the holders fenced on it since anyone was last started on it.
        self._last_ran: dict[TopicPartition, set[str]] = {}
        # Per holder, the proof of the incarnation that was fenced (incarnation_proof):
        # only a registration showing it lifts the fence or hands over.
        self._proofs: dict[str, str] = {}
        # A fence on every partition of the group, whoever holds it (-inf: none).
        self._whole_until = float("-inf")
        # Per holder, every partition it is named on above (and perhaps some
        # it no longer is: they are dropped with the holder), so that a
        # member that registers again is looked up among its own partitions,
        # not among the 20,000 a group taken over may have fenced.
        self._named_on: dict[str, set[TopicPartition]] = {}

    def fence(self, holder: str, partitions: Iterable[TopicPartition], until: float, proof: str = "") -> None:
        """``holder`` may fetch ``partitions`` until ``until``; ``proof`` is
        the proof of its incarnation ("" for none: nothing lifts the fence early)."""
        partitions = list(partitions)
        if not partitions:
            return
        for tp in partitions:
            holders = self._until.setdefault(tp, {})
            holders[holder] = max(until, holders.get(holder, until))
            self._last_ran.setdefault(tp, set()).add(holder)
        self._named_on.setdefault(holder, set()).update(partitions)
        # Two incarnations fenced under one id (a stranger admitted under it,
        # dropped in turn): release() would lift both processes' fences, so
        # neither proves anything any more; their fences run out.
        known = self._proofs.get(holder)
        self._proofs[holder] = proof if known is None or known == proof else ""

    def fence_whole_group(self, until: float) -> None:
        """Nobody is started on anything before ``until``: who may be fetching what is not known."""
        self._whole_until = max(self._whole_until, until)

    def proves(self, holder: str, proof: str) -> bool:
        """Is ``proof`` that of the incarnation last fenced as ``holder``?"""
        return bool(proof) and self._proofs.get(holder) == proof

    def keepable(self, holder: str, proof: str, partitions: Iterable[TopicPartition], now: float,
                 settled: frozenset[TopicPartition] = frozenset()) -> frozenset[TopicPartition]:
        """Of ``partitions``, those ``holder`` alone may be running at ``now``,
        as far as the fences tell: the incarnation that shows ``proof`` is the
        one fenced, its fence on the partition still holds (its lease may
        still run), nobody has been started on it since, no fence holds the
        whole group (a state that could not be read), and nobody else is
        fenced on it, but for the partitions of ``settled``, which the caller
        knows the others have stopped. (A successor fences a partition on
        both its old and its new holder when the last persisted generation
        moved it: the round may have been cut short.) A member back with
        these may keep them (RegisterConsumerRequest version 6)."""
        if not self.proves(holder, proof) or self._whole_until > now:
            return frozenset()
        kept = set()
        for tp in partitions:
            holders = self._until.get(tp)
            if (holders is not None and holders.get(holder, now) > now and (len(holders) == 1 or tp in settled)
                    and holder in self._last_ran.get(tp, ())):
                kept.add(tp)
        return frozenset(kept)

    def kept_by(self, holder: str, partitions: Iterable[TopicPartition]) -> None:
        """``holder`` keeps running ``partitions`` (keepable): whoever else is
        fenced on them has stopped them, and holds no claim to them any more."""
        for tp in partitions:
            for other in [h for h in self._until.get(tp, ()) if h != holder]:
                self.release(other, (tp,))

    def shared(self, holder: str, partitions: Iterable[TopicPartition]) -> frozenset[TopicPartition]:
        """Of ``partitions``, those ``holder`` is fenced on with someone else."""
        return frozenset(tp for tp in partitions if holder in self._until.get(tp, ()) and len(self._until[tp]) > 1)

    def release(self, holder: str, partitions: Optional[Iterable[TopicPartition]] = None) -> None:
        """``holder`` has stopped ``partitions`` (all it held if None), and
        handed over or reported what it had consumed of them."""
        if partitions is None:
            self._proofs.pop(holder, None)
        for tp in self._named_on.pop(holder, ()) if partitions is None else partitions:
            holders = self._until.get(tp)
            if holders is not None:
                holders.pop(holder, None)
                if not holders:
                    del self._until[tp]
            ran = self._last_ran.get(tp)
            if ran is not None:
                ran.discard(holder)
                if not ran:
                    del self._last_ran[tp]

    def claimed(self, partitions: Iterable[TopicPartition]) -> None:
        """Someone is sent a Start of ``partitions`` (it may begin at once, from
        the committed offsets): what their earlier holders would hand over
        for them is stale from now on."""
        for tp in partitions:
            self._last_ran.pop(tp, None)

    def last_ran_by(self, holder: str) -> frozenset[TopicPartition]:
        """Partitions ``holder`` was fenced on, nobody having been started on
        them since (whether or not its fence still holds): it ran them last."""
        return frozenset(tp for tp in self._named_on.get(holder, ()) if holder in self._last_ran.get(tp, ()))

    def until(self, now: float, partitions: Optional[Iterable[TopicPartition]] = None) -> Optional[float]:
        """The instant all of ``partitions`` (all fenced ones if None) are free,
        or None if they are free at ``now``. Forgets fences that have lapsed
        (and, asked about everything, the proofs nobody can use any more)."""
        if self._whole_until <= now:
            self._whole_until = float("-inf")
        for tp in list(self._until):
            holders = self._until[tp]
            for holder in [h for h, t in holders.items() if t <= now]:
                del holders[holder]
            if not holders:
                del self._until[tp]
        if partitions is None:
            known = {h for holders in self._last_ran.values() for h in holders}
            known.update(h for holders in self._until.values() for h in holders)
            for holder in [h for h in self._named_on if h not in known]:  # every proof's holder is named on
                del self._named_on[holder]
                self._proofs.pop(holder, None)
        else:
            partitions = list(partitions)
        wanted = self._until if partitions is None else [tp for tp in partitions if tp in self._until]
        ends = [max(self._until[tp].values()) for tp in wanted]
        if self._whole_until > now and (partitions is None or partitions):
            ends.append(self._whole_until)
        return max(ends, default=None)

    def holders(self) -> frozenset[str]:
        named = frozenset(h for holders in self._until.values() for h in holders)
        return named | {WHOLE_GROUP} if self._whole_until > float("-inf") else named

    def __bool__(self) -> bool:
        return bool(self._until) or self._whole_until > float("-inf")
