"""Start a run from another run's finished stages (``run --reuse-from DIR``).

A what-if run (a verdict switch, a retrieval setting) recomputes only the stages whose
inputs change. The stages form a chain; each reads the configuration of its own section
on top of everything before it:

    hyde (seed, hyde; its model, its prompts) → decompose (decompose; it runs on
    hyde.llm) → retrieval (retrieval; the embedders, the trust file, each claim's store
    file) → follow-up questions and evidence (followup) → verdict (verdict; its model,
    its prompts)

Walking the chain, a stage's records are copied from the source run while every section
up to it is equal in both effective configs (``config.json``, where a key an older run
lacks is a setting added since and counts as its default; the execution settings of
``fingerprint.EXECUTION_SETTINGS``, such as ``retrieval.workers``, are ignored: they set
how a stage runs, not what it computes), and so are the stage's parts of the two runs'
fingerprints (``run_state.json``, ``fingerprint.py``): its models by SHA-256, its prompt
files with their settings (all four LLM stages), the trust file's content. The first
stage that differs, and all after it, are computed as usual. Stage 1 does not read the
decomposition, so switching ``decompose.enabled`` still reuses stage 1.

Refused with a clear error: the source is ``--out`` itself, has no ``config.json`` or
``run_state.json``, used another claims file, ran under ``--budget-s`` (its records may
be degraded), or was made by other code or library versions (``code``, ``libraries``;
a run made before these were recorded counts as other code). A claim whose store file
changed since the source ran (its content hash differs) gets retrieval and later stages
anew.

Per claim, a record is copied only if the claim's earlier stages in ``--out`` came from
the same source (a resumed run never mixes its own stage-1 record with the source's
stage 2). Copied lines keep their extras (seconds, budget level) and add
``reused_from``; the run's per-stage seconds therefore report what the source measured.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import orjson

from sanctuary_local.config.settings import Config
from sanctuary_local.errors import UserError
from sanctuary_local.io.safe_io import read_regular
from sanctuary_local.io.run_files import STAGE_FILES
from sanctuary_local.run.stage_files import STATE_FILE, StageFile

__all__ = ["CHAIN", "reusable_stages", "reuse_stages"]

log = logging.getLogger("sanctuary_local")

#: (stage file key, config sections the stage adds to its predecessors').
CHAIN: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("hyde", ("seed", "hyde")),
    ("decompose", ("decompose",)),
    ("retrieval", ("retrieval",)),
    ("followup_questions", ("followup",)),
    ("followup", ()),
    ("verdict", ("verdict",)),
)
#: Fingerprint parts (``fingerprint.py``) each stage adds to its predecessors'.
IDENTITY: dict[str, tuple[str, ...]] = {
    "hyde": ("models.hyde_llm", "prompts.hyde"),
    "decompose": ("prompts.decompose",),
    "retrieval": ("models.sts_embedder", "models.retrieval_embedder", "trust_file"),
    "followup_questions": ("prompts.followup",),
    "verdict": ("models.verdict_llm", "models.verdict_model", "prompts.verdict"),
}
#: Largest run_state.json / config.json of the source run read (they are a few KB).
MAX_RUN_JSON_BYTES = 16 * 1024 * 1024


def _load_json(path: Path, what: str) -> dict[str, Any]:
    try:
        data = orjson.loads(read_regular(path, MAX_RUN_JSON_BYTES, "run file"))  # no FIFO, no /dev/zero
    except FileNotFoundError:
        raise UserError(f"--reuse-from: {path} is missing: {what}") from None
    except orjson.JSONDecodeError as exc:
        raise UserError(f"--reuse-from: {path} is not valid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise UserError(f"--reuse-from: {path} must hold a JSON object")
    return data


def _part(fp: dict[str, Any], dotted: str) -> Any:
    """``prompts.hyde`` of a fingerprint (None where it lacks it)."""
    value: Any = fp
    for key in dotted.split("."):
        value = value.get(key) if isinstance(value, dict) else None
    return value


def reusable_stages(src: Path, out: Path, config: Config, fingerprint: dict[str, Any]) -> list[str]:
    """The stage-file keys whose records may be copied from ``src`` into a run with the
    effective config ``cfg`` and run fingerprint ``fingerprint``, in chain order (the
    prefix of ``CHAIN`` over which every input is equal). Raises ``UserError`` when the
    source cannot be reused at all."""
    from sanctuary_local.run.fingerprint import result_settings

    cfg = result_settings(config.to_dict())
    if not src.is_dir():
        raise UserError(f"--reuse-from: {src} is not a run directory")
    if src.resolve() == out.resolve():
        raise UserError(f"--reuse-from: {src} is --out itself (to resume a run, give the same command without --reuse-from)")
    # keys an older run's config.json lacks are settings added since: their defaults (off)
    old_cfg = result_settings(Config.from_dict(_load_json(src / "config.json", "not a run directory, or its run never started"),
                                               f"--reuse-from: {src / 'config.json'}").to_dict())
    state = _load_json(src / STATE_FILE, "not a run directory").get("fingerprint") or {}
    if state.get("claims_file") != fingerprint.get("claims_file"):
        raise UserError(f"--reuse-from: {src} was run on another claims file (its sha256 differs)")
    if state.get("budget_s") is not None:
        raise UserError(f"--reuse-from: {src} ran under --budget-s {state['budget_s']}: its records may be degraded")
    for part, what in (("code", "code"), ("libraries", "library versions")):
        if state.get(part) != fingerprint.get(part):
            theirs = state.get(part) or "not recorded (an older sanctuary_local)"
            raise UserError(f"--reuse-from: {src} was made by other {what} ({theirs}; this run: {fingerprint.get(part)}): "
                            "its records may differ from what this code computes")
    keys: list[str] = []
    for key, sections in CHAIN:
        changed = [s for s in sections if old_cfg.get(s) != cfg.get(s)]
        changed += [p for p in IDENTITY.get(key, ()) if _part(state, p) != _part(fingerprint, p)]
        if changed:
            log.info("reuse: %s changed since %s; stages from %s on are recomputed", ", ".join(changed), src, key)
            break
        keys.append(key)
    return keys


def _same_store(src: Path, fingerprint: dict[str, Any], claim_indices: list[int]) -> set[int]:
    """The claims whose store file has the same content hash in the source run as now."""
    theirs = (_load_json(src / STATE_FILE, "not a run directory").get("fingerprint") or {}).get("store")
    mine = fingerprint.get("store")
    if not isinstance(theirs, dict) or not isinstance(mine, dict):
        return set()
    return {i for i in claim_indices if theirs.get(str(i)) is not None and theirs.get(str(i)) == mine.get(str(i))}


def _applies(key: str, config: Config) -> bool:
    """Whether the run has this stage at all (the optional ones only when enabled)."""
    if key == "decompose":
        return config.decompose.enabled
    if key.startswith("followup"):
        return config.followup.enabled
    return True


def reuse_stages(src: Path, out: Path, config: Config, fingerprint: dict[str, Any],
                 stage_files: dict[str, StageFile], claim_indices: list[int]) -> dict[str, int]:
    """Copy the reusable records of ``claim_indices`` from ``src`` into ``stage_files``
    (keyed like ``STAGE_FILES``); returns how many records each stage received."""
    keys = reusable_stages(src, out, config, fingerprint)
    tag = str(src.resolve())
    copied: dict[str, int] = {}
    from_src = set(claim_indices)  # claims whose every earlier stage in --out came from src
    for key in keys:
        if key == "retrieval":
            from_src &= _same_store(src, fingerprint, claim_indices)
        if not _applies(key, config):  # equal configs: off in the source too
            continue
        path = src / STAGE_FILES[key]
        dest = stage_files[key]
        source = dest.sibling(path) if path.exists() else None
        n, still = 0, set()
        for i in sorted(from_src):
            if i in dest:
                if dest.extras.get(i, {}).get("reused_from") == tag:
                    still.add(i)
            elif source is not None and i in source:
                dest.append(i, source.records[i], {**source.extras.get(i, {}), "reused_from": tag})
                n += 1
                still.add(i)
        from_src = still
        if n:
            copied[key] = n
            log.info("reuse: %d %s records copied from %s", n, key, path)
    return copied
