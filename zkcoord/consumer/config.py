"""The thin consumer's settings: its membership's, and how poll() hands out records."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from zkcoord.fetch.isolation import ISOLATION_LEVELS, READ_UNCOMMITTED
from zkcoord.member.config import MemberConfig
from zkcoord.settings import of, setting


@dataclass(frozen=True)
class ConsumerConfig(MemberConfig):
    """A :class:`Consumer`'s settings: its membership's, and how poll() hands out records."""

    # Seed 003 (max.poll.records): also what the consumer prefetches.
    max_poll_records: int = setting(500, "most records one poll() returns", minimum=1)
    isolation_level: str = setting(READ_UNCOMMITTED, "what is read of transactional producers: every record "
                                                     "(read_uncommitted), or only committed transactions' up to "
                                                     "the last stable offset (read_committed); transaction "
                                                     "markers never", choices=tuple(ISOLATION_LEVELS))

    @classmethod
    def of(cls, config: Optional["ConsumerConfig"] = None, **settings) -> "ConsumerConfig":
        return of(cls, config, settings)
