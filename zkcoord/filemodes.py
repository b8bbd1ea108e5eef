"""Directories only their owner may enter: where zkcoord and its ZooKeeper keep data.

What the listeners and ZooKeeper's ACLs guard is also on disk: a broker's
partition logs hold every record, whatever the topic's ACLs; ZooKeeper's
snapshots and transaction logs hold every node, the users' SCRAM credentials
(/config/users) among them, from which passwords can be guessed offline. So
such a directory is made its owner's alone (0700), and one found open to
others is closed, saying so, since the files in it were made for a
directory nobody else could enter.
"""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path

log = logging.getLogger(__name__)

OWNER_ONLY = 0o700
# The umask for a process whose files (ZooKeeper's) should be its owner's alone.
OWNER_ONLY_UMASK = 0o077
# A file zkcoord makes that only its owner reads and writes (a node's log).
OWNER_ONLY_FILE = 0o600


def private_directory(path: Path, holds: str) -> Path:
    """Make ``path`` a directory only its owner may enter (its missing parents
    are made as usual). One that exists open to others is closed, with a
    warning naming what it ``holds``; one that cannot be closed (another
    user's) is left with a warning."""
    path = Path(path)
    path.mkdir(mode=OWNER_ONLY, parents=True, exist_ok=True)
    mode = stat.S_IMODE(path.stat().st_mode)
    if mode & ~OWNER_ONLY:
        try:
            os.chmod(path, OWNER_ONLY)
        except OSError as exc:
            log.warning("%s holds %s and is open to others (mode %04o), and could not be closed: %s",
                        path, holds, mode, exc.strerror)
        else:
            log.warning("%s holds %s and was open to others (mode %04o): now its owner's alone (%04o)",
                        path, holds, mode, OWNER_ONLY)
    return path


def open_private_log(path: Path) -> int:
    """A file descriptor appending to ``path``, made its owner's alone if new."""
    return os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, OWNER_ONLY_FILE)


__all__ = ["OWNER_ONLY", "OWNER_ONLY_FILE", "OWNER_ONLY_UMASK", "open_private_log", "private_directory"]
