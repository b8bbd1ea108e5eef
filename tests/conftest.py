"""Fixtures shared by every tier: a real ZooKeeper ensemble, a chroot per test.

One 3-node ensemble is started for the whole test session. Each test that
asks for ``zk_connect`` or ``zk`` gets a fresh chroot in it, so tests never see
each other's nodes. Tests that kill or partition ZooKeeper nodes ask for
``own_ensemble`` instead, which they may break as they like. When a test that
used an ensemble fails, the tail of every node's log is attached to its report.
"""

from __future__ import annotations

from typing import Iterator

import pytest
from kazoo.client import KazooClient

from tests.faults import ProxiedEnsemble
from tests.support import fresh_chroot
from zkcoord.zk.ensemble import LocalEnsemble

# tickTime 250 ms lets tests ask for sessions down to 500 ms, so expiry
# drills finish quickly; production templates use ZooKeeper's 2000 ms.
TEST_TICK_MS = 250

_ensembles_key = pytest.StashKey[list]()


def _start_ensemble(config: pytest.Config, directory, nodes: int = 3) -> LocalEnsemble:
    ensemble = LocalEnsemble.create(directory, nodes=nodes, tick_ms=TEST_TICK_MS)
    config.stash.setdefault(_ensembles_key, []).append(ensemble)
    try:
        ensemble.start(timeout=60)
    except Exception:
        ensemble.stop()
        raise
    return ensemble


@pytest.fixture(scope="session")
def zk_ensemble(request, tmp_path_factory) -> Iterator[LocalEnsemble]:
    ensemble = _start_ensemble(request.config, tmp_path_factory.mktemp("zk-shared"))
    yield ensemble
    ensemble.stop()


@pytest.fixture
def own_ensemble(request, tmp_path_factory) -> Iterator[LocalEnsemble]:
    ensemble = _start_ensemble(request.config, tmp_path_factory.mktemp("zk-own"))
    yield ensemble
    ensemble.stop()


@pytest.fixture
def _chroot(zk_ensemble: LocalEnsemble) -> Iterator[tuple[str, KazooClient]]:
    with fresh_chroot(zk_ensemble) as chroot:
        yield chroot


@pytest.fixture
def zk_connect(_chroot) -> str:
    """A connect string rooted at a fresh chroot of the shared ensemble."""
    return _chroot[0]


@pytest.fixture
def zk_proxies(zk_ensemble: LocalEnsemble, zk_connect: str) -> Iterator[ProxiedEnsemble]:
    """The shared ensemble behind one fault-injecting proxy per node, rooted
    at this test's chroot (``.connect_string``; ``drop()``, ``cut()``, ``heal()``)."""
    chroot = zk_connect[zk_connect.index("/"):]
    proxies = ProxiedEnsemble([zk_ensemble.client_port(k) for k in zk_ensemble.node_ids], chroot)
    yield proxies
    proxies.close()


@pytest.fixture
def zk(_chroot) -> KazooClient:
    """A started kazoo client on this test's chroot."""
    return _chroot[1]


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    if report.failed and {"zk_ensemble", "own_ensemble"} & set(item.fixturenames):
        for ensemble in item.config.stash.get(_ensembles_key, []):
            for node in ensemble.node_ids:
                tail = ensemble.log_tail(node, max_bytes=4000)
                report.sections.append((f"zookeeper {ensemble.directory.name} node {node} log (tail)", tail))
    return report
