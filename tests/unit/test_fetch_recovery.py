"""The fetcher's decisions on a leader's answers (zkcoord.fetch.recovery),
apart from any broker: each error's step, truncations from a diverging epoch
and from an offset out of range, and metadata that lags."""

from __future__ import annotations

import pytest

from zkcoord.fetch import recovery
from zkcoord.fetch.recovery import NO_EPOCH, EpochAhead, OutOfRange, Reset, Step, Truncation

EARLIEST, LATEST = -2, -1


@pytest.mark.parametrize("code", [recovery.NOT_LEADER_OR_FOLLOWER, recovery.FENCED_LEADER_EPOCH,
                                  recovery.UNKNOWN_LEADER_EPOCH, recovery.LEADER_NOT_AVAILABLE,
                                  recovery.UNKNOWN_TOPIC_OR_PARTITION, recovery.REPLICA_NOT_AVAILABLE,
                                  recovery.OFFSET_NOT_AVAILABLE, recovery.KAFKA_STORAGE_ERROR])
def test_leadership_errors_find_the_leader_again(code):
    assert recovery.on_error(code, retriable=False) is Step.FIND_LEADER


def test_out_of_range_reads_the_bounds_and_other_errors_are_reported_unless_retriable():
    assert recovery.on_error(recovery.OFFSET_OUT_OF_RANGE, retriable=False) is Step.READ_BOUNDS
    assert recovery.on_error(29, retriable=False) is Step.FAIL  # TOPIC_AUTHORIZATION_FAILED
    assert recovery.on_error(7, retriable=True) is Step.FIND_LEADER  # REQUEST_TIMED_OUT


def test_no_diverging_epoch_is_no_truncation():
    assert recovery.diverged(30, NO_EPOCH, -1) is None


def test_diverging_epoch_resumes_at_its_end_offset_with_that_epoch():
    # Read up to 30 in epoch 1; the new leader's log ends epoch 0 at 20.
    assert recovery.diverged(30, 0, 20) == Truncation(position=30, offset=20, epoch=0)


def test_a_diverging_epoch_ending_at_or_beyond_the_position_truncated_nothing_only_the_epoch_is_taken():
    # The leader's epoch 2 ends at 45 (or at 30): the log holds everything
    # read below 30 as it was, so nothing is truncated, re-read or counted.
    assert recovery.diverged(30, 2, 45) == EpochAhead(epoch=2)
    assert recovery.diverged(30, 2, 30) == EpochAhead(epoch=2)
    assert recovery.diverged(30, 2, 29) == Truncation(position=30, offset=29, epoch=2)


def test_out_of_range_beyond_the_end_of_a_log_read_up_to_there_is_a_truncation_whatever_the_policy():
    for reset in ("earliest", "latest", "error"):
        assert recovery.out_of_range(30, 0, 20, reset, True, EARLIEST, LATEST) == Truncation(30, 20, NO_EPOCH)


def test_out_of_range_of_an_offset_never_read_is_the_reset_policys():
    assert recovery.out_of_range(1000, 0, 5, "earliest", False, EARLIEST, LATEST) == Reset(EARLIEST)
    assert recovery.out_of_range(1000, 0, 5, "latest", False, EARLIEST, LATEST) == Reset(LATEST)
    assert recovery.out_of_range(1000, 0, 5, "error", False, EARLIEST, LATEST) == OutOfRange(1000, 0, 5)


def test_out_of_range_before_the_start_is_the_reset_policys_even_when_read():
    assert recovery.out_of_range(3, 10, 50, "earliest", True, EARLIEST, LATEST) == Reset(EARLIEST)
    assert recovery.out_of_range(3, 10, 50, "latest", True, EARLIEST, LATEST) == Reset(LATEST)
    assert recovery.out_of_range(3, 10, 50, "error", True, EARLIEST, LATEST) == OutOfRange(3, 10, 50)


def test_out_of_range_within_the_bounds_asks_the_leader_again():
    assert recovery.out_of_range(20, 0, 50, "error", True, EARLIEST, LATEST) is None


def test_metadata_naming_an_older_leader_epoch_is_not_taken():
    assert recovery.newer_leader(5, 6) and recovery.newer_leader(5, 5)
    assert not recovery.newer_leader(5, 4)
    assert recovery.newer_leader(NO_EPOCH, 0) and recovery.newer_leader(5, NO_EPOCH)


def test_a_topic_created_again_under_its_name_starts_its_epochs_anew():
    # Leader epoch 7 of the deleted topic; the new one's leader is at epoch 0.
    assert recovery.recreated("old-id", "new-id")
    assert not recovery.newer_leader(7, 0), "without forgetting, the new topic's leader would be refused forever"
    assert not recovery.recreated("old-id", "old-id")
    assert not recovery.recreated(None, "new-id") and not recovery.recreated("old-id", None)


def test_the_fetchers_truncation_counter_sums_its_topics():
    from prometheus_client import CollectorRegistry

    from zkcoord.metrics.families import FetcherMetrics

    metrics = FetcherMetrics(CollectorRegistry())
    assert metrics.truncations() == 0
    metrics.truncated("a")
    metrics.truncated("b")
    metrics.truncated("a")
    assert metrics.truncations() == 3
