"""Reading many ZooKeeper nodes at once, for the coordinator's store and the servers' metadata view."""

from __future__ import annotations

import logging
from typing import Callable, Hashable, Mapping, Optional, TypeVar

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from zkcoord.zk import layout

log = logging.getLogger(__name__)

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

# In batches: a few hundred requests in flight keep the round trips
# overlapped without flooding the client's request queue.
READ_BATCH = 200


def read_nodes(zk: KazooClient, paths: Mapping[K, str], decode: Callable[[K, bytes], V], what: str, *,
               watch: Optional[Callable] = None, keep_unreadable: bool = False) -> dict[K, Optional[V]]:
    """``decode(key, data)`` of every node in ``paths`` (key -> path), with
    many requests in flight together, each watched with ``watch`` if given.
    Absent nodes are left out, and so are those ``decode`` refuses with a
    LayoutError (logged as ``what``), unless ``keep_unreadable`` (then their
    value is None)."""
    result: dict = {}
    items = list(paths.items())
    for start in range(0, len(items), READ_BATCH):
        pending = {key: zk.get_async(path, watch=watch) for key, path in items[start:start + READ_BATCH]}
        for key, request in pending.items():
            try:
                data, _ = request.get()
                result[key] = decode(key, data)
            except NoNodeError:
                continue  # gone since it was listed
            except layout.LayoutError as exc:
                log.error("%s of %s unreadable: %s", what, key, exc)
                if keep_unreadable:
                    result[key] = None
    return result
