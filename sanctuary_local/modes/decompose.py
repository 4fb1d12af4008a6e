"""Claim decomposition with AND aggregation (issue 15, mode 3; ClaimCLAIRE §3, FactAgent).

With ``decompose.enabled``, before stage 1 the stage-1 model splits each claim into at
most ``max_components`` atomic parts (``decompose.txt``), then checks up to
``check_rounds`` times that the parts capture every assertion of the claim
(``decompose_check.txt``, LLM as judge); the assertions the check names as missing are
added as parts. Each part becomes a stage-2 query too (numbered after the stage-1
questions), so every part gets its own evidence. Stage 3 then uses
``verdict_components.txt``, which lists the parts and asks for a label per part
(``Part N: <label>``); the claim's label is their deterministic AND (``stages/verdict/parts.and_label``):

- any part Refuted → Refuted;
- every part Supported → Supported;
- else any part Conflicting Evidence/Cherrypicking → Conflicting Evidence/Cherrypicking;
- else → Not Enough Evidence.

When the verdict does not label every part it is asked once more for the parts' labels
only (``verdict_parts_label.txt``, ``components_reasked``); if a part is still unlabelled
the model's own ``Label:`` stands (``components_unparsed``). A claim of one part is verified as usual. Parsing never
raises; an unusable decomposition leaves the claim whole (``decompose_fallback``).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from typing import Any

from sanctuary_local.config.settings import DecomposeConfig
from sanctuary_local.llm.base import ChatMessage, ChatRequest, ChatResult, LLMBackend
from sanctuary_local.prompts import fixed_head, load_prompt, prompt_hash, render
from sanctuary_local.records import Claim, Decomposition, Generation, HydeResult, Query
from sanctuary_local.stages.hyde import claim_fields, is_placeholder
from sanctuary_local.stages.parsing import _FENCE, _SMART, _TRAILING_COMMA, _load
from sanctuary_local.stages.verdict.draft import Context, Draft
from sanctuary_local.stages.verdict.parts import format_components, parse_component_labels

__all__ = ["decompose_prompt_hash", "parse_check", "parse_components", "reask_parts", "run_decompose",
           "with_component_queries"]

_ITEM = re.compile(r"^\s*(?:[-*•]|\d+[.)]|part\s*\d+\s*[:.)])\s*(.{8,}?)\s*$", re.IGNORECASE)


def decompose_prompt_hash(cfg: DecomposeConfig) -> str:
    return prompt_hash(cfg.prompt, cfg.check_prompt, cfg.verdict_prompt, cfg.parts_reask)


def _json_object(text: str) -> Any:
    cleaned = _FENCE.sub("", (text or "").translate(_SMART)).strip()
    start, end = cleaned.find("{"), cleaned.rfind("}")
    if not 0 <= start < end:
        return None
    obj = _load(cleaned[start:end + 1])
    return obj if obj is not None else _load(_TRAILING_COMMA.sub(r"\1", cleaned[start:end + 1]))


def _norm(part: str) -> str:
    return " ".join(part.lower().split()).rstrip(". ")


#: Prompt fields a small model copies as a "part" (metadata, not assertions of the claim).
_METADATA = ("claim date", "claim speaker", "location iso code", "reporting source", "claim:")


def _words(text: str) -> set[str]:
    return set(re.findall(r"\w+", text.lower()))


def _near_duplicate(a: str, b: str) -> bool:
    """The same assertion restated: they share ≥ 80 % of the longer part's words (a part
    that states one piece of a longer one is kept)."""
    wa, wb = _words(a), _words(b)
    return bool(wa and wb) and len(wa & wb) >= 0.8 * max(len(wa), len(wb))


def _clean_parts(raw: Sequence[Any], claim_text: str) -> list[str]:
    out: list[str] = []
    for p in raw:
        if not isinstance(p, str):
            continue
        p = " ".join(p.split()).strip("\"' ")
        key = _norm(p)
        if (len(key) < 8 or is_placeholder(p) or key.startswith(("<part", "part ", *_METADATA))
                or any(_near_duplicate(p, q) for q in out)):
            continue
        out.append(p)
    return out


def parse_components(text: str, claim: Claim, cfg: DecomposeConfig) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The parts from a decomposition output (JSON ``{"parts": [...]}``, else a list of
    lines) and flags; never raises. No usable part: the claim itself, ``decompose_fallback``."""
    flags: list[str] = []
    try:
        obj = _json_object(text)
        raw = obj.get("parts") if isinstance(obj, dict) else obj if isinstance(obj, list) else None
        if not isinstance(raw, list):
            raw = [m.group(1) for line in (text or "").splitlines() if (m := _ITEM.match(line))]
            if raw:
                flags.append("decompose_line_fallback")
        parts = _clean_parts(raw, claim.text)
    except Exception as exc:  # noqa: BLE001 - a parser bug must not kill a wave
        parts, flags = [], [f"decompose_parse_error: {exc}"[:200]]
    if len(parts) > cfg.max_components:
        parts = parts[: cfg.max_components]
        flags.append("decompose_clamped")
    if not parts:
        return (claim.text.strip(),), (*flags, "decompose_fallback")
    return tuple(parts), tuple(flags)


def parse_check(text: str) -> tuple[bool | None, tuple[str, ...]]:
    """``(is_exhaustive, missing assertions)`` from a check output; None when unreadable."""
    obj = _json_object(text)
    if not isinstance(obj, dict):
        low = (text or "").lower()
        if re.search(r"is_exhaustive\W+true|\bexhaustive\W+(?:yes|true)", low):
            return True, ()
        if re.search(r"is_exhaustive\W+false", low):
            return False, ()
        return None, ()
    verdict = obj.get("is_exhaustive")
    if isinstance(verdict, str):
        verdict = {"true": True, "yes": True, "false": False, "no": False}.get(verdict.strip().lower())
    missing = obj.get("missing") or []
    missing = tuple(" ".join(m.split()) for m in missing if isinstance(m, str) and len(m.strip()) >= 8) if isinstance(missing, list) else ()
    return (verdict if isinstance(verdict, bool) else None), missing


def _request(claim: Claim, cfg: DecomposeConfig) -> ChatRequest:
    template = load_prompt(cfg.prompt)
    text = render(template, **claim_fields(claim), n=str(cfg.max_components))
    return ChatRequest(messages=(ChatMessage("user", text),), sampling=cfg.sampling, tag=f"decompose:{claim.index}",
                       cache_prefix=fixed_head(template))


def _check_request(claim: Claim, parts: Sequence[str], cfg: DecomposeConfig) -> ChatRequest:
    template = load_prompt(cfg.check_prompt)
    text = render(template, claim=claim.text.strip(), parts=format_components(parts))
    return ChatRequest(messages=(ChatMessage("user", text),), sampling=cfg.sampling,
                       tag=f"decompose_check:{claim.index}", cache_prefix=fixed_head(template))


def _gen(results: Sequence[ChatResult]) -> Generation:
    return Generation(sum(r.prompt_tokens for r in results), sum(r.completion_tokens for r in results),
                      sum(r.seconds for r in results), results[-1].finish_reason if results else "",
                      sum(r.cached_tokens for r in results))


def run_decompose(claims: Sequence[Claim], backend: LLMBackend, cfg: DecomposeConfig) -> list[Decomposition]:
    """Decompose a wave of claims: one ``generate`` call for the splits, then one per check round."""
    if not claims:
        return []
    first = backend.generate([_request(c, cfg) for c in claims])
    if len(first) != len(claims):
        raise RuntimeError(f"backend {backend.name} returned {len(first)} results for {len(claims)} requests")
    state: list[dict[str, Any]] = []
    for c, r in zip(claims, first, strict=True):
        if r.ok:
            parts, flags = parse_components(r.text, c, cfg)
        else:
            parts, flags = (c.text.strip(),), (f"decompose_llm_error: {r.error}"[:300], "decompose_fallback")
        state.append({"parts": list(parts), "flags": list(flags), "results": [r], "raw": r.text, "check": "",
                      "exhaustive": None, "added": []})
    for _ in range(cfg.check_rounds):
        todo = [i for i, s in enumerate(state) if s["exhaustive"] is not True and "decompose_fallback" not in s["flags"]]
        if not todo:
            break
        answers = backend.generate([_check_request(claims[i], state[i]["parts"], cfg) for i in todo])
        for i, ans in zip(todo, answers, strict=True):
            s = state[i]
            s["results"].append(ans)
            if not ans.ok:
                s["flags"].append("decompose_check_error")
                continue
            s["check"] = ans.text
            verdict, missing = parse_check(ans.text)
            s["exhaustive"] = verdict
            if verdict is None:
                s["flags"].append("decompose_check_unreadable")
            have = {_norm(p) for p in s["parts"]}
            for m in missing:
                if verdict is False and _norm(m) not in have and len(s["parts"]) < cfg.max_components:
                    s["parts"].append(m)
                    s["added"].append(m)
                    have.add(_norm(m))
    out = []
    for c, s in zip(claims, state, strict=True):
        flags = [*s["flags"]]
        if s["added"]:
            flags.append(f"decompose_added:{len(s['added'])}")
        if s["exhaustive"] is False:
            flags.append("decompose_not_exhaustive")
        flags.append(f"components:{len(s['parts'])}")
        out.append(Decomposition(c.index, tuple(s["parts"]), s["exhaustive"], tuple(s["added"]), s["raw"], s["check"],
                                 tuple(dict.fromkeys(flags)), _gen(s["results"])))
    return out


def with_component_queries(h: HydeResult, dec: Decomposition | None) -> HydeResult:
    """``h`` with the claim's parts appended as queries (stage 2's input), numbered after its
    questions; nothing for a claim of one part, and parts already asked as a question (up
    to case and spacing) are skipped."""
    if dec is None or len(dec.components) < 2:
        return h
    asked = {_norm(q.question) for q in h.queries}
    extra = [p for p in dec.components if _norm(p) not in asked]
    queries = tuple(Query(h.claim_index, len(h.queries) + i, p) for i, p in enumerate(extra))
    return HydeResult(h.claim_index, h.provisional_label, (*h.queries, *queries), h.raw_text, h.flags, h.generation)


# Stage 3's step of the mode (``modes.MODES``); the parts' labels are read by
# ``stages/verdict/parts.py``.

def reask_parts(drafts: list[Draft], ctx: Context) -> list[Draft]:
    """Step: ask once more, for the parts' labels only, every answered verdict of a
    decomposed claim that does not label every part (e.g. cut off by ``max_tokens``).
    The answer is kept in ``result.extra["parts_reask_text"]``; ``text_label`` fills the
    missing labels from it."""
    todo = [i for i, d in enumerate(drafts) if d.request is not None and d.parts is not None and d.result is not None
            and d.result.ok and None in parse_component_labels(d.result.text, len(d.parts.components))]
    if not todo:
        return drafts
    follow = []
    for i in todo:
        d = drafts[i]
        lines = "\n".join(f"Part {k}: <label of: {c}>" for k, c in enumerate(d.parts.components, start=1))
        ask = ChatMessage("user", render(load_prompt(d.parts.reask_prompt), parts=lines))
        follow.append(ChatRequest(messages=(*d.request.messages, ChatMessage("assistant", d.result.text), ask),
                                  sampling=dataclasses.replace(ctx.cfg.sampling, max_tokens=24 * len(d.parts.components) + 16),
                                  tag=f"{d.request.tag}:parts"))
    out = list(drafts)
    for i, ans in zip(todo, ctx.backend.generate(follow), strict=True):
        if ans.ok and ans.text.strip():
            d, r = out[i], out[i].result
            res = dataclasses.replace(r, completion_tokens=r.completion_tokens + ans.completion_tokens,
                                      seconds=r.seconds + ans.seconds, extra={**r.extra, "parts_reask_text": ans.text})
            out[i] = dataclasses.replace(d, result=res, seconds=d.seconds + ans.seconds)
    return out
