"""Calibrated label scores (issue 26): a small model over the verdict's label log-probs.

For claim ``i`` the verdict step yields ``s_i``, the log-probabilities of the four label
strings as the answer (``label_scoring``). Raw, they are biased: a small model puts most
mass on the first label it has seen most often. The calibrated score of label ``c`` is

    z_c = s_c / T + b_c + w · [stage-1 label = c]

— temperature scaling with a per-class bias (Guo et al. 2017, "On calibration of modern
neural networks"; the per-class bias is the "vector scaling" variant without the off-
diagonal terms) plus stage 1's provisional label as a prior with weight ``w``. The label
is ``argmax z``; ``softmax z`` are the probabilities recorded in the prediction.

The logistic kind is a multinomial logistic regression over whichever features the mode
gives: the normalised label scores (scored mode), the stance features of the passages
judged one by one (stance mode, ``stages/stance.py``), and stage 1's label one-hot:

    z_c = b_c + W_c · log_softmax(s) + U_c · stance + V_c · onehot(stage-1 label)

``fit`` minimises the multinomial negative log-likelihood (L2-regularised, so 50 claims
cannot push a bias to infinity) with scipy on a fit range that tuning never touches (dev
claims 100–149). The fitted record is a JSON data file keyed by the verdict model's
SHA-256 and the stage-3 prompt hash; ``check`` refuses a calibration made for another
model or prompt with a message naming both, it is never applied silently.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from sanctuary_local.errors import UserError
from sanctuary_local.records import LABELS, STANCE_FEATURES


@dataclass(frozen=True, slots=True)
class Calibration:
    """Fitted parameters plus the identity of what they were fitted on."""

    model_sha256: str
    """SHA-256 of the verdict model file the scores came from."""
    prompt_hash: str
    """``config_prompt_hash`` of the stage-3 templates the scores came from."""
    temperature: float = 1.0
    bias: tuple[float, ...] = (0.0, 0.0, 0.0, 0.0)
    """Per label, in ``LABELS`` order."""
    prior_weight: float = 0.0
    """Weight of stage 1's provisional label (0: not used)."""
    fit: dict[str, Any] = field(default_factory=dict)
    """How it was fitted: claims file, range, n, label counts, objective, loss."""
    score_weights: tuple[tuple[float, ...], ...] = ()
    """Logistic model only: ``W[c][k]``, label ``c``'s weight on the normalised score of label ``k``."""
    prior_weights: tuple[tuple[float, ...], ...] = ()
    """Logistic model only: ``V[c][k]``, label ``c``'s weight on "stage 1 said label ``k``"."""
    stance_weights: tuple[tuple[float, ...], ...] = ()
    """Logistic model over stances only: ``U[c][j]``, label ``c``'s weight on stance feature ``j``."""

    @property
    def kind(self) -> str:
        """``"scaling"`` (temperature, bias, prior weight) or ``"logistic"`` (full weights)."""
        return "logistic" if self.prior_weights else "scaling"

    @property
    def inputs(self) -> tuple[str, ...]:
        """What it reads: ``"labels"`` (label scores), ``"stance"``, ``"stage1"``."""
        if self.kind == "scaling":
            return ("labels", "stage1")
        return (*(("labels",) if self.score_weights else ()), *(("stance",) if self.stance_weights else ()), "stage1")

    def logits(self, logprobs: Sequence[float], provisional: str | None, stance: Sequence[float] = ()) -> list[float]:
        """``z`` for one claim (see the module docstring); ``-inf`` scores stay ``-inf``."""
        if self.kind == "logistic":
            onehot = [1.0 if lab == provisional else 0.0 for lab in LABELS]
            z = [b + _dot(vs, onehot) for b, vs in zip(self.bias, self.prior_weights, strict=True)]
            if self.score_weights:
                norm = _log_softmax(list(logprobs))
                z = [x + _dot(ws, norm) for x, ws in zip(z, self.score_weights, strict=True)]
            if self.stance_weights:
                z = [x + _dot(us, stance) for x, us in zip(z, self.stance_weights, strict=True)]
            return z
        norm = _log_softmax(list(logprobs))
        return [s / self.temperature + b + (self.prior_weight if lab == provisional else 0.0)
                for s, b, lab in zip(norm, self.bias, LABELS, strict=True)]

    def probabilities(self, logprobs: Sequence[float], provisional: str | None,
                      stance: Sequence[float] = ()) -> list[float]:
        return softmax(self.logits(logprobs, provisional, stance))

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["bias"] = list(self.bias)
        d["score_weights"] = [list(r) for r in self.score_weights]
        d["prior_weights"] = [list(r) for r in self.prior_weights]
        d["stance_weights"] = [list(r) for r in self.stance_weights]
        d["labels"] = list(LABELS)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any], where: str) -> Calibration:
        try:
            if list(d.get("labels", LABELS)) != list(LABELS):
                raise ValueError(f"labels {d.get('labels')} are not {list(LABELS)}")
            bias = tuple(float(x) for x in d["bias"])
            if len(bias) != len(LABELS):
                raise ValueError(f"bias has {len(bias)} values, not {len(LABELS)}")
            sw, pw = _matrix(d.get("score_weights")), _matrix(d.get("prior_weights"))
            uw = _matrix(d.get("stance_weights"), square=False)
            if (sw or uw) and not pw or pw and not (sw or uw):
                raise ValueError("prior_weights come with score_weights or stance_weights")
            cal = cls(str(d["model_sha256"]), str(d["prompt_hash"]), float(d["temperature"]), bias,
                      float(d.get("prior_weight", 0.0)), dict(d.get("fit") or {}), sw, pw, uw)
        except (KeyError, TypeError, ValueError) as exc:
            raise UserError(f"{where}: not a label calibration ({exc})") from None
        weights = [x for row in (*cal.score_weights, *cal.prior_weights, *cal.stance_weights) for x in row]
        if not cal.temperature > 0 or not all(math.isfinite(x) for x in (*bias, cal.prior_weight, *weights)):
            raise UserError(f"{where}: temperature must be > 0 and every weight finite")
        return cal

    def check(self, model_sha256: str, prompt_hash: str, where: str) -> None:
        """Refuse a calibration fitted for another model or prompt (UserError, one line)."""
        if self.model_sha256 != model_sha256:
            raise UserError(f"{where}: calibration was fitted for model sha256 {self.model_sha256[:16]}…, the verdict "
                            f"model is {model_sha256[:16]}…; refit it with `sanctuary-local calibrate` or set "
                            f"verdict.calibration = \"\"")
        if self.prompt_hash != prompt_hash:
            raise UserError(f"{where}: calibration was fitted for verdict prompt hash {self.prompt_hash}, the prompts "
                            f"now hash to {prompt_hash}; refit it with `sanctuary-local calibrate` or set "
                            f"verdict.calibration = \"\"")


def _matrix(raw: Any, square: bool = True) -> tuple[tuple[float, ...], ...]:
    """A 4 x 4 weight matrix (labels x labels; ``square=False``: 4 x n, n >= 1) from JSON;
    ``()`` when absent."""
    if raw is None or raw == []:
        return ()
    m = tuple(tuple(float(x) for x in row) for row in raw)
    cols = len(LABELS) if square else len(m[0]) if m else 0
    if len(m) != len(LABELS) or cols < 1 or any(len(row) != cols for row in m):
        raise ValueError(f"a weight matrix must be {len(LABELS)} x {len(LABELS) if square else 'n'}")
    return m


def _dot(w: Sequence[float], x: Sequence[float]) -> float:
    if len(w) != len(x):
        raise ValueError(f"calibration weights for {len(w)} inputs, the claim has {len(x)}")
    return sum(a * b for a, b in zip(w, x, strict=True))


def softmax(z: Sequence[float]) -> list[float]:
    m = max(z)
    e = [math.exp(x - m) if math.isfinite(x) else 0.0 for x in z]
    t = sum(e)
    return [x / t for x in e]


def _log_softmax(z: list[float]) -> list[float]:
    m = max(z)
    t = m + math.log(sum(math.exp(x - m) for x in z if math.isfinite(x)))
    return [x - t if math.isfinite(x) else -1e4 for x in z]


# ------------------------------------------------------------------- files
def calibration_path(name: str) -> Path:
    """A calibration named in config: a path, or a file in ``sanctuary_local/data/calibration``."""
    path = Path(name).expanduser()
    if path.is_file():
        return path
    packaged = Path(str(resources.files("sanctuary_local").joinpath("data", "calibration", name)))
    if packaged.is_file():
        return packaged
    raise UserError(f"verdict.calibration: '{name}' is neither a file nor a calibration shipped in "
                    f"sanctuary_local/data/calibration")


def load_calibration(name: str) -> Calibration:
    path = calibration_path(name)
    try:
        data = json.loads(path.read_text("utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise UserError(f"{path}: cannot read the calibration ({exc})") from None
    if not isinstance(data, dict):
        raise UserError(f"{path}: not a label calibration (a JSON object is expected)")
    return Calibration.from_dict(data, str(path))


def save_calibration(cal: Calibration, path: Path) -> None:
    """Written atomically (a planted symlink is replaced, never followed; the umask holds)."""
    from sanctuary_local.io.safe_io import atomic_write_bytes

    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(path, (json.dumps(cal.to_dict(), indent=2) + "\n").encode("utf-8"))


# ------------------------------------------------------------------- fitting
@dataclass(frozen=True, slots=True)
class FitExample:
    """One claim of the fit range: its raw label scores, stage-1 label and gold label."""

    logprobs: tuple[float, ...]
    """Raw label log-probabilities (scored mode); ``()`` in stance mode."""
    provisional: str | None
    gold: str
    stance: tuple[float, ...] = ()
    """Stance features (stance mode, ``stages/stance.py``); ``()`` in scored mode."""


def fit(examples: Sequence[FitExample], model_sha256: str, prompt_hash: str, *, prior: bool = True,
        temperature: bool = True, l2: float = 0.1, info: dict[str, Any] | None = None) -> Calibration:
    """Per-class bias, and with ``temperature`` the temperature, with ``prior`` the stage-1
    weight, minimising the mean negative log-likelihood of the gold labels plus
    ``l2`` × (bias² + w²)."""
    import numpy as np
    from scipy.optimize import minimize

    if not examples:
        raise UserError("calibration: no claims to fit on (are they scored and labelled?)")
    k = len(LABELS)
    s = np.array([_log_softmax(list(e.logprobs)) for e in examples])
    prov = np.array([[1.0 if e.provisional == lab else 0.0 for lab in LABELS] for e in examples])
    y = np.array([LABELS.index(e.gold) for e in examples])

    def loss(p: Any) -> float:
        inv_t, b, w = (math.exp(p[0]) if temperature else 1.0), p[1 : 1 + k], (p[1 + k] if prior else 0.0)
        z = s * inv_t + b + w * prov
        z = z - z.max(axis=1, keepdims=True)
        nll = -(z[np.arange(len(y)), y] - np.log(np.exp(z).sum(axis=1))).mean()
        return float(nll + l2 * (float((b**2).sum()) + w * w + (p[0] ** 2 if temperature else 0.0)))

    x0 = np.zeros(k + 2)
    res = minimize(loss, x0, method="L-BFGS-B")
    p = res.x
    counts = {lab: int((y == i).sum()) for i, lab in enumerate(LABELS)}
    meta = {"n": len(examples), "gold_counts": counts, "objective": "nll+l2", "l2": l2, "loss": round(float(res.fun), 4),
            "prior": prior, "temperature": temperature, **(info or {})}
    return Calibration(model_sha256, prompt_hash, round(1.0 / math.exp(p[0]), 4) if temperature else 1.0, tuple(round(float(x), 4) for x in p[1 : 1 + k]),
                       round(float(p[1 + k]), 4) if prior else 0.0, meta)


def fit_logistic(examples: Sequence[FitExample], model_sha256: str, prompt_hash: str, *, c: float = 1.0,
                 balanced: bool = False, info: dict[str, Any] | None = None) -> Calibration:
    """Multinomial logistic regression (scikit-learn, L2 with inverse strength ``c``) of
    the gold label on the normalised label scores (or the stance features) and stage 1's
    label (one-hot): the "tiny model" variant. ``balanced`` weighs each class by the
    inverse of its frequency (scikit-learn's ``class_weight="balanced"``): rarer labels
    get predicted more often, which trades accuracy for macro-F1. A label absent from the fit range gets a bias of -20 (never chosen)."""
    import numpy as np
    from sklearn.linear_model import LogisticRegression

    if not examples:
        raise UserError("calibration: no claims to fit on (are they scored and labelled?)")
    k = len(LABELS)
    labels, n_stance = bool(examples[0].logprobs), len(examples[0].stance)
    if any(bool(e.logprobs) != labels or len(e.stance) != n_stance for e in examples):
        raise UserError("calibration: the claims do not all have the same inputs (label scores, stance features)")
    x = np.array([(_log_softmax(list(e.logprobs)) if labels else []) + list(e.stance)
                  + [1.0 if e.provisional == lab else 0.0 for lab in LABELS] for e in examples])
    y = np.array([LABELS.index(e.gold) for e in examples])
    clf = LogisticRegression(C=c, max_iter=5000, class_weight="balanced" if balanced else None).fit(x, y)
    width = (k if labels else 0) + n_stance
    coef, inter = np.zeros((k, width + k)), np.full(k, -20.0)
    rows = clf.coef_ if len(clf.classes_) > 2 else np.vstack([-clf.coef_[0] / 2, clf.coef_[0] / 2])
    icp = clf.intercept_ if len(clf.classes_) > 2 else np.array([-clf.intercept_[0] / 2, clf.intercept_[0] / 2])
    for row, b, cls in zip(rows, icp, clf.classes_, strict=True):
        coef[int(cls)], inter[int(cls)] = row, b
    p = clf.predict_proba(x)
    nll = float(-np.mean(np.log(np.maximum(p[np.arange(len(y)), np.searchsorted(clf.classes_, y)], 1e-12))))
    counts = {lab: int((y == i).sum()) for i, lab in enumerate(LABELS)}
    inputs = [*(["labels"] if labels else []), *(["stance"] if n_stance else []), "stage1"]
    meta = {"n": len(examples), "gold_counts": counts, "model": "logistic", "inputs": inputs, "objective": "nll+l2", "C": c,
            "class_weight": "balanced" if balanced else "none",
            "loss": round(nll, 4), **(info or {})}

    def r(m: Any) -> tuple[tuple[float, ...], ...]:
        return tuple(tuple(round(float(v), 4) for v in row) for row in m)

    sw = r(coef[:, :k]) if labels else ()
    uw = r(coef[:, width - n_stance:width]) if n_stance else ()
    return Calibration(model_sha256, prompt_hash, 1.0, tuple(round(float(b), 4) for b in inter), 0.0, meta,
                       sw, r(coef[:, width:]), uw)


# ------------------------------------------------------------------- identity
def model_sha256(model: str, models_dir: str | Path = "models") -> str:
    """The SHA-256 a calibration is keyed by: a packaged model's manifest hash (the
    assembled file is accepted only with it), a model file's own hash, or for a model
    folder the hash its ``.sanctuary-source.json`` records (``models prep-vllm``)."""
    from sanctuary_local.ids import file_sha256
    from sanctuary_local.models import load_manifest, resolve_model

    if model.startswith("packaged:"):
        entry = load_manifest().packaged.get(model.removeprefix("packaged:"))
        if entry is not None:
            return entry.sha256
    path = resolve_model(model, models_dir)
    if path.is_file():
        return file_sha256(str(path))
    source = path / ".sanctuary-source.json"
    if source.is_file():
        try:
            sha = json.loads(source.read_text("utf-8")).get("sha256")
        except (OSError, ValueError):
            sha = None
        if isinstance(sha, str) and sha:
            return sha
    ggufs = sorted(path.glob("*.gguf"))
    if len(ggufs) == 1:
        return file_sha256(str(ggufs[0]))
    raise UserError(f"verdict.calibration: cannot tell the SHA-256 of model '{model}' ({path}): calibrations are keyed "
                    f"by it; use a model file, a packaged model or a folder made by `models prep-vllm`")


def prepared_calibration(cfg: Any, models_dir: str | Path = "models") -> Calibration | None:
    """The calibration a config's stage 3 uses, checked against its model and prompts
    (None in paper mode or without one). ``cfg`` is the ``VerdictConfig``."""
    if cfg.mode not in ("scored", "stance") or not cfg.calibration:
        return None
    from sanctuary_local.stages.verdict_hash import config_prompt_hash

    cal = load_calibration(cfg.calibration)
    where = str(calibration_path(cfg.calibration))
    cal.check(model_sha256(cfg.llm.model, models_dir), config_prompt_hash(cfg), where)
    _check_inputs(cal, cfg.mode, where)
    return cal


def _check_inputs(cal: Calibration, mode: str, where: str) -> None:
    """Refuse, before any claim, a calibration whose inputs the mode does not give (a
    stance calibration in scored mode, or one with another number of stance features)."""
    if mode == "stance":
        ok = not cal.score_weights and all(len(row) == len(STANCE_FEATURES) for row in cal.stance_weights) \
            and bool(cal.stance_weights)
    else:
        ok = not cal.stance_weights
    if not ok:
        raise UserError(f"{where}: this calibration reads {' + '.join(cal.inputs)}, not what verdict.mode = {mode!r} "
                        f"gives; refit it with `sanctuary-local calibrate` on a {mode} run")
