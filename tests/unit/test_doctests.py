"""The worked examples in zkcoord's docstrings, run as tests.

Every module of the package whose source shows a ``>>>`` prompt is imported,
and each of its docstrings with examples runs as a case of its own; examples
marked ``# doctest: +SKIP`` stay skipped. Only those modules are imported: a
module without examples has nothing to run, and some act when imported
(``zkcoord.testing.loadgen`` monkey-patches the process for gevent).
"""

from __future__ import annotations

import copy
import doctest
import importlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

import zkcoord

PACKAGE_ROOT = Path(zkcoord.__file__).resolve().parent

# Docstrings known to carry worked examples: if the walk below found none of
# them, every case would pass by finding nothing.
KNOWN_EXAMPLES = {
    "zkcoord.coordinator.assignors.RangeAssignor",
    "zkcoord.coordinator.assignors.RoundRobinAssignor",
    "zkcoord.coordinator.assignors.StickyAssignor",
    "zkcoord.coordinator.assignors.choose_strategy",
    "zkcoord.coordinator.planner.plan_handoff",
}


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE_ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _prompts(path: Path) -> int:
    return sum(line.lstrip().startswith(">>>") for line in path.read_text(encoding="utf-8").splitlines())


SOURCES = {_module_name(path): path for path in sorted(PACKAGE_ROOT.rglob("*.py")) if _prompts(path)}
DOCTESTS = {
    name: [test for test in doctest.DocTestFinder().find(importlib.import_module(name)) if test.examples]
    for name in SOURCES
}
CASES = [test for tests in DOCTESTS.values() for test in tests]


def _skipped(example: doctest.Example) -> bool:
    return bool(example.options.get(doctest.SKIP))


@pytest.mark.parametrize("test", CASES, ids=[test.name for test in CASES])
def test_docstring_examples(test: doctest.DocTest):
    if all(_skipped(example) for example in test.examples):
        pytest.skip("every example here is marked +SKIP")
    fresh = copy.copy(test)  # the runner clears the globals it was given
    fresh.globs = dict(test.globs)
    report: list[str] = []
    result = doctest.DocTestRunner(verbose=False).run(fresh, out=report.append)
    assert result.failed == 0, "".join(report)


def test_the_docstrings_known_for_worked_examples_are_run():
    run = {test.name for test in CASES if not all(_skipped(example) for example in test.examples)}
    assert KNOWN_EXAMPLES <= run, f"not collected: {sorted(KNOWN_EXAMPLES - run)}"


@pytest.mark.parametrize("module", sorted(SOURCES))
def test_every_prompt_in_the_source_is_an_example_doctest_finds(module: str):
    # A '>>>' where doctest does not look (a comment, a nested function's
    # docstring) would be an example that never runs.
    found = sum(len(test.examples) for test in DOCTESTS[module])
    assert found == _prompts(SOURCES[module])


def test_importing_the_modules_with_examples_patches_nothing():
    # In a fresh interpreter, so that nothing else this test run imported counts.
    script = (
        "import importlib, sys\n"
        "from gevent import monkey\n"
        "for name in sys.argv[1:]:\n"
        "    importlib.import_module(name)\n"
        "patched = [m for m in ('socket', 'ssl', 'select', 'time', 'threading', 'os', 'subprocess',"
        " 'signal', 'queue') if monkey.is_module_patched(m)]\n"
        "print(' '.join(patched))\n"
    )
    path = os.pathsep.join(filter(None, [str(PACKAGE_ROOT.parent), os.environ.get("PYTHONPATH")]))
    done = subprocess.run(
        [sys.executable, "-c", script, *sorted(SOURCES)],
        env={**os.environ, "PYTHONPATH": path}, capture_output=True, text=True, timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == []
