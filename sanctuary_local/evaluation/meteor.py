"""Hungarian-METEOR evidence scores: the "old" AVeriTeC score (Schlichtkrull et al. 2023, §6;
FEVER-8 leaderboard scorer).

For one claim, with predicted strings P (at most the first ``MAX_PRED`` evidence items) and
gold strings G, the pairwise matrix is ``M[i, j] = METEOR(reference=G[j], hypothesis=P[i])``
(nltk ``single_meteor_score``, default α=0.9, β=3, γ=0.5, Porter stems, WordNet 3.0
synonyms, ``word_tokenize``d inputs). The utility is the value of the maximum-weight
assignment (Hungarian algorithm, ``scipy.optimize.linear_sum_assignment(maximize=True)``)
divided by ``len(G)`` — unmatched gold strings count as 0. The AVeriTeC score of a claim is
1 when its Q+A utility is strictly above the threshold and its label is right.

Exactness: the per-pair score is nltk's own ``single_meteor_score``; we only hand it cached
tokens, a cached stemmer and cached WordNet look-ups (same results, fewer repeats).
"""

from __future__ import annotations

import functools
import os
import warnings
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import numpy as np
from scipy.optimize import linear_sum_assignment

from sanctuary_local.evaluation.tokenize import word_tokenize

#: The scorer compares at most this many predicted evidence items (``max_questions``).
MAX_PRED = 10


class _CachedStemmer:
    """PorterStemmer with a memo: METEOR stems every token of every pair again."""

    def __init__(self) -> None:
        from nltk.stem.porter import PorterStemmer

        self._stemmer = PorterStemmer()
        self.stem = functools.lru_cache(maxsize=500_000)(self._stemmer.stem)


class _CachedWordNet:
    """The one WordNet method METEOR calls (``synsets(word)``), memoised per word."""

    def __init__(self, reader: Any) -> None:
        self._reader = reader
        self.synsets = functools.lru_cache(maxsize=500_000)(reader.synsets)

    def reopen_files(self) -> None:
        """Drop the inherited data-file handles so this (forked) process opens its own.

        nltk's reader seeks and reads shared file objects; two processes using the same
        descriptor interleave their seeks and get corrupt lines (the official scorer's
        "not thread safe" note). nltk reopens lazily whatever is missing here."""
        if hasattr(self._reader, "_data_file_map"):
            self._reader._data_file_map = {}
            self._reader._key_count_file = None
            self._reader._key_synset_file = None
        else:  # a future nltk: rebuild the reader in this process instead
            from sanctuary_local.evaluation.nltk_data import load_wordnet

            load_wordnet.cache_clear()
            self._reader = load_wordnet()
            self.synsets = functools.lru_cache(maxsize=500_000)(self._reader.synsets)


@functools.lru_cache(maxsize=1)
def _resources() -> tuple[_CachedStemmer, _CachedWordNet]:
    from sanctuary_local.evaluation.nltk_data import load_wordnet

    with warnings.catch_warnings():
        # No Open Multilingual Wordnet: English-only, which is all METEOR needs.
        warnings.simplefilter("ignore", UserWarning)
        reader = load_wordnet()
    return _CachedStemmer(), _CachedWordNet(reader)


def meteor(reference: str, hypothesis: str) -> float:
    """``single_meteor_score(word_tokenize(reference), word_tokenize(hypothesis))`` with defaults."""
    from nltk.translate.meteor_score import single_meteor_score

    stemmer, wordnet = _resources()
    return float(
        single_meteor_score(word_tokenize(reference), word_tokenize(hypothesis), stemmer=stemmer, wordnet=wordnet)  # type: ignore[arg-type]
    )


def pairwise_matrix(predicted: Sequence[str], gold: Sequence[str]) -> np.ndarray:
    """``M[i, j] = meteor(reference=gold[j], hypothesis=predicted[i])``, shape (len(P), len(G))."""
    scores = np.zeros((len(predicted), len(gold)), dtype=np.float64)
    for i, hyp in enumerate(predicted):
        for j, ref in enumerate(gold):
            scores[i, j] = meteor(ref, hyp)
    return scores


def hungarian_utility(scores: np.ndarray) -> float:
    """Best one-to-one assignment value divided by the number of gold strings (columns).

    An empty prediction (no rows) scores 0. Zero gold strings is the caller's error:
    the official scorer divides by zero there."""
    n_gold = scores.shape[1]
    if n_gold == 0:
        raise ValueError("no gold strings to score against")
    if scores.shape[0] == 0:
        return 0.0
    rows, cols = linear_sum_assignment(scores, maximize=True)
    return float(scores[rows, cols].sum()) / float(n_gold)


def question_strings(pairs: Sequence[tuple[str, str]], *, dedup: bool) -> list[str]:
    """Q-only strings. Gold questions are de-duplicated (a question with several answers
    appears once per answer in the CSV); predicted ones are not, as in the official scorer."""
    questions = [q for q, _ in pairs]
    if not dedup:
        return questions
    return list(dict.fromkeys(questions))


def qa_strings(pairs: Sequence[tuple[str, str]]) -> list[str]:
    """Q+A strings: ``question + " " + answer`` per pair."""
    return [f"{q} {a}" for q, a in pairs]


def claim_utilities(pred_pairs: Sequence[tuple[str, str]], gold_pairs: Sequence[tuple[str, str]]) -> tuple[float, float]:
    """(Q-only utility, Q+A utility) of one claim, exactly as the leaderboard scorer."""
    pred_pairs = list(pred_pairs)[:MAX_PRED]
    q_only = hungarian_utility(pairwise_matrix(question_strings(pred_pairs, dedup=False), question_strings(gold_pairs, dedup=True)))
    qa = hungarian_utility(pairwise_matrix(qa_strings(pred_pairs), qa_strings(gold_pairs)))
    return q_only, qa


def _worker_init() -> None:
    from sanctuary_local.procs import die_with_parent

    die_with_parent()  # a killed `eval` leaves no forked worker behind
    _resources()[1].reopen_files()


def _claim_utilities_star(args: tuple[Sequence[tuple[str, str]], Sequence[tuple[str, str]]]) -> tuple[float, float]:
    return claim_utilities(*args)


def batch_utilities(
    pred_pairs: Sequence[Sequence[tuple[str, str]]],
    gold_pairs: Sequence[Sequence[tuple[str, str]]],
    workers: int | None = None,
) -> list[tuple[float, float]]:
    """``claim_utilities`` for many claims, in input order, over ``workers`` processes.

    ``workers=None`` uses every CPU this process may run on; 1 runs in-process. The
    resources (WordNet, Punkt) load once in the parent so that forked workers share them."""
    if len(pred_pairs) != len(gold_pairs):
        raise ValueError(f"{len(pred_pairs)} predictions vs {len(gold_pairs)} gold claims")
    jobs = list(zip(pred_pairs, gold_pairs))
    usable = len(os.sched_getaffinity(0))
    # Never more processes than cores or claims: a fork-context pool starts all of them at
    # once, so '--workers 100000' forked 100 000 processes (METEOR is CPU-bound: no gain).
    n = min(workers if workers is not None else usable, usable, len(jobs))
    _resources()
    word_tokenize("warm up.")
    if n <= 1 or len(jobs) < 8:
        return [claim_utilities(p, g) for p, g in jobs]
    import multiprocessing

    ctx = multiprocessing.get_context("fork")
    # Contiguous chunks: neighbouring claims share little, but chunks keep IPC small.
    chunk = max(1, len(jobs) // (n * 4))
    with ProcessPoolExecutor(max_workers=n, mp_context=ctx, initializer=_worker_init) as pool:
        return list(pool.map(_claim_utilities_star, jobs, chunksize=chunk))


def averitec_hits(qa_utility: float, label_correct: bool, threshold: float) -> float:
    """1.0 when the claim counts for the AVeriTeC score at ``threshold`` (strictly above), else 0.0."""
    return 1.0 if (qa_utility > threshold and label_correct) else 0.0
