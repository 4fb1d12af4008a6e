"""Turn a GGUF model into the Hugging Face folder vLLM loads (``models prep-vllm``).

vLLM's GGUF loader is experimental and slow to start on CPU; a plain safetensors folder
is what its offline engine and ``vllm serve`` load best. This converts once, offline:

1. resolve the source (``packaged:NAME``, a manifest name, or a ``.gguf`` path) and check
   the GGUF's sha256 against the manifest's (or ``--sha256``) before anything else;
2. dequantise with transformers (``from_pretrained(dir, gguf_file=...)``, which needs the
   ``gguf`` package) to ``dtype`` and ``save_pretrained`` model + tokenizer (with the
   GGUF's chat template) into a temporary sibling of ``out``;
3. write ``SOURCE_RECORD`` (source name, GGUF sha256, dtype, versions) and rename the
   folder into place, so a half-written folder is never mistaken for a model.

A second call whose ``out`` already records the same GGUF hash and dtype does nothing.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Callable
from importlib.metadata import version
from pathlib import Path

from sanctuary_local.errors import UserError, require
from sanctuary_local.ids import file_sha256
from sanctuary_local.models.resolve import load_manifest, resolve_model, set_offline_env

SOURCE_RECORD = ".sanctuary-source.json"
"""Written into every prepared folder: what it was made from (read for idempotence)."""


def expected_sha256(source: str) -> str | None:
    """The GGUF hash the manifest pins for ``packaged:NAME`` (None if it pins none)."""
    packaged = load_manifest().packaged
    entry = packaged.get(source.removeprefix("packaged:")) if source.startswith("packaged:") else None
    return entry.sha256 if entry is not None and entry.sha256 else None


def _gguf_file(path: Path) -> Path:
    if path.is_file() and path.suffix == ".gguf":
        return path
    found = sorted(path.glob("*.gguf")) if path.is_dir() else []
    if len(found) != 1:
        raise UserError(f"prep-vllm: '{path}' is not a .gguf file or a folder holding exactly one")
    return found[0]


def read_record(out: Path) -> dict | None:
    """The source record of a prepared folder, or None when there is none."""
    try:
        return json.loads((out / SOURCE_RECORD).read_text("utf-8"))
    except (OSError, ValueError):
        return None


def prep_vllm(source: str, out: Path, sha256: str | None = None, models_dir: str | Path = "models",
              dtype: str = "bfloat16", force: bool = False, log: Callable[[str], None] = print) -> Path:
    """Convert the GGUF named by ``source`` into an HF folder at ``out``; returns ``out``.

    ``sha256``: the expected GGUF hash (default: the manifest's for a packaged model; a
    source with neither is refused). ``force``: replace an ``out`` made from another source."""
    if dtype not in ("bfloat16", "float16", "float32"):
        raise UserError(f"prep-vllm: --dtype must be bfloat16, float16 or float32, got '{dtype}'")
    want = (sha256 or expected_sha256(source) or "").lower()
    if not want:
        raise UserError(f"prep-vllm: no sha256 known for '{source}': pass --sha256 (the GGUF's published hash)")
    gguf = _gguf_file(resolve_model(source, models_dir))
    log(f"checking sha256 of {gguf} ...")
    got = file_sha256(str(gguf))
    if got != want:
        raise UserError(f"prep-vllm: {gguf} has sha256 {got}, expected {want}: refusing to convert")
    out = Path(out)
    old = read_record(out)
    if old is not None and old.get("gguf_sha256") == got and old.get("dtype") == dtype:
        log(f"{out} already holds {source} (sha256 {got[:12]}, {dtype}): nothing to do")
        return out
    if out.exists() and not force:
        what = f"made from {old.get('source')} ({old.get('dtype')})" if old else "not made by prep-vllm"
        raise UserError(f"prep-vllm: '{out}' exists and is {what}; pass --force to replace it")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    try:
        versions = convert_gguf(gguf, tmp, dtype)
        record = {"source": source, "gguf": gguf.name, "gguf_sha256": got, "dtype": dtype, **versions}
        (tmp / SOURCE_RECORD).write_text(json.dumps(record, indent=1) + "\n", "utf-8")
        tmp.chmod(0o755)  # mkdtemp makes it private
        if out.exists():
            shutil.rmtree(out)
        tmp.rename(out)  # same filesystem (a sibling): atomic
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    log(f"wrote {out} ({dtype}) from {gguf.name}")
    return out


def convert_gguf(gguf: Path, dest: Path, dtype: str) -> dict[str, str]:
    """Dequantise ``gguf`` with transformers and save model + tokenizer into ``dest``.
    Returns the versions used (recorded next to the weights)."""
    set_offline_env()
    transformers = require("transformers", "vllm-cpu", "prep-vllm")
    require("gguf", "vllm-cpu", "prep-vllm (reading GGUF files)")
    import torch

    kwargs = {"gguf_file": gguf.name}
    tok = transformers.AutoTokenizer.from_pretrained(gguf.parent, **kwargs)
    model = transformers.AutoModelForCausalLM.from_pretrained(gguf.parent, dtype=getattr(torch, dtype), **kwargs)
    # The loaded weights are already dequantised; without this save_pretrained would try to
    # re-serialise them through the GGUF quantizer (which cannot write).
    model.hf_quantizer = None
    for holder in (model, model.config):
        if getattr(holder, "quantization_config", None) is not None:
            holder.quantization_config = None
    if not getattr(tok, "chat_template", None):
        raise UserError(f"prep-vllm: {gguf.name} carries no chat template; vLLM's chat() would have none")
    model.save_pretrained(dest)
    tok.save_pretrained(dest)
    config = json.loads((dest / "config.json").read_text("utf-8"))
    if "quantization_config" in config and not config["quantization_config"]:
        del config["quantization_config"]  # a null entry reads as "quantized, method unknown" to some loaders
        (dest / "config.json").write_text(json.dumps(config, indent=2) + "\n", "utf-8")
    return {"transformers": transformers.__version__, "gguf_package": version("gguf"), "torch": torch.__version__}
