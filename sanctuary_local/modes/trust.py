"""Per-domain trust weights from a user file (issue 15, mode 3 option; ClaimCLAIRE's
trust-modulated evidence). No ratings ship with the project: the user supplies them.

``retrieval.trust_file`` is TOML or JSON mapping a domain to a weight in [0, 1]::

    "who.int" = 1.0
    "example-tabloid.com" = 0.3
    "known-fake.example" = 0

A domain covers its subdomains (``who.int`` covers ``www.who.int`` and ``apps.who.int``;
the longest listed match wins); a domain not listed gets ``retrieval.trust_default``.
When stage 2 records a claim's evidence (and the follow-up round its new evidence), every
snippet's score is multiplied by its page's weight and each question's snippets are
re-ranked by that product; a weight-0 page's snippets are dropped (flag
``trust_dropped:N``; ``trust_reweighted:N`` counts the snippets whose weight is not 1).
Stage 3, the official evidence, the citations and the report all see that order. Spans
and texts are untouched.
"""

from __future__ import annotations

import json
import math
import tomllib
from dataclasses import replace
from functools import lru_cache
from pathlib import Path
from urllib.parse import urlsplit

from sanctuary_local.errors import UserError
from sanctuary_local.records import ClaimEvidence, EvidenceSnippet, QueryEvidence

__all__ = ["TrustWeights", "apply_trust", "domain_of", "load_trust"]


class TrustWeights:
    """Domain → weight, with subdomain matching and a default."""

    def __init__(self, weights: dict[str, float], default: float = 1.0, source: str = "") -> None:
        self.weights, self.default, self.source = weights, default, source

    def weight(self, url: str) -> float:
        host = domain_of(url)
        while host:
            if host in self.weights:
                return self.weights[host]
            host = host.partition(".")[2]
        return self.default


def domain_of(url: str) -> str:
    """The lower-cased host of ``url``, without port ('' if none); ``www.`` is kept (a listed
    parent domain covers it)."""
    try:
        host = urlsplit(url.strip() if "//" in url else "//" + url.strip()).hostname or ""
    except ValueError:
        return ""
    return host.lower().rstrip(".")


@lru_cache(maxsize=8)
def _read(path: str) -> dict[str, float]:
    p = Path(path)
    try:
        raw = p.read_bytes()
    except OSError as exc:
        raise UserError(f"{p}: cannot read the trust file: {exc.strerror or exc}") from None
    try:
        text = raw.decode("utf-8")
        data = json.loads(text) if p.suffix.lower() == ".json" else tomllib.loads(text)
    except (UnicodeDecodeError, json.JSONDecodeError, tomllib.TOMLDecodeError) as exc:
        raise UserError(f"{p}: cannot parse the trust file (TOML, or JSON for .json): {exc}") from None
    if not isinstance(data, dict):
        raise UserError(f"{p}: a trust file maps domains to weights, got {type(data).__name__}")
    out: dict[str, float] = {}
    for key, value in data.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or not 0 <= value <= 1:
            raise UserError(f"{p}: the weight of '{key}' must be a number in [0, 1], got {value!r}")
        host = domain_of(key)
        if not host:
            raise UserError(f"{p}: '{key}' is not a domain")
        out[host] = float(value)
    return out


def load_trust(path: str, default: float = 1.0) -> TrustWeights | None:
    """The weights of ``path`` (None when ``path`` is ''); a bad file is a ``UserError``
    naming it and the entry."""
    if not path:
        return None
    return TrustWeights(_read(str(Path(path).resolve())), default, path)


def apply_trust(ev: ClaimEvidence, trust: TrustWeights | None) -> ClaimEvidence:
    """``ev`` with each question's snippets re-scored (score × weight), re-ranked, and those
    of weight-0 pages dropped."""
    if trust is None:
        return ev
    dropped, changed = 0, 0
    queries = []
    for qe in ev.queries:
        kept: list[EvidenceSnippet] = []
        for sn in qe.snippets:
            w = trust.weight(sn.chunk.url)
            if w <= 0:
                dropped += 1
                continue
            changed += w != 1.0
            kept.append(replace(sn, score=sn.score * w))
        kept.sort(key=lambda s: -s.score)  # stable: equal products keep their order
        queries.append(QueryEvidence(qe.query, tuple(kept)))
    flags = list(ev.flags)
    if dropped:
        flags.append(f"trust_dropped:{dropped}")
    if changed:
        flags.append(f"trust_reweighted:{changed}")
    return replace(ev, queries=tuple(queries), flags=tuple(flags))
