"""Fixtures shared by every tier: a real ZooKeeper ensemble, a chroot per test,
and the logs of every process a failing test ran.

One 3-node ensemble is started for the whole test session. Each test that
asks for ``zk_connect`` or ``zk`` gets a fresh chroot in it, so tests never see
each other's nodes. Tests that kill or partition ZooKeeper nodes ask for
``own_ensemble`` instead, which they may break as they like. When a test
fails, the harness's plugin attaches the tail of the log of every ZooKeeper
node and of every process the test ran to its report.
"""

from __future__ import annotations

from typing import Iterator

import pytest
from kazoo.client import KazooClient

from zkcoord.testing import ProxiedEnsemble, fresh_chroot, start_ensemble
from zkcoord.zk.ensemble import LocalEnsemble

pytest_plugins = ["zkcoord.testing.pytest_plugin"]  # logs of every process a failing test ran


@pytest.fixture(scope="session")
def zk_ensemble(tmp_path_factory) -> Iterator[LocalEnsemble]:
    ensemble = start_ensemble(tmp_path_factory.mktemp("zk-shared"))
    yield ensemble
    ensemble.stop()


@pytest.fixture
def own_ensemble(tmp_path_factory) -> Iterator[LocalEnsemble]:
    ensemble = start_ensemble(tmp_path_factory.mktemp("zk-own"))
    yield ensemble
    ensemble.stop()


@pytest.fixture
def _chroot(zk_ensemble: LocalEnsemble) -> Iterator[tuple[str, KazooClient]]:
    with fresh_chroot(zk_ensemble.connect_string) as chroot:
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
