"""The coordinator's settings (seed 001 section 2), validated on creation."""

from __future__ import annotations

from dataclasses import dataclass

from zkcoord.errors import ConfigError

REBALANCE_PROTOCOLS = ("incremental", "eager")


@dataclass(frozen=True)
class CoordinatorConfig:
    """The coordinator's knobs (seed 001 section 2), validated on creation."""

    min_session_timeout_ms: int = 1000
    max_session_timeout_ms: int = 60_000
    max_rebalance_retries: int = 4
    rebalance_backoff_ms: int = 500
    rebalance_timeout_ms: int = 10_000  # wait for every Stop and Start answer
    offset_flush_interval_ms: int = 1000
    lease_margin_ms: int = 200  # slack for the members' clocks running slower than ours
    rebalance_delay_ms: int = 100  # joins and leaves within this delay make one rebalance
    # A new group's first round waits this long after each join (up to the
    # rebalance timeout after the first), so that a crowd joining at once
    # makes one round rather than one per join (Kafka's group.initial.rebalance.delay.ms).
    initial_rebalance_delay_ms: int = 1000
    rebalance_protocol: str = "incremental"  # or "eager": seed 001's stop-all/start-all

    def __post_init__(self) -> None:
        if self.rebalance_protocol not in REBALANCE_PROTOCOLS:
            raise ConfigError(f"rebalance_protocol must be one of {REBALANCE_PROTOCOLS}, "
                              f"not {self.rebalance_protocol!r}")
        positive = (
            "min_session_timeout_ms", "max_session_timeout_ms",
            "rebalance_timeout_ms", "offset_flush_interval_ms",
        )
        for name in positive:
            if getattr(self, name) <= 0:
                raise ConfigError(f"{name} must be positive, not {getattr(self, name)}")
        for name in ("max_rebalance_retries", "rebalance_backoff_ms", "lease_margin_ms", "rebalance_delay_ms",
                     "initial_rebalance_delay_ms"):
            if getattr(self, name) < 0:
                raise ConfigError(f"{name} must not be negative, not {getattr(self, name)}")
        if self.min_session_timeout_ms > self.max_session_timeout_ms:
            raise ConfigError("min_session_timeout_ms exceeds max_session_timeout_ms")
