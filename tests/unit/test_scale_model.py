"""bench/scale_model.py: it reproduces the costs it extrapolates from, and its simulations obey their bounds.

The measured points are bench/costs.json, written by
``python bench/bench_costs.py --json bench/costs.json`` on a real ensemble;
the model must come within its stated tolerances of every one of them
before docs/SCALE.md's predictions stand on it.
"""

import importlib.util
import sys
from dataclasses import replace
from pathlib import Path

import pytest

MODEL_PATH = Path(__file__).resolve().parents[2] / "bench" / "scale_model.py"


@pytest.fixture(scope="module")
def model():
    spec = importlib.util.spec_from_file_location("scale_model", MODEL_PATH)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_the_model_reproduces_every_measured_point(model):
    costs = model.UnitCosts.load()
    assert model.check(costs) == []


def test_a_fit_through_exact_points_is_exact(model):
    line = model.fit_line([(0, 50.0), (1, 52.0), (1000, 2050.0)])
    assert line.intercept == pytest.approx(50.0)
    assert line.slope == pytest.approx(2.0)


def test_a_fit_never_gives_a_negative_cost(model):
    falling = model.fit_line([(1, 10.0), (100, 5.0)])
    assert falling.slope == 0 and falling.intercept > 0
    through_zero = model.fit_line([(10, 1.0), (100, 30.0)])
    assert through_zero.intercept >= 0 and through_zero.slope > 0


def test_one_writer_waits_for_each_multi_and_many_meet_the_bottleneck(model):
    alone = model.closed_loop(1, writer_s=0.001, zk_s=0.002, zk_units=1, wait_s=0.003)
    assert alone == pytest.approx(1 / 0.006, rel=0.01)
    crowd = model.closed_loop(64, writer_s=0.001, zk_s=0.002, zk_units=1, wait_s=0.003)
    assert crowd == pytest.approx(1 / 0.002, rel=0.01)  # the ensemble's CPU binds
    wide = model.closed_loop(64, writer_s=0.001, zk_s=0.002, zk_units=4, wait_s=0.003)
    assert wide == pytest.approx(1 / 0.001, rel=0.01)  # then the writer's one core


def test_flush_bursts_keep_up_below_the_leaders_capacity_and_not_above(model):
    one_ms = model.Line(0.001, 0.0)
    light = model.flush_bursts(4, 100, 10, 1.0, one_ms, 1.0, 0.002)  # 400 ms of work a second
    assert light.keeps_up and light.offered_load == pytest.approx(0.4)
    heavy = model.flush_bursts(4, 400, 10, 1.0, one_ms, 1.0, 0.002)  # 1.6 s of work a second
    assert heavy.offered_load == pytest.approx(1.6) and not heavy.keeps_up


def test_a_longer_commit_interval_needs_no_more_ensembles_and_the_report_is_deterministic(model):
    costs = model.UnitCosts.load()
    base = model.Scenario()
    fast, slow = (model.limits(costs, replace(base, commit_interval_s=i), simulate=False) for i in (1.0, 60.0))
    assert fast.ensembles >= slow.ensembles
    assert fast.offsets_per_s == pytest.approx(60 * slow.offsets_per_s)
    scenarios = model.scenarios_at([1.0, 5.0, 60.0])
    assert model.report(costs, scenarios) == model.report(costs, scenarios)
