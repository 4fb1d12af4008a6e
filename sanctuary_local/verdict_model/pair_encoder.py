"""A per-pair cross-encoder verdict: the claim read against each question–answer pair alone.

The whole-evidence encoder (``verdict_model.encoder``) reads the claim and all ten pairs as
one text, cut to its window, so the last pairs are often not read at all and one long snippet
crowds out the rest. Here each pair is its own input, ``[CLS] claim [SEP] Q: … A: … [SEP]``
(``encoder._encode`` on a one-pair input, ``max_length`` ~128 tokens), and the encoder gives
that pair's four label probabilities; the claim's are the pairs' pooled:

- ``logmean`` (default): the geometric mean of the pairs' probabilities, renormalised
  (``softmax(mean log p)``, a product of experts as ``stack.combine``);
- ``mean``: their arithmetic mean (one confident pair counts less).

Training follows the AVeriTeC baseline (``MichSchli/AVeriTeC``, ``veracity_prediction``):
each pair's label is its claim's gold label, and the encoder is fine-tuned on the pairs as
``encoder.train_encoder`` fine-tunes it on claims (same loss, optimiser, schedule and
fp16 safetensors). ``TrainSettings.pair_sample`` caps the pairs trained on (a seeded sample,
to fit a CPU budget). A claim without pairs is read alone (an empty second segment).

A pair that occurs twice in one call (the occlusion justification reads each claim 1 + 10
times, nine pairs in common each time) is encoded once.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from sanctuary_local.records import LABELS
from sanctuary_local.verdict_model.base import Progress, TrainSettings, softmax
from sanctuary_local.verdict_model.inputs import VerdictInput

#: Pooling names → what ``pool`` does with a claim's (pairs × 4) probabilities.
POOLS = ("logmean", "mean")


def split_pairs(x: VerdictInput, max_pairs: int = 10) -> list[VerdictInput]:
    """The one-pair inputs of ``x`` (its first ``max_pairs`` pairs), each with ``x``'s label;
    the claim alone when it has no pairs."""
    pairs = x.pairs[:max_pairs]
    if not pairs:
        return [VerdictInput(x.claim, (), x.label)]
    return [VerdictInput(x.claim, (p,), x.label) for p in pairs]


def training_pairs(xs: Sequence[VerdictInput], s: TrainSettings) -> list[VerdictInput]:
    """Every claim's one-pair inputs; with ``s.pair_sample`` > 0, a sample of that many (seed
    ``s.seed``, in their original order so the sample is the same whatever the shuffling)."""
    out = [p for x in xs for p in split_pairs(x, s.max_pairs)]
    if 0 < s.pair_sample < len(out):
        keep = np.sort(np.random.default_rng(s.seed).choice(len(out), size=s.pair_sample, replace=False))
        out = [out[i] for i in keep]
    return out


def pool(probs: np.ndarray, how: str) -> np.ndarray:
    """One claim's probabilities from its pairs' (shape (pairs, 4) → (4,))."""
    if how == "logmean":
        return softmax(np.log(np.clip(probs, 1e-12, 1.0)).mean(axis=0, keepdims=True))[0]
    if how == "mean":
        return probs.mean(axis=0)
    raise ValueError(f"pair pooling must be one of {', '.join(POOLS)}, got {how!r}")


def train_pair_encoder(xs: Sequence[VerdictInput], s: TrainSettings, base_dir: Path, out: Path,
                       progress: Progress | None = None) -> dict:
    """Fine-tune the encoder in ``base_dir`` on the pairs of ``xs``; write it into ``out``."""
    from sanctuary_local.verdict_model.encoder import train_encoder

    if s.pair_pool not in POOLS:
        raise ValueError(f"pair_pool must be one of {', '.join(POOLS)}, got {s.pair_pool!r}")
    pairs = training_pairs(xs, s)
    info = train_encoder(pairs, s, base_dir, out, progress)
    return {**info, "pairs": len(pairs), "pairs_available": sum(len(split_pairs(x, s.max_pairs)) for x in xs)}


class PairEncoderModel:
    """A per-pair cross-encoder verdict model read from its directory."""

    kind = "pair-encoder"

    def __init__(self, directory: Path, sha256: str, answer_words: int, max_length: int, threads: int = 2,
                 answer_focus: bool = False, max_pairs: int = 10, pair_pool: str = "logmean") -> None:
        from sanctuary_local.verdict_model.encoder import EncoderModel

        if pair_pool not in POOLS:
            raise ValueError(f"its card's pair_pool {pair_pool!r} is not one of {', '.join(POOLS)}")
        self._encoder = EncoderModel(directory, sha256, answer_words, max_length, threads, answer_focus)
        self.directory, self.sha256, self.answer_words, self.answer_focus = directory, sha256, answer_words, answer_focus
        self.max_pairs, self.pair_pool = max_pairs, pair_pool

    def pair_proba(self, xs: Sequence[VerdictInput]) -> list[np.ndarray]:
        """Per input, its pairs' probabilities (shape (pairs, 4); one row for a claim alone).
        Each distinct (claim, question, answer) is encoded once per call."""
        index: dict[tuple, int] = {}
        unique: list[VerdictInput] = []
        rows: list[list[int]] = []
        for x in xs:
            rows.append([])
            for p in split_pairs(x, self.max_pairs):
                key = (p.claim, tuple((q.question, q.answer) for q in p.pairs))
                if key not in index:
                    index[key] = len(unique)
                    unique.append(VerdictInput(p.claim, p.pairs))
                rows[-1].append(index[key])
        probs = self._encoder.predict_proba(unique) if unique else np.zeros((0, len(LABELS)))
        return [probs[r] for r in rows]

    def predict_proba(self, xs: Sequence[VerdictInput]) -> np.ndarray:
        if not xs:
            return np.zeros((0, len(LABELS)))
        return np.array([pool(p, self.pair_pool) for p in self.pair_proba(xs)], dtype=np.float64)
