"""Three cheap probes around the stack of 2026-12-03 (full + claim + stance), on real-web evidence: none adopted.

Each is judged where the stack was chosen (``stack_selection.py``): out of fold on train's
real-web readings (1,000 claims, both baseline runs), then on the tuning claims (dev 0-49 and
150-249) and the fit claims (dev 100-149), all on the FEVER-8 baseline's real-web evidence.
Dev 50-99 is not read.

1. **A fourth member that reads meaning, not words**: the packaged MiniLM, frozen, embeds the
   claim, each question and each answer (cut at 100 words); a claim's features are the claim's
   embedding, the mean answer embedding, the mean of claim x answer, and the mean and max
   claim-answer and question-answer cosines; a balanced logistic regression over them, alone and
   in the stack at weights 0.25 / 0.33 / 0.5.
2. **Label offsets** (``verdict_model.decision``): per-label log-probability offsets on the
   stack, fitted to maximise macro-F1 on train's out-of-fold readings (a 0.1 grid over the three
   non-Refuted labels, and ``decision.fit_offsets``' coordinate ascent), or on dev 100-149 as
   ``verdict-model fit-rule`` fits them.
3. **A learned confidence**: a logistic regression on the stack's top probability, margin,
   entropy, which members agree with its label and their own probability of it, fitted on
   train's out-of-fold readings to predict a right label, against the top probability and the
   margin alone: ROC AUC of right against wrong, and the accuracy of the half of the claims
   each ranks most confident.

    python benchmarks/verdict/web_probes.py
"""

from __future__ import annotations

import argparse
import itertools
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import numpy as np  # noqa: E402

from benchmarks.common import DEFAULT_CLAIMS, results_dir, uptime, write_result  # noqa: E402
from benchmarks.verdict.real_web import FIT, TUNE  # noqa: E402
from benchmarks.verdict.stack_selection import FOLDS, MEMBERS, out_of_fold  # noqa: E402

ANSWER_WORDS = 100
EMBED_C = (0.003, 0.01, 0.03)
#: The stack probed: ``packaged:verdict-web-stack``'s members (``stack_selection.MEMBERS`` names).
STACK = ("full", "claim", "stance")
EMBED_WEIGHTS = (0.25, 0.33, 0.5)
OFFSET_GRID = np.round(np.arange(-0.6, 1.21, 0.1), 2)


def _cut(text: str) -> str:
    return " ".join(text.split()[:ANSWER_WORDS])


def embed_features(xs: list) -> tuple[np.ndarray, float]:
    """Each input's frozen-MiniLM features (see the module's docstring), and the seconds taken."""
    from sanctuary_local.config.settings import EmbedderConfig
    from sanctuary_local.retrieval.embed import Embedder

    t = time.perf_counter()
    texts = list(dict.fromkeys(s for x in xs for s in
                               [x.claim, *(t for p in x.pairs[:10] for t in (p.question, _cut(p.answer)))]))
    emb = Embedder(EmbedderConfig(device="cpu", batch_size=128))
    order = sorted(range(len(texts)), key=lambda i: len(texts[i]))  # short texts batch together
    E = np.zeros((len(texts), emb.dimension), np.float32)
    E[order] = emb.encode_documents([texts[i] for i in order])
    pos = {s: i for i, s in enumerate(texts)}

    def row(x) -> np.ndarray:  # noqa: ANN001
        c, ps = E[pos[x.claim]], x.pairs[:10]
        a = E[[pos[_cut(p.answer)] for p in ps]] if ps else np.zeros((1, E.shape[1]))
        q = E[[pos[p.question] for p in ps]] if ps else a
        ca, qa = a @ c, (a * q).sum(1)
        return np.concatenate([c, a.mean(0), (a * c).mean(0), [ca.mean(), ca.max(), qa.mean(), qa.max(), len(ps)]])

    return np.array([row(x) for x in xs]), time.perf_counter() - t


def _lr(X: np.ndarray, y: np.ndarray, c: float, balanced: bool = True):  # noqa: ANN202
    from sklearn.linear_model import LogisticRegression
    from sklearn.preprocessing import StandardScaler

    from sanctuary_local.records import LABELS
    from sanctuary_local.verdict_model.base import class_weights

    sc = StandardScaler().fit(X)
    cw = ({i: float(w) for i, w in enumerate(class_weights([LABELS[i] for i in y], "balanced"))}
          if balanced else None)
    lr = LogisticRegression(C=c, max_iter=3000, class_weight=cw).fit(sc.transform(X), y)
    return lambda Q: lr.predict_proba(sc.transform(Q))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--claims", type=Path, default=DEFAULT_CLAIMS)
    ap.add_argument("--label", default="web_probes")
    args = ap.parse_args()

    from sklearn.metrics import roc_auc_score

    from sanctuary_local.records import LABELS
    from sanctuary_local.verdict_model.decision import decide, fit_offsets
    from sanctuary_local.verdict_model.evaluate import metrics_of
    from sanctuary_local.verdict_model.stack import combine

    o = out_of_fold(args.claims, {k: MEMBERS[k] for k in STACK})
    W = np.where(o.web)[0]
    y = np.array([LABELS.index(x.label) for x in o.train])
    y_dev = np.array([LABELS.index(x.label) for x in o.dev_xs])
    gold_oof, gold_dev = [LABELS[i] for i in y[W]], [LABELS[i] for i in y_dev]
    p_oof = combine([o.oof[k][W] for k in STACK], [1, 1, 1])
    p_dev = combine([o.on_dev[k] for k in STACK], [1, 1, 1])

    def score(name: str, q_oof: np.ndarray, q_dev: np.ndarray, offsets=None) -> dict:  # noqa: ANN001
        pred = decide(q_dev, offsets)
        return {"row": name, "oof": metrics_of(gold_oof, decide(q_oof, offsets)),
                "tune": metrics_of([gold_dev[i] for i in TUNE], [pred[i] for i in TUNE]),
                "fit": metrics_of([gold_dev[i] for i in FIT], [pred[i] for i in FIT])}

    stack = score("the default stack (full + claim + stance, equal weights)", p_oof, p_dev)

    # 1. the frozen-embedding member
    F, embed_s = embed_features(o.train + o.dev_xs)
    F_tr, F_dev = F[: len(o.train)], F[len(o.train):]
    embed_rows = [stack]
    for c in EMBED_C:
        e_oof = np.zeros((len(o.train), len(LABELS)))
        for f in range(FOLDS):
            held = np.where((o.fold == f) & o.web)[0]
            e_oof[held] = _lr(F_tr[o.fold != f], y[o.fold != f], c)(F_tr[held])
        e_dev = _lr(F_tr, y, c)(F_dev)
        embed_rows.append(score(f"embedding member alone, C {c}", e_oof[W], e_dev))
        for w in EMBED_WEIGHTS:
            ws = [(1 - w) / len(STACK)] * len(STACK) + [w]
            embed_rows.append(score(f"stack + embedding member (C {c}) at weight {w}",
                                    combine([o.oof[k][W] for k in STACK] + [e_oof[W]], ws),
                                    combine([o.on_dev[k] for k in STACK] + [e_dev], ws)))

    # 2. label offsets
    free = [i for i, lab in enumerate(LABELS) if lab != "Refuted"]
    best, best_f1 = np.zeros(len(LABELS)), -1.0
    for trial in itertools.product(OFFSET_GRID, repeat=len(free)):
        b = np.zeros(len(LABELS))
        b[free] = trial
        f1 = metrics_of(gold_oof, decide(p_oof, b))["macro_f1"]
        if f1 > best_f1 + 1e-12:
            best, best_f1 = b, f1
    ascent = np.array(fit_offsets(p_oof, gold_oof))
    on_fit = np.array(fit_offsets(p_dev[FIT], [gold_dev[i] for i in FIT]))
    offset_rows = [stack] + [dict(score(f"{name}: offsets {np.round(b, 2).tolist()}", p_oof, p_dev, b), offsets=b.tolist())
                             for name, b in [("fitted on train out of fold, 0.1 grid", best),
                                             ("fitted on train out of fold, coordinate ascent", ascent),
                                             ("fitted on dev 100-149 (verdict-model fit-rule)", on_fit)]]

    # 3. a learned confidence
    def conf_features(p: np.ndarray, members: list[np.ndarray]) -> np.ndarray:
        top, s = p.argmax(1), np.sort(p, 1)
        agree = np.stack([m.argmax(1) == top for m in members], 1).astype(float)
        own = np.stack([m[np.arange(len(p)), top] for m in members], 1)
        return np.column_stack([s[:, -1], s[:, -1] - s[:, -2], -(p * np.log(p)).sum(1), agree, own, np.eye(4)[top]])

    X_oof = conf_features(p_oof, [o.oof[k][W] for k in STACK])
    X_dev = conf_features(p_dev, [o.on_dev[k] for k in STACK])
    right_oof, right_dev = (p_oof.argmax(1) == y[W]).astype(int), (p_dev.argmax(1) == y_dev).astype(int)
    c_oof = np.zeros(len(W))
    cfold = o.fold[W]
    for f in range(FOLDS):
        c_oof[cfold == f] = _lr(X_oof[cfold != f], right_oof[cfold != f], 1.0, balanced=False)(X_oof[cfold == f])[:, 1]
    c_dev = _lr(X_oof, right_oof, 1.0, balanced=False)(X_dev)[:, 1]

    def top_half(s: np.ndarray, right: np.ndarray, idx: list[int]) -> float:
        idx_a = np.array(idx)
        ranked = idx_a[np.argsort(-s[idx_a], kind="stable")]
        return float(right[ranked[: len(idx_a) // 2]].mean())

    conf_rows = []
    for name, s_oof, s_dev in [("top probability (today's rule)", X_oof[:, 0], X_dev[:, 0]),
                               ("margin over the runner-up", X_oof[:, 1], X_dev[:, 1]),
                               ("learned on train out of fold", c_oof, c_dev)]:
        everything = list(range(len(W)))
        conf_rows.append({"row": name, **{f"auc_{k}": float(roc_auc_score(r[i], s[i])) for k, r, s, i in
                                           [("oof", right_oof, s_oof, everything), ("tune", right_dev, s_dev, TUNE),
                                            ("fit", right_dev, s_dev, FIT)]},
                          "half_oof": top_half(s_oof, right_oof, everything), "half_tune": top_half(s_dev, right_dev, TUNE),
                          "half_fit": top_half(s_dev, right_dev, FIT)})
    meta = {"oof_claims": len(W) // 2, "member_seconds": o.seconds, "embed_seconds": round(embed_s, 1),
            "accuracy_all": {"oof": float(right_oof.mean()), "tune": float(right_dev[TUNE].mean()),
                             "fit": float(right_dev[FIT].mean())}, "uptime": uptime()}
    write_result(results_dir(__file__), args.label, meta,
                 {"embedding_member": embed_rows, "offsets": offset_rows, "confidence": conf_rows},
                 markdown(embed_rows, offset_rows, conf_rows, meta))


def _cells(m: dict) -> str:
    return f"{m['macro_f1']:.3f} | {m['accuracy']:.3f}"


def markdown(embed_rows: list[dict], offset_rows: list[dict], conf_rows: list[dict], meta: dict) -> str:
    head = ["| row | out of fold, train real-web: macro-F1 | acc | tuning: macro-F1 | acc | fit 100-149: macro-F1 | acc |",
            "|---|---|---|---|---|---|---|"]

    def lines(rows: list[dict]) -> list[str]:
        return [f"| {r['row']} | {_cells(r['oof'])} | {_cells(r['tune'])} | {_cells(r['fit'])} |" for r in rows]

    acc = meta["accuracy_all"]
    return "\n".join([
        "# Three probes around the default stack, on real-web evidence (none adopted)", "",
        f"Out of fold: {meta['oof_claims']} train claims, each read on both of the FEVER-8 baseline's real-web runs "
        f"by models trained without it ({FOLDS} folds grouped by claim). Tuning = dev 0-49 and 150-249; fit = dev "
        "100-149; both on the baseline's real-web dev evidence. Dev 50-99 is not read. Embedding "
        f"{meta['embed_seconds']} s; member training {meta['member_seconds']} s. Machine: `{meta['uptime']}`.", "",
        "## 1. A fourth member: frozen MiniLM embeddings of the claim, questions and answers", "",
        *head, *lines(embed_rows), "",
        "## 2. Per-label offsets on the stack's log-probabilities (labels: S, R, NEE, C)", "",
        *head, *lines(offset_rows), "",
        "## 3. Which claims to call confident: right against wrong", "",
        f"Accuracy of all claims: out of fold {acc['oof']:.3f}, tuning {acc['tune']:.3f}, fit {acc['fit']:.3f}.", "",
        "| score | ROC AUC: out of fold | tuning | fit | right among the most confident half: out of fold | tuning | fit |",
        "|---|---|---|---|---|---|---|",
        *(f"| {r['row']} | {r['auc_oof']:.3f} | {r['auc_tune']:.3f} | {r['auc_fit']:.3f} | {r['half_oof']:.3f} | "
          f"{r['half_tune']:.3f} | {r['half_fit']:.3f} |" for r in conf_rows), ""])


if __name__ == "__main__":
    main()
