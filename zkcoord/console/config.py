"""The console's settings (`zkcoord console`). Imports neither Flask nor
gevent, so the command declares its options before gevent patches the process."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from zkcoord.settings import PORT, check, ip_address, setting


@dataclass(frozen=True)
class ConsoleConfig:
    """Where the console listens, what it shows, and who may see it."""

    host: str = setting("127.0.0.1", "address the console binds", validate=ip_address)
    port: int = setting(8080, "HTTP port of the console (0: a free one, written to the port file)", **PORT)
    drills: Optional[str] = setting(None, "a directory of drill histories (each as `zkcoord drill --dir` "
                                          "wrote it), or one drill's: the Drills page shows them "
                                          "(default: no Drills page)", non_empty=True)
    refresh_ms: int = setting(1000, "how often an open group page asks for the group's ownership again",
                              minimum=100, maximum=60_000)
    require_login: bool = setting(False, "ask for a user's password (zkcoord users) even though ZooKeeper "
                                         "is not secured; with ZooKeeper credentials or TLS a login is "
                                         "always required")
    session_ms: int = setting(8 * 3600 * 1000, "a login lasts this long", minimum=1000)

    def __post_init__(self) -> None:
        check(self)
