"""ZooKeeper for harnesses: fresh chroots, and ensembles tuned for fast drills."""

from __future__ import annotations

import contextlib
import shutil
import signal
import tempfile
import uuid
from pathlib import Path
from typing import Iterator

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from zkcoord.admin import zookeeper_session
from zkcoord.testing.process import exit_on_signal
from zkcoord.zk.ensemble import LocalEnsemble

# A 250 ms tick lets harnesses ask for sessions down to 500 ms (2 ticks) and up
# to 5 s (20 ticks), so expiry drills finish quickly; production templates use
# ZooKeeper's 2000 ms.
FAST_TICK_MS = 250

# Requests in flight at once, and deletes per multi-operation, when a tree is deleted.
DELETE_BATCH = 500

# Every ensemble start_ensemble brought up in this process, for log dumps.
started_ensembles: list[LocalEnsemble] = []


@contextlib.contextmanager
def fresh_chroot(connect: str, prefix: str = "t") -> Iterator[tuple]:
    """A new, empty chroot under ``connect``: yields its connect string and a
    started kazoo client on it; the chroot is deleted afterwards."""
    chroot = f"/{prefix}-{uuid.uuid4().hex[:12]}"
    with zookeeper_session(connect) as admin:
        admin.ensure_path(chroot)
        with zookeeper_session(connect + chroot) as client:
            yield connect + chroot, client
        delete_tree(admin, chroot)


def delete_tree(client: KazooClient, root: str) -> None:
    """Delete ``root`` and everything under it: listings in flight together,
    deletes in batches (kazoo's recursive delete does one round trip and one
    write per node, a minute for a test that wrote a 20,000-partition group)."""
    levels = [[root]]
    while levels[-1]:
        below = []
        for start in range(0, len(levels[-1]), DELETE_BATCH):
            batch = levels[-1][start:start + DELETE_BATCH]
            for path, request in [(p, client.get_children_async(p)) for p in batch]:
                try:
                    below += [f"{path.rstrip('/')}/{child}" for child in request.get()]
                except NoNodeError:
                    pass
        levels.append(below)
    for level in reversed(levels):  # leaves first, many nodes per multi-operation
        for start in range(0, len(level), DELETE_BATCH):
            transaction = client.transaction()
            for path in level[start:start + DELETE_BATCH]:
                transaction.delete(path)
            if any(isinstance(r, Exception) for r in transaction.commit()):
                client.delete(root, recursive=True)  # changed meanwhile: the slow way
                return


def start_ensemble(directory: Path, nodes: int = 3, tick_ms: int = FAST_TICK_MS,
                   timeout: float = 60.0, **security) -> LocalEnsemble:
    """A new local ensemble under ``directory``, started; stopped again if it
    cannot start. ``security`` are :class:`~zkcoord.zk.ensemble.EnsembleConfig`'s auth, users and tls."""
    ensemble = LocalEnsemble.create(directory, nodes=nodes, tick_ms=tick_ms, **security)
    started_ensembles.append(ensemble)
    try:
        ensemble.start(timeout=timeout)
    except BaseException:
        ensemble.stop()
        raise
    return ensemble


@contextlib.contextmanager
def scratch_ensemble(prefix: str, nodes: int = 1, tick_ms: int = 500,
                     timeout: float = 60.0) -> Iterator[tuple[Path, LocalEnsemble]]:
    """For a harness script (a benchmark): a new temporary directory named
    after ``prefix`` and an ensemble started in it, yielded as (directory,
    ensemble); on leaving, the ensemble stops and the directory is deleted.
    SIGTERM ends the script like Ctrl-C from here on, so that clean-up runs.
    The 500 ms tick is the one the published benchmark figures ran with."""
    signal.signal(signal.SIGTERM, exit_on_signal)
    work = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        ensemble = start_ensemble(work / "zk", nodes=nodes, tick_ms=tick_ms, timeout=timeout)
        try:
            yield work, ensemble
        finally:
            ensemble.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)
