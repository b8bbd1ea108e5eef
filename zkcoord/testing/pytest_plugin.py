"""The harness's pytest plugin: when a test fails, the tail of the log of
every process it ran (every :class:`ManagedProcess` alive during the test,
whoever started it) and of every ZooKeeper node of the ensembles it used is
attached to its report. Enable with ``pytest_plugins = ["zkcoord.testing.pytest_plugin"]``.
"""

from __future__ import annotations

import time

import pytest

from zkcoord.testing.process import ManagedProcess
from zkcoord.testing.zookeeper import started_ensembles

_began_key = pytest.StashKey[float]()
ENSEMBLE_FIXTURES = {"zk_ensemble", "own_ensemble"}
ZOOKEEPER_TAIL_BYTES = 4000


def pytest_runtest_setup(item):
    item.stash[_began_key] = time.time()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    if not report.failed:
        return report
    if ENSEMBLE_FIXTURES & set(item.fixturenames):
        for ensemble in (e for e in started_ensembles if e.running_nodes()):
            for node in ensemble.node_ids:
                report.sections.append((f"zookeeper {ensemble.directory.name} node {node} log (tail)",
                                        ensemble.log_tail(node, max_bytes=ZOOKEEPER_TAIL_BYTES)))
    began = item.stash.get(_began_key, 0.0)
    for process in ManagedProcess.started:
        if process.stopped_at is None or process.stopped_at >= began:
            report.sections.append((f"{process.name} ({process.directory.name}) log (tail)", process.log_tail()))
    return report
