"""benchmarks/verdict_offsets.py: the prior offsets and the cross-fitting that keep a fold's own
labels out of the offsets it is scored with."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from sanctuary_local.records import LABELS


def test_prior_offsets_are_log_count_ratios_to_refuted(load_benchmark, tmp_path: Path) -> None:
    bench = load_benchmark("verdict_offsets")
    path = tmp_path / "train.json"
    labels = ["Refuted"] * 8 + ["Supported"] * 4 + ["Not Enough Evidence"] * 2 + ["Conflicting Evidence/Cherrypicking"]
    path.write_text(json.dumps([{"claim": f"c{i}", "label": lab} for i, lab in enumerate(labels)]))
    got = dict(zip(LABELS, bench.prior_offsets(path)))
    assert got["Refuted"] == 0.0
    assert np.isclose(got["Supported"], np.log(0.5)) and np.isclose(got["Conflicting Evidence/Cherrypicking"], np.log(1 / 8))


def test_cross_fitted_labels_never_see_their_own_gold(load_benchmark) -> None:
    """Changing the gold labels of the claims at even positions changes no label predicted for
    them: their offsets are fitted on the odd positions only (and the reverse)."""
    bench = load_benchmark("verdict_offsets")
    rng = np.random.default_rng(0)
    probs = rng.dirichlet(np.ones(4), size=40)
    gold = [LABELS[i] for i in rng.integers(0, 4, size=40)]
    flipped = [LABELS[(LABELS.index(g) + 1) % 4] if i % 2 == 0 else g for i, g in enumerate(gold)]
    a, b = bench.cross_fitted(probs, gold), bench.cross_fitted(probs, flipped)
    assert [a[i] for i in range(0, 40, 2)] == [b[i] for i in range(0, 40, 2)]
    assert len(a) == 40 and all(lab in LABELS for lab in a)
