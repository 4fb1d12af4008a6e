"""Start a run from another run's finished stages (``run --reuse-from DIR``).

A what-if run (a verdict switch, a retrieval setting) recomputes only the stages whose
inputs change. The stages form a chain; each reads the configuration of its own section
on top of everything before it:

    hyde (seed, models_dir, hyde) → decompose (decompose; it runs on hyde.llm) →
    retrieval (retrieval, store) → follow-up questions and evidence (followup) →
    verdict (verdict)

Walking the chain, a stage's records are copied from the source run while every section
up to it is equal in both effective configs (``config.json``, where a key an older run
lacks is a setting added since and counts as its default; ``retrieval.workers`` is ignored: it sets how many processes, not what they compute). The first stage that
differs, and all after it, are computed as usual. Stage 1 does not read the
decomposition, so switching ``decompose.enabled`` still reuses stage 1.

Refused with a clear error: the source is ``--out`` itself, has no ``config.json`` or
``run_state.json``, used another claims file, ran under ``--budget-s`` (its records may
be degraded), or comes from another sanctuary_local version. Retrieval and later stages
are not reused when the store differs, or when ``retrieval.trust_file`` is set (the
file's contents may have changed since). A prompt whose hash the source's manifest
records (stage 1, stage 3) must hash the same today.

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

from sanctuary_local.config import Config
from sanctuary_local.errors import UserError
from sanctuary_local.io.safe_io import read_regular
from sanctuary_local.runstate import STAGE_FILES, STATE_FILE, StageFile

__all__ = ["CHAIN", "reusable_stages", "reuse_stages"]

log = logging.getLogger("sanctuary_local")

#: (stage file key, config sections the stage adds to its predecessors').
CHAIN: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("hyde", ("seed", "models_dir", "hyde")),
    ("decompose", ("decompose",)),
    ("retrieval", ("retrieval",)),
    ("followup_questions", ("followup",)),
    ("followup", ()),
    ("verdict", ("verdict",)),
)
#: Largest run_state.json / config.json of the source run read (they are a few KB).
MAX_RUN_JSON_BYTES = 16 * 1024 * 1024
#: Settings that change how a stage runs, not what it computes.
_IGNORED = {"retrieval": ("workers",)}


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


def _section(cfg: dict[str, Any], name: str) -> Any:
    value = cfg.get(name)
    if isinstance(value, dict) and name in _IGNORED:
        value = {k: v for k, v in value.items() if k not in _IGNORED[name]}
    return value


def reusable_stages(src: Path, out: Path, config: Config, fingerprint: dict[str, Any]) -> list[str]:
    """The stage-file keys whose records may be copied from ``src`` into a run with the
    effective config ``cfg`` and run fingerprint ``fingerprint``, in chain order (the
    prefix of ``CHAIN`` over which every input is equal). Raises ``UserError`` when the
    source cannot be reused at all."""
    from sanctuary_local import __version__

    cfg = config.to_dict()
    if not src.is_dir():
        raise UserError(f"--reuse-from: {src} is not a run directory")
    if src.resolve() == out.resolve():
        raise UserError(f"--reuse-from: {src} is --out itself (to resume a run, give the same command without --reuse-from)")
    # keys an older run's config.json lacks are settings added since: their defaults (off)
    old_cfg = Config.from_dict(_load_json(src / "config.json", "not a run directory, or its run never started"),
                               f"--reuse-from: {src / 'config.json'}").to_dict()
    state = _load_json(src / STATE_FILE, "not a run directory").get("fingerprint") or {}
    if state.get("claims_file") != fingerprint.get("claims_file"):
        raise UserError(f"--reuse-from: {src} was run on another claims file (its sha256 differs)")
    if state.get("budget_s") is not None:
        raise UserError(f"--reuse-from: {src} ran under --budget-s {state['budget_s']}: its records may be degraded")
    manifest_path = src / "manifest.json"
    manifest = _load_json(manifest_path, "") if manifest_path.exists() else {}
    if manifest.get("sanctuary_local", __version__) != __version__:
        raise UserError(f"--reuse-from: {src} was made by sanctuary_local {manifest['sanctuary_local']}, this is {__version__}")
    prompts = manifest.get("prompts") or {}
    stop_at = _prompt_changed(prompts, config)
    same_store = state.get("store") == fingerprint.get("store")
    keys: list[str] = []
    for key, sections in CHAIN:
        if key == stop_at:
            log.info("reuse: the %s prompt changed since %s; stages from %s on are recomputed", key, src, key)
            break
        if key == "retrieval" and not same_store:
            log.info("reuse: %s used another store; stages from retrieval on are recomputed", src)
            break
        if key == "retrieval" and (cfg.get("retrieval") or {}).get("trust_file"):
            log.info("reuse: retrieval.trust_file is set; stages from retrieval on are recomputed")
            break
        changed = [s for s in sections if _section(old_cfg, s) != _section(cfg, s)]
        if changed:
            log.info("reuse: %s changed since %s; stages from %s on are recomputed", ", ".join(changed), src, key)
            break
        keys.append(key)
    return keys


def _prompt_changed(prompts: dict[str, Any], config: Config) -> str | None:
    """The first stage whose prompt hash the source recorded and that differs today."""
    from sanctuary_local.stages.hyde import hyde_prompt_hash
    from sanctuary_local.stages.verdict import config_prompt_hash

    if "hyde" in prompts and prompts["hyde"] != hyde_prompt_hash(config.hyde.prompt):
        return "hyde"
    if "verdict" in prompts and prompts["verdict"] != config_prompt_hash(config.verdict):
        return "verdict"
    return None


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
