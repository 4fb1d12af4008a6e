"""Synthetic knowledge store with the real AVeriTeC store's shape (seeded, deterministic).

Shape per claim (scale = 1): ~1,000 documents (uniform 700–1,400), heavy-tailed
(log-normal) document lengths averaging ~700 lines, lines of 50–1,400 characters
(mean ~130), ~95 MB of JSON; ~2 % empty documents and ~5 % repeated URLs; words drawn
from a Zipf-like (s = 1.07) distribution over a 60k pseudo-word vocabulary.
``--scale`` multiplies the number of lines per document (0.1 → ~9.5 MB per claim).

Also writes ``queries.json``: per claim, 10 queries (question + hypothetical answer)
built from sentences of random documents, so BM25 and dense search have real hits.

    python tests/support/synthetic_store.py --claims 3 --scale 1.0 --out /tmp/synstore
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import orjson

SYLLABLES = [c + v for c in "bcdfghjklmnprstvwz" for v in ("a", "e", "i", "o", "u", "ai", "ou")]


def vocabulary(rng: np.random.Generator, size: int = 60_000) -> np.ndarray:
    """Distinct pseudo-words of 1–4 syllables (short ones are the frequent ones)."""
    words: dict[str, None] = {}
    while len(words) < size:
        n = int(rng.integers(1, 5))
        words.setdefault("".join(rng.choice(SYLLABLES, n)), None)
    # rank 0 = most frequent; sort by length so frequent words are short, as in English
    return np.array(sorted(words, key=len), dtype=object)


def claim_documents(rng: np.random.Generator, vocab: np.ndarray, claim: int, scale: float) -> list[dict]:
    """All documents of one claim (dicts in the store's JSON-lines format)."""
    n_docs = int(rng.integers(700, 1401))
    # log-normal with sigma 1.0: mean = exp(mu + 0.5) ≈ 700 lines at scale 1
    lines_per_doc = np.maximum(1, rng.lognormal(np.log(700 * scale) - 0.5, 1.0, n_docs)).astype(np.int64)
    lines_per_doc[rng.random(n_docs) < 0.02] = 0  # empty documents
    n_lines = int(lines_per_doc.sum())
    # words per line: log-normal, ~28 words ≈ 130 chars, clipped to the 50–1,400 char range
    words_per_line = np.clip(rng.lognormal(np.log(24), 0.55, n_lines), 11, 300).astype(np.int64)
    ranks = np.arange(1, len(vocab) + 1, dtype=np.float64)
    p = ranks**-1.07
    word_ids = rng.choice(len(vocab), size=int(words_per_line.sum()), p=p / p.sum())
    words = vocab[word_ids]
    bounds = np.concatenate(([0], np.cumsum(words_per_line)))
    lines = [" ".join(words[a:b]) + "." for a, b in zip(bounds[:-1], bounds[1:])]
    docs, start = [], 0
    for d, k in enumerate(lines_per_doc):
        url = f"https://site{int(rng.integers(0, 300))}.example/{claim}/{d}"
        if d > 10 and rng.random() < 0.05:
            url = docs[int(rng.integers(0, len(docs)))]["url"]  # repeated URL
        docs.append({"claim_id": claim, "type": "search", "query": "", "url": url, "url2text": lines[start : start + k]})
        start += k
    return docs


def claim_queries(rng: np.random.Generator, docs: list[dict], claim: int, n: int = 10) -> list[dict]:
    """Queries made of real lines of random non-empty documents (question + answer)."""
    full = [d for d in docs if d["url2text"]]
    out = []
    for q in range(n):
        doc = full[int(rng.integers(0, len(full)))]
        line = doc["url2text"][int(rng.integers(0, len(doc["url2text"])))]
        words = line.split()
        out.append({"claim_index": claim, "number": q, "question": " ".join(words[:8]) + "?", "answers": [line]})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--claims", type=int, default=2, help="number of claims (files 0.json …)")
    ap.add_argument("--scale", type=float, default=1.0, help="lines-per-document multiplier (1.0 = ~95 MB/claim)")
    ap.add_argument("--docs", type=int, default=0, help="override documents per claim (0: 700–1,400)")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(args.seed)
    vocab = vocabulary(rng)
    queries = []
    for c in range(args.claims):
        crng = np.random.default_rng([args.seed, c])
        docs = claim_documents(crng, vocab, c, args.scale)
        if args.docs:
            docs = docs[: args.docs]
        data = b"".join(orjson.dumps(d) + b"\n" for d in docs)
        (out / f"{c}.json").write_bytes(data)
        queries.append(claim_queries(crng, docs, c))
        print(f"claim {c}: {len(docs)} docs, {len(data) / 1e6:.1f} MB")
    (out / "queries.json").write_bytes(orjson.dumps(queries))


if __name__ == "__main__":
    main()
