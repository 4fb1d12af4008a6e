"""Fit stage 3's label calibration from a finished scored run (``sanctuary-local calibrate``).

A run made with ``verdict.mode = "scored"`` records, per claim, the raw log-probabilities
of the four labels (``meta.label_scores.logprobs``) and stage 1's provisional label; one
made with ``verdict.mode = "stance"`` records the stance features of its passages
(``meta.stance.features``) instead of label scores. With
the gold labels of the same claims, ``fit_from_run`` fits a ``Calibration``
(``stages/calibration.py``) keyed by the run's verdict model SHA-256 and stage-3 prompt
hash, so a profile can load it and have it refused for any other model or prompt.

Fit on claims that tuning never touches (for AVeriTeC dev: 100–149) and report on others.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sanctuary_local.config import Config
from sanctuary_local.errors import UserError
from sanctuary_local.io.claims import read_claims
from sanctuary_local.records import LABELS, Prediction
from sanctuary_local.runstate import STAGE_FILES, StageFile
from sanctuary_local.stages.calibration import Calibration, FitExample, fit, fit_logistic, model_sha256
from sanctuary_local.stages.verdict_hash import config_prompt_hash


@dataclass(frozen=True, slots=True)
class FitData:
    """The scored claims of one run with their gold labels, and the run's identity."""

    examples: tuple[FitExample, ...]
    indices: tuple[int, ...]
    model_sha256: str
    prompt_hash: str
    skipped: dict[str, int]
    """Claims left out, by reason (no scores, no gold label)."""


def run_config(run_dir: Path) -> Config:
    path = run_dir / "config.json"
    try:
        data = json.loads(path.read_text("utf-8"))
    except FileNotFoundError:
        raise UserError(f"{path}: not found; give the --out directory of a finished `run`") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise UserError(f"{path}: cannot read the run's config ({exc})") from None
    return Config.from_dict(data, str(path))


def run_predictions(run_dir: Path) -> dict[int, Prediction]:
    path = run_dir / STAGE_FILES["verdict"]
    if not path.is_file():
        raise UserError(f"{path}: not found; the run has no stage-3 records yet")
    return dict(StageFile(path, Prediction.from_dict, repair=False).records)


def load_fit_data(run_dir: Path, claims_path: Path, models_dir: str | Path = "models") -> FitData:
    """The run's scored predictions paired with the gold labels of ``claims_path``."""
    cfg = run_config(run_dir)
    if cfg.verdict.mode not in ("scored", "stance"):
        raise UserError(f"{run_dir}: the run used verdict.mode = '{cfg.verdict.mode}'; a calibration is fitted on "
                        f"label scores or stances: rerun with --set verdict.mode=scored (or stance)")
    stance_mode = cfg.verdict.mode == "stance"
    claims = {c.index: c for c in read_claims(claims_path)}
    preds = run_predictions(run_dir)
    prompt = config_prompt_hash(cfg.verdict)
    examples, indices, skipped = [], [], Counter[str]()
    for idx in sorted(preds):
        p, c = preds[idx], claims.get(idx)
        if c is None or c.text != p.claim:
            raise UserError(f"{claims_path}: claim {idx} is not the claim the run checked; give the claims file "
                            f"the run used, with gold labels")
        scores = (p.meta.get("label_scores") or {}).get("logprobs")
        if p.meta.get("verdict_prompt_hash") not in (None, prompt):
            raise UserError(f"{run_dir}: claim {idx} was scored with prompt hash {p.meta.get('verdict_prompt_hash')}, "
                            f"not the run config's {prompt}")
        stance = _stance_features(p) if stance_mode else ()
        if stance_mode and stance is None:
            skipped["no stance scores"] += 1
            continue
        if not stance_mode and (not scores or len(scores) != len(LABELS)):
            skipped["no label scores"] += 1
            continue
        if c.gold_label not in LABELS:
            skipped["no gold label"] += 1
            continue
        logprobs = () if stance_mode else tuple(float(x) for x in scores)
        examples.append(FitExample(logprobs, p.provisional_label, c.gold_label, stance or ()))
        indices.append(idx)
    if not examples:
        raise UserError(f"{run_dir}: no claim has both label scores and a gold label in {claims_path}")
    return FitData(tuple(examples), tuple(indices), model_sha256(cfg.verdict.llm.model, models_dir), prompt,
                   dict(skipped))


def _stance_features(p: Prediction) -> tuple[float, ...] | None:
    """The stance features a stance-mode prediction recorded (``meta.stance.features``)."""
    from sanctuary_local.stages.stance import STANCE_FEATURES

    feats = (p.meta.get("stance") or {}).get("features")
    if not isinstance(feats, dict) or any(not isinstance(feats.get(k), (int, float)) for k in STANCE_FEATURES):
        return None
    return tuple(float(feats[k]) for k in STANCE_FEATURES)


def fit_from_run(run_dir: Path, claims_path: Path, models_dir: str | Path = "models", *, model: str = "logistic",
                 prior: bool = True, temperature: bool = True, l2: float = 0.1,
                 c: float = 1.0, balanced: bool = False) -> tuple[Calibration, FitData]:
    """``model``: ``"logistic"`` (``fit_logistic``, inverse L2 strength ``c``) or
    ``"scaling"`` (``fit``: bias, optional temperature and stage-1 prior weight, ``l2``)."""
    data = load_fit_data(run_dir, claims_path, models_dir)
    if model == "scaling" and not data.examples[0].logprobs:
        raise UserError(f"{run_dir}: a stance-mode run has no label scores to scale: use --model logistic")
    info = {"run": str(run_dir), "claims": str(claims_path), "claim_indices": _spans(data.indices)}
    if model == "logistic":
        return fit_logistic(data.examples, data.model_sha256, data.prompt_hash, c=c, balanced=balanced, info=info), data
    if model != "scaling":
        raise UserError(f"calibration model must be 'logistic' or 'scaling', got {model!r}")
    return fit(data.examples, data.model_sha256, data.prompt_hash, prior=prior, temperature=temperature, l2=l2,
               info=info), data


def predicted_labels(examples: tuple[FitExample, ...] | list[FitExample], cal: Calibration | None) -> list[str]:
    """The argmax label of each example: raw scores (``cal`` None) or calibrated."""
    from sanctuary_local.stages.calibration import softmax

    from sanctuary_local.stages.stance import stance_rule

    out = []
    for e in examples:
        if cal is not None:
            p = cal.probabilities(e.logprobs, e.provisional, e.stance)
        else:
            p = softmax(e.logprobs) if e.logprobs else stance_rule(e.stance)
        out.append(LABELS[max(range(len(LABELS)), key=lambda i: p[i])])
    return out


def accuracy_and_f1(examples: tuple[FitExample, ...], cal: Calibration | None) -> dict[str, Any]:
    """Label accuracy, macro-F1 (``evaluation.labels``) and predicted-label counts of raw
    (``cal`` None) or calibrated argmax labels on ``examples``."""
    from sanctuary_local.evaluation.labels import label_metrics

    pred = predicted_labels(examples, cal)
    m = label_metrics([e.gold for e in examples], pred)
    return {"accuracy": m.accuracy, "macro_f1": m.macro_f1, "predicted": dict(Counter(pred))}


def _spans(indices: tuple[int, ...]) -> str:
    """``100:150`` style spans of sorted claim indices (``0:3,5:6``)."""
    out, start, prev = [], None, None
    for i in indices:
        if start is None:
            start = prev = i
        elif i == prev + 1:
            prev = i
        else:
            out.append(f"{start}:{prev + 1}")
            start = prev = i
    if start is not None:
        out.append(f"{start}:{prev + 1}")
    return ",".join(out)
