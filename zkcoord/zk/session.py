"""What belongs to this client's ZooKeeper session: its id, the ephemeral
nodes it owns, and the session timeout ZooKeeper granted (which kazoo
does not expose).

ZooKeeper may grant a session a shorter timeout than the one asked for (at
most its maxSessionTimeout, 20 ticks by default), and the coordinator dates
its office from the granted one (coordinator/lease.py). kazoo (pinned in
setup.py) keeps the negotiated value local to its connect routine and only
logs it, so :class:`SessionTimeoutWitness` is the logger we hand kazoo: it
passes every record on unchanged and remembers the value from the
"Session created" record, whatever the log level. tests/zk checks it against
a real ensemble that grants less than asked.
"""

from __future__ import annotations

import logging
import time
from typing import Optional

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

KAZOO_LOGGER = "kazoo.client"
# kazoo's record: "Session created, session_id: %r session_passwd: %s\n
# negotiated session timeout: %s\n ...", with the timeout as third argument.
SESSION_CREATED = "Session created"
TIMEOUT_ARGUMENT = 2


class SessionTimeoutWitness(logging.LoggerAdapter):
    """kazoo's logger, which also remembers the negotiated session timeout."""

    def __init__(self, logger: Optional[logging.Logger] = None):
        super().__init__(logger or logging.getLogger(KAZOO_LOGGER), {})
        self.negotiated_ms: Optional[int] = None

    def log(self, level, msg, *args, **kwargs):
        # Before the level check: kazoo logs it at its lowest level.
        if isinstance(msg, str) and msg.startswith(SESSION_CREATED) and len(args) > TIMEOUT_ARGUMENT:
            self.negotiated_ms = int(args[TIMEOUT_ARGUMENT])
        super().log(level, msg, *args, **kwargs)

    def warn(self, msg, *args, **kwargs):  # kazoo still calls the old name
        self.warning(msg, *args, **kwargs)


def session_id(zk: KazooClient) -> Optional[int]:
    """The id of the client's current session (None before the first)."""
    client_id = zk.client_id
    return client_id[0] if client_id else None


def create_own_ephemeral(zk: KazooClient, path: str, value: bytes, wait_s: float = 0.0) -> bool:
    """Create the ephemeral node at ``path`` for this session (or find it
    this session's already); True once it is ours. A node of another
    session is waited for, up to ``wait_s``, through a watch on it: a
    process restarted right after a crash finds its dead self's node, which
    lives until that session expires. False if another session still holds
    it then (a live process with the same identity): the caller's to say."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            zk.create(path, value, ephemeral=True, makepath=True)
            return True
        except NodeExistsError:
            pass
        gone = zk.handler.event_object()
        stat = zk.exists(path, watch=lambda _event: gone.set())
        if stat is None:
            continue  # expired between the two requests
        if stat.ephemeralOwner == session_id(zk):
            return True
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return False
        logging.getLogger(__name__).info("%s is held by an earlier session: waiting up to %.1f s for it to "
                                         "expire", path, remaining)
        gone.wait(remaining)


# Deleting a node of ours while stopping or resigning waits this long for
# ZooKeeper at most: the node is ephemeral and goes with the session anyway.
STOPPING_DELETE_TIMEOUT_S = 2.0


def delete_if_owned(zk: KazooClient, path: str, timeout: Optional[float] = None) -> None:
    """Delete the ephemeral node at ``path`` if this session owns it; a node
    gone already, or changed meanwhile, is left as it is. Connection errors
    are the caller's (a node left behind goes with its session anyway), and so
    is the handler's timeout exception when ``timeout`` seconds pass: a process
    stopping while its ZooKeeper is unreachable must not wait for a
    reconnection that may never come (kazoo queues requests until then)."""
    if zk.state == KazooState.LOST:
        return  # the session has ended, and its ephemeral nodes with it
    try:
        _, stat = zk.get_async(path).get(timeout=timeout)
        if stat.ephemeralOwner == session_id(zk):
            zk.delete_async(path, version=stat.version).get(timeout=timeout)
    except (NoNodeError, BadVersionError):
        pass
