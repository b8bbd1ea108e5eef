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

import os
from typing import Iterator

import pytest
from hypothesis import settings
from kazoo.client import KazooClient

from zkcoord.testing import ProxiedEnsemble, fresh_chroot, start_ensemble
from zkcoord.zk.ensemble import LocalEnsemble

pytest_plugins = ["zkcoord.testing.pytest_plugin"]  # logs of every process a failing test ran

# How far the property tests (Hypothesis) and the seeded fuzz runs search:
# one number for every test, the profile's. "suite", the default, draws 25
# examples a property, a fresh 25 at each run, which keeps the unit tier
# quick enough to run at every change; "deep" draws 1,000, for the runs that
# have the time, beside a drill or a benchmark: ZKCOORD_HYPOTHESIS=deep (or
# pytest's own --hypothesis-profile deep). No deadline: on a loaded machine
# a slow example is no failure.
settings.register_profile("suite", max_examples=25, deadline=None)
settings.register_profile("deep", max_examples=1000, deadline=None)
settings.load_profile(os.environ.get("ZKCOORD_HYPOTHESIS", "suite"))


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
