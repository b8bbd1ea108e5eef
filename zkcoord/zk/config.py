"""A process's ZooKeeper session, as the server and the standalone broker ask for it.

One definition of the session's settings, in milliseconds as every other
duration of the project: the server (``zkcoord server``) and the broker
(``zkcoord broker``) both take ``--zk-session-timeout-ms`` from it.
"""

from __future__ import annotations

from dataclasses import dataclass

from zkcoord.settings import check, setting


@dataclass(frozen=True)
class ZooKeeperConfig:
    """The ZooKeeper session a process asks for (ZooKeeper may grant less or more)."""

    session_timeout_ms: int = setting(6000, "ZooKeeper session timeout asked for: how long ZooKeeper keeps "
                                            "the process's ephemeral nodes once it is no longer heard",
                                      minimum=500, flag="--zk-session-timeout-ms")

    def __post_init__(self) -> None:
        check(self)
