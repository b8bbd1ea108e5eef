"""What the fetcher does about each answer a leader gives for a partition:
the decisions, apart from the I/O (``columnar.py`` carries them out).

A replicated partition changes leaders (a broker killed, shut down, a
preferred leader elected again), and each leader has an *epoch*, one higher
per election. The fetcher learns a partition's leader and its epoch from
Metadata and sends the epoch with every Fetch (``current_leader_epoch``), so
a broker that no longer leads, or does not lead yet, says so instead of
answering from a log that is not the partition's:

- ``NOT_LEADER_OR_FOLLOWER``, ``FENCED_LEADER_EPOCH`` (our epoch is older
  than the broker's: our metadata is stale), ``UNKNOWN_LEADER_EPOCH`` (newer
  than the broker's: it has not heard of the election yet), and the other
  errors of leadership moving: find the leader again, after a short backoff;
- ``OFFSET_OUT_OF_RANGE``: read the log's bounds, then :func:`out_of_range`;
- any other error: the consumer hears of it; TOPIC_AUTHORIZATION_FAILED
  (from Metadata or Fetch: an ACL is missing) as an authorization error.

A leader elected uncleanly (a replica that was not in sync) may lack
records that were committed and already delivered: the log was *truncated*
under the consumer. The fetcher sends, with each Fetch, the epoch of the last
batch it fetched (``last_fetched_epoch``); a leader whose log ends that epoch
before the fetch offset answers with the *diverging epoch* and where it ends
(Fetch 12 and later, as followers learn it). :func:`diverged` turns that
into a :class:`Truncation` when that end lies below the fetch position:
fetching resumes at the divergence point, so that the records the new leader
holds there are read, neither skipped (fetching on from the old position)
nor read again unannounced: the fetcher logs a warning and counts it. An
epoch that ends at or beyond the position truncated nothing the fetcher
read: it is :class:`EpochAhead`, and the fetcher only takes the epoch. A position beyond the end of a log whose epochs were
not known shows up as ``OFFSET_OUT_OF_RANGE`` instead (a broker without
Fetch 12): if the fetcher had read up to there, it resumes at the log's
end, also as a truncation; a position it never read (a committed offset) is
the reset policy's, as in Kafka's consumer.
"""

from __future__ import annotations

import enum
from typing import NamedTuple, Optional, Union

from zkcoord.fetch.cluster import TOPIC_AUTHORIZATION_FAILED

# Kafka's error codes this module decides on.
OFFSET_OUT_OF_RANGE = 1
UNKNOWN_TOPIC_OR_PARTITION = 3
LEADER_NOT_AVAILABLE = 5
NOT_LEADER_OR_FOLLOWER = 6
REPLICA_NOT_AVAILABLE = 9
KAFKA_STORAGE_ERROR = 56
FENCED_LEADER_EPOCH = 74
UNKNOWN_LEADER_EPOCH = 75
OFFSET_NOT_AVAILABLE = 78

# Leadership moving, or a leader not ready: the partition's leader is found
# again (Metadata), and the fetch retried there.
LEADERSHIP_ERRORS = frozenset({UNKNOWN_TOPIC_OR_PARTITION, LEADER_NOT_AVAILABLE, NOT_LEADER_OR_FOLLOWER,
                               REPLICA_NOT_AVAILABLE, KAFKA_STORAGE_ERROR, FENCED_LEADER_EPOCH,
                               UNKNOWN_LEADER_EPOCH, OFFSET_NOT_AVAILABLE})

NO_EPOCH = -1  # Kafka's "no epoch known": the broker checks nothing


class Step(enum.Enum):
    """What to do about a partition's error in a Fetch or ListOffsets answer."""

    FIND_LEADER = "find the leader again"  # after a backoff; the fetch is retried there
    READ_BOUNDS = "read the log's bounds"  # then decide with out_of_range()
    FAIL = "report the error"  # to the consumer, from its next fetch


def on_error(code: int, retriable: bool) -> Step:
    """The step for partition error ``code`` (``retriable``: Kafka says
    asking again may help)."""
    if code == OFFSET_OUT_OF_RANGE:
        return Step.READ_BOUNDS
    if code in LEADERSHIP_ERRORS or retriable:
        return Step.FIND_LEADER
    return Step.FAIL


class Truncation(NamedTuple):
    """The partition's log no longer holds what the fetcher read up to
    ``position``: fetching resumes at ``offset`` (with ``epoch`` as the
    last fetched epoch; NO_EPOCH if not known)."""

    position: int
    offset: int
    epoch: int


class EpochAhead(NamedTuple):
    """The leader's log holds everything below the fetch position, in
    ``epoch``, which ends at or beyond the position: nothing was truncated;
    fetching goes on from the position with ``epoch`` as the last fetched
    epoch (as Kafka's consumer completes a validation that finds no
    truncation)."""

    epoch: int


class Reset(NamedTuple):
    """Resume at the reset policy's bound: EARLIEST or LATEST (logical)."""

    logical: int


class OutOfRange(NamedTuple):
    """The reset policy is ``error``: the consumer is told."""

    offset: int
    log_start: int
    log_end: int


def diverged(position: int, diverging_epoch: int, end_offset: int) -> Union[Truncation, EpochAhead, None]:
    """What a Fetch answer's diverging epoch means for a fetcher at
    ``position``: None when the answer names none (epoch -1, as Kafka sends
    it when the logs agree); the truncation to its end offset when that lies
    below the position; else :class:`EpochAhead` (what lies below the
    position was read from the log as it still is)."""
    if diverging_epoch < 0 or end_offset < 0:
        return None
    if end_offset >= position:
        return EpochAhead(diverging_epoch)
    return Truncation(position, end_offset, diverging_epoch)


def out_of_range(offset: int, log_start: int, log_end: int, reset: str, read_here: bool,
                 earliest: int, latest: int) -> Union[Truncation, Reset, OutOfRange, None]:
    """What an OFFSET_OUT_OF_RANGE at ``offset`` means, given the log's
    bounds as its leader reads them now (``log_end``: the high watermark),
    and whether the fetcher reached ``offset`` by reading this log
    (``read_here``) rather than being told it (an assignment's offset).

    - Beyond the end of a log read up to there: the log was truncated under
      the fetcher (a leader elected uncleanly lacks what was read): resume at
      its end, whatever the reset policy, which is for positions a log never
      held or has deleted.
    - Beyond the end of a position not read here, or before the start
      (retention deleted it): the reset policy, ``earliest`` or ``latest``
      (EARLIEST or LATEST, as the fetcher spells them), or ``error``.
    - Within the bounds: the answer came from a broker that no longer leads,
      or the log moved meanwhile: None, find the leader and fetch again.
    """
    if offset > log_end and read_here:
        return Truncation(offset, log_end, NO_EPOCH)
    if offset < log_start or offset > log_end:
        if reset == "error":
            return OutOfRange(offset, log_start, log_end)
        return Reset(earliest if reset == "earliest" else latest)
    return None


def recreated(known_topic_id: Optional[str], answered_topic_id: Optional[str]) -> bool:
    """Whether Metadata naming topic id ``answered_topic_id`` is of another
    topic than the one known as ``known_topic_id``: the topic was deleted and
    created again under its name. Its epochs start anew (the new topic's
    leaders begin at 0), so what the fetcher knew of the old topic's epochs
    is forgotten, as Kafka's consumer does; otherwise every leader of the new
    topic would look older than the deposed ones of the old. None (an answer
    below Metadata 10, or nothing known yet) tells nothing."""
    return known_topic_id is not None and answered_topic_id is not None and known_topic_id != answered_topic_id


def newer_leader(known_epoch: int, answered_epoch: int) -> bool:
    """Whether Metadata naming a leader of epoch ``answered_epoch`` is news
    to a fetcher that knows ``known_epoch``: a broker's metadata cache lags
    the controller's, and an answer older than what was learned before would
    send the fetcher back to a deposed leader. An answer without epochs
    (NO_EPOCH: an older Metadata version) is taken as it is."""
    return answered_epoch == NO_EPOCH or known_epoch == NO_EPOCH or answered_epoch >= known_epoch


__all__ = ["EpochAhead", "LEADERSHIP_ERRORS", "NO_EPOCH", "OutOfRange", "TOPIC_AUTHORIZATION_FAILED", "Reset", "Step", "Truncation", "diverged", "newer_leader", "recreated",
           "on_error", "out_of_range"]
