"""The stage-1 label-distribution benchmark (benchmarks/stage1_prior.py): its inputs and its
decision rule, without a model."""

from __future__ import annotations

import json
import math
from importlib import resources

import pytest

from sanctuary_local.calibrate import FitData
from sanctuary_local.stages.calibration import FitExample


@pytest.fixture(scope="module")
def bench(load_benchmark):
    return load_benchmark("stage1_prior")


def test_the_scored_strings_are_the_stage1_schema_labels(bench):
    schema = json.loads(resources.files("sanctuary_local.prompts").joinpath("hyde_schema.json").read_text("utf-8"))
    assert tuple(schema["properties"]["label"]["enum"]) == bench.STAGE1_LABELS


def test_the_distribution_replaces_or_joins_the_one_hot(bench):
    ex = (FitExample((-1.0, -2.0, -3.0, -4.0), "Supported", "Refuted"), FitExample((-2.0, -1.0, -3.0, -4.0), "Refuted", "Supported"))
    data = FitData(ex, (100, 101), "sha", "hash", {})
    got = bench.inputs(data, {100: [-1.0, -1.0, -1.0 - math.log(2)], 101: [0.0, -50.0, -50.0]})
    assert got["one-hot"] == list(ex)
    dist = got["distribution"]
    assert [e.provisional for e in dist] == [None, None]  # no one-hot: the distribution alone
    assert dist[0].stance == pytest.approx((0.4, 0.4, 0.2))
    assert dist[1].stance[0] == pytest.approx(1.0)
    both = got["one-hot + distribution"]
    assert [e.provisional for e in both] == ["Supported", "Refuted"] and both[0].stance == dist[0].stance


def test_the_pick_is_the_best_macro_f1_at_or_above_the_majority_accuracy(bench):
    rows = [{"row": "a, C 0.3", "accuracy": 0.50, "macro_f1": 0.40},  # best F1 but below the majority
            {"row": "b, C 3.0", "accuracy": 0.60, "macro_f1": 0.30},
            {"row": "c, C 1.0", "accuracy": 0.60, "macro_f1": 0.30},  # tie: same accuracy, smaller C wins
            {"row": "d, C 0.3, balanced", "accuracy": 0.56, "macro_f1": 0.29}]
    assert bench.pick(rows, 0.56)["row"] == "c, C 1.0"
    assert bench.pick(rows, 0.40)["row"] == "a, C 0.3"


def test_a_run_directory_without_a_run_is_one_line_and_exit_2(bench, tmp_path, capsys):
    assert bench.main(["--fit-run", str(tmp_path / "nope"), "--label", "t", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert "nope" in err and "\n" not in err
    assert not (tmp_path / "stage1_prior_t.md").exists()
