"""Reading many ZooKeeper nodes at once: for the coordinator's store, and under every reader of zk/nodes.py.

Small nodes (offsets, owners) are read many to a request with ZooKeeper's
multiRead (3.6 and later): a coordinator taking over 500 groups of 100
partitions reads 100,000 of them, and one request per node costs the
ZooKeeper client (kazoo is pure Python) more than anything else in a
failover. kazoo has no call for multiRead; :class:`MultiRead` is the request,
sent through the client's request queue (``KazooClient._call``, stable in the
pinned kazoo), so it is ordered with every other request of the session.
A ZooKeeper without multiRead closes the connection that sends one, so a
server checks the version first (:func:`check_multi_read`).
"""

from __future__ import annotations

import logging
import re
from collections import namedtuple
from functools import partial
from typing import TYPE_CHECKING, Callable, Hashable, Mapping, Optional, TypeVar

from kazoo.exceptions import EXCEPTIONS, NoNodeError
from kazoo.protocol.serialization import GetData, MultiHeader, int_struct, read_buffer, stat_struct
from kazoo.protocol.states import ZnodeStat

if TYPE_CHECKING:  # only named here: importing kazoo.client loads ssl, which a command
    # that gevent patches must not have loaded before it patches
    from kazoo.client import KazooClient

from zkcoord.errors import ZkcoordError
from zkcoord.zk import layout

log = logging.getLogger(__name__)

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

# In batches: a few hundred requests in flight keep the round trips
# overlapped without flooding the client's request queue.
READ_BATCH = 200
# The first ZooKeeper release with multiRead (ZOOKEEPER-3663).
MULTI_READ_SINCE = (3, 6)


class ZooKeeperTooOld(ZkcoordError):
    """The ZooKeeper server lacks an operation zkcoord needs."""


class MultiRead(namedtuple("MultiRead", "paths")):
    """ZooKeeper's multiRead of the data of ``paths`` (chrooted already):
    each answered on its own, as ``(data, stat)`` or the error in its place
    (NoNodeError for a node that is gone). Not atomic, and sets no watches."""

    type = 22  # OpCode.multiRead

    def serialize(self) -> bytes:
        request = bytearray()
        for path in self.paths:
            request += MultiHeader(GetData.type, False, -1).serialize() + GetData(path, None).serialize()
        return bytes(request + MultiHeader(-1, True, -1).serialize())

    @classmethod
    def deserialize(cls, buffer, offset: int) -> list:
        results: list = []
        header, offset = MultiHeader.deserialize(buffer, offset)
        while not header.done:
            if header.type == GetData.type:
                data, offset = read_buffer(buffer, offset)
                results.append((data, ZnodeStat._make(stat_struct.unpack_from(buffer, offset))))
                offset += stat_struct.size
            elif header.type == -1:  # this read's error
                code = int_struct.unpack_from(buffer, offset)[0]
                offset += int_struct.size
                results.append(EXCEPTIONS[code]())
            else:
                raise ValueError(f"multiRead answered with an operation of type {header.type}")
            header, offset = MultiHeader.deserialize(buffer, offset)
        return results


# What read_nodes does with a node whose data ``decode`` refuses (LayoutError).
SKIP = "skip"  # log it and leave it out
KEEP = "keep"  # log it and give it the value None
RAISE = "raise"  # raise the LayoutError
UNREADABLE = (SKIP, KEEP, RAISE)


def read_nodes(zk: KazooClient, paths: Mapping[K, str], decode: Callable[[K, bytes], V], what: str, *,
               watch: Optional[Callable] = None, unreadable: str = SKIP,
               small: bool = False) -> dict[K, Optional[V]]:
    """``decode(key, data)`` of every node in ``paths`` (key -> path), with
    many requests in flight together, each watched with ``watch`` if given.
    Absent nodes are left out. A node ``decode`` refuses with a LayoutError
    is logged as ``what`` and left out, kept as None, or raised, as
    ``unreadable`` says (SKIP, KEEP, RAISE). ``small``: the nodes are a few
    bytes each, so a batch goes as one multiRead (not with ``watch``, which
    multiRead cannot set)."""
    if unreadable not in UNREADABLE:
        raise ValueError(f"unreadable must be one of {UNREADABLE}, got {unreadable!r}")
    result: dict = {}
    items = list(paths.items())
    for start in range(0, len(items), READ_BATCH):
        batch = items[start:start + READ_BATCH]
        if small and watch is None:
            answers = _read_together(zk, batch)
        else:
            answers = [(key, zk.get_async(path, watch=watch).get) for key, path in batch]
        for key, answer in answers:
            try:
                data, _ = answer()
                result[key] = decode(key, data)
            except NoNodeError:
                continue  # gone since it was listed
            except layout.LayoutError as exc:
                if unreadable == RAISE:
                    raise
                log.error("%s of %s unreadable: %s", what, key, exc)
                if unreadable == KEEP:
                    result[key] = None
    return result


def _returning(value):
    """The answer of one node of a multiRead: its (data, stat), or its error raised."""
    if isinstance(value, Exception):
        raise value
    return value


def _read_together(zk: KazooClient, batch: list) -> list:
    """One multiRead of the batch's nodes: [(key, answer)], each answer
    called for the node's (data, stat)."""
    chroot = zk.chroot or ""
    answer = zk.handler.async_result()
    zk._call(MultiRead([chroot + path for _, path in batch]), answer)
    results = answer.get()
    if len(results) != len(batch):
        raise ValueError(f"multiRead of {len(batch)} nodes answered {len(results)}")
    return [(key, partial(_returning, value)) for (key, _), value in zip(batch, results)]


def zookeeper_version(zk: KazooClient) -> Optional[tuple[int, int]]:
    """The (major, minor) version of the ZooKeeper server the client is
    connected to, from its ``srvr`` command; None where that command is
    not allowed (4lw.commands.whitelist) or says no version."""
    try:
        text = zk.command(b"srvr")
    except Exception:  # refused or not allowed: cannot tell
        return None
    found = re.search(r"version: (\d+)\.(\d+)", text)
    return (int(found[1]), int(found[2])) if found else None


def check_multi_read(zk: KazooClient) -> None:
    """Raise ZooKeeperTooOld if the server is known to lack multiRead: it
    would close the connection on the first one."""
    version = zookeeper_version(zk)
    if version is not None and version < MULTI_READ_SINCE:
        raise ZooKeeperTooOld(f"ZooKeeper {version[0]}.{version[1]} has no multiRead; zkcoord needs "
                              f"{MULTI_READ_SINCE[0]}.{MULTI_READ_SINCE[1]} or later")
