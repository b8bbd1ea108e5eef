"""The partitions' log ends as last learnt from their leaders.

Owns what each partition's leader last said of where its log ends (with
the leader's epoch and the question it answered), the topics' ids as the
topic watches last said, and the numbering of questions. An offset at or
below a learnt log end is committed without asking again; one above it
waits for an answer (offsets.py, resets.py). Pure: it asks nothing itself.
"""

from __future__ import annotations

import itertools
import logging
from dataclasses import dataclass
from typing import Mapping, Optional

from zkcoord.records import TopicPartition

log = logging.getLogger(__name__)


def beyond_log_end(tp: TopicPartition, offset: int, log_end: Optional[int]) -> Optional[str]:
    """Why ``offset`` may not be committed for ``tp`` given its log end
    (None: not learnt), or None if it may. An offset is the next record to
    consume, so the log end itself is the highest allowed: committing more
    would make the group skip records not yet written, for good."""
    if log_end is None:
        return (f"offset {offset} for {tp[0]}-{tp[1]} could not be checked: the partition's leader did not say "
                "where its log ends")
    if offset > log_end:
        return f"offset {offset} for {tp[0]}-{tp[1]} is beyond the partition's log end {log_end}"
    return None


@dataclass(frozen=True)
class KnownLogEnd:
    """A partition's log end as last learnt: the offset, the epoch of the
    leader that said it (-1: not said), and the question it answered."""

    offset: int
    leader_epoch: int
    question: int

    def older_than(self, leader_epoch: int, question: int) -> bool:
        """Whether an answer from a leader of ``leader_epoch`` to question
        ``question`` is newer: a later leader's is, whatever it says (the log
        may have lost its tail with the leadership); within one epoch, or
        where either is not said, the answer to the later question is."""
        if leader_epoch >= 0 and self.leader_epoch >= 0 and leader_epoch != self.leader_epoch:
            return leader_epoch > self.leader_epoch
        return question > self.question


@dataclass(frozen=True)
class LogEndQuestion:
    """A question to the leaders (numbered in the order asked), with the
    topics' ids when it was asked: an answer about a topic deleted (and
    maybe created again) since says nothing of the topic there is now."""

    number: int
    topic_ids: Mapping[str, Optional[str]]


class KnownLogEnds:
    def __init__(self) -> None:
        self.ends: dict[TopicPartition, KnownLogEnd] = {}
        self.topic_ids: dict[str, Optional[str]] = {}  # topic -> its id in ZooKeeper (None: it has none)
        self._questions = itertools.count(1)

    def topic_changed(self, topic: str, count: int, topic_id: Optional[str]) -> None:
        """The topic watch saw ``topic`` with ``count`` partitions (0: gone) and id ``topic_id``."""
        # A topic deleted, or created again (a new id, maybe the same count), starts its logs anew.
        recreated = not count or self.topic_ids.get(topic) != topic_id
        for tp in [tp for tp in self.ends if tp[0] == topic and (recreated or tp[1] >= count)]:
            del self.ends[tp]
        self.topic_ids[topic] = topic_id

    def of(self, tp: TopicPartition) -> int:
        """The log end learnt last of ``tp``, -1 if none is known."""
        known = self.ends.get(tp)
        return -1 if known is None else known.offset

    def question(self, partitions) -> LogEndQuestion:
        """A new question about ``partitions``, to number the answer by."""
        return LogEndQuestion(next(self._questions), {tp[0]: self.topic_ids.get(tp[0]) for tp in partitions})

    def renewed(self, partitions, question: LogEndQuestion) -> frozenset[TopicPartition]:
        """Those of ``partitions`` whose topic was deleted or created again since ``question`` was asked."""
        return frozenset(tp for tp in partitions if self.topic_ids.get(tp[0]) != question.topic_ids.get(tp[0]))

    def learn(self, found, question: LogEndQuestion) -> Mapping[TopicPartition, int]:
        """Learn the answer ``found`` (partition -> LogEnd, or None) to
        ``question``; returns the log ends that judge the offsets it asked
        about. A newer answer replaces what was learnt, even a lower one (a
        log that lost its tail: what is beyond it now is beyond it), an older
        one (KnownLogEnd.older_than) does not. An offset is judged by this
        answer or a later question's, never by an answer to a question
        asked before it was reported (it may since have been written): with
        a newer leader's answer to an earlier question, it is not judged.
        An answer about a topic since deleted or created again is ignored."""
        judged = {}
        for tp, end in (found or {}).items():
            if self.topic_ids.get(tp[0]) != question.topic_ids.get(tp[0]):
                continue
            known = self.ends.get(tp)
            if known is None or known.older_than(end.leader_epoch, question.number):
                if known is not None and end.offset < known.offset:
                    log.warning("the log of %s-%d ends at %d (leader epoch %d), below the %d learnt before "
                                "(leader epoch %d): it lost its tail", tp[0], tp[1], end.offset, end.leader_epoch,
                                known.offset, known.leader_epoch)
                known = self.ends[tp] = KnownLogEnd(end.offset, end.leader_epoch, question.number)
            if known.question >= question.number:
                judged[tp] = known.offset
        return judged
